"""CUDA backend: GB/s against torch's CUDA kernels and a device copy.

What is measured, per problem (medians of ``--repeat`` interleaved runs with
CUDA events, warm-up excluded, inputs resident on the device):

- ``logsoftmax``: this library's ``"cuda"`` backend (Triton kernels) through
  the public front door (validation and launch overhead included);
- ``torch``: ``torch.log_softmax`` / ``torch._log_softmax_backward_data``
  on the same CUDA tensors (for a mixed ``f32 -> bf16`` problem, torch's
  kernel then a ``.to(bf16)``; torch has no single-rounding mixed kernel);
- ``copy``: a device-to-device copy of the same number of bytes: the floor.

Each provider is also timed back to back (``BURST`` calls between two
events, as a training loop issues them; one provider after the other, not
interleaved): there the CPU's time per call hides behind the kernels when
it is the shorter, so the ``b2b`` columns show the kernels, the per-call
columns the kernels plus the front door's wait.

Bytes: the forward reads ``x`` and writes ``y`` once: ``n * (sizeof(src) +
sizeof(dst))``; the backward reads ``diff_dst`` and ``dst`` and writes
``diff_src``: ``3 * n * sizeof``. GB/s = those bytes / median time. The
looped path for long rows reads ``x`` twice (the second read mostly from
L2); GB/s still counts it once, as the floor does.

Problems: every entry of ``src/logsoftmax/data/perf_set.json`` (with its
layout: ``acdb`` is channels-last) plus (4096, 32000), (1024, 128256),
(65536, 1000) and (32768, 128) along the last axis, forward and backward, in
f32, bf16 and f16.

Targets (docs/cuda.md): >= 85% of copy bandwidth and >= 1.1x torch on rows
of >= 1000 elements; >= 70% of copy on rows of 128.

Run on a machine with a GPU: ``python benchmarks/bench_cuda.py [--quick]
[--repeat 20] [--out DIR]``; writes ``DIR/bench_cuda.md`` (the table),
``DIR/bench_cuda.json`` and ``DIR/bench_cuda.png`` (if matplotlib is
installed). Without a CUDA device it prints why and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PERF_SET = ROOT / "src" / "logsoftmax" / "data" / "perf_set.json"
EXTRA_SHAPES = [(4096, 32000), (1024, 128256), (65536, 1000), (32768, 128)]
BURST = 10  # calls per back-to-back timing
TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


@dataclass
class Problem:
    """One benchmark problem (a perf_set entry or an extra shape)."""

    name: str
    direction: str  # "fwd" | "bwd"
    sdt: str
    ddt: str
    shape: tuple[int, ...]
    axis: int
    layout: str  # "abcd"-style: memory order of the dims


@dataclass
class Row:
    problem: Problem
    bytes: int
    ms: dict[str, float]
    max_abs_diff: float  # logsoftmax vs torch, in float32

    def gbs(self, provider: str) -> float:
        return self.bytes / (self.ms[provider] * 1e-3) / 1e9


def problems(quick: bool) -> list[Problem]:
    """perf_set.json entries plus the extra shapes in f32/bf16/f16, fwd and bwd."""
    out = []
    for e in json.loads(PERF_SET.read_text()):
        if e.get("alg") != "logsoftmax":
            continue
        out.append(
            Problem(
                e["perf_id"],
                e["dir"],
                e["sdt"],
                e["ddt"],
                tuple(e["shape"]),
                e["axis"],
                e.get("stag", "abcdef"[: len(e["shape"])]),
            )
        )
    for shape in EXTRA_SHAPES:
        for dt in ("f32", "bf16", "f16"):
            for d in ("fwd", "bwd"):
                out.append(Problem(f"{shape[0]}x{shape[1]}", d, dt, dt, shape, 1, "ab"))
    if quick:
        keep = {"perf00", "perf01", "perf08", "perf11"}
        out = [
            p
            for p in out
            if p.name in keep or (p.sdt == "f32" and p.name[0].isdigit())
        ]
    return out


def _make(torch, p: Problem, dtype_name: str, gen, device: str):
    """A tensor of ``p.shape`` on ``device``, stored in ``p.layout`` order."""
    order = [ord(c) - ord("a") for c in p.layout]
    phys = [p.shape[d] for d in order]
    t = torch.randn(phys, device=device, generator=gen, dtype=torch.float32) * 3
    t = t.to(getattr(torch, TORCH_DTYPES[dtype_name]))
    inverse = [order.index(d) for d in range(len(order))]
    return t.permute(*inverse)


def _time(torch, fns: dict, repeat: int, device: str) -> dict[str, float]:
    """Median milliseconds of each fn, interleaved, with CUDA events (wall
    clock on the CPU, which only the self-test of this script uses)."""
    for fn in fns.values():  # warm-up: compile, allocate, fill caches
        fn()
        fn()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
    out = {k: statistics.median(v) for k, v in times.items()}
    if cuda:
        # back to back: BURST calls between two events, as a training loop
        # issues them; the CPU's time per call hides behind the kernels when
        # it is shorter (the per-call events above include it)
        for name, fn in fns.items():
            burst = []
            for _ in range(max(3, repeat // 4)):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(BURST):
                    fn()
                end.record()
                end.synchronize()
                burst.append(start.elapsed_time(end) / BURST)
            out[name + " b2b"] = statistics.median(burst)
    return out


def run_problem(torch, logsoftmax, p: Problem, repeat: int, device="cuda") -> Row:
    """Time one problem on ``device`` with the three providers."""
    gen = torch.Generator(device=device).manual_seed(0)
    x = _make(torch, p, p.sdt, gen, device)
    n = x.numel()
    ssize = x.element_size()
    ddt = getattr(torch, TORCH_DTYPES[p.ddt])
    np_ddt = logsoftmax.dtypes.from_name(p.ddt)
    if p.direction == "fwd":
        nbytes = n * (ssize + torch.empty((), dtype=ddt).element_size())
        mixed = p.sdt != p.ddt

        def ours():
            dt = np_ddt if mixed else None
            return logsoftmax.log_softmax(x, axis=p.axis, dtype=dt)

        def theirs():
            y = torch.log_softmax(x, dim=p.axis)
            return y.to(ddt) if mixed else y

    else:
        y = torch.log_softmax(x, dim=p.axis)
        dd = _make(torch, p, p.sdt, gen, device)
        nbytes = 3 * n * ssize

        def ours():
            return logsoftmax.log_softmax_backward(dd, y, axis=p.axis)

        def theirs():
            return torch._log_softmax_backward_data(dd, y, p.axis, x.dtype)

    # the floor: a copy that reads and writes nbytes in all
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = _time(
        torch,
        {"logsoftmax": ours, "torch": theirs, "copy": lambda: dst.copy_(src)},
        repeat,
        device,
    )
    diff = (ours().float() - theirs().float()).abs()
    diff = diff[torch.isfinite(diff)]
    return Row(p, nbytes, ms, float(diff.max()) if diff.numel() else 0.0)


def _b2b(r: Row, other: str) -> str:
    """Back-to-back ratio ``other / ours`` (blank where not timed: CPU)."""
    ours = r.ms.get("logsoftmax b2b")
    theirs = r.ms.get(other + " b2b")
    return f"{theirs / ours:.2f}" if ours and theirs else ""


def table(rows: list[Row]) -> str:
    head = (
        "| problem | dir | dt | shape | axis | layout | ours GB/s | torch GB/s "
        "| copy GB/s | ours/copy | ours/torch | b2b ours/copy | b2b ours/torch "
        "| max abs diff |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        p = r.problem
        dt = p.sdt if p.sdt == p.ddt else f"{p.sdt}->{p.ddt}"
        lines.append(
            f"| {p.name} | {p.direction} | {dt} | {'x'.join(map(str, p.shape))} "
            f"| {p.axis} | {p.layout} | {r.gbs('logsoftmax'):.0f} | "
            f"{r.gbs('torch'):.0f} | {r.gbs('copy'):.0f} | "
            f"{r.ms['copy'] / r.ms['logsoftmax']:.2f} | "
            f"{r.ms['torch'] / r.ms['logsoftmax']:.2f} | {_b2b(r, 'copy')} | "
            f"{_b2b(r, 'torch')} | {r.max_abs_diff:.2g} |"
        )
    return head + "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [
        f"{r.problem.name} {r.problem.direction} {r.problem.sdt}" for r in rows
    ]
    xs = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.35), 5))
    for i, prov in enumerate(("logsoftmax", "torch", "copy")):
        ax.bar(xs + (i - 1) * 0.27, [r.gbs(prov) for r in rows], 0.27, label=prov)
    ax.set_xticks(xs, labels, rotation=90, fontsize=7)
    ax.set_ylabel("GB/s (bytes moved / median time)")
    ax.set_title("log-softmax on CUDA: this backend vs torch vs a device copy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few problems only")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per provider")
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", ROOT / "benchmarks" / "results")),
        help="directory for bench_cuda.md/.json/.png (default $OUT or "
        "benchmarks/results)",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    try:
        import torch
    except ImportError:
        print("bench_cuda: torch is not installed (pip install 'logsoftmax[cuda]'); "
              "nothing to measure", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print(
            "bench_cuda: no CUDA device (torch.cuda.is_available() is False); "
            "nothing to measure. GPU timings are owed: run "
            "benchmarks/gpu_check.sh on a machine with a GPU.",
            file=sys.stderr,
        )
        return 0
    import logsoftmax
    from logsoftmax.backends.cuda import interpreting

    if interpreting():
        print("bench_cuda: TRITON_INTERPRET is set; unset it to time compiled "
              "kernels", file=sys.stderr)
        return 2
    rows = []
    for p in problems(args.quick):
        try:
            rows.append(run_problem(torch, logsoftmax, p, args.repeat))
        except torch.cuda.OutOfMemoryError:
            print(f"bench_cuda: {p.name} {p.direction} {p.sdt}: out of memory; skipped",
                  file=sys.stderr)
            torch.cuda.empty_cache()
            continue
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    md = (
        f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"medians of {args.repeat} runs.\n\n" + table(rows)
    )
    (args.out / "bench_cuda.md").write_text(md)
    (args.out / "bench_cuda.json").write_text(
        json.dumps(
            [
                dict(asdict(r.problem), bytes=r.bytes, ms=r.ms, diff=r.max_abs_diff)
                for r in rows
            ],
            indent=1,
        )
    )
    plotted = plot(rows, args.out / "bench_cuda.png")
    print(md)
    print(f"wrote {args.out}/bench_cuda.md, .json" + (", .png" if plotted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
