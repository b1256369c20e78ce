"""Fits the tables of cpu/activations_avx512.cpp (run: python src/cpp/cpu/activation_tables_fit.py > tables)
and, with the argument ``avx2``, those of cpu/activations_avx2.cpp.

Near zero, for GELU and GELU-tanh (|z| < 3.9375) and SiLU (|z| < 7.875), which covers nearly every element of
a normalised activation: the activation's F(h) = Φ(−h), σ(−v(h)) or σ(−h) and its slope's D(h)
(Φ(−h) − h·φ(h), σ(−v)·(1 − h·σ(v)·v′), σ(−h)·(1 − h·σ(h))) on 32 intervals centred at k·step,
h = k·step + u, |u| ≤ step/2, each a degree-5 polynomial in u (kGeluNear, kGeluSlopeNear, …);
F fitted relative to itself, D relative to the sum of its terms'
sizes, the scale of the derivative's rounding error. Then act(z) = z·F(h) or z·(1 − F(h)) and
act′(z) = D(h) or 1 − D(h) for z < 0 or z ≥ 0. For AVX2 (one 8-lane register per coefficient, read by
VPERMPS): 8 intervals of step ½ (GELUs, |z| < 3.75) or 1 (SiLU, |z| < 7.5), degree 7: degree 6 leaves
0.9–4.4 · 2^-24, degree 7 reaches the coefficients' own rounding, 0.2–0.8 · 2^-24.

Everywhere: m(h) = Φ(−h)·e^(h²/2) = ½·erfcx(h/√2) on [0, 16) in 32 intervals of width ½: on interval i,
m(i/2 + u) ≈ c0 + c1·u + … + c6·u⁶ for u in [0, ½), c0 = m(i/2) split into a float32 head and
tail, c1…c6 float32 fitted one after the other (each fit with the previous ones already
rounded: rounding them all at the end loses up to two bits) by iteratively reweighted least
squares on Chebyshev nodes, which converges to the relative minimax fit. Worst relative
error of the rounded fit: 0.09 · 2^-24. Needs NumPy and SciPy.
"""
import sys

import numpy as np
from scipy.special import erfc, erfcx

DEGREE, WIDTH, INTERVALS = 6, 0.5, 32


def mills(h):
    return 0.5 * erfcx(h / np.sqrt(2.0))


NEAR_DEGREE = 5


def normal_tail(h):
    return 0.5 * erfc(h / np.sqrt(2.0))


def gelu_slope(h):  # Φ(−h) − h·φ(h), and the sum of the two terms' sizes
    density = h * np.exp(-h * h / 2) / np.sqrt(2 * np.pi)
    return normal_tail(h) - density, normal_tail(h) + density


def tanh_argument(h):  # v = 2c·(h + a·h³), and v′
    c, a = np.sqrt(2 / np.pi), 0.044715
    return 2 * c * (h + a * h**3), 2 * c * (1 + 3 * a * h * h)


def gelu_tanh_slope(h):  # σ(−v) − h·σ(−v)·σ(v)·v′, and its terms' sizes
    v, dv = tanh_argument(h)
    s = logistic_tail(v)
    second = h * s * (1 - s) * dv
    return s - second, s + second


def logistic_tail(h):  # σ(−h)
    return 1 / (1 + np.exp(h))


def silu_slope(h):  # σ(−h)·(1 − h·σ(h)), and its terms' sizes
    s = logistic_tail(h)
    return s - h * s * (1 - s), s + h * s * (1 - s)


def refit(u, y, fixed, degree=DEGREE, scale=None):
    """Minimax fit, relative to `scale` (default |y|), of the coefficients not in `fixed`."""
    free = [k for k in range(degree + 1) if k not in fixed]
    rest = y - sum(v * u**k for k, v in fixed.items())
    basis = np.stack([u**k for k in free], 1)
    weight, extra = 1 / np.abs(y if scale is None else scale), np.ones_like(u)
    for _ in range(40):
        c, *_ = np.linalg.lstsq(basis * (weight * extra)[:, None], rest * weight * extra, rcond=None)
        err = np.abs(basis @ c - rest) * weight
        extra *= (err / err.max()) ** 0.3 + 1e-3
        extra /= extra.mean()
    return dict(zip(free, c))


def near_table(f, step, intervals=32, degree=NEAR_DEGREE):
    """Polynomials in u on the intervals k·step + [−step/2, step/2] (k = 0: from 0)."""
    table, worst = np.zeros((degree + 1, intervals)), 0.0
    for k in range(intervals):
        lo = 0.0 if k == 0 else -step / 2
        u = lo + (step / 2 - lo) * (np.cos(np.pi * (np.arange(2000) + 0.5) / 2000) + 1) / 2
        y, scale = f(k * step + u)
        fixed = {}
        for j in range(degree + 1):
            fixed[j] = float(np.float32(refit(u, y, fixed, degree, scale)[j]))
        table[:, k] = [fixed[j] for j in range(degree + 1)]
        uu = np.linspace(lo, step / 2, 20001)
        yy, ss = f(k * step + uu)
        worst = max(worst, np.abs((np.polynomial.polynomial.polyval(uu, table[:, k]) - yy) / ss).max())
    return table, worst


def print_table(name, rows):
    hexf = lambda v: float(v).hex().replace("0000000p", "p") + "f"  # noqa: E731
    print(f"alignas(64) constexpr float {name}[{len(rows)}][{len(rows[0])}] = {{")
    for row in rows:
        print("    {" + ", ".join(hexf(v) for v in row) + "},")
    print("};")


NEAR_FUNCTIONS = (("kGeluNear", lambda h: (normal_tail(h), normal_tail(h)), 0.125),
                  ("kGeluSlopeNear", gelu_slope, 0.125),
                  ("kGeluTanhNear", lambda h: (logistic_tail(tanh_argument(h)[0]),) * 2, 0.125),
                  ("kGeluTanhSlopeNear", gelu_tanh_slope, 0.125),
                  ("kSiluNear", lambda h: (logistic_tail(h), logistic_tail(h)), 0.25),
                  ("kSiluSlopeNear", silu_slope, 0.25))


def print_near_tables(step_scale, intervals, degree):
    for name, f, step in NEAR_FUNCTIONS:
        table, worst = near_table(f, step * step_scale, intervals, degree)
        print(f"// {name}: worst error {worst / 2**-24:.2f} * 2^-24")
        print_table(name, table)


def main(argv):
    if argv[1:] == ["avx2"]:
        print_near_tables(4, 8, 7)
        return
    print_near_tables(1, 32, NEAR_DEGREE)
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
    print(f"// m: worst relative error {worst / 2**-24:.2f} * 2^-24")
    print_table("kMillsTail", [tail])
    print_table("kMills", table)


if __name__ == "__main__":
    main(sys.argv)
