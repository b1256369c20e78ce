"""A compressed ``nn.TransformerEncoder`` at inference, as users run it (issue 24).

The dense encoder runs in eval mode under ``torch.no_grad()``, where torch takes its fused
fast path (``torch._transformer_encoder_layer_fwd``). The compressed one has its feed-forward
layers (linear1, linear2) converted by ``sketch_model``; before sketchcore 0.2 that fast path
read their ``.weight`` and ran the dense kernel on it, bypassing the sketched layers (0 calls,
0.91–1.03× dense). Each measurement here counts the sketched calls (> 0 required) and reports
dense time / compressed time, alternated in blocks; target ≥ 1.0 (faster than dense).

Shapes: d_model 512, 8 heads, feed-forward 2048, 4 layers, batch 8 × 256 tokens, float32;
rank 64 (LowRankLinear, 12.5% of the feed-forward parameters) and SKLinear T 1 × k 32 (the
same rank 64 in two learned halves).
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import sketchcore.torch as sct  # noqa: E402
from conftest import INFO  # noqa: E402

D_MODEL, HEADS, FFN, LAYERS, BATCH, TOKENS = 512, 8, 2048, 4, 8, 256


def _encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("layer, size", [("lowrank", {"low_rank": 64}), ("sklinear", {"num_terms": 1, "low_rank": 32})])
def test_compressed_encoder_inference_vs_dense(paired, layer, size):
    dense = _encoder()
    compressed = _encoder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = sct.sketch_model(compressed, layer=layer, include=["*.linear1", "*.linear2"], **size)
    assert len(report) == 2 * LAYERS
    calls = []
    for module in compressed.modules():
        if isinstance(module, (sct.LowRankLinear, sct.SKLinear)):
            module.register_forward_hook(lambda *args: calls.append(1))
    x = torch.randn(BATCH, TOKENS, D_MODEL)

    def run_compressed():
        with torch.no_grad():
            compressed(x)

    def run_dense():
        with torch.no_grad():
            dense(x)

    run_compressed()
    assert len(calls) == 2 * LAYERS  # the sketched layers run, not torch's fused dense kernel
    ratios = paired("encoder inference", f"{layer} FFN", "dense fast path", run_compressed, run_dense, pairs=5,
                    calls=3, target=1.0)
    calls.clear()
    run_compressed()
    INFO[f"encoder {layer}: sketched calls in one eval/no_grad forward"] = f"{len(calls)} (of {2 * LAYERS} layers)"
    INFO[f"encoder {layer}: FFN parameters after / before"] = (
        f"{report.params_after:,} / {report.params_before:,}")
    assert ratios and len(calls) == 2 * LAYERS
