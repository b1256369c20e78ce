"""bench/gpu/run.sh, the device runner, on this CPU machine: its --plan (steps in order, each
estimate and where it comes from, the running total against a slot, the split into commands
within the device tool's limit, estimates replaced by committed runs' steps.tsv), its per-step
report and results folder in a DRY_RUN, and — with stand-ins for nvidia-smi and Python — that
its tests step runs the GPU tests with the gated paths closed and open."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNNER = ROOT / "bench" / "gpu" / "run.sh"
DEFAULT = ["wheels", "facts", "build", "tests", "cpu_suite", "sanitize", "bench", "llm", "pretrain", "profile"]
ROW = re.compile(r"^(\w+)\s+(\d+)\s+(\d+)\s+(\d+)  (.*)$")


def runner(*args, env=None, **extra):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("STEPS", "DRY_RUN", "CPU_SUITE",
                                                                           "TIMEOUT_", "SLOT_S", "START_S"))}
    environment.update({"PYTHON": sys.executable, **(env or {})})
    return subprocess.run(["bash", str(RUNNER), *args], capture_output=True, text=True, env=environment,
                          timeout=300, **extra)


def estimates():
    """bench/gpu/estimates.tsv, read here independently of the plan's code."""
    table = {}
    for line in (ROOT / "bench" / "gpu" / "estimates.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            step, seconds, source = line.split("\t")
            table[step] = (float(seconds), source)
    return table


def rows(stdout):
    """{step: (estimate, running total, limit, text)} of a plan's step lines."""
    found = {}
    for line in stdout.splitlines():
        match = ROW.match(line)
        if match:
            found[match.group(1)] = (int(match.group(2)), int(match.group(3)), int(match.group(4)), match.group(5))
    return found


def test_the_plan_lists_every_step_with_its_estimate_source_and_running_total(tmp_path):
    done = runner("--plan", env={"RESULTS_DIR": str(tmp_path)})  # no runs recorded: the committed table
    assert done.returncode == 0, done.stderr
    table, plan = estimates(), rows(done.stdout)
    assert list(plan) == DEFAULT
    total = 90  # START_S
    for step in DEFAULT:
        seconds, source = table[step]
        total += seconds
        estimate, running, limit, text = plan[step]
        assert (estimate, running, limit) == (round(seconds), round(total), 600)
        assert text.endswith(source)
    assert "bench/results/wheels-2026-11-26.txt:27" in plan["build"][3]
    assert "SKETCHCORE_CUDA_UNVERIFIED=0 (gate closed) and =1 (gate open)" in plan["tests"][3]
    assert f"total: {total:.0f} s of device time ({total / 60:.1f} min) for a 900 s slot" in done.stdout
    # The slot's end is marked before the first step whose running total passes 900 s.
    lines = done.stdout.splitlines()
    marker = next(i for i, line in enumerate(lines) if "slot (SLOT_S) ends during the next step" in line)
    first_over = next(step for step in DEFAULT if plan[step][1] > 900)
    assert lines[marker + 1].startswith(first_over)


def test_the_plan_splits_the_steps_into_commands_within_the_per_command_limit(tmp_path):
    done = runner("--plan", env={"RESULTS_DIR": str(tmp_path)})
    commands = re.findall(r'STEPS="([^"]+)" bash bench/gpu/run.sh OUTDIR   # ~(\d+) s', done.stdout)
    table = estimates()
    assert "commands of at most 480 s (80% of the device tool's 600 s limit per command" in done.stdout
    assert [s for names, _ in commands for s in names.split()] == DEFAULT  # all steps, in order, once
    for names, seconds in commands:
        assert int(seconds) == round(sum(table[s][0] for s in names.split())) <= 480
    for (names, _), (following, _) in zip(commands, commands[1:]):  # each command as full as the limit allows
        assert sum(table[s][0] for s in names.split()) + table[following.split()[0]][0] > 480


def test_recorded_runs_replace_the_estimates(tmp_path):
    run = tmp_path / "gpu-run-2026-12-02"
    run.mkdir()
    (run / "steps.tsv").write_text("# step\tresult\tseconds\tdate\tdevice\n"
                                   "tests\tok\t123\t2026-12-02\tNVIDIA H100 80GB HBM3\n"
                                   "build\tFAIL\t31\t2026-12-02\tNVIDIA H100 80GB HBM3\n"
                                   "sanitize\tok\t77\t2026-12-02\tno GPU (DRY_RUN=1)\n")
    older = tmp_path / "gpu-run-2026-12-01"
    older.mkdir()
    (older / "steps.tsv").write_text("tests\tok\t999\t2026-12-01\tNVIDIA H200\n")
    done = runner("--plan", env={"RESULTS_DIR": str(tmp_path), "STEPS": "build tests sanitize"})
    plan, table = rows(done.stdout), estimates()
    assert plan["tests"][0] == 123
    assert plan["tests"][3].endswith("measured: " + str(run / "steps.tsv") + " (NVIDIA H100 80GB HBM3, 2026-12-02)")
    assert plan["build"][0] == round(table["build"][0])  # a failed run says nothing of the time
    assert plan["sanitize"][0] == round(table["sanitize"][0])  # nor does a dry run


@pytest.mark.parametrize(("env", "steps"), [
    ({"CPU_SUITE": "0"}, [s for s in DEFAULT if s != "cpu_suite"]),
    ({"DRY_RUN": "1"}, DEFAULT + ["collect", "llm_plan"]),
    ({"STEPS": "facts tests", "TIMEOUT_tests": "240", "SLOT_S": "60", "START_S": "0"}, ["facts", "tests"]),
])
def test_the_plan_follows_the_runners_settings(tmp_path, env, steps):
    done = runner("--plan", env={"RESULTS_DIR": str(tmp_path), **env})
    plan = rows(done.stdout)
    assert list(plan) == steps
    if "TIMEOUT_tests" in env:
        assert plan["tests"][2] == 240 and plan["facts"][1] == round(estimates()["facts"][0])
        assert "for a 60 s slot" in done.stdout and "split it across slots" in done.stdout


def test_an_unknown_step_is_refused_naming_the_known_ones():
    done = runner("--plan", env={"STEPS": "facts tset"})
    assert done.returncode == 2
    assert "unknown step 'tset' (facts wheels build tests cpu_suite" in done.stdout


def test_a_dry_run_reports_each_step_and_writes_one_results_folder(tmp_path):
    out = tmp_path / "out"
    done = runner(str(out), env={"DRY_RUN": "1", "STEPS": "wheels tests sanitize"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^-- wheels: ok in \d+ device-s \(total \d+ s\)", done.stdout, re.M)
    assert "-- tests: skipped (no GPU here (DRY_RUN=1))" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["steps.tsv", "summary.txt", "wheels.log"]
    recorded = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [(r[0], r[1], r[4]) for r in recorded] == [("wheels", "ok", "no GPU (DRY_RUN=1)"),
                                                      ("tests", "skip", "no GPU (DRY_RUN=1)"),
                                                      ("sanitize", "skip", "no GPU (DRY_RUN=1)")]
    summary = (out / "summary.txt").read_text().splitlines()
    assert summary[1].split()[:4] == ["step", "res", "device-s", "total"]
    assert [line.split()[:2] for line in summary[2:]] == [["wheels", "ok"], ["tests", "skip"], ["sanitize", "skip"]]


def test_the_tests_step_runs_the_gpu_tests_with_the_gate_closed_and_open(tmp_path):
    """Stand-ins: an nvidia-smi that names a GPU, and a Python that records its arguments and
    SKETCHCORE_CUDA_UNVERIFIED instead of running pytest."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA Stand-in GPU'\n")
    (bin_dir / "python").write_text(f"#!/bin/sh\necho \"gate=$SKETCHCORE_CUDA_UNVERIFIED $*\" >> {calls}\n"
                                    "case \"$*\" in *'-m pytest'*) echo \"1$SKETCHCORE_CUDA_UNVERIFIED passed in 0.01s\";; esac\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    out = tmp_path / "out"
    done = runner(str(out), env={"STEPS": "tests", "PYTHON": str(bin_dir / "python"),
                                 "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    pytest_calls = [line for line in calls.read_text().splitlines() if "-m pytest" in line]
    assert len(pytest_calls) == 2
    for line, state, label in zip(pytest_calls, ("0", "1"), ("closed", "open")):
        assert line.startswith(f"gate={state} -m pytest -m gpu ")
        assert f"--junitxml={out}/gpu-tests-gate-{label}.xml tests" in line
    assert "-- tests: ok in " in done.stdout
    assert "gate closed: 10 passed in 0.01s; gate open: 11 passed in 0.01s" in done.stdout  # the step's note
    step, result, _, _, device = (out / "steps.tsv").read_text().splitlines()[1].split("\t")
    assert (step, result, device) == ("tests", "ok", "NVIDIA Stand-in GPU")
