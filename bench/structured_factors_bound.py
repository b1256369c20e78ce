"""Would structured fixed factors (SKLinear(..., sketch="sparse_sign"|"srht"), applied from their
seed instead of stored) make SKLinear's training step faster on this machine? They replace the
products with the fixed factors U2 (in × k) and U1 (k × out) by sketch applications, so they pay
only if applying a sketch to the (rows × in) input costs well below the dense GEMM it replaces.
This times, on the issue-17 shape (4096 rows, 4096 → 4096, T·k = 128), float32, torch CPU tensors:

* the dense product x @ U2 that a stored factor costs (torch.mm, torch's MKL);
* x @ Sᵀ for sketchcore's matrix-free sparse sign (8 nonzeros per column), CountSketch and
  SRHT operators of the same shape (what a structured U2 would cost).

    python bench/structured_factors_bound.py        # prints a table: medians of 7 calls, ms
"""
import statistics
import time

import torch

import sketchcore

ROWS, D_IN, K = 4096, 4096, 128


def median_ms(fn, repeats=7):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, min(times) * 1e3, max(times) * 1e3


def main():
    torch.manual_seed(0)
    x = torch.randn(ROWS, D_IN)
    U2 = torch.randn(D_IN, K)
    rows = [("dense x @ U2 (torch.mm, MKL)", lambda: torch.mm(x, U2))]
    for name, op in (("sparse sign, 8 nonzeros per column", sketchcore.sketch.sparse_sign(K, D_IN, nnz=8, seed=1)),
                     ("CountSketch", sketchcore.sketch.countsketch(K, D_IN, seed=1)),
                     ("SRHT", sketchcore.sketch.srht(K, D_IN, seed=1))):
        rows.append((f"x @ S.T, {name}", lambda op=op: x @ op.T))
    print(f"{ROWS} x {D_IN} input, k = {K}, float32, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{'product':<44} {'median ms':>9} {'min':>7} {'max':>7}")
    for name, fn in rows:
        med, low, high = median_ms(fn)
        print(f"{name:<44} {med:>9.2f} {low:>7.2f} {high:>7.2f}")


if __name__ == "__main__":
    main()
