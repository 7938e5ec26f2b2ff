"""`make test`'s kernel warm-up, timed: what ``tests/warm_kernels.py``'s
seconds should be.

Runs the warm-up as `make test` does (two processes, each compiling its
share of the kernels, every listed signature, into one fresh numba cache
directory) and prints each kernel's seconds and each worker's total, in
the form of ``warm_kernels.KERNELS``. A group of ``warm_kernels.TOGETHER``
is compiled in its order, so its later kernels' seconds are those left
after the helpers the earlier ones typed.

    python benchmarks/warm_up.py [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import importlib, sys, time
sys.path.insert(0, {tests!r})
import warm_kernels as w
for name in w.share({worker}, {workers}):
    module = importlib.import_module("logsoftmax.backends.cpu." + w.KERNELS[name][0])
    t = time.perf_counter()
    for sig in w.signatures(name):
        getattr(module, name).compile(sig)
    print(name, time.perf_counter() - t, flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="warm_up_") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _CHILD.format(tests=str(_ROOT / "tests"), worker=w,
                                                                       workers=args.workers)],
                                  env=env, stdout=subprocess.PIPE, text=True) for w in range(args.workers)]
        outs = [p.communicate()[0] for p in procs]
        wall = time.perf_counter() - t0
    for w, out in enumerate(outs):
        rows = [line.split() for line in out.splitlines() if line.strip()]
        print(f"worker {w}: {sum(float(s) for _, s in rows):.0f} s")
        for name, s in rows:
            print(f"    {name:18s} {float(s):6.0f} s")
    print(f"wall: {wall:.0f} s")


if __name__ == "__main__":
    main()
