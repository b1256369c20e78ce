"""The CUDA backend's padded inner width (issue 38): a rank k whose rows are not a multiple of
16 bytes (k = 13 in bf16, 5 in float32) runs with each term padded to the next such width. What
the caller sees must not change: forward, the intermediate it writes (T·k wide, in the caller's
layout), and every gradient — including Panther-style term ranges and a strided intermediate —
against float64 on the CPU; and the padded call equals the same call on explicitly zero-padded
factors. Padding is the gated path cuda_padded_inner_width (not yet passed on a GPU): every test
runs with the gate closed (the unpadded cuBLASLt call, the default) and open (padded), and
test_the_gate_decides_which_path_runs checks, by the pool's peak, that the gate chose the path.
Needs a CUDA device (skipped without one)."""
import numpy as np
import pytest

import sketchcore

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}
# (dtype, k): k·sizeof not a multiple of 16 bytes, so each runs padded.
PADDED = [(torch.bfloat16, 13), (torch.float16, 15), (torch.float32, 5), (torch.bfloat16, 1)]


@pytest.fixture(autouse=True, params=[False, True], ids=["gate_closed", "gate_open"])
def gate(request):
    """Both sides of the gate: closed (the unpadded call) and open (padded inner widths)."""
    with sketchcore.gated_path("cuda_padded_inner_width", request.param):
        yield request.param


def relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    return np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-300)


def as64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def draw(gen, dtype, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to("cuda", dtype)


@pytest.mark.parametrize(("dtype", "k"), PADDED)
@pytest.mark.parametrize("terms", [None, 3])
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_padded_forward_intermediate_and_backward_match_float64(dtype, k, terms, activation):
    gen = torch.Generator().manual_seed(11)
    d_in, d_out, rows = 70, 56, 33
    T = terms or 1
    S = draw(gen, dtype, *((terms,) if terms else ()), d_in, k) / np.sqrt(d_in)
    U = draw(gen, dtype, *((terms,) if terms else ()), k, d_out) / np.sqrt(k)
    x, b = draw(gen, dtype, rows, d_in), draw(gen, dtype, d_out)
    # A strided intermediate (row stride T·k + 3): the copy out of the padded scratch honours it.
    z = torch.empty(rows, T * k + 3, device="cuda", dtype=dtype)[:, : T * k]
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation=activation, scale=0.5, intermediate=z)
    z64 = np.empty((rows, T * k))
    y64 = sketchcore.sketched_matmul(as64(x), as64(S), as64(U), bias=as64(b), activation=activation, scale=0.5,
                                     intermediate=z64)
    assert relative_error(as64(y), y64) <= TOLERANCE[dtype]
    assert relative_error(as64(z), z64) <= TOLERANCE[dtype]
    w = draw(gen, dtype, rows, d_out)
    grads = sketchcore.sketched_matmul_backward(w, x, S, U, z, bias=b, activation=activation, scale=0.5)
    want = sketchcore.sketched_matmul_backward(as64(w), as64(x), as64(S), as64(U), z64, bias=as64(b),
                                               activation=activation, scale=0.5)
    for got, expected in zip(grads, want):
        assert got.shape == expected.shape and relative_error(as64(got), expected) <= TOLERANCE[dtype]


@pytest.mark.parametrize(("dtype", "k"), PADDED[:3])
def test_padded_term_ranges_are_the_slices_of_the_whole(dtype, k):
    """Panther's SKLinear asks for dS of the first half of the terms and dU of the second: the
    padded column offsets (t·kp) must land on the right terms."""
    gen = torch.Generator().manual_seed(12)
    S, U = draw(gen, dtype, 4, 48, k) / 7, draw(gen, dtype, 4, k, 40) / 4
    x, w = draw(gen, dtype, 25, 48), draw(gen, dtype, 25, 40)
    z = torch.empty(25, 4 * k, device="cuda", dtype=dtype)
    sketchcore.sketched_matmul(x, S, U, intermediate=z)
    full = sketchcore.sketched_matmul_backward(w, x, S, U, z)
    part = sketchcore.sketched_matmul_backward(w, x, S, U, z, needs=("S", "U"), S_terms=(0, 2), U_terms=(1, 4))
    assert relative_error(as64(part[1]), as64(full[1][0:2])) <= TOLERANCE[dtype]
    assert relative_error(as64(part[2]), as64(full[2][1:4])) <= TOLERANCE[dtype]


@pytest.mark.parametrize(("dtype", "k"), PADDED[:3])
def test_padded_call_equals_the_call_on_zero_padded_factors(dtype, k):
    gen = torch.Generator().manual_seed(13)
    kp = -(-k * torch.finfo(dtype).bits // 128) * 128 // torch.finfo(dtype).bits
    S, U = draw(gen, dtype, 2, 64, k) / 8, draw(gen, dtype, 2, k, 48) / 4
    Sp = torch.zeros(2, 64, kp, device="cuda", dtype=dtype)
    Up = torch.zeros(2, kp, 48, device="cuda", dtype=dtype)
    Sp[:, :, :k], Up[:, :k, :] = S, U
    x = draw(gen, dtype, 40, 64)
    y = sketchcore.sketched_matmul(x, S, U, activation="relu")
    y_padded = sketchcore.sketched_matmul(x, Sp, Up, activation="relu")
    assert relative_error(as64(y), as64(y_padded)) <= TOLERANCE[dtype]


def test_a_lowrank_layer_of_odd_rank_trains_like_its_float64_twin():
    sct = pytest.importorskip("sketchcore.torch")
    torch.manual_seed(0)
    layer = sct.LowRankLinear(96, 80, rank=37, dtype=torch.bfloat16, device="cuda")
    twin = sct.LowRankLinear(96, 80, rank=37, dtype=torch.float64)
    twin.load_state_dict({key: value.double().cpu() for key, value in layer.state_dict().items()})
    x = torch.randn(64, 96, dtype=torch.float64)
    y = layer(x.to("cuda", torch.bfloat16))
    y.float().square().mean().backward()
    y64 = twin(x)
    y64.square().mean().backward()
    assert relative_error(as64(y), as64(y64)) <= TOLERANCE[torch.bfloat16]
    for name in ("S", "U", "bias"):
        assert relative_error(as64(getattr(layer, name).grad), as64(getattr(twin, name).grad)) <= 5e-2


class RecordingAllocator:
    """Serves sketchcore's temporaries from torch's caching allocator and records their sizes."""

    def __init__(self):
        self.sizes = []

    def allocate(self, nbytes, device, stream):
        self.sizes.append(nbytes)
        return torch.cuda.caching_allocator_alloc(nbytes, device, stream)

    def deallocate(self, address, nbytes, device, stream):
        torch.cuda.caching_allocator_delete(address)


@pytest.mark.parametrize(("dtype", "k"), PADDED)
def test_the_gate_decides_which_path_runs(gate, dtype, k):
    """With 2-D S and U the unpadded call reads them in place; the padded one first packs
    kp-wide copies of both (d_in·kp and kp·d_out elements): the temporaries show which path ran."""
    gen = torch.Generator().manual_seed(14)
    d_in, d_out, rows = 96, 80, 8
    S, U, x = draw(gen, dtype, d_in, k), draw(gen, dtype, k, d_out), draw(gen, dtype, rows, d_in)
    kp = sketchcore.cuda_inner_width(k, str(dtype).removeprefix("torch."))
    assert (kp > k) == gate  # every PADDED case pads when, and only when, the gate is open
    element = torch.finfo(dtype).bits // 8
    packed = {d_in * kp * element, kp * d_out * element}
    recorder = RecordingAllocator()
    sketchcore.memory.set_device_allocator(recorder)
    try:
        y = sketchcore.sketched_matmul(x, S, U)
        torch.cuda.synchronize()
    finally:
        sketchcore.memory.set_device_allocator("sketchcore")
    assert relative_error(as64(y), (as64(x) @ as64(S)) @ as64(U)) <= TOLERANCE[dtype]
    assert packed <= set(recorder.sizes) if gate else not packed & set(recorder.sizes), recorder.sizes
