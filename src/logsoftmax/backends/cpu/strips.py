"""Short float32 columns 16 at a time: the three passes of three strips in one loop.

A column tile (:mod:`.columns`) is up to a thousand columns wide and takes
its passes one after another (the max, the sums, pass 2), the tile in L2
between them and its per-column statistics in L1 arrays. Here the columns
go a vector (``W = 16``) at a time, a *strip* of ``n`` rows, and one loop
takes three strips at once::

    for each strip c:                         # rows k of the strips
        max  of strip c + 2   (row k from L2, asked for a strip ahead)
        sums of strip c + 1   (row k from L1: the max just loaded it)
        pass 2 on strip c     (row k from L1; a streaming store)

so each strip's statistics live in registers, its rows (where three
strips' rows fit) in L1 between its passes, and the loads from memory,
the ``exp`` arithmetic and the stores overlap in one loop instead of
taking turns (the design; there are no cache counters here to show where
the rows are). It is the order of work that
``benchmarks/strided_limits.py``'s floor kernels time on a contiguous
stream, with the problem's own strides.

The same bits as :func:`.columns.forward_tiles` (the accurate, one-chunk
path): the max is exact in any order; the sums go lane-major, row ``k``
into lane ``k % LANES64`` from 0, the lanes added by
:func:`.columns._lane_tree`, as :func:`.columns._tile_sums_lane_major`
does; all--inf columns get a sum of 0 (NaN if they hold a NaN) as in
:func:`.columns._column_fixups`; pass 2 is :func:`.segment.forward_vec`.

The backward (:func:`backward_strips`, :func:`takes_backward_strips`) has
two passes: one loop takes strip ``c + 1``'s sums of ``diff_dst`` and
strip ``c``'s pass 2, with the tiles' bits (a NaN may come out with the
other sign: which NaN an ``fma`` passes on depends on its operand order).

When (:func:`takes_strips`): float32 in and out on the accurate path, unit
column strides, up to :data:`STRIP_ROWS` rows spanning at most
:data:`SPAN_MAX_BYTES`, at least ``4 W`` columns, and an output that
streams, or one of at most :data:`ORDINARY_MAX_BYTES` with up to
:data:`ORDINARY_ROWS` rows, on every CPU. In-process A/B against the
tiles (Intel Xeon, LLVM rocketlake, numpy ``out=``, same bits):
64x64x56x56 axis 1 1.22-1.35x (4.2 -> 3.2-3.3 ms), 64x128x56x56 1.39x,
256x128x28x28 1.49x, 128x384x384 1.52-1.60x, 32x512x28x28 1.52-1.55x,
64x16x56x56 1.20-1.41x; 64x64x112x112, whose 64 rows span 3.2 MB,
0.75-0.82x: left to the tiles (``docs/performance.md``, the seventeenth
session). The same A/B on an AMD EPYC Zen 4 (LLVM znver4, 2 threads),
where the strips had been left off until measured (the eighth Zen 4
session): 64x64x56x56 forward 1.42-1.44x, backward 1.63-1.65x;
64x128x56x56 1.38-1.43x / 1.60x; 64x32x112x112 1.14-1.15x / 1.05x;
32x512x28x28 1.74x; 128x384x384 1.48x; 256x128x28x28 1.37-1.38x;
8x64x56x56 1.45x; 16x21x64x64 1.15x; 4x8x64x64 axis 2 1.36x; 64x16x56x56
0.96-0.98x.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .. import Op
from ._math import exp_f64, log_f64
from ._simd import wide_vectors
from ._vec import (
    W,
    hi_f64,
    join_f32,
    lane,
    lo_f64,
    prefetch_l2,
    prefetch_w,
    reduce_add,
    sfence,
    splat,
    vload,
    vload_n,
    vstore,
    vstore_n,
    vstore_nt,
)
from .columns import _col_nan, _grad_vec, _lane_tree, _tile_geom, rows_on_lines
from .rows import streams_items, streams_tiles
from .segment import CHUNK, GRAD_LANES, LANES64, forward_vec, grad_add, stream_head, vmax_x86

__all__ = [
    "STRIP_ROWS",
    "SPAN_MAX_BYTES",
    "ORDINARY_ROWS",
    "ORDINARY_MAX_BYTES",
    "SCRATCH",
    "takes_strips",
    "takes_backward_strips",
    "strip_plan",
    "forward_strips",
    "forward_strips_parallel",
    "backward_strips",
    "backward_strips_parallel",
]

#: the longest columns taken here (one chunk, .segment.CHUNK, at most: the
#: strips do not merge chunks as the tiles do): 64x1000x8x8 gained 1.23x,
#: but 16x1000x16x16 0.91x and 8x2000x8x16 1.00x
STRIP_ROWS = 512
#: the most bytes a strip's rows may span (``n`` rows times their stride):
#: measured here (L2 2 MiB a core), in-process A/B against the tiles,
#: numpy out=, same bits: up to 1.6 MB 1.06-1.52x (64x64x56x56 0.8 MB,
#: 128x384x384 axis 1 0.6 MB, 32x512x28x28 1.6 MB, 64x32x112x112 1.6 MB),
#: from 3.2 MB on 0.75-0.93x (64x64x112x112 3.2 MB, 16x128x112x112 6.4 MB,
#: 32x64x224x224 12.8 MB); 1000x65536 axis 0 (256 MB) 0.57x in a scratch
#: prototype
SPAN_MAX_BYTES = 1 << 21
#: the longest columns whose strips write by ordinary stores: of 300-512
#: rows, 32x512x14x14 and 24x400x20x20 gained (1.11-1.18x), 12x300x30x30
#: read 1.14x once and 0.91x twice, 16x512x16x16 0.93x; streamed ones of 320-512
#: rows gained 1.22-1.60x (128x384x384 axis 1, 64x384x24x24, 32x512x28x28,
#: 32x320x32x32)
ORDINARY_ROWS = 256
#: the largest output that the strips write by ordinary stores (outputs of
#: STREAM_BYTES or more stream; those between keep the tiles): in-process
#: A/B against the tiles, numpy out=, same bits: 6.4-12.8 MB 1.01-1.41x
#: (128x64x14x14, 64x32x28x28, 64x16x56x56, 32x32x56x56), but 25.7 MB
#: 0.85-1.10x (64x32x56x56) and 0.93-1.00x (32x64x56x56) over four runs
ORDINARY_MAX_BYTES = 1 << 24
#: float64 items of a forward's scratch (:func:`forward_strips`' ``acc``;
#: the backward's ``2 * SCRATCH``: GRAD_LANES lanes)
SCRATCH = LANES64 * W

_NINF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
_LSM = Op.LOG_SOFTMAX


@njit(forceinline=True, error_model="numpy")
def _fits(g, n, stride_bytes):
    """The shape part of the rule, forward and backward: up to
    :data:`STRIP_ROWS` rows spanning at most :data:`SPAN_MAX_BYTES`, unit
    column strides, at least ``4 W`` columns."""
    return (n <= STRIP_ROWS and n * stride_bytes <= SPAN_MAX_BYTES and g[3] >= 4 * W
            and g[8] == 1 and g[13] == 1)


@njit(cache=True)
def takes_strips(g, xsize, osize, accurate):
    """Whether a forward on the column geometry ``g`` (input items of
    ``xsize`` bytes, output ``osize``) goes by strips (module doc): float32
    on the accurate path, outputs that stream from rows on a common line
    offset (streaming stores), or of at most :data:`ORDINARY_MAX_BYTES`
    and :data:`ORDINARY_ROWS` rows (ordinary ones)."""
    n = g[2]
    size = g[0] * g[1] * n * g[3] * osize
    stores = (streams_items(g, osize, False) and rows_on_lines(g, 1, osize)) or (
        size <= ORDINARY_MAX_BYTES and n <= ORDINARY_ROWS)
    return accurate and xsize == 4 and osize == 4 and stores and _fits(g, n, g[7] * xsize)


@njit(cache=True)
def takes_backward_strips(g, dsize, ysize, osize):
    """Whether a backward on the column geometry ``g`` (``diff_dst``,
    ``dst`` and output items of ``dsize``, ``ysize``, ``osize`` bytes) goes
    by strips: float32, :func:`takes_strips`' shape rule for both inputs,
    streamed outputs only. In-process A/B against the tiles (numpy
    ``out=``, same bits): streamed, 64x64x56x56 1.34-1.38x, 64x128x56x56
    1.43-1.59x, 256x128x28x28 1.55-1.57x, 64x32x112x112 1.12x,
    128x384x384 axis 1 1.00-1.01x; by ordinary stores, 64x16x56x56
    1.14-1.26x but 128x64x14x14 0.85x and 32x40x56x56 0.94x."""
    return (dsize == 4 and ysize == 4 and osize == 4 and g[18] == 1
            and streams_items(g, osize, False) and rows_on_lines(g, 2, osize)
            and _fits(g, g[2], max(g[7], g[12]) * 4))


@njit(forceinline=True, error_model="numpy")
def _per_plane(ni, h):
    """Strips a plane of ``ni`` columns holds, ``h`` of them a head strip."""
    return (1 if h > 0 else 0) + (ni - h + W - 1) // W


@njit(cache=True, nogil=True, error_model="numpy")
def strip_plan(ob, g, op):
    """``(strips, h, stream)`` of a call on ``g`` into ``ob`` (operand
    ``op``: 1 forward, 2 backward): streaming stores where the output
    streams (:func:`.rows.streams`) and every row of every plane starts at
    the same offset in a line (:func:`.columns.rows_on_lines`); then the
    first ``h`` columns of each plane are a strip of their own, so that the
    others start on a line."""
    head = stream_head(ob, g[4 + 5 * op])
    stream = streams_tiles(ob, g) and head >= 0 and rows_on_lines(g, op, ob.itemsize)
    h = min(head, g[3]) if stream else 0
    return g[0] * g[1] * _per_plane(g[3], h), h, stream


@njit(forceinline=True, error_model="numpy")
def _store_row(ob, q, v, stream, ahead):
    """A strip row's result ``v`` to ``ob[q]``: a streaming store, or an
    ordinary one that first claims the line ``ahead`` (strip ``c + 3``'s
    row for the forward, ``c + 2``'s for the backward). Without the claim,
    stores to lines a row apart waited on each line: 64x32x56x56 forward
    (25.7 MB out) 0.67-0.74x the tiles, 0.96x claiming strip ``c + 2``'s
    lines, 1.00x strip ``c + 3``'s."""
    if stream:
        vstore_nt(ob, q, v)
    else:
        prefetch_w(ob, ahead)
        vstore(ob, q, v)


@njit(forceinline=True, error_model="numpy")
def _strip_cols(g, s, per, h):
    """``(plane, first column, columns)`` of strip ``s`` (``per`` strips a
    plane; the first ``h`` columns of a plane are a strip of their own, so
    that the others start on a line of the output)."""
    o = s // per
    r = s - o * per
    if h > 0:
        j = 0 if r == 0 else h + (r - 1) * W
    else:
        j = r * W
    return o, j, (h if h > 0 and r == 0 else min(W, g[3] - j))


@njit(forceinline=True, error_model="numpy")
def _strip(g, s, per, h):
    """``(x base, out base, columns)`` of strip ``s`` of a forward."""
    o, j, w = _strip_cols(g, s, per, h)
    xbase, _xsn, _xsi = _tile_geom(g, 0, o, j)
    obase, _osn, _osi = _tile_geom(g, 1, o, j)
    return xbase, obase, w


@njit(forceinline=True, error_model="numpy")
def _strip3(g, s, per, h):
    """``(diff_dst base, dst base, out base, columns)`` of strip ``s`` of a backward."""
    o, j, w = _strip_cols(g, s, per, h)
    dbase, _dsn, _dsi = _tile_geom(g, 0, o, j)
    ybase, _ysn, _ysi = _tile_geom(g, 1, o, j)
    obase, _osn, _osi = _tile_geom(g, 2, o, j)
    return dbase, ybase, obase, w


@njit(cache=True, nogil=True, error_model="numpy")
def forward_strips(xb, ob, g, op, s0, s1, h, stream, acc):
    """Forward on strips ``[s0, s1)`` (module doc); ``h``: the head strip's
    columns (:func:`_strip`); ``stream``: full strips store by streaming
    stores (their rows on a line); ``acc``: ``LANES64 x W`` float64 scratch."""
    wide_vectors()
    n = g[2]
    sn = g[7]
    osn = g[12]
    per = _per_plane(g[3], h)
    used = min(n, LANES64)
    zero = splat(0.0)
    c32 = splat(_ZERO)  # forward_vec's float32 statistics: the fast path's only
    mb = splat(_NINF)  # strip c + 1's max
    mcl = mch = bcl = bch = zero  # strip c's m and log s (or 1/s), float64
    pb = qb = wb = pc = qc = wc = 0  # strips c + 1 and c: x base, out base, columns
    pp = qp = wp = 0  # strip c + 3 (of the last round: this round's c + 2)
    if s0 < s1:
        pp, qp, wp = _strip(g, s0, per, h)
    for c in range(s0 - 2, s1):
        pa = qa = wa = 0
        if c + 2 < s1:
            pa, qa, wa = pp, qp, wp
        ahead = c + 3 < s1  # strip c + 3: asked for into L2 row by row
        if ahead:
            pp, qp, wp = _strip(g, c + 3, per, h)
        ma = splat(_NINF)
        mbl = lo_f64(mb)
        mbh = hi_f64(mb)
        r = 0  # the row of strip c + 2 that its max takes next
        if wa == W and wb == W and wc == W and ahead and c >= s0:
            # the steady state: three whole strips, no test in the loop
            for lane_ in range(used):
                al = zero
                ah = zero
                for k in range(lane_, n, LANES64):
                    prefetch_l2(xb, pp + r * sn)
                    ma = vmax_x86(ma, vload(xb, pa + r * sn))  # from -inf: as from row 0
                    x = vload(xb, pb + k * sn)
                    al = al + exp_f64(lo_f64(x) - mbl)
                    ah = ah + exp_f64(hi_f64(x) - mbh)
                    y = forward_vec(vload(xb, pc + r * sn), mcl, mch, bcl, bch, c32, c32, op, True)
                    _store_row(ob, qc + r * osn, y, stream, qp + r * osn)
                    r += 1
                vstore(acc, lane_ * W, al)
                vstore(acc, lane_ * W + W // 2, ah)
        else:  # the first and last strips, and those around a partial one
            for lane_ in range(used):
                al = zero
                ah = zero
                for k in range(lane_, n, LANES64):
                    if wa > 0:
                        if ahead:
                            prefetch_l2(xb, pp + r * sn)
                        ma = vmax_x86(ma, vload_n(xb, pa + r * sn, wa, _NINF))
                        r += 1
                    if wb > 0:
                        x = vload_n(xb, pb + k * sn, wb, _NINF)
                        al = al + exp_f64(lo_f64(x) - mbl)
                        ah = ah + exp_f64(hi_f64(x) - mbh)
                    if wc > 0 and c >= s0:
                        y = forward_vec(vload_n(xb, pc + k * sn, wc, _ZERO), mcl, mch, bcl, bch,
                                        c32, c32, op, True)
                        if stream and wc == W:
                            vstore_nt(ob, qc + k * osn, y)
                        else:
                            vstore_n(ob, qc + k * osn, y, wc)
                vstore(acc, lane_ * W, al)
                vstore(acc, lane_ * W + W // 2, ah)
        if wb > 0:  # strip c + 1's statistics, for its pass 2 in the next round
            _lane_tree(acc, used, 2, W // 2, W, LANES64)
            if not math.isfinite(reduce_add(mb)):  # an all--inf column (or inf, NaN)
                for i in range(wb):
                    if lane(mb, i) == _NINF:
                        acc[i] = np.nan if _col_nan(xb, pb, sn, n, i) else 0.0
            for i in range(wb, W):
                acc[i] = 1.0
            mcl = mbl
            mch = mbh
            if op == _LSM:
                bcl = log_f64(vload(acc, 0))
                bch = log_f64(vload(acc, W // 2))
            else:
                bcl = 1.0 / vload(acc, 0)
                bch = 1.0 / vload(acc, W // 2)
        pc, qc, wc = pb, qb, wb
        pb, qb, wb = pa, qa, wa
        mb = ma
    if stream:
        sfence()


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def forward_strips_parallel(xb, ob, g, op, ntask):
    """:func:`forward_strips` over every strip, ``ntask`` ranges in parallel
    (the plan calls :func:`forward_strips` itself for a serial call)."""
    strips, h, stream = strip_plan(ob, g, 1)
    for t in prange(ntask):
        acc = np.empty(SCRATCH)
        forward_strips(xb, ob, g, op, t * strips // ntask, (t + 1) * strips // ntask, h, stream, acc)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_strips(db, yb, ob, g, op, accurate, s0, s1, h, stream, acc):
    """Backward on strips ``[s0, s1)``: one loop over the rows takes strip
    ``c + 1``'s sums of ``diff_dst`` (or ``diff_dst * dst``) in the tiles'
    lanes (:func:`.columns._tile_grad_sum`) and strip ``c``'s pass 2
    (:func:`.columns._grad_vec`), strip ``c + 2``'s rows asked into L2."""
    wide_vectors()
    n = g[2]
    dsn = g[7]
    ysn = g[12]
    osn = g[17]
    per = _per_plane(g[3], h)
    used = min(n, GRAD_LANES)
    zero = splat(0.0)
    sl = sh = zero  # strip c's sums, float64 halves, and float32
    sa = splat(_ZERO)
    pdc = pyc = qc = wc = 0  # strip c: diff_dst base, dst base, out base, columns
    pdp = pyp = qp = wp = 0  # strip c + 2 (of the last round: this round's c + 1)
    if s0 < s1:
        pdp, pyp, qp, wp = _strip3(g, s0, per, h)
    for c in range(s0 - 1, s1):
        pdb = pyb = qb = wb = 0
        if c + 1 < s1:
            pdb, pyb, qb, wb = pdp, pyp, qp, wp
        ahead = c + 2 < s1  # strip c + 2: asked for into L2 row by row
        if ahead:
            pdp, pyp, qp, wp = _strip3(g, c + 2, per, h)
        r = 0
        if wb == W and wc == W and ahead and c >= s0:
            for lane_ in range(used):
                lo = zero
                hi = zero
                for k in range(lane_, n, GRAD_LANES):
                    prefetch_l2(db, pdp + r * dsn)
                    prefetch_l2(yb, pyp + r * ysn)
                    d = vload(db, pdb + k * dsn)
                    if op == _LSM:
                        lo = lo + lo_f64(d)
                        hi = hi + hi_f64(d)
                    else:
                        y = vload(yb, pyb + k * ysn)
                        lo = lo + lo_f64(d) * lo_f64(y)
                        hi = hi + hi_f64(d) * hi_f64(y)
                    v = _grad_vec(vload(db, pdc + r * dsn), vload(yb, pyc + r * ysn), sl, sh, sa, op, accurate,
                                  ob.itemsize == 2)
                    _store_row(ob, qc + r * osn, v, stream, qp + r * osn)
                    r += 1
                vstore(acc, lane_ * W, lo)
                vstore(acc, lane_ * W + W // 2, hi)
        else:
            for lane_ in range(used):
                lo = zero
                hi = zero
                for k in range(lane_, n, GRAD_LANES):
                    if wb > 0:
                        lo, hi = grad_add(lo, hi, db, pdb + k * dsn, yb, pyb + k * ysn, wb, op)
                    if wc > 0 and c >= s0:
                        v = _grad_vec(vload_n(db, pdc + k * dsn, wc, _ZERO), vload_n(yb, pyc + k * ysn, wc, _ZERO),
                                      sl, sh, sa, op, accurate, ob.itemsize == 2)
                        if stream and wc == W:
                            vstore_nt(ob, qc + k * osn, v)
                        else:
                            vstore_n(ob, qc + k * osn, v, wc)
                vstore(acc, lane_ * W, lo)
                vstore(acc, lane_ * W + W // 2, hi)
        if wb > 0:
            _lane_tree(acc, used, 2, W // 2, W, GRAD_LANES)
            sl = vload(acc, 0)
            sh = vload(acc, W // 2)
            sa = join_f32(sl, sh)
        pdc, pyc, qc, wc = pdb, pyb, qb, wb
    if stream:
        sfence()


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def backward_strips_parallel(db, yb, ob, g, op, accurate, ntask):
    """:func:`backward_strips` over every strip, ``ntask`` ranges in parallel."""
    strips, h, stream = strip_plan(ob, g, 2)
    for t in prange(ntask):
        acc = np.empty(2 * SCRATCH)
        backward_strips(db, yb, ob, g, op, accurate, t * strips // ntask, (t + 1) * strips // ntask, h, stream, acc)
