"""logsoftmax as a drop-in for ``torch.nn.functional.cross_entropy``.

A PyTorch MLP (64 -> 128 -> relu -> 10) learns scikit-learn's digits twice,
from the same initial weights and the same batches: once with
``torch.nn.functional.cross_entropy`` and once with
``logsoftmax.torch.cross_entropy`` (the library's log-softmax kernels as a
PyTorch custom op; autograd, ``torch.compile`` and the rest unchanged).
Everything else is plain PyTorch: ``nn.Linear``, ``torch.optim.SGD``.

In float64 the two loss curves agree to ~1e-9 relative (the kernels differ
from PyTorch's only in their last bits, which SGD carries along); the
script checks that, prints both test accuracies and plots both curves.

    python examples/torch_drop_in.py                 # 30 epochs, plot in docs/img/
    python examples/torch_drop_in.py --quick         # 8 epochs
    python examples/torch_drop_in.py --dtype float32 --label-smoothing 0.1

Exit status 1 if the curves disagree by more than ``--rtol`` or the test
accuracy misses 95%.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import logsoftmax.torch as lt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drop_in  # noqa: E402
from train_digits import batches, load_data  # noqa: E402  (the same data and split)


def make_model(dtype: torch.dtype, seed: int) -> torch.nn.Module:
    """64 -> 128 -> relu -> 10 with PyTorch's default initialisation."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(dtype)


def train(loss_fn, data, args, log) -> dict:
    """Train a fresh model; ``loss_fn`` is the only thing that differs."""
    dtype = getattr(torch, args.dtype)
    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a) for a in data)
    x_tr, x_te = x_tr.to(dtype), x_te.to(dtype)
    model = make_model(dtype, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    rng = np.random.default_rng(args.seed + 1)
    hist = {"step": [], "epoch": [], "acc": []}
    for epoch in range(drop_in.epochs_of(args)):
        losses = []
        for idx in batches(len(x_tr), args.batch, rng):
            idx = torch.from_numpy(idx)
            loss = loss_fn(model(x_tr[idx]), y_tr[idx],
                           label_smoothing=args.label_smoothing)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        with torch.no_grad():
            acc = (model(x_te).argmax(1) == y_te).double().mean().item()
        hist["step"] += losses
        hist["epoch"].append(float(np.mean(losses)))
        hist["acc"].append(acc)
        log(epoch, hist)
    return hist


def main(argv: list[str] | None = None) -> int:
    p = drop_in.parser(__doc__, "torch_drop_in.png")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they save
    data = load_data(args.seed, np.float64)
    epochs = drop_in.epochs_of(args)
    runs = {}
    for name, loss_fn in (("F.cross_entropy", F.cross_entropy),
                          ("lt.cross_entropy", lt.cross_entropy)):
        t0 = time.perf_counter()
        runs[name] = train(loss_fn, data, args, drop_in.epoch_logger(name, epochs))
        print(f"{name}: test accuracy {runs[name]['acc'][-1]:.2%} after {epochs} epochs "
              f"({len(runs[name]['step'])} steps, {time.perf_counter() - t0:.1f} s)")
    return drop_in.finish(args, runs, "F.cross_entropy", "lt.cross_entropy",
                          "digits MLP 64-128-10 in PyTorch")


if __name__ == "__main__":
    sys.exit(main())
