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
from pathlib import Path

import torch
import torch.nn.functional as F

import logsoftmax.torch as lt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drop_in  # noqa: E402


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

    def step(idx) -> float:
        idx = torch.from_numpy(idx)
        loss = loss_fn(model(x_tr[idx]), y_tr[idx], label_smoothing=args.label_smoothing)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def test_accuracy() -> float:
        with torch.no_grad():
            return (model(x_te).argmax(1) == y_te).double().mean().item()

    return drop_in.fit(args, len(x_tr), step, test_accuracy, log)


def main(argv: list[str] | None = None) -> int:
    p = drop_in.parser(__doc__, "torch_drop_in.png")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they save
    variants = [("F.cross_entropy", F.cross_entropy),
                ("lt.cross_entropy", lt.cross_entropy)]
    return drop_in.compare(args, train, variants, "digits MLP 64-128-10 in PyTorch")


if __name__ == "__main__":
    sys.exit(main())
