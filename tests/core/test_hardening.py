"""Overflowing extents and the audit's smaller defects: every one is a clean, named
exception (never a crash, a hang, a wrong value or a leaked pool block)."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sketchcore

def _run_isolated(code, timeout=60):
    """Runs `code` in a fresh interpreter: a crash or hang fails the test, not the suite."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


# The audit's reproducers (stride-0 torch views; before the fix: SIGSEGV, a hang, SIGFPE).
REPRODUCERS = [
    ("(1, 4)", "(2**30, 4, 2**30)", "(2**30, 2**30, 1)"),
    ("(1, 2)", "(2**30, 2, 2**30 + 1)", "(2**30, 2**30 + 1, 1)"),
    ("(1, 1)", "(2**31, 1, 2**31)", "(2**31, 2**31, 1)"),
]


@pytest.mark.parametrize("x_shape,S_shape,U_shape", REPRODUCERS)
def test_stride0_reproducers_raise_value_error_naming_S(x_shape, S_shape, U_shape):
    pytest.importorskip("torch")
    out = _run_isolated(f"""
        import torch, sketchcore as s
        o = torch.ones(())
        s.memory.set_limit(1 << 30)
        try:
            s.sketched_matmul(o.expand{x_shape}, o.expand{S_shape}, o.expand{U_shape})
        except ValueError as e:
            print("ValueError:", e)
        print("current", s.memory.stats()["current_bytes"])
    """)
    assert "ValueError: sketched_matmul: S: expected at most 2**63 - 1 bytes of float32 elements" in out
    assert "current 0" in out


def test_dlpack_extents_whose_product_overflows_name_the_argument():
    # T·k = 2**64 through a DLPack producer once returned silently.
    from _fake_dlpack import FakeProducer
    S = FakeProducer(np.zeros(1, np.float32), shape=(2**32, 4, 2**32), strides=(0, 0, 0))
    with pytest.raises(ValueError, match=r"^S: TensorView: shape: expected extents whose product fits"):
        sketchcore.sketched_matmul(np.ones((1, 4), np.float32), S, np.ones((1, 1), np.float32))


def test_huge_but_addressable_temporary_is_a_memory_error_without_leak():
    torch = pytest.importorskip("torch")
    o = torch.ones(())
    sketchcore.memory.set_limit(1 << 30)
    try:
        with pytest.raises(MemoryError, match="would exceed the limit"):
            sketchcore.sketched_matmul(o.expand(1, 1), o.expand(2**20, 1, 2**20), o.expand(2**20, 2**20, 1))
        assert sketchcore.memory.stats()["current_bytes"] == 0
    finally:
        sketchcore.memory.set_limit(None)


def test_output_too_large_to_address_names_U():
    torch = pytest.importorskip("torch")
    o = torch.ones(())
    with pytest.raises(ValueError, match=r"sketched_matmul: U: .*the output of 1099511627776 × 1099511627776"):
        sketchcore.sketched_matmul(o.expand(2**40, 1), o.expand(1, 8), o.expand(8, 2**40))


def test_empty_numpy_intermediate_with_zero_strides_is_accepted(rng):
    x = np.empty((0, 6), np.float32)
    S, U = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    Z = np.empty((0, 3), np.float32)
    assert Z.strides == (0, 0) or Z.size == 0
    y = sketchcore.sketched_matmul(x, S, U, intermediate=Z)
    assert y.shape == (0, 5)
    dx, dS, dU, _ = sketchcore.sketched_matmul_backward(np.empty((0, 5), np.float32), x, S, U, Z)
    assert dx.shape == (0, 6) and not dS.any() and not dU.any()


def test_backward_with_0d_U_is_a_value_error_not_index_error():
    x, S, Z, g = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((2, 3), np.float32), \
        np.ones((2, 5), np.float32)
    with pytest.raises(ValueError, match=r"sketched_matmul: U: expected a 2-D array \(k, d_out\).*got shape \(\)"):
        sketchcore.sketched_matmul_backward(g, x, S, np.array(1.0, np.float32), Z)


@pytest.mark.parametrize("needs", ["xU", "x", b"x", 3])
def test_needs_must_be_a_collection_of_names(needs):
    x, S, U = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(TypeError, match="needs: expected a collection of names"):
        sketchcore.sketched_matmul_backward(np.ones((2, 5), np.float32), x, S, U, np.ones((2, 3), np.float32),
                                            needs=needs)


@pytest.mark.parametrize("needs", [["x", "z"], [("x",)], [None]])
def test_needs_rejects_unknown_names(needs):
    x, S, U = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(ValueError, match="needs: expected names from"):
        sketchcore.sketched_matmul_backward(np.ones((2, 5), np.float32), x, S, U, np.ones((2, 3), np.float32),
                                            needs=needs)


def test_needs_accepts_any_collection(rng):
    x, S, U = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4), (4, 3), (3, 5)))
    Z = x @ S
    g = rng.standard_normal((2, 5)).astype(np.float32)
    dx, dS, dU, db = sketchcore.sketched_matmul_backward(g, x, S, U, Z, needs={"U"})
    assert dx is None and dS is None and db is None
    np.testing.assert_allclose(dU, Z.T @ g, rtol=1e-5)
    assert sketchcore.sketched_matmul_backward(g, x, S, U, Z, needs=["x"])[0] is not None


def test_set_num_threads_checks_its_argument():
    before = sketchcore.get_num_threads()
    with pytest.raises(TypeError, match="set_num_threads: num_threads: expected an int, got bool"):
        sketchcore.set_num_threads(True)
    with pytest.raises(TypeError, match="num_threads: expected an int, got float"):
        sketchcore.set_num_threads(2.0)
    with pytest.raises(ValueError, match=r"num_threads: expected an integer ≤ 2\*\*31 - 1, got 1099511627776"):
        sketchcore.set_num_threads(2**40)
    with pytest.raises(ValueError, match="num_threads: expected an integer ≥ 1, got -1099511627776"):
        sketchcore.set_num_threads(-(2**40))
    assert sketchcore.get_num_threads() == before
    sketchcore.set_num_threads(np.int64(before))  # any integer type
    assert sketchcore.get_num_threads() == before


def test_set_limit_checks_its_range():
    with pytest.raises(ValueError, match=r"set_limit: nbytes: expected a number of bytes below 2\*\*64, got 18446744"):
        sketchcore.memory.set_limit(2**64)
    with pytest.raises(TypeError, match="set_limit: nbytes: expected an int or None, got bool"):
        sketchcore.memory.set_limit(True)
    assert sketchcore.memory.stats()["limit_bytes"] is None


@pytest.mark.parametrize("name", ["scale", "dropout_p"])
def test_real_arguments_too_large_for_a_float_name_the_argument(name):
    x, S, U = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(ValueError, match=rf"sketched_matmul: {name}: expected a finite number, got 1000.*too large"):
        sketchcore.sketched_matmul(x, S, U, **{name: 10**400})
    with pytest.raises(TypeError, match=f"{name}: expected a real number, got bool"):
        sketchcore.sketched_matmul(x, S, U, **{name: True})


def test_block_accepts_ints_like_numpy_indexing():
    op = sketchcore.sketch.gaussian(8, 6, seed=3)
    dense = op.to_dense()
    np.testing.assert_array_equal(op.block(1, slice(0, 4)), dense[1, 0:4])
    np.testing.assert_array_equal(op.block(slice(2, 5), -1), dense[2:5, -1])
    assert op.block(7, 5) == dense[7, 5]
    np.testing.assert_array_equal(op.T.block(2, slice(None)), dense.T[2, :])
    with pytest.raises(IndexError, match=r"block: rows: expected an index in \[-8, 8\), got 8"):
        op.block(8, slice(None))
    with pytest.raises(TypeError, match="block: cols: expected a slice or an int, got str"):
        op.block(0, "a")
    with pytest.raises(ValueError, match="block: rows: expected a slice with step 1, got step 2"):
        op.block(slice(0, 8, 2), 0)
