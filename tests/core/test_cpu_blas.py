"""Which BLAS runs the CPU GEMMs (sketchcore._cpu_blas): the framework's own where found,
sketchcore's otherwise or on request, with results checked against float64 references, and
the provider interface (Fortran gemm, LP64 and ILP64) checked through instrumented entry
points that record every call."""
import ctypes
import glob
import os
import platform
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from sketchcore import _framework_gemm
import _reference
from _reference import assert_close

torch = pytest.importorskip("torch")

NUMPY_HAS_OPENBLAS = bool(glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")))
TORCH_EXPORTS_MKL = platform.system() == "Linux" and platform.machine() == "x86_64"


@pytest.fixture(autouse=True)
def framework_mode():
    """Every test starts and ends in the default mode, with the search redone."""
    sketchcore.set_cpu_blas("framework")
    yield
    sketchcore.set_cpu_blas("framework")


def reference(x, S, U, bias=None):
    x64, S64, U64 = (np.asarray(a, dtype=np.float64) for a in (x, S, U))
    y = sum(x64 @ S64[t] @ U64[t] for t in range(S64.shape[0])) if S64.ndim == 3 else x64 @ S64 @ U64
    return y if bias is None else y + np.asarray(bias, dtype=np.float64)


def test_the_mode_is_checked_and_kept():
    assert sketchcore.get_cpu_blas() == "framework"
    sketchcore.set_cpu_blas("own")
    assert sketchcore.get_cpu_blas() == "own"
    for bad in ("mkl", "", None, 1):
        with pytest.raises(ValueError, match=r"set_cpu_blas: mode: expected one of \('framework', 'own'\), got"):
            sketchcore.set_cpu_blas(bad)
    assert sketchcore.get_cpu_blas() == "own"  # a refused call changes nothing


def test_each_framework_gets_its_own_blas_and_own_mode_gets_sketchcores():
    x_np, x_torch = np.ones((2, 3), np.float32), torch.ones(2, 3)
    own = "sketchcore: " + sketchcore.build_info()["blas"]
    if NUMPY_HAS_OPENBLAS:
        assert sketchcore.cpu_blas_of(x_np).startswith("numpy: libscipy_openblas")
    else:
        assert sketchcore.cpu_blas_of(x_np) == own
    if TORCH_EXPORTS_MKL:
        assert sketchcore.cpu_blas_of(x_torch) == "torch: libtorch_cpu.so (sgemm_, LP64)"
    assert sketchcore.cpu_blas_of(sketchcore.DLPackBuffer((2, 3))) == own  # no framework
    sketchcore.set_cpu_blas("own")
    assert sketchcore.cpu_blas_of(x_np) == own
    assert sketchcore.cpu_blas_of(x_torch) == own


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), d_in=st.integers(1, 30), d_out=st.integers(1, 30), rank=st.integers(1, 6),
       terms=st.integers(1, 3), fortran=st.booleans(), double=st.booleans(), use_torch=st.booleans(),
       mode=st.sampled_from(["framework", "own"]), seed=st.integers(0, 2**32 - 1))
def test_forward_and_backward_match_float64_with_either_blas(rows, d_in, d_out, rank, terms, fortran, double,
                                                             use_torch, mode, seed):
    sketchcore.set_cpu_blas(mode)
    rng = np.random.default_rng(seed)
    dtype = np.float64 if double else np.float32
    x = rng.standard_normal((rows, d_in)).astype(dtype)
    x = np.asfortranarray(x) if fortran else x  # transposed operands: the 'T' flags of the provider
    S = rng.standard_normal((terms, d_in, rank)).astype(dtype)
    U = rng.standard_normal((terms, rank, d_out)).astype(dtype)
    b = rng.standard_normal(d_out).astype(dtype)
    g = rng.standard_normal((rows, d_out)).astype(dtype)
    wrap = (lambda a: torch.from_numpy(np.asarray(a))) if use_torch else (lambda a: a)
    z = wrap(np.empty((rows, terms * rank), dtype))
    y = sketchcore.sketched_matmul(wrap(x), wrap(S), wrap(U), bias=wrap(b), intermediate=z)
    assert_close(np.asarray(y), reference(x, S, U, b), dtype)
    dx, dS, dU, db = sketchcore.sketched_matmul_backward(wrap(g), wrap(x), wrap(S), wrap(U), z, bias=wrap(b))
    g64, x64 = g.astype(np.float64), x.astype(np.float64)
    gu = [g64 @ U[t].astype(np.float64).T for t in range(terms)]
    assert_close(np.asarray(dx), sum(gu[t] @ S[t].astype(np.float64).T for t in range(terms)), dtype)
    assert_close(np.asarray(dS), np.stack([x64.T @ gu[t] for t in range(terms)]), dtype)
    assert_close(np.asarray(dU), np.stack([(x64 @ S[t].astype(np.float64)).T @ g64 for t in range(terms)]), dtype)
    assert_close(np.asarray(db), g64.sum(0), dtype)


def fortran_gemm(index_type, element_type, calls):
    """A reference-BLAS gemm in Python (column-major, arguments by pointer) that records its
    calls: what a provider receives, checked by computing with it."""
    P = ctypes.POINTER
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, P(index_type), P(index_type), P(index_type),
                                 P(element_type), P(element_type), P(index_type), P(element_type), P(index_type),
                                 P(element_type), P(element_type), P(index_type))
    dtype = np.float32 if element_type is ctypes.c_float else np.float64

    def column_major(pointer, rows, cols, ld):
        flat = np.ctypeslib.as_array(pointer, shape=((cols - 1) * ld + rows,))
        return np.lib.stride_tricks.as_strided(flat, shape=(rows, cols), strides=(dtype().itemsize, ld * dtype().itemsize))

    def gemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        ta, tb = transa[:1] == b"T", transb[:1] == b"T"
        m, n, k = m[0], n[0], k[0]
        calls.append((transa[:1], transb[:1], m, n, k))
        A = column_major(a, *((k, m) if ta else (m, k)), lda[0])
        B = column_major(b, *((n, k) if tb else (k, n)), ldb[0])
        C = column_major(c, m, n, ldc[0])
        product = (A.T if ta else A).astype(np.float64) @ (B.T if tb else B).astype(np.float64)
        C[...] = alpha[0] * product + (beta[0] * C if beta[0] != 0 else 0)

    return prototype(gemm)


@pytest.mark.parametrize("index_bits", [32, 64])
@pytest.mark.parametrize("use_torch", [False, True], ids=["numpy", "torch"])
def test_a_provider_runs_every_gemm_with_the_arguments_of_the_row_major_product(index_bits, use_torch):
    index_type = ctypes.c_int32 if index_bits == 32 else ctypes.c_int64
    calls = {"s": [], "d": []}
    sgemm = fortran_gemm(index_type, ctypes.c_float, calls["s"])
    dgemm = fortran_gemm(index_type, ctypes.c_double, calls["d"])
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    _framework_gemm._install_framework_gemm(1 if use_torch else 0, address(sgemm), address(dgemm), index_bits,
                                            "instrumented")
    assert sketchcore.cpu_blas_of(torch.ones(1) if use_torch else np.ones(1)) == ("torch: " if use_torch else
                                                                                   "numpy: ") + "instrumented"
    rng = np.random.default_rng(index_bits)
    for dtype, recorded in ((np.float32, calls["s"]), (np.float64, calls["d"])):
        x = np.asfortranarray(rng.standard_normal((9, 7)).astype(dtype))
        S, U = rng.standard_normal((2, 7, 3)).astype(dtype), rng.standard_normal((2, 3, 5)).astype(dtype)
        g = rng.standard_normal((9, 5)).astype(dtype)
        wrap = (lambda a: torch.from_numpy(np.asarray(a))) if use_torch else (lambda a: a)
        z = wrap(np.empty((9, 6), dtype))
        y = sketchcore.sketched_matmul(wrap(x), wrap(S), wrap(U), scale=0.5, intermediate=z)
        assert_close(np.asarray(y), 0.5 * reference(x, S, U), dtype)
        dx, dS, dU, no_bias = sketchcore.sketched_matmul_backward(wrap(g), wrap(x), wrap(S), wrap(U), z, scale=0.5)
        assert no_bias is None
        gu = [g.astype(np.float64) @ U[t].T.astype(np.float64) for t in range(2)]
        assert_close(np.asarray(dx), 0.5 * sum(gu[t] @ S[t].T.astype(np.float64) for t in range(2)), dtype)
        assert_close(np.asarray(dS), 0.5 * np.stack([x.T.astype(np.float64) @ gu[t] for t in range(2)]), dtype)
        assert len(recorded) >= 5, recorded  # forward 2, backward 3 at least: none went elsewhere
        assert any(b"T" in call[:2] for call in recorded)  # transposed operands reached the provider
    sketchcore.set_cpu_blas("own")  # the provider is dropped: nothing more is recorded
    before = len(calls["s"])
    sketchcore.sketched_matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), np.ones((2, 2), np.float32))
    assert len(calls["s"]) == before


def test_installing_a_provider_checks_its_arguments():
    with pytest.raises(ValueError, match="expected framework 0 or 1 and index_bits 32 or 64, got 2 and 32"):
        _framework_gemm._install_framework_gemm(2, 0, 0, 32, "x")
    with pytest.raises(ValueError, match="got 0 and 16"):
        _framework_gemm._install_framework_gemm(0, 0, 0, 16, "x")


def test_jax_calls_keep_sketchcores_blas_after_a_numpy_call_on_the_same_thread():
    """The bindings leave their last call's options current on the thread; the JAX handlers,
    which XLA may run on that thread, reset them."""
    jax = pytest.importorskip("jax")
    import sketchcore.jax as scj
    calls = []
    sgemm = fortran_gemm(ctypes.c_int64, ctypes.c_float, calls)
    dgemm = fortran_gemm(ctypes.c_int64, ctypes.c_double, [])
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    _framework_gemm._install_framework_gemm(0, address(sgemm), address(dgemm), 64, "instrumented")
    # 8 rows: more than the skinny kernels take (they run ≤ 4-row products themselves, no BLAS)
    x, S, U = np.ones((8, 6), np.float32), np.ones((6, 2), np.float32), np.ones((2, 3), np.float32)
    sketchcore.sketched_matmul(x, S, U)
    assert len(calls) == 2
    with jax.default_device(jax.devices("cpu")[0]):  # the handlers are CPU ones (a GPU machine defaults to its GPU)
        y = scj.sketched_matmul(jax.numpy.asarray(x), jax.numpy.asarray(S), jax.numpy.asarray(U))
    np.testing.assert_array_equal(np.asarray(y), np.full((8, 3), 12.0, np.float32))
    assert len(calls) == 2


def test_few_rows_and_large_terms_run_one_provider_gemm_per_term_instead_of_packing():
    """The term-wise first product (few rows, S of ≥ 64k elements) has no batched entry point
    in a provider: one GEMM per term, not a packed copy of S per call."""
    calls = []
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    sgemm = fortran_gemm(ctypes.c_int64, ctypes.c_float, calls)
    dgemm = fortran_gemm(ctypes.c_int64, ctypes.c_double, [])
    _framework_gemm._install_framework_gemm(0, address(sgemm), address(dgemm), 64, "instrumented")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 300)).astype(np.float32)  # more rows than the skinny kernels take
    S, U = rng.standard_normal((3, 300, 120)).astype(np.float32), rng.standard_normal((3, 120, 7)).astype(np.float32)
    y = sketchcore.sketched_matmul(x, S, U)
    assert_close(y, reference(x, S, U), np.float32)
    assert [call[2:] for call in calls] == [(120, 6, 300)] * 3 + [(7, 6, 360)]  # (m, n, k) column-major


@pytest.mark.parametrize("rows", [1, 2, 4, 5])
def test_products_of_at_most_four_rows_run_the_skinny_kernels_not_the_blas(rows):
    """A decoded token or a tiny batch: a ≤ 4-row product reads B once in sketchcore's own kernel,
    on the calling thread (no packing, no BLAS threads woken); from 5 rows the BLAS runs it. The
    backward's bias gradient (a row of ones times G) is such a product too."""
    calls = []
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    sgemm = fortran_gemm(ctypes.c_int64, ctypes.c_float, calls)
    dgemm = fortran_gemm(ctypes.c_int64, ctypes.c_double, [])
    _framework_gemm._install_framework_gemm(0, address(sgemm), address(dgemm), 64, "instrumented")
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 70)).astype(np.float32)
    S, U, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 70, 9), (2, 9, 33), (33,)))
    z = np.empty((rows, 18), np.float32)
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu", intermediate=z)
    assert_close(y, _reference.reference(x, S, U, b, "gelu"), np.float32)
    forward_calls = len(calls)
    assert forward_calls == (0 if rows <= 4 else 2)
    g = rng.standard_normal((rows, 33)).astype(np.float32)
    dx, dS, dU, db = sketchcore.sketched_matmul_backward(g, x, S, U, z, bias=b, activation="gelu")
    expected = sketchcore.sketched_matmul_backward(g.astype(np.float64), x.astype(np.float64), S.astype(np.float64),
                                                   U.astype(np.float64), z.astype(np.float64), bias=b.astype(np.float64),
                                                   activation="gelu")
    for got, want in zip((dx, dS, dU, db), expected):
        assert_close(got, want, np.float32)
    # the bias gradient (1 × rows · G) and the products with `rows` rows skip the BLAS
    assert all(call[3] > 4 for call in calls[forward_calls:]), calls  # column-major n is the row count m


def test_torch_calls_run_sketchcores_own_loops_on_the_openmp_runtime_torch_has_loaded():
    """Where torch's wheel has its OpenMP runtime loaded, the provider found for torch tensors
    carries its GOMP_parallel, so that the epilogue runs on the threads that ran the GEMMs."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    loaded = open("/proc/self/maps").read() if os.path.exists("/proc/self/maps") else ""
    runtimes = [p for p in glob.glob(os.path.join(lib, "lib*omp*.so*")) if os.path.realpath(p) in loaded]
    found = sketchcore._cpu_blas.torch_gemm()
    assert found is not None or sketchcore.cpu_blas_of(torch.ones(1)).startswith("sketchcore")
    if found is not None:
        assert (found[4] != 0) == bool(runtimes), (found, runtimes)


@pytest.mark.parametrize("activation", ["gelu", "silu", "relu"])
def test_an_openmp_runtime_runs_the_epilogue_with_the_same_bits_as_the_workers(activation):
    """A stand-in GOMP_parallel that runs the region on three Python threads: it is called for
    the epilogue of a torch-tensor call, every chunk runs once, and the results (dropout mask
    included) equal those of sketchcore's own workers bit for bit."""
    found = sketchcore._cpu_blas.torch_gemm()
    if found is None:  # a torch without a findable BLAS: the provider cannot be built from it
        sgemm, dgemm = fortran_gemm(ctypes.c_int32, ctypes.c_float, []), fortran_gemm(ctypes.c_int32, ctypes.c_double, [])
        found = (ctypes.cast(sgemm, ctypes.c_void_p).value, ctypes.cast(dgemm, ctypes.c_void_p).value, 32, "x", 0)
    regions = []
    region_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)
    def gomp_parallel(fn, data, num_threads, flags):
        regions.append((num_threads, flags))
        team = [threading.Thread(target=region_fn(fn), args=(data,)) for _ in range(3)]
        for t in team:
            t.start()
        for t in team:
            t.join()

    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.standard_normal((300, 64)).astype(np.float32))
    S = torch.from_numpy(rng.standard_normal((2, 64, 8)).astype(np.float32))
    U = torch.from_numpy(rng.standard_normal((2, 8, 700)).astype(np.float32))
    bias = torch.from_numpy(rng.standard_normal(700).astype(np.float32))
    call = lambda: sketchcore.sketched_matmul(x, S, U, bias=bias, activation=activation,  # noqa: E731
                                             dropout_p=0.25, seed=11)
    try:
        _framework_gemm._install_framework_gemm(1, found[0], found[1], found[2], "stand-in runtime",
                                     ctypes.cast(gomp_parallel, ctypes.c_void_p).value)
        with_runtime = call()
        _framework_gemm._install_framework_gemm(1, found[0], found[1], found[2], "no runtime", 0)
        with_workers = call()
    finally:
        _framework_gemm._reset_framework_gemm()
    assert regions and all(r == (0, 0) for r in regions)
    assert torch.equal(with_runtime, with_workers)
    reference = sketchcore.sketched_matmul(x.double(), S.double(), U.double(), bias=bias.double(),
                                           activation=activation, dropout_p=0.25, seed=11)
    assert_close(with_runtime.numpy(), reference.numpy(), np.float32)


def test_ctrl_c_while_the_framework_blas_is_looked_for_interrupts_the_call_and_the_search_runs_again(monkeypatch):
    """The search runs inside a function the core calls that cannot raise (noexcept): a
    KeyboardInterrupt there used to be printed and swallowed, and the command went on (Ctrl-C
    lost, seen under load in tests/cli's Ctrl-C test). It is raised again at the next check."""
    def interrupted():
        raise KeyboardInterrupt

    x, S, U = np.ones((4, 8), np.float32), np.ones((8, 2), np.float32), np.ones((2, 3), np.float32)
    monkeypatch.setattr(sketchcore._cpu_blas, "numpy_gemm", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sketchcore.sketched_matmul(x, S, U)
        for _ in range(1000):  # the interpreter checks for the pending interrupt between bytecodes
            pass
    monkeypatch.undo()
    y = sketchcore.sketched_matmul(x, S, U)  # looked for again: the call runs
    np.testing.assert_allclose(y, reference(x, S, U), rtol=1e-6)
