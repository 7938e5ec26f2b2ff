"""Where a parallel call starts to pay: the serial kernel against the parallel call.

The CPU backend runs a call serially below ``SERIAL_MAX >> shift``
elements (``backends/cpu/__init__``: ``SERIAL_MAX``, ``ACCURATE_SHIFT``,
``FEW_SHIFT``), because waking numba's thread pool costs more than it
saves on small calls. Where that line pays depends on the CPU, so it is
measured on each one: this script times the same ``out=`` call both ways
in one process, interleaved round by round. One way with ``SERIAL_MAX``
set past every problem (all serial), the other with ``SERIAL_MAX`` at the
problem's own size (parallel, whatever its shift; a smaller value would
also cut a long row into chunks over threads, which no call of the
default sizes does); each way keeps its own plans (a plan picks its
serial or parallel entry once). The parallel call is the plan's parallel
entry where it has one, else the general path (a few long rows, split
over threads: 8x4096, 16x4096). Both give the same bits (checked).

Prints, per problem and direction, the medians in microseconds and
serial / parallel (above 1: the parallel call is faster).

    python benchmarks/parallel_break_even.py [--rounds 41]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import ml_dtypes
import numpy as np

import logsoftmax
from logsoftmax.backends import get_backend

#: (rows, row length, dtype): the accurate float32 rows (up to 1024 forward,
#: 48 backward), bfloat16 rows, and the fast float32 forward's long rows
PROBLEMS = [
    (32, 128, np.float32), (64, 128, np.float32), (128, 128, np.float32), (256, 128, np.float32),
    (16, 1000, np.float32), (32, 1000, np.float32), (64, 1000, np.float32),
    (2048, 8, np.float32), (1024, 16, np.float32), (512, 32, np.float32),
    (128, 128, ml_dtypes.bfloat16), (256, 128, ml_dtypes.bfloat16), (512, 128, ml_dtypes.bfloat16),
    (8, 4096, np.float32), (16, 4096, np.float32),
]


def _per_call(fn, min_s=0.002) -> float:
    """Microseconds per call of ``fn``, looped for at least ``min_s``."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / n * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=41)
    args = ap.parse_args(argv)
    cpu = importlib.import_module("logsoftmax.backends.cpu")
    backend = get_backend("cpu")
    default = cpu.SERIAL_MAX, backend._plans

    def under(way, call):
        cpu.SERIAL_MAX, backend._plans = ways[way]
        try:
            return call()
        finally:
            cpu.SERIAL_MAX, backend._plans = default

    print(f"{'problem':24s} {'dir':4s} {'serial us':>10s} {'parallel us':>12s} {'serial/parallel':>16s}")
    rng = np.random.default_rng(0)
    for rows, n, dt in PROBLEMS:
        x = (rng.standard_normal((rows, n)) * 3).astype(dt)
        ways = {"serial": (1 << 60, {}), "parallel": (x.size, {})}
        y = logsoftmax.log_softmax(x)
        for direction in ("fwd", "bwd"):
            outs = {w: np.empty_like(x) for w in ways}
            if direction == "fwd":
                calls = {w: (lambda o=outs[w]: logsoftmax.log_softmax(x, out=o)) for w in ways}
            else:
                calls = {w: (lambda o=outs[w]: logsoftmax.log_softmax_backward(x, y, out=o)) for w in ways}
            times = {w: [] for w in ways}
            for w in ways:
                under(w, calls[w])  # plan and compile outside the timing
            for _ in range(args.rounds):
                for w in ways:
                    times[w].append(under(w, lambda: _per_call(calls[w])))
            assert np.array_equal(outs["serial"].view(np.uint8), outs["parallel"].view(np.uint8))
            s, p = (statistics.median(times[w]) for w in ways)
            name = f"{rows}x{n} {np.dtype(dt).name}"
            print(f"{name:24s} {direction:4s} {s:10.2f} {p:12.2f} {s / p:15.2f}x", flush=True)


if __name__ == "__main__":
    main()
