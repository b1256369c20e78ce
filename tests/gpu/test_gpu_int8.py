"""The int8 sketched GEMM on the CUDA backend (src/cuda/quantized_cuda.cu, quantized_rows.cuh, int8_kernels.cu and the int8
GEMM of lt_gemm.cu): against the step-by-step quantized reference of tests/core/test_int8_matmul.py
(exact int64 sums, float32 dequantization: the CPU path's own reference) and a float64 reference of
the dequantized factors (the layer's math up to the activations' quantization), for every activation
and σ, bias or none, odd sizes (padded to 16 on the device), empty and single rows, strided inputs
and outputs, non-finite and all-zero rows, and the torch layer. Skipped without a CUDA device: at the
time of writing this path was compiled by nvcc but has never run on a GPU; it stays behind the gated
path cuda_int8_factors until these pass on one (the closed side: test_the_gate_decides)."""
import zlib

import numpy as np
import pytest

import sketchcore
from _reference import ACTIVATIONS, activate, quantized_reference, relative_error

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

# Norm-wise relative errors. Against the quantized reference the int32 sums are exact on both sides;
# what remains is the activations' last bits, which can move a requantized value by one step.
QUANTIZED_TOLERANCE = 5e-4
# Against float64 with the dequantized factors: the per-row quantization of x and of the intermediate
# (measured on the CPU path, same shapes: at most 0.6 % with a bias).
FLOAT64_TOLERANCE = 3e-2


@pytest.fixture(autouse=True)
def opened():
    """These tests verify the gated path cuda_int8_factors itself: open for them (the closed side:
    test_the_gate_decides)."""
    with sketchcore.gated_path("cuda_int8_factors"):
        yield


def factor(gen, k, n):
    w = torch.randn(k, n, generator=gen, dtype=torch.float64) / max(k, 1) ** 0.5
    return sketchcore.Int8Factor(*sketchcore.quantize_int8(w.float().numpy()))


def dequantized_reference(x, S, U, bias, activation, inner):
    """float64 math with the dequantized factors and unquantized activations."""
    S64 = S.q.astype(np.float64) * S.scale.astype(np.float64)
    U64 = U.q.astype(np.float64) * U.scale.astype(np.float64)
    y = activate(np.asarray(x, np.float64) @ S64, inner) @ U64
    return activate(y if bias is None else y + np.asarray(bias, np.float64), activation)


def check(y, x, S, U, bias, activation, inner):
    x_host = x.cpu().numpy()
    b_host = None if bias is None else bias.cpu().numpy()
    y_host = y.cpu().numpy().astype(np.float64)
    assert y.device == x.device and y.dtype == torch.float32
    quantized = quantized_reference(x_host, S, U, b_host, activation, inner)
    assert relative_error(y_host, quantized) < QUANTIZED_TOLERANCE
    assert relative_error(y_host, dequantized_reference(x_host, S, U, b_host, activation, inner)) < FLOAT64_TOLERANCE


def test_the_gate_decides():
    """Closed: the array API and the torch layer refuse CUDA inputs, naming the path. Open: it runs."""
    from sketchcore.torch import Int8LowRankLinear, LowRankLinear
    gen = torch.Generator().manual_seed(49)
    S, U = factor(gen, 40, 8), factor(gen, 8, 24)
    x = torch.randn(5, 40, device="cuda")
    layer = Int8LowRankLinear.from_float(LowRankLinear(40, 24, 8).eval()).cuda()
    with sketchcore.gated_path("cuda_int8_factors", False):
        with pytest.raises(RuntimeError, match="cuda_int8_factors.*SKETCHCORE_CUDA_UNVERIFIED"):
            sketchcore.int8_sketched_matmul(x, S, U)
        with torch.no_grad(), pytest.raises(RuntimeError, match="cuda_int8_factors"):
            layer(x)
    check(sketchcore.int8_sketched_matmul(x, S, U), x, S, U, None, "none", "none")


@pytest.mark.parametrize("inner", ACTIVATIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_the_references(inner, activation, with_bias):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{inner} {activation} {with_bias}".encode()))  # the same draw in every process
    d_in, rank, d_out, rows = 40, 7, 33, 300  # odd sizes: padded to 48, 16 and 48 on the device
    S, U = factor(gen, d_in, rank), factor(gen, rank, d_out)
    x = torch.randn(rows, d_in, generator=gen).cuda()
    bias = torch.randn(d_out, generator=gen).cuda() if with_bias else None
    y = sketchcore.int8_sketched_matmul(x, S, U, bias=bias, activation=activation, inner_activation=inner)
    check(y, x, S, U, bias, activation, inner)


@pytest.mark.parametrize("shape", [(0, 16), (1, 16), (2, 3, 1), (17, 129), (1000, 256)])
def test_sizes(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    d_in = shape[-1]
    S, U = factor(gen, d_in, 64), factor(gen, 64, 48)
    x = torch.randn(*shape, generator=gen).cuda()
    y = sketchcore.int8_sketched_matmul(x, S, U, activation="relu")
    assert y.shape == (*shape[:-1], 48)
    if y.numel():
        flat = x.reshape(-1, d_in)
        check(y.reshape(-1, 48), flat, S, U, None, "relu", "none")


def test_strided_input_output_and_bias():
    gen = torch.Generator().manual_seed(7)
    S, U = factor(gen, 24, 16), factor(gen, 16, 20)
    base = torch.randn(4, 6, 48, generator=gen).cuda()
    x = base[:, 1:4, ::2]  # leading dimensions that do not collapse (288 ≠ 3·48), column stride 2
    bias = torch.randn(40, generator=gen).cuda()[::2]
    out_base = torch.full((4, 3, 32), float("nan"), device="cuda")
    out = out_base[..., :20]  # row stride 32
    y = sketchcore.int8_sketched_matmul(x, S, U, bias=bias, activation="gelu", inner_activation="silu", out=out)
    assert y is out and torch.isnan(out_base[..., 20:]).all()  # the padding of out is not written
    check(out.reshape(12, 20), x.reshape(12, 24), S, U, bias, "gelu", "silu")


def test_zero_and_non_finite_rows():
    gen = torch.Generator().manual_seed(3)
    S, U = factor(gen, 32, 16), factor(gen, 16, 8)
    x = torch.randn(4, 32, generator=gen)
    x[1] = 0
    x[2, 5] = float("inf")
    x[3, 7] = float("nan")
    bias = torch.randn(8, generator=gen)
    y = sketchcore.int8_sketched_matmul(x.cuda(), S, U, bias=bias.cuda()).cpu()
    assert torch.equal(y[1], bias)  # an all-zero row gives zeros, then the bias
    assert torch.isnan(y[2]).all() and torch.isnan(y[3]).all()
    np.testing.assert_allclose(y[0].numpy(), sketchcore.int8_sketched_matmul(x[:1], S, U, bias=bias)[0].numpy(),
                               rtol=1e-5, atol=1e-6)


def test_one_factor_serves_the_cpu_and_the_device():
    gen = torch.Generator().manual_seed(11)
    S, U = factor(gen, 64, 32), factor(gen, 32, 64)
    x = torch.randn(50, 64, generator=gen)
    cpu = sketchcore.int8_sketched_matmul(x, S, U, activation="silu")
    for _ in range(2):  # the second call uses the factors' device copies
        gpu = sketchcore.int8_sketched_matmul(x.cuda(), S, U, activation="silu")
        assert relative_error(gpu.cpu().double().numpy(), cpu.double().numpy()) < QUANTIZED_TOLERANCE


def test_the_layer_on_cuda_matches_the_layer_on_the_cpu():
    from sketchcore.torch import Int8LowRankLinear, LowRankLinear
    torch.manual_seed(5)
    layer = Int8LowRankLinear.from_float(LowRankLinear(96, 80, 24, inner_activation="gelu").eval())
    x = torch.randn(3, 7, 96)
    with torch.no_grad():
        cpu = layer(x)
        gpu = layer.cuda()(x.cuda())
    assert gpu.device.type == "cuda" and gpu.shape == cpu.shape
    assert relative_error(gpu.cpu().double().numpy(), cpu.double().numpy()) < QUANTIZED_TOLERANCE


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    gen = torch.Generator().manual_seed(13)
    S, U = factor(gen, 40, 16), factor(gen, 16, 24)
    x = torch.randn(30, 40, generator=gen)
    y = sketchcore.int8_sketched_matmul(cupy.asarray(x.numpy()), S, U, activation="relu")
    assert isinstance(y, cupy.ndarray)
    check(torch.from_numpy(cupy.asnumpy(y)), x, S, U, None, "relu", "none")
