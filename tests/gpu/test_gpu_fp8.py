"""The fp8 (e4m3) sketched GEMM on the CUDA backend (src/cuda/quantized_cuda.cu, quantized_rows.cuh, fp8_kernels.cu and the
fp8 GEMM of lt_gemm.cu): against a step-by-step quantized reference (the host's e4m3 encoding,
float64 sums of the decoded codes) and a float64 reference of the dequantized factors, for every
activation and σ, bias or none, odd sizes (padded to 16 on the device), empty and single rows,
strided inputs and outputs, non-finite and all-zero rows, and the refusal of devices older than
compute capability 8.9. Skipped without a CUDA device: at the time of writing this path was
compiled by nvcc but has never run on a GPU; it stays behind the gated path cuda_fp8_factors until
these pass on one (the closed side: test_the_gate_decides)."""
import zlib

import numpy as np
import pytest

import sketchcore
from _reference import ACTIVATIONS, activate, relative_error

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]


def has_fp8():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


needs_fp8 = pytest.mark.skipif(not has_fp8(), reason="fp8 needs compute capability 8.9 or newer")

# Norm-wise relative errors. Against the quantized reference the sums differ only in float32
# accumulation order (cuBLASLt) against float64 here, which can move a requantized value by one e4m3
# step (6 %) in rare elements. Against float64 with the dequantized factors: the e4m3 rounding of x
# and of the intermediate (3 mantissa bits: up to 6 % an element). This file's quantized reference,
# run on the CPU, is at most 3.4 % from it over test_matches_the_references' 50 cases; the device
# has not yet been measured.
QUANTIZED_TOLERANCE = 5e-3
FLOAT64_TOLERANCE = 8e-2


@pytest.fixture(autouse=True)
def opened():
    """These tests verify the gated path cuda_fp8_factors itself: open for them (the closed side:
    test_the_gate_decides)."""
    with sketchcore.gated_path("cuda_fp8_factors"):
        yield


def factor(gen, k, n):
    w = torch.randn(k, n, generator=gen, dtype=torch.float64) / max(k, 1) ** 0.5
    return sketchcore.Fp8Factor(*sketchcore.quantize_e4m3(w.float().numpy()))


def values(f):
    """The factor's value in float64: decoded codes times the column scales."""
    return sketchcore.e4m3_decode(f.codes).astype(np.float64) * f.scale.astype(np.float64)


def f8_rows(x):
    """Rows of float32 x quantized as documented: (decoded codes in float64, row scales max|x|/448)."""
    x = np.asarray(x, np.float32)
    max_abs = np.abs(x).max(axis=-1) if x.shape[-1] else np.zeros(x.shape[0], np.float32)
    scale = (max_abs / np.float32(448)).astype(np.float32)
    inverse = (np.float32(448) / np.where(max_abs == 0, np.float32(1), max_abs)).astype(np.float32)
    codes = sketchcore.e4m3_encode((x * inverse[:, None]).astype(np.float32))
    return sketchcore.e4m3_decode(codes).astype(np.float64), scale


def quantized_reference(x, S, U, bias, activation, inner):
    codes_S = sketchcore.e4m3_decode(S.codes).astype(np.float64)
    codes_U = sketchcore.e4m3_decode(U.codes).astype(np.float64)
    a, sx = f8_rows(x)
    z = ((a @ codes_S) * (sx[:, None] * S.scale[None, :]).astype(np.float32)).astype(np.float32)
    z = activate(z.astype(np.float64), inner).astype(np.float32)
    b, sz = f8_rows(z)
    y = (b @ codes_U) * (sz[:, None] * U.scale[None, :]).astype(np.float32)
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return activate(y, activation)


def dequantized_reference(x, S, U, bias, activation, inner):
    """float64 math with the dequantized factors and unquantized activations."""
    y = activate(np.asarray(x, np.float64) @ values(S), inner) @ values(U)
    return activate(y if bias is None else y + np.asarray(bias, np.float64), activation)


def check(y, x, S, U, bias, activation, inner):
    x_host = x.cpu().numpy()
    b_host = None if bias is None else bias.cpu().numpy()
    y_host = y.cpu().numpy().astype(np.float64)
    assert y.device == x.device and y.dtype == torch.float32
    assert relative_error(y_host, quantized_reference(x_host, S, U, b_host, activation, inner)) < QUANTIZED_TOLERANCE
    assert relative_error(y_host, dequantized_reference(x_host, S, U, b_host, activation, inner)) < FLOAT64_TOLERANCE


@needs_fp8
def test_the_gate_decides():
    """Closed: a CUDA input is refused, naming the path. Open: it runs."""
    gen = torch.Generator().manual_seed(49)
    S, U = factor(gen, 40, 8), factor(gen, 8, 24)
    x = torch.randn(5, 40, device="cuda")
    with sketchcore.gated_path("cuda_fp8_factors", False):
        with pytest.raises(RuntimeError, match="cuda_fp8_factors.*SKETCHCORE_CUDA_UNVERIFIED"):
            sketchcore.fp8_sketched_matmul(x, S, U)
    check(sketchcore.fp8_sketched_matmul(x, S, U), x, S, U, None, "none", "none")


@pytest.mark.skipif(has_fp8(), reason="this device has fp8 tensor cores")
def test_an_older_device_is_refused_by_name():
    gen = torch.Generator().manual_seed(1)
    S, U = factor(gen, 16, 16), factor(gen, 16, 16)
    major, minor = torch.cuda.get_device_capability()
    with pytest.raises(TypeError, match=rf"compute capability 8\.9 or newer .*got cuda:\d+ of compute capability "
                                        rf"{major}\.{minor}"):
        sketchcore.fp8_sketched_matmul(torch.randn(2, 16, device="cuda"), S, U)


@needs_fp8
@pytest.mark.parametrize("inner", ACTIVATIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_the_references(inner, activation, with_bias):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{inner} {activation} {with_bias}".encode()))  # the same draw in every process
    d_in, rank, d_out, rows = 40, 7, 33, 300  # odd sizes: padded to 48, 16 and 48 on the device
    S, U = factor(gen, d_in, rank), factor(gen, rank, d_out)
    x = torch.randn(rows, d_in, generator=gen).cuda()
    bias = torch.randn(d_out, generator=gen).cuda() if with_bias else None
    y = sketchcore.fp8_sketched_matmul(x, S, U, bias=bias, activation=activation, inner_activation=inner)
    check(y, x, S, U, bias, activation, inner)


@needs_fp8
@pytest.mark.parametrize("shape", [(0, 16), (1, 16), (2, 3, 1), (17, 129), (1000, 256)])
def test_sizes(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    d_in = shape[-1]
    S, U = factor(gen, d_in, 64), factor(gen, 64, 48)
    x = torch.randn(*shape, generator=gen).cuda()
    y = sketchcore.fp8_sketched_matmul(x, S, U, activation="relu")
    assert y.shape == (*shape[:-1], 48)
    if y.numel():
        check(y.reshape(-1, 48), x.reshape(-1, d_in), S, U, None, "relu", "none")


@needs_fp8
def test_strided_input_output_and_bias():
    gen = torch.Generator().manual_seed(7)
    S, U = factor(gen, 24, 16), factor(gen, 16, 20)
    base = torch.randn(4, 6, 48, generator=gen).cuda()
    x = base[:, 1:4, ::2]  # leading dimensions that do not collapse (288 ≠ 3·48), column stride 2
    bias = torch.randn(40, generator=gen).cuda()[::2]
    out_base = torch.full((4, 3, 32), float("nan"), device="cuda")
    out = out_base[..., :20]  # row stride 32
    y = sketchcore.fp8_sketched_matmul(x, S, U, bias=bias, activation="gelu", inner_activation="silu", out=out)
    assert y is out and torch.isnan(out_base[..., 20:]).all()  # the padding of out is not written
    check(out.reshape(12, 20), x.reshape(12, 24), S, U, bias, "gelu", "silu")


@needs_fp8
def test_zero_and_non_finite_rows_and_reused_factors():
    gen = torch.Generator().manual_seed(3)
    S, U = factor(gen, 32, 16), factor(gen, 16, 8)
    x = torch.randn(4, 32, generator=gen)
    x[1] = 0
    x[2, 5] = float("inf")
    x[3, 7] = float("nan")
    bias = torch.randn(8, generator=gen)
    for _ in range(2):  # the second call uses the factors' device copies
        y = sketchcore.fp8_sketched_matmul(x.cuda(), S, U, bias=bias.cuda()).cpu()
        assert torch.equal(y[1], bias)  # an all-zero row gives zeros, then the bias
        assert torch.isnan(y[2]).all() and torch.isnan(y[3]).all()
        check(y[:1], x[:1], S, U, bias, "none", "none")


@needs_fp8
def test_the_torch_layer_matches_the_quantized_reference_and_the_gate_decides():
    """Fp8LowRankLinear on the device: its packed factors through the reference above; closed
    gate: refused by name."""
    from sketchcore.torch import Fp8LowRankLinear, LowRankLinear
    torch.manual_seed(6)
    base = LowRankLinear(96, 80, 24, inner_activation="silu", activation="gelu").eval()
    layer = Fp8LowRankLinear.from_float(base).cuda()
    x = torch.randn(3, 7, 96, device="cuda")
    with torch.no_grad():
        y = layer(x)
        with sketchcore.gated_path("cuda_fp8_factors", False), pytest.raises(RuntimeError, match="cuda_fp8_factors"):
            layer(x)
    assert y.device.type == "cuda" and y.shape == (3, 7, 80) and y.dtype == torch.float32
    S, U = layer._factors()
    check(y.reshape(21, 80), x.reshape(21, 96), S, U, layer.bias, "gelu", "silu")
