"""CUDA backend: what the compiler made of each kernel (registers, spills).

A one-pass program keeps its whole tile in registers. Whether it spills,
and how many programs fit on an SM, decides whether a kernel can stream at
copy speed. This script runs the public front door once per problem and
block-size table, then asks Triton for the compiled kernel of the plan it
used and prints: path (one pass or looped), BLOCK_R x BLOCK_N, warps,
registers per thread, spilled bytes, shared memory, and the programs per SM
that the register file allows (65536 registers per SM on sm_90).

    python benchmarks/cuda_probe.py [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REGS_PER_SM = 65536
PROBLEMS = [
    # (name, direction, dtype, shape)
    ("4096x32000", "fwd", "float32", (4096, 32000)),
    ("4096x32000", "fwd", "bfloat16", (4096, 32000)),
    ("4096x32000", "bwd", "float32", (4096, 32000)),
    ("4096x32000", "bwd", "bfloat16", (4096, 32000)),
    ("4096x32000", "bwd", "float16", (4096, 32000)),
    ("65536x1000", "fwd", "bfloat16", (65536, 1000)),
    ("65536x1000", "fwd", "float32", (65536, 1000)),
    ("1024x128256", "bwd", "float32", (1024, 128256)),
    ("32768x128", "fwd", "float32", (32768, 128)),
]
TABLES = [
    {},
    {"max_warps": 8},
    {"max_warps": 4},
    {"max_fused": 16384},
    {"max_fused": 16384, "loop_block": 4096, "max_warps": 8},
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("cuda_probe: no CUDA device; nothing to probe", file=sys.stderr)
        return 0
    import logsoftmax
    from logsoftmax.backends.cuda import kernels, launch

    by_id = {
        id(k): name
        for name, k in (
            ("forward", kernels.forward_kernel),
            ("backward", kernels.backward_kernel),
        )
    }
    lines = [
        f"# compiled kernels on {torch.cuda.get_device_name()}",
        "",
        "| problem | dir | dtype | table | path | BLOCK_R x BLOCK_N | warps | regs"
        " | spill B | smem B | programs/SM by regs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, direction, dt, shape in PROBLEMS:
        dtype = getattr(torch, dt)
        x = torch.randn(shape, device="cuda").to(dtype)
        for table in TABLES:
            launch._PLANS.clear()
            with launch.tile_limits(**table):
                if direction == "fwd":
                    tensors = [x, torch.empty_like(x)]
                    logsoftmax.log_softmax(x, axis=-1, out=tensors[1])
                else:
                    y = torch.log_softmax(x.float(), -1).to(dtype)
                    tensors = [x, y, torch.empty_like(x)]
                    logsoftmax.log_softmax_backward(x, y, axis=-1, out=tensors[2])
            torch.cuda.synchronize()
            (key, plan), = [(k, p) for k, p in launch._PLANS.items() if k[0] in by_id]
            kernel = kernels.forward_kernel if direction == "fwd" else kernels.backward_kernel
            compiled = kernel.warmup(
                *tensors, *([0] * len(tensors)), *plan.scalars, grid=plan.grid, **plan.meta
            )
            if hasattr(compiled, "result"):
                compiled = compiled.result()
            m = plan.meta
            regs = compiled.n_regs
            threads = 32 * m["num_warps"]
            per_sm = REGS_PER_SM // max(regs * threads, 1)
            smem = getattr(compiled.metadata, "shared", "?")
            lines.append(
                f"| {name} | {direction} | {dt} | {table or 'default'} | "
                f"{'looped' if m['LOOPED'] else 'one pass'} | {m['BLOCK_R']} x {m['BLOCK_N']} | "
                f"{m['num_warps']} | {regs} | {compiled.n_spills} | {smem} | {per_sm} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "cuda_probe.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
