"""The float64 kernels (numba): every op on float64 data, over ``(outer1,
outer2, n, inner)``.

The cpu backend sends only float64 buffers here: float64 inputs, and
float32/bfloat16/float16 inputs asked for a float64 result (widened to a
float64 copy first, so the result depends on the values, not on how they
were stored; PyTorch computes in float64 there too). The result may be
stored as float64, float32, bfloat16 or float16: every value is computed in
float64 (or double-double) and rounded once on store (:func:`._simd.store`;
bfloat16/float16 through a round-to-odd float32, which makes the second
rounding exact).

Why a module of its own: the float32 kernels (:mod:`.rows`, :mod:`.columns`,
:mod:`.split`) are explicit 16-lane float32 vectors with their own ``exp``,
built for speed at float32 accuracy. A float64 result rounded from plain
float64 arithmetic misses correct rounding by up to 1.5 eps (numbers below),
so these kernels carry double-double sums and logs. Their ``exp`` is
:func:`._math.exp_f64_ulp` (within one ulp, vectors or scalars, the same
bits), and their hot loops are explicit float64 vectors (8 lanes): with a
``math.exp`` call per element they were scalar, and the ``exp`` alone took
70% of their time (twenty-fifth Intel session, docs/performance.md: 2.1-4.4x
faster since, in-process A/B). Loops without an ``exp`` are left to LLVM's
autovectoriser.

Algorithm (the arithmetic is *defined* per row, so results are bit-identical
whatever the strides of input or output, in place or not, the number of
threads, or whether a long row is split across threads):

* A row of ``n`` elements is cut into chunks of ``CHUNK = 4096`` elements
  (the last one shorter). For chunk ``c``: ``m_c = max`` (exact;
  ``llvm.maxnum``, vectorised) and ``s_c + l_c = sum(exp(x - m_c))``, a
  compensated (TwoSum) sum in :data:`LANES` lanes: element ``k`` goes to
  lane ``k % LANES``, each lane a sequential double-double whose ``lo``
  collects every addition's rounding error, and the lanes are added in a
  fixed tree (:func:`_lanes_dd_vec`), so the sum is exact to ~``n * 2**-106``.
  A tile column keeps the same lanes (:func:`_inner_stats`). (One
  sequential lane before: its chain of additions held a row of 1000 to
  2.6 ns an element.)
* Chunks merge in order, as double-doubles:
  ``(m, s) <- (max(m, m_c), s * e^(m - M) + s_c * e^(m_c - M))``.
  This is the online softmax at chunk granularity: pass 1 reads each row
  once from memory (a chunk's second look, for the exponentials, hits L1).
* ``L = log(s + lo)`` as a double-double: :func:`._math.log_f64` and one
  Newton step with a double-double ``exp`` (:func:`._simd.log_dd_vec`: a
  tile's columns 8 at a time, a row through :func:`._simd.log_dd`, the same
  arithmetic).
* Pass 2 writes ``y = (x - m) - L`` (log_softmax), evaluated in
  double-double and rounded once, or ``exp(x - m) * (1/s)`` (softmax),
  re-reading ``x`` from cache. logsumexp is ``m + L`` in double-double,
  rounded once.
* Backward: ``S = sum(diff_dst)`` (softmax: ``sum(diff_dst * dst)``, each
  product exact as a double-double by an ``fma``) per chunk in the lanes
  of the forward's sums (element ``k`` a compensated sum in lane ``k %
  LANES``, the lanes added by the same tree), chunk sums added left to
  right as double-doubles; then one pass writing ``diff_dst - exp(dst) *
  S`` (softmax: ``dst * (diff_dst - S)``) in double-double, ``exp(dst)`` a
  double-double too (:func:`._simd.exp_dd_any_vec`), rounded once. With a
  plain float64 pairwise tree for ``S`` and plain arithmetic after it, the
  backward lost to PyTorch's on 34 of 96 problems (log_softmax, up to 5
  eps more) and 22 of 96 (softmax), by ``S``'s rounding where the row's
  terms cancel and the float64 ``exp``'s ulp; now <= 0.5 eps.

Accuracy (3-sigma logits, vs a long double oracle, in eps; PyTorch 2.13 in
brackets; ``python tests/test_torch_parity.py``): log_softmax 0.50-0.56
(1.27-6.2), logsumexp 0.25-0.49 (0.35-1.01), log_softmax backward 0.46-0.50
(2.6-395), softmax backward 0.04-0.23 (1.1-6.0) at n = 7..65536. Without the
double-doubles: plain ``(x - m) - log(s)`` was 1.48 eps at n = 7 (PyTorch
1.27), plain ``m + log(s)`` 0.372 eps at n = 32000 (PyTorch 0.359), and a
pairwise tree instead of the compensated sum cost up to 0.5 eps at n = 7.
Details in docs/performance.md.

Special values fall out of the arithmetic: a NaN or ``+inf`` in a chunk
makes its sum NaN (``inf - inf``), a ``-inf`` element contributes 0; a chunk
of only ``-inf`` contributes ``s_c = 0`` (or NaN if it also holds a NaN:
``maxnum`` hides NaN, so such chunks are rescanned). An all-``-inf`` row
ends with ``m = -inf, s = 0`` and pass 2 gives ``-inf - -inf = NaN``.

Operands are flat buffers with a geometry ``g = [off, s1, s2, sn, si]`` in
elements (offset, the two outer strides, the axis stride, the inner
stride). ``op`` is ``int(Op.LOG_SOFTMAX)`` or ``int(Op.SOFTMAX)``; ``ip`` is
an ``int(InPlace.*)``: which input ``out`` is.

Parallelism (``numba.prange``): over rows (``inner == 1``) or over
``(outer, inner tile)`` items; rows longer than two chunks with fewer rows
than ``2 * threads`` are split chunk-wise across threads (partials merged in
chunk order, so split and unsplit give the same bits). Every row and tile
kernel also exists as a serial ``*_serial`` copy (same source, same bits)
that the backend runs for small problems (see ``SERIAL_MAX`` in
``backends/cpu/__init__.py``) and the JAX adapter runs always.
"""

from __future__ import annotations

import math
import types as pytypes

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .. import InPlace, Op
from ._math import exp_f64_ulp
from ._simd import I0, I1, acc_dd, add_dd, exp_dd_any_vec, log_dd, log_dd_vec, maxnum, store, two_prod, two_sum, view
from ._vec import W, lane, splat, vload, vload_part, vmax, vstore, vstore_part, where

__all__ = [
    "CHUNK",
    "fwd_rows",
    "fwd_rows_serial",
    "fwd_rows_split",
    "fwd_inner",
    "fwd_inner_serial",
    "lse_rows",
    "lse_rows_serial",
    "lse_rows_split",
    "lse_inner",
    "lse_inner_serial",
    "bwd_rows",
    "bwd_rows_serial",
    "bwd_rows_split",
    "bwd_inner",
    "bwd_inner_serial",
]

#: elements per chunk (a chunk and its staging fit L1/L2); the API's
#: accuracy rule allows pairwise blocks <= 4096
CHUNK = 4096
#: chunks per parallel task on the split path (amortises per-task set-up)
_GROUP = 8
#: LLVM vectorised the first version's hot loops 64 float32 at a time and
#: left the remaining < 64 to a scalar loop (473 ns per row at n = 112 vs
#: 180 at n = 128, one thread). So the max runs as multiples of _VB and
#: finishes with an overlapping last block of _VB (max is idempotent); the
#: writes are explicit vectors (:func:`_fwd_row_vec`).
_VB = 64
#: the compensated sums of a row (and of a tile column) run in this many
#: lanes, one float64 vector (element k in lane k % LANES)
LANES = W // 2
assert LANES == 8  # _lanes_dd_vec's tree is written out for 8

_KW = dict(cache=True, nogil=True, error_model="numpy")
_PKW = dict(cache=True, nogil=True, error_model="numpy", parallel=True)


def _parallel_and_serial(fn):
    """Compile ``fn`` twice: the returned ``parallel=True`` kernel, and a serial
    copy published in this module as ``<name>_serial`` (``prange`` is then a
    plain ``range``). Both run the same per-row arithmetic, so they give the
    same bits; the serial one is for small problems, where waking numba's
    thread pool (which spin-waits against OpenBLAS's/torch's pools) cost
    0.5-20 ms for a 64x10 log_softmax under load. The copy gets its own
    ``__qualname__``: numba's on-disk cache is keyed by qualname and
    bytecode, not by the ``parallel`` flag, so the two would otherwise load
    each other's machine code."""
    name = fn.__name__ + "_serial"
    ser = pytypes.FunctionType(
        fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__
    )
    ser.__qualname__ = fn.__qualname__ + "_serial"
    ser.__doc__ = f"Serial variant of :func:`{fn.__name__}` (same bits)."
    fn.__globals__[name] = njit(**_KW)(ser)
    return njit(**_PKW)(fn)


# ---------------------------------------------------------------------------
# per-row arithmetic: statistics, merge, the two passes
# ---------------------------------------------------------------------------
@njit(**_KW)
def _has_nan(buf, off, n, step):
    for k in range(n):
        v = buf[off + k * step]
        if v != v:
            return True
    return False


@njit(forceinline=True)
def _add_sum(ah, al, bh, bl):
    """:func:`._simd.add_dd` for the lanes' trees, where a sum that is not
    finite (an infinite or NaN term, an overflow) is ``(ah + bh, 0)``: the
    plain sum's value, which the compensation would turn into NaN (``inf -
    inf``). So a backward row whose ``diff_dst`` holds an infinity sums to
    it, as a plain sum does (the forward's sums of ``exp`` terms are NaN
    there either way). Vectors or scalars."""
    h, l_ = add_dd(ah, al, bh, bl)
    s = ah + bh
    finite = s - s == 0.0
    return where(finite, h, s), where(finite, l_, 0.0)


@njit(forceinline=True)
def _lanes_dd_cols(th, tl, J, jn):
    """The ``LANES`` double-double partial sums ``(th[q J + j], tl[q J +
    j])`` of each column ``j < jn`` of a tile added in a fixed tree, lane
    ``q`` with ``q + step`` for ``step = LANES/2, ..., 1``, into ``th[:jn]``,
    ``tl[:jn]``: a vector of columns at a time, the additions of
    :func:`_lanes_dd_vec` lane by lane."""
    step = LANES // 2
    while step >= 1:
        for q in range(step):
            a = q * J
            b = (q + step) * J
            for j in range(0, jn, LANES):
                c = min(LANES, jn - j)
                h, l_ = _add_sum(vload_part(th, a + j, c, 0.0), vload_part(tl, a + j, c, 0.0),
                                 vload_part(th, b + j, c, 0.0), vload_part(tl, b + j, c, 0.0))
                vstore_part(th, a + j, h, c)
                vstore_part(tl, a + j, l_, c)
        step //= 2


@njit(forceinline=True)
def _lanes_dd_vec(hv, lv):
    """A row's ``LANES`` double-double partial sums (the lanes of ``hv``,
    ``lv``) added in the tree of :func:`_lanes_dd_cols`, as scalars in
    registers (no scratch allocation per row)."""
    h0, l0 = _add_sum(lane(hv, 0), lane(lv, 0), lane(hv, 4), lane(lv, 4))
    h1, l1 = _add_sum(lane(hv, 1), lane(lv, 1), lane(hv, 5), lane(lv, 5))
    h2, l2 = _add_sum(lane(hv, 2), lane(lv, 2), lane(hv, 6), lane(lv, 6))
    h3, l3 = _add_sum(lane(hv, 3), lane(lv, 3), lane(hv, 7), lane(lv, 7))
    h0, l0 = _add_sum(h0, l0, h2, l2)
    h1, l1 = _add_sum(h1, l1, h3, l3)
    return _add_sum(h0, l0, h1, l1)


@njit(**_KW)
def _seg_max(seg):
    """``maxnum`` over ``seg``: multiples of :data:`_VB`, then the last
    ``_VB`` elements again (overlapping; max is idempotent)."""
    n = seg.shape[0]
    m = -np.inf
    nb = n - n % _VB
    for k in range(nb):
        m = maxnum(m, seg[k])
    if nb < n:
        st = max(0, n - _VB)
        tail = view(seg, st, n - st)
        for k in range(n - st):
            m = maxnum(m, tail[k])
    return m


@njit(**_KW)
def _chunk_stats(seg):
    """``(m_c, s_c, l_c)`` of one chunk: exact max and the compensated sum of
    ``exp(x - m_c)`` as a double-double ``s_c + l_c``; an all--inf chunk
    gives ``(-inf, 0, 0)`` or ``(-inf, nan, 0)``."""
    n = seg.shape[0]
    m = _seg_max(seg)
    if m == -np.inf:
        return m, (np.nan if _has_nan(seg, I0, n, I1) else 0.0), 0.0
    # LANES compensated sums side by side (element k in lane k % LANES): the
    # exps and the TwoSums a vector at a time. Lanes past the chunk's end
    # add exp(-inf) = 0, which leaves a lane's (hi, lo) as it is, so the
    # lanes hold what the column kernel's lanes hold (_inner_stats).
    mv = splat(m)
    hv = splat(0.0)
    lv = hv
    nv = n - n % LANES
    for k in range(0, nv, LANES):
        hv, lv = acc_dd(hv, lv, exp_f64_ulp(vload(seg, k) - mv))
    if nv < n:  # (vload_n would mask every vector short of 16 lanes, not 8)
        hv, lv = acc_dd(hv, lv, exp_f64_ulp(vload_part(seg, nv, n - nv, -np.inf) - mv))
    hi, lo = _lanes_dd_vec(hv, lv)
    s = hi + lo
    return m, s, lo - (s - hi)


@njit
def _merge(m, s, lo, mc, sc, lc):
    """Online-softmax merge of chunk ``(mc, sc + lc)`` into ``(m, s + lo)``;
    sums are double-doubles."""
    if mc > m:
        f = exp_f64_ulp(m - mc)
        h, l = add_dd(s * f, lo * f, sc, lc)
        return mc, h, l
    if mc == m:
        h, l = add_dd(s, lo, sc, lc)
        return m, h, l
    f = exp_f64_ulp(mc - m)
    h, l = add_dd(s, lo, sc * f, lc * f)
    return m, h, l


@njit(**_KW)
def _row_stats(seg):
    """``(m, s, lo)`` of a whole row: chunk stats merged in chunk order."""
    n = seg.shape[0]
    m, s, lo = _chunk_stats(view(seg, 0, min(n, CHUNK)))
    for c0 in range(CHUNK, n, CHUNK):
        mc, sc, lc = _chunk_stats(view(seg, c0, min(n - c0, CHUNK)))
        m, s, lo = _merge(m, s, lo, mc, sc, lc)
    return m, s, lo


@njit
def _ls64(x, m, lh, ll):
    """``(x - m) - (lh + ll)`` evaluated in double-double and rounded once;
    special values (inf/NaN operands make the compensation NaN) take the
    plain ``(x - m) - lh``."""
    d, de = two_sum(x, -m)
    y1, ye = two_sum(d, -lh)
    y = y1 + ((ye + de) - ll)
    return where(y == y, y, y1)


@njit(forceinline=True)
def _fwd_value(x, m, lh, ll, inv, op):
    """Pass 2 of the forward on one value or vector (:func:`_fwd_write`)."""
    if op == Op.LOG_SOFTMAX:
        return _ls64(x, m, lh, ll)
    return exp_f64_ulp(x - m) * inv


@njit(forceinline=True)
def _bwd_value(d, y, sh, sl, op):
    """Pass 2 of the backward on a vector (:func:`_bwd_write`), from the
    double-double row sum ``sh + sl``, evaluated in double-double and
    rounded once: ``d - e**y (sh + sl)`` (log_softmax; ``e**y`` by
    :func:`._simd.exp_dd_any_vec`, the product's error by ``fma``) or
    ``y ((d - sh) - sl)`` (softmax). Where the compensation is NaN (an
    infinite or NaN operand, an overflow) the plain ``d - e**y sh`` or
    ``y (d - sh)`` is taken, as :func:`_ls64` does."""
    if op == Op.LOG_SOFTMAX:
        eh, el = exp_dd_any_vec(y)
        ph, pe = two_prod(eh, sh)
        pl = pe + (eh * sl + el * sh)
        rh, re = two_sum(d, -ph)
        r = rh + (re - pl)
        return where(r == r, r, d - ph)
    th, te = two_sum(d, -sh)
    ph, pe = two_prod(y, th)
    r = ph + (pe + y * (te - sl))
    return where(r == r, r, y * (d - sh))


def store_vec(buf, i, v):
    """Round the float64 vector ``v`` once into ``buf[i:i + LANES]`` (any
    storage type)."""
    raise NotImplementedError  # pragma: no cover


def store_vec_part(buf, i, v, count):
    """:func:`store_vec` of lanes ``j < count`` only."""
    raise NotImplementedError  # pragma: no cover


@overload(store_vec)
def _store_vec_ol(buf, i, v):
    if buf.dtype == types.float64:
        return lambda buf, i, v: vstore(buf, i, v)

    def lanes(buf, i, v):  # float32/bfloat16/float16: store's one rounding a lane
        for j in range(LANES):
            store(buf, i + j, lane(v, j))

    return lanes


@overload(store_vec_part)
def _store_vec_part_ol(buf, i, v, count):
    if buf.dtype == types.float64:
        return lambda buf, i, v, count: vstore_part(buf, i, v, count)

    def lanes(buf, i, v, count):
        for j in range(count):
            store(buf, i + j, lane(v, j))

    return lanes


# Pass 2 in explicit vectors (a masked last one): LLVM left the scalar loops
# scalar once exp_f64_ulp was inlined into them (a row of 1000 float64: 0.94
# ns an element for the backward's write, 0.59 for the forward's; 0.50 and
# 0.30 as vectors). Other result types round lane by lane (store_vec).
@njit(forceinline=True)
def _fwd_row_vec(xs, os, n, m, lh, ll, inv, op):
    mv, lhv, llv, iv = splat(m), splat(lh), splat(ll), splat(inv)
    nv = n - n % LANES
    for k in range(0, nv, LANES):
        store_vec(os, k, _fwd_value(vload(xs, k), mv, lhv, llv, iv, op))
    if nv < n:
        store_vec_part(os, nv, _fwd_value(vload_part(xs, nv, n - nv, 0.0), mv, lhv, llv, iv, op), n - nv)


@njit(forceinline=True)
def _bwd_row_vec(ds, ys, os, n, sh, sl, op):
    shv, slv = splat(sh), splat(sl)
    nv = n - n % LANES
    for k in range(0, nv, LANES):
        store_vec(os, k, _bwd_value(vload(ds, k), vload(ys, k), shv, slv, op))
    if nv < n:
        c = n - nv
        store_vec_part(os, nv, _bwd_value(vload_part(ds, nv, c, 0.0), vload_part(ys, nv, c, 0.0), shv, slv, op), c)


@njit(**_KW)
def _fwd_write(xs, os, m, s, lo, op):
    """Pass 2 of the forward into ``os`` (any storage type): log_softmax
    ``(x - m) - log(s + lo)`` by :func:`_ls64`, or softmax
    ``exp(x - m) * (1/s)``; ``os`` may be ``xs`` (in place: each vector is
    read before it is written)."""
    lh, ll = log_dd(s, lo) if op == Op.LOG_SOFTMAX else (0.0, 0.0)
    _fwd_row_vec(xs, os, xs.shape[0], m, lh, ll, 1.0 / s, op)


@njit(**_KW)
def _lse_value(buf, off, n, step, m, s, lo):
    """logsumexp from row stats: ``m + log(s + lo)`` as a double-double
    rounded once (~correctly rounded); ``+inf`` rows are ``+inf`` unless
    they hold a NaN (``buf[off + k * step]``, ``k < n``)."""
    if m == np.inf:
        return np.nan if _has_nan(buf, off, n, step) else np.inf
    if m != -np.inf and s == s:
        lh, ll = log_dd(s, lo)
        r, e = two_sum(m, lh)
        return r + (e + ll)
    return m + math.log(s)


@njit(forceinline=True)
def _acc_grad(hv, lv, d, y, op):
    """Add a vector of backward sum terms to the lanes' compensated sums
    ``(hv, lv)``: ``d`` (log_softmax) or ``d * y`` (softmax; the product's
    rounding error, exact by :func:`._simd.two_prod`, goes to ``lv`` with
    the additions')."""
    if op == Op.LOG_SOFTMAX:
        return acc_dd(hv, lv, d)
    p, pe = two_prod(d, y)
    h, l_ = acc_dd(hv, lv, p)
    return h, l_ + pe


@njit(**_KW)
def _bwd_terms_sum(ds, ys, op):
    """One chunk's sum of diff_dst (log_softmax) or diff_dst * dst (softmax)
    as a double-double: :data:`LANES` compensated sums side by side
    (element ``k`` in lane ``k % LANES``, as the forward's
    :func:`_chunk_stats`; lanes past the chunk's end add 0, which leaves
    them as they are, so they hold what the column kernel's lanes hold),
    added by :func:`_lanes_dd_vec`."""
    n = ds.shape[0]
    hv = splat(0.0)
    lv = hv
    nv = n - n % LANES
    for k in range(0, nv, LANES):
        hv, lv = _acc_grad(hv, lv, vload(ds, k), vload(ys, k), op)
    if nv < n:
        c = n - nv
        hv, lv = _acc_grad(hv, lv, vload_part(ds, nv, c, 0.0), vload_part(ys, nv, c, 0.0), op)
    return _lanes_dd_vec(hv, lv)


@njit(**_KW)
def _bwd_row_sum(ds, ys, op):
    """A row's ``(S, lo)``: chunk sums added left to right, as double-doubles."""
    n = ds.shape[0]
    s, lo = 0.0, 0.0
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        sc, lc = _bwd_terms_sum(view(ds, c0, c1 - c0), view(ys, c0, c1 - c0), op)
        s, lo = _add_sum(s, lo, sc, lc)
    return s, lo


@njit(**_KW)
def _bwd_write(ds, ys, os, s, lo, op):
    """Pass 2 of the backward into ``os`` (any storage type):
    ``dd - exp(y) * S`` (log_softmax) or ``y * (dd - S)`` (softmax), ``S = s +
    lo`` a double-double (:func:`_bwd_value`); ``os``
    may be ``ds`` or ``ys`` (in place: each vector is read before it is
    written)."""
    _bwd_row_vec(ds, ys, os, ds.shape[0], s, lo, op)


# ---------------------------------------------------------------------------
# row kernels (inner == 1)
# ---------------------------------------------------------------------------
# Operands whose axis stride is not 1 are staged through a per-task row
# buffer (:func:`_gather` / :func:`_scatter`): every kernel then compiles one
# unit-stride specialisation of the helpers, which halves compile time and
# keeps the arithmetic identical for every layout.
@njit(**_KW)
def _gather(buf, off, n, step, dst):
    """``dst[:n] = buf[off + k * step]``: stage a strided row (any sign, 0 =
    broadcast) contiguously, so the arithmetic runs on unit-stride code only."""
    for k in range(n):
        dst[k] = buf[off + k * step]
    return dst[:n]


@njit(**_KW)
def _scatter(src, buf, off, n, step):
    """``buf[off + k * step] = src[k]``: the inverse of :func:`_gather`."""
    for k in range(n):
        buf[off + k * step] = src[k]


@njit
def _row_off(g, r, n2):
    i1 = r // n2
    return g[0] + i1 * g[1] + (r - i1 * n2) * g[2]


@njit
def _stage(buf, g, n):
    """A row-sized staging buffer if geometry ``g`` is strided, else empty."""
    return np.empty(n if g[3] != 1 else 0, buf.dtype)


@njit
def _row(buf, g, off, n, stage):
    """Row at ``off``: a contiguous view, or gathered into ``stage``. Both
    branches return a :func:`view` (no reference-counted owner): returning
    ``stage[:n]`` from one branch made every row pay for reference-count
    calls on the result (~50 ns per row at n = 128, one thread)."""
    if g[3] == 1:
        return view(buf, off, n)
    _gather(buf, off, n, g[3], stage)
    return view(stage, 0, n)


@njit
def _dst(buf, g, off, n, stage):
    """Where to write a row: a contiguous view of ``buf``, or of ``stage``."""
    if g[3] == 1:
        return view(buf, off, n)
    return view(stage, 0, n)


@njit
def _flush(buf, g, off, n, stage):
    if g[3] != 1:
        _scatter(stage, buf, off, n, g[3])


@njit(forceinline=True)
def _task_rows(task, ntask, rows):
    return range(task * rows // ntask, (task + 1) * rows // ntask)


# Unit-stride rows (the common case) run a loop without the staging
# branches: with them in the loop body, n = 128 rows cost ~45 ns more each
# (one thread; measured 182 vs 126 ns per row).
@njit(**_KW)
def _fwd_rows_unit(xb, xg, ob, og, n2, n, op, ip, rr):
    for r in rr:
        xs = view(xb, _row_off(xg, r, n2), n)
        m, s, lo = _row_stats(xs)
        if ip == InPlace.SRC:
            _fwd_write(xs, xs, m, s, lo, op)
        else:
            _fwd_write(xs, view(ob, _row_off(og, r, n2), n), m, s, lo, op)


@njit(**_KW)
def _lse_rows_unit(xb, xg, rb, rg, n2, n, rr):
    for r in rr:
        xs = view(xb, _row_off(xg, r, n2), n)
        m, s, lo = _row_stats(xs)
        rb[_row_off(rg, r, n2)] = _lse_value(xs, I0, n, I1, m, s, lo)


@njit(**_KW)
def _bwd_rows_unit(db, dg, yb, yg, ob, og, n2, n, op, ip, rr):
    for r in rr:
        ds = view(db, _row_off(dg, r, n2), n)
        ys = view(yb, _row_off(yg, r, n2), n)
        s, lo = _bwd_row_sum(ds, ys, op)
        if ip == InPlace.NONE:
            _bwd_write(ds, ys, view(ob, _row_off(og, r, n2), n), s, lo, op)
        elif ip == InPlace.DIFF_DST:
            _bwd_write(ds, ys, ds, s, lo, op)
        else:
            _bwd_write(ds, ys, ys, s, lo, op)


@_parallel_and_serial
def fwd_rows(xb, xg, ob, og, n1, n2, n, op, ip):
    """Forward over rows, one row per iteration (see module docstring);
    ``ip``: ``InPlace.SRC`` when ``ob`` is ``xb`` with the same geometry."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        rr = _task_rows(task, ntask, rows)
        if xg[3] == 1 and og[3] == 1:
            _fwd_rows_unit(xb, xg, ob, og, n2, n, op, ip, rr)
            continue
        xst = _stage(xb, xg, n)
        ost = _stage(ob, og, n)
        for r in rr:
            xo = _row_off(xg, r, n2)
            oo = _row_off(og, r, n2)
            xs = _row(xb, xg, xo, n, xst)
            m, s, lo = _row_stats(xs)
            if ip == InPlace.SRC:
                _fwd_write(xs, xs, m, s, lo, op)
                if xg[3] != 1:
                    _scatter(xs, xb, xo, n, xg[3])
            else:
                _fwd_write(xs, _dst(ob, og, oo, n, ost), m, s, lo, op)
                _flush(ob, og, oo, n, ost)


@_parallel_and_serial
def lse_rows(xb, xg, rb, rg, n1, n2, n):
    """logsumexp of every row into float64 ``rb`` (geometry ``rg``)."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        if xg[3] == 1:
            _lse_rows_unit(xb, xg, rb, rg, n2, n, _task_rows(task, ntask, rows))
            continue
        xst = _stage(xb, xg, n)
        for r in _task_rows(task, ntask, rows):
            xs = _row(xb, xg, _row_off(xg, r, n2), n, xst)
            m, s, lo = _row_stats(xs)
            rb[_row_off(rg, r, n2)] = _lse_value(xs, I0, n, I1, m, s, lo)


@_parallel_and_serial
def bwd_rows(db, dg, yb, yg, ob, og, n1, n2, n, op, ip):
    """Backward over rows; ``ip``: ``InPlace.NONE``, ``DIFF_DST`` (``ob`` is
    ``db``) or ``DST`` (``ob`` is ``yb``)."""
    rows = n1 * n2
    ntask = min(rows, 256)
    for task in prange(ntask):
        if dg[3] == 1 and yg[3] == 1 and og[3] == 1:
            _bwd_rows_unit(db, dg, yb, yg, ob, og, n2, n, op, ip, _task_rows(task, ntask, rows))
            continue
        dst_ = _stage(db, dg, n)
        yst = _stage(yb, yg, n)
        ost = _stage(ob, og, n)
        for r in _task_rows(task, ntask, rows):
            do = _row_off(dg, r, n2)
            yo = _row_off(yg, r, n2)
            oo = _row_off(og, r, n2)
            ds = _row(db, dg, do, n, dst_)
            ys = _row(yb, yg, yo, n, yst)
            s, lo = _bwd_row_sum(ds, ys, op)
            if ip == InPlace.NONE:
                _bwd_write(ds, ys, _dst(ob, og, oo, n, ost), s, lo, op)
                _flush(ob, og, oo, n, ost)
            elif ip == InPlace.DIFF_DST:
                _bwd_write(ds, ys, ds, s, lo, op)
                if dg[3] != 1:
                    _scatter(ds, db, do, n, dg[3])
            else:
                _bwd_write(ds, ys, ys, s, lo, op)
                if yg[3] != 1:
                    _scatter(ys, yb, yo, n, yg[3])


# ---------------------------------------------------------------------------
# split rows: few long rows, chunks spread over threads
# ---------------------------------------------------------------------------
@njit(**_PKW)
def _stats_split(xb, xg, n1, n2, n):
    """Row stats ``(m, s, lo)`` of every row, chunks spread over threads."""
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    ntk = (nch + _GROUP - 1) // _GROUP
    pm = np.empty(rows * nch, np.float64)
    ps = np.empty(rows * nch, np.float64)
    pl = np.empty(rows * nch, np.float64)
    for it in prange(rows * ntk):
        r = it // ntk
        g0 = (it - r * ntk) * _GROUP
        xst = _stage(xb, xg, CHUNK)
        o = _row_off(xg, r, n2)
        for c in range(g0, min(nch, g0 + _GROUP)):
            c0 = c * CHUNK
            ln = min(n, c0 + CHUNK) - c0
            mc, sc, lc = _chunk_stats(_row(xb, xg, o + c0 * xg[3], ln, xst))
            pm[r * nch + c] = mc
            ps[r * nch + c] = sc
            pl[r * nch + c] = lc
    # merge in chunk order: the same sequence as _row_stats
    ms = np.empty(rows, np.float64)
    ss = np.empty(rows, np.float64)
    ls = np.empty(rows, np.float64)
    for r in range(rows):
        m = pm[r * nch]
        s = ps[r * nch]
        lo = pl[r * nch]
        for c in range(1, nch):
            i = r * nch + c
            m, s, lo = _merge(m, s, lo, pm[i], ps[i], pl[i])
        ms[r] = m
        ss[r] = s
        ls[r] = lo
    return ms, ss, ls


@njit(**_PKW)
def fwd_rows_split(xb, xg, ob, og, n1, n2, n, op, ip):
    """Forward for few long rows: chunks of every row spread over threads;
    ``ip`` as in :func:`fwd_rows`."""
    ms, ss, ls = _stats_split(xb, xg, n1, n2, n)
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        xst = _stage(xb, xg, ln)
        ost = _stage(ob, og, ln)
        xo = _row_off(xg, r, n2) + c0 * xg[3]
        oo = _row_off(og, r, n2) + c0 * og[3]
        xs = _row(xb, xg, xo, ln, xst)
        if ip == InPlace.SRC:
            _fwd_write(xs, xs, ms[r], ss[r], ls[r], op)
            if xg[3] != 1:
                _scatter(xs, xb, xo, ln, xg[3])
        else:
            _fwd_write(xs, _dst(ob, og, oo, ln, ost), ms[r], ss[r], ls[r], op)
            _flush(ob, og, oo, ln, ost)


@njit(**_KW)
def lse_rows_split(xb, xg, rb, rg, n1, n2, n):
    """logsumexp for few long rows (chunks spread over threads)."""
    ms, ss, ls = _stats_split(xb, xg, n1, n2, n)
    for r in range(n1 * n2):
        rb[_row_off(rg, r, n2)] = _lse_value(
            xb, _row_off(xg, r, n2), n, xg[3], ms[r], ss[r], ls[r]
        )


@njit(**_PKW)
def bwd_rows_split(db, dg, yb, yg, ob, og, n1, n2, n, op):
    """Backward for few long rows (chunks spread over threads). In place is
    safe here: every element is read before it is written, at its own
    index."""
    rows = n1 * n2
    nch = (n + CHUNK - 1) // CHUNK
    ps = np.empty(rows * nch, np.float64)
    pl = np.empty(rows * nch, np.float64)
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        dst_ = _stage(db, dg, ln)
        yst = _stage(yb, yg, ln)
        ds = _row(db, dg, _row_off(dg, r, n2) + c0 * dg[3], ln, dst_)
        ys = _row(yb, yg, _row_off(yg, r, n2) + c0 * yg[3], ln, yst)
        ps[it], pl[it] = _bwd_terms_sum(ds, ys, op)
    ss = np.empty(rows, np.float64)
    sl = np.empty(rows, np.float64)
    for r in range(rows):
        s, lo = 0.0, 0.0  # the same left-to-right sum as _bwd_row_sum
        for c in range(nch):
            s, lo = _add_sum(s, lo, ps[r * nch + c], pl[r * nch + c])
        ss[r], sl[r] = s, lo
    for it in prange(rows * nch):
        r = it // nch
        c0 = (it - r * nch) * CHUNK
        ln = min(n, c0 + CHUNK) - c0
        dst_ = _stage(db, dg, ln)
        yst = _stage(yb, yg, ln)
        ost = _stage(ob, og, ln)
        ds = _row(db, dg, _row_off(dg, r, n2) + c0 * dg[3], ln, dst_)
        ys = _row(yb, yg, _row_off(yg, r, n2) + c0 * yg[3], ln, yst)
        oo = _row_off(og, r, n2) + c0 * og[3]
        _bwd_write(ds, ys, _dst(ob, og, oo, ln, ost), ss[r], sl[r], op)
        _flush(ob, og, oo, ln, ost)


# ---------------------------------------------------------------------------
# inner kernels (inner > 1): vectorise across a tile of J inner columns
# ---------------------------------------------------------------------------
# A tile is n rows of jn <= J inner elements. With unit inner stride the
# tile is read in place (row k at base + k * sn); otherwise it is gathered
# into a dense n x J stage first (and the output scattered from one).
@njit(**_KW)
def _tile_in(buf, g, base, n, jn, J, stage):
    """``(buffer, base, row stride)`` of a tile: in place, or staged."""
    if g[4] == 1:
        return buf, base, g[3]
    for k in range(n):
        for j in range(jn):
            stage[k * J + j] = buf[base + k * g[3] + j * g[4]]
    return stage, 0, J


@njit(**_KW)
def _tile_out(buf, g, base, J, stage):
    if g[4] == 1:
        return buf, base, g[3]
    return stage, 0, J


@njit(**_KW)
def _tile_flush(buf, g, base, n, jn, J, stage):
    if g[4] != 1:
        for k in range(n):
            for j in range(jn):
                buf[base + k * g[3] + j * g[4]] = stage[k * J + j]


@njit
def _tile_stage(buf, g, n, J):
    return np.empty(n * J if g[4] != 1 else 0, buf.dtype)


@njit
def _tiles(ni, J):
    return (ni + J - 1) // J


@njit(**_KW)
def _inner_stats(xb, base, sn, n, jn, J):
    """Per-column ``(m, s, sl)`` (arrays of ``J``) of a unit-inner-stride
    tile (``j < jn``): the arithmetic of :func:`_row_stats` on every column.

    Loops are written inline (no helper call per tile row): a call per row
    costs numba reference-count traffic on the sliced arrays, which at
    J = 16 made this kernel 4x slower than the row kernel.
    """
    mc = np.empty(J, np.float64)  # a chunk's max and compensated sums th + tl,
    th = np.empty(LANES * J, np.float64)  # LANES per column (as _chunk_stats)
    tl = np.empty(LANES * J, np.float64)
    m = np.empty(J, np.float64)
    s = np.empty(J, np.float64)
    sl = np.empty(J, np.float64)
    for c0 in range(0, n, CHUNK):
        cl = min(n - c0, CHUNK)
        jv = jn - jn % LANES
        for j in range(jn):
            mc[j] = -np.inf
        for k in range(cl):  # (explicit vectors, as the sums below)
            p = base + (c0 + k) * sn
            for j in range(0, jv, LANES):
                vstore(mc, j, vmax(vload(mc, j), vload(xb, p + j)))
            for j in range(jv, jn):
                mc[j] = maxnum(mc[j], xb[p + j])
        for q in range(LANES * J):
            th[q] = 0.0
            tl[q] = 0.0
        for k in range(cl):
            p = base + (c0 + k) * sn
            q = (k % LANES) * J
            # explicit vectors: as a loop of scalars LLVM left it scalar
            # (1000x100 axis 0: 1.55 ns an element for these stats)
            for j in range(0, jv, LANES):
                e = exp_f64_ulp(vload(xb, p + j) - vload(mc, j))
                h, l_ = acc_dd(vload(th, q + j), vload(tl, q + j), e)
                vstore(th, q + j, h)
                vstore(tl, q + j, l_)
            if jv < jn:
                c = jn - jv
                e = exp_f64_ulp(vload_part(xb, p + jv, c, -np.inf) - vload_part(mc, jv, c, 0.0))
                h, l_ = acc_dd(vload_part(th, q + jv, c, 0.0), vload_part(tl, q + jv, c, 0.0), e)
                vstore_part(th, q + jv, h, c)
                vstore_part(tl, q + jv, l_, c)
        _lanes_dd_cols(th, tl, J, jn)
        for j in range(jn):
            hi, lo = th[j], tl[j]
            hs = hi + lo
            tl[j] = lo - (hs - hi)
            th[j] = hs
        for j in range(jn):
            sc = th[j]
            lc = tl[j]
            if mc[j] == -np.inf:
                sc = np.nan if _has_nan(xb, base + c0 * sn + j, cl, sn) else 0.0
                lc = 0.0
            if c0 == 0:
                m[j] = mc[j]
                s[j] = sc
                sl[j] = lc
            else:
                m[j], s[j], sl[j] = _merge(m[j], s[j], sl[j], mc[j], sc, lc)
    return m, s, sl


@njit(**_KW)
def _inner_fwd_row(xr, orow, m, lg, ll, inv, jn, op):
    """Pass 2 of the forward on a tile row, as :func:`_fwd_write`:
    ``lg + ll = log(s)`` (log_softmax), ``inv = 1/s`` (softmax)."""
    jv = jn - jn % LANES
    for j in range(0, jv, LANES):
        store_vec(orow, j, _fwd_value(vload(xr, j), vload(m, j), vload(lg, j), vload(ll, j), vload(inv, j), op))
    if jv < jn:
        c = jn - jv
        y = _fwd_value(vload_part(xr, jv, c, 0.0), vload_part(m, jv, c, 0.0), vload_part(lg, jv, c, 0.0),
                       vload_part(ll, jv, c, 0.0), vload_part(inv, jv, c, 0.0), op)
        store_vec_part(orow, jv, y, c)


@_parallel_and_serial
def fwd_inner(xb, xg, ob, og, n1, n2, n, ni, op, J):
    """Forward, reduction over a strided axis, vectorised across inner."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        xo = _row_off(xg, o, n2) + j0 * xg[4]
        oo = _row_off(og, o, n2) + j0 * og[4]
        xst = _tile_stage(xb, xg, n, J)
        ost = _tile_stage(ob, og, n, J)
        xt, xbase, xsn = _tile_in(xb, xg, xo, n, jn, J, xst)
        ot, obase, osn = _tile_out(ob, og, oo, J, ost)
        m, s, sl = _inner_stats(xt, xbase, xsn, n, jn, J)
        lg = np.empty(J, np.float64)  # log_softmax: log(s) = lg + ll
        ll = np.empty(J, np.float64)
        inv = np.empty(J, np.float64)  # softmax: 1/s
        if op == Op.LOG_SOFTMAX:  # 8 columns' logs at a time (log_dd_vec)
            for j in range(0, jn, LANES):
                c = min(LANES, jn - j)
                h, l_ = log_dd_vec(vload_part(s, j, c, 1.0), vload_part(sl, j, c, 0.0))
                vstore_part(lg, j, h, c)
                vstore_part(ll, j, l_, c)
        else:
            for j in range(jn):
                inv[j] = 1.0 / s[j]
        for k in range(n):
            xr = view(xt, xbase + k * xsn, jn)
            orow = view(ot, obase + k * osn, jn)
            _inner_fwd_row(xr, orow, m, lg, ll, inv, jn, op)
        _tile_flush(ob, og, oo, n, jn, J, ost)


@_parallel_and_serial
def lse_inner(xb, xg, rb, rg, n1, n2, n, ni, J):
    """logsumexp over a strided axis into float64 ``rb`` (geometry ``rg``)."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        xo = _row_off(xg, o, n2) + j0 * xg[4]
        ro = _row_off(rg, o, n2) + j0 * rg[4]
        xst = _tile_stage(xb, xg, n, J)
        xt, xbase, xsn = _tile_in(xb, xg, xo, n, jn, J, xst)
        m, s, sl = _inner_stats(xt, xbase, xsn, n, jn, J)
        for j in range(jn):
            rb[ro + j * rg[4]] = _lse_value(xt, xbase + j, n, xsn, m[j], s[j], sl[j])


@njit(forceinline=True)
def _col_sums(dt, yt, dbase, ybase, dsn, ysn, c0, cl, jn, op, th, tl):
    """A chunk's backward sums of every tile column (``j < jn``) into
    ``th[:jn]``, ``tl[:jn]``: the lanes of :func:`_bwd_terms_sum` (tile row
    ``k`` in lane ``k % LANES``, rows ``[q J, q J + jn)`` of the scratch),
    added by :func:`_lanes_dd_cols`, so each column's sum is bit-identical
    to the row kernels' sum of the same values."""
    jv = jn - jn % LANES
    th[:] = 0.0
    tl[:] = 0.0
    for k in range(cl):
        pd = dbase + (c0 + k) * dsn
        py = ybase + (c0 + k) * ysn
        q = (k % LANES) * (th.shape[0] // LANES)
        for j in range(0, jv, LANES):
            h, l_ = _acc_grad(vload(th, q + j), vload(tl, q + j), vload(dt, pd + j), vload(yt, py + j), op)
            vstore(th, q + j, h)
            vstore(tl, q + j, l_)
        if jv < jn:
            c = jn - jv
            h, l_ = _acc_grad(vload_part(th, q + jv, c, 0.0), vload_part(tl, q + jv, c, 0.0),
                              vload_part(dt, pd + jv, c, 0.0), vload_part(yt, py + jv, c, 0.0), op)
            vstore_part(th, q + jv, h, c)
            vstore_part(tl, q + jv, l_, c)
    _lanes_dd_cols(th, tl, th.shape[0] // LANES, jn)


@njit(**_KW)
def _inner_bwd_row(dr, yr, orow, s, sl, jn, op):
    """Pass 2 of the backward on a tile row (as :func:`_bwd_write`)."""
    jv = jn - jn % LANES
    for j in range(0, jv, LANES):
        store_vec(orow, j, _bwd_value(vload(dr, j), vload(yr, j), vload(s, j), vload(sl, j), op))
    if jv < jn:
        c = jn - jv
        g_ = _bwd_value(vload_part(dr, jv, c, 0.0), vload_part(yr, jv, c, 0.0), vload_part(s, jv, c, 0.0),
                        vload_part(sl, jv, c, 0.0), op)
        store_vec_part(orow, jv, g_, c)


@_parallel_and_serial
def bwd_inner(db, dg, yb, yg, ob, og, n1, n2, n, ni, op, J):
    """Backward, reduction over a strided axis, vectorised across inner."""
    ntile = _tiles(ni, J)
    for it in prange(n1 * n2 * ntile):
        o = it // ntile
        j0 = (it - o * ntile) * J
        jn = min(J, ni - j0)
        do = _row_off(dg, o, n2) + j0 * dg[4]
        yo = _row_off(yg, o, n2) + j0 * yg[4]
        oo = _row_off(og, o, n2) + j0 * og[4]
        th = np.empty(LANES * J, np.float64)
        tl = np.empty(LANES * J, np.float64)
        dst_ = _tile_stage(db, dg, n, J)
        yst = _tile_stage(yb, yg, n, J)
        ost = _tile_stage(ob, og, n, J)
        dt, dbase, dsn = _tile_in(db, dg, do, n, jn, J, dst_)
        yt, ybase, ysn = _tile_in(yb, yg, yo, n, jn, J, yst)
        ot, obase, osn = _tile_out(ob, og, oo, J, ost)
        s = np.zeros(J, np.float64)
        sl = np.zeros(J, np.float64)
        for c0 in range(0, n, CHUNK):
            cl = min(n - c0, CHUNK)
            _col_sums(dt, yt, dbase, ybase, dsn, ysn, c0, cl, jn, op, th, tl)
            for j in range(jn):
                s[j], sl[j] = _add_sum(s[j], sl[j], th[j], tl[j])
        for k in range(n):
            pd = dbase + k * dsn
            py = ybase + k * ysn
            orow = view(ot, obase + k * osn, jn)
            _inner_bwd_row(view(dt, pd, jn), view(yt, py, jn), orow, s, sl, jn, op)
        _tile_flush(ob, og, oo, n, jn, J, ost)
