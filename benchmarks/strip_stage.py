"""p04 by strips of 32 columns through a dense L1 stage: a kernel of another shape, timed.

p04 (8x16x384x384 axis 2, float16, the fast path) is the strided problem
furthest from issue 10's 50% of the copy. The library takes it by column
tiles (``backends/cpu/columns.py``: a whole 384x384 plane a tile, three
passes over it in L2). This script times the shape the earlier sessions'
floors pointed at: strips of 32 columns (one 64-byte line a row), each
strip's rows copied once into a dense stage of ``n x 32`` float16 (24 KiB
at 384 rows: L1), so that its sums and its pass 2 read L1, not L2:

* A, the max: each row's line from ``x`` (memory or L2) into the stage, and
  the running max of its two vectors;
* B, the sums: lane by lane from the stage (64 lanes of float32 terms,
  ``segment.LANES32``, the lanes' running sums in registers), then the
  lane tree (``columns._lane_tree``) and ``log`` (``_math.log_f64``);
* C, pass 2: ``(x - m) - log s`` from the stage, two streaming stores a
  row (a whole output line).

``sequential`` takes A, B, C one strip after another (asking for the next
strip's rows into L2 during A); ``pipelined`` takes A of strip ``s + 1``
inside B of strip ``s`` (two stages), then C of strip ``s``; ``widened``
widens each value once, as the floors of ``strided_limits.py`` do: A
stores the strip as float32 (48 KiB: L2), B sums it in row order into a
``64 x 32`` scratch (8 KiB), C reads it back. All three give the library's
bits (``--check``: the arithmetic is the column kernel's, term for term;
random data, so no special-value fixups are needed).

Printed, interleaved in one process (``common.time_calls``): on one thread
with one plane in L2, each phase alone and all three, of ``sequential``
and of ``widened`` (ns per element);
then, from memory on two threads, each variant, the library's ``out=`` and
the 2-thread copy of the same bytes (``driver.perf.copy2``), as % of the
copy. The budget for 50% is twice the copy.

Run: ``python benchmarks/strip_stage.py [--rounds 9] [--check]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import logsoftmax  # noqa: E402
from common import cpu_info, line_aligned, time_calls  # noqa: E402
from logsoftmax.backends.cpu._math import exp_f32_sum, log_f64  # noqa: E402
from logsoftmax.backends.cpu._simd import wide_vectors  # noqa: E402
from logsoftmax.backends.cpu._vec import W, prefetch_l2, sfence, splat, vload, vstore, vstore_nt  # noqa: E402
from logsoftmax.backends.cpu.columns import _lane_tree  # noqa: E402
from logsoftmax.backends.cpu.segment import LANES32, vmax_x86  # noqa: E402
from logsoftmax.driver.perf import copy2  # noqa: E402

_NINF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
#: columns a strip: one 64-byte line of float16 a row
S = 32


@njit(inline="always")
def _strip_base(g, per, n, ni):
    """Element offset of strip ``g`` (``per`` strips a plane of ``n x ni``)."""
    return (g // per) * n * ni + (g % per) * S


@njit(inline="always")
def _this_and_next(g, g1, per, n, ni):
    """Offsets of strip ``g`` and of the next one (``g`` again at the last)."""
    p = _strip_base(g, per, n, ni)
    return p, (_strip_base(g + 1, per, n, ni) if g + 1 < g1 else p)


@njit(inline="always")
def _stage_row(x16, x32, st16, st32, q, at, m0, m1):
    """A's step: the line at ``x16[q]`` copied raw into the stage at ``at``
    (int16 items; ``x32``, ``st32``: the same memory as float32, so that a
    load and a store move 64 bytes unconverted), its two vectors into the
    running max (loaded from ``x``, which L1 now holds)."""
    vstore(st32, at // 2, vload(x32, q // 2))
    return vmax_x86(m0, vload(x16, q)), vmax_x86(m1, vload(x16, q + W))


@njit(inline="always")
def _stats(acc, stat, n):
    """The lane tree of ``acc`` (``LANES32 x S``), then ``log s`` per
    column as float32 (``la``), as the column tiles take it."""
    _lane_tree(acc, min(n, LANES32), 2, W, S, LANES32)
    for j in range(S):
        stat[j] = np.float64(acc[j])
    for j in range(0, S, W // 2):
        vstore(stat, S + j, log_f64(vload(stat, j)))
    for j in range(S):
        acc[j] = np.float32(stat[S + j])
    return vload(acc, 0), vload(acc, W)


@njit(inline="always")
def _pass2(st16, cur, o16, p, n, sn, m0, m1, d0, d1):
    """C: pass 2 of the strip staged at ``cur`` into ``o16[p:]``."""
    for k in range(n):
        vstore_nt(o16, p + k * sn, (vload(st16, cur + k * S) - m0) - d0)
        vstore_nt(o16, p + k * sn + W, (vload(st16, cur + k * S + W) - m1) - d1)


@njit(nogil=True, error_model="numpy")
def sequential(x16, x32, o16, st16, st32, acc, stat, g0, g1, n, ni, phases):
    """Strips ``[g0, g1)``: A, B, C one after another (``phases``: a mask
    of the three, to time each alone)."""
    wide_vectors()
    per = ni // S
    zero = splat(_ZERO)
    for g in range(g0, g1):
        p, pn = _this_and_next(g, g1, per, n, ni)
        m0 = m1 = splat(_NINF)
        for k in range(n if phases & 1 else 0):
            prefetch_l2(x16, pn + k * ni)  # the next strip's row, into L2
            m0, m1 = _stage_row(x16, x32, st16, st32, p + k * ni, k * S, m0, m1)
        for lane_ in range(LANES32 if phases & 2 else 0):
            a0 = zero
            a1 = zero
            for k in range(lane_, n, LANES32):
                a0 = a0 + exp_f32_sum(vload(st16, k * S) - m0)
                a1 = a1 + exp_f32_sum(vload(st16, k * S + W) - m1)
            vstore(acc, lane_ * S, a0)
            vstore(acc, lane_ * S + W, a1)
        d0, d1 = _stats(acc, stat, n)
        if phases & 4:
            _pass2(st16, 0, o16, p, n, ni, m0, m1, d0, d1)
    sfence()


@njit(nogil=True, error_model="numpy")
def pipelined(x16, x32, o16, st16, st32, acc, stat, g0, g1, n, ni):
    """Strips ``[g0, g1)``: A of strip ``g + 1`` inside B of strip ``g``
    (a row of it per row summed; two stages), then C of strip ``g``."""
    wide_vectors()
    per = ni // S
    zero = splat(_ZERO)
    half = n * S  # int16 items a stage
    p = _strip_base(g0, per, n, ni)
    mn0 = splat(_NINF)
    mn1 = mn0
    for k in range(n):
        mn0, mn1 = _stage_row(x16, x32, st16, st32, p + k * ni, k * S, mn0, mn1)
    for g in range(g0, g1):
        p = _strip_base(g, per, n, ni)
        cur = (g - g0) % 2 * half
        nxt = half - cur
        m0 = mn0
        m1 = mn1
        more = g + 1 < g1
        pa = _strip_base(g + 1, per, n, ni) if more else p
        mn0 = splat(_NINF)
        mn1 = mn0
        r = 0
        for lane_ in range(LANES32):
            a0 = zero
            a1 = zero
            for k in range(lane_, n, LANES32):
                if more:  # the lanes visit every row once: r runs 0..n-1
                    mn0, mn1 = _stage_row(x16, x32, st16, st32, pa + r * ni, nxt + r * S, mn0, mn1)
                    r += 1
                a0 = a0 + exp_f32_sum(vload(st16, cur + k * S) - m0)
                a1 = a1 + exp_f32_sum(vload(st16, cur + k * S + W) - m1)
            vstore(acc, lane_ * S, a0)
            vstore(acc, lane_ * S + W, a1)
        d0, d1 = _stats(acc, stat, n)
        _pass2(st16, cur, o16, p, n, ni, m0, m1, d0, d1)
    sfence()


@njit(nogil=True, error_model="numpy")
def widened(x16, o16, stf, acc, stat, g0, g1, n, ni, phases):
    """Strips ``[g0, g1)``, each widened once: A stores the strip as
    float32 (``stf``: ``n x 32``, 48 KiB at 384 rows, so L2), B sums it in
    row order (row ``k`` into lane ``k % 64`` of ``acc``, ``64 x 32``: 8
    KiB, L1), C reads it for pass 2: the work per element of the floors of
    ``strided_limits.py`` (one widening, no re-widening in B and C)."""
    wide_vectors()
    per = ni // S
    zero = splat(_ZERO)
    for g in range(g0, g1):
        p, pn = _this_and_next(g, g1, per, n, ni)
        m0 = m1 = splat(_NINF)
        for k in range(n if phases & 1 else 0):
            prefetch_l2(x16, pn + k * ni)  # the next strip's row, into L2
            x0 = vload(x16, p + k * ni)
            x1 = vload(x16, p + k * ni + W)
            vstore(stf, k * S, x0)
            vstore(stf, k * S + W, x1)
            m0 = vmax_x86(m0, x0)
            m1 = vmax_x86(m1, x1)
        if phases & 2:
            for i in range(0, LANES32 * S, W):
                vstore(acc, i, zero)
            for k in range(n):
                a = (k % LANES32) * S
                vstore(acc, a, vload(acc, a) + exp_f32_sum(vload(stf, k * S) - m0))
                vstore(acc, a + W, vload(acc, a + W) + exp_f32_sum(vload(stf, k * S + W) - m1))
        d0, d1 = _stats(acc, stat, n)
        if phases & 4:
            for k in range(n):
                vstore_nt(o16, p + k * ni, (vload(stf, k * S) - m0) - d0)
                vstore_nt(o16, p + k * ni + W, (vload(stf, k * S + W) - m1) - d1)
    sfence()


@njit(nogil=True, parallel=True, error_model="numpy")
def run(x16, x32, o16, planes, n, ni, pipe, threads):
    """A variant (``pipe``: 0 sequential, 1 pipelined, 2 widened) over
    every strip, ``threads`` ranges of whole planes."""
    per = ni // S
    for t in prange(threads):
        st16 = np.empty(2 * n * S + 64, np.int16)  # 2 float16 stages, or 1 float32
        st32 = st16.view(np.float32)
        acc = np.empty(LANES32 * S, np.float32)
        stat = np.empty(2 * S, np.float64)
        g0 = planes * t // threads * per
        g1 = planes * (t + 1) // threads * per
        if pipe == 2:
            widened(x16, o16, st32, acc, stat, g0, g1, n, ni, 7)
        elif pipe:
            pipelined(x16, x32, o16, st16, st32, acc, stat, g0, g1, n, ni)
        else:
            sequential(x16, x32, o16, st16, st32, acc, stat, g0, g1, n, ni, 7)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="8x16x384x384", help="outer dims x n x ni (axis: the second last)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--check", action="store_true", help="compare each variant's bits with the library's")
    args = ap.parse_args()
    shape = tuple(int(v) for v in args.shape.split("x"))
    n, ni = shape[-2], shape[-1]
    planes = int(np.prod(shape[:-2]))
    if ni % S:
        sys.exit(f"--shape: the last dimension must be a multiple of {S}, got {ni}")
    print(f"CPU: {cpu_info()['key']}")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(np.float16)
    x16 = x.reshape(-1).view(np.int16)
    x32 = x16.view(np.float32)
    out = line_aligned(x.size, np.float16)
    o16 = out.view(np.int16)
    ours = line_aligned(x.size, np.float16).reshape(shape)
    numba.set_num_threads(2)
    if args.check:
        logsoftmax.log_softmax(x, axis=-2, out=ours)
        for name, pipe in (("sequential", 0), ("pipelined", 1), ("widened", 2)):
            out[...] = 0
            run(x16, x32, o16, planes, n, ni, pipe, 2)
            same = np.array_equal(o16, ours.reshape(-1).view(np.int16))
            print(f"{name}: the library's bits: {same}")

    # one thread, one plane in L2: each phase alone, then all three
    c16 = np.ascontiguousarray(x16[: n * ni])
    c32 = c16.view(np.float32)
    co = line_aligned(n * ni, np.float16).view(np.int16)
    st16 = np.empty(2 * n * S + 64, np.int16)
    st32 = st16.view(np.float32)
    acc = np.empty(LANES32 * S, np.float32)
    stat = np.empty(2 * S, np.float64)
    phases = {"A: stage + max": 1, "B: sums": 2, "C: pass 2": 4, "A + B + C": 7}
    fns = {k: (lambda m=m: sequential(c16, c32, co, st16, st32, acc, stat, 0, ni // S, n, ni, m))
           for k, m in phases.items()}
    fns.update({"widened " + k: (lambda m=m: widened(c16, co, st32, acc, stat, 0, ni // S, n, ni, m))
                for k, m in phases.items()})
    sec, _ = time_calls(fns, args.rounds)
    print(f"\n{args.shape} axis {len(shape) - 2} float16; one thread, one plane in L2, ns per element:")
    for k, v in sec.items():
        print(f"  {k:25s} {v / (n * ni) * 1e9:.3f}")

    # two threads, from memory
    fns = {
        "copy (2 threads)": lambda: copy2(x16, o16),
        "library out=": lambda: logsoftmax.log_softmax(x, axis=-2, out=ours),
        "sequential": lambda: run(x16, x32, o16, planes, n, ni, 0, 2),
        "pipelined": lambda: run(x16, x32, o16, planes, n, ni, 1, 2),
        "widened": lambda: run(x16, x32, o16, planes, n, ni, 2, 2),
    }
    sec, _ = time_calls(fns, args.rounds)
    copy = sec["copy (2 threads)"]
    budget = 2 * copy / x.size * 2 * 1e9
    print(f"\ntwo threads, from memory (the 50% budget: {budget:.3f} ns per element and thread):")
    for k, v in sec.items():
        print(f"  {k:16s} {v * 1e3:7.3f} ms  {copy / v:5.0%} of the copy"
              f"  {v / x.size * 2 * 1e9:.3f} ns/element/thread")


if __name__ == "__main__":
    main()
