"""How fast a column kernel can read its tiles, next to a copy and a plain read.

A tile of a column problem (reduced over axis 0 of a ``rows x columns``
float32 array, rows far apart) is ``rows`` short runs of ``J`` columns, each
on its own page: the hardware prefetcher stops at page boundaries and
starts afresh on every run. This script times, on 2 threads, interleaved in
one process:

* a copy of the whole array, and a plain linear read of it (max);
* the tile-by-tile read of the column max pass (``J`` = 1024, 2048), asking
  for the row ``A`` rows ahead by ``prefetcht0`` (L1), ``prefetcht1`` (L2)
  or not at all;
* the same with each row also copied into a dense stage (the staged
  forward's first pass, :func:`logsoftmax.backends.cpu.columns._stage_rows`).

The measurement behind ``columns._WIDE_AHEAD``::

    python benchmarks/column_reads.py 1000x65536

Prints one table (ms, medians of ``--rounds``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from numba import njit, prange

from logsoftmax.backends.cpu._vec import W, prefetch, prefetch_l2, vload, vstore
from logsoftmax.backends.cpu.segment import vmax_x86

sys.path.insert(0, str(Path(__file__).resolve().parent))
from column_passes import _copy  # noqa: E402
from common import cpu_info, median_seconds  # noqa: E402

LEVELS = {0: "none", 1: "prefetcht0", 2: "prefetcht1"}


@njit(nogil=True)
def _tile_reads(xb, n, ni, J, t0, t1, ahead, level, mc, stage, staged):
    for t in range(t0, t1):
        p = t * J
        for k in range(n):
            q = p + k * ni
            for j in range(0, J, W):
                if level == 1:
                    prefetch(xb, q + ahead * ni + j)
                elif level == 2:
                    prefetch_l2(xb, q + ahead * ni + j)
                x = vload(xb, q + j)
                if staged:
                    vstore(stage, k * J + j, x)
                vstore(mc, j, x if k == 0 else vmax_x86(vload(mc, j), x))
    return mc[0]


@njit(nogil=True, parallel=True)
def _tiles(xb, n, ni, J, ahead, level, staged, threads):
    tiles = ni // J
    for th in prange(threads):
        mc = np.empty(J, np.float32)
        stage = np.empty(n * J, np.float32)
        _tile_reads(xb, n, ni, J, th * tiles // threads, (th + 1) * tiles // threads,
                    ahead, level, mc, stage, staged)


@njit(nogil=True)
def _linear_read(xb, a, b, mc):
    for i in range(a, b, 2 * W):
        vstore(mc, 0, vmax_x86(vload(mc, 0), vmax_x86(vload(xb, i), vload(xb, i + W))))
    return mc[0]


@njit(nogil=True, parallel=True)
def _linear(xb, threads):
    n = xb.size
    for th in prange(threads):
        mc = np.zeros(W, np.float32)
        _linear_read(xb, th * n // threads, (th + 1) * n // threads, mc)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="?", default="1000x65536", help="rows x columns (columns a multiple of 2048)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    n, ni = (int(v) for v in args.shape.split("x"))
    threads = 2
    xb = np.random.default_rng(0).standard_normal(n * ni, dtype=np.float32)
    ob = np.empty_like(xb)
    fns = {"copy": lambda: _copy(xb, ob, threads), "linear read": lambda: _linear(xb, threads)}
    for J in (1024, 2048):
        for ahead, level in ((0, 0), (4, 1), (16, 1), (4, 2), (16, 2), (32, 2)):
            fns[f"tiles J={J}, {LEVELS[level]} {ahead} rows ahead"] = (
                lambda J=J, a=ahead, lv=level: _tiles(xb, n, ni, J, a, lv, False, threads))
        for ahead, level in ((4, 1), (16, 2)):
            fns[f"tiles J={J}, {LEVELS[level]} {ahead} rows ahead, staged"] = (
                lambda J=J, a=ahead, lv=level: _tiles(xb, n, ni, J, a, lv, True, threads))
    sec = median_seconds(fns, args.rounds)
    print(f"CPU: {cpu_info()['model']}; {threads} threads; {args.shape} float32 read over axis 0; "
          f"medians of {args.rounds}")
    print("| pass | ms |\n|---|---:|")
    for k, v in sec.items():
        print(f"| {k} | {v * 1e3:.2f} |")


if __name__ == "__main__":
    main()
