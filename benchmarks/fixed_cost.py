"""Where the fixed cost of a small call goes: the ``out=`` checks in Python
(the general path's) against the ``np.empty`` an allocating call pays, the
compiled entry that checks a small call's ``out`` instead
(``backends/cpu/into.py``), and the layers between the front door and the
kernel (8-element float32 row, one thread); then ``out=`` against
allocating, forward and backward, side by side.

Each part is timed alone with ``timeit`` (the best of 7 repeats of 200,000
calls, an empty lambda's cost subtracted), so the parts are comparable with
each other, not additive to the last digit. The side-by-side lines are
medians of 150 rounds that each run 1,000 calls of every variant in turn
(a 20-50 ns difference is below the spread of two separate runs).

Run: ``python benchmarks/fixed_cost.py`` (prints only).
"""

from __future__ import annotations

import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np

import logsoftmax
from logsoftmax import _api
from logsoftmax.backends import Op, default_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info  # noqa: E402

NUMBER = 200_000


def us(fn) -> float:
    best = min(timeit.repeat(fn, number=NUMBER, repeat=7)) / NUMBER
    empty = min(timeit.repeat(lambda: None, number=NUMBER, repeat=7)) / NUMBER
    return (best - empty) * 1e6


def main() -> int:
    x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
    out = np.empty_like(x)
    dt, cpu = x.dtype, default_cpu()
    nd = np.ndarray
    logsoftmax.log_softmax(x)
    logsoftmax.log_softmax(x, out=out)

    def out_checks():  # the general path's Python checks of a separate out=
        return (
            type(out) is nd and ((out.base is None and x.base is None) or _api._apart(out, x))
        ) and out.flags.writeable

    lsm = int(Op.LOG_SOFTMAX)
    shape = x.shape  # (the backend has the input's shape tuple at hand)
    run = cpu._plans[(lsm, x.shape, x.strides, dt, dt, 0)]
    rows = [
        ("out= checks in Python (type, overlap, writeable)", out_checks),
        ("out= checks in Python, the backend's (shape, dtype)",
         lambda: out.shape != shape or out.dtype != dt),
        ("out.strides (what out= adds to the plan key in Python)", lambda: out.strides),
        ("np.empty of the result (what out= saves)", lambda: np.empty((8,), np.float32)),
        ("the plan's compiled entry, out= (checks in it)", lambda: run.into(x, out)),
        ("the plan, allocating", lambda: run(x, None)),
        ("the plan, out= checked in Python", lambda: run(x, out)),
        ("front door fast path, out=", lambda: _api._fast_forward(lsm, x, -1, out)),
        ("front door fast path, allocating", lambda: _api._fast_forward(lsm, x, -1, None)),
        ("backend call, out= (compiled checks)", lambda: cpu.forward_into(lsm, x, 0, out, dt)),
        ("backend call, out= (Python checks)", lambda: cpu.forward(lsm, x, 0, out, dt)),
        ("backend call, allocating", lambda: cpu.forward(lsm, x, 0, None, dt)),
        ("log_softmax(x, out=out)", lambda: logsoftmax.log_softmax(x, out=out)),
        ("log_softmax(x)", lambda: logsoftmax.log_softmax(x)),
    ]
    print(f"CPU: {cpu_info()['model']}; 8 float32 elements, us per call\n")
    print("| part | us |\n|---|---:|")
    for name, fn in rows:
        print(f"| {name} | {us(fn):.3f} |")
    side_by_side(x, out)
    return 0


def side_by_side(x, out, rounds: int = 150, calls: int = 1000) -> None:
    """Medians of interleaved rounds: ``out=`` against allocating."""
    y = logsoftmax.log_softmax(x)
    f, b = logsoftmax.log_softmax, logsoftmax.log_softmax_backward
    variants = {
        "log_softmax(x)": lambda: f(x),
        "log_softmax(x, out=out)": lambda: f(x, out=out),
        "log_softmax_backward(x, y)": lambda: b(x, y),
        "log_softmax_backward(x, y, out=out)": lambda: b(x, y, out=out),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nside by side ({rounds} interleaved rounds of {calls} calls, medians):\n")
    print("| call | us | out= / allocating |\n|---|---:|---:|")
    names = list(med)
    for i, name in enumerate(names):
        ratio = f"{med[name] / med[names[i - 1]]:.3f}" if i % 2 else ""
        print(f"| {name} | {med[name]:.3f} | {ratio} |")


if __name__ == "__main__":
    raise SystemExit(main())
