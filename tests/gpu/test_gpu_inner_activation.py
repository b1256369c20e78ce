"""The inner activation on the CUDA backend (src/cuda/inner_activation.cu and its use in
cuda_backend.cu): forward, the saved pre-activation and the backward against the float64
references of test_inner_activation, for every activation, float32/float64/16-bit, T > 1, bias
and odd ranks (which the 16-bit path pads). Skipped without a CUDA device: at the time of writing
this path was compiled by nvcc but has never run on a GPU (it belongs behind the unverified-CUDA
gate until these pass on one)."""
import numpy as np
import pytest

import sketchcore
from _reference import ACTIVATIONS, relative_error
from test_inner_activation import forward_reference, gradient_reference

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}


@pytest.fixture(autouse=True)
def opened():
    """These tests verify the gated path cuda_inner_activation itself: open for them (the closed side:
    test_the_gate_decides_which_path_runs)."""
    with sketchcore.gated_path("cuda_inner_activation"):
        yield


def test_the_gate_decides_which_path_runs():
    """Closed: the array API refuses an inner activation on CUDA arrays, naming the path, and the torch
    layer computes the composite formula (no sketchcore operator in its graph). Open: the kernels."""
    from sketchcore.torch import LowRankLinear
    from sketchcore.torch.ops._second_order import composite
    layer = LowRankLinear(40, 24, 8, inner_activation="silu").cuda()
    x = torch.randn(50, 40, device="cuda")
    with sketchcore.gated_path("cuda_inner_activation", False):
        with pytest.raises(RuntimeError, match="cuda_inner_activation"):
            sketchcore.sketched_matmul(x, layer.S.detach(), layer.U.detach(), inner_activation="silu")
        closed = layer(x)
    seed = torch.zeros([], dtype=torch.int64)
    assert torch.equal(closed, composite(x, layer.S, layer.U, layer.bias, "none", 1.0, 0.0, seed, "silu"))
    assert relative_error(layer(x).double().cpu().numpy(), closed.double().cpu().numpy()) < 1e-5


@pytest.mark.parametrize("inner", ACTIVATIONS)
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("terms", [None, 3])
def test_forward_backward_on_cuda(inner, dtype, terms):
    gen = torch.Generator().manual_seed(hash((inner, str(dtype), terms)) % 2**31)
    k, d_in, d_out, rows = 7, 40, 24, 300  # odd k: padded to 8 in 16-bit
    s_shape, u_shape = ((d_in, k), (k, d_out)) if terms is None else ((terms, d_in, k), (terms, k, d_out))
    host = [torch.randn(*shape, generator=gen, dtype=torch.float64) / scale for shape, scale in
            (((rows, d_in), 1), (s_shape, d_in ** 0.5), (u_shape, k ** 0.5), ((d_out,), 1))]
    x, S, U, b = (t.to("cuda", dtype) for t in host)
    ops = [t.double().cpu().numpy() for t in (x, S, U, b)]  # the rounded operands
    z = torch.empty(rows, k * (terms or 1), device="cuda", dtype=dtype)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", intermediate=z, inner_activation=inner)
    tol = TOLERANCE[dtype]
    assert relative_error(y.double().cpu().numpy(), forward_reference(*ops, "gelu", inner, 1.0)) < tol
    Sp = ops[1] if terms is None else np.concatenate(list(ops[1]), axis=1)
    assert relative_error(z.double().cpu().numpy(), ops[0] @ Sp) < tol  # the pre-activation
    grad = torch.randn(rows, d_out, generator=gen, dtype=torch.float64).to("cuda", dtype)
    got = sketchcore.sketched_matmul_backward(grad, x, S, U, z, bias=b, activation="gelu", inner_activation=inner)
    want = gradient_reference(grad.double().cpu().numpy(), *ops, "gelu", inner, 1.0)
    for g, w in zip(got, want):
        assert relative_error(g.double().cpu().numpy(), w) < 2 * tol
