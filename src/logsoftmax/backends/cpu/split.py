"""Split-axis statistics: a row's chunks spread over threads, and the pieces
the dask backend merges across blocks.

Few long rows (fewer rows than twice the threads, longer than two chunks)
would leave threads idle in :mod:`.rows`. Here every ``(row, chunk)`` pair is
a task: :func:`forward_stats` computes each chunk's ``(m_c, s_c)``
(:func:`.segment.chunk_stats`), :func:`merge_rows` merges a row's chunks *in
chunk order* with :func:`.segment.merge` -- the sequence
:func:`.rows.row_stats` runs, so a split row has the same bits as an unsplit
one -- and :func:`forward_apply` writes pass 2 chunk by chunk, in parallel
again. The backward does the same with the chunk gradient sums. These
kernels take unit-stride rows (the backend sends strided ones to
:mod:`.rows`, which stages them).

:func:`block_stats` / :func:`block_apply` (and :func:`block_grad_sums` /
:func:`block_backward_apply`) are the per-block halves of the dask
backend's split plan: ``(m, s)`` of every row of a block (float64, the row's
chunks merged as above), and pass 2 given each row's merged ``(m, log s,
1/s)``; the backward's float64 row sums, and its pass 2 given the total.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._simd import view, wide_vectors
from .geometry import row_offset
from .rows import row_grad_sum, row_stats
from .segment import (
    CHUNK,
    chunk_grad_sum,
    chunk_stats,
    merge,
    row_log,
    write_backward,
    write_forward,
)

__all__ = [
    "forward_stats",
    "merge_rows",
    "forward_apply",
    "backward_sums",
    "backward_apply",
    "block_stats",
    "block_apply",
    "block_grad_sums",
    "block_backward_apply",
]

_KW = dict(cache=True, nogil=True, error_model="numpy")
_PKW = dict(cache=True, nogil=True, error_model="numpy", parallel=True)


@njit(**_PKW)
def forward_stats(xb, g, accurate, pm, ps):
    """``pm[r, c], ps[r, c]``: the stats of chunk ``c`` of row ``r``, all in
    parallel."""
    n = g[2]
    nch = pm.shape[1]
    for it in prange(pm.shape[0] * nch):
        wide_vectors()  # the prange body is a function of its own
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        pm[r, it - r * nch], ps[r, it - r * nch] = chunk_stats(
            xb, row_offset(g, 0, r) + c0, min(CHUNK, n - c0), accurate
        )


@njit(**_KW)
def merge_rows(pm, ps, m, lg, inv):
    """Merge each row's chunk stats in chunk order (as :func:`.rows.row_stats`)
    into ``m``, ``lg = log(s)`` and ``inv = 1/s``."""
    wide_vectors()
    for r in range(pm.shape[0]):
        mr = pm[r, 0]
        sr = ps[r, 0]
        for c in range(1, pm.shape[1]):
            mr, sr = merge(mr, sr, pm[r, c], ps[r, c])
        m[r] = mr
        lg[r] = row_log(sr)
        inv[r] = 1.0 / sr


@njit(**_PKW)
def forward_apply(xb, ob, g, op, accurate, nch, m, lg, inv):
    """Pass 2 of every ``(row, chunk)``, in parallel."""
    n = g[2]
    for it in prange(m.shape[0] * nch):
        wide_vectors()  # the prange body is a function of its own
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        cl = min(CHUNK, n - c0)
        xs = view(xb, row_offset(g, 0, r) + c0, cl)
        os = view(ob, row_offset(g, 1, r) + c0, cl)
        write_forward(xs, os, 0, cl, op, accurate, m[r], lg[r], inv[r])


@njit(**_PKW)
def backward_sums(db, yb, g, op, ps):
    """``ps[r, c]``: the gradient sum of chunk ``c`` of row ``r``, in parallel."""
    n = g[2]
    nch = ps.shape[1]
    for it in prange(ps.shape[0] * nch):
        wide_vectors()  # the prange body is a function of its own
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        cl = min(CHUNK, n - c0)
        ds = view(db, row_offset(g, 0, r) + c0, cl)
        ys = view(yb, row_offset(g, 1, r) + c0, cl)
        ps[r, it - r * nch] = chunk_grad_sum(ds, ys, 0, cl, op, True)


@njit(**_PKW)
def backward_apply(db, yb, ob, g, op, accurate, nch, s):
    """Pass 2 of the backward on every ``(row, chunk)``, in parallel."""
    n = g[2]
    for it in prange(s.shape[0] * nch):
        wide_vectors()  # the prange body is a function of its own
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        cl = min(CHUNK, n - c0)
        ds = view(db, row_offset(g, 0, r) + c0, cl)
        ys = view(yb, row_offset(g, 1, r) + c0, cl)
        os = view(ob, row_offset(g, 2, r) + c0, cl)
        write_backward(ds, ys, os, 0, cl, op, accurate, s[r])


@njit(**_KW)
def block_stats(xb, g, accurate, m, s):
    """``m[r], s[r]``: float64 stats of every (unit-stride) row of a block."""
    wide_vectors()
    n = g[2]
    for r in range(m.shape[0]):
        m[r], s[r] = row_stats(view(xb, row_offset(g, 0, r), n), n, accurate)


@njit(**_KW)
def block_apply(xb, ob, g, op, accurate, m, lg, inv):
    """Pass 2 of every row of a block given its merged ``(m, log s, 1/s)``."""
    wide_vectors()
    n = g[2]
    for r in range(m.shape[0]):
        xs = view(xb, row_offset(g, 0, r), n)
        os = view(ob, row_offset(g, 1, r), n)
        write_forward(xs, os, 0, n, op, accurate, m[r], lg[r], inv[r])


@njit(**_KW)
def block_grad_sums(db, yb, g, op, s):
    """``s[r]``: float64 gradient sum of every (unit-stride) row of a block
    (chunk sums added in order, as :func:`.rows.row_grad_sum`)."""
    wide_vectors()
    n = g[2]
    for r in range(s.shape[0]):
        s[r] = row_grad_sum(
            view(db, row_offset(g, 0, r), n), view(yb, row_offset(g, 1, r), n), n, op
        )


@njit(**_KW)
def block_backward_apply(db, yb, ob, g, op, accurate, s):
    """Pass 2 of the backward on every row of a block given its total ``s``."""
    wide_vectors()
    n = g[2]
    for r in range(s.shape[0]):
        ds = view(db, row_offset(g, 0, r), n)
        ys = view(yb, row_offset(g, 1, r), n)
        os = view(ob, row_offset(g, 2, r), n)
        write_backward(ds, ys, os, 0, n, op, accurate, s[r])
