"""The inner activation through sketchcore.jax: jit, grad and vmap against JAX's own autodiff of
the formula σ(x S) U + b in float64 (independent of sketchcore's derivative formulas)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import sketchcore.jax as sj  # noqa: E402

_ACT = {"relu": jax.nn.relu, "gelu": lambda z: jax.nn.gelu(z, approximate=False),
        "gelu_tanh": lambda z: jax.nn.gelu(z, approximate=True), "silu": jax.nn.silu}


@pytest.fixture(autouse=True)
def _on_the_cpu():
    """The CPU handlers (on a machine with a GPU, JAX would place arrays there by default)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def _x64(enabled):
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax.experimental import enable_x64
    return enable_x64(enabled)


@pytest.mark.parametrize("inner", ["relu", "gelu", "gelu_tanh", "silu"])
def test_jit_grad_vmap_match_jax_autodiff(inner):
    with _x64(True):
        rng = np.random.default_rng(7)
        x = jnp.asarray(rng.standard_normal((3, 5, 11)))
        S = jnp.asarray(rng.standard_normal((2, 11, 3)))
        U = jnp.asarray(rng.standard_normal((2, 3, 6)))
        b = jnp.asarray(rng.standard_normal(6))

        def ours(x, S, U, b):
            return sj.sketched_matmul(x, S, U, b, scale=0.5, inner_activation=inner)

        def formula(x, S, U, b):
            return 0.5 * sum(_ACT[inner](x @ S[t]) @ U[t] for t in range(2)) + b

        np.testing.assert_allclose(jax.jit(ours)(x, S, U, b), formula(x, S, U, b), rtol=1e-12, atol=1e-12)
        loss = lambda f: (lambda *a: (f(*a) ** 2).sum())  # noqa: E731
        got = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2, 3)))(x, S, U, b)
        want = jax.grad(loss(formula), argnums=(0, 1, 2, 3))(x, S, U, b)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
        batched = jax.vmap(ours, in_axes=(0, None, None, None))(x, S, U, b)
        np.testing.assert_allclose(batched, formula(x, S, U, b), rtol=1e-12, atol=1e-12)


def test_unknown_inner_activation_is_refused():
    with pytest.raises(ValueError, match=r"inner_activation: expected one of .*got 'tanh'"):
        sj.sketched_matmul(jnp.ones((2, 3)), jnp.ones((3, 2)), jnp.ones((2, 4)), inner_activation="tanh")
