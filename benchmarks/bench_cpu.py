"""Fused log-softmax on the CPU: how close to the memory system can it get?

A straightforward NumPy log-softmax makes five passes over the data
(``max``, ``x - m``, ``exp``, ``sum``, ``- log``), each reading and most
writing a full-size array: ~9 full-size memory streams. The fused kernel
reads each row once to get its max and sum of exponentials together (the
"online softmax", chunk by chunk so the second look at a chunk hits L1), then
reads it again from cache and writes the result:

    forward  bytes moved = N * (itemsize_in + itemsize_out)   # 2 streams
    backward bytes moved = N * 3 * itemsize                  # diff_dst, dst, diff_src

so the best it can do is the speed of a plain memory copy of the same bytes
(a numba ``prange`` copy for the forward, ``c = a + b`` for the backward, run
in the same process on the same number of threads). We report, per problem:
our time allocating the result and writing into ``out=``, PyTorch's two
paths (``torch.log_softmax`` / ``torch._log_softmax(x, dim, False, out=)``
and ``torch._log_softmax_backward_data(dy, y, dim, dtype[, out=])``, native
bf16/f16), NumPy, the copy, our effective bandwidth (bytes moved / time, on
the ``out=`` path) and the ratios.

Problems: the 12 of ``logsoftmax/data/perf_set.json`` in their own data
types and direction, plus each shape in f32, bf16 and f16, forward and
backward; plus 4096x32000 (axis 1) and 1000x65536 (axis 0). Timings are
medians of ``--repeat`` round-robin (interleaved) runs after one warm-up,
with 2 threads for both libraries.

Usage::

    python benchmarks/bench_cpu.py [--quick] [--repeat N] [--threads T]
        [--no-write] [--only p08,p11]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    Problem,
    add3,
    bench_interleaved,
    copy2,
    load_problems,
    problem_from_json,
    strided_empty,
)

import logsoftmax  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NP_DT = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
DTYPES = ("f32", "bf16", "f16")


def problems(quick: bool, only: set[str] | None) -> list[Problem]:
    out: list[Problem] = []
    seen = set()

    def add(p: Problem):
        key = (p.shape, p.axis, p.order, p.src, p.dst, p.direction)
        if key not in seen and (only is None or p.pid in only):
            seen.add(key)
            out.append(p)

    raw = load_problems()
    extra = [
        {"perf_id": "x4096", "shape": [4096, 32000], "axis": 1, "stag": "ab",
         "sdt": "f32", "ddt": "f32", "dir": "fwd"},
        {"perf_id": "xax0", "shape": [1000, 65536], "axis": 0, "stag": "ab",
         "sdt": "f32", "ddt": "f32", "dir": "fwd"},
    ]
    if quick:
        pick = {"perf08", "perf00", "perf07", "x4096"}
        for p in raw + extra:
            if p["perf_id"] in pick:
                add(problem_from_json(p, p["sdt"], p["ddt"], "fwd"))
        for p in raw + extra:
            if p["perf_id"] in {"perf08", "x4096"}:
                add(problem_from_json(p, "bf16", "bf16", "fwd"))
                add(problem_from_json(p, "f32", "f32", "bwd"))
        return out
    for p in raw + extra:
        add(problem_from_json(p, p["sdt"], p["ddt"], p.get("dir", "fwd").lower()))
        for dt in DTYPES:
            for direction in ("fwd", "bwd"):
                add(problem_from_json(p, dt, dt, direction))
    return out


def numpy_log_softmax(x, axis):
    """The textbook NumPy version (float32 math for bf16/f16 inputs)."""
    xf = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
    m = xf.max(axis=axis, keepdims=True)
    y = xf - m
    y -= np.log(np.exp(y).sum(axis=axis, keepdims=True))
    return y.astype(x.dtype, copy=False)


def numpy_log_softmax_backward(dy, y, axis):
    dyf = dy if dy.dtype == np.float32 else dy.astype(np.float32)
    yf = y if y.dtype == np.float32 else y.astype(np.float32)
    g = dyf - np.exp(yf) * dyf.sum(axis=axis, keepdims=True)
    return g.astype(dy.dtype, copy=False)


def _torch_view(torch, a: np.ndarray, order):
    """A torch tensor sharing ``a``'s memory and strides (bf16 via uint16)."""
    inverse = np.argsort(order)
    base = a.transpose(order)  # memory order, contiguous
    if a.dtype == ml_dtypes.bfloat16:
        t = torch.from_numpy(base.view(np.uint16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(base)
    return t.permute(*[int(i) for i in inverse])


def run_problem(p: Problem, repeat: int, torch) -> dict:
    rng = np.random.default_rng(0)
    sdt, ddt = NP_DT[p.src], NP_DT[p.dst]
    x = strided_empty(p.shape, p.order, sdt)
    x[...] = (rng.standard_normal(p.shape, dtype=np.float32) * 3).astype(sdt)
    out = strided_empty(p.shape, p.order, ddt)
    fns: dict[str, callable] = {}
    n = p.nelems
    if p.direction == "fwd":
        nbytes = n * (np.dtype(sdt).itemsize + np.dtype(ddt).itemsize)
        fns["ours alloc"] = lambda: logsoftmax.log_softmax(x, p.axis, dtype=ddt)
        fns["ours out="] = lambda: logsoftmax.log_softmax(x, p.axis, out=out, dtype=ddt)
        a = x.transpose(p.order).reshape(-1).view(np.uint8)
        b = out.transpose(p.order).reshape(-1).view(np.uint8)
        if a.size != b.size:  # mixed dtypes: copy the larger side's bytes
            a, b = (a, np.empty_like(a)) if a.size > b.size else (np.empty_like(b), b)
        fns["copy"] = lambda: copy2(a, b)
        if torch is not None:
            tx = _torch_view(torch, x, p.order)
            to = _torch_view(torch, out, p.order)
            if sdt == ddt:
                fns["torch alloc"] = lambda: torch.log_softmax(tx, p.axis)
                lsm = torch._log_softmax
                fns["torch out="] = lambda: lsm(tx, p.axis, False, out=to)
            else:
                # torch's mixed path: half_to_float only goes bf16/f16 -> f32
                tdt = {np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
                       np.dtype(np.float16): torch.float16,
                       np.dtype(np.float32): torch.float32}[np.dtype(ddt)]
                fns["torch alloc"] = lambda: torch.log_softmax(tx, p.axis).to(tdt)
        fns["numpy"] = lambda: numpy_log_softmax(x, p.axis)
    else:
        nbytes = 3 * n * np.dtype(sdt).itemsize
        y = logsoftmax.log_softmax(x, p.axis)
        dy = strided_empty(p.shape, p.order, sdt)
        dy[...] = rng.standard_normal(p.shape, dtype=np.float32).astype(sdt)
        fns["ours alloc"] = lambda: logsoftmax.log_softmax_backward(dy, y, p.axis)
        fns["ours out="] = lambda: logsoftmax.log_softmax_backward(
            dy, y, p.axis, out=out
        )
        fa = dy.transpose(p.order).reshape(-1)
        fb = y.transpose(p.order).reshape(-1)
        fc = out.transpose(p.order).reshape(-1)
        if fa.itemsize == 2:  # bf16/f16: integer adds move the same bytes
            fa, fb, fc = fa.view(np.uint16), fb.view(np.uint16), fc.view(np.uint16)
        fns["copy"] = lambda: add3(fa, fb, fc)
        if torch is not None:
            tdy, ty = _torch_view(torch, dy, p.order), _torch_view(torch, y, p.order)
            to = _torch_view(torch, out, p.order)
            bw = torch._log_softmax_backward_data
            fns["torch alloc"] = lambda: bw(tdy, ty, p.axis, ty.dtype)
            fns["torch out="] = lambda: bw(tdy, ty, p.axis, ty.dtype, out=to)
        fns["numpy"] = lambda: numpy_log_softmax_backward(dy, y, p.axis)
    t = bench_interleaved(fns, repeat, skip_repeat={"numpy": min(repeat, 2)})
    return {"problem": p, "bytes": nbytes, "t": t}


def row_cells(r: dict) -> list[str]:
    t, nb = r["t"], r["bytes"]
    ms = lambda k: f"{t[k] * 1e3:.1f}" if k in t else "-"  # noqa: E731
    gbs = nb / t["ours out="] / 1e9
    pct = t["copy"] / t["ours out="] * 100
    def ratio(a, b):
        return f"{t[a] / t[b]:.2f}x" if a in t and b in t else "-"

    return [
        r["problem"].label(),
        ms("ours out="),
        ms("ours alloc"),
        ms("torch out="),
        ms("torch alloc"),
        ms("numpy"),
        ms("copy"),
        f"{gbs:.1f}",
        f"{pct:.0f}%",
        ratio("torch out=", "ours out="),
        ratio("torch alloc", "ours alloc"),
        ratio("numpy", "ours alloc"),
    ]


BEGIN = "<!-- bench_cpu.py:begin -->"
END = "<!-- bench_cpu.py:end -->"

HEADER = [
    "problem",
    "ours out= ms",
    "ours alloc ms",
    "torch out= ms",
    "torch alloc ms",
    "numpy ms",
    "copy ms",
    "ours GB/s",
    "% of copy",
    "vs torch out=",
    "vs torch alloc",
    "vs numpy",
]


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["problem"].label() for r in results]
    ours = [r["bytes"] / r["t"]["ours out="] / 1e9 for r in results]
    copy = [r["bytes"] / r["t"]["copy"] / 1e9 for r in results]
    tor = [r["bytes"] / r["t"]["torch out="] / 1e9 if "torch out=" in r["t"] else 0
           for r in results]
    y = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(results) + 1.5))
    ax.barh(y - 0.27, copy, 0.27, label="memory copy (same bytes)", color="#bbbbbb")
    ax.barh(y, ours, 0.27, label="logsoftmax (out=)", color="#1f77b4")
    ax.barh(y + 0.27, tor, 0.27, label="PyTorch 2.13 (out=)", color="#ff7f0e")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("effective bandwidth, GB/s (bytes moved / time)")
    ax.set_title("CPU log-softmax, 2 threads")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset, < 1 min")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per entry")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma list of problem ids")
    ap.add_argument(
        "--no-write", action="store_true", help="don't update docs/ (--quick doesn't)"
    )
    args = ap.parse_args(argv)
    if args.quick and args.repeat == 5:
        args.repeat = 3

    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
        print("torch not installed: PyTorch columns are empty", file=sys.stderr)

    only = set(args.only.split(",")) if args.only else None
    todo = problems(args.quick, only)
    results, rows = [], []
    t0 = time.time()
    print(" | ".join(HEADER))
    for p in todo:
        r = run_problem(p, args.repeat, torch)
        results.append(r)
        rows.append(row_cells(r))
        print(" | ".join(rows[-1]), flush=True)
    wall = time.time() - t0
    print(f"({len(todo)} problems, {wall:.0f} s)")
    if args.no_write or args.quick:
        return 0
    cmd = "python benchmarks/bench_cpu.py " + " ".join(argv or sys.argv[1:])
    pct = [r["t"]["copy"] / r["t"]["ours out="] for r in results]
    vs_t = [r["t"]["torch out="] / r["t"]["ours out="] for r in results
            if "torch out=" in r["t"]]
    vs_ta = [r["t"]["torch alloc"] / r["t"]["ours alloc"] for r in results
             if "torch alloc" in r["t"]]
    summary = (
        f"Median over problems: {np.median(pct) * 100:.0f}% of copy bandwidth "
        f"(min {min(pct) * 100:.0f}%), {np.median(vs_t):.2f}x PyTorch out= "
        f"(min {min(vs_t):.2f}x), {np.median(vs_ta):.2f}x PyTorch allocating "
        f"(min {min(vs_ta):.2f}x)." if vs_t and vs_ta else ""
    )
    doc = [
        "### Measured (written by `benchmarks/bench_cpu.py`)",
        "",
        f"Command: `{cmd.strip()}` ({time.strftime('%Y-%m-%d')}, "
        f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, {args.threads} threads, numba "
        f"{numba.__version__}, torch {torch.__version__ if torch else '-'}; "
        f"medians of {args.repeat} interleaved runs; the machine was shared, so "
        "compare ratios within a row).",
        "",
        summary,
        "",
        markdown(rows),
        "",
        "![CPU bandwidth](img/cpu_bandwidth.png)",
        "",
    ]
    out = ROOT / "docs" / "performance.md"
    block = "\n".join([BEGIN] + doc + [END])
    text = out.read_text() if out.exists() else ""
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text + "\n" + block + "\n"
    out.write_text(text)
    plot(results, ROOT / "docs" / "img" / "cpu_bandwidth.png")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
