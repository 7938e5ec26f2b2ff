"""Correctness: benchdnn's float32 reference and pass rule, and eps errors.

benchdnn's rule for softmax (``tests/benchdnn/softmax`` and
``utils/compare.cpp``), point by point, with ``exp_f32`` the float32
reference, ``exp`` that value rounded to the output data type and ``got`` the
library's output (read as float32):

- pass if ``got == exp_f32``;
- pass if ``|exp| <= 1e-5`` and ``|exp - got| < eps_f32``;
- pass if the relative difference (``|exp| > 1e-5``; divided by ``|exp|``)
  or else the absolute one is ``<= trh``;
- pass if both are NaN or both the same infinity;
- pass if ``|exp - got| < eps_f32`` (the softmax driver's extra check);
- otherwise the point fails.

``trh = 5 (LOGSOFTMAX only) x 4 (backward only) x 10 (f32/f64 only) x
eps(dt)`` for f32/f64 outputs (f32 forward 5.96e-6, backward 2.38e-5), and 0
for bf16/f16 in the default strict accumulation mode (the output must be
exactly the rounded f32 reference); ``--attr-acc-mode=relaxed`` gives
bf16/f16 the same formula. ``dt`` is dst's type forward, diff_src's backward.

Zero trust: a forward output with more than ``(axis_size - 8) / axis_size``
exact zeros (any zero when the axis is at most 8 long; no limit for
LOGSOFTMAX over an axis of 1), or a backward output more than 30% zeros, is
MISTRUSTED (the check is then too weak to mean anything), if it has at least
10 elements.

Independently, the runner measures the project's accuracy metric against a
float64 reference with :func:`logsoftmax.accuracy.max_eps_error`
(``|y - y_ref| / (eps(dt) * max(1, |y_ref|))``); :func:`eps_bound` is its
pass bound.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import dtypes

__all__ = [
    "threshold",
    "zero_trust_percent",
    "reference_f32",
    "CheckResult",
    "benchdnn_check",
    "eps_bound",
]

EPS_F32 = float(np.finfo(np.float32).eps)
_FLT_MIN = float(np.finfo(np.float32).tiny)


def threshold(alg: str, is_fwd: bool, dt: str, acc_mode: str = "strict") -> float:
    """benchdnn's ``trh`` for a softmax problem (see the module docstring)."""
    is_flt_or_dbl = dt in ("f32", "f64")
    trh = (
        (5.0 if alg == "LOGSOFTMAX" else 1.0)
        * (1.0 if is_fwd else 4.0)
        * (10.0 if is_flt_or_dbl else 1.0)
        * dtypes.eps(dtypes.from_name(dt))
    )
    if is_flt_or_dbl or acc_mode == "relaxed":
        return trh
    return 0.0


def zero_trust_percent(alg: str, is_fwd: bool, axis_size: int) -> float:
    """Largest share of exact zeros (in %) an output may hold and be trusted."""
    if not is_fwd:
        return 30.0
    if alg == "LOGSOFTMAX" and axis_size == 1:
        return 100.0
    if axis_size == 0:
        return 100.0
    return 100.0 * max(0, axis_size - 8) / axis_size


def _expf(x: np.ndarray) -> np.ndarray:
    """Correctly rounded float32 exp (as glibc's ``expf``, which benchdnn
    calls; numpy's own float32 exp may differ by an ulp)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def _logf(x: np.ndarray) -> np.ndarray:
    return np.log(x.astype(np.float64)).astype(np.float32)


def _seq_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """Sequential float32 sum along ``axis`` (benchdnn's loop order; numpy's
    ``sum`` would add pairwise and may round differently)."""
    if x.shape[axis] == 0:
        shape = [1 if i == axis else n for i, n in enumerate(x.shape)]
        return np.zeros(shape, np.float32)
    return np.take(np.cumsum(x, axis=axis, dtype=np.float32), [-1], axis=axis)


def reference_f32(alg: str, is_fwd: bool, axis: int, x=None, diff_dst=None, dst=None):
    """benchdnn's reference in float32 arithmetic (``ref_softmax.cpp``).

    Forward: ``m = max(x)``; LOGSOFTMAX ``d = x - m``, ``y = d - log(sum(exp(d)))``;
    SOFTMAX ``e = exp(x - m)``, ``y = e * (1 / sum(e))``. Backward:
    LOGSOFTMAX ``dd - exp(dst) * sum(dd)``, SOFTMAX ``dst * (dd - sum(dd*dst))``.
    Inputs are the (already rounded) tensors in logical order. Every step
    rounds to float32 as benchdnn's C++ does: sums are sequential, ``exp``
    and ``log`` correctly rounded, no fused multiply-add.

    Returns:
      float32 array of the input's shape.
    """
    with np.errstate(all="ignore"):
        if is_fwd:
            x = np.asarray(x, np.float32)
            # benchdnn starts the max at -FLT_MAX, which an all -inf row keeps
            m = np.max(x, axis=axis, keepdims=True, initial=-np.finfo(np.float32).max)
            d = x - m
            if alg == "LOGSOFTMAX":
                return d - _logf(_seq_sum(_expf(d), axis))
            e = _expf(d)
            s = _seq_sum(e, axis)
            r = np.where(s != 0, np.float32(1) / np.where(s != 0, s, 1), np.float32(1))
            return e * r.astype(np.float32)
        dd = np.asarray(diff_dst, np.float32)
        y = np.asarray(dst, np.float32)
        if alg == "LOGSOFTMAX":
            return dd - _expf(y) * _seq_sum(dd, axis)
        return y * (dd - _seq_sum(dd * y, axis))


@dataclasses.dataclass
class CheckResult:
    """Outcome of :func:`benchdnn_check`."""

    n_errors: int
    total: int
    zeros: int
    zero_trust: float
    max_diff: float
    max_rdiff: float
    first_errors: list[tuple[tuple[int, ...], float, float, float]]

    @property
    def mistrusted(self) -> bool:
        return (
            self.n_errors == 0
            and self.total >= 10
            and 100.0 * self.zeros / self.total > self.zero_trust
        )

    @property
    def passed(self) -> bool:
        return self.n_errors == 0


def _round_to(values: np.ndarray, dt: str) -> np.ndarray:
    """``round_to_nearest_representable(dt, v)`` for float32 values."""
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dtypes.from_name(dt)).astype(np.float32)


def benchdnn_check(got, exp_f32, dt: str, trh: float, zero_trust: float) -> CheckResult:
    """Apply benchdnn's point-wise rule (module docstring) to every element.

    Args:
      got: the library's output (any dtype, logical shape).
      exp_f32: the float32 reference of the same shape.
      dt: the output data type name (for rounding the reference).
      trh: the threshold from :func:`threshold`.
      zero_trust: from :func:`zero_trust_percent`.

    Returns:
      A :class:`CheckResult` with the error count, zero count, the largest
      differences and up to 10 failing points ``(index, exp, got, rdiff)``.
    """
    got32 = np.asarray(got).astype(np.float32)
    exp_f32 = np.asarray(exp_f32, np.float32)
    with np.errstate(all="ignore"):
        exp = _round_to(exp_f32, dt)
        ok = exp_f32 == got32
        diff = np.abs(exp - got32)
        aexp = np.abs(exp)
        rdiff = diff / np.where(aexp > _FLT_MIN, aexp, np.float32(1))
        ok |= (aexp <= np.float32(1e-5)) & (diff < np.float32(EPS_F32))
        ok |= np.where(aexp > np.float32(1e-5), rdiff, diff) <= np.float32(trh)
        ok |= np.isnan(exp) & np.isnan(got32)
        ok |= np.isinf(exp) & (exp == got32)
        ok |= diff < np.float32(EPS_F32)
    n_errors = int(ok.size - np.count_nonzero(ok))
    first = []
    if n_errors:
        for flat in np.flatnonzero(~ok.ravel())[:10]:
            idx = np.unravel_index(flat, ok.shape)
            first.append(
                (tuple(int(i) for i in idx), float(exp[idx]), float(got32[idx]),
                 float(rdiff[idx]))
            )
    finite_d = diff[np.isfinite(diff)]
    finite_r = rdiff[np.isfinite(rdiff)]
    return CheckResult(
        n_errors=n_errors,
        total=int(ok.size),
        zeros=int(np.count_nonzero(got32 == 0)),
        zero_trust=zero_trust,
        max_diff=float(finite_d.max()) if finite_d.size else 0.0,
        max_rdiff=float(finite_r.max()) if finite_r.size else 0.0,
        first_errors=first,
    )


def eps_bound(alg: str, is_fwd: bool, dt: str) -> float:
    """The pass bound, in eps of ``dt``, when checking against float64
    (used with ``--fill=random``, where benchdnn's exact-rounding rule for
    bf16/f16 cannot hold for every element of a large random tensor).

    f32/f64: benchdnn's ``trh`` in eps units (LOGSOFTMAX 50 forward, 200
    backward; SOFTMAX 10 / 40). bf16/f16: half an eps (one rounding of a
    float32-or-better result) plus that f32 bound scaled to ``dt``.
    """
    base = threshold(alg, is_fwd, "f32") / EPS_F32
    if dt in ("f32", "f64"):
        return base
    return 0.5 + base * EPS_F32 / dtypes.eps(dtypes.from_name(dt))
