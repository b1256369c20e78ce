"""Autograd beyond first order and TorchScript: double backward through both operators
(gradgradcheck in float64, a gradient penalty), scripting, saving and loading modules with
SKLinear and LowRankLinear, and tracing without warnings from sketchcore's own code."""
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")


@pytest.mark.parametrize("activation", ["none", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_sketched_linear_double_backward(activation, dropout_p):
    gen = torch.Generator().manual_seed(11)
    x, S, U, b = (torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
                  for shape in ((4, 6), (2, 6, 3), (2, 3, 5), (5,)))
    seed = torch.tensor(7)

    def f(x, S, U, b):
        return sct.sketched_linear(x, S, U, b, activation=activation, scale=0.7, dropout_p=dropout_p, seed=seed)

    assert torch.autograd.gradgradcheck(f, (x, S, U, b))


def test_sklinear_double_backward():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = sct.SKLinear(6, 5, 2, 2, activation="silu", dtype=torch.float64)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    leaves = [p.detach().clone().requires_grad_() for p in (layer.S1s, layer.S2s, layer.bias)]
    assert torch.autograd.gradgradcheck(
        lambda x, s1, s2, b: sct.sklinear(x, s1, s2, layer.U1s, layer.U2s, b, activation="silu"), (x, *leaves))


def test_gradient_penalty_matches_a_dense_composite():
    torch.manual_seed(0)
    layer = sct.LowRankLinear(8, 4, 3, activation="gelu", dtype=torch.float64)
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(layer(x).sum(), x, create_graph=True)
    penalty = gx.pow(2).sum()
    penalty.backward()
    S, U, b = (t.detach().clone().requires_grad_() for t in (layer.S, layer.U, layer.bias))
    x2 = x.detach().clone().requires_grad_()
    (gx2,) = torch.autograd.grad(torch.nn.functional.gelu(x2 @ S @ U + b).sum(), x2, create_graph=True)
    gx2.pow(2).sum().backward()
    torch.testing.assert_close(gx, gx2, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.S.grad, S.grad, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(layer.U.grad, U.grad, rtol=1e-9, atol=1e-12)


def test_modules_script_save_and_load():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.nn.Sequential(sct.SKLinear(16, 8, 1, 2, activation="relu", dropout=0.1),
                                    sct.LowRankLinear(8, 4, 2))
    scripted = torch.jit.script(model)
    x = torch.randn(3, 16)
    model.eval()
    scripted.eval()
    torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.jit.load(buffer)(x), model(x), rtol=0, atol=0)
    model.train()
    scripted.train()
    torch.manual_seed(3)
    eager = model(x)
    torch.manual_seed(3)
    torch.testing.assert_close(scripted(x), eager, rtol=0, atol=0)  # the same dropout seed is drawn


def test_trace_gives_no_tracer_warning():
    model = sct.LowRankLinear(8, 4, 2).eval()
    x = torch.randn(3, 8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, x)
    assert not [w for w in record if issubclass(w.category, torch.jit.TracerWarning)]
    torch.testing.assert_close(traced(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize(("terms", "k"), [(1, 8), (2, 16), (4, 4)])
def test_linear_init_matches_nn_linear_output_variance(terms, k):
    torch.manual_seed(1)
    x = torch.randn(512, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = sct.SKLinear(256, 192, terms, k, bias=False, init="linear")
        panther = sct.SKLinear(256, 192, terms, k, bias=False)
    dense = torch.nn.Linear(256, 192, bias=False)
    with torch.no_grad():
        ratio = float(layer(x).var() / dense(x).var())
        gain = float(panther(x).var() / dense(x).var())
    assert 0.85 <= ratio <= 1.15
    assert gain == pytest.approx(1 + (192 - 1) / (2 * terms * k), rel=0.2)  # Panther's, kept as the default
    with pytest.raises(ValueError, match="'linear' draws the factors for training from scratch"):
        sct.SKLinear(8, 8, 1, 2, W_init=torch.zeros(8, 8), init="linear")


def test_jax_out_is_refused_not_mutated():
    jnp = pytest.importorskip("jax.numpy")
    import numpy as np

    import sketchcore
    x, S, U = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    out = jnp.zeros((2, 5), jnp.float32)
    with pytest.raises(TypeError, match="out: expected a mutable array .* got a JAX array"):
        sketchcore.sketched_matmul(x, S, U, out=out)
    assert float(jnp.abs(out).sum()) == 0.0
    y = sketchcore.sketched_matmul(jnp.asarray(x), jnp.asarray(S), jnp.asarray(U))  # without out=: a new array
    np.testing.assert_allclose(np.asarray(y), x @ S @ U)


def _problem(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((4, 6), (2, 6, 3), (2, 3, 5), (5,)))


def _dense(x, S, U, b, activation):
    z = (x @ S.permute(1, 0, 2).reshape(S.shape[1], -1)) @ U.reshape(-1, U.shape[-1]) + b
    return {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu, "none": lambda z: z}[activation](z)


@pytest.mark.parametrize("activation", ["none", "gelu", "silu"])
def test_torch_func_grad_vjp_jacrev_jacfwd_hessian(activation):
    x, S, U, b = _problem()

    def f(x, S, U):
        return sct.sketched_linear(x, S, U, b, activation=activation)

    grads = torch.func.grad(lambda x, S, U: f(x, S, U).sum(), argnums=(0, 1, 2))(x, S, U)
    reference = torch.func.grad(lambda x, S, U: _dense(x, S, U, b, activation).sum(), argnums=(0, 1, 2))(x, S, U)
    for got, want in zip(grads, reference):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    cotangent = torch.randn(4, 5, dtype=torch.float64)
    (vx,) = torch.func.vjp(lambda x: f(x, S, U), x)[1](cotangent)
    torch.testing.assert_close(vx, torch.func.vjp(lambda x: _dense(x, S, U, b, activation), x)[1](cotangent)[0])
    row = x[0]
    for transform in (torch.func.jacrev, torch.func.jacfwd):
        torch.testing.assert_close(transform(lambda r: f(r, S, U))(row),
                                   transform(lambda r: _dense(r, S, U, b, activation))(row))
    torch.testing.assert_close(torch.func.hessian(lambda r: f(r, S, U).sum())(row),
                               torch.func.hessian(lambda r: _dense(r, S, U, b, activation).sum())(row))


def test_vmap_has_batching_rules_and_matches_a_loop():
    x, S, U, b = _problem(1)
    xs = torch.randn(3, 4, 6, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "performance drop" fallback warning
        batched = torch.func.vmap(lambda x: sct.sketched_linear(x, S, U, b))(xs)
        per_factor = torch.func.vmap(lambda S: sct.sketched_linear(x, S, U, b))(torch.stack([S, 2 * S]))
        seed = torch.tensor(5)
        dropped = torch.func.vmap(lambda x: sct.sketched_linear(x, S, U, b, dropout_p=0.5, seed=seed))(xs)
    torch.testing.assert_close(batched, torch.stack([sct.sketched_linear(xi, S, U, b) for xi in xs]))
    torch.testing.assert_close(per_factor[1], sct.sketched_linear(x, 2 * S, U, b))
    # vmap means "each element on its own": the same seed gives each element the mask it gets alone.
    torch.testing.assert_close(dropped, torch.stack([sct.sketched_linear(xi, S, U, b, dropout_p=0.5, seed=seed)
                                                     for xi in xs]))


@pytest.mark.parametrize("module", ["SKLinear", "LowRankLinear"])
def test_functional_call_gradients_of_modules(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = (sct.SKLinear(6, 5, 1, 2, dtype=torch.float64) if module == "SKLinear"
                 else sct.LowRankLinear(6, 5, 2, dtype=torch.float64))
    x = torch.randn(4, 6, dtype=torch.float64)
    grads = torch.func.grad(lambda p: torch.func.functional_call(layer, p, (x,)).pow(2).sum())(
        dict(layer.named_parameters()))
    layer(x).pow(2).sum().backward()
    for name, parameter in layer.named_parameters():
        torch.testing.assert_close(grads[name], parameter.grad, rtol=1e-10, atol=1e-12)
