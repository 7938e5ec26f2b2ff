"""The passes of a staged column forward, timed one by one.

Long float32 columns whose rows lie a multiple of 4 KiB apart are copied a
tile at a time into a dense stage (``columns.staged_rows``), then summed,
then written. This script runs the kernel's own pieces over every tile of a
problem, cumulatively, interleaved in one process, next to a copy of the
same bytes:

* ``stage + max``: ``columns._stage_rows`` (the copy into the stage, with
  the per-column max);
* ``+ sums row-major`` / ``+ sums lane-major``: then the tile's sums by
  either loop (``_tile_sums_row_major``, ``_tile_sums_lane_major``);
* ``whole forward``: ``columns.forward_tiles`` in parallel (the write pass is the
  difference from the sums the kernel takes).

The measurements behind the lane-major sums of staged accurate tiles
(``columns.forward_tiles``)::

    python benchmarks/column_passes.py 1000x65536 --threads 1
    python benchmarks/column_passes.py 4000x16384 --threads 1

``--bounds`` adds what bounds each pass, on the same bytes and threads:

* ``read bound``: the tiles read as the stage pass reads them (rows asked
  for ahead into L2), with their max, but stored nowhere;
* ``sums arithmetic``: the accurate lane-major sums of as many elements,
  from a tile of 64 columns that stays in L2 (the arithmetic alone);
* ``write bound``: streaming stores of the whole output in tile order, no
  arithmetic (``out`` must start on a 64-byte line);

and their total against the issue's 50%-of-a-copy budget (twice the copy's
time). The passes run one after another in each thread; the sum of their
bounds is the kernel's floor unless passes overlap. On the AMD EPYC (LLVM
znver4) every overlap tried lost to the kernel's 1024 columns and one
stage (scratch drivers, 2 threads, 1000x65536; docs/performance.md, the
fifth Zen 4 session): two stages used in turn, 34.8 -> 46.7 ms for
stage + sums; the next tile's stage copied between the lanes of this
one's sums, 25.1 -> 39.7-41.8 ms (512 columns: 29.9 -> 28.0-35.3); the
last tile's write pass between them, 37.3 -> 55.1-63.6 ms (512 columns:
50.5 -> 41.4-47.5).

The reduction runs over axis 0 of a 2-d float32 array; its rows must be a
multiple of 4 KiB apart (the staged case). Prints one table (ms, medians).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

import logsoftmax
from logsoftmax.backends import Op
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu import native, segment
from logsoftmax.backends.cpu.layout import layout
from logsoftmax.backends.cpu._vec import prefetch_l2, sfence, splat, vstore_nt
from logsoftmax.backends.cpu.segment import LANES32, LANES64, W

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, median_seconds  # noqa: E402


@njit(nogil=True, error_model="numpy")
def _passes(xb, ob, g, accurate, J, t0, t1, sums):
    """Stage tiles ``[t0, t1)`` (with their max), then sum them: ``sums`` 0
    none, 1 row-major, 2 lane-major."""
    n = g[2]
    ni = g[3]
    a = C.line_shift(ob, g, 1, J)
    ntile = C.tiles_per_outer(ni, J, a)
    f32s = np.empty((LANES32 + 5) * J + W, np.float32)
    f64s = np.empty((LANES64 + 5) * J + W)
    acc32 = f32s[: LANES32 * J]
    mc = f32s[LANES32 * J : (LANES32 + 1) * J]
    acc64 = f64s[: LANES64 * J]
    sc = f64s[LANES64 * J : (LANES64 + 1) * J]
    stage = np.empty(n * J, np.float32)
    for t in range(t0, t1):
        o, j0, jn = C._tile_cols(t, ntile, J, ni, a)
        base, sn, _si = C._tile_geom(g, 0, o, j0)
        C._stage_rows(xb, base, sn, n, jn, stage, J, mc)
        if sums == 1:
            C._tile_sums_row_major(stage, 0, J, n, jn, accurate, acc32, acc64, mc, sc, J, -1, 0, mc)
        elif sums == 2:
            C._tile_sums_lane_major(stage, 0, J, n, jn, accurate, acc32, acc64, mc, sc, -1, 0, -1, 0, mc)
    return sc[0]


@njit(nogil=True, error_model="numpy")
def _read_bound(xb, ob, g, J, t0, t1):
    """The stage pass's reads of tiles ``[t0, t1)``, their max only."""
    ni = g[3]
    a = C.line_shift(ob, g, 1, J)
    ntile = C.tiles_per_outer(ni, J, a)
    mc = np.empty(J + W, np.float32)
    for t in range(t0, t1):
        o, j0, jn = C._tile_cols(t, ntile, J, ni, a)
        base, sn, _si = C._tile_geom(g, 0, o, j0)
        for k in range(g[2]):
            for j in range(0, jn, W):
                prefetch_l2(xb, base + (k + C._WIDE_AHEAD) * sn + j)
            C._max_row(xb, base, sn, k, jn, mc)
    return mc[0]


@njit(nogil=True, error_model="numpy")
def _sums_bound(n, elements):
    """The accurate lane-major sums of ``elements`` values of columns of
    ``n``, from one 64-column tile in L2 taken again and again."""
    J = 64
    x = np.empty(n * J, np.float32)
    for i in range(n * J):
        x[i] = np.float32((i * 7919) % 1000) * np.float32(-0.003)
    mc = np.zeros(J, np.float32)
    sc = np.empty(J)
    acc64 = np.empty(LANES64 * J)
    acc32 = np.empty(LANES32 * J, np.float32)
    total = 0.0
    for _ in range(max(1, elements // (n * J))):
        C._tile_sums_lane_major(x, 0, J, n, J, True, acc32, acc64, mc, sc, -1, 0, -1, 0, mc)
        total += sc[0]
    return total


@njit(nogil=True, error_model="numpy")
def _write_bound(ob, g, J, t0, t1):
    """Streaming stores of tiles ``[t0, t1)`` of the output, rows in turn."""
    ni = g[3]
    a = C.line_shift(ob, g, 1, J)
    ntile = C.tiles_per_outer(ni, J, a)
    y = splat(np.float32(-1.0))
    for t in range(t0, t1):
        o, j0, jn = C._tile_cols(t, ntile, J, ni, a)
        base, sn, _si = C._tile_geom(g, 1, o, j0)
        for k in range(g[2]):
            for j in range(0, jn, W):
                vstore_nt(ob, base + k * sn + j, y)
    sfence()


@njit(nogil=True, parallel=True, error_model="numpy")
def _bound_parallel(xb, ob, g, J, ntask, which):
    tiles = g[0] * g[1] * C.tiles_per_outer(g[3], J, C.line_shift(ob, g, 1, J))
    for t in prange(ntask):
        if which == 0:
            _read_bound(xb, ob, g, J, t * tiles // ntask, (t + 1) * tiles // ntask)
        elif which == 1:
            _sums_bound(g[2], g[2] * g[3] // ntask)
        else:
            _write_bound(ob, g, J, t * tiles // ntask, (t + 1) * tiles // ntask)


@njit(nogil=True, parallel=True, error_model="numpy")
def _passes_parallel(xb, ob, g, accurate, J, ntask, sums):
    tiles = g[0] * g[1] * C.tiles_per_outer(g[3], J, C.line_shift(ob, g, 1, J))
    for t in prange(ntask):
        _passes(xb, ob, g, accurate, J, t * tiles // ntask, (t + 1) * tiles // ntask, sums)


@njit(nogil=True, parallel=True)
def _copy(src, dst, ntask):
    n = src.size
    for t in prange(ntask):
        dst[t * n // ntask : (t + 1) * n // ntask] = src[t * n // ntask : (t + 1) * n // ntask]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", help="rows x columns, e.g. 1000x65536 (reduced over the rows)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--bounds", action="store_true", help="also time each pass's bound (see above)")
    args = ap.parse_args(argv)
    shape = tuple(int(v) for v in args.shape.split("x"))
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    threads = numba.get_num_threads()
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32) * 3
    out = logsoftmax.log_softmax(x, axis=0)
    lay = layout(shape, [x.strides, out.strides], [4, 4], 0)
    xb, ob = lay.buffers([x, out])
    _, _, n, ni = lay.dims
    if not C.staged_rows(n, lay.g[7] * 4, 4):
        raise SystemExit(f"{args.shape} axis 0 is not a staged problem (columns.staged_rows)")
    J = int(C.tile_width_for(n, ni, False, threads, staged=True))  # as the library (stages)
    accurate = np.bool_(n <= segment.SHORT)
    whole = native.Parallel(C, "forward_tiles", native.over_tiles)
    fns = {
        "copy of the same bytes": lambda: _copy(xb, ob, threads),
        "stage + max": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 0),
        "+ sums row-major": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 1),
        "+ sums lane-major": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 2),
        "whole forward": lambda: whole(threads, xb, ob, lay.g, int(Op.LOG_SOFTMAX), accurate, J),
    }
    bounds = ("read bound", "sums arithmetic", "write bound")
    if args.bounds:
        if ob.ctypes.data % 64 or (ni * 4) % 64 or J % W:
            raise SystemExit("--bounds needs rows of whole 64-byte lines")
        for which, name in enumerate(bounds):
            fns[name] = (lambda w=which: _bound_parallel(xb, ob, lay.g, J, threads, w))
    sec = median_seconds(fns, args.rounds)  # a warm-up call each, interleaved rounds
    print(f"CPU: {cpu_info()['model']}; {threads} thread(s); {args.shape} axis 0 float32; "
          f"{J} columns a tile; accurate path: {bool(accurate)}; medians of {args.rounds}")
    print("| pass | ms |\n|---|---:|")
    for k, v in sec.items():
        print(f"| {k} | {v * 1e3:.2f} |")
    if args.bounds:
        floor = sum(sec[k] for k in bounds)
        budget = 2 * sec["copy of the same bytes"]
        print(f"\nsum of the bounds {floor * 1e3:.2f} ms = {floor / budget:.2f}x the 50%-of-copy budget "
              f"({budget * 1e3:.2f} ms); the whole forward at {sec['copy of the same bytes'] / sec['whole forward']:.0%} "
              f"of the copy's bandwidth")


if __name__ == "__main__":
    main()
