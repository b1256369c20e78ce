"""ONNX export of the float layers (sketchcore.torch.export_onnx / onnx_translations): each layer kind
exported with torch's dynamo exporter, run in onnxruntime (CPU) and compared with the torch eval
output and, for the linear layers, a float64 formula written here; the graphs hold only standard
ONNX operators. Exports cost seconds each, so one export covers a whole grid of layers (a module
returning every layer's output) and is shared by the module's tests."""
import copy
import doctest
import math
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
import numpy as np  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

import sketchcore.torch as sct  # noqa: E402
from sketchcore.torch.deploy import _onnx, _onnx_float  # noqa: E402

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
STANDARD_DOMAINS = ("", "ai.onnx")


def f64_activation(z, name):
    """The activations in float64, written from their definitions."""
    if name == "relu":
        return z.clamp_min(0)
    if name == "gelu":
        return 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    if name == "silu":
        return z / (1 + torch.exp(-z))
    return z


def relative(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def standard_only(model_proto):
    """Every node (in the graph and in any local function) in the ONNX domain."""
    nodes = list(model_proto.graph.node) + [n for f in model_proto.functions for n in f.node]
    return [(n.domain, n.op_type) for n in nodes if n.domain not in STANDARD_DOMAINS]


def run(program, *inputs):
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: x.numpy() for n, x in zip(names, inputs)})


class Grid(torch.nn.Module):
    """Every module applied to the same inputs; returns their outputs as a tuple."""

    def __init__(self, modules):
        super().__init__()
        self.layers = torch.nn.ModuleList(modules)

    def forward(self, *inputs):
        outs = [layer(*inputs) for layer in self.layers]
        return tuple(o[0] if isinstance(o, tuple) else o for o in outs)


class Terms(torch.nn.Module):
    """The functional sketched_linear with T terms (3-D factors) and a scale."""

    def __init__(self, d_in, d_out, terms, k, activation, inner):
        super().__init__()
        self.S = torch.nn.Parameter(torch.randn(terms, d_in, k) / d_in ** 0.5)
        self.U = torch.nn.Parameter(torch.randn(terms, k, d_out) / k ** 0.5)
        self.bias = torch.nn.Parameter(torch.randn(d_out))
        self.activation, self.inner = activation, inner

    def forward(self, x):
        return sct.sketched_linear(x, self.S, self.U, self.bias, activation=self.activation, scale=0.5,
                                   inner_activation=self.inner)

    def f64(self, x):
        S, U, b = (t.detach().double() for t in (self.S, self.U, self.bias))
        z = sum(f64_activation(x.double() @ S[t], self.inner) @ U[t] for t in range(S.shape[0]))
        return f64_activation(0.5 * z + b, self.activation)


def lowrank_f64(layer, x):
    z = f64_activation(x.double() @ layer.S.detach().double(), layer.inner_activation) @ layer.U.detach().double()
    return f64_activation(z if layer.bias is None else z + layer.bias.detach().double(), layer.activation)


def sklinear_f64(layer, x):
    x = x.double()
    S1s, S2s, U1s, U2s = (t.detach().double() for t in (layer.S1s, layer.S2s, layer.U1s, layer.U2s))
    T = S1s.shape[0]
    z = sum((x @ S1s[t]) @ U1s[t] + (x @ U2s[t]) @ S2s[t] for t in range(T)) / (2 * T) + layer.bias.detach().double()
    return f64_activation(z, layer.activation)


# --- LowRankLinear, the functional operator with T terms, SKLinear: one export through the plain call ----

@pytest.fixture(scope="module")
def linear_grid():
    """Every activation × inner activation of LowRankLinear, one without bias, the functional
    operator with 3-D factors and a scale, SKLinear with 1-3 terms and every activation: exported
    by the plain ``torch.onnx.export(..., dynamo=True, custom_translation_table=onnx_translations())``."""
    torch.manual_seed(0)
    layers = [sct.LowRankLinear(12, 10, rank=4, activation=a, inner_activation=i)
              for a in ACTIVATIONS for i in ACTIVATIONS]
    layers.append(sct.LowRankLinear(12, 10, rank=3, bias=False, activation="gelu"))
    layers += [Terms(12, 10, 3, 2, a, i) for a, i in (("silu", "gelu_tanh"), ("none", "relu"))]
    with warnings.catch_warnings():  # "more parameters than a dense layer": small shapes on purpose
        warnings.simplefilter("ignore", UserWarning)
        layers += [sct.SKLinear(12, 10, num_terms=T, low_rank=2, activation=a)
                   for T, a in zip((1, 2, 3, 2, 1), ACTIVATIONS)]
    model = Grid(layers).eval()
    x = torch.randn(2, 3, 12)
    program = torch.onnx.export(model, (x,), dynamo=True, custom_translation_table=sct.onnx_translations(),
                                verbose=False)
    return model, x, program


def f64_reference(layer, x):
    if isinstance(layer, Terms):
        return layer.f64(x)
    return sklinear_f64(layer, x) if isinstance(layer, sct.SKLinear) else lowrank_f64(layer, x)


def test_linear_layers_match_torch_and_float64(linear_grid):
    model, x, program = linear_grid
    outs = run(program, x)
    assert len(outs) == len(model.layers)
    with torch.no_grad():
        for layer, out in zip(model.layers, outs):
            ref = f64_reference(layer, x)
            assert out.shape == tuple(ref.shape)
            assert relative(out, layer(x)) <= 1e-4, layer
            assert relative(out, ref) <= 1e-4, layer


def test_linear_graph_has_standard_operators_only(linear_grid):
    _, _, program = linear_grid
    assert standard_only(program.model_proto) == []
    ops = {n.op_type for n in program.model_proto.graph.node}
    assert {"MatMul", "Relu", "Erf", "Tanh", "Sigmoid"} <= ops
    targets = {n.target for n in program.exported_program.graph.nodes}  # the torch graph keeps our operators
    assert {torch.ops.sketchcore.sketched_linear.default, torch.ops.sketchcore.sklinear.default} <= targets


@settings(max_examples=2, deadline=None)
@given(d_in=st.integers(1, 24), d_out=st.integers(1, 24), rank=st.integers(1, 8),
       batch=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_lowrank_shapes(d_in, d_out, rank, batch):
    layer = sct.LowRankLinear(d_in, d_out, rank=rank, activation="silu", inner_activation="relu").eval()
    x = torch.randn(*batch, d_in)
    (out,) = run(sct.export_onnx(layer, (x,)), x)
    assert relative(out, lowrank_f64(layer, x)) <= 1e-4


def test_skconv2d_exports_as_convolutions():
    torch.manual_seed(2)
    layer = sct.SKConv2d(3, 8, kernel_size=3, num_terms=2, low_rank=2, padding=1).eval()
    x = torch.randn(2, 3, 7, 6)
    program = sct.export_onnx(layer, (x,))
    assert standard_only(program.model_proto) == []
    assert "Conv" in {n.op_type for n in program.model_proto.graph.node}
    with torch.no_grad():
        dense = torch.nn.functional.conv2d(x.double(), layer.weight.double(), layer.bias.double(), padding=1)
        assert relative(run(program, x)[0], layer(x)) <= 1e-4
    assert relative(run(program, x)[0], dense) <= 1e-4


# --- Performer attention: both kernels, causal or not, with and without a padding mask ---------------

class Attend(torch.nn.Module):
    def __init__(self, attention, masked):
        super().__init__()
        self.attention, self.masked = attention, masked

    def forward(self, q, kv, padding):
        return self.attention(q, kv, kv, key_padding_mask=padding if self.masked else None)[0]


@pytest.fixture(scope="module")
def performer_grid():
    torch.manual_seed(3)
    cases = [(kernel, causal, masked) for kernel in ("softmax", "relu") for causal in (False, True)
             for masked in (False, True)]
    layers = [Attend(sct.RandMultiHeadAttention(16, 2, num_random_features=12, kernel_fn=kernel, iscausal=causal,
                                                seed=i), masked) for i, (kernel, causal, masked) in enumerate(cases)]
    model = Grid(layers).eval()
    q, kv = 2.0 * torch.randn(2, 7, 16), 2.0 * torch.randn(2, 7, 16)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 4:] = True
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dims = {0: batch, 1: length}  # dynamic: the graph runs at other batch sizes and sequence lengths
    program = sct.export_onnx(model, (q, kv, padding), dynamic_shapes=((dims, dims, dims),))
    return cases, model, (q, kv, padding), program


def test_performer_matches_torch(performer_grid):
    cases, model, inputs, program = performer_grid
    with torch.no_grad():
        refs = model(*inputs)
    outs = run(program, *inputs)
    for case, out, ref in zip(cases, outs, refs):
        assert out.shape == tuple(ref.shape)
        assert relative(out, ref) <= 1e-4, case


def test_performer_runs_at_another_batch_and_length(performer_grid):
    cases, model, _, program = performer_grid
    q, kv = 2.0 * torch.randn(3, 12, 16), 2.0 * torch.randn(3, 12, 16)
    padding = torch.zeros(3, 12, dtype=torch.bool)
    padding[0, 9:] = True
    with torch.no_grad():
        refs = model(q, kv, padding)
    for case, out, ref in zip(cases, run(program, q, kv, padding), refs):
        assert out.shape == tuple(ref.shape) == (3, 12, 16)
        assert relative(out, ref) <= 1e-4, case


def test_performer_graph_has_standard_operators_only(performer_grid):
    _, _, _, program = performer_grid
    assert standard_only(program.model_proto) == []
    assert torch.ops.sketchcore.performer_attention.default in {
        n.target for n in program.exported_program.graph.nodes}


# --- transformers models after sketch_model ------------------------------------------------------------

def _transformers_model(name):
    """A tiny config-built model (no download): one layer of width 64 keeps the export short."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "bert":
        return transformers.BertModel(transformers.BertConfig(
            vocab_size=97, hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True, bos_token_id=0,
        eos_token_id=0)).eval()


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_transformers_model_after_sketch_model(name):
    model = _transformers_model(name)
    sct.sketch_model(model, param_ratio=0.5)
    assert any(isinstance(m, sct.LowRankLinear) for m in model.modules())
    ids = torch.randint(1, 97, (2, 10), generator=torch.Generator().manual_seed(4))
    program = sct.export_onnx(model, (ids,), kwargs={"use_cache": False} if name == "llama" else None)
    assert standard_only(program.model_proto) == []
    with torch.no_grad():
        ref = model(ids, use_cache=False).logits if name == "llama" else model(ids).last_hidden_state
    assert relative(run(program, ids)[0], ref) <= 1e-4


# --- the table, the helper's arguments and its errors ---------------------------------------------------

def test_onnx_translations_is_a_fresh_table_of_our_operators():
    table = sct.onnx_translations()
    for name in ("sketched_linear", "sklinear", "performer_attention"):
        assert getattr(torch.ops.sketchcore, name).default in table
    table.clear()
    assert sct.onnx_translations()  # a new dict each call


def test_user_table_entries_win_and_ours_are_merged(monkeypatch):
    captured = {}

    def fake_export(model, args, f, **kwargs):
        captured.update(kwargs, args=args, f=f)
        return "program"

    monkeypatch.setattr(torch.onnx, "export", fake_export)
    mine = object()
    target = torch.ops.sketchcore.sketched_linear.default
    layer = sct.LowRankLinear(6, 5, rank=2).eval()
    x = torch.randn(3, 6)
    assert sct.export_onnx(layer, x, "out.onnx", custom_translation_table={target: mine}, opset_version=20) == "program"
    table = captured["custom_translation_table"]
    assert table[target] is mine
    assert table[torch.ops.sketchcore.sklinear.default] is _onnx_float.sklinear
    assert captured["dynamo"] is True and captured["opset_version"] == 20
    assert captured["args"] == (x,) and captured["f"] == "out.onnx"


def test_dropout_left_on_is_refused_naming_eval():
    """A model exported in training mode keeps dropout_p > 0 in its operators: refused (the
    exporter wraps the ValueError in its ConversionError, message kept)."""
    with pytest.raises(ValueError, match=r"sketched_linear: dropout_p: expected 0 .*model\.eval\(\).*got 0.25"):
        _onnx_float.sketched_linear(None, None, None, dropout_p=0.25)
    with pytest.raises(ValueError, match=r"sklinear: dropout_p: expected 0 .*got 0.5"):
        _onnx_float.sklinear(None, None, None, None, None, dropout_p=0.5)


def test_export_onnx_argument_errors():
    layer = sct.LowRankLinear(6, 5, rank=2).eval()
    x = torch.randn(3, 6)
    with pytest.raises(TypeError, match=r"export_onnx: model: expected a torch.nn.Module, got function"):
        sct.export_onnx(lambda t: t, (x,))
    with pytest.raises(TypeError, match=r"export_onnx: args: expected a tuple of inputs or a Tensor, got list"):
        sct.export_onnx(layer, [x])
    with pytest.raises(TypeError, match=r"custom_translation_table: expected a dict or None, got list"):
        sct.export_onnx(layer, x, custom_translation_table=[])
    with pytest.raises(ValueError, match=r"export_onnx: dynamo: expected True .* got False"):
        sct.export_onnx(layer, x, dynamo=False)


def test_missing_optional_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript now raises ImportError
    with pytest.raises(ImportError, match=r"onnx_translations: expected the optional package 'onnxscript' "
                                          r"\(pip install 'sketchcore\[onnx\]'\)"):
        sct.onnx_translations()


def test_translation_errors():
    with pytest.raises(ValueError, match=r"activation: expected one of .* got 'tanh'"):
        _onnx_float.activation(None, "tanh")
    with pytest.raises(ValueError, match=r"performer_attention: kernel: expected 'softmax' or 'relu', got 'cos'"):
        _onnx_float.performer_attention(None, None, None, None, kernel="cos")
    with pytest.raises(ValueError, match=r"S: expected a tensor of known rank"):
        _onnx_float._rank(object(), "S")


@pytest.mark.parametrize("kind", ["lowrank", "sklinear", "int8"])
def test_legacy_exporter_is_refused_naming_the_supported_call(tmp_path, kind):
    """torch's TorchScript exporter (dynamo=False, deprecated) has no translations of our operators:
    the first one it traces raises naming dynamo=True and export_onnx (torch's own error named
    neither); see deploy/_onnx.py for why no legacy symbolics are registered."""
    layer = {"lowrank": lambda: sct.LowRankLinear(6, 5, rank=2),
             "sklinear": lambda: sct.SKLinear(6, 5, 1, 2),
             "int8": lambda: sct.Int8LowRankLinear.from_float(sct.LowRankLinear(6, 5, rank=2).eval())}[kind]().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception, match=r"sketchcore::\w+: expected torch's dynamo ONNX exporter, got the "
                                            r"TorchScript exporter .*export_onnx.*dynamo=True"):
            with torch.no_grad():
                torch.onnx.export(layer, (torch.randn(3, 6),), str(tmp_path / "legacy.onnx"), dynamo=False)
    # outside an ONNX export, tracing still runs the operator
    with torch.no_grad():
        traced = torch.jit.trace(layer, (torch.randn(3, 6),), check_trace=False)
        x = torch.randn(4, 6)
        assert torch.equal(traced(x), layer(x))


def test_docstring_examples():
    result = doctest.testmod(_onnx, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0
