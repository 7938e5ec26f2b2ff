"""``nll_loss`` / ``cross_entropy`` on numpy arrays: row views, the fused
row-statistics kernels of :mod:`.backends.cpu.losses`, PyTorch's reductions.

The inputs were validated by the front door (:mod:`._losses`). Nothing of
the input's size is allocated: the kernels read the logits in place (any
strides; the class axis of an ``(N, C, d1, ...)`` input is read as a strided
row) and produce a few float64 numbers per row.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import dtypes

__all__ = [
    "nll_loss",
    "cross_entropy",
    "cross_entropy_probs",
    "storage",
    "compute_dtype",
    "row_loss",
    "reduce_rows",
]

_STORAGE = {
    np.dtype(ml_dtypes.bfloat16): np.dtype(np.uint16),
    np.dtype(np.float16): np.dtype(np.int16),
}


def _kernels():
    from .backends.cpu import losses

    return losses


def storage(a: np.ndarray) -> np.ndarray:
    """``a`` viewed as the kernels' storage type (bf16 as uint16, f16 as int16)."""
    st = _STORAGE.get(a.dtype)
    return a if st is None else a.view(st)


def compute_dtype(dt) -> np.dtype:
    """float64 for float64, float32 for float32/bfloat16/float16."""
    return dtypes.float64 if np.dtype(dt) == dtypes.float64 else dtypes.float32


def _row_blocks(x: np.ndarray, target: np.ndarray, axis: int):
    """``(rows, row_targets)`` pairs of 2-D ``(R, C)`` views covering ``x``.

    ``(C,)`` -> one row; ``(N, C)`` -> itself; ``(N, C, d1, ...)`` -> per
    sample ``n`` the strided view ``x[n].reshape(C, -1).T`` (no copy when the
    trailing dims merge, as for any C-contiguous input)."""
    if axis == 0:
        return [(x[None, :], target.reshape(1))]
    if x.ndim == 2:
        return [(x, target)]
    c = x.shape[1]
    return [(x[n].reshape(c, -1).T, target[n].reshape(-1)) for n in range(x.shape[0])]


def _class_weights(weight, c: int, ct: np.dtype):
    """``(cw, has_w, W)``: kernel weights (a dummy when absent) and their sum."""
    if weight is None:
        return np.ones(1, ct), False, float(c)
    cw = np.ascontiguousarray(weight, dtype=ct)
    return cw, True, float(cw.sum(dtype=np.float64))


def _target_weights(target, weight, ignore_index):
    """Per-row ``w_t`` (float64, 0 where ignored) and the valid mask."""
    t = np.asarray(target).astype(np.int64, copy=False)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    if weight is None:
        wt = valid.astype(np.float64)
    else:
        wt = np.where(valid, np.asarray(weight, np.float64)[safe], 0.0)
    return t, valid, safe, wt


def row_loss(m, s, zt, zw, wt, valid, big_w, eps, classes):
    r"""Per-row cross-entropy from the row statistics (float64).

    ``(1 - eps) w_t ((m - z_t) + log s) + eps/C (W log s + zw)``, 0 where
    ignored; the smoothing term is left out entirely when ``eps == 0``
    (PyTorch does not compute it, so an infinite logit cannot make it NaN).
    """
    with np.errstate(all="ignore"):
        log_s = np.log(s)
        loss = (1.0 - eps) * wt * ((m - zt) + log_s)
        if eps != 0.0:
            loss = loss + (eps / classes) * (big_w * log_s + zw)
    return np.where(valid, loss, 0.0)


def reduce_rows(values, reduction: str, denom, shape, rdt):
    """PyTorch's reduction of float64 per-row values, rounded once to ``rdt``."""
    with np.errstate(all="ignore"):
        if reduction == "none":
            r = np.asarray(values, np.float64).reshape(shape)
        elif reduction == "sum":
            r = np.asarray(np.sum(values, dtype=np.float64))
        else:
            r = np.asarray(np.sum(values, dtype=np.float64) / np.float64(denom))
    return np.asarray(dtypes.round_to(r, rdt))


def nll_loss(x, target, weight, ignore_index, reduction, rdt):
    """``-w_t x[t]`` per row (a gather along the class axis), reduced."""
    vals, wt = nll_rows(x, target, weight, ignore_index)
    return reduce_rows(vals, reduction, wt.sum(), np.shape(target), rdt)


def nll_rows(x, target, weight, ignore_index):
    """Per-row ``-w_t x[t]`` (float64, 0 where ignored) and ``w_t``."""
    axis = 1 if x.ndim > 1 else 0
    t, valid, safe, wt = _target_weights(target, weight, ignore_index)
    idx = np.expand_dims(safe, axis)
    picked = np.take_along_axis(np.asarray(x), idx, axis=axis).squeeze(axis)
    picked = np.asarray(picked).astype(np.float64)
    with np.errstate(all="ignore"):
        vals = np.where(valid, -wt * picked, 0.0)
    return vals, wt


def cross_entropy(x, target, weight, ignore_index, reduction, eps, rdt):
    """Class-index cross-entropy: one fused statistics pass per row block."""
    vals, wt = ce_rows(x, target, weight, ignore_index, eps, rdt)
    return reduce_rows(vals, reduction, wt.sum(), np.shape(target), rdt)


def ce_rows(x, target, weight, ignore_index, eps, rdt):
    """Per-row class-index cross-entropy (float64, flat) and ``w_t``."""
    k = _kernels()
    axis = 1 if x.ndim > 1 else 0
    c = int(x.shape[axis])
    ct = compute_dtype(rdt)
    t, valid, safe, wt = _target_weights(target, weight, ignore_index)
    cw, has_w, big_w = _class_weights(weight, c, ct)
    rows_total = int(np.prod(t.shape)) if t.ndim else 1
    m = np.full(rows_total, -np.inf)
    s = np.zeros(rows_total)
    zt = np.zeros(rows_total)
    zw = np.zeros(rows_total)
    if rows_total and c:
        r0 = 0
        for rows, rt in _row_blocks(np.asarray(x), t, axis):
            r1 = r0 + rows.shape[0]
            k.stats_rows(storage(rows), 0, np.ascontiguousarray(rt, np.int64), cw,
                         has_w, 0.0, big_w, eps != 0.0,
                         m[r0:r1], s[r0:r1], zt[r0:r1], zw[r0:r1])
            r0 = r1
    vals = row_loss(m, s, zt, zw, wt.reshape(-1), valid.reshape(-1), big_w, eps, c)
    return vals, wt


def cross_entropy_probs(x, y, weight, reduction, eps, rdt):
    """Probability-target cross-entropy: ``sum_c w_c q_c (lse - x_c)`` per row."""
    vals = prob_rows(x, y, weight, eps, rdt)
    out_shape = (x.shape[0],) + tuple(x.shape[2:]) if x.ndim > 1 else ()
    return reduce_rows(vals, reduction, vals.size, out_shape, rdt)


def prob_rows(x, y, weight, eps, rdt):
    """Per-row probability-target cross-entropy (float64, flat)."""
    k = _kernels()
    axis = 1 if x.ndim > 1 else 0
    c = int(x.shape[axis])
    ct = compute_dtype(rdt)
    cw, has_w, _ = _class_weights(weight, c, ct)
    x, y = np.asarray(x), np.asarray(y)
    out_shape = (x.shape[0],) + x.shape[2:] if axis == 1 else ()
    rows_total = int(np.prod(out_shape)) if out_shape else 1
    vals = np.zeros(rows_total)
    dummy = np.zeros(out_shape, np.int64)
    if rows_total and c:
        r0 = 0
        for (xr, _), (yr, _) in zip(_row_blocks(x, dummy, axis),
                                    _row_blocks(y, dummy, axis)):
            r1 = r0 + xr.shape[0]
            k.prob_rows(storage(xr), storage(yr), cw, has_w, eps, vals[r0:r1])
            r0 = r1
    return vals
