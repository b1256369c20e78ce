"""sketchcore.jax on a CUDA device: the CUDA FFI handlers under jit, grad, vmap and inside a
jitted jax.lax.scan, on XLA's stream. Forward and backward are compared with the torch CUDA
path of the same core (bit for bit: same kernels, same cuBLASLt heuristic, TF32 off) and with
float64 references; bfloat16 stays bfloat16.

The CUDA handlers are the gated path jax_cuda_handlers: the tests open it, and
test_with_the_gate_closed_gpu_calls_are_refused checks the closed side (eager and jitted).

Every test here needs JAX with a CUDA device and a sketchcore built with its CUDA backend; it
is skipped without them (the CPU-only machine that runs CI has none).
"""
import numpy as np
import pytest

import sketchcore
from _reference import ACTIVATIONS, reference, relative_error

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import sketchcore.jax as sj  # noqa: E402


def _jax_gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


GPU = _jax_gpu()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(GPU is None or not sketchcore.build_info()["cuda"] or sketchcore.cuda_device_count() == 0,
                       reason="needs JAX on a CUDA device and sketchcore's CUDA backend"),
]
TOLERANCE = {np.float32: 1e-5, jnp.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def gate_open():
    with sketchcore.gated_path("jax_cuda_handlers", True):
        yield


def test_with_the_gate_closed_gpu_calls_are_refused(rng):
    x, S, U, _ = on_gpu(operands(rng, (4,), 16, 3, 8, None), np.float32)
    with sketchcore.gated_path("jax_cuda_handlers", False):
        with pytest.raises(RuntimeError, match=r"x: an array on a CUDA GPU: .*'jax_cuda_handlers'"):
            sj.sketched_matmul(x, S, U)
        # Traced: no device to check before lowering, so the handler itself refuses.
        with pytest.raises(Exception, match="sketchcore.jax on a CUDA device: .*'jax_cuda_handlers'"):
            jax.block_until_ready(jax.jit(sj.sketched_matmul)(x, S, U))
    y = jax.jit(sj.sketched_matmul)(x, S, U)  # open again: the same call runs
    assert relative_error(np.asarray(y, np.float64), np.asarray(x, np.float64) @ np.asarray(S, np.float64)
                          @ np.asarray(U, np.float64)) <= TOLERANCE[np.float32]


def x64(enabled):
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax.experimental import enable_x64
    return enable_x64(enabled)


def operands(rng, lead, d_in, k, d_out, terms):
    S = rng.standard_normal((terms, d_in, k) if terms else (d_in, k)) / np.sqrt(d_in)
    U = rng.standard_normal((terms, k, d_out) if terms else (k, d_out)) / np.sqrt(k)
    return rng.standard_normal((*lead, d_in)), S, U, rng.standard_normal(d_out)


def on_gpu(arrays, dtype):
    return [jax.device_put(jnp.asarray(a, dtype), GPU) for a in arrays]


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("the bit-for-bit comparison needs torch with CUDA")
    return torch


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("terms", [None, 3])
def test_jit_forward_on_the_gpu_is_the_torch_cuda_path_bit_for_bit(rng, activation, terms):
    torch = torch_cuda()
    x, S, U, b = operands(rng, (4, 33), 40, 5, 24, terms)
    kwargs = dict(activation=activation, scale=0.6, dropout_p=0.25, seed=2**63 + 5)
    ours = jax.jit(lambda *a: sj.sketched_matmul(*a, **kwargs))(*on_gpu((x, S, U, b), jnp.float32))
    assert set(ours.devices()) == {GPU} and ours.dtype == jnp.float32
    cuda = [torch.as_tensor(a, dtype=torch.float32, device="cuda") for a in (x, S, U, b)]
    theirs = sketchcore.sketched_matmul(cuda[0], cuda[1], cuda[2], bias=cuda[3], **kwargs)
    np.testing.assert_array_equal(np.asarray(ours), theirs.cpu().numpy())
    no_dropout = jax.jit(lambda *a: sj.sketched_matmul(*a, activation=activation, scale=0.6))(
        *on_gpu((x, S, U, b), jnp.float32))
    assert relative_error(np.asarray(no_dropout), reference(x, S, U, b, activation, 0.6)) < TOLERANCE[np.float32]


@pytest.mark.parametrize("activation", ["none", "gelu", "silu"])
def test_grad_on_the_gpu_is_the_torch_cuda_backward_and_matches_float64(rng, activation):
    torch = torch_cuda()
    x, S, U, b = operands(rng, (50,), 24, 4, 16, 2)
    w = rng.standard_normal((50, 16))
    loss = lambda *a: (sj.sketched_matmul(*a, activation=activation, scale=0.5) * w).sum()  # noqa: E731
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*on_gpu((x, S, U, b), jnp.float32))
    cuda = [torch.as_tensor(a, dtype=torch.float32, device="cuda") for a in (x, S, U, b)]
    z = torch.empty(50, 8, device="cuda")
    sketchcore.sketched_matmul(*cuda[:3], bias=cuda[3], activation=activation, scale=0.5, intermediate=z)
    expected = sketchcore.sketched_matmul_backward(torch.as_tensor(w, dtype=torch.float32, device="cuda"),
                                                   *cuda[:3], z, bias=cuda[3], activation=activation, scale=0.5)
    for got, want in zip(grads, expected):
        np.testing.assert_array_equal(np.asarray(got), want.cpu().numpy())
    with x64(True):
        exact = jax.grad(lambda *a: (sj.sketched_matmul(*a, activation=activation, scale=0.5) * w).sum(),
                         argnums=(0, 1, 2, 3))(*(jax.device_put(a, jax.devices("cpu")[0]) for a in (x, S, U, b)))
    for got, want in zip(grads, exact):
        assert relative_error(np.asarray(got), np.asarray(want)) < 1e-5


def test_bfloat16_on_the_gpu_stays_bfloat16_under_jit_and_grad(rng):
    x, S, U, b = operands(rng, (64,), 128, 8, 32, None)
    args = on_gpu((x, S, U, b), jnp.bfloat16)
    y = jax.jit(lambda *a: sj.sketched_matmul(*a, activation="gelu_tanh"))(*args)
    assert y.dtype == jnp.bfloat16
    rounded = [np.asarray(a, np.float64) for a in args]
    assert relative_error(np.asarray(y, np.float64), reference(*rounded, "gelu_tanh")) < TOLERANCE[jnp.bfloat16]
    dx = jax.jit(jax.grad(lambda x: sj.sketched_matmul(x, *args[1:]).astype(jnp.float32).sum()))(args[0])
    assert dx.dtype == jnp.bfloat16 and dx.shape == x.shape
    want = np.ones((64, 32)) @ (rounded[1] @ rounded[2]).T
    assert relative_error(np.asarray(dx, np.float64), want) < TOLERANCE[jnp.bfloat16]


def test_a_training_loop_in_jax_lax_scan_matches_the_same_steps_on_the_cpu(rng):
    """Eight SGD steps of a sketched layer inside one jitted lax.scan on the GPU (XLA may
    record the loop body's kernels into command buffers around the custom calls)."""
    x, S, U, b = operands(rng, (32,), 16, 4, 8, None)
    target = rng.standard_normal((32, 8))

    def train(S, U, b, x, target):
        def step(params, seed):
            loss = lambda p: ((sj.sketched_matmul(x, *p, activation="silu") - target) ** 2).mean()  # noqa: E731
            value, grads = jax.value_and_grad(loss)(params)
            return tuple(p - 0.1 * g for p, g in zip(params, grads)), value
        return jax.lax.scan(step, (S, U, b), jnp.arange(8))

    gpu_params, gpu_losses = jax.jit(train)(*on_gpu((S, U, b, x, target), jnp.float32))
    cpu = jax.devices("cpu")[0]
    cpu_params, cpu_losses = jax.jit(train)(*(jax.device_put(jnp.asarray(a, jnp.float32), cpu)
                                              for a in (S, U, b, x, target)))
    assert float(gpu_losses[-1]) < float(gpu_losses[0])
    np.testing.assert_allclose(np.asarray(gpu_losses), np.asarray(cpu_losses), rtol=1e-4)
    for g, c in zip(gpu_params, cpu_params):
        assert relative_error(np.asarray(g), np.asarray(c)) < 1e-4


def test_vmap_on_the_gpu_is_one_call_per_element(rng):
    x, S, U, b = operands(rng, (3, 10), 12, 3, 6, None)
    xs, Sg, Ug, bg = on_gpu((x, S, U, b), jnp.float32)
    batched = jax.jit(jax.vmap(lambda x: sj.sketched_matmul(x, Sg, Ug, bg, dropout_p=0.5, seed=11)))(xs)
    for i in range(3):
        one = jax.jit(lambda x: sj.sketched_matmul(x, Sg, Ug, bg, dropout_p=0.5, seed=11))(xs[i])
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(one))
