"""Few-row columns in cache, one thread: ns per element, ours against PyTorch.

The few-row kernels (``backends/cpu/fewrows.py``) pay per strip of 16
columns, not per element, so at 2-3 rows their own work outside the
arithmetic shows best where memory does not: small arrays (L1/L2), one
thread. Next to them, a long-row call of the same size, the kernel cost
per element without per-column work. ``out=`` both (PyTorch:
``log_softmax(out=)``, ``_log_softmax_backward_data.out``), interleaved,
medians (:func:`common.time_calls`).

Run: ``python benchmarks/few_rows_cache.py [--repeat 7]`` (prints a table).
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
#: (shape, axis): few-row columns, then long rows of about the same size
SHAPES = [((1, 3, 128, 128), 1), ((2, 3, 256, 256), 1), ((1, 21, 64, 64), 1), ((1024, 8, 32), 1),
          ((4, 12288), 1)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    import torch

    numba.set_num_threads(1)
    torch.set_num_threads(1)
    print(f"CPU: {cpu_info()['key']}, 1 thread, medians of {args.repeat}\n")
    print("| shape | axis | dtype | dir | ours ns/element | torch ns/element | torch / ours |")
    print("|---|---:|---|---|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for shape, axis in SHAPES:
        for dt in (np.dtype(np.float32), BF16, np.dtype(np.float16)):
            x = (rng.standard_normal(shape) * 3).astype(np.float32).astype(dt)
            y = logsoftmax.log_softmax(x, axis)
            d = rng.standard_normal(shape).astype(np.float32).astype(dt)
            out = np.empty_like(x)
            tx, ty, td, to = (torch_view(torch, a) for a in (x, y, d, out))
            tdt = tx.dtype
            cases = {
                "fwd": (lambda: logsoftmax.log_softmax(x, axis, out=out),
                        lambda: torch.log_softmax(tx, axis, out=to)),
                "bwd": (lambda: logsoftmax.log_softmax_backward(d, y, axis, out=out),
                        lambda: torch.ops.aten._log_softmax_backward_data.out(td, ty, axis, tdt, out=to)),
            }
            for name, (ours, theirs) in cases.items():
                t, _ = time_calls({"ours": ours, "torch": theirs}, args.repeat)
                n = x.size
                print(f"| {'x'.join(map(str, shape))} | {axis} | {dt.name} | {name} | "
                      f"{t['ours'] / n * 1e9:.3f} | {t['torch'] / n * 1e9:.3f} | {t['torch'] / t['ours']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
