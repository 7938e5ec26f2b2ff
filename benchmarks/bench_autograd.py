"""Per-step cost of logsoftmax's autograd vs PyTorch CPU on the same MLP.

One training step of ``in -> hidden -> relu -> 10`` with ``cross_entropy``
and SGD with momentum, batch 256, float32, in four variants:

- ``ours``:  logsoftmax Tensors, ``F.linear``/``relu``/``cross_entropy``,
  ``loss.backward()``, ``nn.SGD`` (the library's autograd);
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

    python benchmarks/bench_autograd.py               # table (markdown)
    python benchmarks/bench_autograd.py --repeat 50 --sizes 64,128,10 784,512,10
"""

from __future__ import annotations

import argparse

import numpy as np

import logsoftmax as ls
from logsoftmax import nn
from logsoftmax.driver.perf import median_seconds
from logsoftmax.nn import functional as F

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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="autograd step time vs PyTorch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeat", type=int, default=21)
    p.add_argument("--steps", type=int, default=20, help="steps per timed round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sizes", nargs="+", default=["64,128,10", "784,512,10"])
    args = p.parse_args(argv)
    import numba
    import torch

    numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    try:  # numpy's BLAS pool (threadpoolctl comes with scikit-learn)
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    except ImportError:
        print("threadpoolctl not installed: BLAS threads not pinned")
    print(f"batch {args.batch}, float32, {args.threads} thread(s), median of "
          f"{args.repeat} interleaved rounds x {args.steps} steps; torch "
          f"{torch.__version__}, numpy {np.__version__}\n")
    print("| MLP | ours ms | torch ms | ours/torch | ours raw ms | torch raw ms "
          "| ours kernel share | torch kernel share | ours overhead us/op |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.sizes:
        sizes = [int(s) for s in spec.split(",")]
        m = measure(sizes, args.batch, args.repeat, args.steps)
        n_ops = count_nodes(sizes, args.batch)
        over = (m["ours"] - m["ours raw"]) / n_ops * 1e6
        print(f"| {'-'.join(map(str, sizes))} | {m['ours'] * 1e3:.3f} | "
              f"{m['torch'] * 1e3:.3f} | {m['ours'] / m['torch']:.2f} | "
              f"{m['ours raw'] * 1e3:.3f} | {m['torch raw'] * 1e3:.3f} | "
              f"{m['ours raw'] / m['ours']:.0%} | {m['torch raw'] / m['torch']:.0%} | "
              f"{over:.1f} ({n_ops} ops) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
