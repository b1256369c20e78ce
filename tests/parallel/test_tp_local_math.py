"""The single-process math under the column and row styles (sketchcore.torch.parallel._layers): the
layer as one packed pair (A, B, scale) and its second product from z = x A, against the layer's
own forward, in float64, for random shapes, terms, ranks and activations (hypothesis). The
distributed behaviour is in test_tp_styles.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings, strategies as st  # noqa: E402

from sketchcore.torch import LowRankLinear, SKLinear  # noqa: E402
from sketchcore.torch.parallel import _layers as _tp_layers  # noqa: E402

ACTIVATIONS = st.sampled_from(["none", "relu", "gelu", "gelu_tanh", "silu"])


def _factors(layer):
    layout = _tp_layers.layout_of(layer)
    return {f.name: getattr(layer, f.name) for f in (*layout.input_side, *layout.output_side)}


def _split_forward(layer, x):
    A, B, scale = _tp_layers.packed_factors(layer, _factors(layer))
    return _tp_layers.second_product(layer, torch.matmul(x, A), B, scale, layer.bias)


@settings(max_examples=25, deadline=None)
@given(d_in=st.integers(1, 24), d_out=st.integers(1, 24), rank=st.integers(1, 8), rows=st.integers(0, 5),
       lead=st.integers(1, 3), activation=ACTIVATIONS, inner=ACTIVATIONS, bias=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_lowrank_split_equals_the_layer(d_in, d_out, rank, rows, lead, activation, inner, bias, seed):
    torch.manual_seed(seed)
    layer = LowRankLinear(d_in, d_out, rank, bias=bias, activation=activation, inner_activation=inner,
                          dtype=torch.float64)
    x = torch.randn(lead, rows, d_in, dtype=torch.float64)
    torch.testing.assert_close(_split_forward(layer, x), layer(x), rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(d_in=st.integers(1, 24), d_out=st.integers(1, 24), terms=st.integers(1, 3), low_rank=st.integers(1, 4),
       rows=st.integers(1, 5), activation=ACTIVATIONS, seed=st.integers(0, 2**31 - 1))
def test_sklinear_split_equals_the_layer(d_in, d_out, terms, low_rank, rows, activation, seed):
    torch.manual_seed(seed)
    with pytest.warns(UserWarning) if 2 * terms * low_rank * (d_in + d_out) > d_in * d_out else _nothing():
        layer = SKLinear(d_in, d_out, terms, low_rank, activation=activation, dtype=torch.float64, init="linear")
    x = torch.randn(rows, d_in, dtype=torch.float64)
    torch.testing.assert_close(_split_forward(layer, x), layer(x), rtol=1e-12, atol=1e-12)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_layout_of_other_modules_is_none():
    assert _tp_layers.layout_of(torch.nn.Linear(2, 2)) is None
    assert _tp_layers.rank_of(LowRankLinear(4, 4, 3)) == 3 and _tp_layers.rank_of(SKLinear(8, 8, 1, 2)) == 2
