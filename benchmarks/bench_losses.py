"""Fused linear + cross-entropy: forward + backward time and peak memory.

The loss is GEMM-bound: its floor is the three GEMMs nobody can avoid,
``z = x @ W.T``, ``grad_x = g @ W`` and ``grad_W = g.T @ x`` (2 N H V flops
each), timed alone with the same BLAS. Everything else (softcap, the online
max/sum, the target pick, the gradient of the logits) is O(N V) elementwise
work that should hide behind them.

Cases (N x H tokens, V classes, float32, ``--threads`` threads):

* ``floor numpy`` / ``floor torch``: the three GEMMs, numpy's OpenBLAS / torch's.
* ``numpy chunked GEMMs (rows R)``: the fused schedule's three GEMMs on
  R-row chunks, without the kernels (what chunking alone costs with
  OpenBLAS, R = 64, 256, 512, 1024).
* ``numpy fused (rows R)``: :func:`logsoftmax._linear_ce.forward` with
  ``grads=True`` and chunks of R token rows x all V (token chunking; the
  gradients are computed in the forward: three GEMMs), then ``backward``.
* ``numpy recompute (cols C)``: chunks of all N rows x C classes (vocabulary
  chunking): a stats pass, then the backward recomputes the logits (four
  GEMMs).
* ``torch unfused``: ``F.cross_entropy(x @ W.T, t)`` + backward.
* ``torch chunked``: ``F.linear_cross_entropy(..., options=LinearCrossEntropyOptions())``.
* ``ours on torch``: ``logsoftmax.torch.linear_cross_entropy`` (torch's BLAS).

Time: medians of ``--repeat`` interleaved rounds after a warm-up. Peak
extra memory: each case in a fresh subprocess, the peak resident size
during its second call minus the resident size before it (inputs
allocated, one full-size call done so that compilation and the BLAS
libraries' per-process workspaces are behind it), so numpy and torch
allocations count alike.

Run: ``python benchmarks/bench_losses.py [--quick] [--large] [--repeat 3]``.
Writes the table and ``docs/img/losses.png`` into docs/losses.md (between
the ``bench_losses`` markers) unless ``--no-write``. ``--cuda`` times the
CUDA pieces on a GPU instead (``benchmarks/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info, replace_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "losses.md"
PLOT = ROOT / "docs" / "img" / "losses.png"
BEGIN, END = "<!-- bench_losses:begin -->", "<!-- bench_losses:end -->"


# --------------------------------------------------------------------------
# the cases (each builds its inputs and returns a zero-argument callable)
# --------------------------------------------------------------------------
def _data(n, h, v, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h)).astype(np.float32)
    w = (rng.standard_normal((v, h)) * (1 / np.sqrt(h))).astype(np.float32)
    t = rng.integers(0, v, n)
    return x, w, t


def _three_gemms(x, w):
    """The floor: ``z = x @ w.T``, ``z @ w``, ``z.T @ x`` (numpy or torch)."""
    z = x @ w.T
    z @ w
    z.T @ x


def make_case(name: str, n: int, h: int, v: int):
    x, w, t = _data(n, h, v)
    if name == "floor numpy":
        return lambda: _three_gemms(x, w)
    if name.startswith("numpy chunked GEMMs"):
        from logsoftmax._linear_ce import NumpyOps

        ops = NumpyOps()
        rows = int(name.split()[-1].rstrip(")"))

        def run():  # the fused schedule's three GEMMs alone, no kernels
            g = np.empty((min(rows, n), v), np.float32)
            gx, gw = np.empty((n, h), np.float32), np.empty((v, h), np.float32)
            for r in range(0, n, rows):
                xr = x[r:r + rows]
                z = g[: len(xr)]
                ops.logits(xr, w, None, z)
                ops.acc_gx(gx[r:r + rows], z, w, True)
                ops.acc_gw(gw, z, xr, r == 0)
        return run
    if name.startswith("numpy fused") or name.startswith("numpy recompute"):
        from logsoftmax import _linear_ce

        fused = name.startswith("numpy fused")
        if name == "numpy fused (default)":
            chunk = None
        else:
            size = int(name.split()[-1].rstrip(")"))
            chunk = (size, v) if fused else (n, size)

        def run():
            p = _linear_ce.check("linear_cross_entropy", x, w, t, chunk_size=chunk)
            _, saved = _linear_ce.forward(p, grads=fused)
            _linear_ce.backward(np.float32(1), saved)
        return run
    import torch

    F = torch.nn.functional
    xt = torch.from_numpy(x).requires_grad_()
    wt = torch.from_numpy(w).requires_grad_()
    tt = torch.from_numpy(t)

    def step(loss_fn):
        def run():
            loss_fn().backward()
            xt.grad = wt.grad = None
        return run

    if name == "floor torch":
        xd, wd = xt.detach(), wt.detach()
        return lambda: _three_gemms(xd, wd)
    if name == "torch unfused":
        return step(lambda: F.cross_entropy(xt @ wt.T, tt))
    if name == "torch chunked":
        opts = torch.nn.LinearCrossEntropyOptions()
        return step(lambda: F.linear_cross_entropy(xt, wt, tt, options=opts))
    if name == "ours on torch":
        import logsoftmax.torch as lt

        return step(lambda: lt.linear_cross_entropy(xt, wt, tt))
    raise ValueError(name)


def cases(n, v):
    names = ["floor numpy"]
    names += [f"numpy chunked GEMMs (rows {r})" for r in (64, 256, 512, 1024) if r < n]
    names += ["numpy fused (default)"]
    names += [f"numpy fused (rows {r})" for r in (64, 256, 512, 1024) if r < n]
    names += [f"numpy recompute (cols {c})" for c in (1024, 4096)]
    names += ["floor torch", "torch unfused", "torch chunked", "ours on torch"]
    return names


# --------------------------------------------------------------------------
# measurement
# --------------------------------------------------------------------------
def _child(name, n, h, v, threads):
    """Peak extra resident memory of one call (run in a fresh process): the
    resident size sampled every 0.2 ms by a thread (the GEMMs and kernels
    release the GIL) minus the size before the call.

    The call measured is the second one, after a full-size warm-up: each BLAS
    library keeps a workspace of its own for the life of the process
    (OpenBLAS, first ``g.T @ x`` of a 256-row chunk: 32 MiB for numpy's
    copy, 55 MiB for SciPy's; nothing on later calls), which is not the
    operation's memory. The library's own pool of freed results is emptied
    first, so that nothing it allocates is already resident."""
    import threading

    import psutil

    from logsoftmax.backends.cpu import alloc

    _set_threads(threads)
    run = make_case(name, n, h, v)
    run()  # warm: compilation, BLAS workspaces
    alloc.clear_pool()
    proc = psutil.Process()
    before = proc.memory_info().rss
    peak, done = [before], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            done.wait(0.0002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    run()
    done.set()
    th.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    print(json.dumps({"peak_mib": max(0, peak[0] - before) / 2**20}))


def _set_threads(threads):
    import numba
    import threadpoolctl

    threadpoolctl.threadpool_limits(threads)
    numba.set_num_threads(threads)
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass


def peak_mib(name, n, h, v, threads) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, "--shape", f"{n},{h},{v}",
         "--threads", str(threads)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def measure(n, h, v, repeat, threads):
    from logsoftmax.driver.perf import median_seconds

    _set_threads(threads)
    names = cases(n, v)
    fns = {name: make_case(name, n, h, v) for name in names}
    secs = median_seconds(fns, repeat)
    rows = []
    for name in names:
        rows.append(dict(case=name, ms=secs[name] * 1e3,
                         peak_mib=peak_mib(name, n, h, v, threads)))
    return rows


def table(rows, n, h, v) -> str:
    by = {r["case"]: r for r in rows}
    fl_np, fl_t = by["floor numpy"]["ms"], by["floor torch"]["ms"]
    unf, chk = by["torch unfused"]["ms"], by["torch chunked"]["ms"]
    lines = [f"N={n}, H={h}, V={v}, float32, fwd + bwd", "",
             "| case | ms | / its floor | / torch unfused | / torch chunked | peak extra MiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        floor = fl_t if ("torch" in r["case"]) else fl_np
        lines.append(f"| {r['case']} | {r['ms']:.0f} | {r['ms'] / floor:.2f} | "
                     f"{r['ms'] / unf:.2f} | {r['ms'] / chk:.2f} | {r['peak_mib']:.1f} |")
    return "\n".join(lines)


def plot(rows, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.scatter(r["ms"], r["peak_mib"], s=30)
        ax.annotate(r["case"], (r["ms"], r["peak_mib"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("forward + backward, ms (lower is better)")
    ax.set_ylabel("peak extra memory, MiB")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def write_doc(text: str) -> None:
    replace_block(DOC, BEGIN, END, f"{BEGIN}\n{text}\n{END}")


def environment(threads) -> str:
    cpu = cpu_info()["model"]
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    import threadpoolctl

    blas = [f"{i['internal_api']} {i['version']} ({i['architecture']})"
            for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    return (f"CPU: {cpu}, {threads} threads; BLAS: {', '.join(blas)}; "
            f"OpenBLAS env: {env}")


# --------------------------------------------------------------------------
# CUDA (on a GPU)
# --------------------------------------------------------------------------
def cuda_bench(n, h, v, repeat) -> str:
    import torch

    from logsoftmax import _linear_ce
    from logsoftmax.backends.cuda.losses import CudaOps

    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, h, device="cuda", generator=g)
    w = torch.randn(v, h, device="cuda", generator=g) / h**0.5
    t = torch.randint(0, v, (n,), device="cuda", generator=g)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()

    def ours():
        p = _linear_ce.check("lce", x, w, t)
        _, s = _linear_ce.forward(p, grads=True, ops=CudaOps())
        _linear_ce.backward(torch.tensor(1.0, device="cuda"), s)

    def unfused():
        F.cross_entropy(xr @ wr.T, t).backward()

    def chunked():
        F.linear_cross_entropy(xr, wr, t,
                               options=torch.nn.LinearCrossEntropyOptions()).backward()

    def floor():
        _three_gemms(x, w)

    cases = [("floor (3 GEMMs)", floor), ("ours (CUDA pieces)", ours),
             ("torch unfused", unfused)]
    # torch's chunked loss is new (2.13 has it; the H200 image's 2.11 does not)
    if hasattr(F, "linear_cross_entropy"):
        cases.append(("torch chunked", chunked))
    out = ["| case | ms | peak extra MiB |", "|---|---:|---:|"]
    for name, fn in cases:
        fn()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(repeat):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        out.append(f"| {name} | {np.median(times):.2f} | {peak:.0f} |")
    return f"GPU {torch.cuda.get_device_name()}, N={n}, H={h}, V={v} f32\n\n" + "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N=512, H=256, V=8000")
    ap.add_argument("--large", action="store_true", help="also N=4096, H=1024 (slow)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="(--cuda) output folder")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.child, *map(int, a.shape.split(",")), a.threads)
        return 0
    if a.cuda:
        import torch

        if not torch.cuda.is_available():
            print("bench_losses: no CUDA device; nothing to measure with --cuda",
                  file=sys.stderr)
            return 0
        text = cuda_bench(8192, 2048, 128256, 10) if not a.quick else cuda_bench(
            2048, 512, 32000, 5)
        print(text)
        if a.out:
            (a.out / "bench_losses_cuda.md").write_text(text + "\n")
        return 0
    shapes = [(512, 256, 8000)] if a.quick else [(2048, 512, 32000)]
    if a.large:
        shapes.append((4096, 1024, 32000))
    parts = [environment(a.threads), ""]
    all_rows = None
    for n, h, v in shapes:
        rows = measure(n, h, v, a.repeat, a.threads)
        all_rows = all_rows or rows
        text = table(rows, n, h, v)
        print(text, flush=True)
        parts += [text, ""]
    parts.append(f"![time vs peak memory](img/{PLOT.name})")
    if not a.no_write:
        n, h, v = shapes[0]
        plot(all_rows, PLOT, f"linear_cross_entropy fwd+bwd, N={n} H={h} V={v} f32")
        write_doc("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
