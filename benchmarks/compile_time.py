"""How long the CPU kernels take to compile, cold, per dtype and kind of call.

numba compiles a kernel on the first call that needs it (per storage types
of its operands) and caches the machine code on disk. A fresh clone, a new
CPU or an edited kernel source starts cold: the first ``log_softmax`` of a
float32 row of 5000 elements then waits for ``rows.forward_range`` to
compile. That wait is what a user's first call pays, and it is most of
``make test``'s time on a fresh clone (every dtype, direction and layout is
exercised, in two pytest workers that each compile what they use).

Each case runs in a fresh process with an empty ``NUMBA_CACHE_DIR`` (so
numba compiles everything that call needs and nothing else) and reports the
wall time of that first call, import excluded; then once more against the
cache it just wrote (the warm first call of a later process).

    python benchmarks/compile_time.py [--tree PATH] [--dtypes f32,bf16] [--only out=,short]

``--tree`` times another checkout's ``src`` (e.g. a ``git worktree`` of an
older commit) with this script, for a before/after in one run. Prints only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: (label, the call): shapes that take each kernel family of the backend
CASES = {
    "forward, short rows (64x100)": "L.log_softmax(x(64, 100))",
    "forward, rows of 10 (64x10)": "L.log_softmax(x(64, 10))",
    "forward, rows of 16 (64x16)": "L.log_softmax(x(64, 16))",
    "forward, rows of 2 vectors (64x32)": "L.log_softmax(x(64, 32))",
    "forward, short rows, out= (64x100)": "L.log_softmax(x(64, 100), out=x(64, 100))",
    "forward, short rows, parallel (4096x100)": "L.log_softmax(x(4096, 100))",
    "forward, long rows (4x5000)": "L.log_softmax(x(4, 5000))",
    "forward, long rows, parallel (400x5000)": "L.log_softmax(x(400, 5000))",
    "forward, columns (64x100, axis 0)": "L.log_softmax(x(64, 100), 0)",
    "backward, short rows (64x100)": "L.log_softmax_backward(x(64, 100), x(64, 100))",
    "backward, rows of 16 (64x16)": "L.log_softmax_backward(x(64, 16), x(64, 16))",
    "backward, rows of 2 vectors (64x32)": "L.log_softmax_backward(x(64, 32), x(64, 32))",
    "backward, long rows (4x5000)": "L.log_softmax_backward(x(4, 5000), x(4, 5000))",
    "logsumexp, rows (64x100)": "L.logsumexp(x(64, 100))",
}

_CHILD = """
import sys, time
import ml_dtypes, numpy as np
sys.path.insert(0, {src!r})
import logsoftmax as L
dt = {{"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
      "f64": np.float64}}[{dtype!r}]
def x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(dt)
t = time.perf_counter()
{call}
print(time.perf_counter() - t)
"""


def first_call(src: Path, dtype: str, call: str, cache: Path) -> float:
    """Seconds of the first ``call`` in a fresh process using ``cache``."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    code = _CHILD.format(src=str(src), dtype=dtype, call=call)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="checkout whose src/ is timed (default: this one)")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--only", default="", help="comma-separated substrings of the case labels")
    args = ap.parse_args(argv)
    only = [w for w in args.only.split(",") if w]
    src = args.tree / "src"
    print(f"tree: {args.tree}; one fresh process per case, empty NUMBA_CACHE_DIR")
    print(f"{'case':46s} {'dtype':5s} {'cold s':>8s} {'warm s':>8s}")
    total = 0.0
    t0 = time.perf_counter()
    for dtype in args.dtypes.split(","):
        for label, call in CASES.items():
            if only and not any(w in label for w in only):
                continue
            with tempfile.TemporaryDirectory(prefix="nbcache_") as cache:
                cold = first_call(src, dtype, call, Path(cache))
                warm = first_call(src, dtype, call, Path(cache))
            total += cold
            print(f"{label:46s} {dtype:5s} {cold:8.1f} {warm:8.2f}", flush=True)
    print(f"sum of cold first calls: {total:.0f} s (script {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
