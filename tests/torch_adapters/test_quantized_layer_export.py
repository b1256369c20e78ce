"""The fp8 layer on the operator road (issue 60, issue 61 item 1): torch.export of a model holding
Fp8LowRankLinear (or QuantizedLowRankLinear(format="fp8")) traces on the CPU — the graph holds
``sketchcore::fp8_sketched_linear`` through its fake kernel, the binding never runs — with a dynamic
batch; the exported program refuses the CPU by name where it runs, as the eager layer does; the
eager int8 call still skips the dispatcher; ONNX export of an fp8 model raises, naming the way out."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import Fp8LowRankLinear, Int8LowRankLinear, LowRankLinear, QuantizedLowRankLinear  # noqa: E402
from sketchcore.torch.ops import _quantized_ops  # noqa: E402

CPU_REFUSAL = (r"sketchcore::fp8_sketched_linear: x: expected a tensor on a CUDA device \(fp8 factors run in "
               r"cuBLASLt .*\), got device cpu: .* quantize to 'int8' for the CPU")


def fp8_model(seed, named=True):
    """Embedding (trainable: the input of the 8-bit layer requires grad while export traces), a
    dense layer, then the fp8 layer."""
    torch.manual_seed(seed)
    low = LowRankLinear(32, 12, 6, activation="gelu", inner_activation="silu").eval()
    fp8 = Fp8LowRankLinear.from_float(low) if named else QuantizedLowRankLinear.from_float(low, format="fp8")
    return nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 32), fp8).eval()


def sketchcore_nodes(graph):
    return [n for n in graph.nodes if n.op == "call_function" and "sketchcore" in str(n.target)]


@pytest.fixture
def binding_never_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the fp8 binding ran while torch traced")
    monkeypatch.setattr(sketchcore, "fp8_sketched_matmul", refuse)
    monkeypatch.setattr(sketchcore, "Fp8Factor", refuse)


@pytest.mark.parametrize("named", [True, False])
def test_export_of_an_fp8_model_traces_on_the_cpu_without_running_it(rng, named, binding_never_runs):
    model = fp8_model(int(rng.integers(2 ** 31)), named)
    ids = torch.from_numpy(rng.integers(0, 50, (3, 7)))
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(model, (ids,), dynamic_shapes=({0: batch},))
    nodes = sketchcore_nodes(ep.graph)
    assert [str(n.target) for n in nodes] == ["sketchcore.fp8_sketched_linear.default"]
    x, S_q, S_scale, U_q, U_scale, bias, activation, inner = nodes[0].args
    assert (activation, inner) == ("gelu", "silu")
    fake = nodes[0].meta["val"]
    assert fake.dtype == torch.float32 and fake.shape[1:] == (7, 12)
    assert isinstance(fake.shape[0], torch.SymInt)  # the batch stays symbolic
    buffers = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if spec.target}
    assert [buffers[t.name] for t in (S_q, S_scale, U_q, U_scale, bias)] == \
        ["2.S_q", "2.S_scale", "2.U_q", "2.U_scale", "2.bias"]
    assert ep.state_dict["2.S_q"].dtype == torch.float8_e4m3fn


def test_the_exported_program_refuses_the_cpu_where_it_runs(rng):
    model = fp8_model(int(rng.integers(2 ** 31)))
    ids = torch.from_numpy(rng.integers(0, 50, (2, 5)))
    program = torch.export.export(model, (ids,)).module()
    with torch.no_grad(), pytest.raises(RuntimeError, match=CPU_REFUSAL):
        program(ids)
    with torch.no_grad(), pytest.raises(RuntimeError, match="Fp8LowRankLinear: x: expected a tensor on a CUDA "
                                                            "device .* got device cpu"):
        model(ids)  # the eager layer refuses first, naming itself


def test_meta_tensors_trace_the_fp8_layer_through_its_fake_kernel(binding_never_runs):
    layer = QuantizedLowRankLinear(32, 12, 6, format="fp8", device="meta").eval()
    with torch.no_grad():
        y = layer(torch.empty(4, 32, device="meta", dtype=torch.bfloat16))
    assert y.device.type == "meta" and y.shape == (4, 12) and y.dtype == torch.bfloat16


def test_an_eager_int8_call_skips_the_dispatcher(rng, monkeypatch):
    """Eager calls go straight to the binding: with no operator to call, the eager int8 layer still
    runs, and torch.export (which needs the operator) cannot."""
    torch.manual_seed(int(rng.integers(2 ** 31)))
    layer = Int8LowRankLinear.from_float(LowRankLinear(16, 8, 4).eval())
    x = torch.randn(3, 16)
    with torch.no_grad():
        expected = layer(x)
    monkeypatch.setattr(_quantized_ops, "_OPERATORS", {})
    with torch.no_grad():
        assert torch.equal(layer(x), expected)
    with pytest.raises(KeyError, match="int8"):
        torch.export.export(layer, (x,))


def test_onnx_export_of_an_fp8_model_raises_naming_the_way_out(rng):
    pytest.importorskip("onnxscript")
    from sketchcore.torch import export_onnx
    model = fp8_model(int(rng.integers(2 ** 31)))
    with pytest.raises(Exception, match=r"fp8_sketched_linear: expected layers with an ONNX translation, got an "
                                        r"fp8 layer .* quantize the model to 'int8'"):
        export_onnx(model, (torch.from_numpy(rng.integers(0, 50, (2, 5))),))
