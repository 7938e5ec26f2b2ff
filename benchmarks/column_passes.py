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
* ``whole forward``: ``columns.forward_parallel`` (the write pass is the
  difference from the sums the kernel takes).

The measurements behind the lane-major sums of staged accurate tiles
(``columns.forward_tiles``)::

    python benchmarks/column_passes.py 1000x65536 --threads 1
    python benchmarks/column_passes.py 4000x16384 --threads 1

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
from logsoftmax.backends.cpu import segment
from logsoftmax.backends.cpu.layout import layout
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
            C._tile_sums_lane_major(stage, 0, J, n, jn, accurate, acc32, acc64, mc, sc)
    return sc[0]


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
    J = int(C.tile_width_for(n, ni, False, threads))
    accurate = np.bool_(n <= segment.SHORT)
    fns = {
        "copy of the same bytes": lambda: _copy(xb, ob, threads),
        "stage + max": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 0),
        "+ sums row-major": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 1),
        "+ sums lane-major": lambda: _passes_parallel(xb, ob, lay.g, accurate, J, threads, 2),
        "whole forward": lambda: C.forward_parallel(xb, ob, lay.g, int(Op.LOG_SOFTMAX), accurate, J, threads),
    }
    sec = median_seconds(fns, args.rounds)  # a warm-up call each, interleaved rounds
    print(f"CPU: {cpu_info()['model']}; {threads} thread(s); {args.shape} axis 0 float32; "
          f"{J} columns a tile; accurate path: {bool(accurate)}; medians of {args.rounds}")
    print("| pass | ms |\n|---|---:|")
    for k, v in sec.items():
        print(f"| {k} | {v * 1e3:.2f} |")


if __name__ == "__main__":
    main()
