"""Benchmark plumbing: paired ratio measurements, their confidence intervals, and targets.

Every claim is a ratio measured in this run against a baseline on the same data. Each
comparison alternates warmed-up blocks of the two implementations, A B, B A, A B, ...:
a block first calls its function for at least 0.5 s (past the spin-wait of the other
library's threads — OpenBLAS's and torch's OpenMP threads keep spinning after a call and
were measured to slow the next library's first calls 2-10x for up to ~0.3 s — and into
steady state), then times consecutive calls (at least
`calls`, and enough to fill 50 ms) and keeps their median; a pair's ratio is baseline / sketchcore. Machine drift then hits
both sides of a pair alike. The median of the pair ratios is reported with a bootstrap
95% interval; a target is "met" when the median reaches it, "within noise" when only the
interval does, and MISSED (failing the session) when the whole interval lies below it.
"""
import statistics
import time

import numpy as np
import pytest

# (group, name, baseline) -> list of pair ratios
PAIRED: dict[tuple[str, str, str], list[float]] = {}
# (group, name, baseline) -> minimum ratio required
TARGETS: dict[tuple[str, str, str], float] = {}
# Other measured quantities with a bound: name -> (value, bound, unit, "≤" or "≥")
BOUNDS: dict[str, tuple[float, float, str, str]] = {}
# Measured quantities without a target, reported as they are: name -> text
INFO: dict[str, str] = {}


def median_confidence_interval(values, level=0.95, resamples=4000):
    """Percentile-bootstrap confidence interval of the median (fixed seed: reproducible)."""
    rng = np.random.default_rng(0)
    samples = rng.choice(np.asarray(values), size=(resamples, len(values)), replace=True)
    medians = np.median(samples, axis=1)
    return float(np.quantile(medians, (1 - level) / 2)), float(np.quantile(medians, (1 + level) / 2))


def _block(fn, calls, warm_s=0.5, timed_s=0.05):
    """Median time of `fn` after warming up; at least `calls` timed calls, more for fast
    functions so that a block times at least `timed_s` seconds."""
    start, warm = time.perf_counter(), 0
    while warm < 2 or time.perf_counter() - start < warm_s:
        fn()
        warm += 1
    per_call = (time.perf_counter() - start) / warm
    calls = max(calls, min(200, int(timed_s / max(per_call, 1e-9))))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@pytest.fixture
def paired(benchmark):
    """paired(group, name, baseline_name, fast, baseline, pairs, calls, target=None)."""

    def run(group, name, baseline_name, fast, baseline, pairs=7, calls=3, target=None):
        ratios, fast_s, base_s = [], [], []

        def one_pair():
            if len(ratios) % 2 == 0:
                tf, tb = _block(fast, calls), _block(baseline, calls)
            else:
                tb, tf = _block(baseline, calls), _block(fast, calls)
            fast_s.append(tf)
            base_s.append(tb)
            ratios.append(tb / tf)

        benchmark.group = f"{group} (paired blocks)"
        benchmark.name = f"{name} vs {baseline_name}"
        benchmark.pedantic(one_pair, rounds=pairs, iterations=1)
        key = (group, name, baseline_name)
        PAIRED[key] = ratios
        if target is not None:
            TARGETS[key] = target
        low, high = median_confidence_interval(ratios)
        benchmark.extra_info.update({
            "ratio_median": statistics.median(ratios), "ratio_ci95": [low, high],
            "ratio_min": min(ratios), "ratio_max": max(ratios), "target": target,
            "sketchcore_median_s": statistics.median(fast_s), "baseline_median_s": statistics.median(base_s)})
        return ratios

    return run


def _report():
    lines = []
    for key, ratios in PAIRED.items():
        group, name, baseline = key
        low, high = median_confidence_interval(ratios)
        median = statistics.median(ratios)
        line = (f"{group:<26} {name:<22} vs {baseline:<26} {median:6.2f}×  (95% CI {low:.2f}–{high:.2f}, "
                f"range {min(ratios):.2f}–{max(ratios):.2f}, {len(ratios)} pairs)")
        if key in TARGETS:
            t = TARGETS[key]
            verdict = "met" if median >= t else ("within noise" if high >= t else "MISSED")
            line += f"  target ≥ {t:.2f}×: {verdict}"
        lines.append(line)
    for name, text in INFO.items():
        lines.append(f"{name}: {text}")
    for name, (value, bound, unit, sense) in BOUNDS.items():
        ok = value <= bound if sense == "≤" else value >= bound
        lines.append(f"{name}: {value:.3g} {unit} (target {sense} {bound:g} {unit}): {'met' if ok else 'MISSED'}")
    return lines


def pytest_terminal_summary(terminalreporter):
    lines = _report()
    if lines:
        terminalreporter.section("sketchcore: ratios (baseline time / sketchcore time) and targets")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and any(line.endswith("MISSED") for line in _report()):
        session.exitstatus = 1
