"""The polynomials of the CPU kernels' ``2**y`` exponentials (``_math``).

``exp_f32_sum``, ``exp_f64`` and ``exp_f64_any`` compute ``e**x`` as
``2**floor(y) * 2**f`` with ``y = x log2(e)`` and ``f = y - floor(y)`` in
``[0, 1)`` (one ``vreduce``, one ``vscalef`` on AVX-512). ``2**f`` is ``1 + f
q(f)``: the constant is exactly 1, so ``e**0 = 1`` exactly. This script fits
``q`` for the smallest *relative* error of ``2**f`` on ``[0, 1]`` (least
squares on Chebyshev nodes, reweighted until the error ripples evenly:
Lawson's iteration, which converges to the minimax fit), then evaluates the
fit by Horner's rule in the kernel's precision (each ``fma`` emulated in
long double) against ``2**f`` in long double.

Run: ``python benchmarks/exp_fit.py`` (prints the coefficients, which
agree with ``_math``'s to 14 significant digits, the same once rounded to
float32, and the errors its docstrings quote).
"""

from __future__ import annotations

import numpy as np


def fit(degree: int, nodes: int = 8001, rounds: int = 300) -> np.ndarray:
    """Coefficients ``c`` of ``q`` (``degree - 1`` its degree), lowest first,
    for ``2**f ~ 1 + f (c[0] + f (c[1] + ...))`` on ``[0, 1]``."""
    f = (1 - np.cos(np.linspace(0, np.pi, nodes))) / 2
    f = f[f > 1e-12].astype(np.longdouble)
    target = (np.exp2(f) - 1) / f
    to_relative = f / np.exp2(f)  # q's error times this is 2**f's relative error
    a = np.vander(f, degree, increasing=True)
    w = np.ones_like(f)
    for _ in range(rounds):
        rw = w * np.abs(to_relative)
        c, *_ = np.linalg.lstsq((a * rw[:, None]).astype(np.float64),
                                (target * rw).astype(np.float64), rcond=None)
        err = (a @ c.astype(np.longdouble) - target) * to_relative
        w = w * np.sqrt(np.abs(err)) + 1e-30
        w /= w.max()
    return c


def horner(c: np.ndarray, f: np.ndarray, dtype) -> np.ndarray:
    """``1 + f (c[0] + f (c[1] + ...))`` in ``dtype``, each step one ``fma``
    (product and sum in long double, one rounding to ``dtype``: exact for
    float32, 11 bits short of a float64 ``fma``'s exact product)."""
    c = c.astype(dtype)

    def fma(a, b, k):
        return (np.asarray(a, np.longdouble) * b + np.longdouble(k)).astype(dtype)

    p = np.full_like(f, c[-1])
    for k in c[-2::-1]:
        p = fma(p, f, k)
    return fma(p, f, 1.0)


def main() -> None:
    f = np.linspace(0, 1, 2_000_001, endpoint=False)
    for name, degree, dtype in (("exp_f32_sum (_P)", 5, np.float32), ("exp_f64 (_E)", 6, np.float64),
                                ("exp_f64_any (_D)", 7, np.float64)):
        c = fit(degree)
        ff = f.astype(dtype)
        ref = np.exp2(ff.astype(np.longdouble))
        fit_err = np.abs(np.polyval(np.r_[c[::-1], 1.0], ff.astype(np.longdouble)) / ref - 1).max()
        ev_err = np.abs(horner(c, ff, dtype) / ref - 1).max()
        print(f"{name}: degree {degree}, coefficients {[float(k) for k in c]}")
        print(f"  relative error of 2**f on [0, 1): the fit {float(fit_err):.3g}, "
              f"Horner in {np.dtype(dtype).name} {float(ev_err):.3g}")


if __name__ == "__main__":
    main()
