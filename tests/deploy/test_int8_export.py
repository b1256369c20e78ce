"""The int8 layers under torch.export, torch.compile and ONNX export (issue 60): the custom
operators ``sketchcore::int8_sketched_linear`` / ``int8_linear`` with their fake kernels, run in the
exported program and the compiled model bit for bit as eager; tiny config-built BERT and LLaMA
models after ``sketch_model(..., quantize="int8")``; the ONNX translations (standard ops only) run in
onnxruntime within the rounding of our own int8 path; the inference-only refusals."""
import copy
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import sketchcore  # noqa: E402
from sketchcore.torch import Int8Linear, Int8LowRankLinear, LowRankLinear, sketch_model  # noqa: E402
from sketchcore.torch.ops import _quantized_ops  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def int8_stack(seed, activation="relu", inner="gelu", bias=True):
    """Int8LowRankLinear (32 → 24, rank 8) then Int8Linear (24 → 16): both operators in one model."""
    torch.manual_seed(seed)
    low = LowRankLinear(32, 24, rank=8, bias=bias, activation=activation, inner_activation=inner).eval()
    dense = nn.Linear(24, 16, bias=bias).eval()
    return nn.Sequential(Int8LowRankLinear.from_float(low), Int8Linear.from_float(dense, activation="silu")).eval()


def inputs(rng, *shape):
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    x.view(-1, shape[-1])[0] = 0  # an all-zero row: codes 0, not a division by zero
    return x


def op_targets(graph):
    return [str(n.target) for n in graph.nodes if n.op == "call_function" and "sketchcore" in str(n.target)]


# --- torch.export --------------------------------------------------------------------------------------

@pytest.mark.parametrize("activation,inner,bias", [("relu", "gelu", True), ("none", "none", False),
                                                   ("gelu_tanh", "silu", True)])
def test_export_runs_the_operators_bit_for_bit_as_eager(rng, activation, inner, bias):
    model = int8_stack(int(rng.integers(2**31)), activation, inner, bias)
    x = inputs(rng, 2, 5, 32)
    with torch.no_grad():
        eager = model(x)
    ep = torch.export.export(model, (x,))
    assert op_targets(ep.graph) == ["sketchcore.int8_sketched_linear.default", "sketchcore.int8_linear.default"]
    assert torch.equal(ep.module()(x), eager)


def test_export_with_a_dynamic_batch_and_packing_once(rng, monkeypatch):
    model = int8_stack(int(rng.integers(2**31)))
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(model, (inputs(rng, 4, 32),), dynamic_shapes=({0: batch},))
    packed, factor = [], sketchcore.Int8Factor
    monkeypatch.setattr(sketchcore, "Int8Factor", lambda *a: packed.append(a) or factor(*a))
    program = ep.module()
    for rows in (3, 17, 3):
        x = inputs(rng, rows, 32)
        with torch.no_grad():
            assert torch.equal(program(x), model(x))
    assert len(packed) == 3  # S, U and W, once, though the program and the model are two callers


def test_export_of_a_half_precision_input_keeps_its_dtype(rng):
    model = int8_stack(int(rng.integers(2**31)))
    x = inputs(rng, 3, 32).to(torch.bfloat16)
    ep = torch.export.export(model, (x,))
    y = ep.module()(x)
    with torch.no_grad():
        assert y.dtype == torch.bfloat16 and torch.equal(y, model(x))


# --- torch.compile ----------------------------------------------------------------------------------------

def test_compile_with_inductor_matches_eager_bit_for_bit(rng):
    """Needs a C compiler (inductor): listed in needs_compiler in tools/wheels/build_and_test.sh."""
    model = int8_stack(int(rng.integers(2**31)))
    compiled = torch.compile(model, fullgraph=True)
    for rows in (5, 9):
        x = inputs(rng, rows, 32)
        with torch.no_grad():
            assert torch.equal(compiled(x), model(x))


def test_compile_traces_the_operators_into_one_graph(rng):
    from torch._dynamo.testing import AotEagerAndRecordGraphs
    model = int8_stack(int(rng.integers(2**31)))
    backend = AotEagerAndRecordGraphs()
    x = inputs(rng, 6, 32)
    with torch.no_grad():
        y = torch.compile(model, backend=backend, fullgraph=True)(x)
        assert torch.equal(y, model(x))
    assert op_targets(backend.fw_graphs[0].graph) == ["sketchcore.int8_sketched_linear.default",
                                                      "sketchcore.int8_linear.default"]


# --- tiny transformers models -----------------------------------------------------------------------------

def quantized(name):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "bert":
        config = transformers.BertConfig(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, max_position_embeddings=64)
        model, exclude = transformers.BertModel(config).eval(), []
    else:
        config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          use_cache=False)
        model, exclude = transformers.LlamaForCausalLM(config).eval(), ["lm_head"]
    float_model = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sketch_model(model, param_ratio=0.5, quantize="int8", exclude=exclude)
    assert any(isinstance(m, Int8LowRankLinear) for m in model.modules())
    return model.eval(), float_model


def output(model, ids):
    result = model(ids)
    return result.logits if hasattr(result, "logits") else result[0]


@pytest.fixture(scope="module")
def llama():
    return quantized("llama")


def test_tiny_bert_exports_as_eager(rng):
    model, _ = quantized("bert")
    ids = torch.from_numpy(rng.integers(1, 97, (2, 10)))
    with torch.no_grad():
        eager = output(model, ids)
    ep = torch.export.export(model, (ids,))  # under grad mode: the embeddings' output requires grad
    assert op_targets(ep.graph).count("sketchcore.int8_sketched_linear.default") >= 2 * 4
    with torch.no_grad():
        assert torch.equal(output(ep.module(), ids), eager)
    with pytest.raises(RuntimeError, match="inference only"):  # grad mode on, the embeddings trainable
        output(ep.module(), ids)


def test_tiny_llama_exports_and_compiles_as_eager(rng, llama):
    model, _ = llama
    ids = torch.from_numpy(rng.integers(1, 97, (2, 10)))
    with torch.no_grad():
        eager = output(model, ids)
        compiled = output(torch.compile(model, backend="aot_eager", fullgraph=True), ids)
    ep = torch.export.export(model, (ids,))
    assert op_targets(ep.graph).count("sketchcore.int8_sketched_linear.default") == 2 * 7
    with torch.no_grad():
        assert torch.equal(output(ep.module(), ids), eager)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


# --- the operators themselves -----------------------------------------------------------------------------

@settings(max_examples=15, deadline=None)
@given(lead=st.lists(st.integers(0, 4), min_size=0, max_size=2), d_in=st.integers(1, 40), rank=st.integers(1, 12),
       d_out=st.integers(1, 40), inner=st.sampled_from(ACTIVATIONS), seed=st.integers(0, 2**31))
def test_the_operator_and_the_eager_call_agree_on_any_shape(lead, d_in, rank, d_out, inner, seed):
    torch.manual_seed(seed)
    layer = Int8LowRankLinear.from_float(LowRankLinear(d_in, d_out, rank=rank, inner_activation=inner).eval())
    x = torch.randn(*lead, d_in)
    args = (x, layer.S_q, layer.S_scale, layer.U_q, layer.U_scale, layer.bias, "relu", inner)
    with torch.no_grad():
        y = torch.ops.sketchcore.int8_sketched_linear(*args)
        assert y.shape == (*lead, d_out) and torch.equal(y, _quantized_ops.int8_sketched_linear(*args))
        fake = torch.ops.sketchcore.int8_sketched_linear(x.to("meta"), *(t.to("meta") for t in args[1:6]), *args[6:])
        assert fake.shape == y.shape and fake.dtype == y.dtype


def test_the_operators_refuse_to_differentiate(rng):
    model = int8_stack(int(rng.integers(2**31)))
    x = inputs(rng, 3, 32).requires_grad_()
    program = torch.export.export(model, (x.detach(),)).module()
    for call in (program, lambda x: _quantized_ops.int8_linear(x, model[1].W_q, model[1].W_scale),
                 lambda x: torch.ops.sketchcore.int8_linear(x, model[1].W_q, model[1].W_scale, None, "none")):
        with pytest.raises(RuntimeError, match="inference only"):
            call(x if call is program else x[:, :24])
    with torch.no_grad():
        assert torch.equal(program(x), model(x.detach()))  # grad mode off: runs


def test_compile_keeps_the_layers_checks(rng):
    model = int8_stack(int(rng.integers(2**31)))
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        model.train()
        with pytest.raises(RuntimeError, match="expected eval mode"):
            compiled(inputs(rng, 2, 32))
        model.eval()
        with pytest.raises(ValueError, match=r"expected shape \(\.\.\., 32\), got \(2, 31\)"):
            compiled(inputs(rng, 2, 31))


# --- ONNX ---------------------------------------------------------------------------------------------------

def onnx_run(model, *args):
    """The model exported to ONNX with the int8 translations, run in onnxruntime, and its nodes' domains."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from sketchcore.torch.deploy import export_onnx  # torch.onnx.export with our translations merged in
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = export_onnx(model, args, verbose=False)
    proto = program.model_proto
    domains = {n.domain for n in proto.graph.node} | {f.domain for f in proto.functions}
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    outputs = session.run(None, feed)
    return outputs if len(outputs) > 1 else outputs[0], domains, [n.op_type for n in proto.graph.node]


def q8_step_bound(layer, z):
    """The most a sketched layer's output moves when every code of its intermediate z (rows × rank,
    float64) moves by one step (max|row|/127): Σ_k |U_q[k, j]| U_scale[j] per row and column."""
    step = z.abs().amax(-1, keepdim=True) / 127
    return step * (layer.U_q.double().abs().sum(0) * layer.U_scale.double())


class Layers(nn.Module):
    """The layers of two int8 stacks (other activations), each on its own input: one export."""

    def __init__(self, seed):
        super().__init__()
        self.first, self.second = int8_stack(seed, "relu", "gelu"), int8_stack(seed + 1, "gelu_tanh", "silu")

    def forward(self, x, h):
        return self.first[0](x), self.second[0](x), self.first[1](h), self.second[1](h)


def test_onnx_export_of_the_layers_runs_in_onnxruntime_as_our_int8_path(rng):
    """Bound: the graph quantizes exactly as the core (codes from the same float32 operations), so
    Int8Linear and the first product agree to float32 rounding (1e-5 relative to the output's scale).
    The intermediate z then differs by a few ulps, which can move one of its codes by one step where
    z·127/max lands at a half: the bound allows every code of z one step (q8_step_bound, the
    activations being at most 1.13-Lipschitz), and most outputs must agree to rounding."""
    model = Layers(int(rng.integers(2**31)))
    x, h = inputs(rng, 3, 7, 32), inputs(rng, 5, 24)
    got, domains, ops = onnx_run(model, x, h)
    assert domains == {""} and ops.count("MatMulInteger") == 6  # standard ONNX only
    with torch.no_grad():
        ours = model(x, h)
    for low, y, y_onnx in ((model.first[0], ours[0], got[0]), (model.second[0], ours[1], got[1])):
        z = x.double() @ low.dequantized_factors()[0].double()  # |σ(v)| ≤ |v|: bounds z's row maxima
        scale = float(y.abs().max())
        bound = 1.13 * q8_step_bound(low, z) + 1e-5 * scale
        diff = (torch.from_numpy(y_onnx).double() - y.double()).abs()
        assert bool((diff <= bound).all()), float((diff - bound).max())
        assert float((diff <= 1e-5 * scale).double().mean()) > 0.9  # the same arithmetic, not merely close
    for y, y_onnx in zip(ours[2:], got[2:]):
        torch.testing.assert_close(torch.from_numpy(y_onnx), y, rtol=1e-5, atol=1e-5 * float(y.abs().max()))


def test_onnx_export_of_a_tiny_llama_is_within_our_int8_error(rng, llama):
    model, float_model = llama
    ids = torch.from_numpy(rng.integers(1, 97, (1, 8)))
    got, domains, _ = onnx_run(model, ids)
    with torch.no_grad():
        ours, reference = output(model, ids).double(), output(float_model, ids).double()
    assert domains == {""}
    ours_error = float((ours - reference).norm() / reference.norm())
    onnx_error = float((torch.from_numpy(got).double() - ours).norm() / ours.norm())
    assert onnx_error < min(1e-3, 0.1 * ours_error), (onnx_error, ours_error)


def test_onnx_translation_refuses_an_unknown_activation():
    pytest.importorskip("onnxscript")
    from sketchcore.torch.deploy import _onnx_int8
    with pytest.raises(ValueError, match=r"activation: expected one of .* got 'tanh'"):
        _onnx_int8._activation(None, "tanh")
    from sketchcore.torch.deploy import onnx_translations
    assert set(_onnx_int8.TRANSLATIONS) == {torch.ops.sketchcore.int8_sketched_linear.default,
                                           torch.ops.sketchcore.int8_linear.default,
                                           torch.ops.sketchcore.fp8_sketched_linear.default}  # fp8: refuses
    assert all(onnx_translations()[target] is f for target, f in _onnx_int8.TRANSLATIONS.items())  # merged
