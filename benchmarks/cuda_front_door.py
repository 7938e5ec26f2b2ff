"""CUDA backend: where a small call's time goes (front door, launcher, Triton).

On a small problem the GPU waits for the CPU: a call's wall time is the
Python between the front door and the kernel launch. This script measures,
on a 1x8 float32 CUDA tensor, microseconds per call (median of 5 batches of
``--calls``, synchronised at the end of each batch) of:

- ``torch``: ``torch.log_softmax`` (the bar to meet);
- ``front door``: ``logsoftmax.log_softmax`` (validation, backend, launch);
- ``launch.forward``: the launcher alone on prepared operands;
- ``kernel[grid]``: Triton's own launch (binding and specialising every
  argument) with the launcher's arguments;
- ``compiled[grid]``: the compiled kernel's launcher, which the launcher
  calls directly (``launch._direct``);

then prints a cProfile of the front door, allocating and ``out=`` (top
functions by own time).

    python benchmarks/cuda_front_door.py [--calls 300]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def _us_per_call(torch, fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        batches.append((time.perf_counter() - t0) / calls * 1e6)
    return sorted(batches)[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("cuda_front_door: no CUDA device; nothing to measure", file=sys.stderr)
        return 0
    import logsoftmax
    from logsoftmax.backends import Op
    from logsoftmax.backends.cuda import launch

    x = torch.randn(1, 8, device="cuda")
    y = torch.empty_like(x)
    xo, yo = launch.Operand.of(x), launch.Operand.of(y)
    launch.forward(Op.LOG_SOFTMAX, xo, yo, 1)
    plan = next(reversed(launch._PLANS.values()))  # the plan that call cached
    kernel = launch.kernels.forward_kernel

    def raw():
        kernel[plan.grid](x, y, 0, 0, *plan.scalars, **plan.meta)

    direct = next(iter(plan.direct.values()), False)  # the compiled kernel's launcher

    def compiled():
        direct(x, y, 0, 0, *plan.scalars, *plan.constexprs)

    rows = {
        "torch": lambda: torch.log_softmax(x, dim=-1),
        "front door": lambda: logsoftmax.log_softmax(x),
        "front door, out=": lambda: logsoftmax.log_softmax(x, out=y),
        "launch.forward": lambda: launch.forward(Op.LOG_SOFTMAX, xo, yo, 1),
        "kernel[grid]": raw,
        **({"compiled[grid]": compiled} if direct else {}),
        "torch.empty_like": lambda: torch.empty_like(x),
    }
    for name, fn in rows.items():
        print(f"{name:>18}: {_us_per_call(torch, fn, args.calls):8.1f} us per call",
              flush=True)
    for title, call in (
        ("front door", lambda: logsoftmax.log_softmax(x)),
        ("front door, out=", lambda: logsoftmax.log_softmax(x, out=y)),
    ):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(f"## cProfile: {title}\n{s.getvalue()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
