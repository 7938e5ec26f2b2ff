"""Where in its page a kernel's stack may sit: the 4K-alias sweep behind ``native.STACK_PHASE``.

A kernel's loops load constants (the exp polynomial, masks) from fixed
addresses and keep values in stack slots. A load whose address bits 0-11
equal those of a store still in flight waits for it (a 4K alias), so a
kernel whose stack slots fall on its constants' bits runs several times
slower. The constants' bits are fixed for a given build of a kernel; the
stack's are not: the main thread's stack starts at a random place in its
page (ASLR), so on the AMD EPYC Zen 3 the float32 forward ran 3.4x slower
in 8-20% of processes. :func:`logsoftmax.backends.cpu.native.call_native`
therefore calls every kernel with the stack at one place in its page,
``STACK_PHASE``; this script times each kernel below, serial and in cache,
at every 32 bytes of the page (:func:`~logsoftmax.backends.cpu.native.call_native_at`)
and prints, per kernel, where it runs slow, then the places where none does
and those where the slowest kernel is least slow (each kernel against its
own fastest place).

Each kernel's build decides its slow places, so rerun this after a change to
the kernels, on a new CPU or a new numba/LLVM, and keep ``STACK_PHASE`` at
one of the places it prints as clear.

Run: ``python benchmarks/stack_phase.py [--step 32] [--slow 1.5]`` (prints only).
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np
from numba import njit

from logsoftmax.backends.cpu import columns, fewrows, native, rows, segment, strips
from logsoftmax.backends.cpu.layout import layout
from logsoftmax.backends.cpu.native import call_native_at

F32, BF16, F16 = np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)


@njit
def _at(phase, addr, args, k):
    for _ in range(k):
        call_native_at(phase, addr, args)


def _flat(a):
    """The kernels' flat storage view (16-bit data as uint16)."""
    return a.reshape(-1).view(np.uint16) if a.itemsize == 2 else a.reshape(-1)


def cases():
    """``(label, module, kernel name, args)``: the row, tile and few-row
    kernels, serial, on arrays that stay in L2 or L3; then the forward
    strips and the row logsumexp, whose parallel forms are ``prange`` loops
    of their own (not :func:`~logsoftmax.backends.cpu.native.call_native`)."""
    rng = np.random.default_rng(0)
    out = []

    def rows_case(label, name, shape, dt, backward):
        x = (rng.standard_normal(shape) * 3).astype(dt)
        lay = layout(x.shape, [x.strides] * (3 if backward else 2), [x.itemsize] * (3 if backward else 2), 1)
        n = shape[1]
        limit = segment.SHORT_BACKWARD if backward else segment.SHORT
        accurate = np.bool_(dt == F32 and n <= limit)
        if backward:
            y = (-np.abs(rng.standard_normal(shape)) * 3).astype(dt)
            arrays = (_flat(x), _flat(y), _flat(np.empty_like(x)))
        else:
            arrays = (_flat(x), _flat(np.empty_like(x)))
        out.append((label, rows, name, arrays + (lay.g, 0, accurate, np.int64(0), np.int64(shape[0]))))

    rows_case("rows fwd 8x4096 f32", "forward_range", (8, 4096), F32, False)
    rows_case("rows bwd 8x4096 f32", "backward_range", (8, 4096), F32, True)
    for dt, tag in ((F32, "f32"), (BF16, "bf16"), (F16, "f16")):
        rows_case(f"rows fwd 4x32000 {tag}", "forward_range", (4, 32000), dt, False)
        rows_case(f"rows bwd 4x32000 {tag}", "backward_range", (4, 32000), dt, True)
        rows_case(f"short fwd 512x128 {tag}", "forward_whole", (512, 128), dt, False)  # (rows.short_form)
        rows_case(f"short bwd 512x128 {tag}", "backward_short", (512, 128), dt, True)
    rows_case("short fwd 2048x32 f32", "forward_whole", (2048, 32), F32, False)
    rows_case("short bwd 2048x32 f32", "backward_accurate", (2048, 32), F32, True)

    for dt, tag, c in ((F32, "f32", 64), (F16, "f16", 64), (F32, "f32", 8)):
        x = (rng.standard_normal((4, c, 32 * 32)) * 3).astype(dt)
        o = np.empty_like(x)
        lay = layout(x.shape, [x.strides, o.strides], [x.itemsize] * 2, 1)
        n, ni = lay.dims[2], lay.dims[3]
        accurate = np.bool_(dt == F32)
        if c <= 8:
            module, name, label = fewrows, "forward_few", f"few fwd 4x{c}x1024 {tag}"
            J = columns.tile_width_for(n, ni, False, 1)
        else:
            module, name, label = columns, "forward_tiles", f"tiles fwd 4x{c}x1024 {tag}"
            staged = columns.stages(lay.g, x.itemsize, o.itemsize)
            J = columns.tile_width_for(n, ni, False, 1, staged=staged, fast16=dt != F32)
        out.append((label, module, name,
                    (_flat(x), _flat(o), lay.g, 0, accurate, np.int64(J), np.int64(0), np.int64(-1))))

    # kernels that run their own prange loops (not through call_native):
    # their serial form, to see whether they need the same fixed place
    for c, hw in ((64, 32 * 32), (64, 56 * 56)):
        x = (rng.standard_normal((2, c, hw)) * 3).astype(F32)
        o = np.empty_like(x)
        lay = layout(x.shape, [x.strides, o.strides], [4, 4], 1)
        count, h, stream = strips.strip_plan(_flat(o), lay.g, 1)
        out.append((f"strips fwd 2x{c}x{hw} f32", strips, "forward_strips",
                    (_flat(x), _flat(o), lay.g, 0, np.int64(0), np.int64(count), h, stream,
                     np.empty(strips.SCRATCH))))
    x = rng.standard_normal((64, 4096)).astype(F32)
    lse = np.empty(64)
    lay = layout(x.shape, [x.strides, (8, 8)], [4, 8], 1)
    out.append(("logsumexp 64x4096 f32", rows, "logsumexp_range", (_flat(x), lse, lay.g, np.int64(0), np.int64(64))))
    return out


def sweep(args, step: int, repeat: int):
    """Seconds per call of the kernel at each place (0, step, ...) of the
    page: the median of ``repeat`` samples of ~2 ms each."""
    label, module, name, kargs = args
    addr, _ = native.Compiled(module, name).resolve(kargs)
    _at(0, addr, kargs, 1)
    t0 = time.perf_counter()
    _at(0, addr, kargs, 4)
    k = max(1, int(0.002 / ((time.perf_counter() - t0) / 4)))
    times = {}
    phases = list(range(0, 4096, step))
    samples = {p: [] for p in phases}
    for _ in range(repeat):
        for p in phases:
            t = time.perf_counter()
            _at(p, addr, kargs, k)
            samples[p].append((time.perf_counter() - t) / k)
    for p in phases:
        times[p] = float(np.median(samples[p]))
    return times


def _ranges(phases, step):
    """``[a, b]`` runs of consecutive places, as text."""
    runs, start, prev = [], None, None
    for p in phases:
        if start is None:
            start = prev = p
        elif p == prev + step:
            prev = p
        else:
            runs.append((start, prev))
            start = prev = p
    if start is not None:
        runs.append((start, prev))
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, default=32, help="bytes between the places swept")
    ap.add_argument("--slow", type=float, default=1.5, help="slow: this many times the kernel's fastest place")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    places = list(range(0, 4096, args.step))
    clear = set(places)
    worst = dict.fromkeys(places, 1.0)
    print(f"STACK_PHASE now: {native.STACK_PHASE}\n")
    print("| kernel | fastest | at STACK_PHASE | slowest | slow places (rsp % 4096) |")
    print("|---|---:|---:|---:|---|")
    for case in cases():
        t = sweep(case, args.step, args.repeat)
        best = min(t.values())
        slow = sorted(p for p, v in t.items() if v > args.slow * best)
        clear -= set(slow)
        for p, v in t.items():
            worst[p] = max(worst[p], v / best)
        here = t.get(native.STACK_PHASE, float("nan"))
        print(f"| {case[0]} | {best * 1e6:.1f} us | {here / best:.2f}x | {max(t.values()) / best:.2f}x | "
              f"{_ranges(slow, args.step)} |")
    print(f"\nplaces no kernel is slow at: {_ranges(sorted(clear), args.step)}")
    ranked = sorted(places, key=lambda p: worst[p])
    print("least worst ratio over the kernels: "
          + ", ".join(f"{p} ({worst[p]:.2f}x)" for p in ranked[:8])
          + f"; at STACK_PHASE ({native.STACK_PHASE}): {worst.get(native.STACK_PHASE, float('nan')):.2f}x")


if __name__ == "__main__":
    main()
