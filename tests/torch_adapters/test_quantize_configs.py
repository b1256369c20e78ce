"""torchao's convention for quantize_: config objects (Int8Config, Fp8Config) beside the strings,
filter_fn(module, name), and Int8Config(dense=True) for the plain nn.Linear layers a conversion
left; sketch_model(quantize=...) takes the same objects."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sketchcore.torch import Int8Linear, Int8LowRankLinear, LowRankLinear, SKLinear, quantize_, sketch_model  # noqa: E402
from sketchcore.torch import Fp8Config, Int8Config  # noqa: E402


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(LowRankLinear(16, 12, 4), nn.ReLU(), SKLinear(12, 20, 1, 3), nn.GELU(), nn.Linear(20, 6))


def test_config_objects_and_strings_quantize_alike():
    a, b = _model(), _model()
    b.load_state_dict(a.state_dict())
    quantize_(a, "int8")
    quantize_(b, Int8Config())
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert torch.equal(a.eval()(x), b.eval()(x))
    assert [type(m) for m in a] == [type(m) for m in b] == [Int8LowRankLinear, nn.ReLU, Int8LowRankLinear, nn.GELU,
                                                             nn.Linear]


def test_dense_true_turns_the_plain_linears_into_int8_linear_and_matches_their_float64_product():
    model = _model()
    float_model = _model()
    float_model.load_state_dict(model.state_dict())
    quantize_(model, Int8Config(dense=True))
    assert isinstance(model[4], Int8Linear) and isinstance(model[0], Int8LowRankLinear)
    x = torch.randn(7, 16)
    model.eval()
    with torch.no_grad():
        hidden = model[:4](x)
        got = model[4](hidden).double()
        want = hidden.double() @ float_model[4].weight.double().t() + float_model[4].bias.double()
    # int8 weights (per-column scales) and int8 rows: a few per cent of the output's scale at most
    assert float((got - want).norm() / want.norm()) < 0.03


def test_filter_fn_sees_each_module_with_its_name_and_chooses():
    model = _model()
    seen = []

    def only_the_first(module: nn.Module, name: str) -> bool:
        seen.append((name, type(module).__name__))
        return name == "0"

    quantize_(model, Int8Config(dense=True), filter_fn=only_the_first)
    assert isinstance(model[0], Int8LowRankLinear) and isinstance(model[2], SKLinear) and type(model[4]) is nn.Linear
    assert ("2", "SKLinear") in seen and ("4", "Linear") in seen and ("1", "ReLU") in seen


def test_a_layer_shared_under_two_names_is_quantized_once():
    shared = LowRankLinear(8, 8, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    quantize_(model, Int8Config())
    assert model[0] is model[2] and isinstance(model[0], Int8LowRankLinear)


def test_errors_name_the_argument():
    model = _model()
    with pytest.raises(TypeError, match=r"quantize_: filter_fn: expected a callable \(module, name\) -> bool, got str"):
        quantize_(model, "int8", filter_fn="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got a Linear itself .* Int8Linear.from_float"):
        quantize_(nn.Linear(4, 4), Int8Config(dense=True))
    with pytest.raises(ValueError, match=r"quantize_: config: expected one of .* got <class .*Int8Linear'>"):
        quantize_(model, Int8Linear)  # type: ignore[arg-type]
    with pytest.warns(UserWarning, match="nothing was quantized: .* that filter_fn accepted"):
        quantize_(model, "int8", filter_fn=lambda module, name: False)
    with pytest.warns(UserWarning, match="holds no LowRankLinear or SKLinear or nn.Linear layer"):
        quantize_(nn.Sequential(nn.ReLU()), Int8Config(dense=True))
    assert type(model[0]) is LowRankLinear  # refused calls changed nothing


def test_sketch_model_takes_config_objects_and_refuses_dense_true():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    report = sketch_model(model, low_rank=4, exclude=["2"], quantize=Int8Config())
    assert isinstance(model[0], Int8LowRankLinear) and report.replaced["0"].quantize == "int8"
    with pytest.raises(ValueError, match=r"sketch_model: quantize: Int8Config\(dense=True\) .* quantize_\(model, "
                                         r"Int8Config\(dense=True\)\)"):
        sketch_model(nn.Sequential(nn.Linear(8, 8)), low_rank=2, quantize=Int8Config(dense=True))
    assert Fp8Config().format == "fp8" and Int8Config().format == "int8"
    with pytest.raises(AttributeError):
        Int8Config().dense = True  # type: ignore[misc]  # frozen: a config is a value
