"""Train a 2-layer MLP on scikit-learn's digits with logsoftmax's autograd.

The whole job runs on the library: ``nn.Linear`` / ``relu`` layers,
the fused ``cross_entropy`` (log_softmax + NLL forward, softmax minus one-hot
backward), the autograd engine, and an SGD-with-momentum optimizer written
with the library's own Tensor ops. It trains twice, in float32 and under
``autocast(bfloat16)`` (matmuls in bf16, the loss in float32, float32
master weights), shows a progress bar per epoch on a terminal (tqdm if
installed; one line per epoch when the output is a log), and saves a
loss/accuracy plot.

    python examples/train_digits.py            # full run
    python examples/train_digits.py --quick    # the `make demo` settings
    python examples/train_digits.py --plot out.png --epochs 40

The data set (1797 8x8 images, 10 classes) ships with scikit-learn: no
download. Exit status 1 if an accuracy target (95% f32, 93% bf16) is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import logsoftmax as ls
from logsoftmax import nn
from logsoftmax.nn import functional as F

TARGETS = {"float32": 0.95, "bf16 autocast": 0.93}
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLOT = ROOT / "docs" / "img" / "train_digits.png"


def load_data(seed: int = 0, dtype=np.float32):
    """Digits as ``(x_train, y_train, x_test, y_test)``: pixels scaled to
    [0, 1], a stratified 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(dtype)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y
    )
    return x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64)


def make_model(hidden: int = 128, dtype=np.float32, seed: int = 0) -> nn.Sequential:
    """64 -> hidden -> relu -> 10, PyTorch's default initialisation."""
    rng = np.random.default_rng(seed)
    return nn.Sequential(
        nn.Linear(64, hidden, dtype=dtype, seed=rng),
        nn.ReLU(),
        nn.Linear(hidden, 10, dtype=dtype, seed=rng),
    )


def batches(n: int, batch: int, rng: np.random.Generator):
    """Index arrays of a shuffled pass over ``n`` samples."""
    order = rng.permutation(n)
    return [order[i : i + batch] for i in range(0, n, batch)]


def accuracy(model, x, y, amp_dtype=None) -> float:
    with ls.no_grad(), _autocast(amp_dtype):
        logits = model(x)
    return float((np.argmax(logits.numpy().astype(np.float32), axis=1) == y).mean())


def _autocast(amp_dtype):
    """``autocast(amp_dtype)``, or a disabled one for ``None`` (float32)."""
    return ls.amp.autocast(amp_dtype or ls.bfloat16, enabled=amp_dtype is not None)


def train_step(model, opt, xb, yb, amp_dtype=None) -> float:
    """One SGD step on a batch; returns the batch loss."""
    with _autocast(amp_dtype):
        loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def train(
    data,
    *,
    epochs: int,
    batch: int = 64,
    lr: float = 0.05,
    momentum: float = 0.9,
    amp_dtype=None,
    seed: int = 0,
    hidden: int = 128,
    label: str = "",
    progress: bool = True,
) -> dict:
    """Train a fresh model; returns ``{"loss": [...], "acc": [...], "model"}``
    with the mean training loss and the test accuracy after each epoch."""
    x_tr, y_tr, x_te, y_te = data
    model = make_model(hidden, seed=seed)
    opt = nn.SGD(model.parameters(), lr=lr, momentum=momentum)
    rng = np.random.default_rng(seed + 1)
    hist = {"loss": [], "acc": [], "model": model}
    for epoch in range(epochs):
        idx = batches(len(x_tr), batch, rng)
        bar = _bar(idx, f"{label} epoch {epoch + 1}/{epochs}", progress)
        losses = []
        for b in bar:
            losses.append(train_step(model, opt, x_tr[b], y_tr[b], amp_dtype))
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
        hist["loss"].append(float(np.mean(losses)))
        hist["acc"].append(accuracy(model, x_te, y_te, amp_dtype))
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(
                loss=f"{hist['loss'][-1]:.4f}", test_acc=f"{hist['acc'][-1]:.2%}"
            )
            bar.close()
        elif progress:
            print(f"{label} epoch {epoch + 1}: loss {hist['loss'][-1]:.4f}, "
                  f"test accuracy {hist['acc'][-1]:.2%}", flush=True)
    return hist


def _bar(items, desc: str, progress: bool):
    """A progress bar over ``items`` on a terminal. Without one (a log, CI,
    ``make demo | tee``) the bar's carriage-return redraws would pile up into
    a wall of text, so the items come back bare and :func:`train` prints one
    line per epoch instead."""
    if not (progress and sys.stdout.isatty()):
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainBar(items, desc)
    return tqdm(items, desc=desc, file=sys.stdout, ncols=100)


class _PlainBar:
    """A minimal text progress bar when tqdm is not installed."""

    def __init__(self, items, desc: str) -> None:
        self.items, self.desc = items, desc

    def __iter__(self):
        n = len(self.items)
        for i, item in enumerate(self.items, 1):
            yield item
            done = int(30 * i / n)
            print(f"\r{self.desc} [{'#' * done}{'.' * (30 - done)}] {i}/{n}", end="",
                  flush=True)
        print(" ", end="")


def plot(histories: dict, path: Path) -> None:
    """Save training loss and test accuracy per epoch for each run (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for name, h in histories.items():
        epochs = np.arange(1, len(h["loss"]) + 1)
        ax1.plot(epochs, h["loss"], marker="o", ms=3, label=name)
        ax2.plot(epochs, np.array(h["acc"]) * 100, marker="o", ms=3, label=name)
    ax1.set(xlabel="epoch", ylabel="training loss (cross entropy)", yscale="log")
    ax2.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(80, 100))
    for name, target in TARGETS.items():
        ax2.axhline(target * 100, ls=":", lw=1, color="gray")
    ax1.legend()
    ax2.legend(loc="lower right")
    fig.suptitle("digits MLP 64-128-10, SGD momentum, logsoftmax autograd")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def set_threads(n: int) -> None:
    """Limit numba's and the BLAS's thread pools to ``n`` threads.

    The matrices here are tiny (batch 64 x 128): a parallel region costs more
    than it saves, and numba's OpenMP pool and OpenBLAS's pool spin-wait
    against each other. Measured on the 2-core CI machine under load: one
    float32 step 0.6 ms with 1 thread each, 6 ms with numba at 2, 30-130 ms
    with both at 2.
    """
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(n)
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few epochs (make demo)")
    p.add_argument("--epochs", type=int, help="default 30 (12 with --quick)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--plot", default=str(DEFAULT_PLOT), help="PNG path ('' = none)"
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--threads", type=int, default=1,
                   help="kernel and BLAS threads (default 1: see set_threads)")
    args = p.parse_args(argv)
    set_threads(args.threads)
    epochs = args.epochs or (12 if args.quick else 30)
    data = load_data(args.seed)
    runs = {"float32": None, "bf16 autocast": ls.bfloat16}
    histories, ok = {}, True
    for name, amp_dtype in runs.items():
        t0 = time.perf_counter()
        h = train(
            data,
            epochs=epochs,
            batch=args.batch,
            lr=args.lr,
            amp_dtype=amp_dtype,
            seed=args.seed,
            label=name,
            progress=not args.no_progress,
        )
        histories[name] = h
        acc, target = h["acc"][-1], TARGETS[name]
        ok &= acc >= target
        print(f"{name}: test accuracy {acc:.2%} (target {target:.0%}) after {epochs} "
              f"epochs, {time.perf_counter() - t0:.1f} s"
              + ("" if acc >= target else "  <-- BELOW TARGET"))
    if args.plot:  # a str: Path("") would be "." and save to ".png"
        try:
            plot(histories, Path(args.plot))
            print(f"plot saved to {args.plot}")
        except ImportError:
            print("matplotlib not installed; no plot")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
