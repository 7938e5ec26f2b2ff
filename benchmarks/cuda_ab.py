"""CUDA backend: A/B of the kernels of several source trees, in one process.

Loads the package from each ``LABEL=TREE`` in turn (a tree holds
``src/logsoftmax``), using every op once so that tree's lazy imports are
done before the next one replaces it in ``sys.modules``. All trees'
launchers (``backends.cuda.launch``) then time the same operands,
interleaved, with CUDA events around ``--burst`` calls back to back (the
kernel's time; the front door's Python is ``cuda_front_door.py``'s job),
next to a device copy of the bytes the op must move. Prints a markdown
table of medians, each tree's time relative to the first's, and whether
its results are the first's bits.

    python benchmarks/cuda_ab.py old=OLD_TREE new=NEW_TREE [...] [--repeat 15]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path

PROBLEMS = [
    # (shape, dtype, direction)
    ((4096, 32000), "float32", "fwd"),
    ((4096, 32000), "bfloat16", "fwd"),
    ((4096, 32000), "float16", "fwd"),
    ((4096, 32000), "float32", "bwd"),
    ((4096, 32000), "bfloat16", "bwd"),
    ((4096, 32000), "float16", "bwd"),
    ((16384, 4096), "float32", "fwd"),
    ((16384, 4096), "bfloat16", "fwd"),
    ((16384, 4096), "float32", "bwd"),
    ((16384, 4096), "bfloat16", "bwd"),
    ((65536, 1000), "float32", "fwd"),
    ((65536, 1000), "bfloat16", "fwd"),
    ((65536, 1000), "float32", "bwd"),
    ((65536, 1000), "bfloat16", "bwd"),
    ((65536, 1000), "float16", "bwd"),
    ((32768, 128), "float32", "fwd"),
    ((32768, 128), "float32", "bwd"),
    ((1024, 128256), "bfloat16", "fwd"),
]


def _load(tree: Path):
    for name in [m for m in sys.modules if m == "logsoftmax" or m.startswith("logsoftmax.")]:
        del sys.modules[name]
    sys.path.insert(0, str(tree / "src"))
    try:
        pkg = importlib.import_module("logsoftmax")
        from logsoftmax.backends import Op
        from logsoftmax.backends.cuda import launch
    finally:
        sys.path.pop(0)
    return pkg, Op, launch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", help="LABEL=TREE, the first the baseline")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--burst", type=int, default=10)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("cuda_ab: no CUDA device; nothing to compare", file=sys.stderr)
        return 0
    trees = {}
    for spec in args.trees:
        label, _, tree = spec.partition("=")
        pkg, Op, launch = _load(Path(tree))
        t = torch.randn(4, 64, device="cuda")
        pkg.log_softmax(t)  # every lazy import of the forward and the backward
        pkg.log_softmax_backward(t, pkg.log_softmax(t))
        trees[label] = (Op, launch)

    def timed(fn) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.burst):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / args.burst

    labels = list(trees)
    base = labels[0]
    print(f"# A/B on {torch.cuda.get_device_name()}: {', '.join(args.trees)}")
    print(f"ms per call, medians of {args.repeat} interleaved bursts of {args.burst};")
    print(f"ratios: the tree's time / {base}'s; 'same': {base}'s bits\n")
    head = " | ".join(labels) + " | " + " | ".join(f"{k}/{base}" for k in labels[1:])
    print(f"| problem | dir | dtype | {head} | copy | {base} % copy | best % copy | same |")
    print("|---|---|---|" + "---|" * (2 * len(labels) - 1) + "---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape, dt, direction in PROBLEMS:
        dtype = getattr(torch, dt)
        x = (torch.randn(shape, device="cuda", generator=gen) * 3).to(dtype)
        outs = {k: torch.empty_like(x) for k in trees}
        if direction == "fwd":
            nbytes = 2 * x.numel() * x.element_size()
            fns = {
                k: (lambda Op=Op, L=L, o=outs[k]: L.forward(
                    Op.LOG_SOFTMAX, L.Operand.of(x), L.Operand.of(o), x.ndim - 1))
                for k, (Op, L) in trees.items()
            }
        else:
            y = torch.log_softmax(x.float(), -1).to(dtype)
            nbytes = 3 * x.numel() * x.element_size()
            fns = {
                k: (lambda Op=Op, L=L, o=outs[k]: L.backward(
                    Op.LOG_SOFTMAX, L.Operand.of(x), L.Operand.of(y), L.Operand.of(o),
                    x.ndim - 1))
                for k, (Op, L) in trees.items()
            }
        src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns["copy"] = lambda: dst.copy_(src)
        for fn in fns.values():
            fn()
            fn()
        torch.cuda.synchronize()
        times = {k: [] for k in fns}
        for _ in range(args.repeat):
            for k, fn in fns.items():
                times[k].append(timed(fn))
        ms = {k: statistics.median(v) for k, v in times.items()}
        same = [k for k in labels[1:] if torch.equal(outs[base], outs[k])]  # finite: no NaN
        name = "x".join(map(str, shape))
        cells = " | ".join(f"{ms[k]:.4f}" for k in labels) + " | " + " | ".join(
            f"{ms[k] / ms[base]:.3f}" for k in labels[1:]
        )
        best = min(ms[k] for k in labels)
        print(
            f"| {name} | {direction} | {dt} | {cells} | {ms['copy']:.4f} | "
            f"{100 * ms['copy'] / ms[base]:.0f} | {100 * ms['copy'] / best:.0f} | "
            f"{','.join(same) or '-'} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
