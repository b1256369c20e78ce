"""SKConv2d against nn.Conv2d and against Panther's sketched convolution, on the CPU (and on a
CUDA device when there is one), forward and forward+backward, float32, ratios measured in
one run on the same data (paired blocks, bench/conftest.py).

    pytest bench/test_bench_conv.py --benchmark-only

Panther's algorithm is its C++ forward transcribed operation for operation (``conv2d`` with
S1s, a ``bmm`` with U1sᵀ expanded to the batch, division, bias, ``contiguous``); its backward
is torch's autograd through those operations, as in Panther (its autograd.Function defines
no backward, the module calls the forward directly).
"""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from sketchcore.torch import SKConv2d  # noqa: E402

# (batch, in_channels, out_channels, height = width, T, k): ResNet-like 3×3 layers, 2·T·k = 32
SHAPES = [(16, 128, 128, 28, 1, 16), (32, 64, 64, 32, 2, 8)]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def panther_conv(x, S1s, U1s, bias):
    B = x.shape[0]
    L, K, D1 = U1s.shape
    temp = F.conv2d(x, S1s, padding=1)
    h, w = temp.shape[-2:]
    out = torch.bmm(U1s.view(L * K, D1).t().expand(B, D1, L * K), temp.view(B, L * K, h * w))
    return (out.view(B, D1, h, w) / L + bias.view(1, D1, 1, 1)).contiguous()


def group_name(shape):
    n, c, o, hw, t, k = shape
    return f"SKConv2d {n}x{c}x{hw}x{hw}->{o} 3x3 T{t}xk{k}"


@pytest.fixture(scope="module", params=[(s, d) for s in SHAPES for d in DEVICES],
                ids=lambda p: f"{group_name(p[0])} {p[1]}")
def layers(request):
    (n, c, o, hw, t, k), device = request.param
    torch.manual_seed(0)
    dense = nn.Conv2d(c, o, 3, padding=1, device=device)
    ours = SKConv2d.fromTorch(dense, t, k)
    x = torch.randn(n, c, hw, hw, device=device, requires_grad=True)
    S1s = ours.S1s.detach().clone().requires_grad_()
    bias = ours.bias.detach().clone().requires_grad_()
    with torch.no_grad():
        expected = panther_conv(x, S1s, ours.U1s, bias)
        # On CUDA the 1×1 stage is a cuDNN convolution, TF32 under torch's default
        # (torch.backends.cudnn.allow_tf32), where Panther's bmm is float32.
        tolerance = 1e-3 if device == "cuda" and torch.backends.cudnn.allow_tf32 else 1e-5
        assert ((ours(x) - expected).norm() / expected.norm()).item() < tolerance
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return f"{group_name(request.param[0])} {device}", ours, dense, x, S1s, bias, sync


def _timed(fn, sync):
    def run():
        fn()
        sync()
    return run


def test_forward_vs_panthers_algorithm(layers, paired):
    group, ours, dense, x, S1s, bias, sync = layers
    with torch.no_grad():
        paired(group, "SKConv2d fwd", "Panther conv fwd", _timed(lambda: ours(x), sync),
               _timed(lambda: panther_conv(x, S1s, ours.U1s, bias), sync), pairs=7, calls=3)


def test_forward_backward_vs_panthers_algorithm(layers, paired):
    """Target: not slower than Panther's algorithm (ratio ≥ 1)."""
    group, ours, dense, x, S1s, bias, sync = layers
    paired(group, "SKConv2d fwd+bwd", "Panther conv fwd+bwd", _timed(lambda: ours(x).sum().backward(), sync),
           _timed(lambda: panther_conv(x, S1s, ours.U1s, bias).sum().backward(), sync), pairs=7, calls=3,
           target=1.0)


def test_forward_vs_dense_conv2d(layers, paired):
    group, ours, dense, x, S1s, bias, sync = layers
    with torch.no_grad():
        paired(group, "SKConv2d fwd", "nn.Conv2d fwd", _timed(lambda: ours(x), sync), _timed(lambda: dense(x), sync),
               pairs=7, calls=3)


def test_forward_backward_vs_dense_conv2d(layers, paired):
    group, ours, dense, x, S1s, bias, sync = layers
    paired(group, "SKConv2d fwd+bwd", "nn.Conv2d fwd+bwd", _timed(lambda: ours(x).sum().backward(), sync),
           _timed(lambda: dense(x).sum().backward(), sync), pairs=7, calls=3)
