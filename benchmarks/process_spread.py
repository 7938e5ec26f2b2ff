"""The same call in many fresh processes: how often a process runs it slow.

A process can run our kernels several times slower than the next one for
its whole life: on the AMD EPYC Zen 3 the float32 forward of 1024x32000
took 35-63 ms instead of ~10 in 5 of 25 processes, the backward 62 ms in
some. The cause was the main thread's stack, which starts at a random
place in its page (``native.STACK_PHASE``, ``benchmarks/stack_phase.py``).
A benchmark of one process cannot see that; this script starts
``--processes`` fresh interpreters per tree, in turn (old, new, old, ...),
each timing the problems below (medians of ``--repeat`` calls with
``out=``, 2 threads), and prints each tree's times sorted, with how many
processes ran a problem more than 1.5x its fastest process.

``--old DIR``: also time the tree at ``DIR`` (a checkout or ``git archive``
of an older commit: ``DIR/src`` is imported; give it a ``NUMBA_CACHE_DIR``
of its own with ``--old-cache``). ``--busy-core``: a spinning process
pinned to the last CPU for the whole run (another job on the machine:
a thread that shares a core runs its share at half speed; the threads'
claimed ranges, ``native.RANGES_PER_THREAD``, are what this measures).

Run: ``python benchmarks/process_spread.py [--processes 10] [--old DIR]
[--busy-core] [problem ...]`` with problems ``name:rows x cols:f32|bf16:fwd|bwd``
(default: 1024x32000 float32 forward and backward).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent

CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import ml_dtypes, numpy as np
import logsoftmax
repeat = int(sys.argv[2])
out = []
for spec in sys.argv[3:]:
    name, shape, dt, d = spec.split(":")
    shape = tuple(int(v) for v in shape.split("x"))
    dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[dt]
    x = np.random.default_rng(0).standard_normal(shape, np.float32).astype(dtype)
    y = logsoftmax.log_softmax(x)
    o = np.empty_like(x)
    o[...] = 0
    if d == "fwd":
        call = lambda: logsoftmax.log_softmax(x, out=o)
    else:
        call = lambda: logsoftmax.log_softmax_backward(x, y, out=o)
    call()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t)
    out.append(f"{sorted(ts)[len(ts) // 2] * 1e3:.2f}")
print(" ".join(out))
"""


def _spinner():
    """A busy process pinned to the last CPU."""
    code = "import os; os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})\nwhile True: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*", default=["p08:1024x32000:f32:fwd", "p11:1024x32000:f32:bwd"])
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--old", type=Path, help="an older tree (its src/ is imported)")
    ap.add_argument("--old-cache", type=Path, help="NUMBA_CACHE_DIR for the old tree")
    ap.add_argument("--busy-core", action="store_true", help="a spinning process on the last CPU")
    args = ap.parse_args()
    trees = {"new": (TREE / "src", None)}
    if args.old:
        cache = args.old_cache or Path(tempfile.gettempdir()) / "process_spread_old_cache"
        trees = {"old": (args.old / "src", cache), **trees}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
        child = f.name
    spin = _spinner() if args.busy_core else None
    times = {name: [] for name in trees}
    try:
        for _ in range(args.processes):
            for name, (src, cache) in trees.items():
                env = dict(os.environ)
                if cache is not None:
                    env["NUMBA_CACHE_DIR"] = str(cache)
                r = subprocess.run([sys.executable, child, str(src), str(args.repeat), *args.problems],
                                   capture_output=True, text=True, env=env, check=True)
                times[name].append([float(v) for v in r.stdout.split()])
    finally:
        if spin is not None:
            spin.kill()
        os.unlink(child)
    print(f"{args.processes} fresh processes per tree, {args.repeat} calls each (ms, median per process)"
          + (", one CPU busy" if args.busy_core else "") + "\n")
    print("| problem | tree | per process, sorted | median | > 1.5x fastest |")
    print("|---|---|---|---:|---:|")
    for i, prob in enumerate(args.problems):
        for name in trees:
            t = sorted(p[i] for p in times[name])
            slow = sum(v > 1.5 * t[0] for v in t)
            print(f"| {prob} | {name} | {' '.join(f'{v:.1f}' for v in t)} | {t[len(t) // 2]:.1f} | {slow} |")


if __name__ == "__main__":
    main()
