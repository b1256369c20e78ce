"""Benchmark plumbing: a registry of medians, the ratio table, and the targets.

Targets are ratios measured in this run against baselines on the same data, never
absolute times. A missed target fails the session with a message that says by how much.
"""
import statistics
import time

import numpy as np
import pytest

# (group, implementation) -> pytest-benchmark stats of that run
MEDIANS: dict[tuple[str, str], dict] = {}

# Paired ratio measurements: (group, name, baseline) -> per-pair baseline/sketchcore ratios
PAIRED: dict[tuple[str, str, str], list[float]] = {}

# The target: (group, implementation, baseline, minimum median of the paired ratios)
TARGETS = [
    ("4096x4096->4096 T4xk64", "sketchcore", "numpy (x@S)@U", 1.0),
]


@pytest.fixture
def record(benchmark):
    """Runs `fn` under pytest-benchmark after a pause (so another BLAS thread pool that was
    busy a moment ago has parked its spinning threads) and records its median."""

    def run(group, name, fn, rounds):
        benchmark.group = group
        benchmark.name = name
        benchmark.extra_info["implementation"] = name
        time.sleep(0.3)
        result = benchmark.pedantic(fn, rounds=rounds, warmup_rounds=2, iterations=1)
        stats = benchmark.stats.stats
        MEDIANS[(group, name)] = {"median": stats.median, "min": stats.min, "max": stats.max,
                                  "iqr": stats.iqr, "rounds": stats.rounds}
        return result

    return run


@pytest.fixture
def paired(benchmark):
    """Times `fast` and `baseline` alternately, pair by pair, pausing before each call, and
    records baseline/fast per pair. Alternation makes machine drift hit both sides alike;
    the pause lets the other BLAS pool's spinning threads park before a timed call."""

    def run(group, name, baseline_name, fast, baseline, pairs):
        ratios, fast_times, base_times = [], [], []

        def timed(fn):
            time.sleep(0.15)
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0

        def one_pair():
            # Alternate which side runs first, so an order effect cancels out.
            if len(ratios) % 2 == 0:
                tf, tb = timed(fast), timed(baseline)
            else:
                tb, tf = timed(baseline), timed(fast)
            fast_times.append(tf)
            base_times.append(tb)
            ratios.append(tb / tf)

        fast(), baseline()  # warm-up
        benchmark.group = f"{group} (paired)"
        benchmark.name = f"{name} vs {baseline_name}"
        benchmark.pedantic(one_pair, rounds=pairs, iterations=1)
        PAIRED[(group, name, baseline_name)] = ratios
        low, high = median_confidence_interval(ratios)
        benchmark.extra_info.update({
            "paired_ratio_median": statistics.median(ratios), "paired_ratio_ci95": [low, high],
            "paired_ratio_min": min(ratios),
            "paired_ratio_max": max(ratios), f"{name}_median_s": statistics.median(fast_times),
            f"{baseline_name}_median_s": statistics.median(base_times)})
        return ratios

    return run


def median_confidence_interval(values, level=0.95, resamples=4000):
    """Percentile-bootstrap confidence interval of the median (fixed seed: reproducible)."""
    rng = np.random.default_rng(0)
    samples = rng.choice(np.asarray(values), size=(resamples, len(values)), replace=True)
    medians = np.median(samples, axis=1)
    return float(np.quantile(medians, (1 - level) / 2)), float(np.quantile(medians, (1 + level) / 2))


def _ratio_rows():
    groups = sorted({g for g, _ in MEDIANS}, key=lambda g: list(MEDIANS).index((g, "sketchcore"))
                    if (g, "sketchcore") in MEDIANS else 0)
    for group in groups:
        base = MEDIANS.get((group, "sketchcore"))
        if not base:
            continue
        for (g, name), s in MEDIANS.items():
            if g == group and name != "sketchcore":
                yield group, name, s["median"] / base["median"], base, s


def pytest_terminal_summary(terminalreporter):
    if not MEDIANS and not PAIRED:
        return
    tr = terminalreporter
    tr.section("sketchcore speedups (baseline median / sketchcore median, same data, same run)")
    for group, name, ratio, base, other in _ratio_rows():
        spread = (base["max"] - base["min"]) / base["median"] * 100
        tr.write_line(f"{group:<28} vs {name:<24} {ratio:6.2f}×   "
                      f"(sketchcore {base['median'] * 1e3:8.2f} ms ±{spread:4.1f}% range, "
                      f"baseline {other['median'] * 1e3:8.2f} ms)")
    for line in _target_report():
        tr.write_line(line)


def _target_report():
    """A target is met when the median paired ratio reaches it, 'within noise' when only
    its 95% interval does, and MISSED when the whole interval lies below it."""
    lines = []
    for (group, fast, baseline), ratios in PAIRED.items():
        low, high = median_confidence_interval(ratios)
        lines.append(f"paired: {group}: {fast} vs {baseline}: median {statistics.median(ratios):.3f}× "
                     f"(95% CI {low:.3f}–{high:.3f}) over {len(ratios)} pairs "
                     f"(min {min(ratios):.3f}×, max {max(ratios):.3f}×)")
    for group, fast, baseline, minimum in TARGETS:
        ratios = PAIRED.get((group, fast, baseline))
        if ratios:
            median = statistics.median(ratios)
            low, high = median_confidence_interval(ratios)
            verdict = "met" if median >= minimum else ("within noise" if high >= minimum else "MISSED")
            lines.append(f"target {verdict}: {group}: {fast} vs {baseline} = {median:.3f}× "
                         f"(95% CI {low:.3f}–{high:.3f}; needs ≥ {minimum}×)")
    return lines


def pytest_sessionfinish(session, exitstatus):
    if any("MISSED" in line for line in _target_report()) and exitstatus == 0:
        session.exitstatus = 1
