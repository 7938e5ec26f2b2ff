"""Per-step cost of logsoftmax's autograd vs PyTorch CPU on the same MLP.

One training step of ``in -> hidden -> relu -> 10`` with ``cross_entropy``
and SGD with momentum, batch 256, float32, in four variants:

- ``ours``:  logsoftmax Tensors, ``F.linear``/``relu``/``cross_entropy``,
  ``loss.backward()``, ``nn.SGD`` (the library's autograd; the optimizer
  updates the arrays in place, as PyTorch's);
- ``ours raw``: the same arithmetic written by hand on numpy arrays with the
  same kernels (BLAS matmuls, the fused log_softmax / softmax kernels): no
  graph, no Tensors. ``ours - ours raw`` is the engine's Python overhead;
- ``torch``: ``torch.nn.functional`` + ``backward()`` + ``torch.optim.SGD``;
- ``torch raw``: the same hand-written step with torch ops under
  ``no_grad``.

Kernel share = raw / full. Runs are interleaved (ours, torch, ours raw, torch
raw, repeat) and medians reported, since the machine is shared. Threads are
pinned (``--threads``, default 1) for both libraries: with tiny matrices a
parallel region costs more than it saves.

A second table splits a step of ``ours`` and ``torch`` into its phases
(forward, ``zero_grad`` + ``backward``, optimizer), timed inside the same
interleaved steps: where the difference is.

    python benchmarks/bench_autograd.py               # tables; rewrites docs/performance.md's
    python benchmarks/bench_autograd.py --quick       # fewer rounds, prints only
    python benchmarks/bench_autograd.py --repeat 50 --sizes 64,128,10 784,512,10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import logsoftmax as ls
from logsoftmax import nn
from logsoftmax.driver.perf import median_seconds
from logsoftmax.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_info  # noqa: E402

LR, MOMENTUM = 0.05, 0.9


def make_data(n_in: int, n_cls: int, batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, n_in)).astype(np.float32)
    t = rng.integers(0, n_cls, batch)
    return x, t


def init(sizes, seed: int = 0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1 / np.sqrt(fan_in)
        params.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, fan_out).astype(np.float32))
    return params


# -- the four step functions -----------------------------------------------------
def ours_step_factory(sizes, x, t):
    ps = [ls.tensor(p.copy(), requires_grad=True) for p in init(sizes)]
    opt = nn.SGD(ps, lr=LR, momentum=MOMENTUM)

    def step():
        w1, b1, w2, b2 = ps
        loss = F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def ours_raw_step_factory(sizes, x, t):
    w1, b1, w2, b2 = [p.copy() for p in init(sizes)]
    vel = [None] * 4
    rows = np.arange(len(t))

    def step():
        nonlocal w1, b1, w2, b2
        h = x @ w1.T + b1
        a = np.maximum(h, 0)
        z = a @ w2.T + b2
        y = ls.log_softmax(z, 1)
        loss = -y[rows, t].mean()
        g = ls.softmax(z, 1)
        g[rows, t] -= 1
        g /= len(t)
        grads = [None, None, g.T @ a, g.sum(0)]
        gh = (g @ w2) * (h > 0)
        grads[0], grads[1] = gh.T @ x, gh.sum(0)
        new = []
        for i, (p, gr) in enumerate(zip((w1, b1, w2, b2), grads)):
            vel[i] = gr if vel[i] is None else MOMENTUM * vel[i] + gr
            new.append(p - LR * vel[i])
        w1, b1, w2, b2 = new
        return loss

    return step


def torch_step_factory(sizes, x, t):
    import torch

    ps = [torch.tensor(p, requires_grad=True) for p in init(sizes)]
    opt = torch.optim.SGD(ps, lr=LR, momentum=MOMENTUM)
    xt, tt = torch.from_numpy(x), torch.from_numpy(t)
    TF = torch.nn.functional

    def step():
        w1, b1, w2, b2 = ps
        loss = TF.cross_entropy(TF.linear(TF.relu(TF.linear(xt, w1, b1)), w2, b2), tt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def torch_raw_step_factory(sizes, x, t):
    import torch

    ps = [torch.tensor(p) for p in init(sizes)]
    vel = [None] * 4
    xt, tt = torch.from_numpy(x), torch.from_numpy(t)
    rows = torch.arange(len(t))

    @torch.no_grad()
    def step():
        w1, b1, w2, b2 = ps
        h = torch.addmm(b1, xt, w1.T)
        a = h.clamp(min=0)
        z = torch.addmm(b2, a, w2.T)
        y = torch.log_softmax(z, 1)
        loss = -y[rows, tt].mean()
        g = torch.softmax(z, 1)
        g[rows, tt] -= 1
        g /= len(tt)
        grads = [None, None, g.T @ a, g.sum(0)]
        gh = (g @ w2) * (h > 0)
        grads[0], grads[1] = gh.T @ xt, gh.sum(0)
        for i, (p, gr) in enumerate(zip(ps, grads)):
            vel[i] = gr.clone() if vel[i] is None else vel[i].mul_(MOMENTUM).add_(gr)
            p.sub_(LR * vel[i])
        return loss

    return step


VARIANTS = {
    "ours": ours_step_factory,
    "ours raw": ours_raw_step_factory,
    "torch": torch_step_factory,
    "torch raw": torch_raw_step_factory,
}


def measure(sizes, batch: int, repeat: int, steps: int) -> dict[str, float]:
    """Median seconds per step of each variant: interleaved rounds of
    ``steps`` steps each, one warm-up round (kernel compilation, allocator,
    caches) excluded."""
    x, t = make_data(sizes[0], sizes[-1], batch)
    fns = {name: make(sizes, x, t) for name, make in VARIANTS.items()}
    rounds = {name: (lambda fn=fn: [fn() for _ in range(steps)])
              for name, fn in fns.items()}
    return {name: s / steps for name, s in median_seconds(rounds, repeat).items()}


def _phased(model_step):
    """Wrap a (forward, backward, update) triple into a step recording the
    seconds of each phase in ``step.times``."""
    forward, backward, update = model_step
    times = {"forward": [], "backward": [], "optimizer": []}

    def step():
        t0 = time.perf_counter()
        loss = forward()
        t1 = time.perf_counter()
        backward(loss)
        t2 = time.perf_counter()
        update()
        t3 = time.perf_counter()
        times["forward"].append(t1 - t0)
        times["backward"].append(t2 - t1)
        times["optimizer"].append(t3 - t2)

    step.times = times
    return step


def _ours_phases(sizes, x, t):
    ps = [ls.tensor(p.copy(), requires_grad=True) for p in init(sizes)]
    opt = nn.SGD(ps, lr=LR, momentum=MOMENTUM)
    w1, b1, w2, b2 = ps

    def backward(loss):
        opt.zero_grad()
        loss.backward()

    return (lambda: F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), t),
            backward, opt.step)


def _torch_phases(sizes, x, t):
    import torch

    ps = [torch.tensor(p, requires_grad=True) for p in init(sizes)]
    opt = torch.optim.SGD(ps, lr=LR, momentum=MOMENTUM)
    xt, tt = torch.from_numpy(x), torch.from_numpy(t)
    TF = torch.nn.functional
    w1, b1, w2, b2 = ps

    def backward(loss):
        opt.zero_grad()
        loss.backward()

    return (lambda: TF.cross_entropy(TF.linear(TF.relu(TF.linear(xt, w1, b1)), w2, b2),
                                     tt),
            backward, opt.step)


def phases(sizes, batch: int, repeat: int, steps: int) -> dict[str, dict[str, float]]:
    """Median microseconds of each phase of a step, ours and torch, from
    interleaved rounds of ``steps`` steps (one warm-up round excluded)."""
    x, t = make_data(sizes[0], sizes[-1], batch)
    runs = {"ours": _phased(_ours_phases(sizes, x, t)),
            "torch": _phased(_torch_phases(sizes, x, t))}
    for r in range(repeat + 1):
        for step in runs.values():
            if r == 1:  # drop the warm-up round
                for v in step.times.values():
                    v.clear()
            for _ in range(steps):
                step()
    return {name: {ph: statistics.median(v) * 1e6 for ph, v in step.times.items()}
            for name, step in runs.items()}


def count_nodes(sizes, batch: int) -> int:
    """Ops dispatched in one steady-state step: forward, backward and the
    optimizer (the second step: the first has no momentum buffers yet)."""
    import importlib

    D = importlib.import_module("logsoftmax.autograd.tensor")  # not ls.tensor

    calls = 0
    real = D.dispatch

    def counting(*a, **k):
        nonlocal calls
        calls += 1
        return real(*a, **k)

    x, t = make_data(sizes[0], sizes[-1], batch)
    step = ours_step_factory(sizes, x, t)
    step()
    D.dispatch = counting
    try:
        step()
    finally:
        D.dispatch = real
    return calls


BEGIN = "<!-- bench_autograd.py:begin -->"
END = "<!-- bench_autograd.py:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


def write_doc(lines: list[str]) -> None:
    """Replace the block between BEGIN and END in docs/performance.md."""
    text = DOC.read_text()
    block = "\n".join([BEGIN, *lines, END])
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)
    print(f"wrote {DOC.name}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="autograd step time vs PyTorch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeat", type=int, default=21)
    p.add_argument("--steps", type=int, default=20, help="steps per timed round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sizes", nargs="+", default=["64,128,10", "784,512,10"])
    p.add_argument("--quick", action="store_true",
                   help="7 rounds of 5 steps; print only (no docs)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat, args.steps = 7, 5
    import numba
    import torch

    numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    try:  # numpy's BLAS pool (threadpoolctl comes with scikit-learn)
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    except ImportError:
        print("threadpoolctl not installed: BLAS threads not pinned")
    out = [f"{cpu_info()['model']}; batch {args.batch}, float32, {args.threads} thread(s), "
           f"median of {args.repeat} interleaved rounds x {args.steps} steps; torch "
           f"{torch.__version__}, numpy {np.__version__}. "
           "`python benchmarks/bench_autograd.py`", ""]
    print(out[0] + "\n")

    def emit(line: str) -> None:
        out.append(line)
        print(line, flush=True)

    emit("| MLP | ours ms | torch ms | ours/torch | ours raw ms | torch raw ms "
         "| ours kernel share | torch kernel share | ours overhead us/op |")
    emit("|---|---|---|---|---|---|---|---|---|")
    specs = [[int(s) for s in spec.split(",")] for spec in args.sizes]
    for sizes in specs:
        m = measure(sizes, args.batch, args.repeat, args.steps)
        n_ops = count_nodes(sizes, args.batch)
        over = (m["ours"] - m["ours raw"]) / n_ops * 1e6
        emit(f"| {'-'.join(map(str, sizes))} | {m['ours'] * 1e3:.3f} | "
             f"{m['torch'] * 1e3:.3f} | {m['ours'] / m['torch']:.2f} | "
             f"{m['ours raw'] * 1e3:.3f} | {m['torch raw'] * 1e3:.3f} | "
             f"{m['ours raw'] / m['ours']:.0%} | {m['torch raw'] / m['torch']:.0%} | "
             f"{over:.1f} ({n_ops} ops) |")
    emit("")
    emit("Per phase (us per step, ours / torch):")
    emit("")
    emit("| MLP | forward | zero_grad + backward | optimizer | step |")
    emit("|---|---|---|---|---|")
    for sizes in specs:
        ph = phases(sizes, args.batch, args.repeat, args.steps)
        cells = [f"{ph['ours'][k]:.0f} / {ph['torch'][k]:.0f}"
                 for k in ("forward", "backward", "optimizer")]
        total = {n: sum(ph[n].values()) for n in ph}
        emit(f"| {'-'.join(map(str, sizes))} | {' | '.join(cells)} | "
             f"{total['ours']:.0f} / {total['torch']:.0f} "
             f"({total['ours'] / total['torch']:.2f}x) |")
    if not args.quick:
        write_doc(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
