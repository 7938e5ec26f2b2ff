"""Accuracy of the CPU kernels' two precisions against PyTorch, by row length.

The cpu backend computes float32 results of short rows on an *accurate*
path (float64 terms and pass 2, one rounding) and everything else on a
*fast* float32 path (``backends/cpu/segment.py``). This script measures the
max error, in float32 eps against a float64 oracle, of both paths and of
PyTorch on the same inputs (3-sigma logits, standard-normal ``diff_dst``),
so the thresholds ``SHORT`` (forward) and ``SHORT_BACKWARD`` can be checked
on any machine:

    python benchmarks/accuracy_cpu.py [--seeds 6]

Error per element: ``|y - y_ref| / (eps * max(1, |y_ref|))`` (API.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from logsoftmax.accuracy import max_eps_error
from logsoftmax.backends import get_backend
from logsoftmax.backends.cpu import segment

LENGTHS = (3, 8, 16, 32, 48, 64, 128, 250, 1000, 4096)


def _paths(fn):
    """``fn()`` on the accurate path and on the fast path (thresholds moved)."""
    cpu = get_backend("cpu")
    saved = segment.SHORT, segment.SHORT_BACKWARD
    out = []
    try:
        for limit in (1 << 62, 0):
            segment.SHORT = segment.SHORT_BACKWARD = limit
            cpu._plans.clear()
            out.append(fn())
    finally:
        segment.SHORT, segment.SHORT_BACKWARD = saved
        cpu._plans.clear()
    return out


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    args = ap.parse_args(argv)
    cpu = get_backend("cpu")
    f32 = np.dtype(np.float32)
    print("| n | fwd accurate | fwd fast | fwd torch | bwd accurate | bwd fast | bwd torch |")
    print("|---|---|---|---|---|---|---|")
    for n in LENGTHS:
        worst = np.zeros(6)
        for seed in range(args.seeds):
            rng = np.random.default_rng([n, seed])
            x = (rng.standard_normal((max(2, 200_000 // n), n)) * 3).astype(np.float32)
            dd = rng.standard_normal(x.shape).astype(np.float32)
            x64 = x.astype(np.float64)
            m = x64.max(1, keepdims=True)
            ref = (x64 - m) - np.log(np.exp(x64 - m).sum(1, keepdims=True))
            tx = torch.from_numpy(x)
            y = torch.log_softmax(tx, 1).numpy()
            gref = dd - np.exp(y.astype(np.float64)) * dd.astype(np.float64).sum(1, keepdims=True)
            fwd = _paths(lambda: cpu.log_softmax(x, 1, None, f32))
            bwd = _paths(lambda: cpu.log_softmax_backward(dd, y, 1, None, f32))
            gt = torch._log_softmax_backward_data(torch.from_numpy(dd), tx.log_softmax(1), 1, torch.float32)
            errs = [
                max_eps_error(fwd[0], ref, f32),
                max_eps_error(fwd[1], ref, f32),
                max_eps_error(y, ref, f32),
                max_eps_error(bwd[0], gref, f32),
                max_eps_error(bwd[1], gref, f32),
                max_eps_error(gt.numpy(), gref, f32),
            ]
            worst = np.maximum(worst, errs)
        print(f"| {n} | " + " | ".join(f"{e:.2f}" for e in worst) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
