"""Where an accurate column forward's time goes, and what overlaps (issue 10).

The float32 column forward of short columns (NCHW ``axis=1`` with up to
``columns.LANE_MAJOR_ROWS`` channels: the accurate path, float64 terms)
makes three passes over each tile: the per-column max, the lane-major sums
of ``exp(x - m)``, and pass 2 with its streaming stores. This script times,
interleaved in one process, on 2 threads:

* the problem's pieces from memory, cumulatively, over every tile as the
  kernel cuts them (``columns.tile_width_for``): the max pass alone; the
  max pass and the sums without and with the next tile's rows asked for
  during the sums (``columns.FETCH_TILE_BYTES``; the max pass of a tile so
  asked for then asks for nothing itself, as the kernel's); the whole forward
  (``out=`` of ``np.empty_like``), whose difference from the sums is pass 2
  and the statistics;
* the bytes' floors: a 2-thread copy (``driver.perf.copy2``), the input
  read alone, and the output written alone by streaming stores;
* a synthetic loop on data that stays in L1 (each thread its own 8 KiB),
  as many elements a thread as the problem: the sums' arithmetic alone
  (two float64 ``exp`` an element), pass 2's arithmetic alone (its
  ``forward_vec``, storing to L1), and each of them with one streaming
  store an element (a vector a vector) to an output of the problem's size,
  interleaved in the same loop. Whether the streaming stores hide behind
  the arithmetic when nothing else misses L1 is what this measures.

Run: ``python benchmarks/column_overlap.py [64x64x56x56] [--rounds 11]``
(a shape reduced over axis 1, float32; prints one table, ms, medians).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

import logsoftmax
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu._math import exp_f64
from logsoftmax.backends.cpu._simd import wide_vectors
from logsoftmax.backends.cpu._vec import W, hi_f64, lane, lo_f64, prefetch_l2, sfence, splat, vload, vstore, vstore_nt
from logsoftmax.backends.cpu.segment import LANES32, LANES64, forward_vec
from logsoftmax.driver.perf import copy2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, line_aligned, time_calls  # noqa: E402

_L1_ELEMS = 2048  # a thread's source for the synthetic loop (8 KiB)


@njit(cache=True, nogil=True)
def _pieces(xb, g, J, t0, t1, upto, fetch):
    """The max pass (``upto`` 1), then also the sums (2), of tiles ``[t0, t1)``."""
    n, ni = g[2], g[3]
    ntile = C.tiles_per_outer(ni, J, 0)
    acc32 = np.empty(LANES32 * J, np.float32)
    acc64 = np.empty(LANES64 * J)
    mc = np.empty(J + W, np.float32)
    sc = np.empty(J + W)
    total = 0.0
    for t in range(t0, t1):
        o, j0, jn = C._tile_cols(t, ntile, J, ni, 0)
        base, sn, _si = C._tile_geom(g, 0, o, j0)
        C._tile_max(xb, base, sn, n, jn, mc, not (fetch and t > t0))  # as forward_tiles
        if upto >= 2:
            pf, pjn = -1, 0
            if fetch and t + 1 < t1:
                o2, j2, pjn = C._tile_cols(t + 1, ntile, J, ni, 0)
                pf, _sn, _si = C._tile_geom(g, 0, o2, j2)
            C._tile_sums_lane_major(xb, base, sn, n, jn, True, acc32, acc64, mc, sc, pf, pjn, -1, 0, mc)
            total += sc[0]
        total += mc[0]
    return total


@njit(cache=True, parallel=True)
def _pieces_parallel(xb, g, J, upto, fetch):
    tiles = g[0] * g[1] * C.tiles_per_outer(g[3], J, 0)
    total = 0.0
    for t in prange(2):
        total += _pieces(xb, g, J, t * tiles // 2, (t + 1) * tiles // 2, upto, fetch)
    return total


@njit(cache=True, parallel=True)
def _read(x):
    """Every element of ``x`` loaded once (2 threads), the rows asked for ahead."""
    total = 0.0
    for t in prange(2):
        a = t * x.size // 2 // W * W
        b = (t + 1) * x.size // 2 // W * W
        r = splat(np.float32(0.0))
        for i in range(a, b, W):
            prefetch_l2(x, i + 1024)
            r = r + vload(x, i)
        total += lane(r, 0)
    return total


@njit(cache=True, parallel=True)
def _synthetic(src, stats, out, sums, write, stream):
    """Per element of ``out`` (2 threads): the sums' terms (``sums``), pass
    2's arithmetic (``write``; stored to L1 unless ``stream``), and a
    streaming store into ``out`` (``stream``), in one loop on L1 data."""
    total = 0.0
    for t in prange(2):
        wide_vectors()
        a = t * out.size // 2 // W * W
        b = (t + 1) * out.size // 2 // W * W
        s = src[t * 2 * _L1_ELEMS : t * 2 * _L1_ELEMS + _L1_ELEMS]
        d = src[t * 2 * _L1_ELEMS + _L1_ELEMS : (t + 1) * 2 * _L1_ELEMS]
        acc0 = splat(0.0)
        acc1 = splat(0.0)
        m = splat(np.float32(2.0))
        ml = lo_f64(m)
        mh = hi_f64(m)
        k = 0
        for i in range(a, b, W):
            if sums:
                v = vload(s, k)
                acc0 = acc0 + exp_f64(lo_f64(v) - ml)
                acc1 = acc1 + exp_f64(hi_f64(v) - mh)
            y = m
            if write:
                c = k & 255
                y = forward_vec(vload(s, (k + 512) & (_L1_ELEMS - 1)), vload(stats, c), vload(stats, c + 8),
                                vload(stats, 256 + c), vload(stats, 264 + c), m, m, 0, True)
            if stream:
                vstore_nt(out, i, y)
            elif write:
                vstore(d, k, y)
            k = (k + W) & (_L1_ELEMS - 1)
        if stream:
            sfence()
        total += lane(acc0 + acc1, 0)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="?", default="64x64x56x56")
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    numba.set_num_threads(2)
    shape = tuple(int(v) for v in args.shape.split("x"))
    outer, n = shape[0], shape[1]
    ni = int(np.prod(shape[2:]))
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    out = np.empty_like(x)
    dst = line_aligned(x.size)
    dst.fill(0)
    out.fill(0)
    J = C.tile_width_for(n, ni, False, 2)
    plane = n * ni
    g = np.array([outer, 1, n, ni, 0, plane, 0, ni, 1, 0, plane, 0, ni, 1], np.int64)
    xb = x.reshape(-1)
    src = (-np.random.default_rng(1).random(4 * _L1_ELEMS)).astype(np.float32)
    stats = np.random.default_rng(2).random(1024)
    cases = {
        "copy (2 threads)": lambda: copy2(xb, dst),
        "read the input alone": lambda: _read(xb),
        "write the output alone (streaming stores)": lambda: _synthetic(src, stats, dst, False, False, True),
        "max pass (from memory)": lambda: _pieces_parallel(xb, g, J, 1, False),
        "max pass + sums": lambda: _pieces_parallel(xb, g, J, 2, False),
        "max pass + sums asking for the next tile": lambda: _pieces_parallel(xb, g, J, 2, True),
        "whole forward (out=)": lambda: logsoftmax.log_softmax(x, axis=1, out=out),
        "L1: sums' arithmetic": lambda: _synthetic(src, stats, dst, True, False, False),
        "L1: sums' arithmetic + a streaming store an element": lambda: _synthetic(src, stats, dst, True, False, True),
        "L1: pass 2's arithmetic": lambda: _synthetic(src, stats, dst, False, True, False),
        "L1: pass 2's arithmetic + its streaming store": lambda: _synthetic(src, stats, dst, False, True, True),
        "L1: sums + pass 2's arithmetic + a streaming store": lambda: _synthetic(src, stats, dst, True, True, True),
    }
    seconds, _errors = time_calls(cases, args.rounds)
    print(f"CPU: {cpu_info()['key']}; 2 threads; {args.shape} axis 1 float32 forward (accurate path); "
          f"{J} columns a tile; medians of {args.rounds}")
    print("| piece | ms |")
    print("|---|---:|")
    for name, sec in seconds.items():
        print(f"| {name} | {1e3 * sec:.3f} |")

if __name__ == "__main__":
    main()
