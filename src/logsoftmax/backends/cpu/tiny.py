"""Tiny rows (up to 32 elements, unit stride): one row per vector lane.

A row of a few elements fills a sliver of a vector and pays, per row, for
everything a long row amortises: a masked load and store, the horizontal
max and the lane tree of its sum, its log. Row by row
(:func:`.rows.forward_short`) that was 20-30 ns a row on the Intel Xeon
(LLVM rocketlake), so rows of 2 float32 lost to PyTorch's ``out=`` (0.76x
forward, 0.73x backward), rows of 16 were level with it or behind (1.05x
forward) and rows of 32 in 16 bits barely ahead (1.04-1.09x).

Here a batch of :data:`W` rows is transposed through an L1 scratch, so that
vector ``k`` holds element ``k`` of every row of the batch. The max, the
terms, the row's lane tree, the log and pass 2 then run as whole vectors,
each lane doing exactly what :mod:`.segment` does for its row: the same
bits as the row kernels, for any batch, thread count or layout. The tree is
the row kernels' order of additions for a row of ``n <= 32``: its elements
fill one or two lane vectors (a lane past ``n`` holding what their masked
load gives there), the second added to the first lane by lane
(:func:`_fold`), then lane ``l`` + lane ``l + 8``, ``+ 4``, ``+ 2``,
``+ 1`` (:func:`_lane_tree`).

The transposes: rows under 8 elements go in as the batch's run of
``16 n`` elements (``n`` vector loads) and come out of it by one gather per
element index (:func:`._vec.vgather`, from L1); longer ones as a row per
one or two vectors through 16x16 register transposes
(:func:`._vec.transpose16`, 64 shuffles each). One thread, in cache,
log_softmax float32, ns per row with gathers only / with transposes only
(``_TRANSPOSE_MIN`` set to 33 and to 1; two runs each): n = 2 7.2-8.6 /
10.0, 4 8.8-9.7 / 10.8-11.6, 8 11.3-14.9 / 12.9-13.6, 12 15.1-18.2 /
15.2-15.8, 16 20.6-21.5 / 17.5-18.2; between 8 and 12 the two are within
the runs' spread.

Whole batches of float32 rows that lie end to end skip the scratch run:
the transposes read their rows straight from the buffer (and, for rows of
32 and the backward's rows of 16, write them straight back):
:func:`_rows_straight`; the forward's rows of 16 take pass 2 on the rows
themselves (:func:`_forward_rows_direct`), all the whole batches of a task
in one loop of their own (:func:`_direct_batches`).
In-process A/B on the AMD EPYC (LLVM znver5), 2 threads, 2**23 elements
(``python benchmarks/ab_inprocess.py --old <worktree>``), old / new: float32
forward rows of 16 1.18x, 12 1.29x, 8 1.06x; bfloat16 (not taken)
1.00-1.02x. One thread in cache, rows of 16: 0.853 -> 0.827 ns/element (a
diagnostic variant without the arithmetic: 0.464 -> 0.387 from the reads
alone).

A forward batch with a row whose sum is not finite (a NaN, ``+inf``, a row
of only ``-inf``) is redone row by row by the row kernels' code, which
owns the rules for those (:func:`.segment.chunk_sum_at`).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload, register_jitable

from .. import Op
from ._math import exp_f32_sum, exp_f64, log_f64
from ._simd import float32_result, keep, view, wide_vectors
from ._vec import (
    W,
    hi_f64,
    join_f32,
    lo_f64,
    prefetch,
    prefetch_w,
    reduce_add,
    splat,
    transpose16,
    vgather,
    vload,
    vload_n,
    vstore,
    vstore_n,
)
from .alloc import STREAM_BYTES
from .geometry import dense_rows, first_row, next_row, row_at
from .segment import (
    backward_vec,
    backward_vec64,
    chunk_stats,
    forward_vec,
    row_log,
    vmax_x86,
    write_forward,
)

__all__ = [
    "FORWARD_MAX",
    "FORWARD_MAX_ACCURATE",
    "BACKWARD_MAX",
    "AMD_BACKWARD_MAX",
    "AMD_BACKWARD_MAX_ACCURATE",
    "backward_max",
    "forward_tiny",
    "forward_tiny_vector",
    "backward_tiny",
]

#: the longest rows that take :func:`forward_tiny` (float32 results, float64
#: terms; 16-bit results, float32 terms) and :func:`backward_tiny`; longer
#: ones run a row per vector (:mod:`.rows`). ``python
#: benchmarks/tiny_rows.py --kernels`` (2 threads, 2**23 elements, ms, tiny /
#: row kernel; Intel Xeon, LLVM rocketlake): float32 forward n = 8 8.5 /
#: 16.1, 16 5.9 / 7.1, 24 6.7 / 6.8, 32 6.2 / 4.5; bfloat16 forward 16 4.2 /
#: 6.2, 32 3.4 / 3.6; backward (the row kernel pipelines its fast path)
#: float32 8 9.3 / 11.4, 12 8.2 / 8.1, 16 6.6 / 6.0, bfloat16 12 5.9 / 6.3,
#: 16 4.7 / 4.2
FORWARD_MAX_ACCURATE = 24
FORWARD_MAX = 2 * W
BACKWARD_MAX = 12
#: ... and on AMD cores (:func:`backward_max`), where the tiny backward
#: loses to the row kernel's loop (a sum, then the writes, a row at a time)
#: from rows of 4 on its accurate path: same table, AMD EPYC
#: (LLVM znver4), backward tiny / row kernel: float32 n = 2 28.7 / 42.7, 3
#: 24.3 / 28.8, 4 21.4 / 21.1, 6 21.6 / 14.5, 8 13.0 / 9.9, 12 11.5 / 6.6,
#: 16 10.6 / 5.0; bfloat16 (fast path) 12 8.8 / 12.3, 16 6.7 / 7.7, 20 8.3 /
#: 8.9, 24 7.4 / 7.2, 32 6.6 / 4.5 (20 is inside the noise: an A/B of the
#: two read 0.94x). Its forward thresholds stand (float32 24 9.2 / 9.8, 32
#: 9.4 / 6.9)
AMD_BACKWARD_MAX_ACCURATE = 3
AMD_BACKWARD_MAX = 16
#: element rows of a transposed block (and elements of a row in the run of
#: the register-transposed path): the kernels take rows of up to 32
_K = 2 * W
#: rows of at least this many elements are transposed in registers, shorter
#: ones by gathers (module doc)
_TRANSPOSE_MIN = 8
#: batches ahead whose lines a big problem asks for (inputs) and claims
#: (outputs, ``prefetchw``): one thread per core cannot keep enough misses
#: in flight otherwise. ``python benchmarks/tiny_rows.py --n 8,12,16``, two
#: runs each way, float32 2**23 elements (32 MiB out), ms with / without
#: (``ahead`` forced off in :func:`_mode`): forward n = 8 8.0-8.3 /
#: 9.3-9.6, 12 7.3-7.5 / 7.2-7.5, 16 5.7 / 6.6-6.8; backward 8 9.8-10.4 /
#: 10.5-11.1, 12 8.9 / 8.3-8.6. On problems that stay in cache (4 MiB) the
#: prefetches cost 3-5% (an earlier form of the loop), so only outputs that
#: stream (:data:`.alloc.STREAM_BYTES`) take them
_AHEAD = 2

_LSM = Op.LOG_SOFTMAX
_ZERO = np.float32(0.0)


@njit(forceinline=True, error_model="numpy")
def _scratch(n):
    """The owners of a call's scratch, to be used through views and kept
    alive to the end (:func:`._simd.keep`): four float32 blocks of ``_K``
    element rows of ``W`` lanes, one float64 block, and the gather indices
    (rows under ``_TRANSPOSE_MIN`` elements): ``[k W + i] = i n + k`` (row
    ``i``'s element ``k`` in a batch's run), ``[_K W + c W + l]``: where
    element ``c W + l`` of the run sits in a transposed block."""
    f32s = np.empty(4 * _K * W, np.float32)
    f64s = np.empty(_K * W)
    idx = np.empty(2 * _K * W, np.int32)
    if n >= _TRANSPOSE_MIN:  # no gathers
        return f32s, f64s, idx
    for k in range(n):
        for i in range(W):
            idx[k * W + i] = i * n + k
    i = 0
    k = 0
    for pos in range(n * W):  # element pos of the run is row i's element k
        idx[_K * W + pos] = k * W + i
        k += 1
        if k == n:
            k = 0
            i += 1
    return f32s, f64s, idx


@njit(forceinline=True, error_model="numpy")
def _mode(g, n, operands, out_itemsize):
    """``(dense, ahead, net)``: every operand's rows end to end; the batches
    ahead asked for (:data:`_AHEAD`, dense rows of an output that streams);
    transposed in registers (else by gathers)."""
    dense = True
    for op in range(operands):
        dense = dense and dense_rows(g, op, n)
    ahead = dense and g[0] * g[1] * n * out_itemsize >= STREAM_BYTES
    return dense, ahead, n >= _TRANSPOSE_MIN


@njit(forceinline=True, error_model="numpy")
def _blocks(f32s, f64s, idxs):
    """:func:`_scratch`'s blocks as ownerless views (:func:`._simd.view`):
    the four float32 blocks, the float64 one, the indices. A reference
    taken in the batch loop is an atomic update; through slices of the
    scratch the loop ran 1.5x longer."""
    b = _K * W
    return (view(f32s, 0, b), view(f32s, b, b), view(f32s, 2 * b, b), view(f32s, 3 * b, b),
            view(f64s, 0, b), view(idxs, 0, 2 * b))


def _rows_straight(buf, p, n, block, out):
    """Transpose ``W`` float32 rows of ``n`` elements that lie end to end
    from ``buf[p]`` straight into ``block`` (``out``: the results in
    ``block`` straight into the rows), by :func:`._vec.transpose16` with row
    stride ``n``; returns whether it could. In: rows whose 16 (or 32)
    element reads stay inside ``buf`` (lanes past ``n`` then hold the next
    rows' elements, which no batch reads). Out: rows that fill their
    vectors (16 or 32 elements). The scratch run puts a store and a load
    per row before the transposes (module doc for what skipping it
    measured)."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(_rows_straight)
def _rows_straight_impl(buf, p, n, block, out):
    if buf.dtype != types.float32:
        return lambda buf, p, n, block, out: False

    def impl(buf, p, n, block, out):
        if out and n != W and n != _K:
            return False
        if not out and p + (W - 1) * n + (W if n <= W else _K) > buf.size:
            return False
        for h in range(1 if n <= W else 2):
            if out:
                transpose16(block, h * W * W, W, buf, p + h * W, n)
            else:
                transpose16(buf, p + h * W, n, block, h * W * W, W)
        return True

    return impl


@njit(forceinline=True, error_model="numpy")
def _load_batch(buf, g, op, i1, i2, nb, n, run, block, idx, net, dense):
    """Rows ``(i1, i2)...`` (``nb`` of them) of operand ``op`` transposed into
    ``block`` (``block[k W + i]``: row ``i``'s element ``k``), via ``run``."""
    wide_vectors()
    if nb < W:  # a partial batch: the missing rows' lanes compute on zeros
        for c in range(0, _K * W, W):
            vstore(run, c, splat(_ZERO))
    if net and dense and nb == W and _rows_straight(buf, row_at(g, op, i1, i2), n, block, False):
        pass
    elif net:  # a row per _K-wide run row, then the register transposes
        for i in range(nb):
            p = row_at(g, op, i1, i2)
            vstore(run, i * _K, vload_n(buf, p, n, _ZERO))
            if n > W:
                vstore(run, i * _K + W, vload_n(buf, p + W, n - W, _ZERO))
            i1, i2 = next_row(g, i1, i2)
        transpose16(run, 0, _K, block, 0, W)
        if n > W:
            transpose16(run, W, _K, block, W * W, W)
    else:  # the batch's run, then a gather per element index
        tot = nb * n
        if dense:
            p = row_at(g, op, i1, i2)
            for c in range(0, tot, W):
                vstore(run, c, vload_n(buf, p + c, tot - c, _ZERO))
        else:
            for i in range(nb):
                vstore_n(run, i * n, vload_n(buf, row_at(g, op, i1, i2), n, _ZERO), n)
                i1, i2 = next_row(g, i1, i2)
        for k in range(n):
            vstore(block, k * W, vgather(run, 0, idx, k * W))


@njit(forceinline=True, error_model="numpy")
def _store_batch(buf, g, op, i1, i2, nb, n, block, run, idx, net, dense):
    """:func:`_load_batch` backwards: ``block`` (transposed results) into the
    rows of operand ``op`` (rounded once to its type by the stores)."""
    wide_vectors()
    if net and dense and nb == W and _rows_straight(buf, row_at(g, op, i1, i2), n, block, True):
        pass
    elif net:
        transpose16(block, 0, W, run, 0, _K)
        if n > W:
            transpose16(block, W * W, W, run, W, _K)
        for i in range(nb):
            q = row_at(g, op, i1, i2)
            vstore_n(buf, q, vload(run, i * _K), n)
            if n > W:
                vstore_n(buf, q + W, vload(run, i * _K + W), n - W)
            i1, i2 = next_row(g, i1, i2)
    elif dense:
        tot = nb * n
        q = row_at(g, op, i1, i2)
        for c in range(0, tot, W):
            vstore_n(buf, q + c, vgather(block, 0, idx, _K * W + c), tot - c)
    else:
        tot = nb * n
        for c in range(0, tot, W):
            vstore(run, c, vgather(block, 0, idx, _K * W + c))
        for i in range(nb):
            vstore_n(buf, row_at(g, op, i1, i2), vload(run, i * n), n)
            i1, i2 = next_row(g, i1, i2)


@njit(forceinline=True, error_model="numpy")
def _ahead(buf, g, op, i1, i2, n, write):
    """Ask for the lines of the batch :data:`_AHEAD` batches after the one at
    ``(i1, i2)`` (dense rows): for reading, or to be written."""
    p = row_at(g, op, i1, i2) + _AHEAD * W * n
    for c in range(0, W * n, 64 // buf.itemsize):
        if write:
            prefetch_w(buf, p + c)
        else:
            prefetch(buf, p + c)


@njit(forceinline=True, error_model="numpy")
def _fold(acc, half):
    """Lane row ``l`` += lane row ``l + 16`` (``l < 16``): a row of 17-32
    elements fills two of the row kernels' lane vectors, which they add lane
    by lane before the tree of :func:`_lane_tree` (``.segment._sum64``'s
    running ``lo``, ``hi``; ``_sum32``'s and ``chunk_grad_sum``'s ``(a0 +
    a2) + (a1 + a3)``)."""
    wide_vectors()
    for j in range(W):
        a = j * W
        b = (j + W) * W
        vstore(acc, a, vload(acc, a) + vload(acc, b))
        if half:
            vstore(acc, a + W // 2, vload(acc, a + W // 2) + vload(acc, b + W // 2))


@njit(forceinline=True, error_model="numpy")
def _lane_tree(acc, half):
    """``acc[0:W]`` (``acc[0:W/2]`` and ``acc[W/2:W]``: float64 halves when
    ``half``) = the tree of the 16 lane rows ``acc[l * W:]``: row ``l`` +
    row ``l + h`` for ``h = 8, 4, 2, 1`` (a row's lanes as
    :func:`._vec.reduce_add` adds them)."""
    wide_vectors()
    h = W // 2
    while h >= 1:
        for j in range(h):
            a = j * W
            b = (j + h) * W
            vstore(acc, a, vload(acc, a) + vload(acc, b))
            if half:
                vstore(acc, a + W // 2, vload(acc, a + W // 2) + vload(acc, b + W // 2))
        h //= 2


# ---------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------
@njit(forceinline=True, error_model="numpy")
def _forward_batch(xt, yt, n, op, accurate, acc32, acc64):
    """Forward of the transposed batch ``xt`` into ``yt``; returns whether
    every row's sum is finite (else not all results are the row kernels')."""
    mx, m_lo, m_hi, b_lo, b_hi, b32, finite = _forward_stats(xt, n, op, accurate, acc32, acc64)
    for k in range(n):
        y = forward_vec(vload(xt, k * W), m_lo, m_hi, b_lo, b_hi, mx, b32, op, accurate)
        vstore(yt, k * W, y)
    return finite


@njit(forceinline=True, error_model="numpy")
def _forward_rows_direct(xb, ob, px, po, n, op, accurate, acc32, acc64, xt, st64, st32):
    """The forward of a batch of ``W`` float32 rows of one vector each that
    lie end to end (``xb[px:]``, ``ob[po:]``), its statistics from the
    transposed block ``xt``: pass 2 runs on the rows as they lie, each with
    its own row's statistics broadcast, instead of on the block and a
    transpose back (the same arithmetic per element, so the same bits).
    Returns :func:`_forward_batch`'s finiteness; writes nothing if a sum is
    not finite. The transpose back is 64 shuffles a batch, on the port the
    float64 arithmetic needs too. In-process A/B, numpy ``out=``, same bits
    (Intel Xeon, LLVM rocketlake; not measured on AMD cores): float32 rows
    of 16, 524288 rows 1.05-1.06x, 65536 rows 1.08x, 8192 rows (in cache)
    1.03-1.06x."""
    mx, m_lo, m_hi, b_lo, b_hi, b32, finite = _forward_stats(xt, n, op, accurate, acc32, acc64)
    if not finite:
        return False
    vstore(st64, 0, m_lo)
    vstore(st64, W // 2, m_hi)
    vstore(st64, W, b_lo)
    vstore(st64, W + W // 2, b_hi)
    vstore(st32, 0, mx)
    vstore(st32, W, b32)
    for i in range(W):
        m = splat(st64[i])
        b = splat(st64[W + i])
        y = forward_vec(vload(xb, px + i * n), m, m, b, b, splat(st32[i]), splat(st32[W + i]),
                        op, accurate)
        vstore(ob, po + i * n, y)
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _direct_batches(xb, ob, px, po, nbatch, op, accurate, ahead, xt, acc32, acc64, st64, st32):
    """``nbatch`` whole batches of ``W`` float32 rows of ``W`` elements that lie
    end to end from ``xb[px]`` and ``ob[po]``: each transposed straight from
    its rows (:func:`_rows_straight`), its pass 2 on the rows
    (:func:`_forward_rows_direct`); ``ahead``: the lines :data:`_AHEAD`
    batches on asked for. Returns how many batches it wrote: it stops before
    one with a sum that is not finite, of which it has written nothing.

    Why a loop of its own: in :func:`_forward_tiny_rows`'s general loop
    (each batch's rows stepped through the geometry, the row-by-row
    fallback called inside it, the partial batch's code beside it) the same
    arithmetic ran slower. 524288x16 float32, 2 threads, the kernel alone
    (scratch scripts, medians of 15; Intel Xeon, LLVM rocketlake): 3.28-3.40
    ms in that loop, 2.94-2.99 ms here, 2.80-2.82 ms for a loop with neither
    the fallback nor the stop (not correct for rows that are not finite);
    the geometry's stepping alone cost 2.82 -> 2.94-2.96 ms. In-process A/B
    of the library against the loop it replaces (``python
    benchmarks/ab_inprocess.py --old <tree> --numpy-out --rounds 11``,
    same bits): 524288x16 1.11x (twice), 65536x16 1.07x, 8192x16 (in cache)
    1.08x."""
    wide_vectors()
    step = W * W
    for j in range(nbatch):
        if ahead and j + _AHEAD < nbatch:
            for c in range(0, step, 16):  # (a line of float32)
                prefetch(xb, px + _AHEAD * step + c)
                prefetch_w(ob, po + _AHEAD * step + c)
        _rows_straight(xb, px, W, xt, False)  # (rows of W: their reads end with the batch)
        if not _forward_rows_direct(xb, ob, px, po, W, op, accurate, acc32, acc64, xt, st64, st32):
            return j
        px += step
        po += step
    return nbatch


@njit(forceinline=True, error_model="numpy")
def _forward_stats(xt, n, op, accurate, acc32, acc64):
    """The per-row statistics of the transposed batch ``xt``: ``(mx, m_lo,
    m_hi, b_lo, b_hi, b32, finite)``, the max (float32 and float64 halves),
    ``log s`` or ``1/s`` (float64 halves and float32), and whether every
    row's sum is finite."""
    wide_vectors()
    mx = vload(xt, 0)
    for k in range(1, n):
        mx = vmax_x86(mx, vload(xt, k * W))
    m_lo = lo_f64(mx)
    m_hi = hi_f64(mx)
    # the terms of element rows up to the row kernels' last lane vector
    kl = W if n <= W else 2 * W
    if accurate:  # .segment._sum64: lanes k and k + 8 of two float64 halves
        past = exp_f64(splat(np.float64(-np.inf)))  # a masked-off lane's term
        for k in range(kl):
            if k < n:
                x = vload(xt, k * W)
                vstore(acc64, k * W, exp_f64(lo_f64(x) - m_lo))
                vstore(acc64, k * W + W // 2, exp_f64(hi_f64(x) - m_hi))
            else:
                vstore(acc64, k * W, past)
                vstore(acc64, k * W + W // 2, past)
        if n > W:
            _fold(acc64, True)
        _lane_tree(acc64, True)
        s_lo = vload(acc64, 0)
        s_hi = vload(acc64, W // 2)
    else:  # .segment._sum32: its first two accumulators, lanes past n 0
        for k in range(kl):
            if k < n:
                vstore(acc32, k * W, exp_f32_sum(vload(xt, k * W) - mx))
            else:
                vstore(acc32, k * W, splat(_ZERO))
        if n > W:
            _fold(acc32, False)
        _lane_tree(acc32, False)
        s = vload(acc32, 0)
        s_lo = lo_f64(s)
        s_hi = hi_f64(s)
    if op == _LSM:
        b_lo = log_f64(s_lo)
        b_hi = log_f64(s_hi)
    else:
        b_lo = 1.0 / s_lo
        b_hi = 1.0 / s_hi
    b32 = join_f32(b_lo, b_hi)
    # every row's sum is finite (each <= 32) iff their total is: a NaN or
    # +inf lane makes it NaN or +inf
    total = reduce_add(s_lo + s_hi)
    return mx, m_lo, m_hi, b_lo, b_hi, b32, total - total == 0.0


@njit(cache=True, nogil=True, error_model="numpy")
def _forward_rows(xb, ob, g, op, accurate, i1, i2, nb, n):
    """``nb`` rows from ``(i1, i2)`` the row kernels' way (a row is one
    chunk: :func:`.rows.forward_range`'s body), for a batch whose sums are
    not all finite."""
    for _ in range(nb):
        xs = view(xb, row_at(g, 0, i1, i2), n)
        m, s = chunk_stats(xs, 0, n, accurate)
        write_forward(xs, view(ob, row_at(g, 1, i1, i2), n), 0, n, op, accurate, m, row_log(s),
                      1.0 / s)
        i1, i2 = next_row(g, i1, i2)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_tiny(xb, ob, g, op, accurate, r0, r1):
    """:func:`.rows.forward_short` for rows of up to 32 elements (the plan
    takes this for rows up to :data:`FORWARD_MAX`, :func:`.rows.short_form`;
    rows of ``W`` take :func:`forward_tiny_vector`): batches of ``W`` rows,
    a row per lane (module doc). ``ob`` may be ``xb`` (in place): a batch
    is read whole before any of it is written."""
    accurate = accurate and float32_result(ob)  # (as the row kernels: a constant for 16-bit results)
    _forward_tiny_rows(xb, ob, g, op, accurate, r0, r1, g[2])


@njit(cache=True, nogil=True, error_model="numpy")
def forward_tiny_vector(xb, ob, g, op, accurate, r0, r1):
    """:func:`forward_tiny` for rows of exactly ``W`` elements, its batch
    loop compiled for that length, which LLVM unrolls (as
    :func:`.rows.forward_whole` for 32-128). A kernel of its own, so that a
    first call on other tiny rows does not compile this copy: 64x10 float32
    on a fresh cache 21-22 s before, 15-17 s after (``python
    benchmarks/compile_time.py --only "rows of 10"``, three runs each, AMD
    EPYC Zen 3). The plan sends it rows of ``W`` only, yet it keeps the
    general copy (the ``else`` below) beside its own: with the copy for
    ``W`` alone, bfloat16 rows of 16 ran 0.95x in three in-process A/Bs
    (paired), with both 0.97-0.98x, as the one tiny kernel before this
    split 0.97x, against 25d6ee9 (the same code against itself
    1.00-1.01x)."""
    # AMD EPYC (LLVM znver5): float32 rows of 16, one thread in cache 0.827
    # -> 0.655 ns/element (PyTorch 0.776); A/B, 2 threads, 2**23 elements:
    # float32 1.06x, bfloat16 1.05-1.06x. ``W`` goes as a literal, so numba
    # compiles this copy on its own (not ._simd.I0's plain int64): as
    # np.int64(W), one copy for both, bfloat16 rows of 16 ran 0.89x (one
    # in-process A/B, AMD EPYC Zen 3)
    accurate = accurate and float32_result(ob)
    n = g[2]
    if n == W:
        _forward_tiny_rows(xb, ob, g, op, accurate, r0, r1, W)
    else:
        _forward_tiny_rows(xb, ob, g, op, accurate, r0, r1, n)


@njit(forceinline=True, error_model="numpy")
def _forward_tiny_rows(xb, ob, g, op, accurate, r0, r1, n):
    """:func:`forward_tiny`'s batch loop (``n``: a constant in its copy for
    rows of one vector)."""
    wide_vectors()
    dense, ahead, net = _mode(g, n, 2, ob.itemsize)
    f32s, f64s, idxs = _scratch(n)
    run, xt, yt, acc32, acc64, idx = _blocks(f32s, f64s, idxs)
    # direct: the statistics go through float64s past the tree's rows (W of
    # them for rows of W) and the float32 block yt, which it does not use.
    # Rows of 2 W too: float32 forward n = 32, 2 threads, 2**23 elements,
    # tiny 3.65 ms against the row kernel's 3.45 (benchmarks/tiny_rows.py
    # --kernels), so they stay with the row kernel (FORWARD_MAX_ACCURATE)
    st64, st32 = view(f64s, _K * W - 2 * W, 2 * W), yt
    direct = n == W and net and dense and xb.itemsize == 4 and ob.itemsize == 4
    i1, i2 = first_row(g, r0)
    start = r0
    if direct:  # the whole batches, as one run of rows (_direct_batches)
        nbatch = (r1 - r0) // W
        px, po = row_at(g, 0, i1, i2), row_at(g, 1, i1, i2)
        j = 0
        while j < nbatch:
            j += _direct_batches(xb, ob, px + j * W * W, po + j * W * W, nbatch - j, op, accurate,
                                 ahead, xt, acc32, acc64, st64, st32)
            if j < nbatch:  # a batch with a sum that is not finite: written row by row
                f1, f2 = first_row(g, r0 + j * W)
                _forward_rows(xb, ob, g, op, accurate, f1, f2, W, n)
                j += 1
        start = r0 + nbatch * W
        i1, i2 = first_row(g, start)
    for b0 in range(start, r1, W):
        nb = min(W, r1 - b0)
        if ahead and b0 + _AHEAD * W < r1:
            _ahead(xb, g, 0, i1, i2, n, False)
            _ahead(ob, g, 1, i1, i2, n, True)
        _load_batch(xb, g, 0, i1, i2, nb, n, run, xt, idx, net, dense)
        if _forward_batch(xt, yt, n, op, accurate, acc32, acc64):
            _store_batch(ob, g, 1, i1, i2, nb, n, yt, run, idx, net, dense)
        else:  # no store yet: the inputs are intact (in place too)
            _forward_rows(xb, ob, g, op, accurate, i1, i2, nb, n)
        for _ in range(nb):
            i1, i2 = next_row(g, i1, i2)
    keep(f32s)
    keep(f64s)
    keep(idxs)


# ---------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------
@njit(forceinline=True, error_model="numpy")
def _backward_batch(dt, yt, gt, n, op, accurate, acc64, half):
    """Backward of the transposed batch (``dt``: ``diff_dst``, ``yt``:
    ``dst``) into ``gt``: :func:`.segment.chunk_grad_sum`'s float64 terms
    (``0 + t``: its lanes start at 0; for a row of up to 16 the ``+ 0`` of
    the empty lanes ``l + 16`` changes no bit and is left out) in its lane
    tree, then :func:`.segment.write_backward` (``half``: the output is
    16-bit, :func:`.segment.backward_vec`)."""
    wide_vectors()
    kl = W if n <= W else 2 * W
    for k in range(kl):
        if k < n:
            d = vload(dt, k * W)
            if op == _LSM:
                t_lo, t_hi = lo_f64(d), hi_f64(d)
            else:
                y = vload(yt, k * W)
                t_lo, t_hi = lo_f64(d) * lo_f64(y), hi_f64(d) * hi_f64(y)
            vstore(acc64, k * W, 0.0 + t_lo)  # (-0 -> +0, as there; the + 0 after is exact)
            vstore(acc64, k * W + W // 2, 0.0 + t_hi)
        else:
            vstore(acc64, k * W, splat(0.0))
            vstore(acc64, k * W + W // 2, splat(0.0))
    if n > W:
        _fold(acc64, True)
    _lane_tree(acc64, True)
    s_lo = vload(acc64, 0)
    s_hi = vload(acc64, W // 2)
    s32 = join_f32(s_lo, s_hi)
    ns32 = join_f32(-s_lo, -s_hi)
    for k in range(n):
        d = vload(dt, k * W)
        y = vload(yt, k * W)
        if accurate:
            vstore(gt, k * W, backward_vec64(d, y, op, s_lo, s_hi))
        else:
            vstore(gt, k * W, backward_vec(d, y, op, ns32, s32, half))


@register_jitable
def backward_max(accurate, amd):
    """The longest rows that the plan hands to :func:`backward_tiny`
    (:func:`.rows.short_backward_form`) on an AMD core or not (``amd``: the
    CPU being compiled for, ``alloc.compiles_for_amd()`` in Python,
    :func:`._vec.on_amd` in a kernel)."""
    if amd:
        return AMD_BACKWARD_MAX_ACCURATE if accurate else AMD_BACKWARD_MAX
    return BACKWARD_MAX


@njit(cache=True, nogil=True, error_model="numpy")
def backward_tiny(db, yb, ob, g, op, accurate, r0, r1):
    """:func:`.rows.backward_short` for rows of up to 32 elements (it takes
    this for rows up to :func:`backward_max`): as :func:`forward_tiny`
    (``ob`` may be ``db`` or ``yb``: in place)."""
    accurate = accurate and float32_result(ob)
    wide_vectors()
    n = g[2]
    dense, ahead, net = _mode(g, n, 3, ob.itemsize)
    f32s, f64s, idxs = _scratch(n)
    run, dt, yt, gt, acc64, idx = _blocks(f32s, f64s, idxs)
    i1, i2 = first_row(g, r0)
    for b0 in range(r0, r1, W):
        nb = min(W, r1 - b0)
        if ahead and b0 + _AHEAD * W < r1:
            _ahead(db, g, 0, i1, i2, n, False)
            _ahead(yb, g, 1, i1, i2, n, False)
            _ahead(ob, g, 2, i1, i2, n, True)
        _load_batch(db, g, 0, i1, i2, nb, n, run, dt, idx, net, dense)
        _load_batch(yb, g, 1, i1, i2, nb, n, run, yt, idx, net, dense)
        _backward_batch(dt, yt, gt, n, op, accurate, acc64, ob.itemsize == 2)
        _store_batch(ob, g, 2, i1, i2, nb, n, gt, run, idx, net, dense)
        for _ in range(nb):
            i1, i2 = next_row(g, i1, i2)
    keep(f32s)
    keep(f64s)
    keep(idxs)
