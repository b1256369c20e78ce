"""The plan of a bench/gpu/run.sh call (``run.sh --plan``): what each step runs, its estimated
device seconds and where the estimate comes from, the running total against a device slot, and
how to split the steps into device-tool commands that each fit the per-command limit.

Estimates: the newest ``steps.tsv`` row with result ``ok`` of the step under the results folder
(any depth; run.sh writes one per run into OUTDIR, commit it with the run's logs), else the row of
``bench/gpu/estimates.tsv``, whose third column names the committed log it was read from, or says
that it is assumed. Standard library only: it runs wherever run.sh does.

    python bench/gpu/plan.py --steps "facts build tests" [--results bench/results] [--slot 900]
"""
from __future__ import annotations

import argparse
import pathlib
import sys
from typing import NamedTuple

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

#: What each step runs (shown in the plan; run.sh holds the commands themselves).
WHAT = {
    "facts": "versions, device, driver, commit",
    "wheels": "pip install the carried .whl/ files",
    "build": "pip install . with the CUDA backend (sm_90), then one CUDA call",
    "tests": "pytest -m gpu tests, twice: SKETCHCORE_CUDA_UNVERIFIED=0 (gate closed) and =1 (gate open)",
    "cpu_suite": "pytest -m 'not gpu' tests on the CUDA build",
    "sanitize": "compute-sanitizer memcheck/racecheck/synccheck on GEMM, sketch, Performer, padded-rank, stream tests",
    "bench": "bench/test_bench_gpu.py, test_bench_ranks.py -k gpu, test_bench_performer.py -k cuda (gate open)",
    "llm": "bench/llm_speed.py --preset gpu (gate open)",
    "pretrain": "bench/pretrain.py --preset gpu: CoLA pretraining, time to quality (gate open)",
    "profile": "bench/gpu/where_time_goes.py",
    "host": "bench/gpu/host_profile.py",
    "collect": "collect the GPU tests and benchmarks (DRY_RUN only)",
    "llm_plan": "bench/llm_speed.py --preset gpu --dry-run on the CPU (DRY_RUN only)",
}


class Estimate(NamedTuple):
    seconds: float
    source: str


def read_estimates(path: pathlib.Path) -> dict[str, Estimate]:
    """The committed table: step, seconds, source (tab-separated, # comments)."""
    table = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        step, seconds, source = line.split("\t", 2)
        table[step] = Estimate(float(seconds), source)
    return table


def read_measured(results: pathlib.Path) -> dict[str, Estimate]:
    """The newest passing row per step of the runs' steps.tsv files under `results`
    (columns: step, result, seconds, date, device; newest by date, then by path; rows of
    dry runs, device "no GPU ...", left out)."""
    rows = []
    for path in sorted(results.rglob("steps.tsv")) if results.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) < 5 or line.startswith("#") or fields[1] != "ok" or fields[4].startswith("no GPU"):
                continue  # failed, skipped, or a dry run's
            step, _, seconds, date, device = fields[:5]
            try:
                rows.append((date, str(path), step, float(seconds), device))
            except ValueError:
                continue
    measured = {}
    for date, path, step, seconds, device in sorted(rows):
        where = path.removeprefix(str(ROOT) + "/")
        measured[step] = Estimate(seconds, f"measured: {where} ({device}, {date})")
    return measured


def plan(steps: list[str], estimates: dict[str, Estimate], measured: dict[str, Estimate], limits: dict[str, int],
         slot: int, start: int, per_call: int, fill: float = 0.8) -> list[str]:
    """The plan's lines; commands are filled to `fill` of the per-command limit (the estimates
    are rough, and a command killed at the limit loses its step's results)."""
    lines = [f"plan for bench/gpu/run.sh: STEPS=\"{' '.join(steps)}\"",
             f"{'step':<10} {'est. s':>7} {'total s':>8} {'limit s':>8}  what it runs; where the estimate comes from"]
    total = float(start)
    lines.append(f"{'(start)':<10} {start:>7} {total:>8.0f} {'':>8}  a fresh machine's start (START_S)")
    calls, current, current_s = [], [], 0.0
    slot_marked = False
    for name in steps:
        estimate = measured.get(name) or estimates.get(name) or Estimate(float(limits[name]), "no estimate: its limit")
        total += estimate.seconds
        if total > slot and not slot_marked:
            lines.append(f"---------- the {slot} s slot (SLOT_S) ends during the next step ----------")
            slot_marked = True
        lines.append(f"{name:<10} {estimate.seconds:>7.0f} {total:>8.0f} {limits[name]:>8}  {WHAT.get(name, '')}; "
                     f"{estimate.source}")
        if current and current_s + estimate.seconds > fill * per_call:
            calls.append((current, current_s))
            current, current_s = [], 0.0
        current.append(name)
        current_s += estimate.seconds
    if current:
        calls.append((current, current_s))
    lines.append(f"total: {total:.0f} s of device time ({total / 60:.1f} min) for a {slot} s slot"
                 + ("" if total <= slot else f": {total - slot:.0f} s over, split it across slots"))
    lines.append(f"commands of at most {fill * per_call:.0f} s ({fill:.0%} of the device tool's {per_call} s limit per "
                 "command; one machine, kept warm):")
    for names, seconds in calls:
        flag = "" if seconds <= fill * per_call else f"  (over {fill * per_call:.0f} s alone: run it apart)"
        lines.append(f"  STEPS=\"{' '.join(names)}\" bash bench/gpu/run.sh OUTDIR   # ~{seconds:.0f} s{flag}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", required=True, help="the steps, space-separated, in run order")
    parser.add_argument("--results", default=str(ROOT / "bench" / "results"), help="where runs' steps.tsv lie")
    parser.add_argument("--estimates", default=str(HERE / "estimates.tsv"))
    parser.add_argument("--slot", type=int, default=900, help="device seconds of one slot")
    parser.add_argument("--start", type=int, default=90, help="device seconds a fresh machine's start costs")
    parser.add_argument("--per-call", type=int, default=600, help="the device tool's limit per command")
    parser.add_argument("--fill", type=float, default=0.8, help="the share of --per-call a planned command may fill")
    parser.add_argument("--limit", action="append", default=[], metavar="STEP=SECONDS",
                        help="a step's time limit (run.sh's TIMEOUT_STEP; default 600)")
    args = parser.parse_args(argv)
    steps = args.steps.split()
    unknown = [s for s in steps if s not in WHAT]
    if unknown:
        print(f"plan: unknown step(s) {', '.join(unknown)}; expected some of {' '.join(WHAT)}", file=sys.stderr)
        return 2
    limits = {name: 600 for name in WHAT}
    for item in args.limit:
        name, _, seconds = item.partition("=")
        limits[name] = int(seconds)
    lines = plan(steps, read_estimates(pathlib.Path(args.estimates)), read_measured(pathlib.Path(args.results)),
                 limits, args.slot, args.start, args.per_call, args.fill)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
