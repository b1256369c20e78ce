"""A/B of SKLinear's factor layout, forward under no_grad, paired blocks in one process:
contiguous (2T, in, k) blocks (the core packs them per call) against the earlier (in, 2T, k)
layout the core read in place (S1s/U2s non-contiguous).

    python bench/sklinear_layout_ab.py
"""
import time, statistics, warnings, copy, torch
import sketchcore.torch as sct
import sketchcore.torch.ops._ops
warnings.simplefilter("ignore")
torch.manual_seed(0)
def old_layout(layer):
    T = layer.num_terms
    with torch.no_grad():
        S = torch.cat([layer.S1s, layer.U2s]).transpose(0, 1).contiguous().transpose(0, 1)
    layer.S1s.data, layer._buffers["U2s"] = S[:T], S[T:]
for (b, d_in, d_out, T, k) in [(4096, 4096, 4096, 1, 128), (1024, 2048, 2048, 4, 32), (256, 1024, 1024, 8, 16)]:
    new = sct.SKLinear(d_in, d_out, T, k); old = copy.deepcopy(new); old._pack_factors(); old_layout(old)
    assert sct.ops._ops._joined_in_place(old.U1s, old.S2s) and sct.ops._ops._joined_in_place(old.S1s, old.U2s)
    assert not old.S1s.is_contiguous() and new.S1s.is_contiguous()
    x = torch.randn(b, d_in)
    ratios = []
    with torch.no_grad():
        torch.testing.assert_close(new(x), old(x))
        for _ in range(3): new(x); old(x)
        for i in range(21):
            pair = []
            for layer in ((new, old) if i % 2 else (old, new)):
                t0 = time.perf_counter()
                for _ in range(3): layer(x)
                pair.append((layer is new, time.perf_counter() - t0))
            tn = next(t for is_new, t in pair if is_new); to = next(t for is_new, t in pair if not is_new)
            ratios.append(to / tn)
    ratios.sort()
    print(f"{b}x{d_in}->{d_out} T{T}k{k}: old/new forward time ratio median {statistics.median(ratios):.3f} (IQR {ratios[5]:.3f}-{ratios[15]:.3f}, 21 paired blocks of 3 calls)")
