"""Every operand in every memory layout: the result must not depend on the layout, and a
strided `out` must be written exactly where it points, nowhere else."""
import numpy as np
import pytest

import sketchcore
from _reference import assert_close, random_problem, reference


def contiguous(a):
    return np.ascontiguousarray(a)


def fortran(a):
    return np.asfortranarray(a)


def padded_rows(a):
    buf = np.full((*a.shape[:-1], a.shape[-1] + 3), np.nan, dtype=a.dtype)
    buf[..., : a.shape[-1]] = a
    return buf[..., : a.shape[-1]]


def every_other_column(a):
    buf = np.full((*a.shape[:-1], 2 * a.shape[-1]), np.nan, dtype=a.dtype)
    buf[..., ::2] = a
    return buf[..., ::2]


def reversed_rows(a):
    buf = np.empty_like(a)[::-1]
    buf[...] = a
    return buf


def every_other_leading(a):
    buf = np.full((2 * a.shape[0], *a.shape[1:]), np.nan, dtype=a.dtype)
    buf[::2] = a
    return buf[::2]


LAYOUTS = [contiguous, fortran, padded_rows, every_other_column, reversed_rows, every_other_leading]


# Fortran order and leading-dimension striding mean nothing new for the 1-D bias.
INPUT_CASES = [(operand, layout) for operand in ("x", "S", "U", "bias") for layout in LAYOUTS
               if not (operand == "bias" and layout in (fortran, every_other_leading))]


@pytest.mark.parametrize(("operand", "layout"), INPUT_CASES, ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("terms", [None, 3])
def test_any_input_layout_gives_the_same_result(rng, layout, operand, terms):
    x, S, U, b = random_problem(rng, (4, 6), 19, 5, 11, terms=terms, dtype=np.float64)
    args = {"x": x, "S": S, "U": U, "bias": b}
    args[operand] = layout(args[operand])
    np.testing.assert_array_equal(args[operand], {"x": x, "S": S, "U": U, "bias": b}[operand])
    y = sketchcore.sketched_matmul(args["x"], args["S"], args["U"], bias=args["bias"], activation="relu")
    assert_close(y, reference(x, S, U, b, "relu"), np.float64)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_out_in_any_layout_is_written_in_place_and_nowhere_else(rng, layout):
    x, S, U, b = random_problem(rng, (4, 6), 19, 5, 11, terms=2, dtype=np.float32)
    out = layout(np.zeros((4, 6, 11), np.float32))
    base = out.base if out.base is not None else out
    before = base.copy()
    result = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu_tanh", out=out)
    assert result is out
    assert_close(out, reference(x, S, U, b, "gelu_tanh"), np.float32)
    # Everything in the base buffer outside the view is untouched.
    # Element offsets of the view inside its (compact) base buffer.
    start = (out.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // out.itemsize
    offsets = start + np.indices(out.shape).reshape(out.ndim, -1).T @ (np.array(out.strides) // out.itemsize)
    outside = np.ones(base.size, bool)
    outside[offsets] = False
    np.testing.assert_array_equal(base.reshape(-1, order="A")[outside], before.reshape(-1, order="A")[outside])


def test_broadcast_x_with_zero_strides(rng):
    x, S, U, b = random_problem(rng, (1,), 16, 4, 9, dtype=np.float64)
    xb = np.broadcast_to(x, (7, 16))
    y = sketchcore.sketched_matmul(xb, S, U, bias=b)
    assert_close(y, reference(np.repeat(x, 7, axis=0), S, U, b), np.float64)


def test_read_only_inputs_are_accepted(rng):
    x, S, U, b = random_problem(rng, (5,), 8, 2, 3, dtype=np.float32)
    for a in (x, S, U, b):
        a.flags.writeable = False
    assert_close(sketchcore.sketched_matmul(x, S, U, bias=b), reference(x, S, U, b), np.float32)


def test_same_array_may_serve_as_several_inputs(rng):
    a = rng.standard_normal((6, 6))
    assert_close(sketchcore.sketched_matmul(a, a, a, bias=a[0]), reference(a, a, a, a[0]), np.float64)
