"""What bounds the two strided problems short of 50% of the copy (issue 10).

Issue 10 asks a non-last-axis log_softmax for >= 50% of a same-run 2-thread
copy's bandwidth, i.e. at most twice the copy's time. Two problems of the
set stay short of it: p04 (8x16x384x384 axis 2, float16: the float32 *fast*
path) and nchw56 (64x64x56x56 axis 1, float32: the *accurate* path, float64
terms). Their column kernel (``backends/cpu/columns.py``) makes three passes
over each tile: the per-column max, the sums of ``exp(x - m)``, and the
write ``(x - m) - log s``. The budget, per element and thread, is
``2 * copy / elements * threads``.

This script times, interleaved in one process:

* the 2-thread copy of the problem's bytes and our 2-thread forward (``out=``
  of ``np.empty_like``), from memory;
* on one thread, on a few tiles that stay in L2, each pass of the kernel
  alone (its own functions: ``_tile_max``, the lane-major and row-major
  sums, ``_tile_write``) and the whole tile forward;
* the ``exp`` alone, on vectors in registers (no loads): the arithmetic of
  the sums without their memory.

The passes alone, in cache, summed: what the kernel as built (its passes
one after another, each tile's) costs with memory fully hidden. If that
exceeds the budget, hiding memory is not enough; only passes of different
tiles sharing the vector ports better could help, which these timings do
not measure (each pass's idle share of the ports needs hardware counters).

Run: ``python benchmarks/strided_limits.py [--repeat 9]`` (prints only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit

import logsoftmax
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu._math import exp_f32_sum, exp_f64
from logsoftmax.backends.cpu._vec import W, hi_f64, lane, lo_f64, splat, vload
from logsoftmax.backends.cpu.segment import LANES32, LANES64
from logsoftmax.driver.perf import copy2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, time_calls  # noqa: E402

_LSM = 0  # Op.LOG_SOFTMAX as the backend passes it (an int)
_BITS = {np.dtype(np.float16): np.int16, np.dtype(np.float32): np.float32}


def _geometry(outer, n, ni):
    """The column kernels' geometry of ``outer`` dense planes of ``n x ni``,
    reduced over ``n`` (layout of ``backends/cpu/rows.py``)."""
    plane = n * ni
    return np.array([outer, 1, n, ni, 0, plane, 0, ni, 1, 0, plane, 0, ni, 1], np.int64)


@njit(cache=True)
def _max_pass(xb, g, J, mc):
    for o in range(g[0]):
        for j0 in range(0, g[3], J):
            C._tile_max(xb, o * g[5] + j0, g[7], g[2], min(J, g[3] - j0), mc)


@njit(cache=True)
def _sums_pass(xb, g, J, mc, accurate, lane_major):
    acc32 = np.empty(LANES32 * J, np.float32)
    acc64 = np.empty(LANES64 * J)
    sc = np.empty(J)
    for o in range(g[0]):
        for j0 in range(0, g[3], J):
            p, jn = o * g[5] + j0, min(J, g[3] - j0)
            if lane_major:
                C._tile_sums_lane_major(xb, p, g[7], g[2], jn, accurate, acc32, acc64, mc, sc, -1, 0)
            else:
                C._tile_sums_row_major(xb, p, g[7], g[2], jn, accurate, acc32, acc64, mc, sc, J,
                                       -1, 0, mc)
    return sc


@njit(cache=True)
def _write_pass(xb, ob, g, J, accurate, m, lg, ma, la):
    for o in range(g[0]):
        for j0 in range(0, g[3], J):
            p = o * g[5] + j0
            C._tile_write(xb, p, g[7], ob, p, g[12], g[2], min(J, g[3] - j0), _LSM, accurate,
                          m, lg, lg, ma, la, la, False, -1, 0)


@njit(cache=True)
def _tile_forward(xb, ob, g, J, accurate):
    C.forward_tiles(xb, ob, g, _LSM, accurate, J, 0, -1)


@njit(cache=True)
def _exp32_alone(src, count):
    """``exp_f32_sum`` of ``count`` elements' worth of vectors from ``src``
    (L1), summed: the fast sums' arithmetic without their memory."""
    a0 = splat(np.float32(0.0))
    a1 = a0
    nv = src.size // W
    for i in range(0, count // W, 2):
        k = (i % nv) * W
        a0 = a0 + exp_f32_sum(vload(src, k))
        a1 = a1 + exp_f32_sum(vload(src, k + W))
    return lane(a0 + a1, 0)


@njit(cache=True)
def _exp64_alone(src, count):
    """float64 ``exp`` of ``count`` float32 elements' worth of vectors (the
    accurate sums' terms, two halves a vector), summed."""
    a0 = splat(0.0)
    a1 = a0
    nv = src.size // W
    for i in range(count // W):
        x = vload(src, (i % nv) * W)
        a0 = a0 + exp_f64(lo_f64(x))
        a1 = a1 + exp_f64(hi_f64(x))
    return lane(a0 + a1, 0)


def _problem(name, shape, axis, dtype, cache_outer, repeat, rng) -> None:
    outer = int(np.prod(shape[:axis]))
    n = shape[axis]
    ni = int(np.prod(shape[axis + 1 :]))
    accurate = np.dtype(dtype) == np.float32  # n <= SHORT: float32 takes the accurate path
    bits = _BITS[np.dtype(dtype)]
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    out = np.empty_like(x)
    xf, of = x.reshape(-1), out.reshape(-1)
    # a few tiles that stay in L2 (one thread): the passes alone
    J = int(C.tile_width(n, ni))
    cx = np.ascontiguousarray(x.reshape(outer, n, ni)[:cache_outer, :, : 2 * J])
    cni = cx.shape[2]
    cb = cx.reshape(-1).view(bits)
    co = np.empty_like(cb)
    cg = _geometry(cache_outer, n, cni)
    mc = np.full(J + W, 4.0, np.float32)
    m = np.full(J + W, 4.0)
    lg = np.full(J + W, 2.0)
    ma, la = m.astype(np.float32), lg.astype(np.float32)
    src = (rng.standard_normal(1024) - 3).astype(np.float32)  # x - m <= 0, 4 KiB: L1
    exp_alone = _exp64_alone if accurate else _exp32_alone
    count = cb.size
    numba.set_num_threads(2)
    whole = {
        "copy (2 threads)": lambda: copy2(xf.view(bits), of.view(bits)),
        "ours out= (2 threads)": lambda: logsoftmax.log_softmax(x, axis, out=out),
    }
    sec2, _ = time_calls(whole, repeat)
    numba.set_num_threads(1)
    passes = {
        "max pass": lambda: _max_pass(cb, cg, J, mc),
        "sums lane-major": lambda: _sums_pass(cb, cg, J, mc, accurate, True),
        "sums row-major": lambda: _sums_pass(cb, cg, J, mc, accurate, False),
        "write pass": lambda: _write_pass(cb, co, cg, J, accurate, m, lg, ma, la),
        "whole tile forward": lambda: _tile_forward(cb, co, cg, J, accurate),
        "exp alone (registers)": lambda: exp_alone(src, count),
    }
    sec1, _ = time_calls(passes, repeat)
    ns = {k: v / count * 1e9 for k, v in sec1.items()}
    size = x.size
    budget = 2 * sec2["copy (2 threads)"] / size * 2 * 1e9  # ns per element and thread
    ours = sec2["ours out= (2 threads)"] / size * 2 * 1e9
    sums = min(ns["sums lane-major"], ns["sums row-major"])
    floor = ns["max pass"] + sums + ns["write pass"]
    kind = "accurate, float64 terms" if accurate else "fast, float32 terms"
    print(f"\n{name}: {'x'.join(map(str, shape))} axis {axis} {np.dtype(dtype).name} ({kind});"
          f" {J} columns a tile; ns per element and thread")
    print(f"  copy (2 threads) {sec2['copy (2 threads)'] * 1e3:.3f} ms; the 50% budget {budget:.3f};"
          f" ours from memory {ours:.3f} ({sec2['copy (2 threads)'] / sec2['ours out= (2 threads)']:.0%}"
          " of the copy)")
    for k, v in ns.items():
        print(f"  in cache, one thread: {k:24s} {v:.3f}")
    print(f"  max + the cheaper sums + write alone: {floor:.3f} = {floor / budget:.2f}x the budget"
          f" (exp alone {ns['exp alone (registers)'] / budget:.2f}x it)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    print(f"CPU: {cpu_info()['key']}")
    rng = np.random.default_rng(0)
    _problem("p04", (8, 16, 384, 384), 2, np.float16, 2, args.repeat, rng)
    _problem("nchw56", (64, 64, 56, 56), 1, np.float32, 1, args.repeat, rng)


if __name__ == "__main__":
    main()
