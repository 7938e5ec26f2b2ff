"""What bounds float32 log_softmax on short reductions (rows or columns of
<= 1024 elements) on this CPU.

Issue 10 asks short float32 rows and the non-last axis for >= 1.2x
PyTorch's ``out=`` speed. Our float32 results there come from the
*accurate* path (API.md 1; ``tests/test_cpu_backend.py`` holds them to
0.55 eps, PyTorch is at 1.3-6 eps): float64 terms ``exp(x - m)`` of the
exact float64 differences, and a float64 pass 2 rounded once. This script
times, on one thread with the data in cache (so that only arithmetic is
measured), interleaved in one process:

* PyTorch's whole ``log_softmax(out=)`` and ``torch.exp`` alone;
* our whole forward, and its phases on the same rows: the max, the sum of
  float64 exponentials (the accurate path), the float64 write; and, for
  comparison, the sum and write of the float32 *fast* path that 16-bit
  results and rows > 1024 use (0.69-0.73 eps on short float32 rows: fails
  the accuracy test);
* the column kernel (NCHW, 64 channels) on one tile: whole tile, and its
  accurate chunk sums taken lane-major (what the kernel does for chunks of
  <= ``LANE_MAJOR_ROWS`` rows) or row-major.

The budget for 1.2x PyTorch is ``torch / 1.2`` ns per element; if the
accurate sum and write alone exceed it, the target cannot be met without
giving up the accuracy the suite demands.

A last table runs the short-row problems from memory (2 threads), where
PyTorch slows down more than our kernels do: there the in-cache bound
above does not decide the target (``docs/performance.md``, the tenth Intel
session).

Run: ``python benchmarks/accurate_limits.py [--repeat 15]`` (prints only).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit

import logsoftmax
from logsoftmax.backends import Op
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu._simd import view
from logsoftmax.backends.cpu import rows as R
from logsoftmax.backends.cpu import tiny as T
from logsoftmax.backends.cpu.segment import (
    LANES32,
    LANES64,
    chunk_max,
    chunk_sum_at,
    write_backward,
    write_forward,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, line_aligned, time_calls  # noqa: E402
from strided_limits import _floor  # noqa: E402

# an int, as the backend passes it: an enum member as an argument costs numba
# ~16 us a call to type (0.8 us for an int), which the timings would include
_LSM = int(Op.LOG_SOFTMAX)


@njit(cache=True)
def _max_pass(x, n):
    acc = np.float32(0.0)
    for i in range(x.size // n):
        acc += chunk_max(view(x, i * n, n), 0, n)
    return acc


@njit(cache=True)
def _sum_pass(x, n, accurate):
    acc = 0.0
    for i in range(x.size // n):
        acc += chunk_sum_at(view(x, i * n, n), n, np.float32(1.0), accurate)[1]
    return acc


@njit(cache=True)
def _write_pass(x, o, n, accurate):
    for i in range(x.size // n):
        write_forward(view(x, i * n, n), view(o, i * n, n), 0, n, _LSM, accurate, 1.0, 0.5, 2.0)


@njit(cache=True)
def _rows_forward(x, o, g, accurate):
    """The kernel a call on these rows takes (``rows.short_form``)."""
    form = R.short_form(g[2], accurate, g[0] * g[1])
    if form == R.ShortForm.TINY:
        T.forward_tiny(x, o, g, _LSM, accurate, 0, g[0] * g[1])
    elif form == R.ShortForm.TINY_VECTOR:
        T.forward_tiny_vector(x, o, g, _LSM, accurate, 0, g[0] * g[1])
    elif form == R.ShortForm.WHOLE:
        R.forward_whole(x, o, g, _LSM, accurate, 0, g[0] * g[1])
    else:
        R.forward_short(x, o, g, _LSM, accurate, 0, g[0] * g[1])


@njit(cache=True)
def _tile_forward(x, o, g, J):
    C.forward_tiles(x, o, g, _LSM, True, J, 0, 1)


@njit(cache=True)
def _tile_sums(x, g, J, mc, lane_major):
    """The accurate chunk sums of one tile (its max ``mc`` given), in either
    order (the same bits)."""
    f32s = np.empty(LANES32 * J, np.float32)
    acc64 = np.empty(LANES64 * J)
    sc = np.empty(J)
    p, n, sn = g[4], g[2], g[7]
    if lane_major:
        C._tile_sums_lane_major(x, p, sn, n, J, True, f32s, acc64, mc, sc, -1, 0, -1, 0, mc)
    else:
        C._tile_sums_row_major(x, p, sn, n, J, True, f32s, acc64, mc, sc, J, -1, 0, mc)
    return sc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    numba.set_num_threads(1)
    info = cpu_info()
    print(f"CPU: {info['key']}, one thread, data in cache")

    rng = np.random.default_rng(0)
    n, rows = 128, 512  # 256 KiB in + out: L2
    x = (rng.standard_normal(rows * n) * 3).astype(np.float32)
    o = np.empty_like(x)
    g = np.array([rows, 1, n, 1, 0, n, 0, 1, 1, 0, n, 0, 1, 1], np.int64)
    tx, to = torch.from_numpy(x.reshape(rows, n)), torch.from_numpy(o.reshape(rows, n))
    te = torch.empty_like(tx)
    t16, t32 = tx.reshape(-1, 16), tx.reshape(-1, 32)
    o16, o32 = to.reshape(-1, 16), to.reshape(-1, 32)
    fns = {
        "torch log_softmax(out=)": lambda: torch.log_softmax(tx, 1, out=to),
        "torch log_softmax(out=), rows of 16": lambda: torch.log_softmax(t16, 1, out=o16),
        "torch log_softmax(out=), rows of 32": lambda: torch.log_softmax(t32, 1, out=o32),
        "torch.exp(out=)": lambda: torch.exp(tx, out=te),
        "ours: forward (accurate)": lambda: _rows_forward(x, o, g, True),
        "ours: max pass": lambda: _max_pass(x, n),
        "ours: float64-exp sum (accurate)": lambda: _sum_pass(x, n, True),
        "ours: float64 write (accurate)": lambda: _write_pass(x, o, n, True),
        "ours: forward (fast, fails 0.55 eps)": lambda: _rows_forward(x, o, g, False),
        "ours: float32-exp sum (fast)": lambda: _sum_pass(x, n, False),
        "ours: float32 write (fast)": lambda: _write_pass(x, o, n, False),
    }
    sec, _ = time_calls(fns, args.repeat)
    ns = {k: v / x.size * 1e9 for k, v in sec.items()}
    print(f"\nrows: {rows}x{n} float32, ns per element")
    for k, v in ns.items():
        print(f"  {k:40s} {v:6.3f}")
    budget = ns["torch log_softmax(out=)"] / 1.2
    floor = (ns["ours: max pass"] + ns["ours: float64-exp sum (accurate)"]
             + ns["ours: float64 write (accurate)"])
    print(f"  1.2x PyTorch budget: {budget:.3f}; accurate max + sum + write alone: {floor:.3f}"
          f" ({floor / budget:.2f}x the budget)")
    for k in (16, 32):  # the same per-element floor (a lane per row: .tiny)
        b = ns[f"torch log_softmax(out=), rows of {k}"] / 1.2
        print(f"  rows of {k}: 1.2x PyTorch budget {b:.3f}; the floor above {floor / b:.2f}x it")
    _other_lengths(args.repeat, rng, torch)

    c, hw = 64, 112 * 112  # NCHW 1x64x112x112, axis 1: one tile of J columns
    J = int(C.tile_width(c, hw))
    xc = (rng.standard_normal(c * hw) * 3).astype(np.float32)
    oc = np.empty_like(xc)
    gc = np.array([1, 1, c, hw, 0, c * hw, 0, hw, 1, 0, c * hw, 0, hw, 1], np.int64)
    txc = torch.from_numpy(xc[: c * J].reshape(c, J).copy())
    toc = torch.empty_like(txc)
    mc = np.ascontiguousarray(txc.numpy().max(0))
    same = np.array_equal(_tile_sums(xc, gc, J, mc, True), _tile_sums(xc, gc, J, mc, False))
    fns = {
        "torch log_softmax(out=), same tile": lambda: torch.log_softmax(txc, 0, out=toc),
        "ours: tile forward": lambda: _tile_forward(xc, oc, gc, J),
        "ours: tile sums, lane-major": lambda: _tile_sums(xc, gc, J, mc, True),
        "ours: tile sums, row-major": lambda: _tile_sums(xc, gc, J, mc, False),
    }
    sec, _ = time_calls(fns, args.repeat)
    print(f"\ncolumns: one {c}x{J} tile of NCHW 64x112x112 (axis 1), ns per element"
          f" (the two sum orders give the same bits: {same})")
    for k, v in sec.items():
        print(f"  {k:40s} {v / (c * J) * 1e9:6.3f}")
    _backward_rows(args.repeat, rng, torch)
    _from_memory(args.repeat, rng, torch)


def _other_lengths(repeat, rng, torch) -> None:
    """The same floor at the row lengths of the performance set's short-row
    problems (r16, r32, p05: 224, p06: 250, p03: 384), each row length
    timed on its own rows: PyTorch's ``out=`` call and our whole forward
    (rows of 16: :mod:`.tiny`'s) against our max pass, float64-exp sum and
    float64 write."""
    print("\nrows of the performance set, float32, ns per element:"
          " torch out= / ours / accurate max + sum + write alone; floor / 1.2x-PyTorch budget")
    for n in (16, 32, 224, 250, 384):
        rows = (1 << 16) // n
        x = (rng.standard_normal(rows * n) * 3).astype(np.float32)
        o = np.empty_like(x)
        g = np.array([rows, 1, n, 1, 0, n, 0, 1, 1, 0, n, 0, 1, 1], np.int64)
        tx, to = torch.from_numpy(x.reshape(rows, n)), torch.from_numpy(o.reshape(rows, n))
        fns = {
            "torch": lambda: torch.log_softmax(tx, 1, out=to),
            "ours": lambda: _rows_forward(x, o, g, True),
            "max": lambda: _max_pass(x, n),
            "sum": lambda: _sum_pass(x, n, True),
            "write": lambda: _write_pass(x, o, n, True),
        }
        sec, _ = time_calls(fns, repeat)
        ns = {k: v / x.size * 1e9 for k, v in sec.items()}
        floor = ns["max"] + ns["sum"] + ns["write"]
        print(f"  n = {n}: torch {ns['torch']:.3f}, ours {ns['ours']:.3f}, floor {floor:.3f};"
              f" {floor / (ns['torch'] / 1.2):.2f}x the budget")


@njit(cache=True)
def _bwd_write_pass(d, y, o, n):
    """The accurate backward's pass 2 alone (``diff_dst - e**dst * S``, a
    float64 ``exp`` per element, rounded once), ``S`` given."""
    for i in range(d.size // n):
        write_backward(view(d, i * n, n), view(y, i * n, n), view(o, i * n, n), 0, n, _LSM,
                       True, 0.37)


def _backward_rows(repeat, rng, torch) -> None:
    """float32 log_softmax backward of short rows, which the suite holds to
    1 eps on rows of 4-40 (``SHORT_BACKWARD``: the accurate path, a float64
    ``exp(dst)``; PyTorch's float32 one is 1.1-3.9 eps): PyTorch's whole
    backward against our whole one and our pass 2 alone, in cache."""
    from logsoftmax.backends.cpu.layout import layout
    from logsoftmax.backends.cpu.rows import backward_accurate

    print("\nbackward rows (float32, log_softmax), ns per element; 1.2x PyTorch's budget")
    for n in (16, 32, 48):
        rows = 4096 // n * 16  # 256 KiB a stream: L2
        x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
        d = rng.standard_normal((rows, n)).astype(np.float32)
        tx = torch.from_numpy(x)
        y = torch.log_softmax(tx, 1).numpy().copy()
        o = np.empty_like(d)
        lay = layout(d.shape, [d.strides, y.strides, o.strides], [4, 4, 4], 1)
        db, yb, ob = lay.buffers([d, y, o])
        g = next(iter(lay.geometries()))
        td, ty, to = torch.from_numpy(d), torch.from_numpy(y), torch.empty_like(tx)
        fns = {
            "torch": lambda: torch._log_softmax_backward_data(td, ty, 1, torch.float32, out=to),
            "ours": lambda: backward_accurate(db, yb, ob, g, _LSM, True, 0, rows),
            "pass 2 alone": lambda: _bwd_write_pass(db, yb, ob, n),
        }
        sec, _ = time_calls(fns, repeat)
        ns = {k: v / d.size * 1e9 for k, v in sec.items()}
        budget = ns["torch"] / 1.2
        print(f"  n = {n:2d}: torch {ns['torch']:.3f}, ours {ns['ours']:.3f}, our pass 2 alone "
              f"{ns['pass 2 alone']:.3f}; budget {budget:.3f} (pass 2 alone "
              f"{ns['pass 2 alone'] / budget:.2f}x it)")


def _from_memory(repeat, rng, torch) -> None:
    """The performance set's short-row problems run from memory (32 MiB a
    stream, 2 threads), where the bound above does not apply: PyTorch's
    ``out=`` call and ours, forward and backward, in ns per element and
    thread, next to our whole call in cache (0.5 MiB, one thread). If our
    in-cache time is under 1/1.2 of PyTorch's from-memory time, the target
    is within reach of a kernel that hides memory behind its arithmetic.
    The forwards also run a floor from memory on the same bytes
    (``strided_limits._floor``, one pass: each vector loaded once and put
    through the accurate max, float64 term and pass 2, statistics known
    beforehand, streaming stores; no per-row reductions or logs), against
    1/1.2 of PyTorch's time: above it, the target is out of reach."""
    print("\nfrom memory (2**23 elements, 2 threads) against in cache (2**17, one thread),"
          " float32 log_softmax, ns per element and thread")
    for n, direction in ((16, "fwd"), (32, "fwd"), (128, "fwd"), (16, "bwd"), (32, "bwd")):
        ns = {}
        for total, threads in ((1 << 23, 2), (1 << 17, 1)):
            numba.set_num_threads(threads)
            torch.set_num_threads(threads)
            x = (rng.standard_normal((total // n, n)) * 3).astype(np.float32)
            tx = torch.from_numpy(x)
            y = torch.log_softmax(tx, 1)
            d = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
            to = torch.empty_like(tx)
            o = np.empty_like(x)
            yn, dn = y.numpy(), d.numpy()
            if direction == "fwd":
                fns = {"torch": lambda: torch.log_softmax(tx, 1, out=to),
                       "ours": lambda: logsoftmax.log_softmax(x, 1, out=o)}
                if threads == 2:
                    xf, of = x.reshape(-1), line_aligned(x.size, np.float32)
                    fns["floor"] = lambda: _floor(xf, of, True, 16 * n, False, True)
            else:
                fns = {"torch": lambda: torch._log_softmax_backward_data(d, y, 1, torch.float32,
                                                                       out=to),
                       "ours": lambda: logsoftmax.log_softmax_backward(dn, yn, 1, out=o)}
            sec, _ = time_calls(fns, repeat)
            for k, v in sec.items():
                ns[(k, total)] = v / total * 1e9 * threads
        torch_mem, ours_mem, ours_cache = ns[("torch", 1 << 23)], ns[("ours", 1 << 23)], ns[("ours", 1 << 17)]
        floor = ""
        if ("floor", 1 << 23) in ns:
            f = ns[("floor", 1 << 23)]
            floor = f"; the floor from memory {f:.3f} = {f / (torch_mem / 1.2):.2f}x the 1.2x budget"
        print(f"  n = {n:3d} {direction}: torch {torch_mem:.3f} (in cache {ns[('torch', 1 << 17)]:.3f}),"
              f" ours {ours_mem:.3f} (in cache {ours_cache:.3f}): {torch_mem / ours_mem:.2f}x PyTorch;"
              f" ours at its in-cache speed {torch_mem / ours_cache:.2f}x{floor}")
    numba.set_num_threads(1)
    torch.set_num_threads(1)


if __name__ == "__main__":
    main()
