"""CUDA backend: sweep the block-size table (``launch.Limits``) on a GPU.

docs/cuda.md's block-size table is a first guess made without a GPU. This
script times the public front door under each candidate table on the shapes
that decide it, next to torch and a device copy of the same bytes, so a
session with a GPU can pick the table from measurements:

- long rows (the one-pass vs looped switch ``max_fused`` and the looped
  ``loop_block``): 4096x32000 forward and backward in f32, bf16 and f16,
  1024x128256 bf16 forward and f32 backward;
- warps per program (``max_warps`` 16 down to 2): 4096x32000 f32 and bf16,
  65536x1000 bf16, forward and backward;
- short rows (``tile_rows_contiguous``: elements per program): 32768x128 f32
  forward and backward;
- the front door's own cost: wall-clock microseconds per call on a 1x8
  tensor (CPU time between calls, which CUDA events of a small problem
  include), ours and torch's.

Times are medians of ``--repeat`` interleaved runs with CUDA events, after a
warm-up that compiles. Writes ``DIR/cuda_tune.md`` and ``.json``; stops
sweeping once ``--budget`` seconds have passed (what was measured is kept).

    python benchmarks/cuda_tune.py --out DIR [--repeat 15] [--budget 90]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cuda import Problem, _make, _time  # noqa: E402
from cuda_front_door import _us_per_call  # noqa: E402

LONG = [
    Problem("4096x32000", d, dt, dt, (4096, 32000), 1, "ab")
    for dt in ("f32", "bf16", "f16")
    for d in ("fwd", "bwd")
] + [
    Problem("1024x128256", "fwd", "bf16", "bf16", (1024, 128256), 1, "ab"),
    Problem("1024x128256", "bwd", "f32", "f32", (1024, 128256), 1, "ab"),
]
SHORT = [
    Problem("32768x128", "fwd", "f32", "f32", (32768, 128), 1, "ab"),
    Problem("32768x128", "bwd", "f32", "f32", (32768, 128), 1, "ab"),
]
# the first session with a GPU swept max_fused 2048-32768 x loop_block
# 1024-8192 on float32 rows (docs/cuda.md); these are the contenders left
LONG_TABLES = [
    dict(max_fused=16384, loop_block=4096),  # the first guess
    dict(max_fused=32768, loop_block=8192),  # the default since
    dict(max_fused=32768, loop_block=4096),
    dict(max_fused=32768, loop_block=2048),
    dict(max_fused=16384, loop_block=8192),
]
# warps per program (the rule gives 16 from 8192 elements of tile, 8 from
# 2048): fewer warps per row leave room for more rows in flight per SM
WARP_PROBLEMS = [
    Problem("4096x32000", d, dt, dt, (4096, 32000), 1, "ab")
    for dt in ("f32", "bf16")
    for d in ("fwd", "bwd")
] + [
    Problem("65536x1000", d, "bf16", "bf16", (65536, 1000), 1, "ab")
    for d in ("fwd", "bwd")
]
WARP_TABLES = [dict(max_warps=w) for w in (16, 8, 4, 2)]
SHORT_TABLES = [dict(tile_rows_contiguous=t) for t in (1024, 2048, 4096, 8192, 16384, 32768)]


def _providers(torch, logsoftmax, p: Problem, gen):
    x = _make(torch, p, p.sdt, gen, "cuda")
    n = x.numel()
    if p.direction == "fwd":
        nbytes = 2 * n * x.element_size()

        def ours():
            return logsoftmax.log_softmax(x, axis=p.axis)

        def theirs():
            return torch.log_softmax(x, dim=p.axis)

    else:
        y = torch.log_softmax(x, dim=p.axis)
        dd = _make(torch, p, p.sdt, gen, "cuda")
        nbytes = 3 * n * x.element_size()

        def ours():
            return logsoftmax.log_softmax_backward(dd, y, axis=p.axis)

        def theirs():
            return torch._log_softmax_backward_data(dd, y, p.axis, x.dtype)

    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return nbytes, ours, theirs, (lambda: dst.copy_(src))


def _front_door_us(torch, logsoftmax, calls: int = 300) -> dict[str, float]:
    """Wall-clock microseconds per call on a 1x8 tensor (median of 5 batches)."""
    x = torch.randn(1, 8, device="cuda")
    return {
        "ours": _us_per_call(torch, lambda: logsoftmax.log_softmax(x), calls),
        "torch": _us_per_call(torch, lambda: torch.log_softmax(x, dim=-1), calls),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--budget", type=float, default=90.0, help="seconds of sweeping")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("cuda_tune: no CUDA device; nothing to sweep", file=sys.stderr)
        return 0
    import logsoftmax
    from logsoftmax.backends.cuda import launch

    t_end = time.perf_counter() + args.budget
    results = {"front_door_us": _front_door_us(torch, logsoftmax), "sweeps": []}
    print("front door, us per call:", results["front_door_us"], flush=True)
    lines = ["| problem | dir | dt | table | ours ms | torch ms | copy ms | ours/copy | ours/torch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for problems, tables in (
        (LONG, LONG_TABLES),
        (WARP_PROBLEMS, WARP_TABLES),
        (SHORT, SHORT_TABLES),
    ):
        for p in problems:
            gen = torch.Generator(device="cuda").manual_seed(0)
            nbytes, ours, theirs, copy = _providers(torch, logsoftmax, p, gen)
            base = _time(torch, {"torch": theirs, "copy": copy}, args.repeat, "cuda")
            for tab in tables:
                if time.perf_counter() > t_end:
                    break
                with launch.tile_limits(**tab):
                    ms = _time(torch, {"ours": ours}, args.repeat, "cuda")["ours"]
                rec = dict(problem=p.name, dir=p.direction, dt=p.sdt, table=tab,
                           bytes=nbytes, ours_ms=ms, **{f"{k}_ms": v for k, v in base.items()})
                results["sweeps"].append(rec)
                line = (f"| {p.name} | {p.direction} | {p.sdt} | {tab} | {ms:.4f} | "
                        f"{base['torch']:.4f} | {base['copy']:.4f} | "
                        f"{base['copy'] / ms:.2f} | {base['torch'] / ms:.2f} |")
                lines.append(line)
                print(line, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cuda_tune.json").write_text(json.dumps(results, indent=1))
    (args.out / "cuda_tune.md").write_text(
        f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; medians of "
        f"{args.repeat} runs.\n\nFront door, us per call on 1x8 f32: "
        f"{results['front_door_us']}\n\n" + "\n".join(lines) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
