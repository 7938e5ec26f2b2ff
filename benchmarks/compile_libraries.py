"""Where a cold compile's time goes, library by library (what
``benchmarks/compile_time.py`` times per call).

Compiles one signature of each of `make test`'s warm-up kernels
(``tests/warm_kernels.py``), float32 in and out, in a fresh numba cache
directory, and prints each kernel's seconds, then the libraries whose
finalizing (LLVM optimizing the library and emitting its machine code,
callees linked in) took longest, exclusive of the libraries finalized
inside it. ``--first-call`` times a first ``log_softmax`` of an 8x100
float32 array instead (the kernels it needs, nothing else).

    python benchmarks/compile_libraries.py [--tree PATH] [--kernels forward_short,backward_short] [--top 30]
    python benchmarks/compile_libraries.py --first-call

``--tree`` times another checkout's ``src``; compare two trees by running
them in turn, more than once: the machine's noise is seconds (one tree
measured 113 and 116 s on the AMD EPYC Zen 3).
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="compile_time_")  # before numba loads

import argparse  # noqa: E402
import collections  # noqa: E402
import importlib  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from numba.core import codegen  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


class FinalizeTimer:
    """Seconds each library's ``finalize`` took, less its nested ones."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self.count = collections.Counter()
        self._inner = []
        self._finalize = codegen.CPUCodeLibrary.finalize
        timer = self

        def finalize(library):
            t0 = time.perf_counter()
            timer._inner.append(0.0)
            try:
                return timer._finalize(library)
            finally:
                took = time.perf_counter() - t0
                inner = timer._inner.pop()
                if timer._inner:
                    timer._inner[-1] += took
                timer.seconds[library.name] += took - inner
                timer.count[library.name] += 1

        codegen.CPUCodeLibrary.finalize = finalize

    def report(self, top: int) -> None:
        print(f"finalizing: {sum(self.seconds.values()):.1f} s in {sum(self.count.values())} libraries")
        for name, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {s:6.2f} s  {self.count[name]:3d}x  {name}")


def main() -> None:
    import warm_kernels

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=",".join(warm_kernels.KERNELS), help="warm-up kernels to compile")
    ap.add_argument("--first-call", action="store_true", help="time a first log_softmax(8x100 float32)")
    ap.add_argument("--top", type=int, default=25, help="libraries to list")
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="checkout whose src/ is compiled (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree / "src"))

    import logsoftmax
    from logsoftmax.backends.cpu.native import kernel_types

    print(f"tree: {Path(logsoftmax.__file__).parent}")
    timer = FinalizeTimer()
    t0 = time.perf_counter()
    if args.first_call:
        logsoftmax.log_softmax(np.random.default_rng(0).standard_normal((8, 100)).astype(np.float32))
        print(f"first call: {time.perf_counter() - t0:.1f} s")
    else:
        for name in args.kernels.split(","):
            module, kind, _, _ = warm_kernels.KERNELS[name]
            kernel = getattr(importlib.import_module(f"logsoftmax.backends.cpu.{module}"), name)
            t = time.perf_counter()
            kernel.compile(kernel_types(kind.startswith("bwd"), kind.endswith("tiles"), np.float32, np.float32))
            print(f"{name:16s} {time.perf_counter() - t:6.1f} s", flush=True)
        print(f"total: {time.perf_counter() - t0:.1f} s")
    timer.report(args.top)
    shutil.rmtree(os.environ["NUMBA_CACHE_DIR"], ignore_errors=True)


if __name__ == "__main__":
    main()
