"""The arithmetic of one contiguous row segment: the definition every kernel follows.

A row of ``n`` elements is cut into chunks of :data:`CHUNK` elements. For
each chunk (:func:`chunk_stats`):

* ``m_c`` -- its exact max;
* ``s_c = sum(exp(x - m_c))`` -- element ``k`` of the chunk goes to *lane*
  ``k % 64`` (float32 terms, :func:`._math.exp_f32`) or ``k % 16``
  (float64 terms of the exact float64 difference, :func:`._math.exp_f64`,
  the *accurate* path; the fast path's float32 terms are
  :func:`._math.exp_f32_sum`); each lane is a running sum in element order, and
  the lanes are added by a fixed pairwise tree (lane ``l`` + lane
  ``l + 32``, then ``+ 16``, ``8``, ``4``, ``2``, ``1``). That is 64
  independent float32 accumulators over at most 64 terms each (API.md's
  accuracy rule asks for at least 64, or pairwise blocks of <= 4096).
  A fast-path chunk of more than :data:`SUM_BLOCK` (256) terms sums each
  block of 256 that way (lanes from 0) down to 16 lanes (``+ 32``, ``+
  16``), widens them and adds them, block after block, into 16 float64
  lanes, whose tree (``+ 8``, ``4``, ``2``, ``1``) is float64: no float32
  lane adds more than 4 terms. The lane holding a row's largest term
  (exactly 1) had rounded each of its other 63 terms at ``ulp(1)``, and
  float32 rows of 1025-65536 lost to PyTorch's error (``python
  benchmarks/accuracy_vs_torch.py --long``, 160 problems an op):
  log_softmax on 12, by up to 1.50 eps, softmax on 16, by up to 1.00;
  with the blocks, log_softmax on 1, by 0.001 eps (a half-way case of the
  result's rounding), softmax on none. Blocks of 512 lost softmax 2. Cost,
  in-process A/B (AMD EPYC Zen 3): 0.93-0.98x (float32 and 16-bit rows of
  2048-128256, float16 columns of 384);

then chunks merge in order in float64 (:func:`merge`, the online softmax):
``(m, s) <- (M, s e**(m - M) + s_c e**(m_c - M))``, ``M = max(m, m_c)``.
Pass 2 (:func:`write_forward`) writes ``y = (x - m) - log(s)`` or
``e**(x - m) / s``. The backward sums ``diff_dst`` (or ``diff_dst * dst``)
per chunk in float64 over 32 lanes (exact products; lane ``k % 32``, the
same pairwise tree), adds the chunk sums in order, and writes ``diff_dst - e**dst * S`` (or ``dst * (diff_dst - S)``).

Because the order of every addition is fixed by the element's index in its
row, any kernel that follows this definition -- a row at a time
(:mod:`.rows`), across a tile of columns (:mod:`.columns`), or a long row's
chunks spread over threads (:mod:`.split`) -- produces the same bits, for
any strides, thread count or in-place mode. A lane is a running sum, not a
register lane: a kernel may hold it elsewhere as it sums (bfloat16 rows
take their terms by pairs, even and odd elements, :func:`_sum32_pairs`,
:func:`_grad_step`'s pairs) and put the lanes back in order
(:func:`._vec.unpair`) before the tail and the tree.

Two precisions (``accurate``), chosen per call by the backend:

* *fast*: float32 terms and float32 pass-2 arithmetic. Used for 16-bit
  results (rounded once from the float32 value) and for float32 rows longer
  than :data:`SHORT` (there the float32 sum is already several times more
  accurate than PyTorch's: 1.0-1.3 eps vs 15 at n = 4096-32000).
* *accurate*: float64 terms, float64 pass 2, one rounding to float32.
  Used for float32 results of rows up to :data:`SHORT` elements
  (:data:`SHORT_BACKWARD` for the backward), where a float32 ``exp`` (1 ulp
  per term) left log_softmax at 0.69-0.73 eps and the float32 backward at
  2.7-3.0 eps (PyTorch: 1.1-3.9); here 0.50-0.52 and <= 0.8.

Special values fall out of the arithmetic: a NaN or ``+inf`` makes its
chunk's sum NaN (``inf - inf``); ``-inf`` elements contribute 0; a chunk of
only ``-inf`` contributes ``s_c = 0`` (NaN if it also holds a NaN: the max
may have skipped it, so such chunks are rescanned); an all ``-inf`` row ends
with ``m = -inf, s = 0`` and pass 2 gives ``-inf - -inf = NaN``.

Buffers are flat 1-D storage arrays (float32, or uint16/int16 holding
bfloat16/float16, see :mod:`._vec`); ``c0``/``cl`` give the segment.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import Op
from ._math import exp_f32, exp_f32_for, exp_f32_sum, exp_f64, exp_f64_any, log_f64
from ._simd import wide_vectors
from ._vec import (
    W,
    address,
    hi_f64,
    join_f32,
    lane,
    lanes_below,
    lo_f64,
    negate,
    on_amd,
    pairs_interleave,
    prefetch,
    prefetch_ahead,
    prefetch_l2,
    prefetch_w,
    reduce_add,
    reduce_max,
    splat,
    unpair,
    vfma,
    vload,
    vload_n,
    vload_pair,
    vload_part,
    vstore,
    vstore_n,
    vstore_nt,
    vstore_pair,
    vstore_pair_nt,
    where,
)

__all__ = [
    "CHUNK",
    "SHORT",
    "SHORT_BACKWARD",
    "LANES32",
    "SUM_BLOCK",
    "LANES64",
    "GRAD_LANES",
    "chunk_max",
    "chunk_max_lanes",
    "chunk_sum64_lanes",
    "chunk_sum64_keeping",
    "chunk_sum32",
    "chunk_sum32_lanes",
    "empty_sum",
    "chunk_stats",
    "sum32_writing",
    "stream_head",
    "stream_end",
    "stream_forward",
    "forward_vec",
    "merge",
    "row_log",
    "write_forward",
    "forward_kept",
    "write_forward_kept",
    "chunk_grad_sum",
    "grad_add",
    "grad_sum_vectors",
    "write_backward_vectors",
    "grad_sum_writing",
    "grad_sum_streaming",
    "store_backward",
    "stream_backward",
    "backward_vec",
    "backward_vec64",
    "write_backward",
]

#: elements per chunk: 16 KiB of float32, read twice while it sits in L1
CHUNK = 4096
#: float32 results of rows up to this length take the accurate path (forward)
SHORT = 1024
#: ... and of the backward. Its fast path (float32 ``exp``, one FMA) is
#: already 2.0-3.0 eps where PyTorch is 3.8-17.8 (n = 3-250, float32, max
#: over 6 seeds x 200k elements: ``python benchmarks/accuracy_cpu.py``)
#: while the float64 ``exp(dst)`` of the accurate path costs ~2.5x; the
#: suite holds rows of 4-40 elements to 1 eps (the accurate path: 0.50), so
#: rows up to 48 keep it. NCHW channel counts of 64 and more run fast.
SHORT_BACKWARD = 48
#: float32 term lanes per chunk (4 vectors of W)
LANES32 = 4 * W
#: fast-path terms a float32 lane block takes before its float64 lanes (module doc)
SUM_BLOCK = 4 * LANES32
#: float64 term lanes per chunk (2 vectors of W // 2)
LANES64 = W
#: float64 lanes of the backward's gradient sums (4 vectors of W // 2)
GRAD_LANES = 2 * W

_NINF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
#: float32 elements per 64-byte cache line (a 16-bit buffer prefetches each
#: line twice: harmless)
_LINE = 16
#: streaming stores start at this byte alignment: a whole cache line per
#: float32 vector, two 16-bit vectors per line (each vector is aligned to
#: its own size, as ``vmovntps``/``vmovntdq`` require)
_STREAM_ALIGN = 64
_LSM = Op.LOG_SOFTMAX


@njit(forceinline=True, error_model="numpy")
def vmax_x86(a, b):
    """``a if a > b else b``: one ``vmaxps``. A NaN operand may or may not
    survive; every max here is followed by a sum that a NaN turns to NaN."""
    return where(a > b, a, b)


@njit(forceinline=True, error_model="numpy")
def chunk_max(xs, c0, cl):
    """Exact max of ``xs[c0:c0 + cl]`` (float32; NaN: see :func:`vmax_x86`)."""
    return reduce_max(chunk_max_lanes(xs, c0, cl))


@njit(forceinline=True, error_model="numpy")
def chunk_max_lanes(xs, c0, cl):
    """:func:`chunk_max` before its tree: the vector whose
    :func:`._vec.reduce_max` it is (for :func:`._vec.reduce_max_rows`)."""
    wide_vectors()
    m = splat(_NINF)
    return _max_rest(xs, c0, 0, cl, m, m, m, m)


@njit(forceinline=True, error_model="numpy")
def _max_rest(xs, c0, k, cl, m0, m1, m2, m3):
    """:func:`chunk_max` from its ``k``-th element on (``k`` a whole number
    of 4-vector steps; accumulators given): the 4-vector steps, then the
    tail into ``m0``."""
    while k + 4 * W <= cl:
        v0, v1 = vload_pair(xs, c0 + k, (xs,))  # (a max takes its elements in any order)
        v2, v3 = vload_pair(xs, c0 + k + 2 * W, (xs,))
        m0 = vmax_x86(m0, v0)
        m1 = vmax_x86(m1, v1)
        m2 = vmax_x86(m2, v2)
        m3 = vmax_x86(m3, v3)
        k += 4 * W
    while k < cl:
        m0 = vmax_x86(m0, vload_n(xs, c0 + k, cl - k, _NINF))
        k += W
    return vmax_x86(vmax_x86(m0, m1), vmax_x86(m2, m3))


@njit(forceinline=True, error_model="numpy")
def _sum32(xs, c0, cl, m):
    """``sum(exp(x - m))`` over 64 float32 lanes + the tree (module doc),
    terms by :func:`._math.exp_f32_sum`; float64 lanes past
    :data:`SUM_BLOCK` terms."""
    wide_vectors()
    z = splat(_ZERO)
    return _sum32_rest(xs, c0, 0, cl, m, z, z, z, z, splat(0.0), splat(0.0))


@njit(forceinline=True, error_model="numpy")
def _sum32_lanes(xs, c0, cl, m):
    """:func:`_sum32` of a chunk of at most :data:`SUM_BLOCK` terms before
    its tree: the vector of 16 float32 lanes whose :func:`._vec.reduce_add`
    it is."""
    wide_vectors()
    a0 = splat(_ZERO)
    a1 = a0
    a2 = a0
    a3 = a0
    k = 0
    while k + 4 * W <= cl:
        a0, a1, a2, a3 = _sum32_step(xs, c0, k, m, a0, a1, a2, a3)
        k += 4 * W
    a0, a1 = unpair(a0, a1, (xs,))
    a2, a3 = unpair(a2, a3, (xs,))
    return _sum32_finish(xs, c0 + k, cl - k, m, a0, a1, a2, a3)


@njit(forceinline=True, error_model="numpy")
def _sum32_step(xs, c0, k, m, a0, a1, a2, a3):
    """One 4-vector step (terms ``k`` to ``k + 4W`` of the chunk at ``c0``,
    pair order) into the four accumulators; the next chunk asked for."""
    for q in range(0, 4 * W, _LINE):
        prefetch_ahead(xs, c0 + CHUNK + k + q)  # on its way in while this one computes
    v0, v1, v2, v3 = _sum32_pairs(xs, c0 + k)
    return (a0 + exp_f32_sum(v0 - m), a1 + exp_f32_sum(v1 - m),
            a2 + exp_f32_sum(v2 - m), a3 + exp_f32_sum(v3 - m))


@njit(forceinline=True, error_model="numpy")
def _widen_block(a0, a1, a2, a3, h0, h1, group):
    """A block's four float32 accumulators (pair order) folded to 16 lanes
    (``+ 32``, ``+ 16``) and added into the float64 lanes ``h0`` (0-7),
    ``h1`` (8-15)."""
    a0, a1 = unpair(a0, a1, group)
    a2, a3 = unpair(a2, a3, group)
    v = (a0 + a2) + (a1 + a3)
    return h0 + lo_f64(v), h1 + hi_f64(v)


@njit(forceinline=True, error_model="numpy")
def _sum32_rest(xs, c0, k, cl, m, a0, a1, a2, a3, h0, h1):
    """:func:`_sum32` from its ``k``-th term on (``k`` a whole number of
    4-vector steps; the float32 accumulators of ``k``'s block, in the order
    of :func:`_sum32_pairs`, and the float64 lanes of the blocks before it
    given). A chunk of at most :data:`SUM_BLOCK` terms is one block, which
    keeps its float32 tree."""
    blocks = cl > SUM_BLOCK
    z = splat(_ZERO)
    while k + 4 * W <= cl:
        a0, a1, a2, a3 = _sum32_step(xs, c0, k, m, a0, a1, a2, a3)
        k += 4 * W
        if blocks and k % SUM_BLOCK == 0:
            h0, h1 = _widen_block(a0, a1, a2, a3, h0, h1, (xs,))
            a0 = z
            a1 = z
            a2 = z
            a3 = z
    a0, a1 = unpair(a0, a1, (xs,))
    a2, a3 = unpair(a2, a3, (xs,))
    v = _sum32_finish(xs, c0 + k, cl - k, m, a0, a1, a2, a3)
    if not blocks:
        return np.float64(reduce_add(v))
    return reduce_add((h0 + lo_f64(v)) + (h1 + hi_f64(v)))


@njit(forceinline=True, error_model="numpy")
def _sum32_pairs(xs, i):
    """The 4-vector step's elements ``xs[i:i + 4W]`` for the four
    accumulators of :func:`_sum32` by two :func:`._vec.vload_pair`: for
    bfloat16 the even and odd elements of each half, one integer operation
    per 16 where :func:`._vec.vload` takes two; float32 and float16 in
    element order. The sum keeps its lanes in that order until
    :func:`._vec.unpair` puts them back, before the tail and the tree: the
    same bits. In-process A/B against :func:`._vec.vload` (AMD EPYC Zen 4,
    LLVM znver4, numpy ``out=``, same bits): bfloat16 forward 4096x32000
    1.02x, 256x128256 1.03x, 2048x4096 1.01-1.03x (the sums are bound by
    their exponentials)."""
    v0, v1 = vload_pair(xs, i, (xs,))
    v2, v3 = vload_pair(xs, i + 2 * W, (xs,))
    return v0, v1, v2, v3


@njit(forceinline=True, error_model="numpy")
def _sum32_finish(xs, k, r, m, a0, a1, a2, a3):
    """The last ``r < 4 * W`` terms (from ``xs[k]``) into the four
    accumulators, then the fixed tree: masked-off lanes add exactly 0."""
    if r > 0:
        a0 = a0 + _tail_terms(xs, k, r, m)
    if r > W:
        a1 = a1 + _tail_terms(xs, k + W, r - W, m)
    if r > 2 * W:
        a2 = a2 + _tail_terms(xs, k + 2 * W, r - 2 * W, m)
    if r > 3 * W:
        a3 = a3 + _tail_terms(xs, k + 3 * W, r - 3 * W, m)
    return (a0 + a2) + (a1 + a3)


@njit(forceinline=True, error_model="numpy")
def stream_head(os, c0):
    """Elements from ``os[c0]`` to the next 64-byte boundary, where
    :func:`sum32_writing` can start streaming stores; -1 if ``os``'s
    elements are not aligned to their own size (then it stores normally)."""
    a = address(os, c0)
    size = os.itemsize
    if a % size != 0:
        return -1
    return ((-a) % _STREAM_ALIGN) // size


@njit(forceinline=True, error_model="numpy")
def stream_end(os, k, end):
    """Where a run of streaming stores from the line boundary ``os[k]`` must
    stop before ``end``: at the last whole 64-byte line. A 16-bit vector is
    half a line, and a streamed half line leaves a partial write-combining
    buffer, which goes to memory as a partial-line write: bfloat16 rows of
    112 (224 bytes; every other row starts on a line and streamed its last
    half line), 64x64x112x112, allocating: 96-101 ms, with whole lines only
    33-37 ms (Intel Xeon, LLVM rocketlake, back-to-back runs)."""
    line = _STREAM_ALIGN // os.itemsize
    return k + (end - k) // line * line


@njit(forceinline=True, error_model="numpy")
def _store_range(os, ps, a, b, mp, lp):
    """``os[a:b] = (ps - mp) - lp`` with ordinary (masked) stores."""
    while a < b:
        vstore_n(os, a, (vload_n(ps, a, b - a, _ZERO) - mp) - lp, b - a)
        a += W


@njit(forceinline=True, error_model="numpy")
def sum32_writing(xs, c0, cl, m, ps, os, mp, lp, head, n, fold=False):
    """:func:`_sum32` of ``xs[c0:c0 + cl]`` that also writes the log_softmax
    of the previous row (``n`` elements) over the same columns, ``os = (ps
    - mp) - lp`` (float32 ``mp``, ``lp``), one output vector per input
    vector: the stores drain while the exponentials compute instead of in a
    burst of their own (see :func:`.rows.forward_range`). The sum is
    :func:`_sum32`'s, to the bit; the writes are :func:`write_forward`'s.
    Returns ``(sum, next max)``: with ``fold``, the next chunk's
    :func:`chunk_max` (to the bit: the same accumulators in the same
    order), taken from the loads of this chunk's loop, and the next chunk
    asked for two chunks ahead; ``-inf`` when there is no next chunk or
    without ``fold``.

    ``head >= 0`` (from :func:`stream_head` of the row): the output goes by
    streaming stores, and the store side runs ``head`` elements ahead of
    the read side, on ``[c0 + head, c0 + cl + head)`` (cut at ``n``), so
    that it stays on 64-byte lines across chunks; the caller writes the
    row's first ``head`` elements, and the row's last partial line goes by
    ordinary stores (up to ``n``: a caller that writes that line with the
    next row's first elements passes the end of the row's last whole line,
    :func:`.rows._write_joined`). A streaming store sends its line to memory without
    reading it first: 4096x32000 float32, 2 threads, the forward took 41.2
    ms with ordinary stores and 30.7 with streaming ones
    (``benchmarks/vocab_limits.py``: the write pass alone 40.0 ms against
    25.4 for a streaming copy). Stores that stopped at each chunk's end
    left two lines per chunk to ordinary stores, each reading its line
    from memory while the stores behind it waited: into a numpy ``out=``
    (16 bytes past a line) 4096x32000 bfloat16 took 1.19x as long as into
    a page-aligned one (AMD EPYC, LLVM znver4).

    One copy of the loop streams and one stores normally: with one loop,
    every store tested ``head >= 0`` (LLVM does not unswitch a loop this
    size). In-process A/B against that loop (AMD EPYC Zen 4, LLVM znver4,
    numpy ``out=``, same bits): 4096x32000 bfloat16 1.07-1.11x, 256x128256
    bfloat16 1.06-1.09x, 1024x128256 float16 1.12-1.15x, 1000x5000 float16
    1.09x, 4096x32000 float32 0.98-1.01x."""
    wide_vectors()
    if head >= 0:
        return _sum32_writing(xs, c0, cl, m, ps, os, mp, lp, head, n, fold, True)
    return _sum32_writing(xs, c0, cl, m, ps, os, mp, lp, head, n, fold, False)


@njit(forceinline=True, error_model="numpy")
def _sum32_writing(xs, c0, cl, m, ps, os, mp, lp, head, n, fold, nt):
    """:func:`sum32_writing` for a constant ``nt = head >= 0``."""
    a0 = splat(_ZERO)
    a1 = a0
    a2 = a0
    a3 = a0
    h0 = splat(0.0)  # the float64 lanes of the blocks done (module doc)
    h1 = h0
    blocks = cl > SUM_BLOCK
    n0 = splat(_NINF)  # the next chunk's max (fold), chunk_max's accumulators
    n1 = n0
    n2 = n0
    n3 = n0
    nx = c0 + CHUNK
    nl = min(xs.size - nx, CHUNK) if fold else 0
    # the chunk on its way in while this one computes: the next one, or with
    # fold (which reads the next one here) the one after it, so that every
    # chunk of a row asks for memory a constant distance ahead
    ahead = c0 + (2 * CHUNK if fold else CHUNK)
    # the previous row's pairs (._vec.vload_pair); where they are two vectors,
    # one store after each exp as before: float32 4096x32000 forward took
    # 0.90x as long with both stores after every second exp (in-process A/B,
    # AMD EPYC, LLVM znver4, numpy out=, same bits)
    one = pairs_interleave((ps, os))
    lo, hi, e = _store_window(os, c0, cl, head, n)
    y0 = a0  # each step stores the step before's results, after its own loads
    y1 = a0
    y2 = a0
    y3 = a0
    k = 0
    while k + 4 * W <= cl and lo + k + 4 * W <= e:
        for q in range(0, 4 * W, _LINE):
            prefetch_ahead(xs, ahead + k + q)
        i = c0 + k  # (no prefetchw on ``os`` here: 41.7 ms without, 43.8 with)
        j = lo + k
        p0, p1 = vload_pair(ps, j, (ps, os))
        p2, p3 = vload_pair(ps, j + 2 * W, (ps, os))
        step = k + 4 * W <= nl
        if step:  # the next chunk's elements, in chunk_max's order
            x0, x1 = vload_pair(xs, nx + k, (xs,))
            n0 = vmax_x86(n0, x0)
        v0, v1, v2, v3 = _sum32_pairs(xs, i)
        a0 = a0 + exp_f32_sum(v0 - m)
        if k > 0 and not one:
            _put(os, j - 4 * W, y0, nt)
        if step:
            n1 = vmax_x86(n1, x1)
        a1 = a1 + exp_f32_sum(v1 - m)
        if k > 0:
            _put_pair(os, j - 4 * W, y0, y1, nt, (ps, os), one)
        if step:
            x2, x3 = vload_pair(xs, nx + k + 2 * W, (xs,))
            n2 = vmax_x86(n2, x2)
        a2 = a2 + exp_f32_sum(v2 - m)
        if k > 0 and not one:
            _put(os, j - 2 * W, y2, nt)
        if step:
            n3 = vmax_x86(n3, x3)
        a3 = a3 + exp_f32_sum(v3 - m)
        if k > 0:
            _put_pair(os, j - 2 * W, y2, y3, nt, (ps, os), one)
        y0 = (p0 - mp) - lp
        y1 = (p1 - mp) - lp
        y2 = (p2 - mp) - lp
        y3 = (p3 - mp) - lp
        k += 4 * W
        if blocks and k % SUM_BLOCK == 0:
            h0, h1 = _widen_block(a0, a1, a2, a3, h0, h1, (xs,))
            a0 = splat(_ZERO)
            a1 = a0
            a2 = a0
            a3 = a0
    if k > 0:
        j = lo + k
        _put_pair(os, j - 4 * W, y0, y1, nt, (ps, os))
        _put_pair(os, j - 2 * W, y2, y3, nt, (ps, os))
    a = lo + k
    if nt:  # the window's last whole lines, which the 4-vector steps did not reach
        a = stream_forward(ps, os, a, e, _LSM, False, 0.0, 0.0, mp, lp)
    _store_range(os, ps, a, hi, mp, lp)
    sum_ = _sum32_rest(xs, c0, k, cl, m, a0, a1, a2, a3, h0, h1)  # the last terms (pair order)
    if nl <= 0:
        return sum_, _NINF
    # the next chunk's max from where the steps above stopped taking it
    return sum_, reduce_max(_max_rest(xs, nx, min(k, nl // (4 * W) * (4 * W)), nl, n0, n1, n2, n3))


@njit(forceinline=True, error_model="numpy")
def _store_window(os, c0, cl, head, n):
    """The previous row's elements ``[lo, hi)`` that the chunk ``[c0, c0 +
    cl)`` of a pipelined loop writes, and where its streaming stores must
    stop (``e``, whole lines; ``e = hi`` for ordinary stores, ``head < 0``).
    See :func:`sum32_writing`."""
    if head < 0:
        return c0, c0 + cl, c0 + cl
    lo = c0 + head
    hi = min(c0 + cl + head, n)
    return lo, hi, stream_end(os, lo, hi)


@njit(forceinline=True, error_model="numpy")
def _put(os, j, v, nt):
    """A streaming store when ``nt``, else an ordinary one."""
    if nt:
        vstore_nt(os, j, v)
    else:
        vstore(os, j, v)


@njit(forceinline=True, error_model="numpy")
def _put_pair(os, j, a, b, nt, group, one=True):
    """:func:`._vec.vstore_pair` of the pass over ``group`` (streaming stores
    when ``nt``); with ``one`` false, only its second vector (a pass whose
    pairs do not interleave, whose first vector :func:`_put` stored)."""
    if one:
        if nt:
            vstore_pair_nt(os, j, a, b, group)
        else:
            vstore_pair(os, j, a, b, group)
    else:
        _put(os, j + W, b, nt)


@njit(forceinline=True, error_model="numpy")
def _tail_terms(xs, k, count, m):
    """The terms of a partial vector: lanes past ``count`` are exactly 0."""
    e = exp_f32_sum(vload_part(xs, k, count, _NINF) - m)
    return where(lanes_below(count), e, _ZERO)


@njit(forceinline=True, error_model="numpy")
def _sum64(xs, c0, cl, m):
    """``sum(exp_f64(x - m))`` of the exact float64 differences, 16 lanes."""
    return reduce_add(_sum64_lanes(xs, c0, cl, m))


@njit(forceinline=True, error_model="numpy")
def _sum64_lanes(xs, c0, cl, m, d=None, at=0):
    """:func:`_sum64` before its tree: the vector of 8 float64 lanes whose
    :func:`._vec.reduce_add` it is. Given ``d``, it also keeps its exact
    differences, ``d[at + k] = x[c0 + k] - m`` in float64 for ``k < cl``
    (for :func:`forward_kept`; ``d`` holds ``W`` elements of slack past ``at
    + cl``: a cut-short last vector writes its ``-inf`` lanes there)."""
    wide_vectors()
    m64 = np.float64(m)
    lo = splat(0.0)
    hi = lo
    k = 0
    while k + W <= cl:
        lo, hi = _terms64(vload(xs, c0 + k), m64, lo, hi, d, at + k)
        k += W
    if k < cl:
        lo, hi = _terms64(vload_n(xs, c0 + k, cl - k, _NINF), m64, lo, hi, d, at + k)
    return lo + hi


@njit(forceinline=True, error_model="numpy")
def _terms64(v, m64, lo, hi, d, at):
    """:func:`_sum64_lanes`'s step: the exact differences of ``v``'s 16
    elements (kept in ``d[at:]`` unless ``d`` is None), their terms added to
    the running ``lo``, ``hi``."""
    d0 = lo_f64(v) - m64
    d1 = hi_f64(v) - m64
    if d is not None:
        vstore(d, at, d0)
        vstore(d, at + W // 2, d1)
    return lo + exp_f64(d0), hi + exp_f64(d1)


@njit(forceinline=True, error_model="numpy")
def _has_nan(xs, c0, cl):
    for k in range(c0, c0 + cl):
        v = lane(vload_part(xs, k, 1, _ZERO), 0)
        if v != v:
            return True
    return False


@njit(forceinline=True, error_model="numpy")
def chunk_sum_at(xs, cl, m, accurate):
    """``(m, s_c)`` in float64 for a chunk ``xs[:cl]`` whose max ``m`` is known."""
    if m == _NINF:
        return -np.inf, empty_sum(xs, 0, cl)
    if accurate:
        return np.float64(m), _sum64(xs, 0, cl, m)
    return np.float64(m), _sum32(xs, 0, cl, m)


@njit(forceinline=True, error_model="numpy")
def chunk_sum64_lanes(xs, cl, m):
    """:func:`chunk_sum_at`'s accurate sum before its tree (float64 vector;
    ``m > -inf``), for :func:`._vec.reduce_add_rows`."""
    return _sum64_lanes(xs, 0, cl, m)


@njit(forceinline=True, error_model="numpy")
def chunk_sum64_keeping(xs, cl, m, d, at):
    """:func:`chunk_sum64_lanes` that also keeps its exact differences ``x -
    m`` in ``d`` from ``at`` (:func:`_sum64_lanes`)."""
    return _sum64_lanes(xs, 0, cl, m, d, at)


@njit(forceinline=True, error_model="numpy")
def chunk_sum32(xs, cl, m):
    """The fast path's ``s_c`` of a chunk ``xs[:cl]`` whose max ``m`` is known."""
    return _sum32(xs, 0, cl, m)


@njit(forceinline=True, error_model="numpy")
def chunk_sum32_lanes(xs, cl, m):
    """:func:`chunk_sum_at`'s fast sum of a chunk of at most
    :data:`SUM_BLOCK` terms before its tree (float32 vector; ``m > -inf``);
    its float64 widening is the sum."""
    return _sum32_lanes(xs, 0, cl, m)


@njit(forceinline=True, error_model="numpy")
def empty_sum(xs, c0, cl):
    """The sum of a chunk ``xs[c0:c0 + cl]`` whose max is ``-inf``: NaN if it
    holds one, else 0."""
    return np.nan if _has_nan(xs, c0, cl) else 0.0


@njit(forceinline=True, error_model="numpy")
def chunk_stats(xs, c0, cl, accurate):
    """``(m_c, s_c)`` of a chunk, both float64 (module doc)."""
    m = chunk_max(xs, c0, cl)
    if m == _NINF:
        return -np.inf, empty_sum(xs, c0, cl)
    if accurate:
        return np.float64(m), _sum64(xs, c0, cl, m)
    return np.float64(m), _sum32(xs, c0, cl, m)


@njit(forceinline=True, error_model="numpy")
def merge(m, s, mc, sc):
    """Online-softmax merge of chunk stats ``(mc, sc)`` into ``(m, s)``."""
    if mc > m:
        return mc, s * math.exp(m - mc) + sc
    if mc == m:
        return m, s + sc
    return m, s + sc * math.exp(mc - m)


@njit(forceinline=True, error_model="numpy")
def row_log(s):
    """``log(s)`` of a row sum by :func:`._math.log_f64` (the kernels' one log)."""
    return lane(log_f64(splat(s)), 0)


@njit(forceinline=True, error_model="numpy")
def forward_vec(x, a0, a1, b0, b1, c, d, op, accurate):
    """Pass 2 on one vector ``x`` (the arithmetic of :func:`write_forward`),
    from statistics that are scalars (a row) or vectors (a tile's columns):
    float64 ``a0, a1 = m`` and ``b0, b1 = log s`` (log_softmax) or ``1/s``
    (softmax) for the low and high 8 lanes (accurate), float32 ``c = m``,
    ``d = log s`` or ``1/s`` (fast)."""
    if accurate:
        if op == _LSM:
            return join_f32((lo_f64(x) - a0) - b0, (hi_f64(x) - a1) - b1)
        return join_f32(exp_f64(lo_f64(x) - a0) * b0, exp_f64(hi_f64(x) - a1) * b1)
    if op == _LSM:
        return (x - c) - d
    return exp_f32(x - c) * d


@njit(forceinline=True, error_model="numpy")
def forward_kept(d, k, b0, b1, op):
    """:func:`forward_vec`'s accurate arithmetic on the 16 differences ``d[k:k
    + W] = x - m`` that :func:`chunk_sum64_keeping` kept (``b0``, ``b1``:
    ``log s`` or ``1/s`` of the low and high 8 lanes): the same values,
    without converting ``x`` and subtracting ``m`` again."""
    d0, d1 = vload(d, k), vload(d, k + W // 2)
    if op == _LSM:
        return join_f32(d0 - b0, d1 - b1)
    return join_f32(exp_f64(d0) * b0, exp_f64(d1) * b1)


@njit(forceinline=True, error_model="numpy")
def write_forward_kept(d, at, os, cl, op, b, head):
    """:func:`write_forward` of a float32 row ``os[:cl]`` from the differences
    ``d[at:at + cl]`` (:func:`forward_kept`; ``b``: float64 ``log s`` or
    ``1/s``); ``head`` as there. The same values and stores."""
    k = 0
    if head >= 0:
        h = min(head, cl)
        while k < h:
            vstore_n(os, k, forward_kept(d, at + k, b, b, op), h - k)
            k += W
        k = h
        while k + W <= stream_end(os, k, cl):  # a float32 vector: a line
            vstore_nt(os, k, forward_kept(d, at + k, b, b, op))
            k += W
    while k < cl:
        vstore_n(os, k, forward_kept(d, at + k, b, b, op), cl - k)
        k += W


@njit(forceinline=True, error_model="numpy")
def write_forward(xs, os, c0, cl, op, accurate, m, lg, inv, head=-1):
    """Pass 2 on ``[c0, c0 + cl)``: ``os = (x - m) - lg`` (log_softmax) or
    ``exp(x - m) * inv`` (softmax); ``m``, ``lg = log(s)``, ``inv = 1/s``
    are float64. ``os`` may be ``xs`` (in place: each vector is read before
    it is written).

    ``head >= 0`` (:func:`stream_head` of ``os[c0]``): streaming stores
    from ``os[c0 + head]`` on, ordinary ones before it and for the last
    partial vector (see :func:`sum32_writing`); the same values."""
    wide_vectors()
    b = lg if op == _LSM else inv
    m32 = np.float32(m)
    b32 = np.float32(b)
    end = c0 + cl
    k = c0
    if head >= 0:
        h = min(c0 + head, end)
        while k < h:
            v = vload_n(xs, k, h - k, _ZERO)
            vstore_n(os, k, forward_vec(v, m, m, b, b, m32, b32, op, accurate), h - k)
            k += W
        k = h
        k = stream_forward(xs, os, k, stream_end(os, k, end), op, accurate, m, b, m32, b32)
    elif not accurate:
        while k + 2 * W <= end:
            # claim the output line ahead (prefetchw): 4096x32000 float32,
            # one thread, 104 -> 86-94 ms; a copy of the same bytes: 43 ms
            prefetch_w(os, k + 16 * W)
            prefetch_w(os, k + 17 * W)
            v0, v1 = vload_pair(xs, k, (xs, os))
            vstore_pair(os, k, forward_vec(v0, m, m, b, b, m32, b32, op, accurate),
                        forward_vec(v1, m, m, b, b, m32, b32, op, accurate), (xs, os))
            k += 2 * W
        if k + W <= end:
            vstore(os, k, forward_vec(vload(xs, k), m, m, b, b, m32, b32, op, accurate))
            k += W
    while k < end:
        v = vload_n(xs, k, end - k, _ZERO)
        vstore_n(os, k, forward_vec(v, m, m, b, b, m32, b32, op, accurate), end - k)
        k += W


@njit(forceinline=True, error_model="numpy")
def stream_forward(xs, os, k, e, op, accurate, m, b, m32, b32):
    """:func:`write_forward`'s streamed body ``[k, e)`` (whole lines from a
    line boundary), two vectors a step, each step's results stored after
    the next step's loads: a store just before a load of the same 4 KiB
    offset makes the load wait for it, which an output a few bytes ahead of
    its input modulo 4 KiB did at every vector (8x16x384x384 float32 into an
    output 48 bytes further into its page than the input: 8.16 ms against
    7.26 allocating, AMD EPYC, LLVM znver4). Returns ``e``."""
    if k + 2 * W <= e:
        v0, v1 = vload_pair(xs, k, (xs, os))
        y0 = forward_vec(v0, m, m, b, b, m32, b32, op, accurate)
        y1 = forward_vec(v1, m, m, b, b, m32, b32, op, accurate)
        k += 2 * W
        while k + 2 * W <= e:
            v0, v1 = vload_pair(xs, k, (xs, os))
            vstore_pair_nt(os, k - 2 * W, y0, y1, (xs, os))
            y0 = forward_vec(v0, m, m, b, b, m32, b32, op, accurate)
            y1 = forward_vec(v1, m, m, b, b, m32, b32, op, accurate)
            k += 2 * W
        vstore_pair_nt(os, k - 2 * W, y0, y1, (xs, os))
    while k < e:  # (one float32 vector at most)
        vstore_nt(os, k, forward_vec(vload(xs, k), m, m, b, b, m32, b32, op, accurate))
        k += W
    return k


@njit(forceinline=True, error_model="numpy")
def chunk_grad_sum(ds, ys, c0, cl, op, paired=False):
    """float64 ``sum(diff_dst)`` (log_softmax) or ``sum(diff_dst * dst)``
    (softmax) of a chunk over :data:`GRAD_LANES` lanes (float32 products are
    exact in float64): four float64 vectors, so the additions are not one
    latency-bound chain (two vectors ran at 0.26 cycles/element, the add
    latency). Pass 2 reads ``dst`` next, so it is asked into cache here: on
    Intel both ``diff_dst`` and ``dst`` a chunk ahead into L2, 4096x32000
    bfloat16 1.37x against ``dst`` alone at the element being summed
    (in-process A/B, Intel Xeon, LLVM rocketlake); on AMD Zen ``dst`` at
    that element into L1, as tuned there, except in the sums that run under
    the last row's writes in rows longer than a chunk (:func:`grad_sum_writing`'s
    ``far``), which ask as on Intel. In-process A/B on an AMD EPYC Zen 4
    (LLVM znver4, 2 threads, numpy ``out=``, same bits) of the Intel
    pattern everywhere: 4096x32000 float32 1.07x, bfloat16 1.07x,
    1024x32000 float32 1.11-1.16x, 1024x128256 float16 1.02-1.04x, but
    accurate short rows lost (4096x1000 0.83-0.86x, 32768x128 0.85x).
    ``paired``: by :func:`_grad_step`'s pairs (the chunks of rows longer than
    a chunk, as :func:`grad_sum_writing`)."""
    wide_vectors()
    z = splat(0.0)
    if paired:  # (rows longer than a chunk: see grad_sum_writing)
        return _grad_sum_rest(ds, ys, c0, c0 + cl, op, z, z, z, z, True)
    return _grad_sum_rest(ds, ys, c0, c0 + cl, op, z, z, z, z, False)


@njit(forceinline=True, error_model="numpy")
def _grad_step(ds, ys, k, op, a0, a1, a2, a3, far=False, paired=False):
    """Terms ``k .. k + 2W`` of :func:`chunk_grad_sum` into its four lanes.
    ``far``: a row longer than a chunk whose sum runs under the last row's
    writes (:func:`grad_sum_writing`), whose streams are asked for a chunk
    ahead into L2 on AMD Zen too (:func:`chunk_grad_sum`). ``paired`` (a
    constant): the terms by one :func:`._vec.vload_pair` per stream, which
    for bfloat16 leaves the lanes in pair order until :func:`_grad_unpair`;
    the same vectors as two :func:`._vec.vload` otherwise."""
    _grad_ahead(ds, ys, k, op, far)
    if paired:
        d, e = vload_pair(ds, k, (ds, ys))
    else:
        d, e = vload(ds, k), vload(ds, k + W)
    if op == _LSM:
        return a0 + lo_f64(d), a1 + hi_f64(d), a2 + lo_f64(e), a3 + hi_f64(e)
    if paired:
        y, z = vload_pair(ys, k, (ds, ys))
    else:
        y, z = vload(ys, k), vload(ys, k + W)
    return (a0 + lo_f64(d) * lo_f64(y), a1 + hi_f64(d) * hi_f64(y),
            a2 + lo_f64(e) * lo_f64(z), a3 + hi_f64(e) * hi_f64(z))


@njit(forceinline=True, error_model="numpy")
def _grad_unpair(ds, ys, a0, a1, a2, a3):
    """The four accumulators of a paired :func:`_grad_step` back in element
    order: for bfloat16 they hold the low and high halves of the even
    elements (``a0``, ``a1``) and of the odd ones (``a2``, ``a3``)."""
    if pairs_interleave((ds, ys)):
        l0, l1 = unpair(a0, a2, (ds, ys))
        h0, h1 = unpair(a1, a3, (ds, ys))
        return l0, l1, h0, h1
    return a0, a1, a2, a3


@njit(forceinline=True, error_model="numpy")
def _grad_ahead(ds, ys, k, op, far):
    """The prefetches of a :func:`_grad_step` at ``k``."""
    if far or not on_amd():  # both streams a chunk ahead, into L2
        prefetch_l2(ds, k + CHUNK)
        prefetch_l2(ds, k + CHUNK + W)
        prefetch_l2(ys, k + CHUNK)
        prefetch_l2(ys, k + CHUNK + W)
    elif op == _LSM:  # AMD Zen, as tuned there: dst into L1 for pass 2
        prefetch(ys, k)
        prefetch(ys, k + W)


@njit(forceinline=True, error_model="numpy")
def grad_add(lo, hi, ds, pd, ys, py, count, op):
    """The backward's pass-1 terms of ``count`` elements (up to a vector;
    masked-off lanes add 0) added to the float64 halves ``(lo, hi)``:
    ``diff_dst`` (log_softmax) or ``diff_dst * dst`` (softmax), from
    ``ds[pd]`` (and ``ys[py]``). The one spelling of the rows', tiles' and
    strips' sums (:mod:`.columns`, :mod:`.strips`)."""
    d = vload_n(ds, pd, count, _ZERO)
    if op == _LSM:
        return lo + lo_f64(d), hi + hi_f64(d)
    y = vload_n(ys, py, count, _ZERO)
    return lo + lo_f64(d) * lo_f64(y), hi + hi_f64(d) * hi_f64(y)


@njit(forceinline=True, error_model="numpy")
def _grad_sum_rest(ds, ys, k, end, op, a0, a1, a2, a3, paired):
    """:func:`chunk_grad_sum` from element ``k`` to ``end`` (accumulators
    given, in pair order if ``paired``, a constant of the caller's:
    :func:`_grad_step`), then the lanes' tree."""
    while k + 2 * W <= end:
        a0, a1, a2, a3 = _grad_step(ds, ys, k, op, a0, a1, a2, a3, False, paired)
        k += 2 * W
    if paired:
        a0, a1, a2, a3 = _grad_unpair(ds, ys, a0, a1, a2, a3)
    if k < end:
        a0, a1 = grad_add(a0, a1, ds, k, ys, k, end - k, op)
    if k + W < end:
        a2, a3 = grad_add(a2, a3, ds, k + W, ys, k + W, end - k - W, op)
    # lanes l and l + 16, then the tree of the 16 that remain
    return reduce_add((a0 + a2) + (a1 + a3))


@njit(forceinline=True, error_model="numpy")
def grad_sum_vectors(ds, ys, n, op, nv):
    """:func:`chunk_grad_sum` of a row of ``n`` elements from 0, ``(nv - 1) W
    < n <= nv W`` for a constant ``nv``: the same lanes and tree, in a
    shape fixed by ``nv`` (whole steps, then the masked tail), so that a
    copy of a row loop compiled for ``nv`` has no loop left per row."""
    wide_vectors()
    z = splat(0.0)
    a0, a1, a2, a3 = z, z, z, z
    steps = (nv - 1) // 2
    for i in range(steps):
        a0, a1, a2, a3 = _grad_step(ds, ys, 2 * W * i, op, a0, a1, a2, a3)
    k = steps * 2 * W
    a0, a1 = grad_add(a0, a1, ds, k, ys, k, n - k, op)
    if nv - 2 * steps == 2:
        a2, a3 = grad_add(a2, a3, ds, k + W, ys, k + W, n - k - W, op)
    return reduce_add((a0 + a2) + (a1 + a3))


@njit(forceinline=True, error_model="numpy")
def write_backward_vectors(ds, ys, os, n, op, s, nv):
    """:func:`write_backward` (accurate) of a row of ``n <= nv W`` elements,
    ``nv`` a constant: the same vectors, unrolled."""
    for v in range(nv):
        k = v * W
        d = vload_n(ds, k, n - k, _ZERO)
        y = vload_n(ys, k, n - k, _ZERO)
        vstore_n(os, k, backward_vec64(d, y, op, s, s), n - k)


@njit(forceinline=True, error_model="numpy")
def grad_sum_writing(ds, ys, c0, cl, op, pd, py, os, ns32, s32, head, n, far):
    """:func:`chunk_grad_sum` of this row's ``ds``/``ys[c0:c0 + cl]`` that
    also writes the previous row's pass 2 (``n`` elements; ``pd``, ``py`` ->
    ``os``, fast path, :func:`write_backward`'s values), one output vector
    per input vector, as :func:`sum32_writing` does for the forward: the
    memory-bound sum of the next row runs under the exp-bound writes of
    this one instead of after them. ``head``: as :func:`sum32_writing` (the
    store side ``head`` elements ahead, on whole lines; the caller writes
    the row's first ``head`` elements; ``n``: where the row's writes stop;
    ``far``: the row is longer than a chunk, :func:`_grad_step`; a
    constant of the caller's).

    Rows longer than a chunk sum by :func:`_grad_step`'s pairs: in-process
    A/B against single vectors (AMD EPYC, LLVM znver4, numpy ``out=``, same
    bits) 4096x32000 bfloat16 1.03x, 256x128256 1.05x; shorter rows by
    single vectors, whose lanes need not go back in order once a row: with
    pairs 200000x64 bfloat16 ran 0.95-0.96x, 20000x1000 0.97x. ``far``
    must be a constant where this is inlined: a row loop that held both
    copies ran rows of 64-300 at 0.96-0.99x."""
    wide_vectors()
    lo, hi, e = _store_window(os, c0, cl, head, n)
    k, j, a0, a1, a2, a3 = _grad_steps_writing(ds, ys, c0, c0 + cl, op, pd, py, os, lo, e,
                                               head >= 0, ns32, s32, far, far)
    if head >= 0:  # the window's last whole lines, which the 2-vector steps did not reach
        j = stream_backward(pd, py, os, j, e, op, ns32, s32)
    store_backward(pd, py, os, j, hi, op, ns32, s32)
    return _grad_sum_rest(ds, ys, k, c0 + cl, op, a0, a1, a2, a3, far)


@njit(forceinline=True, error_model="numpy")
def grad_sum_streaming(ds, ys, n, op, pd, py, os, lo, e, ns32, s32):
    """:func:`chunk_grad_sum` of a short row ``ds``/``ys[:n]`` (``n <=
    CHUNK``) that also streams ``os[lo:e)`` (whole 64-byte lines of the span
    of rows that :func:`.rows._backward_span` writes, ``pd``, ``py``
    -> ``os`` with ``ns32``, ``s32``, fast path), as :func:`grad_sum_writing`
    does for a window of the previous row. Its sums take single vectors, not
    :func:`_grad_step`'s pairs, as :func:`grad_sum_writing`'s rows of up to a
    chunk do (whose doc has the A/B)."""
    wide_vectors()
    k, j, a0, a1, a2, a3 = _grad_steps_writing(ds, ys, 0, n, op, pd, py, os, lo, e, True, ns32, s32, False,
                                               False)
    stream_backward(pd, py, os, j, e, op, ns32, s32)
    return _grad_sum_rest(ds, ys, k, n, op, a0, a1, a2, a3, False)


@njit(forceinline=True, error_model="numpy")
def stream_backward(ds, ys, os, a, e, op, ns32, s32):
    """Fast-path pass 2 on the whole lines ``[a, e)`` by streaming stores;
    returns ``e``."""
    while a < e:  # (single vectors: short bfloat16 rows stream a line or none a row
        # here, and pairs made them slower: in-process A/B, AMD EPYC, LLVM
        # znver4, same bits, 200000x20 0.92x, 174763x24 0.89x; the vocabulary
        # rows' pairs are in _grad_steps_writing)
        vstore_nt(os, a, backward_vec(vload(ds, a), vload(ys, a), op, ns32, s32, os.itemsize == 2))
        a += W
    return a


@njit(forceinline=True, error_model="numpy")
def _grad_steps_writing(ds, ys, c0, end, op, pd, py, os, lo, e, nt, ns32, s32, far, paired):
    """The lockstep loop of :func:`grad_sum_writing`: two vectors of the sum
    of ``ds``/``ys`` from ``c0`` and two of ``os`` from ``lo`` a step, while
    both last (``end``, ``e``). Returns where each stopped and the sum's
    four accumulators (in pair order if ``paired``, :func:`_grad_step`)."""
    a0 = splat(0.0)
    a1 = a0
    a2 = a0
    a3 = a0
    g0 = splat(_ZERO)  # each step stores the step before's results, after its own loads
    g1 = g0
    k = c0
    while k + 2 * W <= end and lo + (k - c0) + 2 * W <= e:
        j = lo + (k - c0)
        d0, d1 = vload_pair(pd, j, (pd, py, os))
        y0, y1 = vload_pair(py, j, (pd, py, os))
        a0, a1, a2, a3 = _grad_step(ds, ys, k, op, a0, a1, a2, a3, far, paired)
        if k > c0:
            _put_pair(os, j - 2 * W, g0, g1, nt, (pd, py, os))
        g0 = backward_vec(d0, y0, op, ns32, s32, os.itemsize == 2)
        g1 = backward_vec(d1, y1, op, ns32, s32, os.itemsize == 2)
        k += 2 * W
    j = lo + (k - c0)
    if k > c0:
        _put_pair(os, j - 2 * W, g0, g1, nt, (pd, py, os))
    return k, j, a0, a1, a2, a3


@njit(forceinline=True, error_model="numpy")
def store_backward(ds, ys, os, a, b, op, ns32, s32):
    """Fast-path pass 2 on ``[a, b)`` with ordinary (masked) stores."""
    while a < b:
        d = vload_n(ds, a, b - a, _ZERO)
        y = vload_n(ys, a, b - a, _ZERO)
        vstore_n(os, a, backward_vec(d, y, op, ns32, s32, os.itemsize == 2), b - a)
        a += W


@njit(forceinline=True, error_model="numpy")
def write_backward(ds, ys, os, c0, cl, op, accurate, s, head=-1):
    """Pass 2 of the backward on ``[c0, c0 + cl)``: ``diff_dst - e**dst * S``
    (log_softmax, one rounding by FMA) or ``dst * (diff_dst - S)``; ``os``
    may be ``ds`` or ``ys`` (in place). ``head >= 0``: streaming stores from
    ``os[c0 + head]``, as :func:`write_forward` (fast path only)."""
    wide_vectors()
    end = c0 + cl
    k = c0
    if accurate:
        while k < end:
            d = vload_n(ds, k, end - k, _ZERO)
            y = vload_n(ys, k, end - k, _ZERO)
            vstore_n(os, k, backward_vec64(d, y, op, s, s), end - k)
            k += W
        return
    ns32 = np.float32(-s)
    s32 = np.float32(s)
    half = os.itemsize == 2
    if head >= 0:
        k = min(c0 + head, end)
        store_backward(ds, ys, os, c0, k, op, ns32, s32)
        k = stream_backward(ds, ys, os, k, stream_end(os, k, end), op, ns32, s32)
    else:
        while k + 2 * W <= end:
            prefetch_w(os, k + 16 * W)
            prefetch_w(os, k + 17 * W)
            d0, d1 = vload_pair(ds, k, (ds, ys, os))
            y0, y1 = vload_pair(ys, k, (ds, ys, os))
            vstore_pair(os, k, backward_vec(d0, y0, op, ns32, s32, half),
                        backward_vec(d1, y1, op, ns32, s32, half), (ds, ys, os))
            k += 2 * W
        if k + W <= end:
            vstore(os, k, backward_vec(vload(ds, k), vload(ys, k), op, ns32, s32, half))
            k += W
    store_backward(ds, ys, os, k, end, op, ns32, s32)


@njit(forceinline=True, error_model="numpy")
def backward_vec(d, y, op, ns32, s32, half):
    """Fast-path pass 2 of the backward on one vector: ``d - e**y * S`` (one
    FMA; ``ns32 = -S``) or ``y * (d - S)``. ``half`` (a constant of the
    compile: the output buffer is 16-bit, whatever the inputs): ``e**y`` by
    :func:`._math.exp_f32_16bit` (8 operations per 16 lanes, within
    ``1.5e-7 + 7.3e-8 |y|`` relative) instead of :func:`._math.exp_f32` (14,
    within 1 ulp, for float32 results): :func:`._math.exp_f32_for`.
    In-process A/B, AMD EPYC Zen 4 (LLVM znver4), 2 threads, numpy
    ``out=``: docs/performance.md's fifteenth Zen 4 section."""
    if op == _LSM:
        return vfma(exp_f32_for(y, half), ns32, d)
    return y * (d - s32)


@njit(forceinline=True, error_model="numpy")
def backward_vec64(d, y, op, s0, s1):
    """Accurate pass 2 of the backward on one vector, in float64 and rounded
    once: ``d - e**y * S`` (one FMA) or ``y * (d - S)``, ``S = s0`` for the
    low 8 lanes and ``s1`` for the high ones (scalars for a row, vectors
    for rows across lanes: :mod:`.tiny`)."""
    if op == _LSM:  # (negate: the same NaN sign in every kernel that inlines this)
        return join_f32(vfma(exp_f64_any(lo_f64(y)), negate(s0), lo_f64(d)),
                        vfma(exp_f64_any(hi_f64(y)), negate(s1), hi_f64(d)))
    return join_f32(lo_f64(y) * (lo_f64(d) - s0), hi_f64(y) * (hi_f64(d) - s1))
