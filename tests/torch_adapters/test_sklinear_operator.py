"""Panther's operator (sketchcore.torch.sklinear) and SKLinear as Panther's layer: the float64
formula, gradients for any subset of factors, opcheck, its refusals, the joined factor layout
that lets the forward copy nothing, and the functional form on NumPy."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
sct_ops = pytest.importorskip("sketchcore.torch.ops._ops")
import sketchcore  # noqa: E402
from _reference import panther_reference  # noqa: E402


@pytest.mark.parametrize("activation", ["none", "gelu"])
@pytest.mark.parametrize("grads_of", [("x", "S1s", "S2s", "bias"), ("S1s",), ("U1s", "U2s"), ("S2s", "U2s"),
                                      ("x", "S1s", "S2s", "U1s", "U2s", "bias")])
def test_gradcheck_panther_operator_for_any_subset_of_factors(activation, grads_of):
    # Every subset exercises another pair of term ranges in the core's backward.
    g = torch.Generator().manual_seed(2)
    names = ("x", "S1s", "S2s", "U1s", "U2s", "bias")
    shapes = ((2, 3, 9), (3, 9, 2), (3, 2, 5), (3, 2, 5), (3, 9, 2), (5,))
    values = {n: torch.randn(s, dtype=torch.float64, generator=g, requires_grad=n in grads_of)
              for n, s in zip(names, shapes)}
    seed = torch.tensor(7)

    def f(*args):
        return sct.sklinear(*args, activation=activation, dropout_p=0.25, seed=seed)

    assert torch.autograd.gradcheck(f, tuple(values[n] for n in names))


def test_panther_operator_matches_the_float64_formula():
    torch.manual_seed(3)
    x = torch.randn(6, 11, dtype=torch.float64)
    S1s, U2s = torch.randn(2, 2, 11, 4, dtype=torch.float64)
    S2s, U1s = torch.randn(2, 2, 4, 7, dtype=torch.float64)
    bias = torch.randn(7, dtype=torch.float64)
    torch.testing.assert_close(sct.sklinear(x, S1s, S2s, U1s, U2s, bias, activation="relu"),
                               torch.relu(panther_reference(x, S1s, S2s, U1s, U2s, bias)), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("shapes", "fragment"), [
    (((2, 9, 3), (2, 3, 5), (2, 3, 5), (9, 3)), "U2s: expected a 3-D tensor (T = 2, ., .) like S1s, got shape (9, 3)"),
    (((2, 9, 3), (1, 3, 5), (2, 3, 5), (2, 9, 3)), "S2s: expected a 3-D tensor (T = 2, ., .) like S1s"),
    (((2, 9, 3), (2, 3, 5), (2, 3, 4), (2, 9, 3)), "expected U2s shaped like S1s (2, 9, 3) and U1s like S2s (2, 3, 5)"),
])
def test_panther_operator_rejects_mismatched_factors(shapes, fragment):
    with pytest.raises(ValueError) as info:
        sct.sklinear(torch.ones(2, 9), *(torch.ones(s) for s in shapes))
    assert fragment in str(info.value)
    with pytest.raises(ValueError, match="sklinear: activation: expected one of"):
        sct.sklinear(torch.ones(2, 9), *(torch.ones(s) for s in ((1, 9, 3), (1, 3, 5), (1, 3, 5), (1, 9, 3))),
                     activation="tanh")


def _factors_share_memory(layer):
    return sct_ops._joined_in_place(layer.S1s, layer.U2s) and sct_ops._joined_in_place(layer.U1s, layer.S2s)


def test_layer_factors_are_joined_so_forward_copies_nothing():
    layer = sct.SKLinear(10, 6, 3, 2)
    assert _factors_share_memory(layer)
    joined = sct_ops._joined(layer.S1s, layer.U2s)
    assert joined.data_ptr() == layer.S1s.data_ptr() and joined.shape == (6, 10, 2)
    torch.testing.assert_close(joined, torch.cat([layer.S1s, layer.U2s]), rtol=0, atol=0)
    # Copies where the layout does not hold, with the same values.
    apart = sct_ops._joined(layer.S1s.detach().clone(), layer.U2s.clone())
    assert apart.data_ptr() != layer.S1s.data_ptr()
    torch.testing.assert_close(apart, joined, rtol=0, atol=0)


def test_layout_survives_conversion_optimiser_steps_and_loading():
    torch.manual_seed(12)
    layer = sct.SKLinear(10, 6, 2, 3)
    x = torch.randn(5, 10, dtype=torch.float64)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    layer(x.float()).sum().backward()
    opt.step()
    assert _factors_share_memory(layer)
    params = [id(p) for p in layer.parameters()]
    layer.double()
    assert _factors_share_memory(layer) and layer.S1s.dtype == torch.float64
    assert [id(p) for p in layer.parameters()] == params  # the optimiser's references stay valid
    expected = panther_reference(x, layer.S1s, layer.S2s, layer.U1s, layer.U2s, layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
    other = sct.SKLinear(10, 6, 2, 3, dtype=torch.float64)
    other.load_state_dict(layer.state_dict())
    assert _factors_share_memory(other)
    torch.testing.assert_close(other(x), expected, rtol=1e-12, atol=1e-12)
    assigned = sct.SKLinear(10, 6, 2, 3, dtype=torch.float64)
    assigned.load_state_dict({k: v.clone() if isinstance(v, torch.Tensor) else v
                              for k, v in layer.state_dict().items()}, assign=True)
    assert not _factors_share_memory(assigned)  # still correct, through one concatenation per call
    torch.testing.assert_close(assigned(x), expected, rtol=1e-12, atol=1e-12)


def test_opcheck_panther_operators():
    x = torch.randn(5, 8)
    S1s, U2s = torch.randn(2, 2, 8, 3)
    S2s, U1s = torch.randn(2, 2, 3, 4)
    b = torch.randn(4)
    seed = torch.tensor(5)
    fwd = torch.library.opcheck(torch.ops.sketchcore.sklinear.default,
                                (x, S1s.requires_grad_(), S2s.requires_grad_(), U1s, U2s, b, "relu", 0.2, seed))
    assert set(fwd.values()) == {"SUCCESS"}, fwd
    y, z = torch.ops.sketchcore.sklinear(x, S1s.detach(), S2s.detach(), U1s, U2s, b, "relu", 0.2, seed)
    for needs in ([True, True, True, False, False, True], [False, True, True, True, True, False]):
        bwd = torch.library.opcheck(torch.ops.sketchcore.sklinear_backward.default,
                                    (torch.ones_like(y), x, S1s.detach(), S2s.detach(), U1s, U2s, z, b, "relu", 0.2,
                                     seed, needs), test_utils=("test_schema", "test_faketensor"))
        assert set(bwd.values()) == {"SUCCESS"}, bwd


def test_sklinear_is_panthers_math_with_its_names_and_shapes():
    torch.manual_seed(3)
    layer = sct.SKLinear(20, 9, num_terms=3, low_rank=4, activation=None, dtype=torch.float64)
    names = dict(layer.named_parameters())
    assert set(names) == {"S1s", "S2s", "bias"}
    assert set(dict(layer.named_buffers())) == {"U1s", "U2s"}
    assert layer.S1s.shape == (3, 20, 4) and layer.S2s.shape == (3, 4, 9)
    assert layer.U1s.shape == (3, 4, 9) and layer.U2s.shape == (3, 20, 4)
    np.testing.assert_allclose(layer.U1s.abs().numpy(), 0.5)  # ±1/√k with k = 4
    x = torch.randn(2, 5, 20, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    ref_x = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s, layer.bias)]
    ref = panther_reference(ref_x, params[0], params[1], layer.U1s, layer.U2s, params[2])
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (ref * w).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad, rtol=1e-12, atol=1e-12)
    for p, r in zip((layer.S1s, layer.S2s, layer.bias), params):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-12, atol=1e-12)


def test_functional_sklinear_matches_the_module_and_works_on_numpy():
    torch.manual_seed(5)
    layer = sct.SKLinear(12, 7, 2, 3, dtype=torch.float64)
    x = torch.randn(4, 12, dtype=torch.float64)
    args = (layer.S1s.detach(), layer.S2s.detach(), layer.U1s, layer.U2s, layer.bias.detach())
    torch.testing.assert_close(sketchcore.sklinear(x, *args), layer(x).detach(), rtol=1e-13, atol=1e-13)
    y = sketchcore.sklinear(x.numpy(), *(a.numpy() for a in args), activation="relu")
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, np.maximum(panther_reference(x, *args[:4], args[4]).numpy(), 0), atol=1e-13)
    with pytest.raises(ValueError, match="same number of terms"):
        sketchcore.sklinear(x, args[0], args[1][:1], *args[2:])
