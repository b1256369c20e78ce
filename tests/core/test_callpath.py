"""The short call paths of issue 25, against float64 references: NumPy arrays borrowed through
the buffer protocol (and what still goes through DLPack), plain torch tensors borrowed onto
the stack by the public call and by the adapters' path (sketchcore._fastcall), the layers'
forward without an autograd node where nothing is recorded, SKLinear's factors joined in the
call or concatenated when not packed, and a first layer call that imports nothing heavy."""
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore
from _reference import assert_close, random_problem, reference

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
from sketchcore import _fastcall  # noqa: E402

CODES = _fastcall.ACTIVATION_CODES


# ---------------------------------------------------------------- NumPy through the buffer protocol


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_layouts_are_read_in_place_and_match_the_reference(rng, dtype):
    x, S, U, b = random_problem(rng, (9,), 14, 3, 7, terms=2, dtype=dtype)
    for view in (x, x[::-1], x[::2], np.asfortranarray(x), x[:0]):
        before = sys.getrefcount(view)
        y = sketchcore.sketched_matmul(view, S, U, bias=b, activation="relu")
        assert type(y) is np.ndarray and y.dtype == dtype
        assert sys.getrefcount(view) == before  # the buffer was released
        assert_close(y, reference(view, S, U, b, "relu"), dtype)


def test_numpy_float16_is_read_through_the_buffer_and_computed(rng):
    x, S, U, _ = random_problem(rng, (5,), 8, 2, 6, dtype=np.float32)
    y = sketchcore.sketched_matmul(*(a.astype(np.float16) for a in (x, S, U)))
    assert y.dtype == np.float16
    expected = reference(*(a.astype(np.float16).astype(np.float64) for a in (x, S, U)))
    assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 1e-2


def test_numpy_layouts_the_buffer_path_leaves_to_dlpack(rng):
    x, S, U, _ = random_problem(rng, (4,), 6, 2, 3, dtype=np.float64)
    swapped = x.astype(x.dtype.newbyteorder(">"))  # non-native byte order: DLPack refuses it
    with pytest.raises((BufferError, TypeError)):
        sketchcore.sketched_matmul(swapped, S, U)
    S1, U1 = S[:1].astype(np.float32), U.astype(np.float32)
    packed = np.zeros(4, dtype=[("a", np.float32), ("pad", np.uint8)])  # 5-byte strides for 4-byte items
    with pytest.raises(BufferError):
        sketchcore.sketched_matmul(packed["a"].reshape(4, 1), S1, U1)
    record = np.zeros(4, dtype=[("a", np.float32), ("b", np.float32)])
    record["a"] = x[:, 0]
    column = record["a"].reshape(4, 1)  # 8-byte strides: every other element, read in place
    assert_close(sketchcore.sketched_matmul(column, S1, U1), reference(column, S1, U1), np.float32)
    with pytest.raises(TypeError, match="x: expected a floating-point array"):
        sketchcore.sketched_matmul(x.astype(np.int32), S, U)


def test_read_only_numpy_inputs_are_read_and_read_only_out_is_refused(rng):
    x, S, U, _ = random_problem(rng, (4,), 6, 2, 3, dtype=np.float64)
    x.flags.writeable = False
    assert_close(sketchcore.sketched_matmul(x, S, U), reference(x, S, U), np.float64)
    out = np.empty((4, 3))
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: expected a writable array"):
        sketchcore.sketched_matmul(x, S, U, out=out)


def test_operands_that_do_not_fit_are_reported_by_the_core(rng):
    x, S, U, _ = random_problem(rng, (4,), 6, 2, 3, dtype=np.float64)
    with pytest.raises(ValueError, match="x: expected .*d_in = 5"):
        sketchcore.sketched_matmul(x, S[:5], U)
    with pytest.raises(ValueError, match="x: expected an array of shape"):
        sketchcore.sketched_matmul(np.array(1.0), S, U)
    with pytest.raises(ValueError, match="U: expected a 2-D array"):
        sketchcore.sketched_matmul(x, S, U[None])


# ---------------------------------------------------------------- torch: the public call and _fastcall


def test_public_torch_call_is_exact_and_still_refuses_tensors_that_require_grad(rng):
    x, S, U, b = (torch.from_numpy(a) for a in random_problem(rng, (2, 5), 12, 3, 7, terms=3, dtype=np.float64))
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="silu", scale=0.3)
    assert_close(y.numpy(), reference(x.numpy(), S.numpy(), U.numpy(), b.numpy(), "silu", 0.3), np.float64)
    negated = torch._neg_view(x)  # a lazily negated view: the values, not the raw memory
    assert_close(sketchcore.sketched_matmul(negated, S, U).numpy(), reference(-x.numpy(), S.numpy(), U.numpy()),
                 np.float64)
    with pytest.raises(BufferError, match="require"):
        sketchcore.sketched_matmul(x, S, U, bias=b.clone().requires_grad_())


@settings(max_examples=15, deadline=None)
@given(lead=st.lists(st.integers(0, 4), min_size=1, max_size=2), d_in=st.integers(1, 9), k=st.integers(1, 4),
       d_out=st.integers(1, 9), terms=st.sampled_from([None, 1, 3]), activation=st.sampled_from(sorted(CODES)),
       seed=st.integers(0, 2**32))
def test_fastcall_forward_and_backward_match_the_public_functions(lead, d_in, k, d_out, terms, activation, seed):
    rng = np.random.default_rng(seed)
    x, S, U, b = (torch.from_numpy(a).requires_grad_()
                  for a in random_problem(rng, tuple(lead), d_in, k, d_out, terms=terms, dtype=np.float64))
    y, z = _fastcall.forward(x, S, U, b, CODES[activation], 0.7, 0.0, 0, True)
    detached = [t.detach() for t in (x, S, U, b)]
    assert_close(y.numpy(), reference(*(t.numpy() for t in detached), activation, 0.7), np.float64)
    grad = torch.from_numpy(rng.standard_normal(y.shape))
    ours = _fastcall.backward(grad, x, S, U, z, b, CODES[activation], 0.7, 0.0, 0, True, True, True, True)
    public = sketchcore.sketched_matmul_backward(grad, *detached[:3], z, bias=detached[3], activation=activation,
                                                 scale=0.7)
    for mine, theirs in zip(ours, public):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0)


def test_fastcall_errors_name_the_argument(rng):
    x, S, U = (torch.from_numpy(a) for a in random_problem(rng, (4,), 6, 2, 3, dtype=np.float32)[:3])
    with pytest.raises(TypeError, match="S: expected a torch.Tensor"):
        _fastcall.forward(x, S.numpy(), U, None, 0, 1.0, 0.0, 0, False)
    with pytest.raises(ValueError, match="x: expected .*d_in = 6"):
        _fastcall.forward(x[:, :5], S, U, None, 0, 1.0, 0.0, 0, False)
    with pytest.raises(TypeError, match="U: expected .*dtype float32"):
        _fastcall.forward(x, S, U.double(), None, 0, 1.0, 0.0, 0, False)
    with pytest.raises(ValueError, match="dropout_p"):
        _fastcall.forward(x, S, U, None, 0, 1.0, 1.5, 0, False)


def test_fastcall_joins_consecutive_factors_and_declines_the_others():
    block = torch.randn(4, 6, 2, dtype=torch.float64)
    U = torch.randn(4, 2, 3, dtype=torch.float64)
    x = torch.randn(5, 6, dtype=torch.float64)
    joined = _fastcall.forward(x, block[:1], U[:1], None, 0, 0.5, 0.0, 0, False, block[1:], U[1:])
    torch.testing.assert_close(joined, _fastcall.forward(x, block, U, None, 0, 0.5, 0.0, 0, False))
    assert _fastcall.forward(x, block[:1], U[:1], None, 0, 0.5, 0.0, 0, False, block[2:], U[1:]) is None
    assert _fastcall.forward(x, block[:1], U[:1], None, 0, 0.5, 0.0, 0, False, block[1:].clone(), U[1:]) is None


# ---------------------------------------------------------------- the layers' eager paths


def _layers(dtype=torch.float64):
    torch.manual_seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sct.SKLinear(10, 7, 2, 2, activation="gelu", dtype=dtype), sct.LowRankLinear(10, 7, 3, dtype=dtype)


def test_forward_without_a_graph_equals_the_recorded_forward():
    x = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    for layer in _layers():
        recorded = layer(x)
        assert recorded.grad_fn is not None
        with torch.no_grad():
            plain = layer(x)
        with torch.inference_mode():
            inferred = layer(x.detach())
        assert plain.grad_fn is None and not plain.requires_grad
        torch.testing.assert_close(plain, recorded.detach(), rtol=0, atol=0)
        torch.testing.assert_close(inferred, recorded.detach(), rtol=0, atol=0)


def test_unpacked_sklinear_factors_are_concatenated_and_give_the_same_gradients():
    packed, _ = _layers()
    unpacked, _ = _layers()
    state = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in packed.state_dict().items()}
    unpacked.load_state_dict(state, assign=True)  # separate tensors: [S1s; U2s] is no view any more
    x = torch.randn(5, 10, dtype=torch.float64)
    for layer in (packed, unpacked):
        layer(x).square().sum().backward()
    for name in ("S1s", "S2s", "bias"):
        torch.testing.assert_close(getattr(unpacked, name).grad, getattr(packed, name).grad)


def test_layers_gradients_match_float64_autograd_of_their_math():
    sk, lr = _layers()
    x = torch.randn(6, 10, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(6, 7, dtype=torch.float64)
    S, U, b = (t.detach().clone().requires_grad_() for t in (lr.S, lr.U, lr.bias))
    x2 = x.detach().clone().requires_grad_()
    lr(x).backward(grad)
    (x2 @ S @ U + b).backward(grad)
    for mine, theirs in ((x.grad, x2.grad), (lr.S.grad, S.grad), (lr.U.grad, U.grad), (lr.bias.grad, b.grad)):
        torch.testing.assert_close(mine, theirs)
    x.grad = None
    S1, S2, bias = (t.detach().clone().requires_grad_() for t in (sk.S1s, sk.S2s, sk.bias))
    x3 = x.detach().clone().requires_grad_()
    sk(x).backward(grad)
    terms = sum(x3 @ S1[t] @ sk.U1s[t] + x3 @ sk.U2s[t] @ S2[t] for t in range(2)) / 4
    torch.nn.functional.gelu(terms + bias).backward(grad)
    for mine, theirs in ((x.grad, x3.grad), (sk.S1s.grad, S1.grad), (sk.S2s.grad, S2.grad), (sk.bias.grad, bias.grad)):
        torch.testing.assert_close(mine, theirs)
    assert sk.U1s.grad is None and sk.U2s.grad is None


def test_first_layer_call_imports_neither_dynamo_nor_scipy():
    script = ("import sys, torch, sketchcore.torch as sct\n"
              "for m in (sct.LowRankLinear(8, 8, 2), sct.SKLinear(8, 8, 1, 2)):\n"
              "    m(torch.randn(3, 8, requires_grad=True)).sum().backward()\n"
              "    with torch.no_grad(): m(torch.randn(3, 8))\n"
              "print(sorted(n for n in ('torch._dynamo', 'scipy', 'sympy') if n in sys.modules))\n")
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_sklinear_on_separate_factor_tensors_concatenates_them():
    """Factors that are not one block in memory (the functional API on the user's own tensors)
    are joined by copies, in the forward and again in the backward."""
    gen = torch.Generator().manual_seed(4)
    S1s, U2s = (torch.randn(2, 6, 3, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    U1s, S2s = (torch.randn(2, 3, 5, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    assert _fastcall.forward(x, S1s, U1s, None, 0, 0.25, 0.0, 0, False, U2s, S2s) is None  # not joined
    sct.sklinear(x, S1s, S2s, U1s, U2s).square().sum().backward()
    leaves = [t.detach().clone().requires_grad_() for t in (x, S1s, S2s, U1s, U2s)]
    xr, S1r, S2r, U1r, U2r = leaves
    (sum(xr @ S1r[t] @ U1r[t] + xr @ U2r[t] @ S2r[t] for t in range(2)) / 4).square().sum().backward()
    for mine, theirs in zip((x, S1s, S2s, U1s, U2s), leaves):
        torch.testing.assert_close(mine.grad, theirs.grad)


def test_outputs_too_large_to_allocate_are_named_by_the_core_first():
    o = torch.ones((), dtype=torch.float64)
    big = (o.expand(2**40, 1), o.expand(1, 8), o.expand(8, 2**40))
    with pytest.raises(ValueError, match="U: .*the output of"):
        _fastcall.forward(*big, None, 0, 1.0, 0.0, 0, False)
    with pytest.raises(ValueError, match="U: .*the output of"):
        sketchcore.sketched_matmul(*big)
