"""The main job: `python -m sketchcore` prints a benchmark table with accurate results."""
import re
import subprocess
import sys

import pytest

import sketchcore
from sketchcore import cli


def table_rows(text):
    return [line for line in text.splitlines() if re.match(r"^\s*\d+ × ", line)]


def test_quick_run_leads_with_the_fused_layer_and_its_memory(capsys):
    assert cli.main(["--quick", "--repeats", "2", "--budget", "0.01"]) == 0
    text = capsys.readouterr().out
    fused_part, bare_part = text.split("The bare product")
    rows = table_rows(fused_part)
    assert "fused layer" in fused_part and len(rows) == len(cli.QUICK_SHAPES)
    for row, (b, di, do, t, k) in zip(rows, cli.QUICK_SHAPES):
        cells = [c.strip() for c in row.split("|")]
        times = [float(c.split()[0]) for c in (cells[1], cells[2], cells[4])]
        assert all(t > 0 for t in times)
        low, high = (times[1] - 0.005) / (times[0] + 0.005), (times[1] + 0.005) / max(times[0] - 0.005, 1e-9)
        assert low - 0.005 <= float(cells[3].rstrip("×")) <= high + 0.005
        memory = [float(v) for v in cells[6].split("/")]
        # Every side allocates at least its float32 output (b × d_out).
        assert all(m >= b * do * 4 / 2**20 - 0.05 for m in memory)
        assert float(cells[7]) < 1e-5 and float(cells[8]) < 1e-5
    assert len(table_rows(bare_part)) == len(cli.QUICK_SHAPES)


def test_quick_run_prints_a_row_per_shape_with_small_errors(capsys):
    assert cli.main(["--quick", "--repeats", "2", "--budget", "0.01"]) == 0
    text = capsys.readouterr().out
    rows = table_rows(text.split("The bare product")[1])
    assert len(rows) == len(cli.QUICK_SHAPES)
    for row in rows:
        cells = [c.strip() for c in row.split("|")]
        times = [float(c.split()[0]) for c in (cells[1], cells[2], cells[4])]
        assert re.fullmatch(r"[\d.]+ ms ±\s*\d+%", cells[1])
        assert all(t > 0 for t in times)
        # Times print with 0.005 ms rounding, the speedup with 0.005: it must fit those bounds.
        low, high = (times[1] - 0.005) / (times[0] + 0.005), (times[1] + 0.005) / max(times[0] - 0.005, 1e-9)
        assert low - 0.005 <= float(cells[3].rstrip("×")) <= high + 0.005
        assert float(cells[6]) < 1e-5 and float(cells[7]) < 1e-5
    assert "[1/2]" in text and "[2/2]" in text


def test_thread_option_is_applied():
    before = sketchcore.get_num_threads()
    try:
        cli.main(["--quick", "--repeats", "1", "--budget", "0", "--threads", "1"])
        assert sketchcore.get_num_threads() == 1
    finally:
        sketchcore.set_num_threads(before)


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--threads", "0"], ["--nonsense"]])
def test_bad_arguments_exit_with_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_module_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "sketchcore", "--quick", "--repeats", "1", "--budget", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(table_rows(done.stdout)) == 2 * len(cli.QUICK_SHAPES)  # the fused table and the bare one


def test_the_sides_are_timed_in_rounds_that_alternate_them(monkeypatch):
    """compare_times visits every side once per round, in a rotated order each round, with the
    calls and the time budget split between the rounds; each side's median and range cover all
    of its rounds."""
    from sketchcore.cli import benchmark

    visits = []

    def fake_timed_calls(fn, repeats, budget_s, warm_calls):
        visits.append((fn.__name__, repeats, budget_s))
        assert warm_calls == (2 if len(visits) <= 3 else 1)
        round_index = sum(1 for name, _, _ in visits if name == fn.__name__)
        return [fn() * round_index] * repeats

    def a():
        return 1.0

    def b():
        return 10.0

    def c():
        return 100.0

    monkeypatch.setattr(benchmark, "timed_calls", fake_timed_calls)
    (a_median, a_range), (b_median, b_range), (c_median, c_range) = benchmark.compare_times([a, b, c], 7, 1.5)
    assert [name for name, _, _ in visits] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {(repeats, budget) for _, repeats, budget in visits} == {(3, 0.5)}  # ⌈7/3⌉ calls, 1.5 s / 3
    assert (a_median, a_range) == (2.0, 2.0) and (b_median, b_range) == (20.0, 20.0)  # rounds 1, 2, 3
    assert (c_median, c_range) == (200.0, 200.0)
