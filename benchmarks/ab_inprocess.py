"""Old against new in one process, interleaved: the A/B that survives a noisy machine.

On a shared 2-vCPU machine the same code can run 30% slower in one process
than in the next, so two separate benchmark runs cannot tell a 10% change
from noise. This script imports an older tree's package under another
name (``lsold``: a copy of its ``src/logsoftmax`` with the backend registry's
module strings renamed) next to this tree's ``logsoftmax``, and times the
two on the same arrays in alternating rounds. Each call writes into an
output of its own library's allocation (``out=``; ``--numpy-out``: of
``np.empty_like``; ``--allocating``: no ``out=``), and each round repeats a
call for at least 20 ms.

    git worktree add /tmp/old <rev>
    python benchmarks/ab_inprocess.py --old /tmp/old p03:8x16x384x384:f32:fwd:3 ...

A problem is ``name:shape:dtype:fwd|bwd|sfwd|sbwd:axis`` (dtype f32, bf16,
f16 or f64; ``s``: softmax's instead of log_softmax's);
without problems a default set of short-row, vocabulary and strided ones
runs. Prints per problem the median time of each and ``old / new`` (above
1: the new tree is faster), the median of the ratios of paired rounds, and
whether the two trees gave the same bits.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import ml_dtypes
import numpy as np

DEFAULT = [
    "p03:8x16x384x384:f32:fwd:3",
    "p06:32x16x250x250:f32:fwd:3",
    "r128:32768x128:f32:fwd:1",
    "attn:16x16x128x128:bf16:fwd:3",
    "v32k:4096x32000:f32:fwd:1",
    "v32kbf:4096x32000:bf16:bwd:1",
    "nchw56:64x64x56x56:f32:fwd:1",
]
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "f64": np.float64}


def import_old(src: Path):
    """``src`` (a tree's ``src/logsoftmax``) imported as the package ``lsold``."""
    tmp = Path(tempfile.mkdtemp(prefix="ab_inprocess_"))
    pkg = tmp / "lsold"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for f in pkg.rglob("*.py"):
        text = f.read_text()
        if '"logsoftmax.' in text:  # the backend registry names modules by string
            f.write_text(text.replace('"logsoftmax.', '"lsold.'))
    sys.path.insert(0, str(tmp))
    return importlib.import_module("lsold")


def calls(lib, kind, x, dd, axis, numpy_out=False, allocating=False):
    """A no-argument call of ``lib`` on the problem and its output: into
    ``lib``'s own output (``numpy_out``: into an ``np.empty_like``, as a numpy
    user's ``out=``), or with no ``out=`` at all (``allocating``). ``kind``:
    ``fwd``/``bwd`` (log_softmax), ``sfwd``/``sbwd`` (softmax)."""
    fwd, bwd = ((lib.softmax, lib.softmax_backward) if kind.startswith("s")
                else (lib.log_softmax, lib.log_softmax_backward))
    y = fwd(x, axis=axis)
    if allocating:
        fn = ((lambda: fwd(x, axis=axis)) if kind.endswith("fwd")
              else (lambda: bwd(dd, y, axis=axis)))
        return fn, fn()
    out = np.empty_like(x) if numpy_out else fwd(x, axis=axis)
    if kind.endswith("fwd"):
        return lambda: fwd(x, axis=axis, out=out), out
    return lambda: bwd(dd, y, axis=axis, out=out), out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, type=Path, help="an older checkout (its src/logsoftmax)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--numpy-out", action="store_true",
                    help="out= arrays from np.empty_like (16 bytes past a line), not the library's pool")
    ap.add_argument("--allocating", action="store_true",
                    help="time the allocating calls (no out=) instead")
    ap.add_argument("problems", nargs="*", default=DEFAULT)
    args = ap.parse_args(argv)
    import logsoftmax as new

    old = import_old(args.old / "src" / "logsoftmax")
    rng = np.random.default_rng(0)
    print(f"new: {Path(new.__file__).parent}\nold: {args.old}")
    for spec in args.problems:
        name, shape, dt, kind, axis = spec.split(":")
        shape = tuple(int(s) for s in shape.split("x"))
        axis = int(axis)
        x = (rng.standard_normal(shape, dtype=np.float32) * 3).astype(DTYPES[dt])
        dd = rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dt])
        fn, outs = {}, {}
        for tag, lib in (("new", new), ("old", old)):
            fn[tag], outs[tag] = calls(lib, kind, x, dd, axis, args.numpy_out, args.allocating)
            fn[tag]()
        same = np.array_equal(outs["new"].view(np.uint8), outs["old"].view(np.uint8))
        t = time.perf_counter()
        fn["new"]()
        reps = max(1, int(0.02 / (time.perf_counter() - t)))
        times = {"new": [], "old": []}
        for r in range(args.rounds):
            for tag in ("new", "old") if r % 2 == 0 else ("old", "new"):
                t = time.perf_counter()
                for _ in range(reps):
                    fn[tag]()
                times[tag].append((time.perf_counter() - t) / reps)
        tn, to = np.median(times["new"]), np.median(times["old"])
        paired = np.median(np.array(times["old"]) / np.array(times["new"]))
        print(f"{name:10s} new {tn * 1e6:10.2f} us  old {to * 1e6:10.2f} us  old/new {to / tn:5.2f}"
              f"  (paired {paired:4.2f})  same bits: {same}", flush=True)


if __name__ == "__main__":
    main()
