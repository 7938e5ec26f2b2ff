"""Rows of every length on the same bytes: ours against PyTorch and a copy.

The performance set has vocabulary rows of 32000 elements and more and
short rows of a few fixed lengths; issue 10 asks rows of 1k to 256k
elements for >= 1.2x PyTorch's ``out=`` and >= 80% of a same-run copy, and
short rows (2-1024) for >= 1.2x PyTorch. This script walks the lengths in
between: for each ``n``, a 2-D array of ``2**27`` elements (512 MiB of
float32) in rows of ``n`` (the last axis), timed interleaved in one process
(2 threads, medians of ``--repeat`` rounds):

* ours: ``log_softmax(x, out=)`` (forward) or ``log_softmax_backward(diff_dst,
  dst, out=)`` (backward), numpy outputs;
* PyTorch's ``log_softmax(out=)`` / ``_log_softmax_backward_data(out=)``;
* a 2-thread copy of the bytes the op must move (:class:`CopyBench`: 2
  streams forward, 3 backward).

Run: ``python benchmarks/row_lengths.py [--dtype f32|bf16|f16] [--n
512,1024,4000,32000] [--bwd] [--repeat 7]`` (prints only).
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
from common import CopyBench, cpu_info, time_calls, torch_view  # noqa: E402

ELEMENTS = 1 << 27
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--n", default="256,512,1024,1500,2048,4000,4096,8192,32000,128000")
    ap.add_argument("--bwd", action="store_true", help="the backward instead of the forward")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import torch

    numba.set_num_threads(2)
    torch.set_num_threads(2)
    dt = DTYPES[args.dtype]
    rng = np.random.default_rng(0)
    kind = "backward" if args.bwd else "forward"
    print(f"CPU: {cpu_info()['key']}; 2 threads; log_softmax {kind}, {args.dtype}, "
          f"{ELEMENTS} elements a problem; ms, medians of {args.repeat}\n")
    print("| n | ours out= | PyTorch out= | copy | ours vs PyTorch | % of copy |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (int(v) for v in args.n.split(",")):
        x = (rng.standard_normal((ELEMENTS // n, n)) * 3).astype(dt)
        out = np.empty_like(x)
        tx, to = torch_view(torch, x), torch_view(torch, out)
        if args.bwd:
            y = logsoftmax.log_softmax(x)
            d = rng.standard_normal(x.shape).astype(dt)
            ty, td = torch_view(torch, y), torch_view(torch, d)
            fns = {
                "ours": lambda: logsoftmax.log_softmax_backward(d, y, out=out),
                "torch": lambda: torch._log_softmax_backward_data(td, ty, 1, ty.dtype, out=to),
                "copy": CopyBench(3 * x.nbytes, 3),
            }
        else:
            fns = {
                "ours": lambda: logsoftmax.log_softmax(x, out=out),
                "torch": lambda: torch.log_softmax(tx, 1, out=to),
                "copy": CopyBench(2 * x.nbytes, 2),
            }
        s, _ = time_calls(fns, args.repeat)
        print(f"| {n} | {s['ours'] * 1e3:.2f} | {s['torch'] * 1e3:.2f} | {s['copy'] * 1e3:.2f}"
              f" | {s['torch'] / s['ours']:.2f}x | {100 * s['copy'] / s['ours']:.0f}% |")


if __name__ == "__main__":
    main()
