"""sketch_model's plan and handlers: the plan is frozen and normalises its arguments, chooses
ranks that keep every layer smaller than dense and meet what the tolerance needs, and a handler
registered for another kind of layer converts it through sketch_model, its report rows built by
the named constructors."""
import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
sct = pytest.importorskip("sketchcore.torch")
from sketchcore.torch.compress import _handlers  # noqa: E402
from sketchcore.torch.compress._plan import ConversionPlan  # noqa: E402
from sketchcore.torch.compress._report import LayerReport  # noqa: E402


def test_the_plan_is_frozen_and_normalises_its_arguments():
    plan = ConversionPlan.of(tolerance=0.1, include=iter(["a*"]), exclude=["a.b"], layer_options={"activation": "relu"},
                             inner_activation="none")
    assert plan.layer == "lowrank" and plan.include == ("a*",) and plan.exclude == ("a.b",)
    assert dict(plan.layer_options) == {"activation": "relu", "inner_activation": "none"}
    assert plan.matches("a.c") and not plan.matches("a.b") and not plan.matches("c")
    assert ConversionPlan.of(num_terms=2, low_rank=4).layer == "sklinear"
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tolerance = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.layer_options["dropout"] = 0.1  # type: ignore[index]


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "expected exactly one of low_rank, tolerance, param_ratio and bytes_ratio"),
    ({"low_rank": 4, "layer": "dense"}, "layer: expected 'sklinear' or 'lowrank', got 'dense'"),
    ({"low_rank": 4, "layer": "sklinear", "num_terms": 0}, "num_terms: expected an integer ≥ 1"),
    ({"tolerance": 1.0}, r"tolerance: expected a number in \[0, 1\), got 1.0"),
    ({"param_ratio": 1.5}, r"param_ratio: expected a number in \(0, 1\]"),
    ({"low_rank": 4, "tied": "share"}, "tied: expected 'keep' or 'untie', got 'share'"),
    ({"low_rank": 4, "init": "random", "calibrated": True}, "calibration: expected None with init='random'"),
])
def test_the_plan_refuses_what_sketch_model_refuses(arguments, message):
    with pytest.raises(ValueError, match=message):
        ConversionPlan.of(**arguments)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 600), st.integers(1, 600), st.integers(1, 600), st.sampled_from([None, 1, 3]))
def test_a_tolerance_rank_meets_the_need_and_stays_smaller_than_dense(n_in, n_out, needed, terms):
    layer = "lowrank" if terms is None else "sklinear"
    plan = ConversionPlan.of(tolerance=0.1, num_terms=terms, layer=layer)
    rank, reason = plan.rank(n_in, n_out, layer, needed)
    per_unit = (n_in + n_out) * (terms or 1)
    total_needed = needed if terms is None else math.ceil(needed / (2 * terms))
    dense = n_in * n_out
    if "GPU kernels" in reason:  # no aligned rank (a multiple of 16) at or above the need fits under dense
        assert rank == 0 and total_needed >= 16 and math.ceil(total_needed / 16) * 16 * per_unit >= dense
    elif reason:
        assert rank == 0 and "not fewer parameters than dense" in reason and total_needed * per_unit >= dense
    else:
        assert rank >= total_needed and rank * per_unit < dense
        assert rank == total_needed if rank < 16 else rank % 16 == 0


class _DropoutHandler(_handlers.Handler):
    """A handler for another kind: nn.Dropout becomes nn.Identity (its rate recorded as the rank)."""

    def claims(self, module, plan):
        return type(module) is torch.nn.Dropout

    def select(self, name, module, plan, shared):
        if module.p == 0.5:
            return LayerReport.kept_dense(name, module, "p = 0.5 is kept")
        return _handlers.Job(name, module, self)

    def convert(self, job, plan, gram):
        new = torch.nn.Identity()
        return new, LayerReport.replacement(job.name, job.module, new, rank=int(job.module.p * 10), flops_before=0,
                                            flops_after=0, weight_error=0.0, in_features=1, out_features=1)


def test_a_registered_handler_converts_its_kind_through_sketch_model():
    handler = _DropoutHandler()
    _handlers.register_handler(handler)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(32, 24), torch.nn.Dropout(0.2), torch.nn.Linear(24, 8),
                                    torch.nn.Dropout(0.5))
        report = sct.sketch_model(model, low_rank=4)
    finally:
        _handlers._HANDLERS.remove(handler)
    assert type(model[1]) is torch.nn.Identity and type(model[3]) is torch.nn.Dropout
    assert list(report) == ["0", "2", "1"]  # the linear handler converts first: it was registered first
    row = report["1"]
    assert (row.kind, row.rank, row.params_before, row.params_after, row.reason) == ("Identity", 2, 0, 0, "")
    assert [(r.name, r.kind, r.reason) for r in report.kept] == [("3", "kept dense", "p = 0.5 is kept")]
    linear = report["0"]
    assert (linear.params_before, linear.params_after) == (32 * 24 + 24, 4 * (32 + 24) + 24)
    assert (linear.flops_before, linear.flops_after) == (2 * 32 * 24, 2 * 4 * (32 + 24))
