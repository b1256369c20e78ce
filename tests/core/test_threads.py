"""Concurrency: calls from several Python threads are safe, and the GIL is released."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import sketchcore
from _reference import assert_close, random_problem, reference


def test_concurrent_calls_give_the_serial_results(rng):
    problems = [random_problem(rng, (int(rng.integers(1, 200)),), 96, 8, 64, terms=3, dtype=np.float64)
                for _ in range(8)]
    expected = [reference(x, S, U, b, "silu") for x, S, U, b in problems]

    def run(i):
        x, S, U, b = problems[i % len(problems)]
        return i % len(problems), sketchcore.sketched_matmul(x, S, U, bias=b, activation="silu")

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(run, range(64)))
    for i, y in results:
        assert_close(y, expected[i], np.float64)


def test_concurrent_calls_writing_disjoint_parts_of_one_out(rng):
    x, S, U, b = random_problem(rng, (8, 50), 40, 5, 30, dtype=np.float32)
    out = np.zeros((8, 50, 30), np.float32)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: sketchcore.sketched_matmul(x[i], S, U, bias=b, out=out[i]), range(8)))
    assert_close(out, reference(x, S, U, b), np.float32)


def test_gil_is_released_while_computing(rng):
    x, S, U, _ = random_problem(rng, (1536,), 1536, 256, 1536, terms=2, dtype=np.float64, bias=False)
    window = {}

    def compute():
        window["start"] = time.perf_counter()
        sketchcore.sketched_matmul(x, S, U)
        window["end"] = time.perf_counter()

    worker = threading.Thread(target=compute)
    ticks = []
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())  # pure Python: needs the GIL
    worker.join()
    start, end = window["start"], window["end"]
    middle = [t for t in ticks if start + 0.25 * (end - start) < t < end - 0.25 * (end - start)]
    assert end - start > 0.02, "problem too small to observe"
    assert len(middle) > 100, f"only {len(middle)} Python steps ran during the native call"


def _child_computes(conn, problem):
    x, S, U, b = problem
    y = sketchcore.sketched_matmul(x, S, U, bias=b, activation="gelu")
    conn.send(float(np.abs(y - reference(x, S, U, b, "gelu")).max()))
    conn.close()


def test_forked_child_can_compute_after_the_parent_used_the_workers(rng):
    import multiprocessing

    problem = random_problem(rng, (600,), 300, 8, 400, terms=2, dtype=np.float64)
    sketchcore.sketched_matmul(*problem[:3], bias=problem[3], activation="gelu")  # workers now exist
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    process = context.Process(target=_child_computes, args=(child, problem))
    process.start()
    assert parent.poll(60), "forked child did not answer (deadlock?)"
    assert parent.recv() < 1e-10
    process.join(10)
    assert process.exitcode == 0
