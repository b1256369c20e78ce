"""Performer attention (RandMultiHeadAttention) against exact attention (nn.MultiheadAttention,
need_weights=False, which runs torch's scaled_dot_product_attention) at sequence lengths 1k-16k:
time as paired ratios in one run, and peak memory per call, float32, batch 1, embed 256, 4 heads
(head dim 64), 256 random features, on the CPU (and on a CUDA device when there is one).

    pytest bench/test_bench_attention.py --benchmark-only

Peak memory: on CUDA torch's max_memory_allocated around one call; on the CPU the process's
peak resident set (VmHWM, reset through /proc/self/clear_refs) around one call, minus the
resident set before it.
"""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import make_performer  # noqa: E402
from meters import peak_bytes  # noqa: E402  (bench/ is on sys.path: conftest.py)

EMBED, HEADS, FEATURES = 256, 4, 256
CASES = [(length, False) for length in (1024, 2048, 4096, 8192, 16384)] + [(4096, True), (16384, True)]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=[(c, d) for c in CASES for d in DEVICES],
                ids=lambda p: f"L{p[0][0]}{' causal' if p[0][1] else ''} {p[1]}")
def layers(request):
    (length, causal), device = request.param
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(EMBED, HEADS, batch_first=True, device=device).eval()
    performer = make_performer(mha, FEATURES, "softmax", causal).eval()
    x = torch.randn(1, length, EMBED, device=device)
    mask = nn.Transformer.generate_square_subsequent_mask(length, device=device) if causal else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def exact():
        with torch.no_grad():
            mha(x, x, x, attn_mask=mask, is_causal=causal, need_weights=False)
        sync()

    def ours():
        with torch.no_grad():
            performer(x, x, x)
        sync()
    group = f"attention L={length}{' causal' if causal else ''} E{EMBED} H{HEADS} m{FEATURES} {device}"
    return group, exact, ours, device


def test_time_and_peak_memory_vs_exact_attention(layers, paired):
    from conftest import INFO
    group, exact, ours, device = layers
    exact_bytes, ours_bytes = peak_bytes(exact, device), peak_bytes(ours, device)
    INFO[f"{group} peak memory"] = (f"exact {exact_bytes / 2**20:.1f} MiB, Performer {ours_bytes / 2**20:.1f} MiB "
                                    f"(exact / Performer {exact_bytes / max(ours_bytes, 1):.2f})")
    paired(group, "Performer fwd", "exact attention fwd", ours, exact, pairs=5, calls=1)
