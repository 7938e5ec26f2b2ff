"""Schedules of the staged column forward's three passes (issue 10, ax0).

Long float32 columns whose rows lie a multiple of 4 KiB apart (1000x65536
axis 0) are staged: each tile of ``columns.STAGED_WIDTH`` columns is copied
with its max into a dense stage (memory), summed from it (arithmetic, L2),
then written from it by streaming stores (memory). The passes run one after
another in each thread, and the forward sits at about 50% of a copy's
bandwidth. This script asks whether another order of the same work, built
from the kernel's own pieces (``columns._stage_rows``,
``columns._tile_sums_row_major``, ``columns._tile_write``), gets more
overlap. Interleaved in one process, 2 threads, each thread half the
columns, medians in ms:

* ``sequential``: the kernel's order per tile (stage + max, sums, pass 2);
* ``offset w``: the same, with the second thread's first tile ``w`` columns
  wide, so that the threads' memory passes and arithmetic no longer line
  up: if the memory passes were bound by the bandwidth the two threads
  share, one thread's memory pass overlapping the other's sums would gain;
* ``restage r``: pass 2 ``r`` stage rows at a time, each block of the stage
  then refilled at once with the next tile's rows (and their max): the
  write and the next tile's read as one copy-like stream, with one stage;
* ``next max in sums``: the next tile's max taken row by row inside this
  tile's sums (its rows asked for 16 ahead), so that its memory reads
  overlap the arithmetic; after pass 2 its stage copy takes no max, from
  wherever its rows still are (L3, if anywhere);
* ``sequential, 4 KiB pages``: the kernel's order into an output on
  ordinary pages (an anonymous map without huge-page advice, as the
  library's result pool) instead of numpy's (advised for huge pages);

next to the library's forward itself (``log_softmax(x, axis=0, out=)``)
and a 2-thread copy of the same bytes. The share of each buffer on huge
pages (``/proc/self/smaps``) is printed with the table.

``--check`` first compares each schedule's output with the library's
bits (the same work in another order: every one gives them).

Run: ``python benchmarks/column_schedules.py [1000x65536] [--rounds 9]
[--check]``.
"""

from __future__ import annotations

import argparse
import mmap
import sys
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

import logsoftmax
from logsoftmax.backends import Op
from logsoftmax.backends.cpu import columns as C
from logsoftmax.backends.cpu._math import exp_f64, log_f64
from logsoftmax.backends.cpu._simd import TRUE, wide_vectors
from logsoftmax.backends.cpu._vec import hi_f64, lo_f64, prefetch_l2, sfence, splat, vload, vstore
from logsoftmax.backends.cpu.segment import LANES32, LANES64, W

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CopyBench, cpu_info, line_aligned, time_calls  # noqa: E402

_LSM = int(Op.LOG_SOFTMAX)


@njit(inline="always")
def _sums_taking_max(st, n, jn, J, acc64, mc, sc, xb, pn, xsn, mn):
    """``columns._tile_sums_row_major`` (accurate) on the stage, each row
    also taking row ``k`` of the next tile (``xb[pn:]``, rows ``xsn`` apart)
    into its max ``mn``."""
    nv = jn // W
    for lane_ in range(LANES64):
        for v in range(2 * nv):
            vstore(acc64, lane_ * J + v * (W // 2), splat(0.0))
    for k in range(n):
        if pn >= 0:
            for j in range(0, jn, W):
                prefetch_l2(xb, pn + (k + C._WIDE_AHEAD) * xsn + j)
            C._max_row(xb, pn, xsn, k, jn, mn)
        q = (k % LANES64) * J
        for v in range(nv):
            j = v * W
            x = vload(st, k * J + j)
            m = vload(mc, j)
            a = q + j
            vstore(acc64, a, vload(acc64, a) + exp_f64(lo_f64(x) - lo_f64(m)))
            vstore(acc64, a + W // 2, vload(acc64, a + W // 2) + exp_f64(hi_f64(x) - hi_f64(m)))
    C._lane_tree(acc64, min(n, LANES64), 2 * nv, W // 2, J, LANES64)
    for j in range(jn):
        sc[j] = acc64[j]


@njit(inline="always")
def _statistics(mc, sc, m, lg, jn):
    """Pass 2's float64 statistics of a tile, as ``columns.forward_tiles``
    takes them (no all--inf columns here): ``m`` and ``log s``."""
    for j in range(jn):
        m[j] = np.float64(mc[j])
    for j in range(0, jn, W // 2):
        vstore(lg, j, log_f64(vload(sc, j)))


@njit(parallel=True, error_model="numpy")
def _schedule(xb, ob, n, ni, J, mode, arg):
    """One schedule (see the module docstring) on 2 threads: ``mode`` 0
    sequential (``arg``: the second thread's first tile width, 0 = J), 1
    restage (``arg`` rows a block), 2 next max in sums."""
    for th in prange(2):
        wide_vectors()
        st = np.empty(n * J + 16, np.float32)
        st = st[((-st.ctypes.data) % 64) // 4 :][: n * J]
        acc32 = np.empty(LANES32 * J, np.float32)
        acc64 = np.empty(LANES64 * J)
        mc = np.empty(J, np.float32)
        mn = np.empty(J, np.float32)
        sc = np.empty(J)
        m = np.empty(J + W)
        lg = np.empty(J + W)
        inv = np.ones(J + W)
        ma = np.zeros(J + W, np.float32)
        c0 = th * (ni // 2)
        c1 = c0 + ni // 2
        j0 = c0
        w = arg if (mode == 0 and th == 1 and arg > 0) else J
        w = min(w, c1 - j0)
        if mode != 0:
            C._stage_rows(xb, j0, ni, n, w, st, J, mc)
        while j0 < c1:
            if mode == 0:
                C._stage_rows(xb, j0, ni, n, w, st, J, mc)
            j2 = j0 + w
            w2 = min(J, c1 - j2)
            if mode == 2:
                _sums_taking_max(st, n, w, J, acc64, mc, sc, xb, j2 if w2 > 0 else -1, ni, mn)
            else:
                C._tile_sums_row_major(st, 0, J, n, w, TRUE, acc32, acc64, mc, sc, J, -1, 0, mc)
            _statistics(mc, sc, m, lg, w)
            if mode == 1 and w2 > 0:
                for k in range(0, n, arg):
                    k1 = min(n, k + arg)
                    C._tile_write(st, k * J, J, ob, k * ni + j0, ni, k1 - k, w, _LSM, TRUE, m, lg, inv,
                                  ma, ma, ma, TRUE, -1, 0, -1, 0, ma)
                    C._stage_rows(xb, j2, ni, k1, w2, st, J, mc, k)
            else:
                C._tile_write(st, 0, J, ob, j0, ni, n, w, _LSM, TRUE, m, lg, inv, ma, ma, ma, TRUE, -1, 0, -1, 0, ma)
                if mode == 2 and w2 > 0:
                    for k in range(n):  # the stage copy, its max already taken
                        q = j2 + k * ni
                        for j in range(0, w2, W):
                            prefetch_l2(xb, q + C._WIDE_AHEAD * ni + j)
                            vstore(st, k * J + j, vload(xb, q + j))
                    for j in range(0, w2, W):
                        vstore(mc, j, vload(mn, j))
            j0 = j2
            w = w2
        sfence()


def _huge_share(a: np.ndarray) -> float:
    """The share of ``a``'s bytes that its mappings hold on huge pages."""
    lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
    rss = huge = 0
    inside = False
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return float("nan")
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            s, e = (int(v, 16) for v in head.split("-"))
            inside = s < hi and e > lo
        elif inside and line.startswith("Rss:"):
            rss += int(line.split()[1])
        elif inside and line.startswith("AnonHugePages:"):
            huge += int(line.split()[1])
    return huge / rss if rss else float("nan")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", nargs="?", default="1000x65536", help="rows x columns, reduced over the rows")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--check", action="store_true", help="compare each schedule's bits with the library's")
    args = ap.parse_args(argv)
    n, ni = (int(v) for v in args.shape.split("x"))
    numba.set_num_threads(2)
    J = int(C.tile_width_for(n, ni, False, 2, staged=True))
    if not C.staged_rows(n, ni * 4, 4) or (ni // 2) % J:
        raise SystemExit(f"{args.shape}: not a staged problem with whole tiles a thread")
    x = np.random.default_rng(0).standard_normal((n, ni), dtype=np.float32) * 3
    out = line_aligned(n * ni).reshape(n, ni)  # numpy's memory (huge-page advice)
    raw = mmap.mmap(-1, n * ni * 4 + 64)  # ordinary pages, as the library's result pool
    buf = np.frombuffer(raw, np.uint8)
    small = buf[(-buf.ctypes.data) % 64 :][: n * ni * 4].view(np.float32).reshape(n, ni)
    small.fill(0)
    out.fill(0)
    xb, ob, sb = x.reshape(-1), out.reshape(-1), small.reshape(-1)
    fns = {
        "copy of the same bytes": CopyBench(2 * x.nbytes, 2),
        "the library's forward (out=)": lambda: logsoftmax.log_softmax(x, axis=0, out=out),
        "sequential": lambda: _schedule(xb, ob, n, ni, J, 0, 0),
        "offset 64": lambda: _schedule(xb, ob, n, ni, J, 0, 64),
        "offset 128": lambda: _schedule(xb, ob, n, ni, J, 0, 128),
        "restage 4": lambda: _schedule(xb, ob, n, ni, J, 1, 4),
        "restage 32": lambda: _schedule(xb, ob, n, ni, J, 1, 32),
        "next max in sums": lambda: _schedule(xb, ob, n, ni, J, 2, 0),
        "sequential, 4 KiB pages": lambda: _schedule(xb, sb, n, ni, J, 0, 0),
    }
    if args.check:
        ref = logsoftmax.log_softmax(x, axis=0)
        for mode, arg in ((0, 0), (0, 64), (1, 4), (1, 32), (2, 0)):
            out.fill(np.nan)
            _schedule(xb, ob, n, ni, J, mode, arg)
            if not np.array_equal(out.view(np.uint32), ref.view(np.uint32)):
                raise SystemExit(f"schedule {mode} ({arg}): not the library's bits")
        print("every schedule gives the library's bits")
    for fn in fns.values():
        fn()
    t, _errors = time_calls(fns, args.rounds)
    info = cpu_info()
    print(f"CPU: {info.get('model', '?')}; 2 threads; {args.shape} axis 0 float32; {J} columns a tile; "
          f"medians of {args.rounds}")
    print(f"huge pages: input {_huge_share(x):.0%}, numpy output {_huge_share(out):.0%}, "
          f"4 KiB-page output {_huge_share(small):.0%}")
    base = t["sequential"]
    print("| schedule | ms | sequential / it |")
    print("|---|---:|---:|")
    for name, sec in t.items():
        print(f"| {name} | {sec * 1e3:.2f} | {base / sec:.2f} |")
    print(f"the 50%-of-copy budget: {2 * t['copy of the same bytes'] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
