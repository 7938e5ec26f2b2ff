"""Column kernels: the reduction axis is strided and an inner axis is not
(``inner > 1``: NCHW ``axis=1``, ``axis=0`` of a matrix...).

A task takes a *tile*: ``jn <= J`` neighbouring inner positions ("columns")
of one outer index, each a reduction row of ``n`` elements ``sn`` apart.
Vectors run across the columns, so every load is ``W`` contiguous elements
and no transposed copy is made. Per column, the arithmetic is exactly
:mod:`.segment`'s definition: the same chunks, the same max, the same lanes
(element ``k`` of a chunk goes to lane ``k % 64`` -- here a row of the
``lanes x J`` scratch ``acc`` -- or ``k % 16`` for float64 terms, ``k % 32``
for the backward's sums), the same
tree over the lanes, the same merge, log and pass 2. So a column gives the
same bits as the same values laid out as a contiguous row.

Tiles whose columns are not unit-stride (``si != 1``) are gathered a chunk
at a time into a dense ``CHUNK x J`` stage (and results scattered from one).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
from numba import njit, prange

from .. import Op
from ._math import exp_f32_for, exp_f32_sum, exp_f64, exp_f64_any, log_f64
from ._simd import I0, TRUE, float32_result, view, wide_vectors
from ._vec import (
    W,
    address,
    hi_f64,
    join_f32,
    lane,
    lanes_below,
    lanes_below64,
    lo_f64,
    on_amd,
    prefetch,
    prefetch_l2,
    prefetch_w,
    sfence,
    splat,
    vfma,
    vload,
    vload_n,
    vload_part,
    vstore,
    vstore_n,
    vstore_nt,
    vstore_pair_nt,
    where,
)
from .rows import stage_for, streams_items, streams_tiles
from .segment import (
    CHUNK,
    GRAD_LANES,
    LANES32,
    LANES64,
    SUM_BLOCK,
    forward_vec,
    grad_add,
    stream_end,
    stream_head,
    vmax_x86,
)

__all__ = [
    "tile_width",
    "tile_width_for",
    "column_tile_width",
    "staged_rows",
    "stages",
    "STAGED_WIDTH",
    "FAST16_WIDTH",
    "rows_on_lines",
    "forward_tiles",
    "backward_tiles",
    "logsumexp_tiles",
    "logsumexp_parallel",
]

@njit(cache=True)
def tile_width(n, ni, budget=1 << 20, widest=1024):
    """Columns per tile ``J`` (a speed choice: the arithmetic per column does
    not depend on it): up to ``widest`` columns and ``budget`` elements a
    tile (:func:`tile_width_for` raises both where the CPU's caches allow).
    Wide tiles win: each tile row is ``J`` contiguous
    elements on its own page, and at 64 columns (256 B per row, 12.5 KiB
    apart in NCHW 56x56) the forward ran at 5.7 cycles/element against
    ~2.5 at 512-1024 (AMD Zen 4). Up to 2**20 elements per tile chunk (4
    MiB of float32, twice an L2 here): on the Intel Xeon (2 MiB L2), one
    thread, float32 axis 0 with 8192 columns, against the earlier 2**18
    (tiles of 1 MiB): 1000 rows 1.38 -> 1.18-1.20 ns/element (J 256 ->
    1024), 2000 rows 2.29 -> 1.6, 4096 rows 2.81 -> 1.82; a narrower
    2**17 was slower still (1.9-2.1 at 1000 rows).

    Columns that ``J`` does not divide take tiles of even width (a multiple
    of ``W``, with ``2 W`` of slack so that :func:`line_shift`'s move adds
    no tile) rather than full tiles and a narrow last one: NCHW 56x56 (3136
    columns) 4 x 800 instead of 3 x 1024 + 64. AMD EPYC (LLVM znver4), 2
    threads, in-process A/B (``python benchmarks/ab_inprocess.py``), same
    bits: 64x64x56x56 axis 1 float32 forward 1.06-1.08x, bfloat16 1.10x,
    backward 1.01-1.07x; 64x64x112x112 (13 x 976 instead of 12 x 1024 +
    256) 1.02-1.14x forward, backward 0.97x (noise: A/A 0.90-1.04)."""
    rows = min(n, CHUNK)
    j = max(4 * W, min(widest, budget // rows // W * W))
    j = min(j, _up(ni, W))
    if ni % j == 0:
        return j
    # k tiles of even width instead of k - 1 full ones and a narrow last
    # one, with at least 2 W columns of slack: line_shift moves the tiles
    # by under 64 bytes, fewer than 2 W columns of any dtype
    k = -(-ni // j)
    even = _up(-(-ni // k), W)
    if even * k < ni + 2 * W:
        even += W
    return min(even, j)


@njit(inline="always")
def _up(v, m):
    """``v`` rounded up to a multiple of ``m``."""
    return -(-v // m) * m


#: a thread's share of the last-level cache from which long columns take
#: wide tiles (:func:`tile_width_for`)
WIDE_TILE_L3 = 64 << 20


def tile_width_for(n, ni, backward, threads, outer=1, staged=False, fast16=False):
    """:func:`tile_width` for a call (``outer`` independent planes of ``n x
    ni``): columns too long for a 1024-wide float32 tile to fit in L2 take
    wider tiles.

    **Backward, every CPU:** the widest tiles (up to
    :data:`WIDE_BACKWARD` columns) that still give each thread two: its
    two passes then read ``diff_dst``, ``dst`` and write ``diff_src`` in
    long contiguous runs per row, which beats keeping a tile's
    ``diff_dst`` in cache for the second pass. AMD EPYC (LLVM znver4, L2 1
    MiB, L3 32 MiB), 2 threads, float32, interleaved in one process, same
    bits (``python benchmarks/column_tiles.py 1000x65536 0 bwd --widths
    1024,4096,16384`` and the like), medians in ms: 1000x65536 axis 0 57.2
    / 57.9 at J = 1024, 47.5 / 51.5 at 4096, 43.5 at 16384 (quieter run:
    8192 38.8, 16384 37.4, 32768 36.8); 500x131072 48.6 (1024), 38.9
    (16384), 36.2 (32768), 40.7 (65536: one tile a thread); 4000x16384 91.0
    (256, the earlier choice), 52.3 (1024), 43.4-51.3 (2048), 48.0 (4096);
    16x1000x4096 axis 1 50.5 (1024), 33.2 (4096). Intel Xeon (LLVM
    rocketlake, L2 2 MiB, L3 480 MiB): 1000x65536 62.5 at 1024, 52.1 at
    2048, 46.5 at 4096 (wider not measured there yet). Columns of up to 256
    rows (their tiles fit L2) keep :func:`tile_width`: NCHW 64x56x56 axis 1
    12.0 ms at 800 against 12.0-12.7 at 1024-3136.

    **Forward**, only where each thread has at least :data:`WIDE_TILE_L3`
    of L3: up to 2048 columns and 2**21 elements. Intel Xeon, as above:
    1000x65536 axis 0 58.0 / 51.6 / 64.0 ms at 1024 / 2048 / 4096;
    4000x16384 65.1 (256) -> 52.6 (512); but 256x65536 11.4 ms at 1024
    against 14.1 at 2048 (a later run: 11.5 / 12.7), and 64x64x56x56 axis
    1 6.0 (1024) against 6.4-6.6 wider (later: 5.9 against 6.4), so short
    columns keep 1024. On the AMD EPYC (32 MiB of L3 for 2 threads) wider
    forward tiles lose: 1000x65536 54.2 ms at 1024, 70.8 at 2048, 74.1 at
    4096; 4000x16384 55.3 (256), 52.7 (512), 56.0 (1024).

    **Staged forward tiles** (``staged``: :func:`stages`) whose stage of
    :data:`STAGED_WIDTH` columns fits half of L2, on Intel: that width
    (:data:`STAGED_WIDTH`). **16-bit fast-path forward tiles** (``fast16``:
    16-bit input, not the accurate path) of lane-major columns, on Intel: up
    to :data:`FAST16_WIDTH` columns (on an AMD EPYC Zen 4 a tie: bfloat16
    64x16x56x56 and 1024x64x32 axis 1 1.00-1.02x, so not taken there)."""
    l2, l3 = _cache_bytes()
    return column_tile_width(n, ni, backward, threads, outer, l2, l3, staged, fast16)


#: the widest backward column tile (:func:`tile_width_for`): its scratch is
#: ``GRAD_LANES + 2`` float64 per column (8.5 MiB at 32768), a thread's own
WIDE_BACKWARD = 32768


#: columns a staged forward tile spans where its stage (``n x J`` float32)
#: fits half of L2 (:func:`column_tile_width`): 1000 rows, 1 MiB. Intel Xeon
#: (LLVM rocketlake, L2 2 MiB), 2 threads, axis 0 float32 forward, against
#: the wide tiles' 1024-2048 columns: in-process A/B, same bits, numpy
#: ``out=`` / the library's output memory: 1000x65536 1.03-1.04x (three
#: runs) / 1.04x, 500x131072 1.14x / 1.11x, 1000x16384 1.13-1.18x / 1.16x,
#: 700x32768 1.14x / 1.12x, 300x65536 1.14x / -; 1000x8192 (32 MB: not
#: staged) 0.98x / 1.01x (``python benchmarks/ab_inprocess.py``). Per
#: width, 1000x65536 axis 0 (``python benchmarks/column_tiles.py
#: 1000x65536 0 fwd --numpy-out --widths 128,256,320,512,1024,2048``):
#: 60.5 / 39.5 / 39.7 / 41.6 / 40.7 / 43.2 ms. 2000 and 4000 rows (a stage
#: of 256 columns over 1 MiB) keep theirs, flat across widths: 2000x32768
#: 36.6 / 36.6 / 35.9 ms at 1040 / 256 / 512, 4000x16384 35.7 / 35.1 / 35.7.
STAGED_WIDTH = 256


#: the widest 16-bit fast-path forward tile of lane-major columns
#: (:func:`column_tile_width`; 1024 for every other tile that fits L2).
#: Intel Xeon (LLVM rocketlake), 2 threads, in-process A/B against 1024,
#: numpy ``out=``, same bits (``python benchmarks/ab_inprocess.py``), NCHW
#: axis 1 (three runs where given): bfloat16 64x64x112x112 1.11-1.21x (976
#: -> 800 columns), float16 1.03-1.12x; bfloat16 32x64x224x224 1.05-1.19x,
#: 64x32x112x112 1.06-1.23x, 64x48x112x112 1.15-1.16x, 16x128x224x224
#: 1.04-1.11x, 8x256x112x112 1.09x; float16 16x64x224x224 1.05-1.06x;
#: planes of 56x56 take 800 either way (1.00).
#: Float32 (the accurate path) stays at 1024: 64x64x112x112 1.02-1.04x,
#: 64x32x112x112 0.99x, 32x64x224x224 0.95x, 64x16x112x112 0.96-1.00x,
#: 32x128x112x112 1.05-1.08x; so do 16-bit columns of more than
#: LANE_MAJOR_ROWS rows (bfloat16 8x384x64x64 0.89-0.93x, float16 4x512x64x64
#: 0.99-1.01x). Per width, bfloat16 64x64x112x112, ms (``python
#: benchmarks/column_tiles.py 64x64x112x112 1 fwd --dtype bf16 --numpy-out
#: --widths 448,640,800,976,1568``): 23.3 / 16.2 / 17.6 / 20.4 / 17.3 --
#: not monotonic, so the rule keeps the width measured across shapes.
FAST16_WIDTH = 800


@njit(cache=True)
def stages(g, xsize, osize):
    """Whether the forward copies each tile of the geometry ``g`` into a
    dense stage (input items of ``xsize`` bytes, output ``osize``): unit
    stride columns whose rows :func:`staged_rows` takes, of an output that
    streams (:func:`.rows.streams`)."""
    return g[8] == 1 and streams_items(g, osize, False) and staged_rows(g[2], g[7] * xsize, xsize)


@njit(cache=True)
def column_tile_width(n, ni, backward, threads, planes, l2, l3, staged=False, fast16=False):
    """:func:`tile_width_for`'s rule for ``planes`` planes of ``n x ni`` on
    ``threads`` threads, given the caches' sizes in bytes (``l2 = 0``:
    unknown, taken as 1 MiB). Compiled, so that the JAX handlers (one
    thread) take it too: 1000x65536 axis 0 backward, ``NUMBA_NUM_THREADS=1
    python benchmarks/column_tiles.py 1000x65536 0 bwd``, AMD EPYC, LLVM
    znver4: 74.7 ms at 1024 columns, 68.8 at 4096, 53.9 at 16384, 50.8 at
    32768. ``staged``: a forward's tiles are staged (:data:`STAGED_WIDTH`);
    ``fast16``: a forward on the fast path from 16-bit data
    (:data:`FAST16_WIDTH`)."""
    if staged and not backward and not on_amd() and min(n, CHUNK) * STAGED_WIDTH * 4 <= l2 // 2:
        return tile_width(n, ni, STAGED_WIDTH * min(n, CHUNK), STAGED_WIDTH)
    if min(n, CHUNK) * 1024 * 4 <= (l2 if l2 > 0 else 1 << 20):
        if fast16 and not backward and n <= LANE_MAJOR_ROWS and not on_amd():
            return tile_width(n, ni, 1 << 20, FAST16_WIDTH)
        return tile_width(n, ni)
    if backward:  # the widest tiles that give each thread two
        per_plane = -(-2 * max(threads, 1) // max(planes, 1))
        widest = max(1024, min(WIDE_BACKWARD, _up(-(-ni // per_plane), W)))
        return tile_width(n, ni, widest * min(n, CHUNK), widest)
    if l3 // max(threads, 1) >= WIDE_TILE_L3:
        return tile_width(n, ni, 1 << 21, 2048)
    return tile_width(n, ni)


@functools.cache
def _cache_bytes():
    """``(L2, L3)`` sizes of CPU 0 in bytes, from Linux's sysfs (0 where unknown)."""
    sizes = {2: 0, 3: 0}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if level in sizes and digits.isdigit():
            sizes[level] = max(sizes[level], int(digits) * scale)
    return sizes[2], sizes[3]

#: chunks of up to this many rows sum lane-major (a lane's running sum in a
#: register, W columns at a time); longer ones row-major through a
#: ``lanes x J`` scratch. Measured one thread: the accurate sums of one
#: 64x1024 NCHW tile 0.469 ns/element lane-major vs 0.562 row-major
#: (``python benchmarks/accurate_limits.py``), the whole NCHW 64-channel
#: forward 1.00 -> 0.83-0.90; but 1000x8192 axis 0 1.53 -> 2.53 lane-major
#: (a lane's elements 16 rows apart: one page each). Staged tiles
#: (:func:`staged_rows`, dense) sum lane-major on the accurate path whatever
#: their length (see :func:`forward_tiles`). 384 rows of float16 (p04,
#: 8x16x384x384 axis 2) lane-major: 0.97x (in-process A/B, AMD EPYC, LLVM
#: znver4), so the bound stays.
LANE_MAJOR_ROWS = 256
#: tile rows ahead that the max pass prefetches (reads) and the write pass
#: claims (prefetchw): each tile row is its own short run of lines on its
#: own page, too short for the hardware prefetcher to pick up. Only for
#: tiles of up to ``_AHEAD_COLS`` columns: one thread, 1000x8192 axis 0
#: (J = 256) 1.65 -> 1.38 ns/element, but NCHW 64x112x112 (J = 1024, rows
#: of 4 KiB that the hardware does prefetch) 0.83 -> 0.91
_AHEAD = 4
_AHEAD_COLS = 256
#: tile rows ahead that the passes reading wider tiles from memory (the
#: stage copy, the max pass of tiles over :data:`_AHEAD_COLS` columns) ask
#: into L2 (``prefetcht1``): a ``prefetcht0`` holds one of the core's few L1
#: fill buffers until its line arrives, a ``prefetcht1`` one of L2's many.
#: ``python benchmarks/column_reads.py 1000x65536`` (AMD EPYC, LLVM znver4,
#: 2 threads; a copy 15.9 ms, a linear read 7.7): the tile reads of 1024
#: columns 14.4 ms unprefetched, 13.5-13.8 by ``prefetcht0``, 10.6-11.1 by
#: ``prefetcht1`` 4-32 rows ahead; with the stage copy 16.3 -> 12.9 ms. In-
#: process A/B, numpy ``out=``, same bits: 1000x65536 axis 0 forward
#: 1.07-1.18x, 4000x16384 1.02-1.16x, 1000x8192 1.02-1.12x, bfloat16
#: 1000x65536 1.11x; the max pass of wider tiles: 8x16x384x384 axis 2
#: float16 1.03-1.08x, 64x64x56x56 axis 1 0.91-1.03x (noise: A/A
#: 0.90-1.04).
_WIDE_AHEAD = 16
#: streamed forward tiles of at most this many bytes ask for the next tile's
#: rows (``prefetcht1``, a row per written row) during their write pass:
#: the max pass of a tile reads memory and the sums and writes compute from
#: cache, so the memory idled while they ran. In-process A/B (AMD EPYC, LLVM
#: znver4, 1 MiB L2): 64x64x112x112 axis 1 float32 1.04-1.12x, 64x64x56x56
#: 1.02-1.05x, bfloat16 1.00x; tiles of 4 MiB (1000x65536 axis 0) 0.97-0.99x,
#: unstreamed 8x16x384x384 axis 2 float16 0.92x, so neither takes it. (An
#: earlier next-tile prefetch on the Intel Xeon measured 0.91-1.00x.)
#: Accurate tiles summed lane-major ask during their float64 sums instead,
#: a line of the next tile's strip per row summed (the sums touch no
#: memory; the write pass streams): Intel Xeon (LLVM rocketlake), in-process
#: A/B against asking in the write pass (the same tree with ``sums_fetch``
#: off), numpy ``out=``, same bits, two runs: 64x64x112x112 axis 1 float32
#: 1.24-1.26x, 64x32x112x112 1.15-1.17x, 64x64x56x56 1.09-1.10x,
#: 64x128x56x56 1.08-1.10x; 16x64x28x28 (does not stream: the same code)
#: 0.96-1.00. Asking for a strip's rows all at once read 1.02-1.04x better
#: at 64 rows than a row at a time with the test in the loop, but 0.80-0.83x
#: at 128 (64x128x56x56).
FETCH_TILE_BYTES = 1 << 19
#: streamed float32 tile rows that pass 2 writes a sweep, each vector's
#: statistics loaded once for them all (:func:`_tile_write`). In L2, one
#: thread, 64x800 float32 (a scratch loop of pass 2): 0.171 ns/element a
#: row at a time, 0.139 four rows a sweep, 0.132 with the statistics in
#: registers, 0.121 a bare load-subtract-store. In-process A/B (Intel
#: Xeon, LLVM rocketlake, 2 threads, numpy out=, same bits, four runs):
#: 64x64x56x56 axis 1 1.01-1.05x, 64x64x112x112 1.01-1.04x, 64x128x56x56
#: 1.02-1.03x, 8x16x384x384 axis 2 0.97-1.04x. Unstreamed outputs lost
#: (1000x8192 axis 0 0.80x, float16 8x16x384x384 axis 2 0.75x), so they
#: write a row at a time, as do chunks over :data:`WRITE_ROWS_BYTES`
#: (read back from L3: 2000x8192 axis 0, 8 MiB, 0.97-0.98x)
WRITE_ROWS = 4
WRITE_ROWS_BYTES = 1 << 20
#: unstaged fast-path forward tiles of one chunk, more than
#: :data:`LANE_MAJOR_ROWS` rows and at most this many bytes (16-bit tiles,
#: whose width :func:`tile_width` fits to 1 MiB of float32) take the next
#: tile's max inside their write pass, a row of it per row written, asked
#: for ahead as its own max pass would (:func:`_max_step`): that pass reads
#: memory and little else, the write pass computes from L2, and run apart
#: they do not overlap. p04 from memory, 2 threads, the kernel's own passes
#: over every tile, cumulatively (``python benchmarks/column_memory.py``,
#: Intel Xeon, LLVM rocketlake, three runs): max 0.68-0.69 ms, + sums
#: 2.39-2.47, + write 4.37-4.65, and with the write taking the next tile's
#: max 4.21-4.29; a copy 1.39, a read alone 0.73-0.75, streaming stores
#: alone 0.75. In-process A/B
#: (Intel Xeon, numpy out=, same bits, ``python
#: benchmarks/ab_inprocess.py``): 8x16x384x384 axis 2 float16 1.02-1.07x
#: (paired 1.03-1.10, six runs), bfloat16 1.03-1.09x in five runs, 0.92 in
#: one; into the library's own output memory (4 KiB pages) a tie: float16
#: 0.94, 1.05, 0.95, bfloat16 1.04, 1.01, 1.03 (paired 0.94-1.04, three
#: runs). 4x512x64x64 axis 1 float16 0.99-1.05x, bfloat16 8x384x64x64
#: 1.02-1.03x, float16 16x300x96x96 0.99-1.00x, bfloat16 32x320x32x32
#: 0.99-1.00x, float16 4x2000x512 0.99x; streamed tiles, which asked for
#: the next tile in their write pass instead (FETCH_TILE_BYTES): float16
#: 8x512x64x64 1.00-1.01x, bfloat16 16x384x64x64 1.04x, 16x300x96x96
#: 0.96-0.98x, float16 0.99x. Tiles of up to 256 rows (lane-major
#: sums) tied or lost: bfloat16 64x64x112x112 0.98x, 64x64x56x56
#: 0.99-1.02x, float16 64x128x28x28 0.97x. Sums inlined into
#: :func:`forward_tiles` instead of compiled apart
#: (:func:`_tile_sums_row_major_apart`) made p04 0.93-0.97x; the next
#: tile's rows asked for a line at a time, not a vector, 0.85x. Intel only:
#: on an AMD EPYC Zen 4 (LLVM znver4) the same A/B read p04 0.92x, bfloat16
#: 64x16x56x56 0.96x, 1024x64x32 0.97x, 4x8x64x64 axis 2 0.93-0.94x.
#: (docs/performance.md, the twentieth Intel session, the eighth Zen 4 one.)
WRITE_PIPED_BYTES = 1 << 19
#: accurate lane-major tiles of ``PIPED_LANE_ROWS[0] < n <=
#: PIPED_LANE_ROWS[1]`` rows whose sums ask for the next tile
#: (:data:`FETCH_TILE_BYTES`), in planes of two tiles or more, take the next
#: tile's max inside their sums instead, a few of its vectors a lane, row
#: by row: it has no max pass of its own (from L2) then, and its rows are
#: read as runs. In-process A/B against asking for it (Intel Xeon, LLVM
#: rocketlake, 2 threads, numpy out=, same bits; NCHW axis 1, float32):
#: 128 channels 16x128x224x224 1.37-1.45x, 32x128x112x112 1.04-1.23x,
#: 32x128x80x80 1.10x, 64x128x56x56 1.04-1.13x, 128x128x40x40 1.05x; 96
#: and 112 channels 1.18-1.21x at 112x112, 0.99-1.08x at 56x56. Left out:
#: 64 channels or fewer (64x64x112x112 0.92x, 32x64x224x224 0.97-0.98x,
#: 64x64x56x56 0.96-0.99x, 64x48x56x56 0.92-0.96x), 160 (32x160x56x56
#: 0.93-0.96x), one tile a plane (256x128x28x28 0.95-0.97x) and the fast
#: path's float32 sums (bfloat16/float16 64x128x56x56 0.90-0.95x,
#: 32x96x112x112 0.91x).
PIPED_LANE_ROWS = (64, 128)


@njit(cache=True)
def staged_rows(n, sn_bytes, itemsize):
    """Whether the forward copies each tile into a dense ``n x J`` stage
    before its passes (outputs that stream only, :func:`.rows.streams`):
    float32 columns of one chunk, longer than :data:`LANE_MAJOR_ROWS`, whose
    rows lie a multiple of 4 KiB apart (1000x65536 axis 0: 256 KiB). Such
    rows all fall into the same few sets of L1 and L2 (their addresses agree
    below bit 12), so a tile read by the max pass is mostly gone from L2
    before its sums and its write pass read it again. A scratch driver of
    the column passes (2 threads, 1000x65536 axis 0, 256 columns a tile):
    max + sums 38.4 ms in place, 33.3 with each row 64 bytes further on (no
    aliasing), 26.4 staged. The copy costs a store per element into the
    stage; the passes then read rows ``J`` elements apart. In-process A/B
    against the unstaged kernel (the pipelined wide tiles), numpy ``out=``,
    Intel Xeon (LLVM rocketlake), same bits: 1000x65536 axis 0 1.15x,
    4000x16384 1.13x, 2000x32768 1.12x; 1000x8192 (32 MiB) 1.07x; smaller
    ones lost (300x8192, 10 MB in cache: 0.89x), hence big outputs only.
    The copy then also took the max (:func:`_stage_rows`), a pass over the
    stage less: 1000x65536 1.09x more, 4000x16384 1.16-1.17x, 2000x32768
    1.13-1.14x, 1000x8192 1.04-1.12x (same A/B, against the stage with its
    own max pass).
    16-bit columns keep their tiles: staged by an element-by-element copy,
    bfloat16/float16 1000x65536 axis 0 and bfloat16 2000x32768 ran 0.52-0.60x
    (their fast-path passes take half of float32's accurate ones, 26-28 ms,
    and the copy did not keep up)."""
    return itemsize == 4 and LANE_MAJOR_ROWS < n <= CHUNK and sn_bytes % 4096 == 0


_NINF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
_LSM = Op.LOG_SOFTMAX


@njit(forceinline=True, error_model="numpy")
def _rows4(a, first, J):
    """Four ``J``-long rows of scratch ``a`` after its first ``first`` rows."""
    b = first * J
    return a[b : b + J], a[b + J : b + 2 * J], a[b + 2 * J : b + 3 * J], a[
        b + 3 * J : b + 4 * J
    ]


@njit(forceinline=True, error_model="numpy")
def _tiles_stream(ob, g, J):
    """Whether pass 2 writes the tile rows of a ``J``-wide tile by streaming
    stores: an output that streams (:func:`.rows.streams`) and tile rows of
    at least 1 KiB (short ones would be mostly partial lines)."""
    return streams_tiles(ob, g) and J * ob.itemsize >= 1024


@njit(forceinline=True, error_model="numpy")
def spans16(ob, g, J):
    """Whether a forward's 16-bit tiles stream each tile as one span
    (:func:`_tile_write_span16`): outputs that stream (:func:`.rows.streams`)
    whose tiles hold whole rows (``J >= ni``) of fewer than 1 KiB (longer
    ones stream row by row, :func:`_tiles_stream`), lying end to end in the
    input and the output, its elements on their own size (else nothing
    streams); on AMD cores, where it was measured (the Intel Xeon's
    write-piped tiles, :data:`WRITE_PIPED_BYTES`, never take it).

    Rows of 768 bytes (8x16x384x384 axis 2 float16, p04) into a numpy
    ``out=`` (16 bytes past a line) streamed row by row lost (the first and
    last line of each row by ordinary stores, between streamed ones), and
    so they went by ordinary stores (:func:`_tiles_stream`), each line read
    from memory before it is written. Streamed as one span, only the span's
    first and last lines are ordinary. In-process A/B against ordinary
    stores (AMD EPYC, LLVM znver4, 2 threads, numpy ``out=``, same bits;
    ``python benchmarks/ab_inprocess.py --old <tree> --numpy-out --rounds
    15``), paired: the span asking for no tile ahead, p04 1.11x, bfloat16
    1.10x; asking for the next tile in its write pass (as the tiles did
    before), 1.09x and 1.08x; asking in its sums (:func:`_tile_sums_row_major`'s
    ``pf``), p04 1.23x, bfloat16 1.12x, 16x16x384x256 float16 1.15x,
    32x16x250x250 float16 1.10x. The sums' asks alone (against the span
    without them): 0.93-1.03x on p04 in three runs, 1.05-1.07x bfloat16,
    1.03-1.07x 16x16x384x256, 1.00x 32x16x250x250. Rows of 1 KiB, which
    already streamed row by row on lines (:func:`line_shift`), read 0.94x
    (64x1024x512 float16 axis 1) and 1.20x (8x16x512x512 axis 2 bfloat16)
    as a span in a first version, one run each: no rule, so they keep
    their rows. The max pass of a tile that the last
    one's sums asked for asks for nothing itself (as ``quiet_max`` in
    :func:`forward_tiles`): p04 1.02-1.05x paired in three runs, bfloat16
    1.06-1.07x, 16x16x384x256 1.03x, 32x16x250x250 0.99x."""
    return (ob.itemsize == 2 and on_amd() and streams_tiles(ob, g) and 2 * W <= g[3] <= J
            and g[3] * 2 < 1024 and g[7] == g[3] and g[12] == g[3] and g[8] == 1 and g[13] == 1
            and stream_head(ob, g[9]) >= 0)


@njit(forceinline=True, error_model="numpy")
def line_shift(ob, g, op, J):
    """Columns ``a`` by which the tiles' boundaries move left (tile ``k`` of
    an outer index: columns ``[k J - a, (k + 1) J - a)``, clipped to ``[0,
    ni)``) so that every tile row of a streamed output (operand ``op``)
    starts on a 64-byte line: 0 unless all its rows share their offset in a
    line. A row of a tile that starts off a line shares its first and last
    lines with the next tiles, which pass 2 writes by ordinary stores around
    its streaming ones (:func:`.segment.stream_head`): on the AMD EPYC (LLVM
    znver5) an ``out=`` 16 bytes past a line made 64x64x112x112 axis 1
    1.23x slower (24.3-25.2 ms against 19.7-20.5 at 0, 64 or 256 bytes),
    64x64x56x56 1.14-1.19x; the library's own buffers are aligned, numpy's
    are 16 bytes past a line."""
    b = 4 + 5 * op  # the operand's base and strides in g
    L = 64 // ob.itemsize
    if not (_tiles_stream(ob, g, J) and J % L == 0 and g[b + 4] == 1):
        return 0
    if not rows_on_lines(g, op, ob.itemsize):
        return 0
    head = stream_head(ob, g[b])
    return (L - head) % L if head >= 0 else 0


@njit(forceinline=True, error_model="numpy")
def rows_on_lines(g, op, itemsize):
    """Whether every row of every plane of operand ``op`` (items of
    ``itemsize`` bytes) starts at the same offset in a 64-byte line: rows,
    and planes along both outer axes, a whole number of lines apart (where
    there is more than one)."""
    b = 4 + 5 * op
    L = 64 // itemsize
    return g[b + 3] % L == 0 and (g[0] == 1 or g[b + 1] % L == 0) and (g[1] == 1 or g[b + 2] % L == 0)


@njit(forceinline=True, error_model="numpy")
def tiles_per_outer(ni, J, a):
    """Tiles of ``ni`` columns, ``J`` wide, boundaries moved ``a < J`` left."""
    return (ni + a + J - 1) // J


@njit(forceinline=True, error_model="numpy")
def _tile_cols(t, ntile, J, ni, a):
    """``(outer index, first column, columns)`` of tile ``t`` (:func:`line_shift`)."""
    o = t // ntile
    k = t - o * ntile
    j0 = max(0, k * J - a)
    return o, j0, min(ni, (k + 1) * J - a) - j0


@njit(forceinline=True, error_model="numpy")
def _tile_geom(g, op, o, j0):
    """``(base, sn, si)`` of the tile of outer index ``o`` from column ``j0``
    of operand ``op`` (geometry: :mod:`.rows`)."""
    n2 = g[1]
    i1 = o // n2
    b = 4 + 5 * op
    base = g[b] + i1 * g[b + 1] + (o - i1 * n2) * g[b + 2] + j0 * g[b + 4]
    return base, g[b + 3], g[b + 4]


@njit(cache=True, nogil=True, error_model="numpy")
def _stage_in(buf, base, sn, si, c0, cl, jn, stage, J):
    """Gather rows ``[c0, c0 + cl)`` of a tile into ``stage`` (``cl x J``)."""
    for k in range(cl):
        p = base + (c0 + k) * sn
        for j in range(jn):
            stage[k * J + j] = buf[p + j * si]


@njit(cache=True, nogil=True, error_model="numpy")
def _stage_out(stage, buf, base, sn, si, c0, cl, jn, J):
    for k in range(cl):
        p = base + (c0 + k) * sn
        for j in range(jn):
            buf[p + j * si] = stage[k * J + j]


@njit(forceinline=True, error_model="numpy")
def _stage_rows(xb, p, sn, cl, jn, stage, J, mc, k0=0):
    """Rows ``[k0, cl)`` of a tile (``jn`` unit-stride columns from
    ``xb[p]``, row step ``sn``) into the dense stage, ``J`` apart
    (:func:`staged_rows`), taking the per-column max ``mc`` on the way
    (:func:`_tile_max`'s, row by row; row 0 starts it); the rows
    :data:`_WIDE_AHEAD` on are asked for as it goes. (``k0``: for
    ``benchmarks/column_schedules.py``, which refills a stage a block of
    rows at a time.)"""
    for k in range(k0, cl):
        q = p + k * sn
        for j in range(0, jn, W):
            prefetch_l2(xb, q + _WIDE_AHEAD * sn + j)
            x = vload_n(xb, q + j, jn - j, _NINF)
            vstore_n(stage, k * J + j, x, jn - j)
            vstore(mc, j, x if k == 0 else vmax_x86(vload(mc, j), x))


@njit(forceinline=True, error_model="numpy")
def _chunk_view(buf, base, sn, si, c0, cl, jn, stage, J):
    """``(buffer, first element, row step)`` of a tile's chunk: the tile in
    place when its columns are unit-stride, else gathered into ``stage``."""
    if si == 1:
        return buf, base + c0 * sn, sn
    _stage_in(buf, base, sn, si, c0, cl, jn, stage, J)
    return stage, 0, J


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_stats(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J, pf, pjn, ask):
    """Per-column chunk stats ``(mc, sc)`` of ``cl`` rows from ``xb[p]`` (row
    step ``sn``): :func:`.segment.chunk_stats` on every column."""
    wide_vectors()
    _tile_max(xb, p, sn, cl, jn, mc, ask)
    if cl <= LANE_MAJOR_ROWS:
        _tile_sums_lane_major(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, pf, pjn, -1, 0, mc)
    else:
        _tile_sums_row_major(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J, -1, 0, mc, pf, pjn)


@njit(forceinline=True, error_model="numpy")
def _tile_max(xb, p, sn, cl, jn, mc, ask):
    """Per-column max ``mc`` of ``cl`` rows from ``xb[p]``, row by row (the
    tile streams through memory; ``ask``: the rows ahead asked for,
    :data:`_AHEAD`, :data:`_WIDE_AHEAD`)."""
    for k in range(cl):
        _max_step(xb, p, sn, k, jn, mc, ask)


@njit(forceinline=True, error_model="numpy")
def _max_step(xb, p, sn, k, jn, mc, ask):
    """Row ``k`` of :func:`_tile_max` (``ask``: the row ahead asked for first),
    which the write pass of a :data:`WRITE_PIPED_BYTES` tile also takes for
    the next tile."""
    if ask and jn > _AHEAD_COLS:
        for j in range(0, jn, W):
            prefetch_l2(xb, p + (k + _WIDE_AHEAD) * sn + j)
    elif ask and k > 0:
        for j in range(0, jn, W):
            prefetch(xb, p + (k + _AHEAD) * sn + j)
    _max_row(xb, p, sn, k, jn, mc)


@njit(forceinline=True, error_model="numpy")
def _max_row(xb, p, sn, k, jn, mc):
    """Row ``k`` of a tile (``xb[p + k * sn:][:jn]``) into its running
    per-column max ``mc`` (row 0 starts it): :func:`_tile_max`'s step, which
    the pipelined tiles also take for the next tile inside this one's sums."""
    q = p + k * sn
    if k == 0:
        for j in range(0, jn, W):
            vstore(mc, j, vload_n(xb, q + j, jn - j, _NINF))
    else:
        for j in range(0, jn, W):
            vstore(mc, j, vmax_x86(vload(mc, j), vload_n(xb, q + j, jn - j, _NINF)))


@njit(forceinline=True, error_model="numpy")
def _max_vec(xb, q, jn, j, first, mc):
    """Columns ``[j, j + W)`` of the tile row at ``xb[q]`` (``jn`` columns)
    into the running max ``mc`` (``first``: starts it)."""
    x = vload_n(xb, q + j, jn - j, _NINF)
    vstore(mc, j, x if first else vmax_x86(vload(mc, j), x))


@njit(forceinline=True, error_model="numpy")
def _lane_sums64(xb, p, sn, cl, jn, j, lane_, m64l, m64h, ahead, pfj):
    """Lane ``lane_``'s accurate sums (low and high 8 columns) of the ``W``
    columns from ``j``; ``ahead``: each of its rows also asks for
    ``xb[pfj + k * sn]`` into L2."""
    al = splat(0.0)
    ah = al
    for k in range(lane_, cl, LANES64):
        if ahead:
            prefetch_l2(xb, pfj + k * sn)
        x = vload_n(xb, p + k * sn + j, jn - j, _NINF)
        al = al + exp_f64(lo_f64(x) - m64l)
        ah = ah + exp_f64(hi_f64(x) - m64h)
    return al, ah


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _tile_sums_lane_major(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, pf, pjn, pn, jn2, mn):
    """The sums of short columns: ``W`` columns at a time, one lane at a
    time, the lane's running sum in a register; the lanes then go to the
    tree from a ``lanes x W`` scratch (L1). Accurate sums only: ``pf >= 0``:
    each strip of ``W`` columns also asks for the same strip of the next
    tile (``xb[pf:]``, ``pjn`` columns, ``cl`` rows ``sn`` apart) into L2
    (:data:`FETCH_TILE_BYTES`); ``pn >= 0``: each lane also takes a few
    vectors of the next tile (``jn2`` columns from ``xb[pn]``, ``cl`` rows
    too), row by row, into that tile's max ``mn`` (:data:`PIPED_LANE_ROWS`)."""
    if accurate:
        used = min(cl, LANES64)
        nv2 = (jn2 + W - 1) // W
        # the next tile's vectors a lane takes, rounded up: its lanes take
        # them all
        per = -(-(cl * nv2) // (((jn + W - 1) // W) * used)) if pn >= 0 else 0
        r = 0  # the next tile's row and vector that its max takes next
        v = 0
        for j in range(0, jn, W):
            pfj = pf + j if pf >= 0 and j < pjn else -1
            m = vload(mc, j)
            m64l = lo_f64(m)
            m64h = hi_f64(m)
            for lane_ in range(used):
                # two loops, not a test in one: the test cost in-cache tiles
                # 4-12% (in-process A/B)
                if pfj >= 0:
                    al, ah = _lane_sums64(xb, p, sn, cl, jn, j, lane_, m64l, m64h, True, pfj)
                else:
                    al, ah = _lane_sums64(xb, p, sn, cl, jn, j, lane_, m64l, m64h, False, 0)
                vstore(acc64, lane_ * W, al)
                vstore(acc64, lane_ * W + W // 2, ah)
                for _i in range(per):
                    if r < cl:
                        if r + _WIDE_AHEAD < cl:
                            prefetch_l2(xb, pn + (r + _WIDE_AHEAD) * sn + v * W)
                        _max_vec(xb, pn + r * sn, jn2, v * W, r == 0, mn)
                        v += 1
                        if v == nv2:
                            v = 0
                            r += 1
            _lane_tree(acc64, used, 2, W // 2, W, LANES64)
            for i in range(min(W, jn - j)):
                sc[j + i] = acc64[i]
    else:
        blocks = cl > SUM_BLOCK  # .segment._sum32's blocks (see the row-major sums)
        block = SUM_BLOCK if blocks else max(cl, 1)
        for j in range(0, jn, W):
            m = vload(mc, j)
            for b0 in range(0, cl, block):
                b1 = min(b0 + block, cl)
                used = min(b1 - b0, LANES32)
                for lane_ in range(used):
                    a = splat(_ZERO)
                    for k in range(b0 + lane_, b1, LANES32):
                        x = vload_n(xb, p + k * sn + j, jn - j, _NINF)
                        a = a + exp_f32_sum(x - m)  # the terms of .segment._sum32
                    vstore(acc32, lane_ * W, a)
                if blocks:
                    _widen_block(acc32, acc64, used, 1, W, b0 == 0)
            if blocks:
                _lane_tree(acc64, _WIDE_LANES, 2, W // 2, W, _WIDE_LANES)
                for i in range(min(W, jn - j)):
                    sc[j + i] = acc64[i]
            else:
                _lane_tree(acc32, used, 1, W, W, LANES32)
                for i in range(min(W, jn - j)):
                    sc[j + i] = np.float64(acc32[i])


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_sums_lane_piped(xb, p, sn, cl, jn, acc32, acc64, mc, sc, pn, jn2, mn):
    """:func:`_tile_sums_lane_major` (accurate) with the next tile's max
    (:data:`PIPED_LANE_ROWS`), compiled as a function of its own: inlined
    into :func:`forward_tiles` it read 1.01-1.03x on 64x96x56x56 and
    1.09-1.11x on 64x128x56x56 (in-process A/B against asking for the next
    tile), against 1.04-1.08x and 1.08-1.13x so."""
    wide_vectors()
    _tile_sums_lane_major(xb, p, sn, cl, jn, TRUE, acc32, acc64, mc, sc, -1, 0, pn, jn2, mn)


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_sums_row_major_apart(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J):
    """:func:`_tile_sums_row_major` (no next tile's max) compiled as a
    function of its own, for the write-piped tiles (:data:`WRITE_PIPED_BYTES`):
    inlined into :func:`forward_tiles` it made p04 0.93-0.97x."""
    wide_vectors()
    _tile_sums_row_major(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J, -1, 0, mc)


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _tile_sums_row_major(xb, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J, pn, jn2, mn, pf=-1, pjn=0):
    """The sums of long columns: row by row (each row of the tile is ``J``
    contiguous elements on one page), every lane of every column in a
    ``lanes x J`` scratch (float32 terms past ``SUM_BLOCK`` rows in blocks,
    as :func:`.segment._sum32`). ``pn >= 0``: each
    row ``k`` also takes row ``k`` of the next tile (``jn2`` columns from
    ``xb[pn]``, ``cl`` rows too) into that tile's max ``mn``
    (:func:`_max_row`); ``pf >= 0``: each row ``k`` of float32 terms asks
    for row ``k`` of the next tile (``pjn`` columns from ``xb[pf]``) into
    L2 (:func:`spans16`)."""
    nv = (jn + W - 1) // W
    if accurate:
        for lane_ in range(min(cl, LANES64)):  # lanes with no element hold 0
            for v in range(2 * nv):
                vstore(acc64, lane_ * J + v * (W // 2), splat(0.0))
        for k in range(cl):
            if pn >= 0:
                _max_row(xb, pn, sn, k, jn2, mn)
            q = (k % LANES64) * J
            for v in range(nv):
                j = v * W
                x = vload_n(xb, p + k * sn + j, jn - j, _NINF)
                m = vload(mc, j)
                a = q + j
                vstore(acc64, a, vload(acc64, a) + exp_f64(lo_f64(x) - lo_f64(m)))
                vstore(acc64, a + W // 2, vload(acc64, a + W // 2) + exp_f64(hi_f64(x) - hi_f64(m)))
        _lane_tree(acc64, min(cl, LANES64), 2 * nv, W // 2, J, LANES64)
        for j in range(jn):
            sc[j] = acc64[j]
    else:
        # .segment._sum32's blocks: past SUM_BLOCK rows, each block's lanes
        # go down to 16 and into float64 lanes (acc64), whose tree ends it
        blocks = cl > SUM_BLOCK
        block = SUM_BLOCK if blocks else max(cl, 1)
        for b0 in range(0, cl, block):
            b1 = min(b0 + block, cl)
            used = min(b1 - b0, LANES32)
            for lane_ in range(used):
                for v in range(nv):
                    vstore(acc32, lane_ * J + v * W, splat(_ZERO))
            for k in range(b0, b1):
                if pn >= 0:
                    _max_row(xb, pn, sn, k, jn2, mn)
                if pf >= 0:
                    for i in range(0, pjn, 64 // xb.itemsize):
                        prefetch_l2(xb, pf + k * sn + i)
                q = (k % LANES32) * J
                for v in range(nv):
                    j = v * W
                    x = vload_n(xb, p + k * sn + j, jn - j, _NINF)
                    e = exp_f32_sum(x - vload(mc, j))  # the terms of .segment._sum32
                    vstore(acc32, q + j, vload(acc32, q + j) + e)
            if blocks:
                _widen_block(acc32, acc64, used, nv, J, b0 == 0)
        if blocks:
            _lane_tree(acc64, _WIDE_LANES, 2 * nv, W // 2, J, _WIDE_LANES)
            for j in range(jn):
                sc[j] = acc64[j]
        else:
            _lane_tree(acc32, used, nv, W, J, LANES32)
            for j in range(jn):
                sc[j] = np.float64(acc32[j])


@njit(forceinline=True, error_model="numpy")
def _lane_tree(acc, used, nvec, w, J, lanes):
    """Add the lane rows of ``acc`` (row ``l`` at ``l * J``) by the tree
    of :mod:`.segment`: ``l + l + h`` for ``h = lanes/2, ..., 1``; rows at or
    past ``used`` are zero and are skipped (adding 0 changes no bit)."""
    h = lanes // 2
    while h >= 1:
        for lane_ in range(min(h, used)):
            if lane_ + h < used:
                a = lane_ * J
                b = (lane_ + h) * J
                for v in range(nvec):
                    vstore(acc, a + v * w, vload(acc, a + v * w) + vload(acc, b + v * w))
        h //= 2


#: the float64 lanes of a fast-path sum past SUM_BLOCK terms (.segment._sum32)
_WIDE_LANES = W


@njit(forceinline=True, error_model="numpy")
def _widen_block(acc32, acc64, used, nvec, J, first):
    """A block's ``used`` float32 lane rows of ``acc32`` taken down to 16 by
    the tree's first levels, ``(l + (l + 32)) + ((l + 16) + (l + 48))``, in
    one pass, and added into the float64 lane rows of ``acc64`` (``first``:
    stored), each vector's low 8 columns then its high 8:
    :func:`.segment._widen_block` per column. Lane rows the block did not
    reach hold nothing of it (adding 0 changes no bit). One pass where
    :func:`_lane_tree`'s two levels and the widening took three: in-process
    A/B against those, same bits (AMD EPYC Zen 3, numpy ``out=``), float16
    8x16x384x384 axis 2 1.02x, 2048x4096 float32 axis 0 1.01x, 16x1000x2048
    bfloat16 axis 1 1.01-1.02x: within a noisy run's spread."""
    for lane_ in range(min(used, _WIDE_LANES)):
        b = lane_ + _WIDE_LANES
        for v in range(nvec):
            a = lane_ * J + v * W
            x = vload(acc32, a)
            if lane_ + 2 * _WIDE_LANES < used:
                x = x + vload(acc32, a + 2 * _WIDE_LANES * J)
            if b < used:
                y = vload(acc32, b * J + v * W)
                if b + 2 * _WIDE_LANES < used:
                    y = y + vload(acc32, (b + 2 * _WIDE_LANES) * J + v * W)
                x = x + y
            if first:
                vstore(acc64, a, lo_f64(x))
                vstore(acc64, a + W // 2, hi_f64(x))
            else:
                vstore(acc64, a, vload(acc64, a) + lo_f64(x))
                vstore(acc64, a + W // 2, vload(acc64, a + W // 2) + hi_f64(x))
    if first:
        for lane_ in range(used, _WIDE_LANES):
            for v in range(nvec):
                vstore(acc64, lane_ * J + v * W, splat(0.0))
                vstore(acc64, lane_ * J + v * W + W // 2, splat(0.0))


@njit(forceinline=True, error_model="numpy")
def _merge_cols(m, s, mc, sc, jn, first):
    """Per column, :func:`.segment.merge` (the online-softmax rule)."""
    for j in range(jn):
        mcj = np.float64(mc[j])
        scj = sc[j]
        if first:
            m[j] = mcj
            s[j] = scj
        elif mcj > m[j]:
            s[j] = s[j] * math.exp(m[j] - mcj) + scj
            m[j] = mcj
        elif mcj == m[j]:
            s[j] = s[j] + scj
        else:
            s[j] = s[j] + scj * math.exp(mcj - m[j])


@njit(cache=True, nogil=True, error_model="numpy")
def _col_nan(xb, p, sn, cl, j):
    """Whether column ``j`` holds a NaN in ``cl`` rows from ``xb[p]``."""
    for k in range(cl):
        v = lane(vload_part(xb, p + k * sn + j, 1, _ZERO), 0)
        if v != v:
            return True
    return False


@njit(inline="always", error_model="numpy")  # a kernel body: package doc
def _column_stats(xb, xbase, xsn, xsi, n, jn, accurate, acc32, acc64, mc, sc, m, s, xst, J, pf, pjn, ask):
    """Per-column row stats ``(m, s)`` of a tile: chunk stats merged in chunk
    order (:func:`.rows.row_stats` on every column); ``pf``, ``pjn``: the
    next tile for :func:`_tile_sums_lane_major` to ask for (a tile of one
    chunk, unit-stride columns; else -1); ``ask``: whether the max pass asks
    for its rows ahead (:func:`_tile_max`)."""
    for c0 in range(0, n, CHUNK):
        cl = min(CHUNK, n - c0)
        buf, p, sn = _chunk_view(xb, xbase, xsn, xsi, c0, cl, jn, xst, J)
        _tile_stats(buf, p, sn, cl, jn, accurate, acc32, acc64, mc, sc, J, pf, pjn, ask)
        _column_fixups(buf, p, sn, cl, jn, mc, sc, m, s, c0 == 0)


@njit(forceinline=True, error_model="numpy")
def _column_fixups(buf, p, sn, cl, jn, mc, sc, m, s, first):
    """A chunk's stats ``(mc, sc)`` merged into ``(m, s)``, all--inf columns
    first set to a sum of 0 (or NaN if one of their values is NaN)."""
    for j in range(jn):
        if mc[j] == _NINF:
            sc[j] = np.nan if _col_nan(buf, p, sn, cl, j) else 0.0
    _merge_cols(m, s, mc, sc, jn, first)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_tiles(xb, ob, g, op, accurate, J, t0, t1):
    """Forward on tiles ``[t0, t1)`` (``t1 < 0``: to the last; tile ``t`` =
    outer index ``t // ntile``, columns from ``(t % ntile) * J``, moved by
    :func:`line_shift`). ``ob`` may be the memory of ``xb`` with the same
    geometry (in place): pass 2 reads each vector (or chunk stage) before
    writing it."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    n = g[2]
    ni = g[3]
    a = line_shift(ob, g, 1, J)
    ntile = tiles_per_outer(ni, J, a)
    if t1 < 0:
        t1 = g[0] * g[1] * ntile
    ccl = min(n, CHUNK)
    # two allocations only (+ W: a streamed row's last vector starts off the
    # W grid and reads its column statistics up to W - 1 past J)
    f32s = np.empty((LANES32 + 5) * J + W, np.float32)
    f64s = np.empty((LANES64 + 5) * J + W)
    acc32 = f32s[: LANES32 * J]
    mc, ma, la, ia = _rows4(f32s, LANES32, J)
    mn = f32s[(LANES32 + 4) * J : (LANES32 + 5) * J]  # the next tile's max
    acc64 = f64s[: LANES64 * J]
    sc, m, s, lg = _rows4(f64s, LANES64, J)
    inv = f64s[(LANES64 + 4) * J :]
    # the column statistics (see backward_tiles)
    f32s[LANES32 * J :] = 0.0
    f64s[LANES64 * J :] = 0.0
    staged = stages(g, xb.itemsize, ob.itemsize)
    xst = stage_for(xb, ccl * J, g[8] != 1 or staged)
    ost = stage_for(ob, ccl * J, g[13] != 1)
    span16 = spans16(ob, g, J) and not staged
    stream = _tiles_stream(ob, g, J) or span16
    # (span16 tiles ask for the next tile during their sums instead)
    fetch = stream and not staged and n * J * xb.itemsize <= FETCH_TILE_BYTES and not span16
    # accurate lane-major tiles ask for the next tile during their sums
    # instead of their write pass (FETCH_TILE_BYTES). Measured on Intel
    # first; on an AMD EPYC Zen 4 (LLVM znver4), where the write pass's asks
    # had been kept until measured, in-process A/B (2 threads, numpy out=,
    # same bits): 64x64x112x112 axis 1 1.17-1.24x in three runs
    sums_fetch = fetch and accurate and n <= LANE_MAJOR_ROWS and g[8] == 1
    # the next tile's max pass (from memory) runs inside this tile's sums,
    # not after them: wide tiles (tile_width_for: too big for L2 either way)
    # of one-chunk columns summed row-major, and accurate lane-major tiles
    # of PIPED_LANE_ROWS rows (instead of asking for the next tile)
    lanes_piped = sums_fetch and PIPED_LANE_ROWS[0] < n <= PIPED_LANE_ROWS[1] and ntile >= 2
    piped = lanes_piped or (J > 1024 and LANE_MAJOR_ROWS < n <= CHUNK and g[8] == 1 and not staged)
    # the max pass of a tile that the last one's sums asked for (up to
    # PIPED_LANE_ROWS[0] rows, and span16 tiles) asks for nothing itself: its rows are in L2,
    # where it took 0.075-0.095 ns/element with the asks and 0.068-0.086
    # without (64x64x56x56's tiles, one thread: python
    # benchmarks/strided_limits.py). In-process A/B (Intel Xeon, LLVM rocketlake, numpy out=,
    # same bits), NCHW axis 1 float32: 64x16x112x112 1.05-1.10x,
    # 64x32x112x112 1.07-1.10x, 64x48x56x56 1.03x, 64x64x56x56 1.02x (three
    # runs), 64x64x112x112 1.01x, 32x64x224x224 0.99-1.00x; over 64 rows it
    # lost (64x144x56x56 0.93-0.94x)
    quiet_max = sums_fetch and n <= PIPED_LANE_ROWS[0]
    # the next tile's max pass runs inside this tile's write pass
    # (WRITE_PIPED_BYTES, measured on Intel only): unstaged fast-path tiles
    # of one chunk over LANE_MAJOR_ROWS rows
    wpiped = (not accurate and not staged and not piped and LANE_MAJOR_ROWS < n <= CHUNK and g[8] == 1
              and n * J * xb.itemsize <= WRITE_PIPED_BYTES and not on_amd())
    for t in range(t0, t1):
        o, j0, jn = _tile_cols(t, ntile, J, ni, a)
        xbase, xsn, xsi = _tile_geom(g, 0, o, j0)
        obase, osn, osi = _tile_geom(g, 1, o, j0)
        src = xb  # where the passes read the tile: in place, or its stage
        if staged:  # the copy takes the max on the way
            _stage_rows(xb, xbase, xsn, n, jn, xst, J, mc)
            src, xbase, xsn = xst, 0, J
        if staged or piped or wpiped:  # one chunk
            pn, jn2 = -1, 0
            if piped or wpiped:
                if t == t0:
                    _tile_max(xb, xbase, xsn, n, jn, mc, TRUE)
                else:  # the max the last tile's sums (or write) took (copied: swapping
                    # the two rows instead made this kernel 0.92x, A/B)
                    for j in range(0, jn, W):
                        vstore(mc, j, vload(mn, j))
                if t + 1 < t1:
                    o2, j2, jn2 = _tile_cols(t + 1, ntile, J, ni, a)
                    pn, _nsn, _nsi = _tile_geom(g, 0, o2, j2)
            # a staged tile's accurate sums go lane-major: the stage is dense,
            # so a lane's rows are no longer a page each (LANE_MAJOR_ROWS), and
            # the float64 lanes stay in registers. One thread, 1000x65536 axis
            # 0: stage + sums 57.5 -> 51.6 ms (python benchmarks/column_passes.py
            # 1000x65536 --threads 1); in-process A/B, numpy out=,
            # same bits (AMD EPYC, LLVM znver4): 1 thread 1.09-1.16x, 2
            # threads 1.10-1.15x (one noisy run of four: 0.91-0.95),
            # 500x131072 1.04-1.13x. Float32 terms stay row-major (4000x16384:
            # its sums 11.7 ms row-major, 16.8 lane-major). On the Intel Xeon
            # (LLVM rocketlake) lane-major loses: the same A/B, 2 threads,
            # row-major / lane-major: 1000x65536 1.33-1.36x (36 against 49
            # ms: 37% -> 51-53% of the copy), 1000x16384 1.38x, 500x131072
            # 1.23x, one thread 1.35-1.36x; so lane-major on AMD only.
            if lanes_piped:
                _tile_sums_lane_piped(src, xbase, xsn, n, jn, acc32, acc64, mc, sc, pn, jn2, mn)
            elif staged and accurate and on_amd():
                _tile_sums_lane_major(src, xbase, xsn, n, jn, accurate, acc32, acc64, mc, sc, -1, 0, -1, 0, mc)
            elif wpiped:  # (the next tile's max goes to the write pass)
                _tile_sums_row_major_apart(src, xbase, xsn, n, jn, accurate, acc32, acc64, mc, sc, J)
            else:
                _tile_sums_row_major(src, xbase, xsn, n, jn, accurate, acc32, acc64, mc, sc, J, pn, jn2, mn)
            _column_fixups(src, xbase, xsn, n, jn, mc, sc, m, s, True)
        else:
            pf, pjn = -1, 0
            if (sums_fetch or span16) and t + 1 < t1:
                o2, j2, pjn = _tile_cols(t + 1, ntile, J, ni, a)
                pf, _psn, _psi = _tile_geom(g, 0, o2, j2)
            _column_stats(xb, xbase, xsn, xsi, n, jn, accurate, acc32, acc64, mc, sc, m, s, xst, J,
                          pf, pjn, not ((quiet_max or span16) and t > t0))
        # only the statistics pass 2 reads (forward_vec): the float32 ones
        # for the fast path, 1/s for softmax
        for j in range(0, jn, W // 2):
            v = vload_n(s, j, jn - j, 1.0)
            if op == _LSM:
                vstore_n(lg, j, log_f64(v), jn - j)
            else:
                vstore_n(inv, j, 1.0 / v, jn - j)
        if not accurate:
            for j in range(jn):
                ma[j] = np.float32(m[j])
                if op == _LSM:
                    la[j] = np.float32(lg[j])
                else:
                    ia[j] = np.float32(inv[j])
        for c0 in range(0, n, CHUNK):
            cl = min(CHUNK, n - c0)
            buf, p, sn = _chunk_view(src, xbase, xsn, xsi, c0, cl, jn, xst, J)
            if osi == 1:
                ot, q, qsn = ob, obase + c0 * osn, osn
            else:
                ot, q, qsn = ost, 0, J
            if span16:  # (whole rows end to end: sn = qsn = jn, osi = 1)
                _tile_write_span16(buf, p, ob, q, cl, jn, op, accurate, m, lg, inv, ma, la, ia)
                continue
            pf = -1  # the next tile's rows, asked into L2 while this one writes
            pjn = 0
            if fetch and not sums_fetch and not wpiped and xsi == 1 and t + 1 < t1:
                o2, j2, pjn = _tile_cols(t + 1, ntile, J, ni, a)
                pf, _psn, _psi = _tile_geom(g, 0, o2, j2)
            wn = pn if wpiped else -1  # (pn, jn2: the next tile's, set above)
            _tile_write(buf, p, sn, ot, q, qsn, cl, jn, op, accurate, m, lg, inv, ma, la, ia,
                        stream and osi == 1, pf, pjn, wn, jn2, mn)
            if osi != 1:
                _stage_out(ost, ob, obase, osn, osi, c0, cl, jn, J)
    if stream:
        sfence()


@njit(forceinline=True, error_model="numpy")
def _row_stream(ob, po, qsn, jn, stream):
    """How pass 2 writes the ``jn`` columns of a tile row at ``ob[po]``:
    ``(j, end)`` = streaming stores on ``[j, end)`` (from the first 64-byte
    boundary to the last whole line), ordinary ones elsewhere; ``(0, 0)``
    when not streaming, after claiming the lines ``_AHEAD`` rows ahead on
    narrow tiles."""
    head = stream_head(ob, po) if stream else -1
    if head < 0:
        if jn <= _AHEAD_COLS:
            for j in range(0, jn, W):
                prefetch_w(ob, po + _AHEAD * qsn + j)
        return 0, 0
    j = min(head, jn)
    return j, stream_end(ob, po + j, po + jn) - po


@njit(forceinline=True, error_model="numpy")
def _wrapped_vec(xb, i, c, jn, m, b, ma, d, op, accurate):
    """:func:`.segment.forward_vec` of the vector ``xb[i:i + W]`` whose first
    element is in column ``c`` of a tile of ``jn`` columns whose rows lie
    end to end: lanes past the row's end are the next row's first columns,
    and take their statistics, lane by lane, from a load ``jn`` elements
    back (``c - jn < 0``: it reads up to ``W - 1`` elements before each
    statistics array, which :func:`forward_tiles` keeps in rows of one
    scratch, each after another, and discards them)."""
    if c + W <= jn:
        return forward_vec(vload(xb, i), vload(m, c), vload(m, c + W // 2), vload(b, c),
                           vload(b, c + W // 2), vload(ma, c), vload(d, c), op, accurate)
    t = jn - c  # lanes j < t are in this row
    lo, hi, f = lanes_below64(t), lanes_below64(t - W // 2), lanes_below(t)
    w = c - jn
    return forward_vec(vload(xb, i), where(lo, vload(m, c), vload(m, w)),
                       where(hi, vload(m, c + W // 2), vload(m, w + W // 2)),
                       where(lo, vload(b, c), vload(b, w)), where(hi, vload(b, c + W // 2), vload(b, w + W // 2)),
                       where(f, vload(ma, c), vload(ma, w)), where(f, vload(d, c), vload(d, w)), op, accurate)


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_write_span16(xb, p, ob, q, cl, jn, op, accurate, m, lg, inv, ma, la, ia):
    """Pass 2 of a 16-bit tile whose rows lie end to end in both ``xb`` and
    ``ob`` (a whole plane's width), as one span: every 64-byte line from
    the span's first boundary to its last by a streaming store of two
    vectors, a line that holds one row's end and the next row's start too
    (:func:`_wrapped_vec`); ordinary stores only for the span's first and
    last partial lines (:func:`spans16` has the measurements). The pairs
    are stored by :func:`._vec.vstore_pair_nt` with a group that does not
    interleave (the float64 ``m``): they were loaded by :func:`vload`.
    :func:`forward_tiles` calls it for :func:`spans16`'s tiles in place of
    :func:`_tile_write`, with the same statistics."""
    wide_vectors()
    b = lg if op == _LSM else inv
    d = la if op == _LSM else ia
    total = cl * jn
    h = min(stream_head(ob, q), total)
    for i in range(0, h, W):  # (h < 32 <= jn: all in row 0)
        y = forward_vec(vload_n(xb, p + i, h - i, _ZERO), vload(m, i), vload(m, i + W // 2),
                        vload(b, i), vload(b, i + W // 2), vload(ma, i), vload(d, i), op, accurate)
        vstore_n(ob, q + i, y, h - i)
    e = stream_end(ob, q + h, q + total) - q
    k = h
    c = h  # the column of element k
    while k < e:
        y0 = _wrapped_vec(xb, p + k, c, jn, m, b, ma, d, op, accurate)
        c += W
        if c >= jn:
            c -= jn
        y1 = _wrapped_vec(xb, p + k + W, c, jn, m, b, ma, d, op, accurate)
        c += W
        if c >= jn:
            c -= jn
        vstore_pair_nt(ob, q + k, y0, y1, (ob, m))
        k += 2 * W
    while k < total:  # the last partial line (in the last row)
        n = min(W, total - k)
        y = forward_vec(vload_n(xb, p + k, n, _ZERO), vload(m, c), vload(m, c + W // 2),
                        vload(b, c), vload(b, c + W // 2), vload(ma, c), vload(d, c), op, accurate)
        vstore_n(ob, q + k, y, n)
        k += W
        c += W


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_write(xb, p, sn, ob, q, qsn, cl, jn, op, accurate, m, lg, inv, ma, la, ia, stream, pf, pjn,
                pn, jn2, mn):
    """Pass 2 on a chunk of a tile (:func:`.segment.write_forward` per
    column); ``stream``: each output row by streaming stores from its first
    64-byte boundary (ordinary ones before it and for its last partial
    vector; :func:`.segment.stream_head`). ``pf >= 0``: each row ``k``
    also asks for row ``k`` of the next tile, ``xb[pf + k * sn:][:pjn]``,
    into L2 (:data:`FETCH_TILE_BYTES`). ``pn >= 0``: each row ``k`` also
    takes row ``k`` of the next tile (``jn2`` columns from ``xb[pn]``, as
    many rows) into that tile's max ``mn`` (:data:`WRITE_PIPED_BYTES`).
    Streamed float32 rows go :data:`WRITE_ROWS` a sweep where they can; the
    same values either way."""
    wide_vectors()
    # forward_vec gets the loaded vectors, not the arrays: an inlined helper
    # taking six arrays made this kernel 5x slower when called from Python
    b = lg if op == _LSM else inv  # the second statistic, per precision
    d = la if op == _LSM else ia
    k = 0
    if (stream and ob.itemsize == 4 and cl * jn * 4 <= WRITE_ROWS_BYTES and (qsn * 4) % 64 == 0
            and address(ob, q) % 4 == 0):
        # streamed float32 rows that share their line offset: WRITE_ROWS
        # rows a sweep, each vector's statistics loaded once for them all
        # (a float32 vector is a line, so only a head and a tail are
        # partial, each under a vector; elements off 4-byte alignment would
        # not stream at all, hence the address test). Folding the heads and
        # tails into the row-at-a-time loop below, one copy of each, read
        # 0.98-1.00x on 64x64x56x56 and 64x64x112x112 (in-process A/B, four
        # runs), so the sweep keeps its own.
        while k + WRITE_ROWS <= cl:
            for r in range(WRITE_ROWS):
                px = p + (k + r) * sn
                po = q + (k + r) * qsn
                if pn >= 0:
                    _max_step(xb, pn, sn, k + r, jn2, mn, TRUE)
                if pf >= 0:
                    for i in range(0, pjn, 64 // xb.itemsize):
                        prefetch_l2(xb, pf + (k + r) * sn + i)
                j, end = _row_stream(ob, po, qsn, jn, True)
                for i in range(0, j, W):  # the ordinary head
                    y = forward_vec(vload_n(xb, px + i, j - i, _ZERO), vload(m, i), vload(m, i + W // 2),
                                    vload(b, i), vload(b, i + W // 2), vload(ma, i), vload(d, i), op, accurate)
                    vstore_n(ob, po + i, y, j - i)
                if end < jn:  # the ordinary tail, under a vector
                    y = forward_vec(vload_n(xb, px + end, jn - end, _ZERO), vload(m, end),
                                    vload(m, end + W // 2), vload(b, end), vload(b, end + W // 2),
                                    vload(ma, end), vload(d, end), op, accurate)
                    vstore_n(ob, po + end, y, jn - end)
            while j < end:
                m0 = vload(m, j)
                m1 = vload(m, j + W // 2)
                b0 = vload(b, j)
                b1 = vload(b, j + W // 2)
                c = vload(ma, j)
                e = vload(d, j)
                for r in range(WRITE_ROWS):
                    y = forward_vec(vload(xb, p + (k + r) * sn + j), m0, m1, b0, b1, c, e, op, accurate)
                    vstore_nt(ob, q + (k + r) * qsn + j, y)
                j += W
            k += WRITE_ROWS
    for k in range(k, cl):
        px = p + k * sn
        po = q + k * qsn
        if pn >= 0:
            _max_step(xb, pn, sn, k, jn2, mn, TRUE)
        if pf >= 0:
            for i in range(0, pjn, 64 // xb.itemsize):
                prefetch_l2(xb, pf + k * sn + i)
        j, end = _row_stream(ob, po, qsn, jn, stream)
        for i in range(0, j, W):  # the ordinary head
            y = forward_vec(vload_n(xb, px + i, j - i, _ZERO), vload(m, i), vload(m, i + W // 2),
                        vload(b, i), vload(b, i + W // 2), vload(ma, i), vload(d, i), op, accurate)
            vstore_n(ob, po + i, y, j - i)
        while j < end:
            y = forward_vec(vload(xb, px + j), vload(m, j), vload(m, j + W // 2),
                        vload(b, j), vload(b, j + W // 2), vload(ma, j), vload(d, j), op, accurate)
            vstore_nt(ob, po + j, y)
            j += W
        while j < jn:
            y = forward_vec(vload_n(xb, px + j, jn - j, _ZERO), vload(m, j), vload(m, j + W // 2),
                        vload(b, j), vload(b, j + W // 2), vload(ma, j), vload(d, j), op, accurate)
            vstore_n(ob, po + j, y, jn - j)
            j += W


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_grad_sum(db, pd, dsn, yb, py, ysn, cl, jn, op, acc64, sc, J):
    """Per-column chunk sums of ``diff_dst`` (or ``diff_dst * dst``) over
    :data:`.segment.GRAD_LANES` float64 lanes (:func:`.segment.chunk_grad_sum`
    per column)."""
    wide_vectors()
    if cl <= LANE_MAJOR_ROWS:  # (as _tile_sums_lane_major)
        used = min(cl, GRAD_LANES)
        for j in range(0, jn, W):
            for lane_ in range(used):
                lo = splat(0.0)
                hi = lo
                for k in range(lane_, cl, GRAD_LANES):
                    lo, hi = grad_add(lo, hi, db, pd + k * dsn + j, yb, py + k * ysn + j, jn - j, op)
                vstore(acc64, lane_ * W, lo)
                vstore(acc64, lane_ * W + W // 2, hi)
            _lane_tree(acc64, used, 2, W // 2, W, GRAD_LANES)
            for i in range(min(W, jn - j)):
                sc[j + i] = acc64[i]
        return
    nv = (jn + W - 1) // W
    for lane_ in range(min(cl, GRAD_LANES)):
        for v in range(2 * nv):
            vstore(acc64, lane_ * J + v * (W // 2), splat(0.0))
    for k in range(cl):
        q = (k % GRAD_LANES) * J
        for v in range(nv):
            j = v * W
            d = vload_n(db, pd + k * dsn + j, jn - j, _ZERO)
            a = q + j
            if op == _LSM:
                lo = lo_f64(d)
                hi = hi_f64(d)
            else:
                y = vload_n(yb, py + k * ysn + j, jn - j, _ZERO)
                lo = lo_f64(d) * lo_f64(y)
                hi = hi_f64(d) * hi_f64(y)
            vstore(acc64, a, vload(acc64, a) + lo)
            vstore(acc64, a + W // 2, vload(acc64, a + W // 2) + hi)
    _lane_tree(acc64, min(cl, GRAD_LANES), 2 * nv, W // 2, J, GRAD_LANES)
    for j in range(jn):
        sc[j] = acc64[j]


@njit(forceinline=True, error_model="numpy")
def _grad_vec(d, y, sl, sh, sa, op, accurate, half):
    """Pass 2 of the backward on one vector of a tile row, from loaded
    column statistics: float64 ``sl``, ``sh`` (accurate), float32 ``sa``;
    ``half``: the output is 16-bit (:func:`.segment.backward_vec`)."""
    if accurate:
        if op == _LSM:
            return join_f32(
                vfma(exp_f64_any(lo_f64(y)), -sl, lo_f64(d)),
                vfma(exp_f64_any(hi_f64(y)), -sh, hi_f64(d)),
            )
        return join_f32(lo_f64(y) * (lo_f64(d) - sl), hi_f64(y) * (hi_f64(d) - sh))
    if op == _LSM:
        return vfma(exp_f32_for(y, half), -sa, d)
    return y * (d - sa)


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_grad_write(db, pd, dsn, yb, py, ysn, ob, q, qsn, cl, jn, op, accurate, s, sa, stream):
    """Pass 2 of the backward on a chunk of a tile (per column as
    :func:`.segment.write_backward`); ``stream``: each output row by
    streaming stores from its first 64-byte boundary, as :func:`_tile_write`."""
    wide_vectors()
    for k in range(cl):
        pdk = pd + k * dsn
        pyk = py + k * ysn
        po = q + k * qsn
        j, end = _row_stream(ob, po, qsn, jn, stream)
        for i in range(0, j, W):  # the ordinary head
            g_ = _grad_vec(vload_n(db, pdk + i, j - i, _ZERO), vload_n(yb, pyk + i, j - i, _ZERO),
                           vload(s, i), vload(s, i + W // 2), vload(sa, i), op, accurate,
                           ob.itemsize == 2)
            vstore_n(ob, po + i, g_, j - i)
        while j < end:
            g_ = _grad_vec(vload(db, pdk + j), vload(yb, pyk + j),
                           vload(s, j), vload(s, j + W // 2), vload(sa, j), op, accurate,
                           ob.itemsize == 2)
            vstore_nt(ob, po + j, g_)
            j += W
        while j < jn:
            g_ = _grad_vec(vload_n(db, pdk + j, jn - j, _ZERO), vload_n(yb, pyk + j, jn - j, _ZERO),
                           vload(s, j), vload(s, j + W // 2), vload(sa, j), op, accurate,
                           ob.itemsize == 2)
            vstore_n(ob, po + j, g_, jn - j)
            j += W


@njit(cache=True, nogil=True, error_model="numpy")
def backward_tiles(db, yb, ob, g, op, accurate, J, t0, t1):
    """Backward on tiles ``[t0, t1)`` (as :func:`forward_tiles`); ``ob`` may
    be the memory of ``db`` or ``yb`` with the same geometry (in place)."""
    accurate = accurate and float32_result(ob)  # (a constant for 16-bit results)
    wide_vectors()
    n = g[2]
    ni = g[3]
    a = line_shift(ob, g, 2, J)
    ntile = tiles_per_outer(ni, J, a)
    if t1 < 0:
        t1 = g[0] * g[1] * ntile
    ccl = min(n, CHUNK)
    # (+ W: a streamed row's last vector starts off the W grid and reads
    # its column statistics up to W - 1 past J, as in forward_tiles)
    f64s = np.empty((GRAD_LANES + 2) * J + W)
    acc64 = f64s[: GRAD_LANES * J]
    sc = f64s[GRAD_LANES * J : (GRAD_LANES + 1) * J]
    s = f64s[(GRAD_LANES + 1) * J :]
    sa = np.empty(J + W, np.float32)
    # pass 2 computes whole vectors: lanes past a tile's last column read
    # these, and garbage there (a denormal) costs a microcode assist per
    # row -- 1000x100 axis 0 ran 2.1x slower than 1000x96
    s[:] = 0.0
    sa[:] = 0.0
    dst_ = stage_for(db, ccl * J, g[8] != 1)
    yst = stage_for(yb, ccl * J, g[13] != 1)
    ost = stage_for(ob, ccl * J, g[18] != 1)
    stream = _tiles_stream(ob, g, J)
    for t in range(t0, t1):
        o, j0, jn = _tile_cols(t, ntile, J, ni, a)
        dbase, dsn, dsi = _tile_geom(g, 0, o, j0)
        ybase, ysn, ysi = _tile_geom(g, 1, o, j0)
        obase, osn, osi = _tile_geom(g, 2, o, j0)
        for j in range(jn):
            s[j] = 0.0
        for c0 in range(0, n, CHUNK):
            cl = min(CHUNK, n - c0)
            bd, pd, sd = _chunk_view(db, dbase, dsn, dsi, c0, cl, jn, dst_, J)
            by, py, sy = _chunk_view(yb, ybase, ysn, ysi, c0, cl, jn, yst, J)
            _tile_grad_sum(bd, pd, sd, by, py, sy, cl, jn, op, acc64, sc, J)
            for j in range(jn):  # chunk sums added in order, as the rows do
                s[j] += sc[j]
        for j in range(jn):
            sa[j] = np.float32(s[j])
        for c0 in range(0, n, CHUNK):
            cl = min(CHUNK, n - c0)
            bd, pd, sd = _chunk_view(db, dbase, dsn, dsi, c0, cl, jn, dst_, J)
            by, py, sy = _chunk_view(yb, ybase, ysn, ysi, c0, cl, jn, yst, J)
            if osi == 1:
                ot, q, qsn = ob, obase + c0 * osn, osn
            else:
                ot, q, qsn = ost, 0, J
            _tile_grad_write(bd, pd, sd, by, py, sy, ot, q, qsn, cl, jn, op, accurate, s, sa,
                             stream and osi == 1)
            if osi != 1:
                _stage_out(ost, ob, obase, osn, osi, c0, cl, jn, J)
    if stream:
        sfence()


@njit(cache=True, nogil=True, error_model="numpy")
def logsumexp_tiles(xb, rb, g, J, t0, t1):
    """float64 logsumexp of every column of tiles ``[t0, t1)`` into ``rb``
    (operand 1 of ``g``), from the accurate stats (as :func:`.rows.logsumexp_range`)."""
    wide_vectors()
    n = g[2]
    ni = g[3]
    ntile = (ni + J - 1) // J
    ccl = min(n, CHUNK)
    mc = np.empty(J, np.float32)
    acc32 = mc  # unused: the accurate stats only
    f64s = np.empty((LANES64 + 4) * J)
    acc64 = f64s[: LANES64 * J]
    sc, m, s, lg = _rows4(f64s, LANES64, J)
    xst = stage_for(xb, ccl * J, g[8] != 1)
    for t in range(t0, t1):
        o, j0, jn = _tile_cols(t, ntile, J, ni, 0)
        xbase, xsn, xsi = _tile_geom(g, 0, o, j0)
        rbase, _, rsi = _tile_geom(g, 1, o, j0)
        _column_stats(xb, xbase, xsn, xsi, n, jn, TRUE, acc32, acc64, mc, sc, m, s, xst, J, -1, 0, TRUE)
        for j in range(0, jn, W // 2):
            vstore_n(lg, j, log_f64(vload_n(s, j, jn - j, 1.0)), jn - j)
        for j in range(jn):
            if m[j] == np.inf:
                nan = _col_nan(xb, xbase + j * xsi, xsn, n, I0)
                v = np.nan if nan else np.inf
            else:
                v = m[j] + lg[j]
            rb[rbase + j * rsi] = v


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def logsumexp_parallel(xb, rb, g, J, ntask):
    """:func:`logsumexp_tiles` over every tile, ``ntask`` ranges in parallel."""
    tiles = g[0] * g[1] * ((g[3] + J - 1) // J)
    for t in prange(ntask):
        logsumexp_tiles(xb, rb, g, J, t * tiles // ntask, (t + 1) * tiles // ntask)
