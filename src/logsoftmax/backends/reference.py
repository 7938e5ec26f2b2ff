"""The reference backend: the oracle, in decomposition style.

Plain numpy, each function its formula, accumulated in float64 (long double
for float64 input) and cast once to the result dtype. Slow and obviously
right; every other backend is tested against it.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from . import Backend

__all__ = ["ReferenceBackend", "accumulation_dtype"]


def accumulation_dtype(dtype, result=None) -> np.dtype:
    """float64, or long double where the working precision is float64 (a
    float64 input or result: :func:`logsoftmax.dtypes.accumulation_dtype`)."""
    wide = dtypes.accumulation_dtype(dtype, result) == np.float64
    return np.dtype(np.longdouble if wide else np.float64)


def _finite_max(x, axis):
    """Row max with infinities replaced by 0, so ``x - m`` keeps them (torch._refs)."""
    m = np.max(x, axis=axis, keepdims=True)
    return np.where(np.isfinite(m), m, 0)


def _sum(a, axis):
    """Sum over ``axis`` (int or tuple) with keepdims, in an order that does not
    depend on the memory layout (numpy's pairwise summation only applies along
    a contiguous axis, so sum a contiguous copy with the axes last)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    last = tuple(range(a.ndim - len(axes), a.ndim))
    moved = np.ascontiguousarray(np.moveaxis(a, axes, last))
    kept = moved.shape[: a.ndim - len(axes)]
    total = np.sum(moved.reshape(kept + (int(np.prod(moved.shape[len(kept):])),)), -1)
    return np.expand_dims(total, axes)


def _log_softmax(x, axis):
    # NaN/+inf/all--inf rows become NaN below; initial= lets zero-length rows through
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    shifted = x - m
    return shifted - np.log(_sum(np.exp(shifted), axis))


def _store(value, out, dtype):
    rounded = dtypes.round_to(value, dtype)  # one rounding, then a copy
    if out is None:
        return rounded
    out[...] = rounded
    return out


class ReferenceBackend(Backend):
    """Float64 numpy oracle (see module docstring)."""

    name = "reference"

    def log_softmax(self, x, axis, out, dtype):
        with np.errstate(all="ignore"):
            y = _log_softmax(x.astype(accumulation_dtype(x.dtype, dtype)), axis)
        return _store(y, out, dtype)

    def softmax(self, x, axis, out, dtype):
        with np.errstate(all="ignore"):
            y = np.exp(_log_softmax(x.astype(accumulation_dtype(x.dtype, dtype)), axis))
        return _store(y, out, dtype)

    def log_softmax_backward(self, diff_dst, dst, axis, out, dtype):
        acc = accumulation_dtype(diff_dst.dtype, dtype)
        dd, y = diff_dst.astype(acc), dst.astype(acc)
        with np.errstate(all="ignore"):
            dx = dd - np.exp(y) * _sum(dd, axis)
        return _store(dx, out, dtype)

    def softmax_backward(self, diff_dst, dst, axis, out, dtype):
        acc = accumulation_dtype(diff_dst.dtype, dtype)
        dd, y = diff_dst.astype(acc), dst.astype(acc)
        with np.errstate(all="ignore"):
            dx = y * (dd - _sum(dd * y, axis))
        return _store(dx, out, dtype)

    def logsumexp(self, x, axes, keepdims):
        xf = x.astype(accumulation_dtype(x.dtype))
        if any(x.shape[a] == 0 for a in axes):
            shape = [1 if i in axes else n for i, n in enumerate(x.shape)]
            r = np.full(shape, -np.inf, xf.dtype)
        else:
            with np.errstate(all="ignore"):
                m = _finite_max(xf, axes)
                r = m + np.log(_sum(np.exp(xf - m), axes))
        if not keepdims:
            r = r.reshape([n for i, n in enumerate(r.shape) if i not in axes])
        return dtypes.round_to(r, x.dtype)
