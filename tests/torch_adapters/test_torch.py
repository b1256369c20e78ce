"""PyTorch CPU tensors in, PyTorch tensors out, without copies."""
import numpy as np
import pytest

import sketchcore
from _reference import assert_close, random_problem, reference

torch = pytest.importorskip("torch")


def as_torch(*arrays):
    return [None if a is None else torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("terms", [None, 4])
def test_torch_in_torch_out_matches_reference(rng, dtype, terms):
    x, S, U, b = random_problem(rng, (3, 5), 24, 4, 10, terms=terms, dtype=dtype)
    tx, tS, tU, tb = as_torch(x, S, U, b)
    y = sketchcore.sketched_matmul(tx, tS, tU, bias=tb, activation="gelu", scale=0.5)
    assert isinstance(y, torch.Tensor)
    assert y.dtype == tx.dtype and y.device == tx.device and tuple(y.shape) == (3, 5, 10)
    assert_close(y.numpy(), reference(x, S, U, b, "gelu", 0.5), dtype)


def test_out_tensor_is_written_in_place(rng):
    x, S, U, b = random_problem(rng, (7,), 12, 3, 9, dtype=np.float32)
    tx, tS, tU, tb = as_torch(x, S, U, b)
    out = torch.empty(7, 9)
    pointer = out.data_ptr()
    result = sketchcore.sketched_matmul(tx, tS, tU, bias=tb, out=out)
    assert result is out and out.data_ptr() == pointer
    assert_close(out.numpy(), reference(x, S, U, b), np.float32)


def test_inputs_are_read_in_place(rng):
    from sketchcore._dlpack import borrow
    t = torch.randn(6, 10)[1:, 2:]  # a view with an offset and padded rows
    assert borrow(t).data_ptr == t.data_ptr()


def test_non_contiguous_tensors(rng):
    x, S, U, b = random_problem(rng, (8,), 16, 4, 6, terms=2, dtype=np.float64)
    tx = torch.from_numpy(np.asfortranarray(x))
    tx_t = torch.from_numpy(x.T.copy()).t()  # column-major view
    tS = torch.from_numpy(S).transpose(1, 2).contiguous().transpose(1, 2)
    for xx in (tx, tx_t, torch.from_numpy(np.repeat(x, 2, axis=1))[:, ::2]):
        y = sketchcore.sketched_matmul(xx, tS, torch.from_numpy(U), bias=torch.from_numpy(b))
        assert_close(y.numpy(), reference(x, S, U, b), np.float64)


def test_torch_and_numpy_can_be_mixed_output_follows_x(rng):
    x, S, U, _ = random_problem(rng, (2,), 5, 2, 3, dtype=np.float32, bias=False)
    assert isinstance(sketchcore.sketched_matmul(torch.from_numpy(x), S, U), torch.Tensor)
    assert isinstance(sketchcore.sketched_matmul(x, torch.from_numpy(S), torch.from_numpy(U)), np.ndarray)


@pytest.mark.parametrize(("dtype", "name"), [(torch.int32, "int32"), (torch.uint8, "uint8"),
                                             (torch.bool, "bool"), (torch.complex64, "complex64")])
def test_unsupported_torch_dtypes_raise_type_error(dtype, name):
    x = torch.ones(2, 3, dtype=dtype)
    with pytest.raises(TypeError, match=name):
        sketchcore.sketched_matmul(x, torch.ones(3, 1, dtype=dtype), torch.ones(1, 2, dtype=dtype))


def test_parameter_subclass_gives_a_tensor(rng):
    x = torch.nn.Parameter(torch.randn(3, 4), requires_grad=False)
    y = sketchcore.sketched_matmul(x, torch.randn(4, 2), torch.randn(2, 5))
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == (3, 5)
