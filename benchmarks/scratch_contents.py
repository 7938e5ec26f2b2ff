"""Whether a kernel's speed depends on what its scratch memory held before.

The CPU kernels compute whole vectors and mask only their loads and stores,
so a vector of column statistics past a tile's last column still goes
through the arithmetic. If those lanes are read from scratch the kernel
never wrote (``np.empty``), their contents are whatever the allocator hands
back: freed integers read as float32 or float64 are denormals, and every
instruction that meets a denormal operand takes a microcode assist (~100+
cycles here) -- a kernel that then runs 2x slower in one process than in
the next, for no visible reason.

This script makes that visible and repeatable. It builds two copies of the
package in a temporary folder in which every ``np.empty`` of the CPU
kernels is filled -- with denormal bits (float32 ``0x00000001`` in every
4 bytes, which read as float64 is a denormal too) in one, with zeros in the
other -- and times the same calls in alternating subprocesses (one thread,
``out=``). A ratio near 1 is what a correct kernel shows; both copies pay
the same fill. Twenty-fifth Intel session (docs/performance.md), before the
column kernels zeroed their statistics: 1000x100 axis 0 float32 backward
1.86x slower filled with denormals, softmax 2.44x, 5000x37 axis 0 softmax
10.4x; after: 0.96-1.13 on the tile calls (5000x37 bfloat16 1.22-1.30 in
one run, 0.97-1.06 in a 5-round rerun).

Run: ``python benchmarks/scratch_contents.py [--rounds 3] [shape:axis:dtype ...]``
(dtype f32, bf16, f16 or f64; the first run compiles both copies: minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT = [
    "1000x100:0:f32", "300x100:0:f32", "5000x37:0:f32", "100x200:0:f32", "100x100x3:2:f32",
    "4x8x64x60:2:f32", "1000x100:0:bf16", "5000x37:0:bf16", "16x21x30x30:1:f32", "4x10x16x15:1:bf16",
    "512x100:1:f32", "8x32001:1:f32", "2x60x8:1:f32",
]
#: one allocation helper per patched module: every byte set as the mode says
HELPER = '''
import numpy as _np_fill
from numba import njit as _njit_fill


@_njit_fill(cache=True)
def _filled_empty(n, dt=_np_fill.float64):
    a = _np_fill.empty(n, dt)
    b = a.view(_np_fill.uint8)
    for i in range(b.size):
        b[i] = {byte}
    return a
'''
#: the denormal pattern: byte 1 of every 4 (little-endian 0x00000001)
FILLS = {"denormal": "1 if i % 4 == 0 else 0", "zero": "0"}


def make_copy(src: Path, dest: Path, fill: str) -> None:
    """``src`` (the ``logsoftmax`` package) copied to ``dest`` with every
    ``np.empty(`` of the CPU kernel modules filled."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    helper = HELPER.format(byte=FILLS[fill])
    for f in (dest / "backends" / "cpu").glob("*.py"):
        if f.name in ("__init__.py", "alloc.py", "layout.py"):  # results, not scratch
            continue
        text = f.read_text()
        if "np.empty(" not in text:
            continue
        text = text.replace("np.empty(", "_filled_empty(")
        text = re.sub(r"(from __future__ import annotations\n)", lambda m: m.group(1) + helper, text, count=1)
        f.write_text(text)


def worker(problems: list[str]) -> None:
    """Time each problem's forward, backward and softmax (``out=``, one
    thread) and print ns per element as JSON."""
    import ml_dtypes
    import numba

    import logsoftmax

    numba.set_num_threads(1)
    dts = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "f64": np.float64}
    res = {}
    for spec in problems:
        shape_s, axis_s, dt_s = spec.split(":")
        shape, axis = tuple(int(v) for v in shape_s.split("x")), int(axis_s)
        rng = np.random.default_rng(0)
        x = (rng.standard_normal(shape) * 3).astype(np.float32).astype(dts[dt_s])
        y = logsoftmax.log_softmax(x, axis)
        d = rng.standard_normal(shape).astype(np.float32).astype(dts[dt_s])
        out = np.empty_like(x)
        calls = {"fwd": lambda: logsoftmax.log_softmax(x, axis, out=out),
                 "bwd": lambda: logsoftmax.log_softmax_backward(d, y, axis, out=out),
                 "softmax": lambda: logsoftmax.softmax(x, axis, out=out)}
        for name, f in calls.items():
            f()
            reps = max(1, int(2e-3 / max(_once(f), 1e-7)))
            ts = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(reps):
                    f()
                ts.append((time.perf_counter() - t) / reps)
            res[f"{spec}:{name}"] = float(np.median(ts)) / x.size * 1e9
    print(json.dumps(res))


def _once(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="*", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.problems)
        return 0
    src = Path(__file__).resolve().parent.parent / "src" / "logsoftmax"
    tmp = Path(tempfile.mkdtemp(prefix="scratch_contents_"))
    runs: dict[str, list[dict]] = {}
    try:
        for fill in FILLS:
            make_copy(src, tmp / fill / "logsoftmax", fill)
        for r in range(args.rounds):
            for fill in FILLS:
                env = dict(os.environ, PYTHONPATH=str(tmp / fill), NUMBA_CACHE_DIR=str(tmp / f"cache_{fill}"),
                           NUMBA_NUM_THREADS="1")
                p = subprocess.run([sys.executable, __file__, "--worker", *args.problems], env=env,
                                   capture_output=True, text=True, check=True)
                runs.setdefault(fill, []).append(json.loads(p.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1}/{args.rounds}: {fill} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"medians of {args.rounds} subprocess runs each, one thread, ns per element\n")
    print("| problem | call | zero-filled scratch | denormal-filled | denormal / zero |")
    print("|---|---|---:|---:|---:|")
    for key in runs["zero"][0]:
        z = float(np.median([run[key] for run in runs["zero"]]))
        dn = float(np.median([run[key] for run in runs["denormal"]]))
        spec, call = key.rsplit(":", 1)
        print(f"| {spec} | {call} | {z:.3f} | {dn:.3f} | {dn / z:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
