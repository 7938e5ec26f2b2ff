r"""Fused loss kernels (numba): the row statistics of cross-entropy and the
in-place logit gradient of the fused linear + cross-entropy.

A *chunk* is a 2-D block ``z`` of logits, rows = tokens, columns = classes
``c0 .. c0 + n - 1`` of the vocabulary. The front door
(:mod:`logsoftmax._losses`, :mod:`logsoftmax._linear_ce`) feeds every row's
chunks in order; per row the kernels keep, in float64:

* ``m``: the running max of the (capped) logits, exact;
* ``s``: ``sum exp(z - m)`` over the columns seen so far, merged with the
  online-softmax rule ``s <- s e^{m_old - M} + s_c e^{m_c - M}``;
* ``zt``: the target's logit (the column ``target - c0`` when it lies in
  this chunk);
* ``zw``: ``sum_c w_c (m - z_c)`` (label smoothing), kept relative to the
  running max so that it is a sum of non-negative terms: the smoothing loss
  ``sum_c w_c (lse - z_c) = W log s + zw`` never cancels. When the max grows
  by ``d`` the seen columns' sum grows by ``d * W_seen``.

Inside a chunk, float32 terms ``exp32(z - m_c)`` (float64 ``math.exp`` for
float64 data) are added in float64: a row of 32000 terms is then exact to
~2**-40, far below a float32 ulp (API.md's accuracy rule). The additions
carry LLVM's ``reassoc`` flag (and only they: :func:`._simd.exp32` is a
separate function without fast-math), so the loops vectorise.

``softcap``: ``z <- c tanh(z / c)`` is applied in place by
:func:`cap_stats_rows` (the chunk buffer is the caller's scratch); the
backward reads the capped value back, since
``d/dz c tanh(z/c) = 1 - (z_capped / c)**2``. float32 ``tanh`` is evaluated
in float64 with :func:`._simd.exp64` (relative error < 1e-8, rounded once
to float32) and a 7th-order series below ``|u| < 0.01`` where
``e^{2u} - 1`` would cancel.

Gradient (:func:`grad_rows`), per row with coefficients ``A, B, E``::

    g_j = (A p_j - B [j == t] - E w_j) * (1 - (z_j / c)**2),   p_j = e^{z_j - lse}

overwritten in place on the chunk (``w_j = 1`` without class weights).
Rows whose three coefficients are 0 (ignored targets) are set to 0.

Every kernel is parallel over rows (``prange``); the arithmetic of a row
does not depend on the thread count, so results are bit-identical for any
number of threads. Chunks are 2-D arrays of any strides (the class axis of
an ``(N, C, d1, ...)`` input is a strided view); contiguous rows vectorise.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.core.errors import TypingError
from numba.extending import overload

from ._simd import exp64, exp_c, load, maxnum, neg_inf, wide_vectors
from ._math import exp_f32
from ._vec import W, vload, vload_n, vstore, vstore_n
from .rows import row_stats
from .segment import SHORT

__all__ = [
    "stats_rows",
    "cap_stats_rows",
    "cap_rows",
    "grad_rows",
    "prob_rows",
]

_KW = dict(cache=True, nogil=True, error_model="numpy")
# ``reassoc`` lets LLVM vectorise the float64 sums; nothing else is relaxed
# (no ``nnan``/``ninf``: NaN and inf rows must propagate).
_SUM = dict(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
_PAR = dict(cache=True, nogil=True, error_model="numpy", parallel=True)

_NINF = -np.inf


# ---------------------------------------------------------------------------
# scalar helpers
# ---------------------------------------------------------------------------
def _capped(z, c):
    """``c * tanh(z / c)`` in ``z``'s type (float32 or float64)."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(_capped)
def _capped_ol(z, c):
    if z == types.float64:

        def impl(z, c):
            return c * math.tanh(z / c)

        return impl
    if z == types.float32:

        def impl(z, c):
            u = np.float64(z) / c
            a = -u if u < 0.0 else u
            a = 20.0 if a > 20.0 else a  # tanh(20) == 1 in float64
            e = exp64(2.0 * a)
            big = (e - 1.0) / (e + 1.0)
            a2 = a * a
            # series: tanh a = a - a^3/3 + 2a^5/15 - 17a^7/315 (next term < 3e-17)
            small = a * (1.0 - a2 * (1.0 / 3.0 - a2 * (2.0 / 15.0 - a2 * (17.0 / 315.0))))
            t = small if a < 0.01 else big
            t = -t if u < 0.0 else t
            return np.float32(c * t)

        return impl
    raise TypingError(f"_capped: unsupported type {z}")


def _ct(buf, v):
    """float64 ``v`` in the compute type of ``buf`` (float64 for float64
    buffers, float32 for float32/bf16/f16 storage)."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(_ct)
def _ct_ol(buf, v):
    if buf.dtype == types.float64:
        return lambda buf, v: np.float64(v)
    if buf.dtype in (types.float32, types.uint16, types.int16):
        return lambda buf, v: np.float32(v)
    raise TypingError(f"_ct: unsupported buffer dtype {buf.dtype}")


@njit(**_KW)
def _merge(m, s, mc, sc):
    """Online-softmax merge of ``(m, s)`` with a chunk's ``(mc, sc)``."""
    big = m if m >= mc else mc
    if big != big:  # a NaN max (cannot happen from maxnum; kept for safety)
        return big, np.nan
    if big == _NINF:  # nothing but -inf so far: s and sc are 0 (or NaN)
        return big, s + sc
    fa = 1.0 if m == big else math.exp(m - big)
    fb = 1.0 if mc == big else math.exp(mc - big)
    return big, s * fa + sc * fb


@njit(**_SUM)
def _row_max(row, n):
    wide_vectors()
    mc = neg_inf(row)
    for k in range(n):
        mc = maxnum(mc, load(row, k))
    return np.float64(mc)


#: elements per float32 block sum: each of LLVM's 64 vector accumulators
#: (16 lanes x 4) adds 32 terms, then the block sum is added in float64.
#: Measured (one thread, rows of 8000): 1.95 G/s vs 1.0 G/s for float64
#: accumulation of every term, which kept exp32 out of the vector loop.
_BLOCK = 2048


@njit(**_SUM)
def _row_sum_exp(row, n, mc):
    """``sum exp(z - mc)`` (float32 blocks of :data:`_BLOCK`, float64 across
    blocks); NaN if the row holds a NaN (``maxnum`` hid it from ``mc``), 0 for
    an all--inf row."""
    wide_vectors()
    if mc == _NINF:
        for k in range(n):
            v = load(row, k)
            if v != v:
                return np.nan
        return 0.0
    m = _ct(row, mc)  # exact: mc is one of the row's elements
    sc = 0.0
    for b in range(0, n, _BLOCK):
        e = min(n, b + _BLOCK)
        acc = m * 0
        for k in range(b, e):
            acc += exp_c(load(row, k) - m)
        sc += np.float64(acc)
    return sc


@njit(**_SUM)
def _row_weighted_gap(row, n, mc, cw, c0, has_w):
    """``sum_k w_k (mc - z_k)``: non-negative terms in the compute type,
    block sums in float64 (``w_k = 1`` without weights)."""
    wide_vectors()
    m = _ct(row, mc)
    acc = 0.0
    for b in range(0, n, _BLOCK):
        e = min(n, b + _BLOCK)
        part = m * 0
        if has_w:
            for k in range(b, e):
                part += cw[c0 + k] * (m - load(row, k))
        else:
            for k in range(b, e):
                part += m - load(row, k)
        acc += np.float64(part)
    return acc


def _vector_stats(row, n):
    """``(max, sum exp(z - max))`` of a unit-stride row by the log-softmax
    kernels' own explicit-vector code, or NaNs where it does not apply."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(_vector_stats, jit_options=_KW)
def _vector_stats_ol(row, n):
    if row.dtype == types.float64:  # float64 has its own kernels there
        return lambda row, n: (np.nan, np.nan)
    f32 = row.dtype == types.float32

    def impl(row, n):
        if n == 0 or row.strides[0] != row.itemsize:
            return np.nan, np.nan
        # float32 rows up to SHORT take float64 terms, as in log_softmax
        return row_stats(row, n, f32 and n <= SHORT)

    return impl


@njit(**_KW)
def _row_max_sum(row, n):
    """``(max, sum exp(z - max))`` of one row, both float64.

    Finite rows of unit stride take the log-softmax kernels' row statistics
    (1024x32000 float32 chunk, 2 threads: 4.6 vs 24 ms for the loops below;
    the sum's relative error 4e-7 against 1e-8, a third of a float32 ulp of
    a loss of ~10); rows holding NaN or infinities, strided rows and float64
    keep the loops below, whose special-value rules are the contract."""
    mc, sc = _vector_stats(row, n)
    if not (_NINF < mc < np.inf and sc < np.inf):  # (NaN fails too)
        mc = _row_max(row, n)
        sc = _row_sum_exp(row, n, mc)
    return mc, sc


@njit(**_KW)
def _row_update(row, n, r, c0, target, cw, has_w, w_seen, w_chunk, smooth,
                m, s, zt, zw):
    """Fold one row of a chunk into the row state ``(m, s, zt, zw)[r]``."""
    mc, sc = _row_max_sum(row, n)
    m_old = m[r]
    big, s_new = _merge(m_old, s[r], mc, sc)
    s[r] = s_new
    if smooth:
        gap = _row_weighted_gap(row, n, mc, cw, c0, has_w)
        old = zw[r]
        if w_seen != 0.0:
            old += (big - m_old) * w_seen
        if w_chunk != 0.0:
            gap += (big - mc) * w_chunk
        zw[r] = old + gap
    m[r] = big
    t = target[r] - c0
    if t >= 0 and t < n:
        zt[r] = np.float64(load(row, t))


# ---------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------
@njit(**_PAR)
def stats_rows(z, c0, target, cw, has_w, w_seen, w_chunk, smooth, m, s, zt, zw):
    """Fold chunk ``z`` (rows x n, storage-typed, read only) into the row state.

    Args:
      z: 2-D chunk, float32/float64 or bf16 (uint16) / f16 (int16) storage.
      c0: vocabulary index of the chunk's first column.
      target: int64 per row (any value; only ``c0 <= t < c0 + n`` is picked).
      cw: class weights (float32/float64, length V) when ``has_w``.
      w_seen, w_chunk: sums of the class weights over the columns before
        this chunk and in it (label smoothing only).
      smooth: whether to accumulate ``zw``.
      m, s, zt, zw: float64 row state, updated in place.
    """
    rows, n = z.shape
    for r in prange(rows):
        _row_update(z[r], n, r, c0, target, cw, has_w, w_seen, w_chunk, smooth,
                    m, s, zt, zw)


@njit(**_KW)
def _cap_row(row, n, cap):
    wide_vectors()
    for k in range(n):
        row[k] = _capped(row[k], cap)


@njit(**_PAR)
def cap_stats_rows(z, cap, c0, target, cw, has_w, w_seen, w_chunk, smooth,
                   m, s, zt, zw):
    """:func:`stats_rows` after ``z <- cap * tanh(z / cap)`` in place (``z`` is
    the caller's float32/float64 scratch chunk); the capped row is still in
    cache when the statistics read it."""
    rows, n = z.shape
    for r in prange(rows):
        row = z[r]
        _cap_row(row, n, cap)
        _row_update(row, n, r, c0, target, cw, has_w, w_seen, w_chunk, smooth,
                    m, s, zt, zw)


@njit(**_PAR)
def cap_rows(z, cap):
    """``z <- cap * tanh(z / cap)`` in place (the backward's recomputed chunk)."""
    rows, n = z.shape
    for r in prange(rows):
        _cap_row(z[r], n, cap)


@njit(**_PAR)
def grad_rows(z, c0, target, cw, has_w, a, b, e, m, log_s, cap):
    """Overwrite chunk ``z`` (float32/float64 scratch holding the capped
    logits) with ``dloss/dlogits`` (module docstring).

    Args:
      a, b, e: per-row coefficients in ``z``'s dtype (see
        :func:`logsoftmax._linear_ce.row_coefficients`).
      m, log_s: per-row max and log of the sum, in ``z``'s dtype (so
        ``p = exp((z - m) - log_s)``, the API's order).
      cap: the softcap ``c`` (0: none).
    """
    rows, n = z.shape
    inv = 0.0 if cap == 0.0 else 1.0 / cap
    for r in prange(rows):
        row = z[r]
        ar, br, er, mr, lr = a[r], b[r], e[r], m[r], log_s[r]
        if ar == 0 and br == 0 and er == 0:
            for k in range(n):
                row[k] = 0
            continue
        t = target[r] - c0
        hit = t >= 0 and t < n
        zt = row[t] if hit else row[0]
        ic = _ct(row, inv)
        _grad_row(row, n, c0, cw, has_w, ar, er, mr, lr, ic, cap != 0.0)
        if hit:
            wt = cw[c0 + t] if has_w else _ct(row, 1.0)
            g = ar * exp_c((zt - mr) - lr) - br - er * wt
            if cap != 0.0:
                g *= 1 - (zt * ic) * (zt * ic)
            row[t] = g


def _grad_row_vector(row, n, c0, cw, has_w, ar, er, mr, lr):
    """:func:`_grad_row` without softcap in explicit float32 vectors; False
    where it does not apply (other dtypes, strided rows)."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(_grad_row_vector, jit_options=_KW)
def _grad_row_vector_ol(row, n, c0, cw, has_w, ar, er, mr, lr):
    if row.dtype != types.float32 or cw.dtype != types.float32:
        return lambda row, n, c0, cw, has_w, ar, er, mr, lr: False

    def impl(row, n, c0, cw, has_w, ar, er, mr, lr):
        if row.strides[0] != 4:
            return False
        wide_vectors()
        zero = np.float32(0.0)
        k = 0
        if has_w:
            while k < n:
                cnt = min(W, n - k)
                p = exp_f32((vload_n(row, k, cnt, zero) - mr) - lr)
                vstore_n(row, k, ar * p - er * vload_n(cw, c0 + k, cnt, zero), cnt)
                k += W
        else:
            while k < n:
                cnt = min(W, n - k)
                p = exp_f32((vload_n(row, k, cnt, zero) - mr) - lr)
                vstore_n(row, k, ar * p - er, cnt)
                k += W
        return True

    return impl


@njit(**_KW)
def _grad_row(row, n, c0, cw, has_w, ar, er, mr, lr, ic, capped):
    """``g_k = (a p_k - e w_k) (1 - (z_k / c)**2)`` over one row, in place
    (the target's column is fixed by the caller). Without softcap, float32
    rows take explicit vectors (1024x32000 chunk, 2 threads: see
    benchmarks/bench_losses.py)."""
    if not capped and _grad_row_vector(row, n, c0, cw, has_w, ar, er, mr, lr):
        return
    wide_vectors()
    if has_w:
        if capped:
            for k in range(n):
                zk = row[k]
                row[k] = (ar * exp_c((zk - mr) - lr) - er * cw[c0 + k]) * (
                    1 - (zk * ic) * (zk * ic))
        else:
            for k in range(n):
                row[k] = ar * exp_c((row[k] - mr) - lr) - er * cw[c0 + k]
    elif capped:
        for k in range(n):
            zk = row[k]
            row[k] = (ar * exp_c((zk - mr) - lr) - er) * (1 - (zk * ic) * (zk * ic))
    else:
        for k in range(n):
            row[k] = ar * exp_c((row[k] - mr) - lr) - er


@njit(**_PAR)
def prob_rows(x, y, cw, has_w, smoothing, out):
    r"""Cross-entropy with class-probability targets, one value per row.

    ``out[r] = sum_c w_c q_c (lse - x_c)`` with ``q = (1 - eps) y + eps / C``,
    computed as ``sum_c w_c q_c (m - x_c) + log(s) sum_c w_c q_c`` in float64
    (no cancellation between ``lse`` and ``x``).

    Args:
      x: 2-D logits (rows x C), storage-typed; y: probabilities, the same
        shape and storage type. cw: class weights if ``has_w``.
      smoothing: ``eps``. out: float64 per row.
    """
    rows, n = x.shape
    keep = 1.0 - smoothing
    unif = smoothing / n
    for r in prange(rows):
        row = x[r]
        yr = y[r]
        mc, sc = _row_max_sum(row, n)
        gap, q_sum = _prob_row(row, yr, n, mc, cw, has_w, keep, unif)
        # an all--inf row has no max to measure from: NaN, as PyTorch
        out[r] = gap + math.log(sc) * q_sum if mc != _NINF else np.nan


@njit(**_SUM)
def _prob_row(row, yr, n, mc, cw, has_w, keep, unif):
    """``(sum_k q_k (mc - x_k), sum_k q_k)`` with ``q = w ((1-eps) y + eps/C)``."""
    wide_vectors()
    acc = 0.0
    q_sum = 0.0
    for k in range(n):
        q = keep * np.float64(load(yr, k)) + unif
        if has_w:
            q *= np.float64(cw[k])
        acc += q * (mc - np.float64(load(row, k)))
        q_sum += q
    return acc, q_sum
