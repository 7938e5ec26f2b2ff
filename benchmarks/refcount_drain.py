"""Why the streaming kernels hand arrays only as views without an owner.

numba counts references to arrays with atomic instructions, and an atomic
on x86 waits for the streaming (non-temporal) stores still in flight. This
script times the short-row span writer (``rows._write_span``, streaming
stores of 16 rows) in a loop, in cache, called with its arrays as ordinary
numpy arrays (a reference taken and dropped per call, as the batch loop did
before) and as ownerless views (``_simd.view``, what ``rows.forward_short``
passes), beside the row-by-row writer (``segment.write_forward``) on the
same rows. One thread, ns per element, best of 3 runs of 20,000 calls.

Run: ``python benchmarks/refcount_drain.py [n]`` (rows of ``n`` float32,
default 64; prints only).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

from logsoftmax.backends.cpu import rows
from logsoftmax.backends.cpu._simd import view
from logsoftmax.backends.cpu.segment import write_forward

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, line_aligned  # noqa: E402

NB = 16  # rows per call (a batch of rows.forward_short)
REPS = 20_000
_LSM = 0


@njit
def _span_owned(xs, os, m, lg, inv, reps, n):
    for _ in range(reps):
        rows._write_span(xs, os, 0, 0, NB * n, n, _LSM, True, m, lg, inv, True)


@njit
def _span_views(xs, os, m, lg, inv, reps, n):
    xs, os = view(xs, 0, xs.size), view(os, 0, os.size)
    m, lg, inv = view(m, 0, m.size), view(lg, 0, lg.size), view(inv, 0, inv.size)
    for _ in range(reps):
        rows._write_span(xs, os, 0, 0, NB * n, n, _LSM, True, m, lg, inv, True)


@njit
def _rows(xs, os, m, lg, inv, reps, n):
    for _ in range(reps):
        for i in range(NB):
            write_forward(view(xs, i * n, n), view(os, i * n, n), 0, n, _LSM, True,
                          m[i + 1], lg[i + 1], inv[i + 1], 0)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    xs = line_aligned(NB * n)
    xs[:] = np.random.default_rng(0).standard_normal(xs.size)
    os = line_aligned(NB * n)
    m = np.random.default_rng(1).standard_normal(NB + 1)
    lg = m + 1.0
    inv = 1.0 / lg
    variants = {
        "span writer, numpy arrays (a reference per call)": _span_owned,
        "span writer, ownerless views": _span_views,
        "row-by-row writer": _rows,
    }
    for f in variants.values():
        f(xs, os, m, lg, inv, 10, n)
    print(f"CPU: {cpu_info()['model']}; {NB} rows of {n} float32 in cache, one thread\n")
    print("| variant | ns/element |\n|---|---:|")
    for name, f in variants.items():
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            f(xs, os, m, lg, inv, REPS, n)
            best = min(best, time.perf_counter() - t0)
        print(f"| {name} | {best / REPS / (NB * n) * 1e9:.3f} |")


if __name__ == "__main__":
    main()
