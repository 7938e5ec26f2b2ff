"""Row kernels: the reduction axis is a row of ``n`` elements (``inner == 1``).

Each row follows :mod:`.segment`'s definition chunk by chunk: stats, merge,
log, pass 2. Rows are addressed through the geometry array ``g`` that
:mod:`.layout` builds once per layout (:mod:`.geometry`). Rows whose step is
not 1 are gathered into a per-task staging row first (and scattered back),
so the arithmetic only ever runs on unit-stride vectors.

Every kernel takes a range of rows last (``*_range``, ``*_short``: rows
``[r0, r1)``). The backend calls it directly for small problems -- waking
numba's thread pool costs more than the work there -- and splits bigger
ones into ``ntask`` contiguous ranges run under ``numba.prange`` by a
driver that calls the same compiled code (:func:`.native.over_rows`), so
both give the same bits. (``logsumexp_parallel`` is that loop of its own.)
"""

from __future__ import annotations

import enum
import sys

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from ._math import log_f64
from ._simd import FALSE, TRUE, float32_result, keep, view, wide_vectors
from ._vec import (
    W,
    hi_f64,
    join_at,
    lane,
    lanes_below,
    lanes_below64,
    lo_f64,
    on_amd,
    pairs_interleave,
    prefetch_l2,
    reduce_add_rows,
    reduce_max_rows,
    sfence,
    splat,
    vload,
    vload_n,
    vload_pair,
    vload_part,
    vstore,
    vstore_n,
    vstore_nt,
    vstore_pair_nt,
    where,
)
from .. import Op
from . import alloc, tiny
from .geometry import dense_rows, first_row, next_row, row_at, row_offset, row_step
from .segment import (
    CHUNK,
    SUM_BLOCK,
    backward_vec,
    backward_vec64,
    chunk_grad_sum,
    chunk_max,
    chunk_max_lanes,
    chunk_stats,
    chunk_sum32,
    chunk_sum32_lanes,
    chunk_sum64_keeping,
    chunk_sum64_lanes,
    empty_sum,
    forward_kept,
    forward_vec,
    grad_sum_streaming,
    grad_sum_vectors,
    grad_sum_writing,
    merge,
    row_log,
    stream_head,
    store_backward,
    stream_backward,
    sum32_writing,
    write_backward,
    write_backward_vectors,
    write_forward,
    write_forward_kept,
)

_LSM = Op.LOG_SOFTMAX
_NINF32 = np.float32(-np.inf)

__all__ = [
    "PIPELINE_MIN",
    "pipelined",
    "forward_range",
    "ShortForm",
    "short_form",
    "forward_short_kernel",
    "forward_short",
    "forward_whole",
    "short_backward_form",
    "backward_short_kernel",
    "backward_range",
    "backward_accurate",
    "backward_short",
    "logsumexp_range",
    "logsumexp_parallel",
    "row_stats",
]


#: see :func:`_row_head` (64x64x112x112 NHWC axis 1, rows of 256 B into a
#: misaligned ``out=``: 31.2 ms in the stop before, 35.3 streamed; rows of
#: 1536 B, 8x16x384x384 axis 3: 10.0 -> 8.1-8.9)
STREAM_ROW_BYTES = 512

#: log_softmax rows of at least this many elements on the fast path (16-bit
#: results at any length, float32 past ``segment.SHORT``) are pipelined
#: (:func:`_forward_pipelined`); shorter ones take :func:`forward_short`'s
#: batches. In-process A/B, pipelined / batches, 2 threads, numpy ``out=``,
#: same bits (Intel Xeon, LLVM rocketlake): float32 32768x4000 1.50x,
#: 87381x1500 1.45x, 1000x2000 (in cache) 1.37x, 64x4096 1.20x; bfloat16
#: 32768x4000 1.47x, 65536x2048 1.43x, 131072x1024 1.25x, 262144x512
#: 1.08-1.09x, 2000x512 (in cache) 1.03x, 299593x448 0.99x, 349525x384
#: 0.97x, 524288x256 0.90x, rows of 128 0.67x; float16 174762x768 1.48x.
#: (Before, only rows of more than a chunk were pipelined.)
PIPELINE_MIN = 512

#: elements ahead that short rows ask for in the accurate backward (rows of
#: one line, :func:`_backward_short_rows`; rows of 17-36,
#: :func:`_backward_flat_rows`): 256-4096 measured alike on the Intel Xeon
BACKWARD_AHEAD = 512


@njit(forceinline=True, error_model="numpy")
def streams(ob, g):
    """Whether a row kernel's output goes out by streaming stores: only
    outputs far bigger than a cache, since they send every line to memory
    and a result that fits in L2/L3 is better left there for whoever reads
    it next."""
    return streams_items(g, ob.itemsize, True)


@njit(forceinline=True, error_model="numpy")
def streams_tiles(ob, g):
    """:func:`streams` for the column kernels (:mod:`.columns`, :mod:`.strips`)."""
    return streams_items(g, ob.itemsize, False)


_stream_line = njit(forceinline=True, error_model="numpy")(alloc.stream_line)


@njit(forceinline=True, error_model="numpy")
def streams_items(g, itemsize, rows):
    """:func:`streams` for an output of ``itemsize``-byte items (before it
    exists: the plan's tile width, ``.columns.stages``) of the row kernels
    (``rows``) or the column ones: from :func:`.alloc.stream_line` for the
    CPU being compiled for (the rule the front door reads too)."""
    return g[0] * g[1] * g[2] * g[3] * itemsize >= _stream_line(itemsize, rows, on_amd())


@njit(forceinline=True, error_model="numpy")
def _row_head(os, n, stream):
    """:func:`.segment.stream_head` of a row ``os`` of a streamed output, or
    -1 (ordinary stores): rows shorter than :data:`STREAM_ROW_BYTES` stream
    only when they start on a line, since their partial first and last lines
    (ordinary stores, each shared with the next row) would be a large part
    of them."""
    if not stream:
        return -1
    head = stream_head(os, 0)
    if head != 0 and n * os.itemsize < STREAM_ROW_BYTES:
        return -1
    return head


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def touch_pages(pages, ntask):
    """A zero stored every 4 KiB into the ``uint8`` array ``pages`` and into
    its last byte (every page it spans), ``ntask`` slices in parallel: a
    fresh result's page faults, shared by the threads
    (:func:`.alloc.fault_in`)."""
    n = (pages.size + 4095) // 4096
    for t in prange(ntask):
        for i in range(t * n // ntask, (t + 1) * n // ntask):
            pages[i * 4096] = 0
    if n > 0:
        pages[pages.size - 1] = 0


@njit(cache=True, nogil=True, error_model="numpy")
def gather(buf, off, n, step, dst):
    """``dst[:n] = buf[off + k * step]`` (any step, 0 = broadcast)."""
    for k in range(n):
        dst[k] = buf[off + k * step]


@njit(cache=True, nogil=True, error_model="numpy")
def scatter(src, buf, off, n, step):
    """``buf[off + k * step] = src[k]``: the inverse of :func:`gather`."""
    for k in range(n):
        buf[off + k * step] = src[k]


@njit(forceinline=True, error_model="numpy")
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


@njit(forceinline=True, error_model="numpy")
def target(buf, g, op, r, n, stage):
    """Where to write row ``r`` of operand ``op``: a view, or ``stage``."""
    if row_step(g, op) == 1:
        return view(buf, row_offset(g, op, r), n)
    return view(stage, 0, n)


@njit(forceinline=True, error_model="numpy")
def flush(buf, g, op, r, n, stage):
    step = row_step(g, op)
    if step != 1:
        scatter(stage, buf, row_offset(g, op, r), n, step)


@njit(forceinline=True, error_model="numpy")
def stage_for(buf, size, needed):
    """A scratch buffer of ``size`` elements of ``buf``'s type when
    ``needed``, else an empty view of ``buf`` (unused: no allocation on the
    common path -- each numba allocation costs ~0.1 us of a small call). A
    view, not ``buf`` itself: a read-only ``buf`` made the two results one
    read-only type, and the kernels' writes into the scratch did not compile
    (a read-only 300x120 float32 array, axis 0, raised numba's TypingError)."""
    if needed:
        return np.empty(size, buf.dtype)
    return view(buf, 0, 0)


@njit(cache=True, nogil=True, error_model="numpy")
def row_stats(xs, n, accurate):
    """``(m, s)`` of a whole unit-stride row: chunk stats merged in order."""
    wide_vectors()
    m, s = chunk_stats(xs, 0, min(n, CHUNK), accurate)
    for c0 in range(CHUNK, n, CHUNK):
        mc, sc = chunk_stats(xs, c0, min(n - c0, CHUNK), accurate)
        m, s = merge(m, s, mc, sc)
    return m, s


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _forward_pipelined(xb, ob, g, op, accurate, r0, r1):
    """log_softmax of unit-stride rows ``[r0, r1)`` of at least
    :data:`PIPELINE_MIN` elements: the statistics pass of row ``r`` writes
    row ``r - 1``'s result as it goes.

    Row by row, the statistics pass (read from memory, an exp per element)
    is compute-bound and the write pass memory-bound, and the forward took
    about the sum of the two (``benchmarks/vocab_limits.py``, 4096x32000
    float32, 2 threads: first pass alone 23.7 ms, a copy of the same bytes
    23.5 ms, the row-by-row forward 43.6-46.1 ms across runs; interleaving
    whole 4096-element chunks of the two passes gained nothing, 44.1 ms).
    Here every exp vector of row ``r`` is followed by one store of row
    ``r - 1``; measured against the row-by-row kernel in back-to-back runs:
    43.8 -> 41.7 ms float32, 29.5 -> 25.7 ms bfloat16. The stores still do
    not hide entirely under the exponentials on this machine. Each row's
    arithmetic is the row-by-row loop's, so the bits are the same; in
    place, row ``r - 1`` is written after its own statistics pass and while
    row ``r`` (other memory) is read. Rows end to end into an output off a
    line: the line that row ``r - 1`` shares with row ``r`` waits for row
    ``r``'s statistics and goes out whole (:func:`_write_joined`)."""
    wide_vectors()
    n = g[2]
    stream = streams(ob, g)
    joined = stream and dense_rows(g, 0, n) and dense_rows(g, 1, n)  # (rows of many lines)
    line = 64 // ob.itemsize
    # float32 rows of two chunks or more take each next chunk's max inside
    # this chunk's loop (sum32_writing's ``fold``) instead of a max pass of
    # its own. In-process A/B, numpy out=, same bits (Intel Xeon, LLVM
    # rocketlake): 512x50257 1.06-1.08x, 1024x32000 1.05-1.07x, 1024x128000
    # 1.06x, 4096x32000 1.01-1.02x, 64x32000 (in cache) 1.07x; rows of 5000
    # 0.94-0.98x (so not below 2 chunks); bfloat16 4096x32000 0.90x (its
    # loads convert, on the ports the exponentials use)
    fold = xb.itemsize == 4 and n >= 2 * CHUNK
    xp = view(xb, row_offset(g, 0, r0), n)
    m, s = row_stats(xp, n, accurate)
    pm32 = lp_prev = np.float32(0.0)
    for r in range(r0 + 1, r1):
        xs = view(xb, row_offset(g, 0, r), n)
        prev = view(ob, row_offset(g, 1, r - 1), n)
        head = stream_head(prev, 0) if stream else -1
        mp, lg, inv = m, row_log(s), 1.0 / s
        mp32, lp32 = np.float32(mp), np.float32(lg)
        h = max(head, 0)
        if joined and head > 0 and r - 1 > r0:
            at = (row_offset(g, 0, r - 1), row_offset(g, 1, r - 1))
            _write_joined(xb, ob, at, line - head, pm32, lp_prev, mp32, lp32)
        else:
            write_forward(xp, prev, 0, min(h, n), op, accurate, mp, lg, inv)  # before the first line
        cut = _joined_cut(n, head, line, joined)
        first = True
        ahead = False  # whether the last chunk's loop took this chunk's max (m_next)
        m_next = np.float32(0.0)
        for c0 in range(0, n, CHUNK):
            cl = min(n - c0, CHUNK)
            mc = np.float64(m_next if ahead else chunk_max(xs, c0, cl))
            ahead = False
            if mc == -np.inf:  # rare: chunk_stats' rules, then the writes
                mc, sc = chunk_stats(xs, c0, cl, accurate)
                lo = min(c0 + h, cut)
                write_forward(xp, prev, lo, min(c0 + cl + h, cut) - lo, op, accurate, mp, lg, inv)
            elif fold:  # (the last chunk: no next one, the same prefetch distance)
                sc, m_next = sum32_writing(xs, c0, cl, np.float32(mc), xp, prev, mp32, lp32, head,
                                           cut, True)
                ahead = True
            else:
                sc, _ = sum32_writing(xs, c0, cl, np.float32(mc), xp, prev, mp32, lp32, head, cut)
            if first:
                m, s, first = mc, sc, False
            else:
                m, s = merge(m, s, mc, sc)
        xp = xs
        pm32, lp_prev = mp32, lp32
    os = view(ob, row_offset(g, 1, r1 - 1), n)
    head = stream_head(os, 0) if stream else -1
    lg = row_log(s)
    if joined and head > 0 and r1 - 1 > r0:
        at = (row_offset(g, 0, r1 - 1), row_offset(g, 1, r1 - 1))
        _write_joined(xb, ob, at, line - head, pm32, lp_prev, np.float32(m), np.float32(lg))
        write_forward(xp, os, head, n - head, op, accurate, m, lg, 1.0 / s, 0)
    else:
        write_forward(xp, os, 0, n, op, accurate, m, lg, 1.0 / s)
    if stream:
        sfence()  # the streamed lines are ordered before whatever follows


@register_jitable
def pipelined(n, op, accurate):
    """Whether unit-stride rows of ``n`` take :func:`_forward_pipelined`.
    Plain Python where the backend plans a call, inlined in the kernels: as
    an ``njit`` function its first call from Python compiled it in every
    process (numba does not cache it): a fresh process's first call on
    64x2000 float32 took 0.49-0.50 s, now 0.41 s (three processes each)."""
    return n >= PIPELINE_MIN and op == _LSM and not accurate


@njit(forceinline=True, error_model="numpy")
def _joined_cut(n, head, line, joined):
    """Where a pipelined row's own writes stop: before its last partial line
    when that line is written with the next row's first elements
    (``joined``, :func:`_write_joined`), else at ``n``."""
    if joined and head >= 0:
        return n - (n - head) % line
    return n


@njit(forceinline=True, error_model="numpy")
def _write_joined_backward(db, yb, ob, at, t, op, s_prev, s):
    """:func:`_write_joined` for the backward: ``at``, where the next row
    starts in ``db``, ``yb`` and ``ob``; ``s_prev``, ``s``: the two rows'
    gradient sums."""
    for q in range(0, 64 // ob.itemsize, W):
        first = lanes_below(t - q)
        s32 = where(first, splat(np.float32(s_prev)), splat(np.float32(s)))
        ns32 = where(first, splat(np.float32(-s_prev)), splat(np.float32(-s)))
        d = vload(db, at[0] - t + q)
        y = vload(yb, at[1] - t + q)
        vstore_nt(ob, at[2] - t + q, backward_vec(d, y, op, ns32, s32, ob.itemsize == 2))


@njit(forceinline=True, error_model="numpy")
def _write_joined(xb, ob, at, t, pm, plg, m, lg):
    """The line that a row's last ``t`` elements share with the next row's
    first ones (rows end to end, the output off a line), by streaming
    stores: lanes before ``at`` (where the next row starts in ``xb`` and
    ``ob``) take the row's statistics ``pm``, ``plg``, the others the next
    row's ``m``, ``lg`` (float32: the pipelined loop's fast path).

    By ordinary stores from each row, that line is read from memory (for
    ownership) while the streaming stores queue behind it: a scratch loop
    of the pipelined forward that wrote one line a row by ordinary stores
    took 18.5 ms against 17.5 ms without (4096x32000 bfloat16, 2 threads,
    Intel Xeon, LLVM rocketlake). In-process A/B against writing the two
    parts by ordinary stores, numpy ``out=`` (16 bytes past a line), same
    bits: 4096x32000 bfloat16 forward 1.09-1.10x, backward 1.04-1.05x;
    float32 4096x32000, float16 1024x128256, 512x50257, 256x128256 and
    1024x32000 0.98-1.01x (why float32 with as many rows does not gain is
    not measured). A bfloat16 forward into outputs at +0, +16 bytes from a
    line now takes 18.5-18.7 ms either way (18.1 against 19.6 before)."""
    for q in range(0, 64 // ob.itemsize, W):
        first = lanes_below(t - q)
        v = vload(xb, at[0] - t + q)
        y = (v - where(first, splat(pm), splat(m))) - where(first, splat(plg), splat(lg))
        vstore_nt(ob, at[1] - t + q, y)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_range(xb, ob, g, op, accurate, r0, r1):
    """Forward (``op``: :class:`Op`) on rows ``[r0, r1)``. ``ob`` may be the
    same memory as ``xb`` with the same geometry (in place): every vector
    is read before it is written, and a staged row is gathered before its
    result is scattered back."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    n = g[2]
    if (pipelined(n, op, accurate) and r1 - r0 > 1
            and row_step(g, 0) == 1 and row_step(g, 1) == 1):
        _forward_pipelined(xb, ob, g, op, accurate, r0, r1)
        return
    xst = stage_for(xb, n, row_step(g, 0) != 1)
    ost = stage_for(ob, n, row_step(g, 1) != 1)
    stream = streams(ob, g) and row_step(g, 1) == 1
    for r in range(r0, r1):
        xs = operand(xb, g, 0, r, n, xst)
        os = target(ob, g, 1, r, n, ost)
        m, s = row_stats(xs, n, accurate)
        write_forward(xs, os, 0, n, op, accurate, m, row_log(s), 1.0 / s, _row_head(os, n, stream))
        flush(ob, g, 1, r, n, ost)
    if stream:
        sfence()


@njit(cache=True, nogil=True, error_model="numpy")
def row_grad_sum(ds, ys, n, op):
    """float64 gradient sum of a whole row: chunk sums added in order."""
    wide_vectors()
    s = 0.0
    for c0 in range(0, n, CHUNK):
        s += chunk_grad_sum(ds, ys, c0, min(n - c0, CHUNK), op, n > CHUNK)
    return s


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _backward_pipelined(db, yb, ob, g, op, r0, r1, stream, far):
    """Fast-path backward of unit-stride rows ``[r0, r1)`` (any length):
    the gradient sum of row ``r`` (:func:`.segment.grad_sum_writing`)
    writes row ``r - 1``'s result as it goes, as :func:`_forward_pipelined`
    does for the forward; ``far``: ``n > CHUNK``, a constant of the
    caller's (:func:`.segment.grad_sum_writing`); ``stream``: by streaming
    stores (rows of :data:`STREAM_ROW_BYTES` or more, or starting on a
    line; short rows end to end as one span, :func:`_backward_span`). Row by row (or a
    batch of sums, then a batch of writes), the sums read two streams with
    one add per element and the writes compute an exponential per element
    from cache, and the backward took about the sum of the two. In-process
    A/B against those loops (AMD EPYC, LLVM znver4, 2 threads): 4096x32000
    bfloat16 1.16-1.24x, 1024x128256 float16 1.13-1.21x, 4096x1000 float32
    1.16-1.17x, 65536x64 float32 1.23x, 262144x16 bfloat16 1.10x; rows of
    3-8 1.01-1.02x, memory-bound float32 vocabulary rows 0.92-1.01x (paired,
    two runs: within the noise).
    Each row's sum and values are the row-by-row loop's, so the bits are
    the same; in place (``ob`` is ``db`` or ``yb``) each vector is read
    before its own line is written, and row ``r - 1`` is written while row
    ``r`` (other memory) is read. The line two rows share goes out whole,
    as in :func:`_forward_pipelined` (:func:`_write_joined_backward`)."""
    wide_vectors()
    n = g[2]
    if stream and n <= CHUNK and _span_rows(ob, g, n, 3):
        _backward_span(db, yb, ob, g, op, r0, r1)
        return
    joined = (stream and n * ob.itemsize >= STREAM_ROW_BYTES and dense_rows(g, 0, n)
              and dense_rows(g, 1, n) and dense_rows(g, 2, n))
    line = 64 // ob.itemsize
    i1, i2 = first_row(g, r0)
    dp = view(db, row_at(g, 0, i1, i2), n)
    yp = view(yb, row_at(g, 1, i1, i2), n)
    s = row_grad_sum(dp, yp, n, op)
    s_prev = 0.0
    for r in range(r0 + 1, r1):
        at = (row_at(g, 0, i1, i2), row_at(g, 1, i1, i2), row_at(g, 2, i1, i2))
        prev = view(ob, at[2], n)
        i1, i2 = next_row(g, i1, i2)
        ds = view(db, row_at(g, 0, i1, i2), n)
        ys = view(yb, row_at(g, 1, i1, i2), n)
        head = _row_head(prev, n, stream)
        ns32, s32 = np.float32(-s), np.float32(s)
        if joined and head > 0 and r - 1 > r0:
            _write_joined_backward(db, yb, ob, at, line - head, op, s_prev, s)
        else:
            write_backward(dp, yp, prev, 0, min(max(head, 0), n), op, False, s)  # before the first line
        cut = _joined_cut(n, head, line, joined)
        s_prev, s = s, 0.0  # chunk sums added in order, as row_grad_sum
        for c0 in range(0, n, CHUNK):
            s += grad_sum_writing(ds, ys, c0, min(n - c0, CHUNK), op, dp, yp, prev, ns32, s32, head, cut, far)
        dp, yp = ds, ys
    os = view(ob, row_at(g, 2, i1, i2), n)
    head = _row_head(os, n, stream)
    if joined and head > 0 and r1 - 1 > r0:
        at = (row_at(g, 0, i1, i2), row_at(g, 1, i1, i2), row_at(g, 2, i1, i2))
        _write_joined_backward(db, yb, ob, at, line - head, op, s_prev, s)
        write_backward(dp, yp, os, head, n - head, op, False, s, 0)
    else:
        write_backward(dp, yp, os, 0, n, op, False, s, head)
    if stream:
        sfence()


@njit(cache=True, nogil=True, error_model="numpy")
def _backward_span(db, yb, ob, g, op, r0, r1):
    """:func:`_backward_pipelined` of short rows ``[r0, r1)`` that lie end to
    end in all three operands, with the output as one span (as
    :func:`forward_short`'s): row ``r - 1`` is streamed while row ``r`` is
    summed, from the line boundary the row before left to the last one in
    the row; the lines two rows share go out blended (each lane with its
    own row's sum) when the later row is written; only the span's first
    and last partial lines take ordinary stores. Same values as row by row.
    In-process A/B against rows one by one (Intel Xeon, LLVM rocketlake),
    into a numpy out= (16 bytes past a line): 800000x64 float32 1.21x,
    400000x100 1.24x, 64x3x224x224 (axis 3) 1.30-1.43x, 64x64x112x112
    bfloat16 1.12-1.16x; into the pool's output (rows not whole lines):
    400000x100 1.25x, 64x64x112x112 bfloat16 1.20x, 2000000x24 1.10x.
    Not inlined into its caller: inlined, the row-by-row loops around it
    ran 0.88x on 4096x1000 float32."""
    wide_vectors()
    n = g[2]
    rows = r1 - r0
    total = rows * n
    i1, i2 = first_row(g, r0)
    ds_all = view(db, row_at(g, 0, i1, i2), total)
    ys_all = view(yb, row_at(g, 1, i1, i2), total)
    os_all = view(ob, row_at(g, 2, i1, i2), total)
    line = 64 // ob.itemsize
    k = stream_head(os_all, 0)
    s = 0.0  # as row_grad_sum, to the bit (0.0 + -0.0 is 0.0)
    s += chunk_grad_sum(ds_all, ys_all, 0, n, op)
    store_backward(ds_all, ys_all, os_all, 0, k, op, np.float32(-s), np.float32(s))
    s_before = s
    for r in range(1, rows + 1):
        # write row r - 1 (statistics s; the row before it: s_before) from k
        start = (r - 1) * n
        e = k + (r * n - k) // line * line
        ns32, s32 = np.float32(-s), np.float32(s)
        kb = k + max(start - k + line - 1, 0) // line * line
        nsb, sb = np.float32(-s_before), np.float32(s_before)
        while k < kb:  # lines holding the row before's end and this row's start
            f = lanes_below(start - k)
            g_ = backward_vec(vload(ds_all, k), vload(ys_all, k), op,
                              where(f, splat(nsb), splat(ns32)), where(f, splat(sb), splat(s32)),
                              os_all.itemsize == 2)
            vstore_nt(os_all, k, g_)
            k += W
        if r < rows:  # and sum row r meanwhile
            s_next = 0.0
            s_next += grad_sum_streaming(view(ds_all, r * n, n), view(ys_all, r * n, n), n, op,
                                         ds_all, ys_all, os_all, k, e, ns32, s32)
            s_before, s = s, s_next
        else:
            stream_backward(ds_all, ys_all, os_all, k, e, op, ns32, s32)
            store_backward(ds_all, ys_all, os_all, e, total, op, ns32, s32)
        k = e
    sfence()


@njit(forceinline=True, error_model="numpy")
def _span_rows(ob, g, n, operands):
    """Whether a short-row kernel writes its output as one span: it
    streams, and its rows (of at least a line) lie end to end in each of
    ``operands`` operands but are not whole lines on lines (those stream
    row by row)."""
    row_bytes = n * ob.itemsize
    if row_bytes < 64 or n < W:
        return False
    head = stream_head(view(ob, row_at(g, operands - 1, 0, 0), n), 0)
    if head < 0 or (head == 0 and row_bytes % 64 == 0):
        return False
    for o in range(operands):
        if not dense_rows(g, o, n):
            return False
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def backward_range(db, yb, ob, g, op, accurate, r0, r1):
    """Backward on rows ``[r0, r1)``; ``ob`` may be the memory of ``db`` or
    ``yb`` with the same geometry (in place, as :func:`forward_range`)."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    n = g[2]
    # unit-stride rows of up to a chunk take backward_short (the backend's
    # plan), so only longer ones pipeline here (far, a constant: one copy of
    # the loop, segment.grad_sum_writing; a copy for each case added 4 s to
    # this kernel's first compile, 12.4 -> 16.8 s for bfloat16 4x5000)
    if (not accurate and r1 - r0 > 1 and n > CHUNK
            and row_step(g, 0) == 1 and row_step(g, 1) == 1 and row_step(g, 2) == 1):
        _backward_pipelined(db, yb, ob, g, op, r0, r1, streams(ob, g), True)
        return
    dst_ = stage_for(db, n, row_step(g, 0) != 1)
    yst = stage_for(yb, n, row_step(g, 1) != 1)
    ost = stage_for(ob, n, row_step(g, 2) != 1)
    for r in range(r0, r1):
        ds = operand(db, g, 0, r, n, dst_)
        ys = operand(yb, g, 1, r, n, yst)
        os = target(ob, g, 2, r, n, ost)
        s = row_grad_sum(ds, ys, n, op)
        write_backward(ds, ys, os, 0, n, op, accurate, s)
        flush(ob, g, 2, r, n, ost)


#: rows per batch of the short-row forward
BATCH = 16
#: accurate rows of at least ``FETCH_ROW_N`` elements whose output has at
#: least ``FETCH_BYTES`` (more than a core's L2, less than :data:`.alloc.STREAM_BYTES`)
#: ask for the next batch's rows too (:func:`_prefetch_row`)
FETCH_ROW_N = 64
FETCH_BYTES = 1 << 22
#: ... and of the forward's for rows of up to :data:`SHORT_BATCH_N` elements:
#: more rows a batch give its vector of logs and its phases more to overlap.
#: One thread in cache, AMD EPYC (LLVM znver5), float32 rows of 32: 0.542
#: ns/element at 16 rows a batch, 0.479-0.491 at 64, 0.486 at 128. Longer
#: rows gained in cache too (64: 0.439 -> 0.410, 128: 0.405 -> 0.388) but
#: lost from memory (A/B, 2 threads: 32768x128 0.90-0.91x, 80000x100 0.90x,
#: 174762x48 at 42 rows a batch 0.93-0.94x, 131072x64 at 32 0.99x), where
#: 262144x32 gained 1.07-1.10x
BATCH_MAX = 64
SHORT_BATCH_N = 32
#: ... and of the rest of the forward's rows of up to
#: :data:`SHORT_BATCH_MAX_N` elements, except the rows that keep their
#: differences (:data:`KEEP_N`), whose batch stays within
#: :data:`KEPT_ELEMENTS`: a batch's phases (max trees,
#: sums, logs, writes) end in chains of latency that more rows a batch
#: overlap better. In-process A/B against 16 (AMD EPYC Zen 4, LLVM znver4,
#: 2 threads, numpy ``out=``, same bits; ``python
#: benchmarks/ab_inprocess.py --old <tree> --numpy-out --rounds 15``;
#: several runs): 64x3x224x224 axis 3 1.01-1.03x, 32x16x250x250 axis 3
#: 1.02-1.08x, 80000x100 1.06-1.09x, 131072x64 (kept) 1.03-1.04x, bfloat16
#: 16x16x128x128 axis 3 1.04-1.05x, bfloat16 64x64x112x112 axis 3 1.05x;
#: 174762x48 1.00x and 0.92x (paired 1.00 both), 16384x256 1.08x, then
#: 0.98x. 64 rows a batch lost it again (8x16x384x384 1.00x, 16384x256
#: 0.98x), and 32768x128 kept at 32 rows (32 KiB of differences, all of
#: L1) read 0.97x. Longer rows stay at :data:`BATCH` (32 KiB of float32 a
#: batch at most): 8x16x384x384 read 0.99-1.02x at 32 rows, 8192x512
#: 0.96x, and a batch of 32 rows of 4096 would be 512 KiB, half of L2,
#: with the next batch's fetched beside it.
SHORT_BATCH = 32
SHORT_BATCH_MAX_N = 256
#: accurate rows of up to ``KEEP_N`` elements keep their differences ``x -
#: m`` (float64, exact) from the sums to pass 2
#: (:func:`.segment.chunk_sum64_keeping`, :func:`.segment.forward_kept`):
#: pass 2 then subtracts ``log s`` from them, where it converted ``x`` to
#: float64 and subtracted ``m`` again. A batch's differences are
#: :data:`KEPT_ELEMENTS` float64 at most, 16 KiB, half of L1. In-process
#: A/B against the batch loop before (AMD EPYC Zen 4, LLVM znver4, 2
#: threads, same bits; ``python benchmarks/ab_inprocess.py --old <tree>
#: --numpy-out --rounds 15``):
#: 262144x32 float32 1.08-1.11x over two runs, allocating 1.09x;
#: 131072x64 1.08x twice, allocating 1.06x; 4096x32 (in cache) 1.11-1.12x;
#: 32768x128 (L3) 1.27-1.33x, allocating 1.13x (this machine's spread
#: there: identical code once read 1.19x). A first form, for the joined
#: spans only: 262144x32 1.08-1.11x, 131072x64 1.06-1.07x, 32768x128
#: 0.96-1.03x. Not for the spans whose lines blend two rows' statistics
#: (:func:`_write_span`: rows that are not 2, 4 or 8 whole vectors, into an
#: output off a line): kept there too, 174762x48 read 0.82-0.87x and
#: 80000x100 0.93-0.95x, and the loop compiled into the batch loop cost the
#: joined rows their gain (262144x32 0.90-0.93x against this form, the
#: span's loop not taken).
KEEP_N = 128
#: elements of a batch of rows that keep their differences (16 KiB of
#: float64): 64 rows of 32, 32 of 64, 16 of 128
KEPT_ELEMENTS = BATCH_MAX * SHORT_BATCH_N


@njit(cache=True, nogil=True, error_model="numpy")
def _batch_logs(s, lg, inv, nb, op):
    """``lg = log(s)`` (log_softmax) or ``inv = 1/s`` (softmax) for ``nb`` row
    sums, 8 per vector (lane-wise the same arithmetic as
    :func:`.segment.row_log`); the other is left as it was, unread."""
    wide_vectors()
    for i in range(0, nb, W // 2):
        v = vload_n(s, i, nb - i, 1.0)
        if op == _LSM:
            vstore_n(lg, i, log_f64(v), nb - i)
        else:
            vstore_n(inv, i, 1.0 / v, nb - i)


@njit(cache=True, nogil=True, error_model="numpy")
def _batch_logs_all(s, lg):
    """``lg = log(s)`` elementwise (the dask split plan's merged row sums)."""
    wide_vectors()
    n = s.shape[0]
    for i in range(0, n, W // 2):
        vstore_n(lg, i, log_f64(vload_n(s, i, n - i, 1.0)), n - i)


@njit(forceinline=True, error_model="numpy")
def _prefetch_row(buf, off, n):
    """Ask for the lines of ``buf[off:off + n]`` into L2 (``prefetcht1``: a
    batch of 16 rows of 4096 float32 is 256 KiB, more than L1). The
    batch kernels read a batch's rows from memory in their first phase and
    compute on them from cache after; the hardware prefetcher follows
    accesses, and the compute phases access nothing new, so without these
    the next batch's reads would only start when its first phase does
    (in-process A/B, Intel Xeon, LLVM rocketlake: 8x16x384x384 float32
    12-14% faster, 32x16x250x250 7-8%). For problems too big for a cache
    (those whose output :func:`streams`), and the accurate ones below: on
    cache-resident ones (16x16x128x128 bfloat16) the prefetches' own
    instructions cost 14%.

    Accurate rows of :data:`FETCH_ROW_N` or more elements ask too from an
    output of :data:`FETCH_BYTES` (4 MiB: each of 2 threads then has more
    than its 2 MiB of L2 to read and write), unstreamed: they read from L3,
    and r128 ran 15% slower from there than in cache (0.61 against 0.53 ns
    per element and thread). In-process A/B (Intel Xeon, LLVM rocketlake, 2
    threads, numpy ``out=``, same bits; ``python benchmarks/ab_inprocess.py
    --old <tree> --numpy-out --rounds 11``), two runs of a copy of this
    code behind a switch: 32768x128 float32 1.11-1.12x, 8192x128 (4 MiB)
    1.10-1.11x, 16384x256 1.08-1.14x, 40000x100 1.05-1.07x, 4096x1000
    1.00-1.02x, 65536x64 1.08-1.11x; this code as it stands, one run:
    32768x128 1.06x, 65536x64 1.05x. Rows of 48 were left out (100000x48 0.97-0.99x), as were rows of
    32 (65536x32 0.99x, the tenth session). The 16-bit fast path was left
    out too: bfloat16 16x16x128x128 went 1.00x. Claiming the next batch's
    output lines as well (``prefetchw``) lost on long rows (8192x512 0.94x,
    4096x1000 0.88x)."""
    for q in range(0, n, 64 // buf.itemsize):
        prefetch_l2(buf, off + q)


@njit(forceinline=True, error_model="numpy")
def _forward_vec_2rows(v, p, m0, b0, m1, b1, op, accurate):
    """:func:`.segment.forward_vec` of a vector whose lanes ``j < p`` end one
    row (statistics ``m0``, ``b0``) and whose others start the next (``m1``,
    ``b1``): the statistics are blended lane by lane, so each lane gets its
    own row's arithmetic at the cost of one vector (blending two results
    computed with each row's statistics cost two)."""
    lo, hi, f = lanes_below64(p), lanes_below64(p - W // 2), lanes_below(p)
    return forward_vec(
        v,
        where(lo, splat(m0), splat(m1)),
        where(hi, splat(m0), splat(m1)),
        where(lo, splat(b0), splat(b1)),
        where(hi, splat(b0), splat(b1)),
        where(f, splat(np.float32(m0)), splat(np.float32(m1))),
        where(f, splat(np.float32(b0)), splat(np.float32(b1))),
        op,
        accurate,
    )


@njit(forceinline=True, error_model="numpy")
def _second_stat(lg, inv, r, op):
    """Row ``r``'s ``log s`` (log_softmax) or ``1/s`` (softmax), read as a
    scalar: choosing the array instead (``lg if ... else inv``) takes a
    reference, whose atomic count update waits for every streaming store
    in flight: ~245 ns a batch (``python benchmarks/refcount_drain.py``,
    rows of 64: 0.42 ns/element with references, 0.18 without)."""
    return lg[r] if op == _LSM else inv[r]


@njit(forceinline=True, error_model="numpy")
def _write_span(xs, os, k, bstart, bend, n, op, accurate, m, lg, inv, final):
    """Pass 2 of a batch of rows ``[bstart, bend)`` of a span ``xs``/``os``
    (a task's rows, end to end in both), by streaming stores of whole
    64-byte lines, from the line boundary ``k`` that the batch before left
    unwritten to the last one in this batch; returns that one. Statistics:
    row ``i`` of the batch at ``m[1 + i]`` (and ``lg``, ``inv``), the row
    holding ``[k, bstart)`` (the batch before's last) at ``m[0]``. A line
    that holds one row's end and the next row's start is streamed too, as
    one vector of arithmetic with the two rows' statistics blended lane by
    lane (the same values as :func:`.segment.write_forward` row by row).
    Only the ``final`` batch writes its last partial line, by ordinary
    stores; the span's first partial line is the caller's.

    Why: an ordinary store into a line the cache does not hold reads the
    line from memory first, and the stores queued behind it wait (stores
    leave in order). Into a numpy ``out=`` (16 bytes past a line), one
    process, medians against a line-aligned output: 64x3x224x224 float32
    (rows of 896 B) spanned a batch at a time 3.90 ms against 3.45, a task
    at a time 3.68 against 3.40, and 3.47 against 3.44 once the loop no
    longer took references (:func:`_second_stat`); 64x64x112x112 NHWC
    (rows of 256 B, unstreamed row by row) 31.8 -> 28.7 -> 21.7 ms against
    21.8-23.4."""
    line = 64 // os.itemsize
    e = k + (bend - k) // line * line
    if k >= e:
        return k
    r = 0 if k < bstart else 1  # the statistics of the row holding k
    row_end = bstart if r == 0 else bstart + n
    mr, br = m[r], _second_stat(lg, inv, r, op)
    group = (xs, os)
    base = k  # (a line boundary: a pair of bfloat16 vectors fills a line from one)
    while k < e:
        # the row's whole vectors, in a loop of their own: against one loop
        # asking at every vector whether the row ends there, in-process A/B
        # (AMD EPYC, LLVM znver4, numpy out=, same bits) 8x16x384x384 axis 3
        # 1.00-1.03x, 64x3x224x224 1.03-1.06x, 400000x100 1.02-1.04x
        mr32, br32 = np.float32(mr), np.float32(br)
        stop = min(e, k + (row_end - k) // W * W)
        if k < stop and pairs_interleave(group) and (k - base) % (2 * W) != 0:
            vstore_nt(os, k, forward_vec(vload(xs, k), mr, mr, br, br, mr32, br32, op, accurate))
            k += W
        while k + 2 * W <= stop:
            v0, v1 = vload_pair(xs, k, group)
            vstore_pair_nt(os, k, forward_vec(v0, mr, mr, br, br, mr32, br32, op, accurate),
                           forward_vec(v1, mr, mr, br, br, mr32, br32, op, accurate), group)
            k += 2 * W
        if k < stop:
            vstore_nt(os, k, forward_vec(vload(xs, k), mr, mr, br, br, mr32, br32, op, accurate))
            k += W
        if k < e:  # this row's end and the next row's start
            r += 1
            m1, b1 = m[r], _second_stat(lg, inv, r, op)
            vstore_nt(os, k, _forward_vec_2rows(vload(xs, k), row_end - k, mr, br, m1, b1, op, accurate))
            mr, br = m1, b1
            row_end += n
            k += W
    if final:
        r = (bend - bstart) // n
        write_forward(xs, os, e, bend - e, op, accurate, m[r], lg[r], inv[r])
    return e


#: where the lines of :func:`_write_span_joined`'s outputs start: 12 float32
#: elements into the span, i.e. 16 bytes past a line, as numpy's arrays big
#: enough to stream are (glibc maps them, and its chunk header takes 16
#: bytes). Other offsets blend (:func:`_write_span`). A constant of the
#: compile (:func:`._vec.join_at`): this copy of the loop adds ~0.5 s to a
#: float32 call's first compile of forward_short (fresh cache, 16.2-16.4 ->
#: 16.7-16.8 s); copies for 32 and 48 bytes too added ~1.4 s.
_JOINED_HEAD = 12


@njit(forceinline=True, error_model="numpy")
def _write_span_joined(xs, os, bstart, bend, n, op, accurate, m, lg, inv, final, prev, d, kept):
    """:func:`_write_span` for rows of whole vectors (the copies of
    :func:`forward_short` for 2, 4 and 8 vectors) into a float32 output
    whose lines start :data:`_JOINED_HEAD` elements into the span: each
    vector is computed in its row's frame, with that row's statistics
    alone, and each line is the join of two such vectors
    (:func:`._vec.join_at`, one shuffle) instead of one vector with two
    rows' statistics blended lane by lane. The same values. ``prev``: the
    vector before the batch's first (none before the span's first); returns
    the batch's last, which the next batch's first line needs; the
    ``final`` batch writes the span's last partial line by ordinary stores.
    In place, each line is stored after both its vectors are read.
    ``kept``: the batch's differences ``x - m`` are in ``d``
    (:func:`.segment.forward_kept`).

    Rows of 32 float32 into a numpy ``out=`` (16 bytes past a line) ran
    3-5% behind the pool's output, which is on a line (``make bench``: the
    one problem where ``out=`` was slower than allocating). In-process A/B
    against the blends (Intel Xeon, LLVM rocketlake, 2 threads, numpy
    ``out=``, same bits): 262144x32 1.04-1.07x over four runs, 131072x64
    1.00-1.01x, 65536x128 1.00x. 262144x32 alone, 2 threads, medians of
    11: into an output 16 bytes past a line 2.95 ms, on a line 3.00,
    allocating 3.17 (before: 3.26, 3.07, 3.27). Rows of 3 or more vectors
    in the general copy gained nothing (174763x48 1.00-1.02x,
    64x3x224x224 axis 3 0.99x, 8x16x384x384 axis 3 1.00x), so they
    blend."""
    j = bstart // W  # the vector from element j W, in its row's frame
    for r in range(1, (bend - bstart) // n + 1):
        mr, br = m[r], _second_stat(lg, inv, r, op)
        mr32, br32 = np.float32(mr), np.float32(br)
        for _ in range(n // W):
            if kept:
                cur = forward_kept(d, j * W - bstart, br, br, op)
            else:
                cur = forward_vec(vload(xs, j * W), mr, mr, br, br, mr32, br32, op, accurate)
            if j > 0:  # the line from head + (j - 1) W: the end of one vector, the start of the next
                vstore_nt(os, _JOINED_HEAD + (j - 1) * W, join_at(prev, cur, _JOINED_HEAD))
            prev = cur
            j += 1
    if final:
        r = (bend - bstart) // n
        e = _JOINED_HEAD + (j - 1) * W
        write_forward(xs, os, e, bend - e, op, accurate, m[r], lg[r], inv[r])
    return prev


class ShortForm(enum.IntEnum):
    """Which kernel runs unit-stride rows of ``n <= CHUNK``
    (:func:`short_form`, :func:`short_backward_form`)."""

    #: :func:`.tiny.forward_tiny` / :func:`.tiny.backward_tiny`: a row per vector lane
    TINY = 0
    #: :func:`.tiny.forward_tiny_vector`: the same for rows of one whole vector
    TINY_VECTOR = 4
    #: :func:`forward_whole`: rows of 2, 4 or 8 whole vectors
    WHOLE = 1
    #: :func:`forward_short` / :func:`backward_short`: the general loops
    ROWS = 2
    #: :func:`backward_accurate`: float32 ``log_softmax`` rows of up to
    #: :data:`.segment.SHORT_BACKWARD`, the accurate path's copies
    ACCURATE = 3


@register_jitable
def short_form(n, accurate, nrows):
    """The :class:`ShortForm` of ``nrows`` unit-stride rows of ``n`` elements
    (``accurate``: float32 results, as the kernels take it), in the plan of
    a call (plain Python) and in the JAX handlers (inlined).

    Why a kernel per form, not one that branches on ``n``: numba compiles all
    of a kernel's branches, and a process's first call compiles the kernel
    (on a fresh install, no disk cache yet). With one kernel for all of
    them, a first call on 64x100 float32 took 36.5 s, now 14.8 s (rows of
    10 36.7 -> 14.6 s, of 16 34.3 -> 19.4 s, of 32 36.1 -> 17.1 s; ``python
    benchmarks/compile_time.py``, fresh cache, AMD EPYC Zen 3, one run
    each; docs/performance.md). A row per lane needs a batch of ``W`` rows to
    pay for itself (a 1x8 call: 3.1 against 2.1 us); rows of a call that
    reaches it split into tasks of fewer rows only past the serial
    threshold, and those tasks run its partial batches, with the same
    bits."""
    if n <= (tiny.FORWARD_MAX_ACCURATE if accurate else tiny.FORWARD_MAX) and nrows >= W:
        return ShortForm.TINY_VECTOR if n == W else ShortForm.TINY
    if n == 2 * W or n == 4 * W or n == 8 * W:
        return ShortForm.WHOLE
    return ShortForm.ROWS


def forward_short_kernel(n, accurate, nrows):
    """``(module, name)`` of the kernel of :func:`short_form`."""
    form = short_form(n, accurate, nrows)
    if form == ShortForm.TINY:
        return tiny, "forward_tiny"
    if form == ShortForm.TINY_VECTOR:
        return tiny, "forward_tiny_vector"
    return sys.modules[__name__], "forward_whole" if form == ShortForm.WHOLE else "forward_short"


@njit(cache=True, nogil=True, error_model="numpy")
def forward_short(xb, ob, g, op, accurate, r0, r1):
    """:func:`forward_range` for unit-stride rows of ``n <= CHUNK`` (but not
    those that :func:`pipelined` sends to :func:`forward_range`): the same
    arithmetic, run phase by phase over batches of :data:`BATCH` to
    :data:`BATCH_MAX` rows (all
    maxima, then all sums, then the logs as vectors, then all writes), so
    that the rows' dependency chains (max -> sum -> log -> write, ~300 cycles
    of latency) overlap instead of running one after another. A streamed
    output whose rows lie end to end (with the input's) is written as one
    span, a batch at a time (:func:`_write_span`). Rows of any ``n``; the
    plan sends some to :func:`forward_whole` and :func:`.tiny.forward_tiny`
    instead (:func:`short_form`)."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    _forward_short_rows(xb, ob, g, op, accurate, r0, r1, g[2], FALSE)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_whole(xb, ob, g, op, accurate, r0, r1):
    """:func:`forward_short` for rows of exactly 2, 4 or 8 vectors (``n``
    of 32, 64 or 128 elements); rows of any other ``n`` are not written
    (:func:`short_form` sends them elsewhere). Each length gets a copy of
    the batch loop compiled for it as a constant, whose per-row loops LLVM
    unrolls."""
    # In-process A/B, AMD EPYC (LLVM znver5), 2 threads, float32: 262144x32
    # 1.19-1.24x, 131072x64 1.13-1.15x, 32768x128 1.09x, bfloat16 65536x128
    # 1.18x; 80000x100 (the general copy) 0.96-0.98x, the harness's own
    # spread. One thread in cache, rows of 32: 0.600 -> 0.532-0.540
    # ns/element
    accurate = accurate and float32_result(ob)
    wide_vectors()
    n = g[2]
    if n == 2 * W:
        _forward_short_rows(xb, ob, g, op, accurate, r0, r1, 2 * W, TRUE)
    elif n == 4 * W:
        _forward_short_rows(xb, ob, g, op, accurate, r0, r1, 4 * W, TRUE)
    elif n == 8 * W:
        _forward_short_rows(xb, ob, g, op, accurate, r0, r1, 8 * W, TRUE)


@njit(forceinline=True, error_model="numpy")
def _batch_rows_for(n, kept):
    """Rows a batch of :func:`_forward_short_rows` for rows of ``n``
    elements (``kept``: they keep their differences), at most
    :data:`BATCH_MAX` (:data:`SHORT_BATCH`'s doc has the measurements)."""
    if n <= SHORT_BATCH_N:
        return BATCH_MAX
    if kept:
        return min(SHORT_BATCH, KEPT_ELEMENTS // n)
    return SHORT_BATCH if n <= SHORT_BATCH_MAX_N else BATCH


@njit(forceinline=True, error_model="numpy")
def _batch_max(lanes, mx, nb):
    """``mx[i]``: the max of row ``i < nb`` from its vector ``lanes[i W:(i +
    1) W]`` (:func:`.segment.chunk_max_lanes`), W rows a tree
    (:func:`._vec.reduce_max_rows`: the bits of ``chunk_max``). Lanes past
    ``nb`` reduce whatever the scratch holds, unread."""
    for q in range(0, nb, W):
        vstore(mx, q, reduce_max_rows(lanes, q * W))


@njit(forceinline=True, error_model="numpy")
def _batch_sums(lanes, lanes64, s, nb, accurate):
    """``s[i]``: the sum of row ``i < nb`` from its vector before the tree,
    float64 in ``lanes64`` (accurate) or float32 in ``lanes`` (widened
    exactly once summed): :func:`.segment.chunk_sum_at`'s bits, W / 2 or W
    rows a tree (:func:`._vec.reduce_add_rows`).

    Why trees of many rows: a row's two trees (max and sum), taken one row
    at a time, are ``log2 L`` extracts or shuffles and as many operations
    each; folded, a vector's worth of rows shares them (``L - 1`` folds of
    two shuffles and one operation). In-process A/B against the trees row
    by row (AMD EPYC Zen 4, LLVM znver4, 2 threads, numpy ``out=``, same
    bits): 262144x32 float32 1.05x, 32768x128 1.04x, 4096x32 (in cache)
    1.02x, 8192x224 1.00x, bfloat16 262144x32 1.01x. (A diagnostic forward
    without the trees, its results wrong, had promised 13% on rows of 32;
    its row sums kept all their exponentials in the generated code, and
    where the rest went is not known: docs/performance.md.)"""
    if accurate:
        for q in range(0, nb, W // 2):
            vstore(s, q, reduce_add_rows(lanes64, q * (W // 2)))
        return
    for q in range(0, nb, W):
        v = reduce_add_rows(lanes, q * W)
        vstore(s, q, lo_f64(v))
        vstore(s, q + W // 2, hi_f64(v))


@njit(forceinline=True, error_model="numpy")
def _batch_rows(g, i1, i2, nb, n, dense, xo, oo):
    """Where the ``nb`` rows from ``(i1, i2)`` start in operands 0 and 1
    (into ``xo``, ``oo``; ``dense``: both operands' rows end to end);
    returns the row after them.

    Worked out once a batch, for the three phases of
    :func:`_forward_short_rows`, which each stepped ``(i1, i2)`` through the
    geometry (:func:`.geometry.row_at`, :func:`.geometry.next_row`) row by
    row. A scratch copy of that loop with the rows' starts as ``p + i n``
    (dense rows) ran in cache (one thread, 4096x32 float32, medians of 11)
    in 0.572-0.605 ns per element against the library's 0.671-0.704. This
    form, in-process A/B against the stepping (``python
    benchmarks/ab_inprocess.py --old <tree> --numpy-out --rounds 11``, same
    bits; Intel Xeon, LLVM rocketlake): 262144x32 float32 1.05-1.07x,
    4096x32 (in cache) 1.07-1.10x, 200000x40 1.05-1.06x, 64x3x224x224
    axis 3 1.02-1.04x, 32768x128 0.99-1.06x, 8x16x384x384 axis 3 1.00x,
    bfloat16 16x16x128x128 1.00x. (Forms that kept the scratch's ``p + i
    n`` in the phases, or compiled each row length's copy as a function of
    its own, measured the same.)"""
    if dense:
        px, po = row_at(g, 0, i1, i2), row_at(g, 1, i1, i2)
        for i in range(nb):
            xo[i] = px + i * n
            oo[i] = po + i * n
        i1 += (i2 + nb) // g[1]  # (rows end to end: one division a batch)
        return i1, (i2 + nb) % g[1]
    for i in range(nb):
        xo[i] = row_at(g, 0, i1, i2)
        oo[i] = row_at(g, 1, i1, i2)
        i1, i2 = next_row(g, i1, i2)
    return i1, i2


@njit(forceinline=True, error_model="numpy")
def _forward_short_rows(xb, ob, g, op, accurate, r0, r1, n, whole):
    """:func:`forward_short`'s batch loop (``n``: a constant in the copies
    for whole vectors, ``whole`` True there and False in the general copy,
    a constant too)."""
    stream = streams(ob, g)
    # a task's rows as one span where rows one by one would leave lines to
    # ordinary stores: rows (of at least a line) that are not whole lines or
    # start off one. In-process A/B against rows one by one (Intel Xeon,
    # LLVM rocketlake), into a numpy out= (16 bytes past a line): 400000x64
    # float32 1.29x, 400000x100 1.32x, 32x16x250x250 1.06x, 64x3x224x224
    # 1.05x; into the pool's output: 400000x100 1.32x, 2000000x24 1.23x.
    # Rows of whole lines on lines stream the same lines either way and keep
    # the row loop.
    span = stream and _span_rows(ob, g, n, 2)
    # one allocation: m, s, log s, 1/s, max, slot 0 of each the previous
    # batch's last row (for the span's line shared with it); handed out as
    # views without an owner, since a reference taken or dropped is an
    # atomic update, which waits for every streaming store in flight
    B1 = BATCH_MAX + 1
    scratch = np.empty(4 * B1 + BATCH_MAX * W // 2)
    M, S, LG, INV = view(scratch, 0, B1), view(scratch, B1, B1), view(scratch, 2 * B1, B1), view(scratch, 3 * B1, B1)
    m, s, lg, inv = view(M, 1, BATCH_MAX), view(S, 1, BATCH_MAX), view(LG, 1, BATCH_MAX), view(INV, 1, BATCH_MAX)
    # each row's max and sum before their trees, a vector a row (float32,
    # and float64 for the accurate sums), and the maxima: the trees run W
    # (W / 2) rows at a time (_batch_max, _batch_sums)
    lanes64 = view(scratch, 4 * B1, BATCH_MAX * W // 2)
    lanes32 = np.empty(BATCH_MAX * (W + 1), np.float32)
    lanes, mx = view(lanes32, 0, BATCH_MAX * W), view(lanes32, BATCH_MAX * W, BATCH_MAX)
    # where each row of a batch starts in x and out, worked out once a batch
    # for the three phases (_batch_rows, whose doc has the measurements)
    dense = dense_rows(g, 0, n) and dense_rows(g, 1, n)
    # the next batch's rows asked for during this batch's sums (_prefetch_row)
    fetch = stream or (accurate and n >= FETCH_ROW_N and g[0] * g[1] * n * ob.itemsize >= FETCH_BYTES)
    offs = np.empty(2 * BATCH_MAX, np.int64)
    xo, oo = view(offs, 0, BATCH_MAX), view(offs, BATCH_MAX, BATCH_MAX)
    i1, i2 = first_row(g, r0)
    xs_all, os_all, k = view(xb, 0, 0), view(ob, 0, 0), 0
    if span:
        total = (r1 - r0) * n
        xs_all = view(xb, row_at(g, 0, i1, i2), total)
        os_all = view(ob, row_at(g, 1, i1, i2), total)
        k = stream_head(os_all, 0)
    # rows of whole vectors into a float32 output 16 bytes past a line: each
    # line joined from two vectors (_write_span_joined); only in the copies
    # for 2, 4 and 8 vectors (rows of 3 or more in the general copy gained
    # nothing: its doc)
    joined = whole and span and ob.itemsize == 4 and k == _JOINED_HEAD
    prev = splat(np.float32(0.0))
    # accurate rows of up to KEEP_N elements keep their exact differences
    # x - m from the sums for pass 2 (segment.chunk_sum64_keeping): a batch's
    # are 16 KiB at most, in L1 (KEEP_N's doc). Not for the spans that blend
    # two rows' statistics in a vector (_write_span)
    kept = accurate and n <= KEEP_N and (joined or not span)
    d = np.empty(KEPT_ELEMENTS + W if kept else 0)
    batch = _batch_rows_for(n, kept)
    for b0 in range(r0, r1, batch):
        nb = min(batch, r1 - b0)
        i1, i2 = _batch_rows(g, i1, i2, nb, n, dense, xo, oo)
        for i in range(nb):
            vstore(lanes, i * W, chunk_max_lanes(view(xb, xo[i], n), 0, n))
        _batch_max(lanes, mx, nb)
        p1, p2 = i1, i2  # the next batch's first row, fetched during the sums
        for i in range(nb):
            xs = view(xb, xo[i], n)
            if kept:
                vstore(lanes64, i * (W // 2), chunk_sum64_keeping(xs, n, mx[i], d, i * n))
            elif accurate:
                vstore(lanes64, i * (W // 2), chunk_sum64_lanes(xs, n, mx[i]))
            elif n > SUM_BLOCK:  # float64 lanes, their tree its own (segment._sum32)
                s[i] = chunk_sum32(xs, n, mx[i])
            else:
                vstore(lanes, i * W, chunk_sum32_lanes(xs, n, mx[i]))
            if fetch and b0 + nb + i < r1:
                if dense:
                    _prefetch_row(xb, xo[0] + (nb + i) * n, n)
                else:
                    _prefetch_row(xb, row_at(g, 0, p1, p2), n)
                    p1, p2 = next_row(g, p1, p2)
        if accurate or n <= SUM_BLOCK:
            _batch_sums(lanes, lanes64, s, nb, accurate)
        for i in range(nb):  # chunk_sum_at's (m, s), its rows of no max too
            m[i] = mx[i]
            if mx[i] == _NINF32:
                s[i] = empty_sum(view(xb, xo[i], n), 0, n)
        _batch_logs(s, lg, inv, nb, op)
        if span:
            bstart = (b0 - r0) * n
            if b0 == r0:  # the span's first partial line: ordinary stores
                write_forward(xs_all, os_all, 0, k, op, accurate, m[0], lg[0], inv[0])
            if joined:
                prev = _write_span_joined(xs_all, os_all, bstart, bstart + nb * n, n, op, accurate,
                                          M, LG, INV, b0 + nb >= r1, prev, d, kept)
                continue
            k = _write_span(xs_all, os_all, k, bstart, bstart + nb * n, n, op, accurate,
                            M, LG, INV, b0 + nb >= r1)
            M[0], LG[0], INV[0] = m[nb - 1], lg[nb - 1], inv[nb - 1]
            continue
        for i in range(nb):
            os = view(ob, oo[i], n)
            if kept:
                write_forward_kept(d, i * n, os, n, op, _second_stat(lg, inv, i, op), _row_head(os, n, stream))
            else:
                write_forward(view(xb, xo[i], n), os, 0, n, op, accurate, m[i], lg[i], inv[i],
                              _row_head(os, n, stream))
    keep(d)
    keep(offs)
    keep(lanes32)
    keep(scratch)  # alive until here: views are no use of it (_simd.keep)
    if stream:
        sfence()


@register_jitable
def short_backward_form(n, op, accurate, nrows, amd):
    """The :class:`ShortForm` of the backward of ``nrows`` unit-stride rows
    of ``n`` elements (``accurate``: float32 results; ``amd``: the CPU
    compiled for, :func:`.tiny.backward_max`), as :func:`short_form` for
    the forward: a first backward on 64x100 float32 took 26.8 s with one
    kernel for all three, now 11.5 s (rows of 16 27.1 -> 10.4 s, of 32
    25.0 -> 10.0 s; as there)."""
    if n <= tiny.backward_max(accurate, amd) and nrows >= W:
        return ShortForm.TINY
    if op == _LSM and accurate and n <= 3 * W:  # (the rows backward_accurate has copies for)
        return ShortForm.ACCURATE
    return ShortForm.ROWS


def backward_short_kernel(n, op, accurate, nrows):
    """``(module, name)`` of the kernel of :func:`short_backward_form`."""
    form = short_backward_form(n, op, accurate, nrows, alloc.compiles_for_amd())
    if form == ShortForm.TINY:
        return tiny, "backward_tiny"
    return sys.modules[__name__], "backward_accurate" if form == ShortForm.ACCURATE else "backward_short"


@njit(cache=True, nogil=True, error_model="numpy")
def backward_short(db, yb, ob, g, op, accurate, r0, r1):
    """:func:`backward_range` for unit-stride rows of ``n <= CHUNK``: the
    fast path pipelined (:func:`_backward_pipelined`), the accurate one a
    row at a time, its sum and then its writes (:func:`_backward_short_rows`).
    Rows of any ``n``; the plan sends some to :func:`backward_accurate`
    and :func:`.tiny.backward_tiny` instead (:func:`short_backward_form`)."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    if not accurate and r1 - r0 > 1:
        _backward_pipelined(db, yb, ob, g, op, r0, r1, streams(ob, g), False)
    else:
        _backward_short_rows(db, yb, ob, g, op, accurate, r0, r1, g[2], 0)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_accurate(db, yb, ob, g, op, accurate, r0, r1):
    """:func:`backward_short` for the accurate path of ``log_softmax``
    (``op`` and ``accurate`` as :func:`short_backward_form` takes them):
    rows of up to ``3 W`` (:data:`.segment.SHORT_BACKWARD`) elements, with
    copies of the row loop compiled for ``n`` or its vector count as
    constants; longer rows, other ops and 16-bit results are not written."""
    if not (op == _LSM and accurate and float32_result(ob)):
        return  # (for 16-bit results a constant: nothing compiled)
    wide_vectors()
    n = g[2]
    # float32 log_softmax rows of one or two whole vectors (the accurate
    # path: rows of up to SHORT_BACKWARD) get copies of the row loop
    # compiled for n, the op and the path as constants, as forward_whole's
    # for the forward. In-process A/B (AMD EPYC, LLVM znver4, 2 threads,
    # numpy out=, same bits): 524288x16 1.38-1.53x, 262144x32 1.29-1.50x;
    # 349525x24 (the general copy) 1.00-1.03x. With n alone a constant, rows
    # of 16 gained 0.89-0.94x of that.
    # rows of 17-31 and 33-36 that lie end to end: pass 2 as
    # one run of whole vectors (_backward_flat_rows, whose doc has the A/B)
    flat = (W < n <= 2 * W + W // 4 and n != 2 * W
            and dense_rows(g, 0, n) and dense_rows(g, 1, n) and dense_rows(g, 2, n))
    if flat and n < 2 * W:
        _backward_flat_rows(db, yb, ob, g, _LSM, r0, r1, n, 2)
    elif flat:
        _backward_flat_rows(db, yb, ob, g, _LSM, r0, r1, n, 3)
    elif n == W:
        _backward_short_rows(db, yb, ob, g, _LSM, True, r0, r1, W, 0, True)  # asks ahead
    elif n == 2 * W:
        _backward_short_rows(db, yb, ob, g, _LSM, True, r0, r1, 2 * W, 0)
    # rows with a partial last vector: copies for the vector count (n stays
    # a variable, the per-row loops unrolled: segment.grad_sum_vectors).
    # In-process A/B, same machine and harness: rows of 14 1.57x, 20
    # 1.39-1.45x, 24 1.35-1.38x, 30 1.35-1.40x, 40 1.28-1.33x
    elif n < W:
        _backward_short_rows(db, yb, ob, g, _LSM, True, r0, r1, n, 1)
    elif n < 2 * W:
        _backward_short_rows(db, yb, ob, g, _LSM, True, r0, r1, n, 2)
    elif n <= 3 * W:  # (48: SHORT_BACKWARD)
        _backward_short_rows(db, yb, ob, g, _LSM, True, r0, r1, n, 3)


@njit(forceinline=True, error_model="numpy")
def _flat_step(dsb, ysb, osb, k, c, b, op, sp, sc):
    """Accurate pass 2 (:func:`.segment.backward_vec64`) of the ``c <= W``
    elements from ``k``: lanes below ``b`` with the row sum ``sp``, the
    rest with ``sc``."""
    s0 = splat(sp)
    s1 = splat(sc)
    lo = where(lanes_below64(b), s0, s1)
    hi = where(lanes_below64(b - W // 2), s0, s1)
    d = vload_n(dsb, k, c, np.float32(0.0))
    y = vload_n(ysb, k, c, np.float32(0.0))
    vstore_n(osb, k, backward_vec64(d, y, op, lo, hi), c)


@njit(forceinline=True, error_model="numpy")
def _backward_flat_rows(db, yb, ob, g, op, r0, r1, n, nv):
    """The accurate backward of rows ``[r0, r1)`` of ``W < n <= nv W``
    elements whose three operands lie end to end (``nv`` a constant): each
    row's sum (:func:`.segment.grad_sum_vectors`, the row kernels' own),
    then pass 2 of the whole vectors that row completes, over the rows as
    one run; a vector that straddles two rows takes each lane's sum from its
    own row (:func:`_flat_step`), so each element is computed as the row
    loop computes it: the same bits. Pass 2 lags the sums by under ``W``
    elements, and each row asks for its lines :data:`BACKWARD_AHEAD`
    elements ahead into L2.

    Row by row (:func:`_backward_short_rows`), a row of 17-31 elements took
    two vectors, the second partly masked off, each with its own ``exp`` in
    float64 and a masked store across lines. In-process A/B against that
    (Intel Xeon, LLVM rocketlake, 2 threads, numpy ``out=``, same bits,
    2**23 elements; ``python benchmarks/ab_inprocess.py --old <tree>
    --numpy-out``), old / new: rows of 17 1.66-1.82x, 20 1.55-1.61x, 24
    1.35-1.45x, 28 1.20-1.22, 31 1.18-1.24, 33 1.07-1.19, 36 1.05-1.09;
    in cache (2000x24, 3000x33) 1.11-1.15x, 40000x24 1.25x. Without the
    prefetches: 17 1.14-1.20, 20 1.26-1.31, 24 1.06-1.15, 33 1.15-1.22;
    aligning the stores to the output's lines changed nothing. Not taken
    (:func:`backward_short`): rows of 37-47 (40: 0.97-1.04, 44: 0.96-0.98,
    47: 0.89-0.95; their third vector is mostly full) and rows of whole
    vectors (32: 0.99-1.07, 48: 0.89-0.92, the same vector count either
    way; 16, against the row loop that asks ahead too: 0.87-0.96). On an
    AMD EPYC Zen 4 (LLVM znver4), where it had been left off until
    measured, the same A/B against the row loop: 400000x20 1.30-1.31x,
    349525x24 1.13-1.15x, 200000x36 1.02-1.06x."""
    i1, i2 = first_row(g, r0)
    total = (r1 - r0) * n
    dsb = view(db, row_at(g, 0, i1, i2), total)
    ysb = view(yb, row_at(g, 1, i1, i2), total)
    osb = view(ob, row_at(g, 2, i1, i2), total)
    k = 0  # pass 2 has written [0, k)
    sp = 0.0  # the sum of the row before
    start = 0
    for _ in range(r0, r1):
        for q in range(0, n, W):  # (a line of float32)
            prefetch_l2(dsb, start + BACKWARD_AHEAD + q)
            prefetch_l2(ysb, start + BACKWARD_AHEAD + q)
        sc = grad_sum_vectors(view(dsb, start, n), view(ysb, start, n), n, op, nv)
        end = start + n
        while k + W <= end:  # (n >= W: a vector from k holds two rows at most)
            _flat_step(dsb, ysb, osb, k, W, start - k, op, sp, sc)
            k += W
        sp = sc
        start = end
    if k < total:
        _flat_step(dsb, ysb, osb, k, total - k, W, op, sp, sp)


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _backward_short_rows(db, yb, ob, g, op, accurate, r0, r1, n, nv, ask_ahead=False):
    """:func:`backward_short`'s row loop (constants in the copies; their NaN
    rows keep every kernel's bits through :func:`._vec.negate` in
    :func:`.segment.backward_vec64`). ``nv > 0``: rows of ``nv`` vectors,
    the last one partial (``n`` a variable, ``nv`` a constant), through
    :func:`.segment.grad_sum_vectors` and
    :func:`.segment.write_backward_vectors`; 0: any ``n``.

    ``ask_ahead`` (a constant; rows of one line, ``n = W``): rows whose
    inputs lie end to end ask for their lines :data:`BACKWARD_AHEAD`
    elements ahead, into L2. Rows of 16 float32 ran ~1.5x slower from
    memory than rows of 32 (the same bytes, the same arithmetic per element
    in cache), and the hardware's prefetchers did not close the gap.
    In-process A/B (Intel Xeon, LLVM rocketlake, 2 threads, numpy ``out=``,
    same bits), 524288x16 float32: 1.31-1.50x with 512 elements ahead (six
    runs), 1.26-1.39x from 256 to 4096 ahead, 0.88-1.01 at 1 or 16 (the
    row itself, the next one); 262144x16 1.14x, 65536x16 1.04x, 8192x16 (in
    L2) 0.99x. With the same prefetches, rows of 32, 40 and 48 read
    0.86-1.11 (no gain beyond the noise), so they do not ask (rows of 17-36 ask in
    :func:`_backward_flat_rows`). On an AMD EPYC Zen 4 (LLVM znver4),
    where it had been left off until measured: 524288x16 1.17-1.20x (the
    same A/B).

    A row's sum and then its writes, row after row: the out-of-order core
    overlaps one row's short sum with the last row's exp-bound writes by
    itself. It was a batch of :data:`BATCH` sums, then their writes (as
    :func:`forward_short`, whose chain max -> sum -> log -> write is long);
    in-process A/B against that (AMD EPYC, LLVM znver4, 2 threads, numpy
    ``out=``, same bits): 524288x16 1.04x, 262144x32 1.18x, 599186x14
    1.14-1.18x, 349525x24 1.08x, 209715x40 1.14-1.19x, 174762x48
    1.02-1.08x."""
    ahead = ask_ahead and dense_rows(g, 0, n) and dense_rows(g, 1, n)
    i1, i2 = first_row(g, r0)
    for _ in range(r0, r1):
        ds = view(db, row_at(g, 0, i1, i2), n)
        ys = view(yb, row_at(g, 1, i1, i2), n)
        os = view(ob, row_at(g, 2, i1, i2), n)
        if ahead:
            prefetch_l2(db, row_at(g, 0, i1, i2) + BACKWARD_AHEAD)
            prefetch_l2(yb, row_at(g, 1, i1, i2) + BACKWARD_AHEAD)
        if nv > 0:
            write_backward_vectors(ds, ys, os, n, op, grad_sum_vectors(ds, ys, n, op, nv), nv)
        else:
            write_backward(ds, ys, os, 0, n, op, accurate, chunk_grad_sum(ds, ys, 0, n, op))
        i1, i2 = next_row(g, i1, i2)


@njit(forceinline=True, error_model="numpy")
def lse_value(m, s, nan_in_row):
    """float64 logsumexp from row stats: ``m + log(s)``; a row holding
    ``+inf`` is ``+inf`` (NaN if it also holds a NaN), all ``-inf`` is
    ``-inf`` (``log(0)``)."""
    if m == np.inf:
        return np.nan if nan_in_row else np.inf
    return m + row_log(s)


@njit(cache=True, nogil=True, error_model="numpy")
def _row_has_nan(xs, n):
    for k in range(n):
        v = lane(vload_part(xs, k, 1, np.float32(0.0)), 0)
        if v != v:
            return True
    return False


@njit(cache=True, nogil=True, error_model="numpy")
def logsumexp_range(xb, rb, g, r0, r1):
    """float64 logsumexp of rows ``[r0, r1)`` into ``rb`` (operand 1 of ``g``,
    one element per row), from the accurate stats (float64 terms: the
    float32 result is rounded once from a ~2**-34 accurate value)."""
    wide_vectors()
    n = g[2]
    xst = stage_for(xb, n, row_step(g, 0) != 1)
    for r in range(r0, r1):
        xs = operand(xb, g, 0, r, n, xst)
        m, s = row_stats(xs, n, TRUE)
        rb[row_offset(g, 1, r)] = lse_value(m, s, m == np.inf and _row_has_nan(xs, n))


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def logsumexp_parallel(xb, rb, g, ntask):
    """:func:`logsumexp_range` over all rows, ``ntask`` ranges in parallel."""
    rows = g[0] * g[1]
    for t in prange(ntask):
        logsumexp_range(xb, rb, g, t * rows // ntask, (t + 1) * rows // ntask)
