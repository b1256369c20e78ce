"""Fits the tables of cpu/activations_avx512.cpp (run: python src/cpp/cpu/gelu_table_fit.py > table).

m(h) = Φ(−h)·e^(h²/2) = ½·erfcx(h/√2) on [0, 16) in 32 intervals of width ½: on interval i,
m(i/2 + u) ≈ c0 + c1·u + … + c6·u⁶ for u in [0, ½), c0 = m(i/2) split into a float32 head and
tail, c1…c6 float32 fitted one after the other (each fit with the previous ones already
rounded: rounding them all at the end loses up to two bits) by iteratively reweighted least
squares on Chebyshev nodes, which converges to the relative minimax fit. Worst relative
error of the rounded fit: 0.09 · 2^-24. Needs NumPy and SciPy.
"""
import numpy as np
from scipy.special import erfcx

DEGREE, WIDTH, INTERVALS = 6, 0.5, 32


def mills(h):
    return 0.5 * erfcx(h / np.sqrt(2.0))


def refit(u, y, fixed):
    """Relative minimax fit of the coefficients not in `fixed` (index → value)."""
    free = [k for k in range(DEGREE + 1) if k not in fixed]
    rest = y - sum(v * u**k for k, v in fixed.items())
    basis = np.stack([u**k for k in free], 1)
    weight, extra = 1 / np.abs(y), np.ones_like(u)
    for _ in range(40):
        c, *_ = np.linalg.lstsq(basis * (weight * extra)[:, None], rest * weight * extra, rcond=None)
        err = np.abs(basis @ c - rest) * weight
        extra *= (err / err.max()) ** 0.3 + 1e-3
        extra /= extra.mean()
    return dict(zip(free, c))


def main():
    table, tail, worst = np.zeros((DEGREE + 1, INTERVALS)), np.zeros(INTERVALS), 0.0
    nodes = WIDTH * (np.cos(np.pi * (np.arange(3000) + 0.5) / 3000) + 1) / 2
    for i in range(INTERVALS):
        y = mills(i * WIDTH + nodes)
        fixed = {0: float(mills(np.float64(i * WIDTH)))}
        for k in range(1, DEGREE + 1):
            fixed[k] = float(np.float32(refit(nodes, y, fixed)[k]))
        head = float(np.float32(fixed[0]))
        table[:, i] = [fixed[k] for k in range(DEGREE + 1)]
        table[0, i], tail[i] = head, float(np.float32(fixed[0] - head))
        u = np.linspace(0, WIDTH, 20001)
        approx = np.polynomial.polynomial.polyval(u, table[:, i]) + tail[i]
        worst = max(worst, np.abs(approx / mills(i * WIDTH + u) - 1).max())
    print(f"// worst relative error {worst / 2**-24:.2f} * 2^-24")
    hexf = lambda v: float(v).hex().replace("0000000p", "p") + "f"  # noqa: E731
    for name, rows in (("kMillsTail", [tail]), ("kMills", table)):
        print(f"alignas(64) constexpr float {name}[{len(rows)}][{INTERVALS}] = {{")
        for row in rows:
            print("    {" + ", ".join(hexf(v) for v in row) + "},")
        print("};")


if __name__ == "__main__":
    main()
