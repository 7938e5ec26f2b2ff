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
  alone (its own functions: ``_tile_max``, also without asking for rows
  ahead as the tiles the last tile's sums asked for take it, the lane-major
  and row-major sums, ``_tile_write``) and the whole tile forward;
* the ``exp`` alone, on vectors from a 4 KiB buffer (L1): the arithmetic of
  the sums without their memory;
* our 2-thread forward on the same values with the reduced axis moved
  last (a contiguous copy made beforehand): the row kernels on rows of
  the same length, the layout with no strided access;
* on two threads at once (each its own few KiB, L1): the arithmetic of
  the forward's three passes as the kernel does them (every vector loaded,
  and widened, from L1 by each pass: the max, the sums' terms and adds,
  pass 2 and its store), and the peak rate of independent ``zmm`` FMAs,
  also on one thread alone. The first is the kernel's work per element
  with no cache or memory traffic; "FMA slots an element" is how many
  FMAs the pipes could have run in its time.

* two *floors*, on 2 threads from memory, on the problem's bytes taken as
  one contiguous stream (no strides): one pass (each vector loaded once
  and put through all three passes' arithmetic, which no kernel giving
  the library's bits can do: the terms need the max first), and the three
  passes software-pipelined over blocks of whole columns' height (``n x
  W`` elements, the smallest block a column strip allows, or four of
  them), each value widened once, with and without asking for the next
  block into L2. These do the arithmetic in the order a correct kernel
  must, with none of its other costs (per-column statistics, strided rows,
  the tile's re-reads from L2): the best of them is what a column kernel
  could reach at most.

The passes alone, in cache, summed: what the kernel as built (its passes
one after another, each tile's) costs with memory fully hidden. If that
exceeds the budget, hiding memory is not enough. The arithmetic alone on
two threads bounds the kernel as built from below (a kernel that widened
each value once would do less): below the budget, 50% is not shown out
of reach, and the gap between it and the passes is what the passes' L2
traffic and loop control add.

Run: ``python benchmarks/strided_limits.py [--repeat 9]`` (prints only).
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
from logsoftmax.backends.cpu._math import exp_f32_sum, exp_f64
from logsoftmax.backends.cpu._simd import wide_vectors
from logsoftmax.backends.cpu._vec import (
    W,
    hi_f64,
    lane,
    lo_f64,
    prefetch_l2,
    sfence,
    splat,
    vfma,
    vload,
    vstore,
    vstore_nt,
)
from logsoftmax.backends.cpu.segment import LANES32, LANES64, forward_vec, vmax_x86
from logsoftmax.driver.perf import copy2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, line_aligned, time_calls  # noqa: E402

_LSM = 0  # Op.LOG_SOFTMAX as the backend passes it (an int)
#: the arithmetic-alone kernel's elements a thread (4-8 KiB: L1) and rounds
_ARITH_ELEMS = 2048
_ARITH_REPS = 64
_FMA_ROUNDS = 200_000
_BITS = {np.dtype(np.float16): np.int16, np.dtype(np.float32): np.float32}


def _geometry(outer, n, ni):
    """The column kernels' geometry of ``outer`` dense planes of ``n x ni``,
    reduced over ``n`` (layout of ``backends/cpu/rows.py``)."""
    plane = n * ni
    return np.array([outer, 1, n, ni, 0, plane, 0, ni, 1, 0, plane, 0, ni, 1], np.int64)


@njit(cache=True)
def _max_pass(xb, g, J, mc, ask):
    for o in range(g[0]):
        for j0 in range(0, g[3], J):
            C._tile_max(xb, o * g[5] + j0, g[7], g[2], min(J, g[3] - j0), mc, ask)


@njit(cache=True)
def _sums_pass(xb, g, J, mc, accurate, lane_major):
    acc32 = np.empty(LANES32 * J, np.float32)
    acc64 = np.empty(LANES64 * J)
    sc = np.empty(J)
    for o in range(g[0]):
        for j0 in range(0, g[3], J):
            p, jn = o * g[5] + j0, min(J, g[3] - j0)
            if lane_major:
                C._tile_sums_lane_major(xb, p, g[7], g[2], jn, accurate, acc32, acc64, mc, sc, -1, 0, -1, 0, mc)
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
                          m, lg, lg, ma, la, la, False, -1, 0, -1, 0, ma)


@njit(cache=True)
def _tile_forward(xb, ob, g, J, accurate):
    C.forward_tiles(xb, ob, g, _LSM, accurate, J, 0, -1)


@njit(cache=True)
def _exp32_alone(src, count):
    """``exp_f32_sum`` of ``count`` elements' worth of vectors from ``src``
    (L1), summed: the fast sums' arithmetic without their memory."""
    wide_vectors()
    a0 = splat(np.float32(0.0))
    a1, a2, a3 = a0, a0, a0
    nv = src.size // W
    for _ in range(count // src.size):  # (no i % nv: a division each vector)
        for i in range(0, nv, 4):
            a0 = a0 + exp_f32_sum(vload(src, i * W))
            a1 = a1 + exp_f32_sum(vload(src, (i + 1) * W))
            a2 = a2 + exp_f32_sum(vload(src, (i + 2) * W))
            a3 = a3 + exp_f32_sum(vload(src, (i + 3) * W))
    return lane(a0 + a1 + a2 + a3, 0)


@njit(cache=True)
def _exp64_alone(src, count):
    """float64 ``exp`` of ``count`` float32 elements' worth of vectors (the
    accurate sums' terms, two halves a vector), summed."""
    wide_vectors()
    a0 = splat(0.0)
    a1, a2, a3 = a0, a0, a0
    nv = src.size // W
    for _ in range(count // src.size):
        for i in range(0, nv, 2):
            x = vload(src, i * W)
            y = vload(src, (i + 1) * W)
            a0 = a0 + exp_f64(lo_f64(x))
            a1 = a1 + exp_f64(hi_f64(x))
            a2 = a2 + exp_f64(lo_f64(y))
            a3 = a3 + exp_f64(hi_f64(y))
    return lane(a0 + a1 + a2 + a3, 0)


@njit(inline="always")
def _arith_one(src, dst, reps, accurate):
    """The forward's arithmetic on ``src`` (a few KiB: L1), ``reps`` times:
    each vector through the max pass (``vmax_x86``), the sums (the float32
    or float64 terms and their adds) and pass 2 (``forward_vec`` and its
    store, into ``dst``: L1 too), with four independent chains a pass so
    that no latency binds. The loads widen 16-bit data as the kernel's do."""
    wide_vectors()
    nv = src.size // W
    b0 = splat(np.float32(-np.inf))
    b1, b2, b3 = b0, b0, b0
    s0 = splat(0.0)
    s1, s2, s3, s4, s5, s6, s7 = s0, s0, s0, s0, s0, s0, s0
    f0 = splat(np.float32(0.0))
    f1, f2, f3 = f0, f0, f0
    m = splat(np.float32(4.0))
    m64 = splat(4.0)
    lg = splat(2.0)
    lg32 = splat(np.float32(2.0))
    for _ in range(reps):
        for i in range(0, nv, 4):
            b0 = vmax_x86(b0, vload(src, i * W))
            b1 = vmax_x86(b1, vload(src, (i + 1) * W))
            b2 = vmax_x86(b2, vload(src, (i + 2) * W))
            b3 = vmax_x86(b3, vload(src, (i + 3) * W))
        for i in range(0, nv, 4):
            x0 = vload(src, i * W)
            x1 = vload(src, (i + 1) * W)
            x2 = vload(src, (i + 2) * W)
            x3 = vload(src, (i + 3) * W)
            if accurate:
                s0 = s0 + exp_f64(lo_f64(x0) - m64)
                s1 = s1 + exp_f64(hi_f64(x0) - m64)
                s2 = s2 + exp_f64(lo_f64(x1) - m64)
                s3 = s3 + exp_f64(hi_f64(x1) - m64)
                s4 = s4 + exp_f64(lo_f64(x2) - m64)
                s5 = s5 + exp_f64(hi_f64(x2) - m64)
                s6 = s6 + exp_f64(lo_f64(x3) - m64)
                s7 = s7 + exp_f64(hi_f64(x3) - m64)
            else:
                f0 = f0 + exp_f32_sum(x0 - m)
                f1 = f1 + exp_f32_sum(x1 - m)
                f2 = f2 + exp_f32_sum(x2 - m)
                f3 = f3 + exp_f32_sum(x3 - m)
        for i in range(nv):
            vstore(dst, i * W, forward_vec(vload(src, i * W), m64, m64, lg, lg, m, lg32, _LSM, accurate))
    return (lane(b0 + b1 + b2 + b3, 0) + lane(f0 + f1 + f2 + f3, 0)
            + lane(s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7, 0))


@njit(cache=True, parallel=True)
def _arith_alone(srcs, dsts, reps, accurate):
    """:func:`_arith_one` on each thread's own ``srcs[t]``, ``dsts[t]``."""
    out = np.empty(srcs.shape[0])
    for t in prange(srcs.shape[0]):
        out[t] = _arith_one(srcs[t], dsts[t], reps, accurate)
    return out


@njit(inline="always")
def _floor_term(x, s0, s1, f0, accurate):
    """The floors' sums ``(s0, s1, f0)`` with the terms of ``x`` added (the
    float64 ones, or float32), from a max known beforehand (4)."""
    if accurate:
        return s0 + exp_f64(lo_f64(x) - splat(4.0)), s1 + exp_f64(hi_f64(x) - splat(4.0)), f0
    return s0, s1, f0 + exp_f32_sum(x - splat(np.float32(4.0)))


@njit(inline="always")
def _floor_pass2(x, accurate):
    """The floors' pass 2 on ``x`` (``forward_vec``), from statistics known
    beforehand (``m = 4``, ``log s = 2``)."""
    m64, lg = splat(4.0), splat(2.0)
    return forward_vec(x, m64, m64, lg, lg, splat(np.float32(4.0)), splat(np.float32(2.0)), _LSM, accurate)


@njit(inline="always")
def _store2(ob, i, y0, y1):
    """Two vectors from ``ob[i]`` (a line boundary) by streaming stores, one
    after the other, as the library's 16-bit streamed writes go (a line of
    16-bit values is two vectors). A 16-bit line streamed a vector at a
    time with a vector's arithmetic between its halves ran ~2x slower than
    by ordinary stores on the AMD EPYC (LLVM znver4; p04's one-pass floor
    4.3-4.5 ms against 2.2-2.3, scratch, the thirteenth Zen 4 session), so
    the floors measured that and not the arithmetic."""
    vstore_nt(ob, i, y0)
    vstore_nt(ob, i + W, y1)


@njit(inline="always")
def _floor_one_pass(xb, ob, i0, i1, accurate):
    """Elements ``[i0, i1)`` of one contiguous stream, each vector loaded
    once and put through the arithmetic of all three passes (the max, the
    sum's term, pass 2 with statistics known beforehand), its result
    stored by a streaming store: no kernel giving the library's bits can
    do this (the terms need the max first, pass 2 the sums). Two vectors a
    step, stored together (:func:`_store2`)."""
    wide_vectors()
    b = splat(np.float32(-np.inf))
    s0 = s1 = splat(0.0)
    f0 = splat(np.float32(0.0))
    for i in range(i0, i1, 2 * W):
        x0 = vload(xb, i)
        x1 = vload(xb, i + W)
        b = vmax_x86(vmax_x86(b, x0), x1)
        s0, s1, f0 = _floor_term(x0, s0, s1, f0, accurate)
        s0, s1, f0 = _floor_term(x1, s0, s1, f0, accurate)
        _store2(ob, i, _floor_pass2(x0, accurate), _floor_pass2(x1, accurate))
    sfence()
    return lane(b, 0) + lane(f0, 0) + lane(s0 + s1, 0)


@njit(inline="always")
def _floor_three_passes(xb, ob, i0, i1, accurate, blk, scr, ahead):
    """Elements ``[i0, i1)`` of one contiguous stream in blocks of ``blk``,
    the three passes software-pipelined: one loop takes block ``c + 2``'s
    max (widening it once into the ``scr`` ring: 3 blocks of float32),
    block ``c + 1``'s terms and block ``c``'s pass 2 (streaming stores),
    vector by vector; ``ahead``: the max also asks for block ``c + 3``'s
    lines into L2. The order of work a correct kernel needs (max, then
    sums, then pass 2), with none of its other costs: no strides, no
    per-column statistics (their loads, lane trees and logs), no tile
    re-read from L2."""
    wide_vectors()
    b = splat(np.float32(-np.inf))
    s0 = s1 = splat(0.0)
    f0 = splat(np.float32(0.0))
    nb = (i1 - i0) // blk
    line = 64 // xb.itemsize
    for c in range(-2, nb):
        a = (c + 2) % 3 * blk  # the ring's slots of blocks c + 2, c + 1, c
        q1 = (c + 1) % 3 * blk
        q0 = c % 3 * blk
        for i in range(0, blk, 2 * W):
            if c + 2 < nb:
                if ahead:
                    for u in range(0, 2 * W, line):
                        prefetch_l2(xb, i0 + (c + 3) * blk + i + u)
                x0 = vload(xb, i0 + (c + 2) * blk + i)
                x1 = vload(xb, i0 + (c + 2) * blk + i + W)
                b = vmax_x86(vmax_x86(b, x0), x1)
                vstore(scr, a + i, x0)
                vstore(scr, a + i + W, x1)
            if 0 <= c + 1 < nb:
                s0, s1, f0 = _floor_term(vload(scr, q1 + i), s0, s1, f0, accurate)
                s0, s1, f0 = _floor_term(vload(scr, q1 + i + W), s0, s1, f0, accurate)
            if c >= 0:
                _store2(ob, i0 + c * blk + i, _floor_pass2(vload(scr, q0 + i), accurate),
                        _floor_pass2(vload(scr, q0 + i + W), accurate))
    sfence()
    return lane(b, 0) + lane(f0, 0) + lane(s0 + s1, 0)


@njit(cache=True, parallel=True)
def _floor(xb, ob, accurate, blk, ahead, one_pass):
    """A floor kernel on 2 threads, each half of the stream (``ob`` on a line)."""
    out = np.empty(2)
    h = xb.size // 2 // blk * blk
    for t in prange(2):
        if one_pass:
            out[t] = _floor_one_pass(xb, ob, t * h, (t + 1) * h, accurate)
        else:
            scr = np.empty(3 * blk, np.float32)
            out[t] = _floor_three_passes(xb, ob, t * h, (t + 1) * h, accurate, blk, scr, ahead)
    return out


@njit(inline="always")
def _fma_one(n, x):
    """``n`` rounds of 12 independent zmm FMAs: the vector pipes' peak."""
    wide_vectors()
    b = splat(np.float32(x * 1e-9))
    a0 = splat(np.float32(1.0))
    a1, a2, a3, a4, a5 = a0 + b, a0 - b, a0 + b + b, a0 - b - b, a0 * b
    a6, a7, a8, a9, a10, a11 = a1 * b, a2 * b, a3 * b, a4 * b, a5 + b, a1 + a2
    for _ in range(n):
        a0, a1, a2, a3 = vfma(a0, b, a0), vfma(a1, b, a1), vfma(a2, b, a2), vfma(a3, b, a3)
        a4, a5, a6, a7 = vfma(a4, b, a4), vfma(a5, b, a5), vfma(a6, b, a6), vfma(a7, b, a7)
        a8, a9, a10, a11 = vfma(a8, b, a8), vfma(a9, b, a9), vfma(a10, b, a10), vfma(a11, b, a11)
    return lane(a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11, 0)


@njit(cache=True, parallel=True)
def _fma_peak(n, threads):
    out = np.empty(threads)
    for t in prange(threads):
        out[t] = _fma_one(n, 1.0 + t)
    return out


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
    srcs = np.stack([(rng.standard_normal(_ARITH_ELEMS) - 3).astype(dtype).view(bits)
                     for _ in range(2)])
    dsts = np.empty_like(srcs)
    # the same values with the reduced axis moved last: contiguous rows
    xr = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    orow = np.empty_like(xr)
    # the floors: the problem's bytes as one stream, blocks of the smallest
    # that holds whole columns (n rows x W columns) or four of them
    ofl = line_aligned(x.size, dtype).view(bits)
    strip = n * W
    floors = {f"floor: three passes, blocks of {k} x {n}x{W}{', next block asked for' if ahead else ''}":
              (lambda k=k, ahead=ahead: _floor(xf.view(bits), ofl, accurate, k * strip, ahead, False))
              for k in (1, 4) for ahead in (False, True)}
    whole = {
        "copy (2 threads)": lambda: copy2(xf.view(bits), of.view(bits)),
        "ours out= (2 threads)": lambda: logsoftmax.log_softmax(x, axis, out=out),
        "as rows (2 threads)": lambda: logsoftmax.log_softmax(xr, -1, out=orow),
        "arithmetic alone (2 threads)": lambda: _arith_alone(srcs, dsts, _ARITH_REPS, accurate),
        "fma peak (2 threads)": lambda: _fma_peak(_FMA_ROUNDS, 2),
        "fma peak (1 thread)": lambda: _fma_peak(_FMA_ROUNDS, 1),
        "floor: one pass": lambda: _floor(xf.view(bits), ofl, accurate, strip, False, True),
        **floors,
    }
    sec2, _ = time_calls(whole, repeat)
    numba.set_num_threads(1)
    passes = {
        "max pass": lambda: _max_pass(cb, cg, J, mc, True),
        "max pass, no rows asked for": lambda: _max_pass(cb, cg, J, mc, False),
        "sums lane-major": lambda: _sums_pass(cb, cg, J, mc, accurate, True),
        "sums row-major": lambda: _sums_pass(cb, cg, J, mc, accurate, False),
        "write pass": lambda: _write_pass(cb, co, cg, J, accurate, m, lg, ma, la),
        "whole tile forward": lambda: _tile_forward(cb, co, cg, J, accurate),
        "exp alone (L1)": lambda: exp_alone(src, count),
    }
    sec1, _ = time_calls(passes, repeat)
    ns = {k: v / count * 1e9 for k, v in sec1.items()}
    size = x.size
    budget = 2 * sec2["copy (2 threads)"] / size * 2 * 1e9  # ns per element and thread
    ours = sec2["ours out= (2 threads)"] / size * 2 * 1e9
    sums = min(ns["sums lane-major"], ns["sums row-major"])
    floor = ns["max pass"] + sums + ns["write pass"]
    arith = sec2["arithmetic alone (2 threads)"] / (_ARITH_ELEMS * _ARITH_REPS) * 1e9
    fmas = 12 * _FMA_ROUNDS / sec2["fma peak (2 threads)"] / 1e9
    fmas1 = 12 * _FMA_ROUNDS / sec2["fma peak (1 thread)"] / 1e9
    kind = "accurate, float64 terms" if accurate else "fast, float32 terms"
    print(f"\n{name}: {'x'.join(map(str, shape))} axis {axis} {np.dtype(dtype).name} ({kind});"
          f" {J} columns a tile; ns per element and thread")
    print(f"  copy (2 threads) {sec2['copy (2 threads)'] * 1e3:.3f} ms; the 50% budget {budget:.3f};"
          f" ours from memory {ours:.3f} ({sec2['copy (2 threads)'] / sec2['ours out= (2 threads)']:.0%}"
          " of the copy)")
    for k, v in ns.items():
        print(f"  in cache, one thread: {k:28s} {v:.3f}")
    print(f"  max + the cheaper sums + write alone: {floor:.3f} = {floor / budget:.2f}x the budget"
          f" (exp alone {ns['exp alone (L1)'] / budget:.2f}x it)")
    rows = sec2["as rows (2 threads)"]
    print(f"  the same values as contiguous rows (axis moved last), 2 threads: {rows * 1e3:.3f} ms"
          f" ({sec2['copy (2 threads)'] / rows:.0%} of the copy)")
    copy = sec2["copy (2 threads)"]
    for k in ["floor: one pass", *floors]:
        print(f"  {k} (2 threads, from memory): {sec2[k] * 1e3:.3f} ms = {sec2[k] / (2 * copy):.2f}x the budget")
    best = min(floors, key=sec2.get)
    print(f"  the best three-pass floor: {sec2[best] / (2 * copy):.2f}x the budget; ours"
          f" {sec2['ours out= (2 threads)'] / sec2[best]:.2f}x that floor")
    print(f"  2 threads at once: the arithmetic alone (L1) {arith:.3f} = {arith / budget:.2f}x the"
          f" budget; zmm FMAs {fmas:.2f} G/s a thread ({fmas1:.2f} on one thread alone;"
          f" {arith * fmas:.1f} FMA slots an element)")


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
