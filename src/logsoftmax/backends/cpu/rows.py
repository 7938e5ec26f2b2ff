"""Row kernels: the reduction axis is a row of ``n`` elements (``inner == 1``).

Each row follows :mod:`.segment`'s definition chunk by chunk: stats, merge,
log, pass 2. Rows are addressed through a geometry array ``g`` built once per
layout by :mod:`.layout` (``g = [n1, n2, n, ni, off_0, s1_0, s2_0, sn_0,
si_0, off_1, ...]``, one block of five per operand, in elements of the flat
storage buffers): row ``r`` of operand ``o`` starts at ``off + (r // n2) *
s1 + (r % n2) * s2`` and steps by ``sn``. Rows whose step is not 1 are
gathered into a per-task staging row first (and scattered back), so the
arithmetic only ever runs on unit-stride vectors.

Every kernel has a serial form (``*_range``, rows ``[r0, r1)``) that the
backend calls directly for small problems -- waking numba's thread pool
costs more than the work there -- and a parallel form (``*_parallel``) that
splits the rows into ``ntask`` contiguous ranges under ``numba.prange``. Both
run the same per-row code, so they give the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._math import log_f64
from ._simd import view, wide_vectors
from ._vec import W, lane, vload_part, vstore_part
from .segment import (
    CHUNK,
    chunk_grad_sum,
    chunk_max,
    chunk_stats,
    chunk_sum_at,
    merge,
    row_log,
    write_backward,
    write_forward,
)

__all__ = [
    "forward_range",
    "forward_parallel",
    "forward_short",
    "forward_short_parallel",
    "backward_range",
    "backward_parallel",
    "backward_short",
    "backward_short_parallel",
    "logsumexp_range",
    "logsumexp_parallel",
    "row_stats",
]


@njit(inline="always", error_model="numpy")
def row_offset(g, op, r):
    """Start of row ``r`` of operand ``op`` (geometry layout: module doc)."""
    n2 = g[1]
    i1 = r // n2
    b = 4 + 5 * op
    return g[b] + i1 * g[b + 1] + (r - i1 * n2) * g[b + 2]


@njit(inline="always", error_model="numpy")
def row_step(g, op):
    return g[4 + 5 * op + 3]


@njit(cache=True, error_model="numpy")
def gather(buf, off, n, step, dst):
    """``dst[:n] = buf[off + k * step]`` (any step, 0 = broadcast)."""
    for k in range(n):
        dst[k] = buf[off + k * step]


@njit(cache=True, error_model="numpy")
def scatter(src, buf, off, n, step):
    """``buf[off + k * step] = src[k]``: the inverse of :func:`gather`."""
    for k in range(n):
        buf[off + k * step] = src[k]


@njit(inline="always", error_model="numpy")
def operand(buf, g, op, r, n, stage):
    """Row ``r`` of operand ``op`` as a unit-stride buffer: a view of ``buf``,
    or ``stage`` (the row gathered into it when its step is not 1)."""
    off = row_offset(g, op, r)
    step = row_step(g, op)
    if step == 1:
        return view(buf, off, n)
    gather(buf, off, n, step, stage)
    # a view, not `stage` itself: returning the owned array from one branch
    # made every row pay reference-count calls (~50 ns per row at n = 128)
    return view(stage, 0, n)


@njit(inline="always", error_model="numpy")
def target(buf, g, op, r, n, stage):
    """Where to write row ``r`` of operand ``op``: a view, or ``stage``."""
    if row_step(g, op) == 1:
        return view(buf, row_offset(g, op, r), n)
    return view(stage, 0, n)


@njit(inline="always", error_model="numpy")
def flush(buf, g, op, r, n, stage):
    step = row_step(g, op)
    if step != 1:
        scatter(stage, buf, row_offset(g, op, r), n, step)


@njit(cache=True, error_model="numpy")
def row_stats(xs, n, accurate):
    """``(m, s)`` of a whole unit-stride row: chunk stats merged in order."""
    m, s = chunk_stats(xs, 0, min(n, CHUNK), accurate)
    for c0 in range(CHUNK, n, CHUNK):
        mc, sc = chunk_stats(xs, c0, min(n - c0, CHUNK), accurate)
        m, s = merge(m, s, mc, sc)
    return m, s


@njit(cache=True, error_model="numpy")
def forward_range(xb, ob, g, op, accurate, r0, r1):
    """Forward (``op``: :class:`Op`) on rows ``[r0, r1)``. ``ob`` may be the
    same memory as ``xb`` with the same geometry (in place): every vector
    is read before it is written, and a staged row is gathered before its
    result is scattered back."""
    n = g[2]
    xst = np.empty(n if row_step(g, 0) != 1 else 0, xb.dtype)
    ost = np.empty(n if row_step(g, 1) != 1 else 0, ob.dtype)
    for r in range(r0, r1):
        xs = operand(xb, g, 0, r, n, xst)
        os = target(ob, g, 1, r, n, ost)
        m, s = row_stats(xs, n, accurate)
        write_forward(xs, os, 0, n, op, accurate, m, row_log(s), 1.0 / s)
        flush(ob, g, 1, r, n, ost)


@njit(cache=True, parallel=True, error_model="numpy")
def forward_parallel(xb, ob, g, op, accurate, ntask):
    """:func:`forward_range` over all rows, ``ntask`` row ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        forward_range(xb, ob, g, op, accurate, t * rows // ntask, (t + 1) * rows // ntask)


@njit(cache=True, error_model="numpy")
def row_grad_sum(ds, ys, n, op):
    """float64 gradient sum of a whole row: chunk sums added in order."""
    s = 0.0
    for c0 in range(0, n, CHUNK):
        s += chunk_grad_sum(ds, ys, c0, min(n - c0, CHUNK), op)
    return s


@njit(cache=True, error_model="numpy")
def backward_range(db, yb, ob, g, op, accurate, r0, r1):
    """Backward on rows ``[r0, r1)``; ``ob`` may be the memory of ``db`` or
    ``yb`` with the same geometry (in place, as :func:`forward_range`)."""
    n = g[2]
    dst_ = np.empty(n if row_step(g, 0) != 1 else 0, db.dtype)
    yst = np.empty(n if row_step(g, 1) != 1 else 0, yb.dtype)
    ost = np.empty(n if row_step(g, 2) != 1 else 0, ob.dtype)
    for r in range(r0, r1):
        ds = operand(db, g, 0, r, n, dst_)
        ys = operand(yb, g, 1, r, n, yst)
        os = target(ob, g, 2, r, n, ost)
        s = row_grad_sum(ds, ys, n, op)
        write_backward(ds, ys, os, 0, n, op, accurate, s)
        flush(ob, g, 2, r, n, ost)


@njit(cache=True, parallel=True, error_model="numpy")
def backward_parallel(db, yb, ob, g, op, accurate, ntask):
    """:func:`backward_range` over all rows, ``ntask`` ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        backward_range(db, yb, ob, g, op, accurate, t * rows // ntask, (t + 1) * rows // ntask)


#: rows per batch of the short-row kernels
BATCH = 16


@njit(inline="always", error_model="numpy")
def _offsets(g, op, r0, nb, out):
    """``out[i]`` = start of row ``r0 + i`` of operand ``op`` (no divisions
    per row: a 64-bit ``//`` per row cost ~20 cycles at n = 16)."""
    n2 = g[1]
    b = 4 + 5 * op
    i1 = r0 // n2
    i2 = r0 - i1 * n2
    for i in range(nb):
        out[i] = g[b] + i1 * g[b + 1] + i2 * g[b + 2]
        i2 += 1
        if i2 == n2:
            i2 = 0
            i1 += 1


@njit(cache=True, error_model="numpy")
def _batch_logs(s, lg, inv, nb):
    """``lg = log(s)`` and ``inv = 1/s`` for ``nb`` row sums, 8 per vector
    (lane-wise the same arithmetic as :func:`.segment.row_log`)."""
    wide_vectors()
    for i in range(0, nb, W // 2):
        v = vload_part(s, i, nb - i, 1.0)
        vstore_part(lg, i, log_f64(v), nb - i)
        vstore_part(inv, i, 1.0 / v, nb - i)


@njit(cache=True, error_model="numpy")
def forward_short(xb, ob, g, op, accurate, r0, r1):
    """:func:`forward_range` for unit-stride rows of ``n <= CHUNK``: the same
    arithmetic, run phase by phase over batches of :data:`BATCH` rows (all
    maxima, then all sums, then the logs as vectors, then all writes), so
    that the rows' dependency chains (max -> sum -> log -> write, ~300 cycles
    of latency) overlap instead of running one after another."""
    wide_vectors()
    n = g[2]
    xo = np.empty(BATCH, np.int64)
    oo = np.empty(BATCH, np.int64)
    mx = np.empty(BATCH, np.float32)
    m = np.empty(BATCH, np.float64)
    s = np.empty(BATCH, np.float64)
    lg = np.empty(BATCH, np.float64)
    inv = np.empty(BATCH, np.float64)
    for b0 in range(r0, r1, BATCH):
        nb = min(BATCH, r1 - b0)
        _offsets(g, 0, b0, nb, xo)
        _offsets(g, 1, b0, nb, oo)
        for i in range(nb):
            mx[i] = chunk_max(view(xb, xo[i], n), 0, n)
        for i in range(nb):
            m[i], s[i] = chunk_sum_at(view(xb, xo[i], n), n, mx[i], accurate)
        _batch_logs(s, lg, inv, nb)
        for i in range(nb):
            write_forward(
                view(xb, xo[i], n), view(ob, oo[i], n), 0, n, op, accurate,
                m[i], lg[i], inv[i],
            )


@njit(cache=True, error_model="numpy")
def backward_short(db, yb, ob, g, op, accurate, r0, r1):
    """:func:`backward_range` for unit-stride rows of ``n <= CHUNK``, in
    batches: all sums first, then all writes (as :func:`forward_short`)."""
    wide_vectors()
    n = g[2]
    do = np.empty(BATCH, np.int64)
    yo = np.empty(BATCH, np.int64)
    oo = np.empty(BATCH, np.int64)
    s = np.empty(BATCH, np.float64)
    for b0 in range(r0, r1, BATCH):
        nb = min(BATCH, r1 - b0)
        _offsets(g, 0, b0, nb, do)
        _offsets(g, 1, b0, nb, yo)
        _offsets(g, 2, b0, nb, oo)
        for i in range(nb):
            s[i] = chunk_grad_sum(view(db, do[i], n), view(yb, yo[i], n), 0, n, op)
        for i in range(nb):
            os = view(ob, oo[i], n)
            write_backward(view(db, do[i], n), view(yb, yo[i], n), os, 0, n, op, accurate, s[i])


@njit(inline="always", error_model="numpy")
def lse_value(m, s, nan_in_row):
    """float64 logsumexp from row stats: ``m + log(s)``; a row holding
    ``+inf`` is ``+inf`` (NaN if it also holds a NaN), all ``-inf`` is
    ``-inf`` (``log(0)``)."""
    if m == np.inf:
        return np.nan if nan_in_row else np.inf
    return m + row_log(s)


@njit(cache=True, error_model="numpy")
def _row_has_nan(xs, n):
    for k in range(n):
        v = lane(vload_part(xs, k, 1, np.float32(0.0)), 0)
        if v != v:
            return True
    return False


@njit(cache=True, error_model="numpy")
def logsumexp_range(xb, rb, g, r0, r1):
    """float64 logsumexp of rows ``[r0, r1)`` into ``rb`` (operand 1 of ``g``,
    one element per row), from the accurate stats (float64 terms: the
    float32 result is rounded once from a ~2**-34 accurate value)."""
    n = g[2]
    xst = np.empty(n if row_step(g, 0) != 1 else 0, xb.dtype)
    for r in range(r0, r1):
        xs = operand(xb, g, 0, r, n, xst)
        m, s = row_stats(xs, n, True)
        rb[row_offset(g, 1, r)] = lse_value(m, s, m == np.inf and _row_has_nan(xs, n))


@njit(cache=True, parallel=True, error_model="numpy")
def logsumexp_parallel(xb, rb, g, ntask):
    """:func:`logsumexp_range` over all rows, ``ntask`` ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        logsumexp_range(xb, rb, g, t * rows // ntask, (t + 1) * rows // ntask)


@njit(cache=True, parallel=True, error_model="numpy")
def forward_short_parallel(xb, ob, g, op, accurate, ntask):
    """:func:`forward_short` over all rows, ``ntask`` ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        forward_short(xb, ob, g, op, accurate, t * rows // ntask, (t + 1) * rows // ntask)


@njit(cache=True, parallel=True, error_model="numpy")
def backward_short_parallel(db, yb, ob, g, op, accurate, ntask):
    """:func:`backward_short` over all rows, ``ntask`` ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        backward_short(db, yb, ob, g, op, accurate, t * rows // ntask, (t + 1) * rows // ntask)
