"""Where a fast-path column forward's time goes from memory (issue 10, p04).

p04 (8x16x384x384 axis 2, float16) runs at about a third of a same-run
copy's bandwidth, where issue 10 asks for half. Its column kernel
(``backends/cpu/columns.py``) makes three passes over each tile of ``n x
J``: the per-column max (reading the tile from memory), the sums of
``exp(x - m)`` and the write (both from L2). This script runs the kernel's
own passes over every tile on 2 threads (each its half of the tiles), from
memory, cumulatively, interleaved in one process:

* ``max``: :func:`columns._tile_max` of every tile (rows asked for ahead, as
  the kernel's first tile does);
* ``+ sums``: then each tile's sums
  (:func:`columns._tile_sums_row_major_apart`: the loop of columns of more
  than ``columns.LANE_MAJOR_ROWS`` rows, the tiles this script is for);
* ``+ write``: then its write pass (:func:`columns._tile_write`), one pass
  after the other, as the library did before the twentieth Intel session;
* ``write-piped``: the first tile's max, then per tile the sums and a write
  pass that takes the next tile's max a row per row written (the library's
  order since then, :data:`columns.WRITE_PIPED_BYTES`);
* the library's forward (``out=`` of ``np.empty_like``);

and, on the same bytes, what bounds the memory passes: the copy, a read
alone (the max of every element as one contiguous stream) and streaming
stores alone. The write pass takes fixed statistics (its arithmetic does
not depend on them); the other passes compute the real ones. Prints ms and
ns per element and thread, and the budget of 50% of the copy.

Run: ``python benchmarks/column_memory.py [--shape 8x16x384x384 --axis 2
--dtype f16 --rounds 15]`` (prints only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
from numba import njit, prange

import logsoftmax
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu._simd import TRUE, wide_vectors
from logsoftmax.backends.cpu._vec import W, lane, sfence, splat, vload, vstore, vstore_nt
from logsoftmax.backends.cpu.segment import LANES32, LANES64, vmax_x86
from logsoftmax.driver.perf import copy2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, line_aligned, time_calls  # noqa: E402

DTYPES = {"f16": (np.float16, np.int16), "bf16": (ml_dtypes.bfloat16, np.uint16)}
_LSM = 0  # Op.LOG_SOFTMAX as the backend passes it


@njit(cache=True, parallel=True)
def _passes(xb, ob, outer, n, ni, J, upto, piped):
    """The kernel's passes over ``outer`` dense planes of ``n x ni`` (tiles
    ``J`` wide), each thread its half of the tiles: ``upto`` = 1 (max), 2
    (+ sums), 3 (+ write); ``piped``: the write pass takes the next tile's max."""
    per = (ni + J - 1) // J
    tiles = outer * per
    res = np.empty(2)
    for t in prange(2):
        wide_vectors()
        acc32 = np.empty(LANES32 * J + W, np.float32)
        acc64 = np.empty(LANES64 * J + W)
        sc = np.empty(J + W)
        mc = np.empty(J + W, np.float32)
        mn = np.empty(J + W, np.float32)
        m = np.full(J + W, 4.0)
        lg = np.full(J + W, 2.0)
        ma = np.full(J + W, np.float32(4.0))
        la = np.full(J + W, np.float32(2.0))
        t0, t1 = t * tiles // 2, (t + 1) * tiles // 2
        for u in range(t0, t1):
            p = u // per * n * ni + u % per * J
            jn = min(J, ni - u % per * J)
            if not piped or u == t0:
                C._tile_max(xb, p, ni, n, jn, mc, TRUE)
            if upto >= 2:
                C._tile_sums_row_major_apart(xb, p, ni, n, jn, False, acc32, acc64, mc, sc, J)
            if upto >= 3:
                pn, jn2 = -1, 0
                if piped and u + 1 < t1:
                    pn = (u + 1) // per * n * ni + (u + 1) % per * J
                    jn2 = min(J, ni - (u + 1) % per * J)
                C._tile_write(xb, p, ni, ob, p, ni, n, jn, _LSM, False, m, lg, lg, ma, la, la,
                              False, -1, 0, pn, jn2, mn)
                if pn >= 0:
                    for j in range(0, jn2, W):
                        vstore(mc, j, vload(mn, j))
        res[t] = mc[0]
    return res


@njit(cache=True, parallel=True)
def _read_alone(xb):
    """The max of every element, each thread its half, as one stream."""
    res = np.empty(2)
    h = xb.size // 2 // W * W
    for t in prange(2):
        wide_vectors()
        b = splat(np.float32(-np.inf))
        for i in range(t * h, (t + 1) * h, W):
            b = vmax_x86(b, vload(xb, i))
        res[t] = lane(b, 0)
    return res


@njit(cache=True, parallel=True)
def _stores_alone(ob):
    """Streaming stores of every element (``ob`` on a 64-byte line)."""
    h = ob.size // 2 // W * W
    for t in prange(2):
        wide_vectors()
        z = splat(np.float32(1.0))
        for i in range(t * h, (t + 1) * h, W):
            vstore_nt(ob, i, z)
        sfence()
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8x16x384x384")
    ap.add_argument("--axis", type=int, default=2)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f16")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    shape = tuple(int(s) for s in args.shape.split("x"))
    dtype, raw = DTYPES[args.dtype]
    outer = int(np.prod(shape[: args.axis]))
    n = shape[args.axis]
    ni = int(np.prod(shape[args.axis + 1 :]))
    J = int(C.tile_width_for(n, ni, False, 2, outer, False, True))
    print(f"CPU: {cpu_info()['key']}")
    print(f"{args.shape} axis {args.axis} {args.dtype}: {outer} planes of {n} x {ni}, tiles {J} wide;"
          f" 2 threads, medians of {args.rounds}")
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype(dtype)
    out = np.empty_like(x)
    xb = x.reshape(-1).view(raw)
    ob = line_aligned(x.size, dtype).view(raw)
    numba.set_num_threads(2)
    calls = {
        "copy": lambda: copy2(xb, ob),
        "read alone (max of every element)": lambda: _read_alone(xb),
        "streaming stores alone": lambda: _stores_alone(ob),
        "max": lambda: _passes(xb, ob, outer, n, ni, J, 1, False),
        "+ sums": lambda: _passes(xb, ob, outer, n, ni, J, 2, False),
        "+ write": lambda: _passes(xb, ob, outer, n, ni, J, 3, False),
        "write-piped (max, then sums and write + next max)": lambda: _passes(xb, ob, outer, n, ni, J, 3, True),
        "the library's forward (out=)": lambda: logsoftmax.log_softmax(x, args.axis, out=out),
    }
    sec, _ = time_calls(calls, args.rounds)
    per = 2e9 / x.size
    copy = sec["copy"]
    for k, v in sec.items():
        print(f"  {k:52s} {v * 1e3:7.3f} ms  {v * per:.3f} ns/element/thread  {copy / v:4.0%} of the copy")
    print(f"  the 50% budget: {2 * copy * 1e3:.3f} ms ({2 * copy * per:.3f} ns/element/thread)")


if __name__ == "__main__":
    main()
