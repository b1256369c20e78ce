"""SKConv2d and RandMultiHeadAttention on a CUDA device: forward and gradients against the same
layer in float64 on the CPU (itself checked against Panther's formulas in test_skconv2d.py and
test_performer.py), reduced precision under autocast, channels-last, exact causality.

Every test here needs a CUDA device and is skipped without one.
"""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import RandMultiHeadAttention, SKConv2d, make_performer  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def relative_error(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return torch.linalg.norm(a - b).item() / max(torch.linalg.norm(b).item(), 1e-300)


@pytest.fixture(autouse=True)
def no_tf32():
    """cuDNN's and cuBLAS's float32 use TF32 by default in torch; the float32 tolerance is for
    float32 arithmetic."""
    with torch.backends.cudnn.flags(allow_tf32=False):
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        yield
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("channels_last", [False, True])
def test_skconv2d_forward_and_gradients_match_float64(channels_last):
    torch.manual_seed(0)
    conv = nn.Conv2d(12, 20, 3, padding=1, dtype=torch.float64)
    reference = SKConv2d.fromTorch(conv, 2, 3)
    layer = copy.deepcopy(reference).float().cuda()
    x64 = torch.randn(3, 12, 15, 13, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().cuda().requires_grad_()
    if channels_last:
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    y, y64 = layer(x), reference(x64)
    assert y.is_cuda and y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert relative_error(y, y64) <= TOLERANCE[torch.float32]
    w = torch.randn(y64.shape, dtype=torch.float64)
    (y * w.float().cuda()).sum().backward()
    (y64 * w).sum().backward()
    for got, want in ((x.grad, x64.grad), (layer.S1s.grad, reference.S1s.grad), (layer.bias.grad, reference.bias.grad)):
        assert relative_error(got, want) <= TOLERANCE[torch.float32]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_skconv2d_under_autocast(dtype):
    torch.manual_seed(1)
    layer64 = SKConv2d(8, 16, num_terms=1, low_rank=4, dtype=torch.float64)
    layer = copy.deepcopy(layer64).float().cuda()
    x = torch.randn(2, 8, 10, 10, dtype=torch.float64)
    with torch.autocast("cuda", dtype=dtype):
        y = layer(x.float().cuda())
    assert y.dtype == dtype
    assert relative_error(y, layer64(x)) <= TOLERANCE[dtype]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel_fn", ["softmax", "relu"])
def test_performer_forward_and_gradients_match_float64(kernel_fn, causal):
    torch.manual_seed(2)
    reference = RandMultiHeadAttention(32, 4, 24, kernel_fn=kernel_fn, iscausal=causal, dtype=torch.float64)
    layer = copy.deepcopy(reference).float().cuda()
    x64 = torch.randn(2, 300, 32, dtype=torch.float64, requires_grad=True)
    x = x64.detach().float().cuda().requires_grad_()
    y, y64 = layer(x, x, x)[0], reference(x64, x64, x64)[0]
    assert y.is_cuda and relative_error(y, y64) <= 1e-4  # exp of float32 exponents of size ~10
    y.square().sum().backward()
    y64.square().sum().backward()
    assert relative_error(x.grad, x64.grad) <= 1e-4
    assert relative_error(layer.Wq.grad, reference.Wq.grad) <= 1e-4


def test_performer_is_exactly_causal_on_cuda():
    torch.manual_seed(3)
    layer = make_performer(nn.MultiheadAttention(64, 4), 64, "softmax", True).cuda()
    x = torch.randn(2, 400, 64, device="cuda")
    later = x.clone()
    later[:, 201:] = torch.randn_like(later[:, 201:]) * 50
    assert torch.equal(layer(x, x, x)[0][:, :201], layer(later, later, later)[0][:, :201])
