"""Shapes the performance set leaves out: ours against PyTorch, ``out=`` both.

Issue 10 asks for the fastest log-softmax "from 8 elements to 10^8". The
performance set (``../shared/bench/perf_set.json`` and ``bench_cpu.py``'s
extra rows) holds big arrays and a few fixed-cost calls; this script walks
what falls between and beside them, in one process, interleaved (2 threads,
medians of ``--repeat`` rounds; :func:`common.time_calls`):

* **segmentation**: ``N x C x H x W`` over ``axis=1`` with the few classes
  of a segmentation model (2, 3, 10, 19, 21), from 16 KiB to 64 MiB;
* **mid-size rows**: the last axis, from L1 to L2 sized arrays (classifier
  heads of 10-1000 classes, batches of 64-4096);
* **other axes**: ``axis=0`` of matrices, an inner axis of 3-D arrays and
  channels over planes of a few dozen columns;
* **float64**, numpy's default dtype: rows, columns and channels.

Each row: ours ``out=``, PyTorch ``out=`` (``torch.log_softmax(out=)``,
``_log_softmax_backward_data.out``), and PyTorch's time over ours (above
1: we are faster). Run: ``python benchmarks/every_size.py [--repeat 7]
[--only seg|rows|axes|f64]`` (prints a markdown table).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ml_dtypes
import numba
import numpy as np

import logsoftmax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, time_calls, torch_view  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)

#: (kind, shape, axis, dtype)
CASES = [
    ("seg", (16, 3, 32, 32), 1, np.float32),
    ("seg", (4, 10, 16, 16), 1, np.float32),
    ("seg", (16, 2, 128, 128), 1, np.float32),
    ("seg", (8, 3, 256, 256), 1, np.float32),
    ("seg", (8, 3, 256, 256), 1, BF16),
    ("seg", (16, 21, 64, 64), 1, np.float32),
    ("seg", (16, 21, 64, 64), 1, BF16),
    ("seg", (8, 19, 128, 128), 1, np.float32),
    ("seg", (32, 2, 512, 512), 1, np.float32),
    ("seg", (16, 3, 512, 512), 1, BF16),
    ("rows", (64, 10), 1, np.float32),
    ("rows", (1024, 10), 1, np.float32),
    ("rows", (64, 100), 1, np.float32),
    ("rows", (512, 100), 1, np.float32),
    ("rows", (4096, 100), 1, np.float32),
    ("rows", (4096, 100), 1, BF16),
    ("rows", (32, 1000), 1, np.float32),
    ("rows", (256, 1000), 1, np.float32),
    ("rows", (16, 4096), 1, np.float32),
    ("rows", (8, 32000), 1, np.float32),
    ("axes", (100, 200), 0, np.float32),
    ("axes", (1000, 100), 0, np.float32),
    ("axes", (100, 100, 3), 2, np.float32),
    ("axes", (4, 8, 64, 64), 2, np.float32),
    ("axes", (512, 128, 49), 1, np.float32),  # channels of 7x7 maps: planes of 49 columns
    ("axes", (1024, 64, 32), 1, BF16),
    # numpy's default dtype: float64 in, float64 out (the double-double kernels)
    ("f64", (512, 100), 1, np.float64),
    ("f64", (4096, 1000), 1, np.float64),
    ("f64", (8, 32000), 1, np.float64),
    ("f64", (1000, 100), 0, np.float64),
    ("f64", (16, 21, 64, 64), 1, np.float64),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="", help="comma list of kinds: seg, rows, axes, f64")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    info = cpu_info()
    print(f"CPU: {info['model']} (LLVM {info['llvm']}), {args.threads} threads, "
          f"numba {numba.__version__}, torch {torch.__version__}, medians of {args.repeat}\n")
    print("| kind | shape | axis | dtype | dir | ours out= | torch out= | torch / ours |")
    print("|---|---|---:|---|---|---:|---:|---:|")
    kinds = set(filter(None, args.only.split(",")))
    rng = np.random.default_rng(0)
    for kind, shape, axis, dtype in CASES:
        if kinds and kind not in kinds:
            continue
        x = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        dy = rng.standard_normal(shape).astype(np.float32).astype(dtype)
        y = logsoftmax.log_softmax(x, axis)
        o = np.empty_like(x)
        tx, ty, tdy = (torch_view(torch, a) for a in (x, y, dy))
        to = torch.empty_like(tx)
        fns = {
            "fwd": lambda: logsoftmax.log_softmax(x, axis, out=o),
            "fwd torch": lambda: torch.log_softmax(tx, axis, out=to),
            "bwd": lambda: logsoftmax.log_softmax_backward(dy, y, axis, out=o),
            "bwd torch": lambda: torch.ops.aten._log_softmax_backward_data.out(
                tdy, ty, axis, tx.dtype, out=to),
        }
        s, errors = time_calls(fns, args.repeat, min_sample_s=0.01)
        for name in errors:
            print(f"{name}: {errors[name]}", file=sys.stderr)
        for d in ("fwd", "bwd"):
            if d in s and f"{d} torch" in s:
                ours, theirs = s[d], s[f"{d} torch"]
                print(f"| {kind} | {'x'.join(map(str, shape))} | {axis} | {np.dtype(dtype).name} | {d} | "
                      f"{ours * 1e6:.1f} us | {theirs * 1e6:.1f} us | {theirs / ours:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
