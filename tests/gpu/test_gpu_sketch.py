"""Sketching operators on a CUDA device, through PyTorch CUDA tensors (and CuPy when
installed): entries bit-identical to the CPU's for every kind, applications against the
float64 dense operator for every kind, side, transpose and dtype (odd sizes, batches,
strided operands), work on the caller's stream, and the pool back to its baseline.

Every test here needs a CUDA device and is skipped without one (the CPU-only machine that
runs CI has none).
"""
import numpy as np
import pytest

import sketchcore
from sketchcore import sketch

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0
                       or not torch.cuda.is_available(), reason="needs the CUDA backend and a CUDA device"),
]

KINDS = {"gaussian": {}, "rademacher": {}, "uniform": {}, "sparse_sign": {"nnz": 5}, "countsketch": {}, "srht": {}}
TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 2e-6, torch.float64: 1e-13}


def make(kind, m, n, seed=11):
    return getattr(sketch, kind)(m, n, seed=seed, **KINDS[kind])


def as64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def relative_error(actual, expected):
    return np.linalg.norm(as64(actual) - expected) / max(np.linalg.norm(expected), 1e-300)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entries_are_bit_identical_to_the_cpus(kind, dtype):
    op = make(kind, 37, 150)
    cpu = op.to_dense(dtype=str(dtype).split(".")[1])
    gpu = op.to_dense(like=torch.empty(0, dtype=dtype, device="cuda"))
    assert gpu.is_cuda and gpu.dtype == dtype
    np.testing.assert_array_equal(gpu.cpu().numpy(), cpu)
    block = torch.empty((9, 40), dtype=dtype, device="cuda")
    sketchcore._sketch.to_dense(*op._args(), block, 5, 17)
    np.testing.assert_array_equal(block.cpu().numpy(), cpu[5:14, 17:57])


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_entries_are_the_float64_entries_rounded(kind, dtype):
    op = make(kind, 37, 150)
    expected = op.to_dense()
    gpu = op.to_dense(like=torch.empty(0, dtype=dtype, device="cuda"))
    if dtype == torch.float16:
        # NumPy rounds float64 to float16 directly to nearest, subnormals included (torch goes
        # through float32: a double rounding).
        np.testing.assert_array_equal(as64(gpu), expected.astype(np.float16).astype(np.float64))
    else:  # every bfloat16 entry here is normal: round to nearest is within half an epsilon
        np.testing.assert_allclose(as64(gpu), expected, rtol=torch.finfo(dtype).eps / 2, atol=0)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_application_matches_the_float64_dense_operator(kind, side, transposed, dtype):
    op = make(kind, 37, 150)
    op = op.T if transposed else op
    dense = op.to_dense()
    rows, cols = op.shape
    gen = torch.Generator().manual_seed(3)
    if side == "left":
        a = torch.randn(cols, 13, generator=gen, dtype=torch.float64)
        expected = dense @ a.numpy()
    else:
        a = torch.randn(13, rows, generator=gen, dtype=torch.float64)
        expected = a.numpy() @ dense
    result = op.apply(a.to("cuda", dtype), side=side)
    assert result.is_cuda and result.dtype == dtype and tuple(result.shape) == expected.shape
    assert relative_error(result, expected) <= TOLERANCE[dtype]


@pytest.mark.parametrize("kind", list(KINDS))
def test_batched_strided_operands_and_strided_out(kind):
    op = make(kind, 24, 70)
    dense = op.to_dense()
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(3, 9, 70, generator=gen, dtype=torch.float64)
    a_cuda = a.to("cuda").transpose(1, 2)  # (3, 70, 9), column-major matrices
    out = torch.zeros(3, 9, 24, dtype=torch.float64, device="cuda").transpose(1, 2)  # strided out
    op.apply(a_cuda, out=out)
    np.testing.assert_allclose(as64(out), dense @ a.transpose(1, 2).numpy(), rtol=1e-12, atol=1e-12)
    right = a.to("cuda") @ op.T  # (3, 9, 70) @ (70, 24)
    np.testing.assert_allclose(as64(right), a.numpy() @ dense.T, rtol=1e-12, atol=1e-12)


def test_work_runs_on_the_callers_stream_and_the_pool_returns_to_its_baseline():
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(4096, 64, generator=gen, dtype=torch.float32).to("cuda")
    torch.cuda.synchronize()
    baseline = sketchcore.memory.device_stats(0)["current_bytes"]
    stream = torch.cuda.Stream()
    results = {}
    with torch.cuda.stream(stream):
        for kind in KINDS:
            results[kind] = make(kind, 256, 4096) @ a
    stream.synchronize()
    for kind, result in results.items():
        expected = make(kind, 256, 4096).to_dense() @ a.double().cpu().numpy()
        assert relative_error(result, expected) <= TOLERANCE[torch.float32], kind
    torch.cuda.synchronize()
    assert sketchcore.memory.device_stats(0)["current_bytes"] == baseline


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    op = make("srht", 32, 100)
    a = cupy.asarray(np.random.default_rng(6).standard_normal((100, 5)))
    result = op @ a
    assert isinstance(result, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(result), op.to_dense() @ cupy.asnumpy(a), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(cupy.asnumpy(op.to_dense(like=a)), op.to_dense())
