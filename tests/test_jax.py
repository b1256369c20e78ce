"""sketchcore.jax: sketched_matmul as an XLA FFI custom call under jax.jit, jax.grad and
jax.vmap. Results are compared with the NumPy binding (the same core: bit-for-bit) and the
gradients with JAX's own autodiff of the formula in float64.

Skipped without JAX, and (with a reason) where sketchcore was built without JAX's FFI headers.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
try:
    import sketchcore.jax as sj
except ImportError as error:  # built without the FFI headers: the import says so
    pytest.skip(str(error), allow_module_level=True)


@pytest.fixture(autouse=True)
def _on_the_cpu():
    """The handlers are registered for the CPU platform: on a machine with a GPU, where JAX
    would put arrays on the GPU by default, the tests place them on the CPU."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def operands(rng, lead, d_in, k, d_out, terms, dtype=np.float64):
    S = rng.standard_normal((terms, d_in, k) if terms else (d_in, k)) / np.sqrt(d_in)
    U = rng.standard_normal((terms, k, d_out) if terms else (k, d_out)) / np.sqrt(k)
    return [a.astype(dtype) for a in (rng.standard_normal((*lead, d_in)), S, U, rng.standard_normal(d_out))]


def formula(x, S, U, b, activation, scale):
    """The layer written with jnp operations (no dropout), for JAX's autodiff."""
    S3, U3 = (S[None], U[None]) if S.ndim == 2 else (S, U)
    h = scale * jnp.einsum("...i,tik,tko->...o", x, S3, U3) + (0 if b is None else b)
    return {"none": lambda v: v, "relu": jax.nn.relu, "gelu": lambda v: jax.nn.gelu(v, approximate=False),
            "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True), "silu": jax.nn.silu}[activation](h)


@settings(max_examples=12, deadline=None)
@given(lead=st.lists(st.integers(1, 5), min_size=1, max_size=2), d_in=st.integers(1, 12), k=st.integers(1, 4),
       d_out=st.integers(1, 9), terms=st.sampled_from([None, 1, 3]), activation=st.sampled_from(sketchcore.ACTIVATIONS),
       with_bias=st.booleans(), dropout_p=st.sampled_from([0.0, 0.4]), seed=st.integers(0, 2**64 - 1),
       dtype=st.sampled_from([np.float32, np.float64]), data_seed=st.integers(0, 2**32 - 1))
def test_jit_matches_the_numpy_binding_bit_for_bit(lead, d_in, k, d_out, terms, activation, with_bias, dropout_p,
                                                    seed, dtype, data_seed):
    x, S, U, b = operands(np.random.default_rng(data_seed), tuple(lead), d_in, k, d_out, terms, dtype)
    b = b if with_bias else None
    kwargs = dict(activation=activation, scale=0.7, dropout_p=dropout_p, seed=seed)
    expected = sketchcore.sketched_matmul(x, S, U, bias=b, **kwargs)
    with jax.enable_x64(dtype == np.float64):
        call = jax.jit(lambda x, S, U, b: sj.sketched_matmul(x, S, U, b, **kwargs))
        y = call(*(None if a is None else jnp.asarray(a) for a in (x, S, U, b)))
        assert y.dtype == dtype and y.shape == expected.shape
        np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize("activation", sketchcore.ACTIVATIONS)
@pytest.mark.parametrize("terms", [None, 2])
def test_grad_matches_jax_autodiff_of_the_formula_in_float64(rng, activation, terms):
    x, S, U, b = operands(rng, (7,), 9, 3, 5, terms)
    w = rng.standard_normal((7, 5))
    with jax.enable_x64(True):
        ours = jax.jit(jax.grad(lambda *a: (sj.sketched_matmul(*a, activation=activation, scale=0.5) * w).sum(),
                                argnums=(0, 1, 2, 3)))(x, S, U, b)
        reference = jax.grad(lambda *a: (formula(*a, activation, 0.5) * w).sum(), argnums=(0, 1, 2, 3))(x, S, U, b)
        for got, want in zip(ours, reference):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def test_grad_with_dropout_and_without_bias_is_the_cores_backward(rng):
    x, S, U, _ = operands(rng, (2, 6), 8, 3, 4, 2)
    w = rng.standard_normal((2, 6, 4))
    with jax.enable_x64(True):
        grads = jax.grad(lambda *a: (sj.sketched_matmul(*a, activation="silu", dropout_p=0.3, seed=9) * w).sum(),
                         argnums=(0, 1, 2))(x, S, U)
    z = np.empty((2, 6, 6))
    sketchcore.sketched_matmul(x, S, U, activation="silu", dropout_p=0.3, seed=9, intermediate=z)
    expected = sketchcore.sketched_matmul_backward(w, x, S, U, z, activation="silu", dropout_p=0.3, seed=9)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)


def test_vmap_over_x_and_over_the_factors_is_one_call_per_element(rng):
    x, S, U, b = operands(rng, (5, 4), 6, 2, 3, None)
    Ss = np.stack([S, 2 * S, -S])
    with jax.enable_x64(True):
        over_x = jax.vmap(lambda x: sj.sketched_matmul(x, S, U, b, dropout_p=0.5, seed=3))(x)
        over_S = jax.jit(jax.vmap(lambda S: sj.sketched_matmul(x, S, U, b, activation="relu"), in_axes=0))(Ss)
    for i in range(5):
        np.testing.assert_array_equal(np.asarray(over_x[i]),
                                      sketchcore.sketched_matmul(x[i], S, U, bias=b, dropout_p=0.5, seed=3))
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(over_S[i]), sketchcore.sketched_matmul(x, Ss[i], U, bias=b,
                                                                                        activation="relu"))


def test_bfloat16_stays_bfloat16_under_jit_and_grad(rng):
    x, S, U, b = (jnp.asarray(a, dtype=jnp.bfloat16) for a in operands(rng, (16,), 32, 4, 8, None))
    y = jax.jit(lambda *a: sj.sketched_matmul(*a, activation="gelu"))(x, S, U, b)
    assert y.dtype == jnp.bfloat16
    reference = formula(*(np.asarray(a, np.float64) for a in (x, S, U, b)), "gelu", 1.0)
    assert np.linalg.norm(np.asarray(y, np.float64) - reference) / np.linalg.norm(reference) < 2e-2
    dx = jax.grad(lambda x: sj.sketched_matmul(x, S, U, b).astype(jnp.float32).sum())(x)
    assert dx.dtype == jnp.bfloat16 and dx.shape == x.shape


@pytest.mark.parametrize(("change", "error", "message"), [
    (dict(S=np.zeros((5, 2), np.float32)), ValueError, "shapes do not chain"),
    (dict(U=np.zeros((3, 4), np.float32)), ValueError, "shapes do not chain"),
    (dict(S=np.zeros((2, 4, 2), np.float32)), ValueError, "U of S's rank"),
    (dict(b=np.zeros(3, np.float32)), ValueError, "bias: expected shape (4,), got (3,)"),
    (dict(S=np.zeros((4, 2), np.float64)), TypeError, "S: expected dtype float32 (x's), got float64"),
    (dict(x=np.zeros((3, 4), np.int32)), TypeError, "x: expected float16, bfloat16, float32 or float64, got int32"),
    (dict(activation="tanh"), ValueError, "activation: expected one of"),
    (dict(dropout_p=1.5), ValueError, "dropout_p: expected a probability in [0, 1], got 1.5"),
    (dict(seed=2**64), ValueError, "seed: expected an int in [0, 2**64)"),
    (dict(seed=-1), ValueError, "seed: expected an int in [0, 2**64)"),
])
def test_bad_arguments_are_refused_when_traced(change, error, message):
    args = dict(x=np.zeros((3, 4), np.float32), S=np.zeros((4, 2), np.float32), U=np.zeros((2, 4), np.float32),
                b=np.zeros(4, np.float32), activation="none", dropout_p=0.0, seed=0)
    args.update(change)
    with jax.enable_x64(True), pytest.raises(error) as raised:
        jax.jit(lambda x, S, U, b: sj.sketched_matmul(x, S, U, b, activation=args["activation"],
                                                       dropout_p=args["dropout_p"], seed=args["seed"]))(
            args["x"], args["S"], args["U"], args["b"])
    assert message in str(raised.value)


def test_eager_out_on_a_jax_array_is_refused():
    x = jnp.zeros((2, 3), jnp.float32)
    with pytest.raises(TypeError, match="out: expected a mutable array"):
        sketchcore.sketched_matmul(np.zeros((2, 3), np.float32), np.zeros((3, 1), np.float32),
                                   np.zeros((1, 3), np.float32), out=x)


@pytest.mark.gpu
def test_arrays_on_a_gpu_are_refused_with_a_clear_error():
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("no JAX GPU device")
    x = jax.device_put(jnp.zeros((2, 3), jnp.float32), gpu)
    with pytest.raises(ValueError, match=r"x: expected an array on the CPU .* got one on \['gpu'\]"):
        sj.sketched_matmul(x, jnp.zeros((3, 1), jnp.float32), jnp.zeros((1, 3), jnp.float32))
