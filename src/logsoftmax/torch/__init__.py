"""PyTorch adapter: the library's kernels as native PyTorch operators.

Importing this module registers ``torch.ops.logsoftmax.{log_softmax,
log_softmax_backward, softmax, softmax_backward, logsumexp}`` (custom ops
with fake kernels and autograd formulas: :mod:`._ops`) and offers
PyTorch-style functions and modules over them::

    import torch, logsoftmax.torch as lt
    y = lt.log_softmax(t, dim=-1)                 # autograd, double backward
    loss = lt.cross_entropy(logits, target, label_smoothing=0.1)
    loss = lt.linear_cross_entropy(hidden, lm_head.weight, target)  # fused, chunked
    model = torch.compile(model, fullgraph=True)  # captures the ops, no break

CPU tensors reach the CPU kernels without a copy at any strides; CUDA
tensors run on the CUDA backend; other devices raise ``NotImplementedError``.
Needs the ``torch`` extra (``pip install 'logsoftmax[torch]'``). See
docs/torch.md.
"""

from __future__ import annotations

from . import _ops  # registers torch.ops.logsoftmax.*
from .functional import cross_entropy, log_softmax, logsumexp, nll_loss, softmax
from .linear_cross_entropy import LinearCrossEntropyLoss, linear_cross_entropy
from .modules import CrossEntropyLoss, LogSoftmax, Softmax

__all__ = [
    # functions (torch.Tensor in and out)
    "log_softmax",
    "softmax",
    "logsumexp",
    "cross_entropy",
    "nll_loss",
    "linear_cross_entropy",
    # modules
    "LogSoftmax",
    "Softmax",
    "CrossEntropyLoss",
    "LinearCrossEntropyLoss",
]
