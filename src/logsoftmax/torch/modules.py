"""``torch.nn`` modules over :mod:`logsoftmax.torch.functional`.

Each subclasses its PyTorch counterpart, so ``isinstance`` checks, ``repr``,
``state_dict`` (``CrossEntropyLoss``'s ``weight`` buffer) and pickling behave
as with ``torch.nn``; only ``forward`` changes.
"""

from __future__ import annotations

import torch

from . import functional as F

__all__ = ["LogSoftmax", "Softmax", "CrossEntropyLoss"]


class LogSoftmax(torch.nn.LogSoftmax):
    """``y = log_softmax(x, dim)`` on the library's kernels.

    ``dim`` is required: ``torch.nn.LogSoftmax()`` without one guesses it
    from the input's rank (deprecated there), which we do not copy.
    """

    def __init__(self, dim: int) -> None:
        super().__init__(dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(input, self.dim)


class Softmax(torch.nn.Softmax):
    """``y = softmax(x, dim)`` on the library's kernels (``dim`` required)."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.softmax(input, self.dim)


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """:func:`logsoftmax.torch.cross_entropy` as a module: the constructor of
    ``torch.nn.CrossEntropyLoss`` (``weight``, ``ignore_index``,
    ``reduction``, ``label_smoothing``, the legacy ``size_average``/``reduce``)."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )
