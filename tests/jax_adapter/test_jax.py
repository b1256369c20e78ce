"""sketchcore.jax: sketched_matmul as an XLA FFI custom call under jax.jit, jax.grad and
jax.vmap. Results are compared with the NumPy binding (the same core: bit-for-bit) and the
gradients with JAX's own autodiff of the formula in float64.

Skipped without JAX only: every sketchcore build has the handlers (CI runs this file with the
newest JAX and with the oldest supported, 0.5).
"""
import ctypes
import subprocess
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sketchcore

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import sketchcore.jax as sj  # noqa: E402 - must import wherever JAX does


def x64(enabled):
    """Float64 on or off within a block: ``jax.enable_x64`` in newer JAX, the experimental
    context manager in older ones (the oldest supported JAX, 0.5, is tested too)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax.experimental import enable_x64
    return enable_x64(enabled)


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
    with x64(dtype == np.float64):
        call = jax.jit(lambda x, S, U, b: sj.sketched_matmul(x, S, U, b, **kwargs))
        y = call(*(None if a is None else jnp.asarray(a) for a in (x, S, U, b)))
        assert y.dtype == dtype and y.shape == expected.shape
        np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize("activation", sketchcore.ACTIVATIONS)
@pytest.mark.parametrize("terms", [None, 2])
def test_grad_matches_jax_autodiff_of_the_formula_in_float64(rng, activation, terms):
    x, S, U, b = operands(rng, (7,), 9, 3, 5, terms)
    w = rng.standard_normal((7, 5))
    with x64(True):
        ours = jax.jit(jax.grad(lambda *a: (sj.sketched_matmul(*a, activation=activation, scale=0.5) * w).sum(),
                                argnums=(0, 1, 2, 3)))(x, S, U, b)
        reference = jax.grad(lambda *a: (formula(*a, activation, 0.5) * w).sum(), argnums=(0, 1, 2, 3))(x, S, U, b)
        for got, want in zip(ours, reference):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def test_grad_with_dropout_and_without_bias_is_the_cores_backward(rng):
    x, S, U, _ = operands(rng, (2, 6), 8, 3, 4, 2)
    w = rng.standard_normal((2, 6, 4))
    with x64(True):
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
    with x64(True):
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
    with x64(True), pytest.raises(error) as raised:
        jax.jit(lambda x, S, U, b: sj.sketched_matmul(x, S, U, b, activation=args["activation"],
                                                       dropout_p=args["dropout_p"], seed=args["seed"]))(
            args["x"], args["S"], args["U"], args["b"])
    assert message in str(raised.value)


def test_eager_out_on_a_jax_array_is_refused():
    x = jnp.zeros((2, 3), jnp.float32)
    with pytest.raises(TypeError, match="out: expected a mutable array"):
        sketchcore.sketched_matmul(np.zeros((2, 3), np.float32), np.zeros((3, 1), np.float32),
                                   np.zeros((1, 3), np.float32), out=x)


@pytest.mark.parametrize(("operands", "attributes", "message"), [
    (3, dict(activation="none", scale=1.0, dropout_p=0.0, seed=0, has_bias=False),
     "expected 4 operands and 2 results, got 3 and 2"),
    (4, dict(activation="none", scale=1.0, dropout_p=0.0, seed=0), "attribute has_bias is missing"),
    (4, dict(activation="none", scale=np.float32(1.0), dropout_p=0.0, seed=0, has_bias=False),
     "attribute scale: expected XLA type 12, got 11"),
    (4, dict(activation=3.0, scale=1.0, dropout_p=0.0, seed=0, has_bias=False), "attribute activation: expected kind"),
    (4, dict(activation="tanh", scale=1.0, dropout_p=0.0, seed=0, has_bias=False), "tanh"),
])
def test_a_malformed_custom_call_is_an_error_naming_what_is_wrong(operands, attributes, message):
    """What the handlers check themselves (jax.py never sends such calls): the frame's
    operand count, and each attribute's presence, kind and type."""
    f32 = jnp.zeros((2, 3), jnp.float32)
    args = [f32, jnp.zeros((3, 1), jnp.float32), jnp.zeros((1, 3), jnp.float32), jnp.zeros((0,), jnp.float32)]
    call = jax.ffi.ffi_call(sj._FORWARD, (jax.ShapeDtypeStruct((2, 3), jnp.float32),
                                          jax.ShapeDtypeStruct((2, 1), jnp.float32)))
    attrs = {k: (np.float64(v) if isinstance(v, float) else v) for k, v in attributes.items()}
    attrs = {k: (np.int64(v) if k == "seed" else np.bool_(v) if k == "has_bias" else v) for k, v in attrs.items()}
    with pytest.raises(Exception, match="INVALID_ARGUMENT") as raised:
        jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(*args[:operands]))
    assert message in str(raised.value)


def test_an_integer_buffer_is_refused_by_the_handler():
    ints = jnp.zeros((2, 3), jnp.int32)
    call = jax.ffi.ffi_call(sj._FORWARD, (jax.ShapeDtypeStruct((2, 3), jnp.int32),
                                          jax.ShapeDtypeStruct((2, 1), jnp.int32)))
    with pytest.raises(Exception, match=r"INVALID_ARGUMENT: .*(x|S|U|out|intermediate): expected float16, "
                                        r"bfloat16, float32 or float64, got XLA type 4"):
        jax.block_until_ready(call(ints, jnp.zeros((3, 1), jnp.int32), jnp.zeros((1, 3), jnp.int32),
                                   jnp.zeros((0,), jnp.int32), activation="none", scale=np.float64(1),
                                   dropout_p=np.float64(0), seed=np.int64(0), has_bias=np.bool_(False)))


def test_arrays_on_devices_without_a_handler_are_refused_naming_the_device(monkeypatch):
    """Checked on concrete arrays before tracing: a GPU array needs sketchcore's CUDA backend;
    other platforms have no handler. (Fake arrays: this machine has only the CPU.)"""
    class Placed:
        def __init__(self, platform):
            self.platform = platform

        def devices(self):
            return [types.SimpleNamespace(platform=self.platform)]

    monkeypatch.setattr(sj.jax, "Array", Placed)
    monkeypatch.setattr(sj, "_CUDA_BUILT", False)
    with pytest.raises(ValueError, match="x: is on a GPU, but this sketchcore was built without its CUDA backend"):
        sj._check_device("x", Placed("gpu"))
    with pytest.raises(ValueError, match=r"S: expected an array on the CPU or a CUDA GPU, got one on \['tpu'\]"):
        sj._check_device("S", Placed("tpu"))
    monkeypatch.setattr(sj, "_CUDA_BUILT", True)
    with sketchcore.gated_path("jax_cuda_handlers"):
        sj._check_device("U", Placed("gpu"))
    sj._check_device("bias", Placed("cpu"))


def test_gpu_arrays_need_the_gated_cuda_handlers_opened(monkeypatch):
    """The CUDA handlers have not yet run on a GPU: with the gated path closed a GPU array is
    refused, naming the path and the variable that opens it; CPU arrays never are."""
    class Placed:
        def __init__(self, platform):
            self.platform = platform

        def devices(self):
            return [types.SimpleNamespace(platform=self.platform)]

    monkeypatch.setattr(sj.jax, "Array", Placed)
    monkeypatch.setattr(sj, "_CUDA_BUILT", True)
    with sketchcore.gated_path("jax_cuda_handlers", False):
        with pytest.raises(RuntimeError, match=r"sketched_matmul: x: an array on a CUDA GPU: .*'jax_cuda_handlers'"
                                               r".*SKETCHCORE_CUDA_UNVERIFIED=1"):
            sj._check_device("x", Placed("gpu"))
        sj._check_device("x", Placed("cpu"))
    with sketchcore.gated_path("jax_cuda_handlers", True):
        sj._check_device("x", Placed("gpu"))


def test_without_jax_the_import_error_says_jax_is_missing():
    code = ("import sys; sys.modules['jax'] = None\n"
            "try:\n    import sketchcore.jax\nexcept ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "sketchcore.jax needs JAX, which is not installed" in out and "pip install jax" in out


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("major", ctypes.c_int), ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", ctypes.c_void_p),
                ("metadata", ctypes.POINTER(_Metadata))]


class _CallFrame(ctypes.Structure):  # only the head is read before the metadata is answered
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(_MetadataExtension)),
                ("api", ctypes.c_void_p), ("rest", ctypes.c_byte * 160)]


@pytest.mark.parametrize("handler", ["sketchcore_jax_cpu_forward", "sketchcore_jax_cpu_backward",
                                     "sketchcore_jax_cuda_forward", "sketchcore_jax_cuda_backward"])
def test_every_handler_reports_xla_ffi_api_0_1_which_every_jaxlib_since_0_5_accepts(handler):
    """XLA's metadata query, asked as XLA asks it: a handler reporting a newer minor version
    would be refused by older jaxlibs ("No FFI handler registered")."""
    metadata = _Metadata(struct_size=ctypes.sizeof(_Metadata), api_version=_ApiVersion(major=-1, minor=-1),
                         traits=99)
    extension = _MetadataExtension(struct_size=ctypes.sizeof(_MetadataExtension), type=1,
                                   metadata=ctypes.pointer(metadata))
    frame = _CallFrame(struct_size=ctypes.sizeof(_CallFrame), extension_start=ctypes.pointer(extension))
    function = getattr(sj._library, handler)
    function.restype, function.argtypes = ctypes.c_void_p, [ctypes.POINTER(_CallFrame)]
    assert function(ctypes.byref(frame)) is None  # no error
    version = metadata.api_version
    assert (version.major, version.minor, version.struct_size) == (0, 1, ctypes.sizeof(_ApiVersion))
    assert metadata.traits == 0  # not command-buffer compatible: temporaries come from sketchcore's pool
