"""Autocast regions on the eager path (sketchcore.torch.ops._eager): the layers cast their operands
as the operators' registered autocast kernels do (_ops.autocast_plan: floating-point tensors
other than float64 to the region's dtype, or, where the CPU would only widen them again, a
float32 computation whose output is rounded; autograd-recorded casts) and then make the eager
calls, one core call per direction, instead of going through the dispatcher. Output dtype,
gradient dtypes and values are those of the operator path. Both rules run on every CPU: the
tests set _ops._CPU_BF16_GEMM (the core's own choice of GEMM does not change the rule's
casts)."""
import copy

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
from sketchcore.torch.ops import _eager, _ops  # noqa: E402
from _reference import panther_reference  # noqa: E402

HALF = [torch.bfloat16, torch.float16]
#: Relative error of a 16-bit result against float64 (as tests/torch_adapters/test_torch_adapter.py's autocast test).
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
pytestmark = pytest.mark.filterwarnings("ignore:The sketching layer uses more parameters")


class CountingFastcall:
    """sketchcore._fastcall with its forward and backward core calls counted: the eager path's
    only ones (the operators go through the public functions instead). A call answering None
    (factors not joined in memory, so the caller concatenates them and calls again) ran no
    core computation and is not counted."""

    def __init__(self, fastcall):
        self._fastcall, self.forward_calls, self.backward_calls = fastcall, 0, 0

    def forward(self, *args, **kwargs):
        result = self._fastcall.forward(*args, **kwargs)
        self.forward_calls += result is not None
        return result

    def backward(self, *args, **kwargs):
        result = self._fastcall.backward(*args, **kwargs)
        self.backward_calls += result is not None
        return result


@pytest.fixture(params=[False, True], ids=["widening-cpu", "native-bf16-cpu"])
def native_bf16(request, monkeypatch):
    """Runs a test under both CPU rules: bfloat16 computed from widened operands (the float32
    computation runs, its output rounded) and with a native bfloat16 GEMM (operands cast)."""
    monkeypatch.setattr(_ops, "_CPU_BF16_GEMM", request.param)
    return request.param


def computes_in_float32(dtype):
    """Whether a CPU autocast region of `dtype` runs float32 inputs' computation in float32."""
    return dtype == torch.float16 or not _ops._CPU_BF16_GEMM


def eager_function(y):
    """The eager autograd Function's node behind y (through the output's rounding, if any)."""
    node = y.grad_fn
    if type(node).__name__ == "ToCopyBackward0":
        node = node.next_functions[0][0]
    return type(node).__name__


@pytest.fixture
def fastcall(monkeypatch):
    counting = CountingFastcall(_eager._fastcall)
    monkeypatch.setattr(_eager, "_fastcall", counting)
    return counting


def relative_error(a, b):
    return (torch.linalg.norm(a.double() - b.double()) / torch.linalg.norm(b.double())).item()


def float64_reference(layer, x, grad):
    """The layer's output and the gradients of ⟨grad, output⟩ for x, S1s, S2s, bias, in float64."""
    x64 = x.detach().double().requires_grad_()
    S1s, S2s, bias = (p.detach().double().requires_grad_() for p in (layer.S1s, layer.S2s, layer.bias))
    y = panther_reference(x64, S1s, S2s, layer.U1s.double(), layer.U2s.double(), bias)
    return y, torch.autograd.grad(y, (x64, S1s, S2s, bias), grad.double())


def layer_and_input(d_in, d_out, terms, rank, rows, seed):
    torch.manual_seed(seed)
    return sct.SKLinear(d_in, d_out, terms, rank), torch.randn(rows, d_in, requires_grad=True)


@settings(max_examples=8, deadline=None)
@given(d_in=st.integers(1, 40), d_out=st.integers(1, 40), terms=st.integers(1, 3), rank=st.integers(1, 6),
       rows=st.integers(1, 30), seed=st.integers(0, 2**31 - 1), dtype=st.sampled_from(HALF), native=st.booleans())
def test_sklinear_under_cpu_autocast_takes_the_eager_path_in_the_region_dtype(d_in, d_out, terms, rank, rows, seed,
                                                                             dtype, native):
    counting = CountingFastcall(_eager._fastcall)
    # hypothesis: no function-scoped fixture
    original, _eager._fastcall = _eager._fastcall, counting
    rule, _ops._CPU_BF16_GEMM = _ops._CPU_BF16_GEMM, native
    try:
        layer, x = layer_and_input(d_in, d_out, terms, rank, rows, seed)
        with torch.autocast("cpu", dtype=dtype):
            y = layer(x)
        assert y.dtype == dtype and eager_function(y) == "SKLinearBackward"
        grad = torch.randn(y.shape)
        y.float().backward(grad)
        assert (counting.forward_calls, counting.backward_calls) == (1, 1)
    finally:
        _eager._fastcall, _ops._CPU_BF16_GEMM = original, rule
    # The layer receives dL/dy rounded to the region's dtype (the backward of autocast's cast): so
    # does the reference, or the bias gradient (a sum over rows) inherits that rounding amplified
    # by cancellation (2.5 % at 5 rows in bfloat16 once).
    y64, grads64 = float64_reference(layer, x, grad.to(dtype))
    assert relative_error(y, y64) <= TOLERANCE[dtype]
    for got, want in zip((x.grad, layer.S1s.grad, layer.S2s.grad, layer.bias.grad), grads64):
        assert got.dtype == torch.float32  # float32 leaves get float32 gradients, as through the operator
        assert relative_error(got, want) <= TOLERANCE[dtype]
    assert layer.U1s.grad is None and layer.U2s.grad is None


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("path", ["eager", "operator"])
def test_the_rule_decides_the_dtype_of_the_computation(dtype, path, native_bf16):
    """Where the CPU only widens 16-bit operands again, float32 inputs are computed in float32
    and only y is rounded: y is bit for bit the float32 layer's output rounded, the gradients
    those of the float32 backward of the incoming gradient rounded as y was, and the eager
    Function keeps the caller's x (no 16-bit copy of it). With a native bfloat16 GEMM the
    operands are cast instead: y is the layer's on 16-bit copies of x and its parameters."""
    torch.manual_seed(9)
    layer = sct.SKLinear(40, 24, 2, 5, activation="gelu")
    twin = copy.deepcopy(layer)
    x = torch.randn(6, 40, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    grad = torch.randn(6, 24)
    with torch.autocast("cpu", dtype=dtype):
        if path == "eager":
            y = layer(x)
        else:
            y, _ = torch.ops.sketchcore.sklinear(x, layer.S1s, layer.S2s, layer.U1s, layer.U2s, layer.bias, "gelu", 0.0,
                                                 _eager.NO_SEED)
    assert y.dtype == dtype
    if not computes_in_float32(dtype):
        assert type(y.grad_fn).__name__ != "ToCopyBackward0"  # the Function's or the operator's own node
        torch.testing.assert_close(y, twin.to(dtype)(x_twin.detach().to(dtype)), rtol=0, atol=0)
        return
    assert type(y.grad_fn).__name__ == "ToCopyBackward0"
    if path == "eager":
        assert y.grad_fn.next_functions[0][0].saved_tensors[0].data_ptr() == x.data_ptr()
    y32 = twin(x_twin)
    torch.testing.assert_close(y, y32.to(dtype), rtol=0, atol=0)
    y.float().backward(grad)
    y32.backward(grad.to(dtype).float())
    for got, want in ((x.grad, x_twin.grad), (layer.S1s.grad, twin.S1s.grad), (layer.S2s.grad, twin.S2s.grad),
                      (layer.bias.grad, twin.bias.grad)):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", HALF)
def test_16_bit_inputs_keep_torchs_cast_rule(dtype, fastcall, native_bf16):
    """x already in 16 bits (the output of an earlier layer of the region): the factors are cast
    to the region's dtype under either rule, and the core widens them (or not) itself."""
    torch.manual_seed(10)
    layer = sct.SKLinear(24, 16, 2, 3)
    x = torch.randn(5, 24).to(dtype).requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        y = layer(x)
    assert y.dtype == dtype and type(y.grad_fn).__name__ == "SKLinearBackward"
    torch.testing.assert_close(y, copy.deepcopy(layer).to(dtype)(x.detach()), rtol=0, atol=0)
    y.float().sum().backward()
    assert x.grad.dtype == dtype and layer.S1s.grad.dtype == torch.float32
    assert (fastcall.forward_calls, fastcall.backward_calls) == (2, 1)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("activation", ["none", "gelu"])
def test_eager_autocast_equals_the_operators_autocast_kernel(dtype, activation, fastcall, native_bf16):
    """The same casts and the same core computation: bit for bit the operator's results."""
    torch.manual_seed(3)
    layer = sct.SKLinear(48, 40, 2, 4, activation=activation)
    twin = copy.deepcopy(layer)
    x = torch.randn(3, 7, 48, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    grad = torch.randn(3, 7, 40)
    with torch.autocast("cpu", dtype=dtype):
        y = layer(x)
        y_op, _ = torch.ops.sketchcore.sklinear(x_twin, twin.S1s, twin.S2s, twin.U1s, twin.U2s, twin.bias, activation,
                                                0.0, _eager.NO_SEED)
    assert y_op.dtype == y.dtype == dtype
    torch.testing.assert_close(y, y_op, rtol=0, atol=0)
    y.float().backward(grad)
    y_op.float().backward(grad)
    assert (fastcall.forward_calls, fastcall.backward_calls) == (1, 1)  # the operator does not use _fastcall
    for got, want in ((x.grad, x_twin.grad), (layer.S1s.grad, twin.S1s.grad), (layer.S2s.grad, twin.S2s.grad),
                      (layer.bias.grad, twin.bias.grad)):
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", HALF)
def test_sketched_linear_and_lowrank_follow_the_region_dtype_on_the_eager_path(dtype, fastcall, native_bf16):
    torch.manual_seed(4)
    x = torch.randn(6, 20, requires_grad=True)
    S = torch.randn(2, 20, 3, requires_grad=True)
    U = torch.randn(2, 3, 9, requires_grad=True)
    with torch.autocast("cpu", dtype=dtype):
        y = sct.sketched_linear(x, S, U, scale=0.5)
    assert y.dtype == dtype and eager_function(y) == "SketchedLinearBackward"
    grad = torch.randn(6, 9)
    y.float().backward(grad)
    assert x.grad.dtype == S.grad.dtype == U.grad.dtype == torch.float32
    x64, S64, U64 = (t.detach().double().requires_grad_() for t in (x, S, U))
    y64 = 0.5 * sum((x64 @ S64[t]) @ U64[t] for t in range(2))
    assert relative_error(y, y64) <= TOLERANCE[dtype]
    for got, want in zip((x.grad, S.grad, U.grad), torch.autograd.grad(y64, (x64, S64, U64), grad.double())):
        assert relative_error(got, want) <= TOLERANCE[dtype]
    lowrank = sct.LowRankLinear(20, 9, 4)
    with torch.autocast("cpu", dtype=dtype):
        assert lowrank(x).dtype == dtype
    assert (fastcall.forward_calls, fastcall.backward_calls) == (2, 1)


def test_float64_tensors_keep_their_dtype_under_autocast(fastcall):
    """torch's rule for matmuls: float64 is not cast (then the float32 factors, cast, no longer
    match x, as through the operator)."""
    torch.manual_seed(5)
    layer = sct.SKLinear(16, 12, 1, 3, dtype=torch.float64)
    x = torch.randn(4, 16, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y, layer(x), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(TypeError, match="S: expected dtype float64"):
        sct.SKLinear(16, 12, 1, 3)(x)


def test_an_autocast_region_of_another_device_leaves_cpu_calls_alone(fastcall):
    """CUDA autocast (enabled through torch's state, as a region would on a CUDA machine) does
    not cast CPU tensors: same float32 values as outside it, on the eager path."""
    torch.manual_seed(6)
    layer = sct.SKLinear(24, 16, 2, 3)
    x = torch.randn(5, 24)
    expected = layer(x)
    was, dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        y = layer(x)
    finally:
        torch.set_autocast_enabled("cuda", was)
        torch.set_autocast_dtype("cuda", dtype)
    assert y.dtype == torch.float32 and type(y.grad_fn).__name__ == "SKLinearBackward"
    torch.testing.assert_close(y, expected, rtol=0, atol=0)
    assert fastcall.forward_calls == 2


def test_no_cast_after_an_inner_region_disables_autocast(fastcall):
    torch.manual_seed(7)
    layer = sct.SKLinear(24, 16, 2, 3)
    x = torch.randn(5, 24)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autocast("cpu", enabled=False):
        y = layer(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, layer(x), rtol=0, atol=0)


def test_second_order_gradients_under_autocast_match_the_operator(native_bf16):
    """create_graph=True through the eager Function's composite backward, in the region's dtype."""
    torch.manual_seed(8)
    layer = sct.SKLinear(20, 12, 2, 3, activation="gelu")
    twin = copy.deepcopy(layer)
    x = torch.randn(4, 20, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        y_op, _ = torch.ops.sketchcore.sklinear(x_twin, twin.S1s, twin.S2s, twin.U1s, twin.U2s, twin.bias, "gelu",
                                                0.0, _eager.NO_SEED)
    (dx,) = torch.autograd.grad(y.float().square().sum(), x, create_graph=True)
    (dx_op,) = torch.autograd.grad(y_op.float().square().sum(), x_twin, create_graph=True)
    dx.square().sum().backward()
    dx_op.square().sum().backward()
    assert layer.S1s.grad.dtype == torch.float32
    torch.testing.assert_close(dx, dx_op, rtol=0, atol=0)
    torch.testing.assert_close(layer.S1s.grad, twin.S1s.grad, rtol=0, atol=0)


def test_torch_compile_under_autocast_follows_the_same_rule(native_bf16):
    """A compiled layer traces the operators' autocast kernel (_ops.autocast_plan): the same
    output, bit for bit, as the eager layer in the same region, under either CPU rule."""
    torch._dynamo.reset()  # the rule is read while tracing: no graph compiled under the other one
    torch.manual_seed(12)
    layer = sct.SKLinear(64, 32, 2, 4, activation="gelu")
    x = torch.randn(8, 64)
    compiled = torch.compile(layer, fullgraph=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y_eager = compiled(x), layer(x)
    assert y.dtype == y_eager.dtype == torch.bfloat16
    torch.testing.assert_close(y, y_eager, rtol=0, atol=0)
    if computes_in_float32(torch.bfloat16):
        torch.testing.assert_close(y, layer(x).to(torch.bfloat16), rtol=0, atol=0)
