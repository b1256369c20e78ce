"""Every bad input raises a clear exception naming the argument, the expected and the
actual value, and leaves the process (and `out`) intact."""
import numpy as np
import pytest

import sketchcore

f32, f64 = np.float32, np.float64


def arrays(dtype=f32):
    return (np.ones((4, 8), dtype), np.ones((8, 2), dtype), np.ones((2, 3), dtype))


VALUE_ERRORS = [
    # (description, call kwargs builder, message fragments)
    ("d_in mismatch", lambda: dict(x=np.ones((4, 9), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32)),
     ["x", "d_in = 8", "(4, 9)"]),
    ("k mismatch", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((5, 3), f32)),
     ["U", "k = 2", "(5, 3)"]),
    ("T mismatch", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((2, 8, 2), f32), U=np.ones((3, 2, 3), f32)),
     ["U", "T = 2", "(3, 2, 3)"]),
    ("2-D S with 3-D U", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((1, 2, 3), f32)),
     ["U", "2-D", "(1, 2, 3)"]),
    ("3-D S with 2-D U", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((1, 8, 2), f32), U=np.ones((2, 3), f32)),
     ["U", "3-D", "(2, 3)"]),
    ("1-D S", lambda: dict(x=np.ones((4, 8), f32), S=np.ones(8, f32), U=np.ones((2, 3), f32)),
     ["S", "(d_in, k) or (T, d_in, k)", "(8,)"]),
    ("4-D S", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((1, 1, 8, 2), f32), U=np.ones((1, 1, 2, 3), f32)),
     ["S", "(d_in, k) or (T, d_in, k)", "(1, 1, 8, 2)"]),
    ("0-d x", lambda: dict(x=np.ones((), f32), S=np.ones((1, 2), f32), U=np.ones((2, 3), f32)),
     ["x", "at least 1 dimension", "()"]),
    ("bias length", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                                 bias=np.ones(4, f32)), ["bias", "(3,)", "(4,)"]),
    ("2-D bias", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                              bias=np.ones((1, 3), f32)), ["bias", "(3,)", "(1, 3)"]),
    ("out shape", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                               out=np.ones((4, 4), f32)), ["out", "(4, 3)", "(4, 4)"]),
    ("out missing leading dim", lambda: dict(x=np.ones((2, 4, 8), f32), S=np.ones((8, 2), f32),
                                             U=np.ones((2, 3), f32), out=np.ones((8, 3), f32)),
     ["out", "(2, 4, 3)", "(8, 3)"]),
    ("unknown activation", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                                        activation="tanh"), ["activation", "'gelu_tanh'", "'tanh'"]),
    ("infinite scale", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                                    scale=float("inf")), ["scale", "finite", "inf"]),
    ("nan scale", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                               scale=float("nan")), ["scale", "finite", "nan"]),
]


TYPE_ERRORS = [
    ("list x", lambda: dict(x=[[1.0] * 8] * 4, S=np.ones((8, 2)), U=np.ones((2, 3))), ["x", "DLPack", "list"]),
    ("scalar S", lambda: dict(x=np.ones((4, 8)), S=3.0, U=np.ones((2, 3))), ["S", "DLPack", "float"]),
    ("None U", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2)), U=None), ["U", "DLPack", "NoneType"]),
    ("int64 x", lambda: dict(x=np.ones((4, 8), np.int64), S=np.ones((8, 2)), U=np.ones((2, 3))),
     ["x", "float16, bfloat16, float32 or float64", "int64"]),
    ("uint8 S", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2), np.uint8), U=np.ones((2, 3))),
     ["S", "float16, bfloat16, float32 or float64", "uint8"]),
    ("complex U", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2)), U=np.ones((2, 3), np.complex128)),
     ["U", "float16, bfloat16, float32 or float64", "complex128"]),
    ("bool bias", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2)), U=np.ones((2, 3)), bias=np.ones(3, bool)),
     ["bias", "float16, bfloat16, float32 or float64", "bool"]),
    ("mixed x/S", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f64), U=np.ones((2, 3), f32)),
     ["S", "float32", "float64"]),
    ("mixed bias", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                                bias=np.ones(3, f64)), ["bias", "float32", "float64"]),
    ("mixed out", lambda: dict(x=np.ones((4, 8), f32), S=np.ones((8, 2), f32), U=np.ones((2, 3), f32),
                               out=np.ones((4, 3), f64)), ["out", "float32", "float64"]),
    ("activation not a str", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2)), U=np.ones((2, 3)), activation=1),
     ["activation", "str", "int"]),
    ("scale not a number", lambda: dict(x=np.ones((4, 8)), S=np.ones((8, 2)), U=np.ones((2, 3)), scale="2"),
     ["scale", "real number", "str"]),
]


CASES = [(ValueError, *case) for case in VALUE_ERRORS] + [(TypeError, *case) for case in TYPE_ERRORS]


@pytest.mark.parametrize(("error", "case", "build", "fragments"), CASES, ids=[c[1] for c in CASES])
def test_bad_input_raises_an_error_naming_argument_expected_and_actual(error, case, build, fragments):
    kwargs = build()
    with pytest.raises(error) as info:
        sketchcore.sketched_matmul(**kwargs)
    assert type(info.value) is error  # not a subclass such as OverflowError
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


def test_read_only_out_is_refused_and_left_unchanged():
    x, S, U = arrays()
    out = np.full((4, 3), 7.0, f32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: expected a writable array, got a read-only one"):
        sketchcore.sketched_matmul(x, S, U, out=out)
    np.testing.assert_array_equal(out, 7.0)


def test_out_aliasing_an_input_is_refused():
    a = np.ones((8, 8), f32)
    with pytest.raises(ValueError, match="out: expected memory disjoint from x, got an array overlapping x"):
        sketchcore.sketched_matmul(a, np.ones((8, 2), f32), np.ones((2, 8), f32), out=a)
    buffer = np.zeros(64, f32)
    with pytest.raises(ValueError, match="overlapping bias"):
        sketchcore.sketched_matmul(np.ones((4, 8), f32), np.ones((8, 2), f32), np.ones((2, 8), f32),
                                   bias=buffer[:8], out=buffer[4:36].reshape(4, 8))


def test_out_with_repeated_elements_is_refused():
    x, S, U = arrays()
    out = np.broadcast_to(np.zeros(3, f32), (4, 3))
    # NumPy exports broadcast arrays as read-only; a producer that does not is caught by the core.
    with pytest.raises(ValueError, match="out: expected a writable array"):
        sketchcore.sketched_matmul(x, S, U, out=out)
    from _fake_dlpack import FakeProducer
    with pytest.raises(ValueError, match=r"out: expected an array whose elements do not share memory, got strides \(0, 1\)"):
        sketchcore.sketched_matmul(x, S, U, out=FakeProducer(out))


def test_errors_leave_the_library_usable():
    x, S, U = arrays(f64)
    for _ in range(3):
        with pytest.raises(ValueError):
            sketchcore.sketched_matmul(x, S, np.ones((3, 3)))
    np.testing.assert_allclose(sketchcore.sketched_matmul(x, S, U), np.full((4, 3), 16.0))


def test_set_num_threads_rejects_zero():
    with pytest.raises(ValueError, match="num_threads: expected an integer ≥ 1, got 0"):
        sketchcore.set_num_threads(0)
