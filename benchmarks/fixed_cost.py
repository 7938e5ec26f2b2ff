"""Where the fixed cost of a small call goes: the ``out=`` checks against the
``np.empty`` they replace, and the layers between the front door and the
kernel (8-element float32 row, one thread).

Each line is timed alone with ``timeit`` (the best of 7 repeats of 200,000
calls, an empty lambda's cost subtracted), so the parts are comparable with
each other, not additive to the last digit.

Run: ``python benchmarks/fixed_cost.py`` (prints only).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

import numpy as np

import logsoftmax
from logsoftmax import _api
from logsoftmax.backends import default_cpu

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

    def out_checks():  # what _api._fast_forward checks for a separate out=
        return (
            type(out) is nd
            and out.dtype is dt
            and out.shape == x.shape
            and ((out.base is None and x.base is None) or _api._apart(out, x))
        ) and out.flags.writeable

    rows = [
        ("out= checks (type, dtype, shape, overlap, writeable)", out_checks),
        ("out.strides (what out= adds to the backend's plan key)", lambda: out.strides),
        ("np.empty of the result (what out= saves)", lambda: np.empty((8,), np.float32)),
        ("front door fast path, out=", lambda: _api._fast_forward("log_softmax", x, -1, out)),
        ("front door fast path, allocating", lambda: _api._fast_forward("log_softmax", x, -1, None)),
        ("backend call, out=", lambda: cpu.log_softmax(x, 0, out, dt)),
        ("backend call, allocating", lambda: cpu.log_softmax(x, 0, None, dt)),
        ("log_softmax(x, out=out)", lambda: logsoftmax.log_softmax(x, out=out)),
        ("log_softmax(x)", lambda: logsoftmax.log_softmax(x)),
    ]
    print(f"CPU: {cpu_info()['model']}; 8 float32 elements, us per call\n")
    print("| part | us |\n|---|---:|")
    for name, fn in rows:
        print(f"| {name} | {us(fn):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
