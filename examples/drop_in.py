"""What the two drop-in examples share: arguments, logging, the curve
comparison and the plot (``torch_drop_in.py``, ``jax_drop_in.py``).

Each example trains the same model twice, with the framework's own
log-softmax (the reference) and with logsoftmax's (ours), and hands the two
histories -- ``{"step": per-step losses, "epoch": per-epoch mean loss,
"acc": per-epoch test accuracy}`` -- to :func:`finish`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from train_digits import batches, load_data  # the library's own example's data

ROOT = Path(__file__).resolve().parent.parent
TARGET_ACCURACY = 0.95


def parser(doc: str, plot_name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="8 epochs")
    p.add_argument("--epochs", type=int, help="default 30 (8 with --quick)")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float,
                   help="curve agreement required (default 1e-9 float64, 1e-3 float32)")
    p.add_argument("--plot", default=str(ROOT / "docs" / "img" / plot_name),
                   help="PNG path ('' = none)")
    return p


def epochs_of(args) -> int:
    return args.epochs or (8 if args.quick else 30)


def epoch_logger(name: str, epochs: int):
    """A line per epoch on a terminal; without one (CI, pipes) every 10th."""
    interactive = sys.stdout.isatty()

    def log(epoch: int, h: dict) -> None:
        if interactive or (epoch + 1) % 10 == 0 or epoch + 1 == epochs:
            print(f"  {name:20s} epoch {epoch + 1:3d}/{epochs}: loss "
                  f"{h['epoch'][-1]:.6f}, test accuracy {h['acc'][-1]:.2%}", flush=True)

    return log


def fit(args, n_train: int, step, test_accuracy, log) -> dict:
    """The epochs of one run: ``step(idx)`` trains on a batch of indices and
    returns its loss, ``test_accuracy()`` evaluates. Returns the history."""
    rng = np.random.default_rng(args.seed + 1)
    hist = {"step": [], "epoch": [], "acc": []}
    for epoch in range(epochs_of(args)):
        losses = [step(idx) for idx in batches(n_train, args.batch, rng)]
        hist["step"] += losses
        hist["epoch"].append(float(np.mean(losses)))
        hist["acc"].append(test_accuracy())
        log(epoch, hist)
    return hist


def compare(args, train, variants, title: str) -> int:
    """Train once per ``(name, thing)`` in ``variants`` (the reference first,
    then ours) with ``train(thing, data, args, log)``; report and plot."""
    data = load_data(args.seed, np.float64)
    epochs = epochs_of(args)
    runs = {}
    for name, thing in variants:
        t0 = time.perf_counter()
        runs[name] = train(thing, data, args, epoch_logger(name, epochs))
        print(f"{name}: test accuracy {runs[name]['acc'][-1]:.2%} after {epochs} epochs "
              f"({len(runs[name]['step'])} steps, {time.perf_counter() - t0:.1f} s)")
    (ref, _), (ours, _) = variants
    return finish(args, runs, ref, ours, title)


def finish(args, runs: dict, ref: str, ours: str, title: str) -> int:
    """Compare the curves, print the verdict, plot; the exit status."""
    a, b = np.array(runs[ours]["step"]), np.array(runs[ref]["step"])
    rel = float(np.max(np.abs(a - b) / np.abs(b)))
    rtol = args.rtol or (1e-9 if args.dtype == "float64" else 1e-3)
    agree = rel <= rtol
    acc = runs[ours]["acc"][-1]
    print(f"loss curves ({args.dtype}, {len(b)} steps): max relative difference "
          f"{rel:.2e} ({'within' if agree else 'ABOVE'} {rtol:.0e}); final loss "
          f"{a[-1]:.6f} vs {b[-1]:.6f}; test accuracy {acc:.2%} vs "
          f"{runs[ref]['acc'][-1]:.2%}")
    if args.plot:
        try:
            plot(runs, ref, ours, Path(args.plot), f"{title}, {args.dtype}")
            print(f"plot saved to {args.plot}")
        except ImportError:
            print("matplotlib not installed; no plot")
    return 0 if agree and acc >= TARGET_ACCURACY else 1


def plot(runs: dict, ref: str, ours: str, path: Path, title: str) -> None:
    """Left: both mean-loss curves per epoch. Right: the relative difference
    of the two per-step losses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, style in ((ref, dict(lw=3, alpha=0.5)), (ours, dict(lw=1))):
        h = runs[name]
        ax1.plot(np.arange(1, len(h["epoch"]) + 1), h["epoch"], label=name, **style)
    ax1.set(xlabel="epoch", ylabel="mean training loss", yscale="log")
    ax1.legend()
    a, b = np.array(runs[ours]["step"]), np.array(runs[ref]["step"])
    rel = np.abs(a - b) / np.abs(b)
    steps = np.arange(1, len(rel) + 1)
    ax2.semilogy(steps[rel > 0], rel[rel > 0], ".", ms=2)
    ax2.set(xlabel="SGD step (equal losses not shown)",
            ylabel="|ours - reference| / reference")
    ax2.set_title(f"per-step loss: {ours} vs {ref}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
