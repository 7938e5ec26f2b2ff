"""Columns of a few rows (NCHW ``axis=1`` with 2-16 channels): every pass of a strip from L1.

A segmentation model's log_softmax runs over its classes, ``axis=1`` of an
``N x C x H x W`` array with ``C`` from 2 to ~20: columns of a few rows,
``H * W`` of them a plane. The column tiles (:mod:`.columns`) are built for
columns of tens to thousands of rows. Their per-column work outside the
vector loops (statistics through scalar loops, a merge per column, the
``log`` as a pass of its own) cost more than the arithmetic where a column
holds 3 elements: 16x3x32x32 axis 1 float32 took 1.6 ns an element, 4x
PyTorch's time (``python benchmarks/every_size.py``; Intel Xeon, LLVM
rocketlake; docs/performance.md, the twenty-third session).

Here the columns go a *strip* (``W = 16`` columns) at a time, and a strip
of ``n`` rows (at most 16 x 64 bytes) stays in L1 through its passes. The
forward takes a *block* of :data:`BLOCK` strips at a time: each strip's
max and sums (lane-major, into float64 lanes on the accurate path and
float32 ones on the fast path), then the block's ``log s`` (or ``1/s``)
in one loop, then pass 2 a row of the block at a time. The backward: each
strip's sums of ``diff_dst``, then pass 2 a row of the block at a time.
Measured while building it (one thread in cache, or in-process A/B):

* a ``log`` at the end of each strip made the strip wait for it (a
  ~25-operation dependent chain): 0.93-1.00 ns an element at 3 rows
  against 0.73-0.78 with the logs of 8 strips in one loop;
* pass 2 strip by strip read and wrote ``n`` rows a plane's row apart,
  often in one L1 set: the backward then lost to the tiles from 12 rows
  on (0.70-0.74x at 19-21 rows); a row of the block at a time (8 lines of
  each row) gained 1.04-1.09x there;
* with ``accurate`` a variable inside the inlined strip statistics the
  forward ran 1.5-1.7x slower than with the flag a literal of each call
  (:func:`forward_few` branches once, outside); for the backward's pass 2
  the same split made it 1.2-1.4x slower, so that loop stays as it is.

The same bits as :func:`.columns.forward_tiles` and
:func:`.columns.backward_tiles` (so as the rows): the max is exact in any
order; the sums go lane-major, row ``k`` into lane ``k % LANES64`` (float64
terms), ``k % LANES32`` (float32 terms) or ``k % GRAD_LANES`` (the
backward's), from 0, the lanes added by :func:`.columns._lane_tree`;
all--inf columns get a sum of 0 (NaN if they hold a NaN); the fast path's
``m`` and ``log s`` are rounded to float32 once; pass 2 is
:func:`.segment.forward_vec` / :func:`.columns._grad_vec`. The kernels take
the tiles' arguments and tiles (``J`` columns of one plane,
:func:`.columns.line_shift`), so a plan swaps one for the other, and
stream their output where the tiles would.

When (:func:`takes_few_rows`, :func:`takes_backward_few_rows`): unit column
strides, any dtype and path, any CPU; the forward up to :data:`FEW_ROWS`
rows (before the strips), up to :data:`FEW_MORE_ROWS` where the strips do
not go, and up to a chunk (4096 rows) in planes narrower than
:data:`NARROW` columns; the backward up to :data:`FEW_GRAD_ROWS` rows, or
up to a chunk in such planes. In-process A/B against the tiles and strips (Intel Xeon, LLVM
rocketlake, numpy ``out=``, same bits), forward / backward: 16x3x32x32
float32 1.70x / 1.42x, 8x3x256x256 1.21x / 1.14x, bfloat16 1.42x / 1.33x,
16x8x64x64 float16 1.44x / 1.18x, 32x2x512x512 (streamed) 1.12x / 1.17x,
8x16x64x64 float32 1.02x / 1.15x (the twenty-third session); 16x21x64x64
bfloat16 1.26x / 1.27x, float32 backward 1.06x, 16x32x64x64 float32
backward 1.06x, 64x32x112x112 (streamed) 1.29x, 1024x64x32 float32
forward 1.63x, bfloat16 backward 1.30x, 512x128x8 bfloat16 forward 2.2x
(the twenty-fourth). Left to the others, where they were faster: float32
forwards of 17-48 rows in wider planes (the strips: 512x21x196 0.97x,
128x21x784 0.90x), 64 rows and more in planes of 64 columns and more
(16x64x64x64 bfloat16 forward 0.96x, float32 backward 0.87x; 1000x65536
axis 0 backward 0.61x).

The backward's pass 2 of columns of more than :data:`FEW_ROWS` rows asks
for the next block's row (``prefetcht1``) as it goes: the rows of a strip
lie a plane's row apart, dozens of pages the hardware prefetchers do not
follow (unmeasured: there are no cache counters here); without it
16x32x64x64 float32 lost to the tiles (0.70x), with it 1.34-1.37x faster
than without. The forward's pass 2 asks for its next block's row too
(without: 512x128x49 float32 0.91-0.95x, 1024x64x32 0.95-0.97x; 3-row
columns 0.97-1.05x).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import Op
from ._math import exp_f32_sum, exp_f64, log_f64
from ._simd import float32_result, wide_vectors
from ._vec import (
    W,
    address,
    hi_f64,
    join_f32,
    lane,
    lo_f64,
    prefetch_l2,
    reduce_add,
    sfence,
    splat,
    vload,
    vload_n,
    vstore,
    vstore_n,
    vstore_nt,
)
from .columns import (
    _col_nan,
    _grad_vec,
    _lane_tree,
    _widen_block,
    _tile_cols,
    _tile_geom,
    _tiles_stream,
    line_shift,
    tiles_per_outer,
)
from .segment import CHUNK, GRAD_LANES, LANES32, LANES64, SUM_BLOCK, forward_vec, vmax_x86

__all__ = [
    "FEW_ROWS",
    "FEW_MORE_ROWS",
    "FEW_GRAD_ROWS",
    "NARROW",
    "BLOCK",
    "takes_few_rows",
    "takes_backward_few_rows",
    "forward_few",
    "backward_few",
]

#: the longest columns the forward takes here before the strips (:mod:`.strips`)
FEW_ROWS = 16
#: ... and where the strips do not take them (measured: see the module doc)
FEW_MORE_ROWS = 48
#: the longest columns the backward takes here
FEW_GRAD_ROWS = 48
#: planes narrower than this many columns take columns of any length up to
#: a chunk (:data:`.segment.CHUNK`: longer ones merge chunks, which these
#: kernels do not) here, forward and backward: the tiles of so few columns
#: ran 1.2-2.4x slower
NARROW = 4 * W
#: strips a forward block takes its logs of in one loop
BLOCK = 8

_NINF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
_LSM = Op.LOG_SOFTMAX


@njit(cache=True)
def takes_few_rows(g, strips_take):
    """Whether a forward on the column geometry ``g`` goes here (unit column
    strides): columns of at most :data:`FEW_ROWS` rows; where the strips do
    not take the call (``strips_take``), of at most :data:`FEW_MORE_ROWS`,
    or of up to a chunk in planes narrower than :data:`NARROW`."""
    n = g[2]
    return g[8] == 1 and g[13] == 1 and (
        n <= FEW_ROWS or (not strips_take and (n <= FEW_MORE_ROWS or (g[3] < NARROW and n <= CHUNK))))


@njit(cache=True)
def takes_backward_few_rows(g):
    """Whether a backward on ``g`` goes here: unit column strides of
    ``diff_dst``, ``dst`` and the result, and at most :data:`FEW_GRAD_ROWS`
    rows, or up to a chunk in a plane narrower than :data:`NARROW`."""
    n = g[2]
    return g[8] == 1 and g[13] == 1 and g[18] == 1 and (n <= FEW_GRAD_ROWS or (g[3] < NARROW and n <= CHUNK))


@njit(forceinline=True, error_model="numpy")
def _strip_lanes32(xb, p, sn, w, m, acc32, b0, b1):
    """The float32 lanes of the strip's rows ``[b0, b1)`` (row ``k`` in lane
    ``k % LANES32``) into ``acc32``; returns the lanes used."""
    used = min(b1 - b0, LANES32)
    for lane_ in range(used):
        a = splat(_ZERO)
        for k in range(b0 + lane_, b1, LANES32):
            a = a + exp_f32_sum(vload_n(xb, p + k * sn, w, _NINF) - m)
        vstore(acc32, lane_ * W, a)
    return used


@njit(forceinline=True, error_model="numpy")
def _strip_stats(xb, p, sn, n, w, accurate, acc64, acc32, sb, h):
    """Max and sums of the strip of ``w`` columns at ``xb[p]``: the max's
    float64 halves into ``sb[h:]``, the float64 sums (lanes past ``w``: 1)
    into ``sb[h + W:]``. The accurate path sums float64 terms over
    ``LANES64`` lanes, the fast path float32 ones over ``LANES32``, as the
    tiles' lane-major sums."""
    m = splat(_NINF)
    for k in range(n):
        m = vmax_x86(m, vload_n(xb, p + k * sn, w, _NINF))
    ml = lo_f64(m)
    mh = hi_f64(m)
    if accurate:
        zero = splat(0.0)
        used = min(n, LANES64)
        for lane_ in range(used):
            al = zero
            ah = zero
            for k in range(lane_, n, LANES64):
                x = vload_n(xb, p + k * sn, w, _NINF)
                al = al + exp_f64(lo_f64(x) - ml)
                ah = ah + exp_f64(hi_f64(x) - mh)
            vstore(acc64, lane_ * W, al)
            vstore(acc64, lane_ * W + W // 2, ah)
        _lane_tree(acc64, used, 2, W // 2, W, LANES64)
    elif n > SUM_BLOCK:  # .segment._sum32's blocks, as the tiles' (_widen_block)
        for b0 in range(0, n, SUM_BLOCK):
            b1 = min(b0 + SUM_BLOCK, n)
            used = _strip_lanes32(xb, p, sn, w, m, acc32, b0, b1)
            _widen_block(acc32, acc64, used, 1, W, b0 == 0)
        _lane_tree(acc64, W, 2, W // 2, W, W)
    else:
        used = _strip_lanes32(xb, p, sn, w, m, acc32, 0, n)
        _lane_tree(acc32, used, 1, W, W, LANES32)
        s = vload(acc32, 0)
        vstore(acc64, 0, lo_f64(s))
        vstore(acc64, W // 2, hi_f64(s))
    if not math.isfinite(reduce_add(m)):  # an all--inf column (or inf, NaN), or w < W
        for i in range(w):
            if lane(m, i) == _NINF:
                acc64[i] = np.nan if _col_nan(xb, p, sn, n, i) else 0.0
    for i in range(w, W):
        acc64[i] = 1.0
    vstore(sb, h, ml)
    vstore(sb, h + W // 2, mh)
    vstore(sb, h + W, vload(acc64, 0))
    vstore(sb, h + W + W // 2, vload(acc64, W // 2))


@njit(forceinline=True, error_model="numpy")
def _write_row(xb, p, ob, q, bn, op, accurate, sb, fb, c32, stream):
    """Pass 2 on a row of a block (``bn`` columns from ``xb[p]`` to
    ``ob[q]``), from the block's statistics: float64 ``m`` and ``log s`` (or
    ``1/s``) in ``sb`` (accurate), float32 ones in ``fb`` (fast), per strip
    as :func:`forward_few` lays them out."""
    full = bn // W * W
    zero = splat(0.0)
    # Every vector of the row sits at ``q``'s offset in a vector, so the
    # choice of store is made once a row, two loops (one loop testing each
    # vector's address: 32x2x512x512 float32 0.94x, 8x3x256x256 and
    # 16x3x512x512 bfloat16 0.95-0.96x, in-process A/B). Each vector asks
    # for the next block's row into L2 (without: 512x128x49 float32
    # 0.91-0.95x, 1024x64x32 0.95-0.97x, 2048x60x8 0.96x; 3-row columns
    # 0.97-1.05x).
    if stream and address(ob, q) % (W * ob.itemsize) == 0:
        for j in range(0, full, W):
            prefetch_l2(xb, p + j + BLOCK * W)
            vstore_nt(ob, q + j, _write_vec(vload(xb, p + j), j, op, accurate, sb, fb, c32, zero))
    else:
        for j in range(0, full, W):
            prefetch_l2(xb, p + j + BLOCK * W)
            vstore(ob, q + j, _write_vec(vload(xb, p + j), j, op, accurate, sb, fb, c32, zero))
    if full < bn:
        y = _write_vec(vload_n(xb, p + full, bn - full, _ZERO), full, op, accurate, sb, fb, c32, zero)
        vstore_n(ob, q + full, y, bn - full)


@njit(forceinline=True, error_model="numpy")
def _write_vec(x, j, op, accurate, sb, fb, c32, zero):
    """:func:`.segment.forward_vec` on the vector of columns ``[j, j + W)``."""
    h = 2 * j
    if accurate:
        ml = vload(sb, h)
        mh = vload(sb, h + W // 2)
        return forward_vec(x, ml, mh, vload(sb, h + W), vload(sb, h + W + W // 2), c32, c32, op, True)
    return forward_vec(x, zero, zero, zero, zero, vload(fb, h), vload(fb, h + W), op, False)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_few(xb, ob, g, op, accurate, J, t0, t1):
    """Forward on tiles ``[t0, t1)`` of ``J`` columns (``t1 < 0``: to the
    last), as :func:`.columns.forward_tiles`. ``ob`` may be ``xb``'s memory
    (in place): a block's rows are read before they are written."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    n = g[2]
    ni = g[3]
    sn = g[7]
    osn = g[12]
    a = line_shift(ob, g, 1, J)
    ntile = tiles_per_outer(ni, J, a)
    if t1 < 0:
        t1 = g[0] * g[1] * ntile
    stream = _tiles_stream(ob, g, J)
    acc64 = np.empty(LANES64 * W)
    acc32 = np.empty(LANES32 * W, np.float32)
    # per strip of a block: m (two float64 halves), then s, then log s (or 1/s)
    sb = np.empty(2 * BLOCK * W)
    # the fast path's float32 statistics: per strip m, then log s (or 1/s)
    fb = np.empty(2 * BLOCK * W, np.float32)
    c32 = splat(_ZERO)
    for t in range(t0, t1):
        o, j0, jn = _tile_cols(t, ntile, J, ni, a)
        xbase, _xsn, _xsi = _tile_geom(g, 0, o, j0)
        obase, _osn, _osi = _tile_geom(g, 1, o, j0)
        for b0 in range(0, jn, BLOCK * W):
            bn = min(BLOCK * W, jn - b0)
            for j in range(0, bn, W):
                # ``accurate`` a literal of each call: inlined with the flag
                # a variable, the forward ran 1.5-1.7x slower (in-process A/B)
                if accurate:
                    _strip_stats(xb, xbase + b0 + j, sn, n, min(W, bn - j), True, acc64, acc32, sb, 2 * j)
                else:
                    _strip_stats(xb, xbase + b0 + j, sn, n, min(W, bn - j), False, acc64, acc32, sb, 2 * j)
            # the block's logs in one loop: independent chains (module doc)
            for j in range(0, bn, W):
                h = 2 * j
                lo = vload(sb, h + W)
                hi = vload(sb, h + W + W // 2)
                lo = log_f64(lo) if op == _LSM else 1.0 / lo
                hi = log_f64(hi) if op == _LSM else 1.0 / hi
                if accurate:
                    vstore(sb, h + W, lo)
                    vstore(sb, h + W + W // 2, hi)
                else:  # rounded to float32 once, as the tiles' ma, la, ia
                    vstore(fb, h, join_f32(vload(sb, h), vload(sb, h + W // 2)))
                    vstore(fb, h + W, join_f32(lo, hi))
            # pass 2 a row of the block at a time: a strip's rows lie a
            # plane's row apart, often in one L1 set (module doc)
            for k in range(n):
                p = xbase + b0 + k * sn
                q = obase + b0 + k * osn
                if accurate:  # (a literal again, as for the stats)
                    _write_row(xb, p, ob, q, bn, op, True, sb, fb, c32, stream)
                else:
                    _write_row(xb, p, ob, q, bn, op, False, sb, fb, c32, stream)
    if stream:
        sfence()


@njit(cache=True, nogil=True, error_model="numpy")
def backward_few(db, yb, ob, g, op, accurate, J, t0, t1):
    """Backward on tiles ``[t0, t1)``, as :func:`.columns.backward_tiles`;
    ``ob`` may be the memory of ``db`` or ``yb`` (in place). Two compiles
    of one kernel (:func:`_backward_kernel`), by the rows:

    * more than :data:`FEW_ROWS`: pass 2 asks for the next block's rows
      as it goes (in-process A/B against the same loop without,
      16x21x64x64 float32 1.11x, 16x32x64x64 1.37x, 64x32x112x112
      (streamed) 2.09x; in the same function, untaken, that loop cost
      3-row bfloat16 columns 5-12%);
    * up to :data:`FEW_ROWS`: the lanes' tree runs once a block, over its
      8 strips' lanes, not once a strip (A/B, 15 rounds, same bits:
      8x3x256x256 float32 / bfloat16 1.11x / 1.12x, 16x3x32x32 1.12x,
      16x2x128x128 1.09x; 4x10x16x16 0.97x, 16x16x64x64 0.99x; at 21-64
      rows, where a block's lanes take 21-32 KiB of L1, it lost,
      0.93-0.98x)."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    if g[2] > FEW_ROWS:
        _backward_many(db, yb, ob, g, op, accurate, J, t0, t1)
    else:
        _backward_few_rows(db, yb, ob, g, op, accurate, J, t0, t1)


def _backward_kernel(many):
    """:func:`backward_few`'s kernel, ``many`` (columns of more than
    :data:`FEW_ROWS` rows) a constant of its compile
    (numba freezes a closure's variables; its cache keeps the two apart).
    The same body inlined (``forceinline``) into two wrappers ran 2-8%
    slower on 3-8-row columns (paired, four shapes, two runs) than
    compiled as a function of its own."""

    @njit(cache=True, nogil=True, error_model="numpy")
    def backward_tiles(db, yb, ob, g, op, accurate, J, t0, t1):
        wide_vectors()
        n = g[2]
        ni = g[3]
        dsn = g[7]
        ysn = g[12]
        osn = g[17]
        # (the forward's preamble, written out again: one helper for both made
        # this kernel 0.93-0.97x, in-process A/B, three shapes)
        a = line_shift(ob, g, 2, J)
        ntile = tiles_per_outer(ni, J, a)
        if t1 < 0:
            t1 = g[0] * g[1] * ntile
        stream = _tiles_stream(ob, g, J)
        used = min(n, GRAD_LANES)
        # the lanes' sums: of a strip (lane l at l * W), the block's sums in
        # sb; or, columns of up to FEW_ROWS rows, of the block (lane l at
        # l * BLOCK * W), the block's sums in its lane 0
        acc = np.empty(GRAD_LANES * (W if many else BLOCK * W))
        sb = np.empty(BLOCK * W) if many else acc
        sa = np.empty(BLOCK * W, np.float32)  # the same in float32, for the fast path
        zero = splat(0.0)
        for t in range(t0, t1):
            o, j0, jn = _tile_cols(t, ntile, J, ni, a)
            dbase, _dsn, _dsi = _tile_geom(g, 0, o, j0)
            ybase, _ysn, _ysi = _tile_geom(g, 1, o, j0)
            obase, _osn, _osi = _tile_geom(g, 2, o, j0)
            for b0 in range(0, jn, BLOCK * W):
                bn = min(BLOCK * W, jn - b0)
                for j in range(0, bn, W):
                    w = min(W, bn - j)
                    pd = dbase + b0 + j
                    py = ybase + b0 + j
                    for lane_ in range(used):
                        lo = zero
                        hi = zero
                        # (written out, not segment.grad_add: with it
                        # 16x21x64x64 float32 ran 0.94x, in-process A/B,
                        # two runs; the tiles and strips tie with it)
                        for k in range(lane_, n, GRAD_LANES):
                            d = vload_n(db, pd + k * dsn, w, _ZERO)
                            if op == _LSM:
                                lo = lo + lo_f64(d)
                                hi = hi + hi_f64(d)
                            else:
                                y = vload_n(yb, py + k * ysn, w, _ZERO)
                                lo = lo + lo_f64(d) * lo_f64(y)
                                hi = hi + hi_f64(d) * hi_f64(y)
                        if many:
                            vstore(acc, lane_ * W, lo)
                            vstore(acc, lane_ * W + W // 2, hi)
                        else:
                            vstore(acc, lane_ * BLOCK * W + j, lo)
                            vstore(acc, lane_ * BLOCK * W + j + W // 2, hi)
                    if many:
                        _lane_tree(acc, used, 2, W // 2, W, GRAD_LANES)
                        vstore(sb, j, vload(acc, 0))
                        vstore(sb, j + W // 2, vload(acc, W // 2))
                if not many:  # the tree of the whole block at once (module doc)
                    _lane_tree(acc, used, 2 * -(-bn // W), W // 2, BLOCK * W, GRAD_LANES)
                for j in range(0, bn, W):
                    vstore(sa, j, join_f32(vload(sb, j), vload(sb, j + W // 2)))
                # pass 2 a row of the block at a time (as the forward's)
                full = bn // W * W
                for k in range(n):
                    pd = dbase + b0 + k * dsn
                    py = ybase + b0 + k * ysn
                    q = obase + b0 + k * osn
                    for j in range(0, full, W):
                        if many:  # the next block's row, into L2
                            prefetch_l2(db, pd + j + BLOCK * W)
                            prefetch_l2(yb, py + j + BLOCK * W)
                        v = _grad_vec(vload(db, pd + j), vload(yb, py + j), vload(sb, j), vload(sb, j + W // 2),
                                      vload(sa, j), op, accurate, ob.itemsize == 2)
                        if stream and address(ob, q + j) % (W * ob.itemsize) == 0:
                            vstore_nt(ob, q + j, v)
                        else:
                            vstore(ob, q + j, v)
                    if full < bn:
                        d = vload_n(db, pd + full, bn - full, _ZERO)
                        y = vload_n(yb, py + full, bn - full, _ZERO)
                        v = _grad_vec(d, y, vload(sb, full), vload(sb, full + W // 2), vload(sa, full), op,
                                      accurate, ob.itemsize == 2)
                        vstore_n(ob, q + full, v, bn - full)
        if stream:
            sfence()

    return backward_tiles


_backward_many = _backward_kernel(True)
_backward_few_rows = _backward_kernel(False)
