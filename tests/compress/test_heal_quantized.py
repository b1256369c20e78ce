"""heal on a quantized model (issue 59, item 2: heal before the int8 quantization): the 8-bit
layers heal as float stand-ins and are quantized again afterwards; full-rank int8 layers come
back unchanged; the held-out error falls; a failed heal leaves every layer as it was."""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import sketchcore.torch as sct  # noqa: E402
from sketchcore.torch.compress._float_standins import float_standins  # noqa: E402


def spectrum_mlp(generator):
    """An MLP whose weights have decaying spectra (as trained ones do), so low rank costs a little."""
    model = nn.Sequential(nn.Linear(64, 192), nn.GELU(), nn.Linear(192, 64), nn.GELU(), nn.Linear(64, 64))
    with torch.no_grad():
        for layer in model[::2]:
            U, _, Vh = torch.linalg.svd(torch.randn(layer.weight.shape, generator=generator), full_matrices=False)
            decay = torch.arange(1, U.shape[1] + 1, dtype=torch.float32) ** -0.7
            layer.weight.copy_(U @ torch.diag(decay) @ Vh)
    return model.eval()


def relative_error(model, teacher, data):
    with torch.no_grad():
        return float(sum(torch.linalg.norm(model(x) - teacher(x)) ** 2 for x in data)
                     / sum(torch.linalg.norm(teacher(x)) ** 2 for x in data)) ** 0.5


def test_a_quantized_model_heals_and_is_quantized_again(rng):
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    teacher = spectrum_mlp(generator)
    model = copy.deepcopy(teacher)
    data = [torch.randn(64, 64, generator=generator) for _ in range(4)]
    held_out = [torch.randn(64, 64, generator=generator) for _ in range(2)]
    sct.sketch_model(model, bytes_ratio=0.12, calibration=data, allocation="global", quantize="int8")
    kinds = [type(m) for m in model]
    assert sct.Int8LowRankLinear in kinds
    full = [m for m in model if isinstance(m, sct.Int8Linear)]
    full_buffers = [{k: v.clone() for k, v in m.state_dict().items()} for m in full]
    before = relative_error(model, teacher, held_out)
    report = sct.heal(model, teacher, data, steps=60, progress=False)
    assert [type(m) for m in model] == kinds  # quantized again, in the same formats
    assert not model.training and all(not m.training for m in model)
    for m, buffers in zip(full, full_buffers):  # full-rank int8 layers come back as they were
        assert any(m is n for n in model)
        assert all(torch.equal(v, buffers[k]) for k, v in m.state_dict().items())
    assert report.losses[-1] < report.losses[0]
    assert relative_error(model, teacher, held_out) < before


def test_standins_compute_the_quantized_layers_maps_and_a_failure_restores_them(rng):
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = spectrum_mlp(generator)
    sct.sketch_model(model, low_rank=8, quantize="int8", exclude=["4"])
    model[4] = sct.Int8Linear.from_float(model[4])
    model.eval()
    x = torch.randn(16, 64, generator=generator)
    with torch.no_grad():
        quantized = model(x)
    layers = list(model)
    with pytest.raises(RuntimeError, match="stop"):
        with float_standins(model) as count:
            assert count == 3
            assert isinstance(model[0], sct.LowRankLinear) and isinstance(model[4], nn.Linear)
            with torch.no_grad():  # the float stand-ins compute the dequantized maps (the int8 path
                # also quantizes activations: within int8's error)
                error = torch.linalg.norm(model(x) - quantized) / torch.linalg.norm(quantized)
            assert error < 0.03
            raise RuntimeError("stop")
    assert all(a is b for a, b in zip(model, layers))  # a failure puts every layer back as it was


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_requantized_layers_keep_their_format(rng, fmt):
    # the format-generic layer must come back in its own format, not the class's default
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    model = nn.Sequential(sct.LowRankLinear(32, 32, rank=4), nn.GELU(), sct.LowRankLinear(32, 16, rank=4)).eval()
    model[0] = sct.QuantizedLowRankLinear.from_float(model[0], format=fmt)
    model[2] = sct.QuantizedLowRankLinear.from_float(model[2], format=fmt)
    with float_standins(model) as count:
        assert count == 2 and isinstance(model[0], sct.LowRankLinear)
        with torch.no_grad():
            model[0].S.add_(0.01 * torch.randn(model[0].S.shape, generator=generator))
    assert [type(m) for m in model[::2]] == [sct.QuantizedLowRankLinear] * 2
    assert [m.format for m in model[::2]] == [fmt, fmt]
