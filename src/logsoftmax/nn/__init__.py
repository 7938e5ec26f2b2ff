"""Just enough of a neural-network toolkit to train a small classifier.

Layers are written with the library's own differentiable ops
(:mod:`logsoftmax.nn.functional`); the optimizer updates the parameters'
arrays in place (it is not differentiated).

>>> import numpy as np, logsoftmax as ls
>>> from logsoftmax import nn
>>> model = nn.Sequential(nn.Linear(4, 8, seed=0), nn.ReLU(), nn.Linear(8, 3, seed=1))
>>> opt = nn.SGD(model.parameters(), lr=0.1, momentum=0.9)
>>> loss = nn.functional.cross_entropy(model(np.ones((2, 4), np.float32)), [0, 2])
>>> loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator

import numpy as np

from .. import dtypes
from ..autograd import Tensor, _array, tensor
from . import functional

__all__ = ["functional", "Module", "Linear", "ReLU", "Sequential", "SGD"]


class Module:
    """Base class: callable; ``parameters()`` yields every Tensor attribute
    that requires grad, then those of sub-modules, in definition order."""

    def parameters(self) -> Iterator[Tensor]:
        for value in vars(self).values():
            if isinstance(value, Tensor) and value.requires_grad:
                yield value
            elif isinstance(value, Module):
                yield from value.parameters()
            elif isinstance(value, (list, tuple)):
                for item in value:
                    if isinstance(item, Module):
                        yield from item.parameters()

    def forward(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, x):
        return self.forward(x)


class Linear(Module):
    """``y = x W^T + b`` with PyTorch's layout and default initialisation:
    ``W, b ~ U(-1/sqrt(in), 1/sqrt(in))``.

    Args:
      in_features, out_features: sizes. bias: add a bias.
      dtype: parameter dtype (default float32).
      seed: seed (or ``np.random.Generator``) for the initialisation.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=dtypes.float32, seed=None) -> None:
        rng = np.random.default_rng(seed)  # a Generator passes through
        bound = 1.0 / math.sqrt(in_features)
        w = rng.uniform(-bound, bound, (out_features, in_features))
        self.weight = tensor(w, requires_grad=True, dtype=dtype)
        self.bias = None
        if bias:
            b = rng.uniform(-bound, bound, out_features)
            self.bias = tensor(b, requires_grad=True, dtype=dtype)

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)


class ReLU(Module):
    def forward(self, x):
        return functional.relu(x)


class Sequential(Module):
    """Apply ``layers`` in order."""

    def __init__(self, *layers: Module) -> None:
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SGD:
    """Stochastic gradient descent with (heavy-ball) momentum, PyTorch's form:
    ``v = momentum * v + grad; p -= lr * v`` (``v = grad`` on the first step).

    Args:
      params: the Tensors to update (leaves that require grad).
      lr: learning rate (> 0). momentum: in ``[0, 1)``.
      weight_decay: L2 penalty added to the gradient (``grad + wd * p``).
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("SGD: params is empty; expected at least one Tensor")
        if not lr > 0:
            raise ValueError(f"SGD: lr={lr!r}, expected a positive number")
        if not 0 <= momentum < 1:
            raise ValueError(f"SGD: momentum={momentum!r}, expected a value in [0, 1)")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self._velocity: list = [None] * len(self.params)  # momentum arrays

    def step(self) -> None:
        """Update every parameter that has a gradient, in place, as PyTorch's
        SGD does: an optimizer is not differentiated, so it works on the
        arrays, not through recorded ops (16 dispatched Tensor ops per step
        for a two-layer MLP cost more than its forward; measured in
        docs/performance.md, "Autograd per step"). The momentum buffer starts
        as a copy of the first gradient and is updated in place, the
        parameter's array too (``p.data -= lr * v``; immutable arrays such as
        dask's are rebound instead)."""
        for i, p in enumerate(self.params):
            grad = p._grad
            if grad is None:
                continue
            g = grad.data
            if self.weight_decay:
                g = g + p.data * _array.scalar_like(self.weight_decay, p.dtype)
            if self.momentum:
                v = self._velocity[i]
                if v is None:
                    v = _array.copy(g)
                else:
                    v *= _array.scalar_like(self.momentum, p.dtype)
                    v += g
                self._velocity[i] = g = v
            p.data -= g * _array.scalar_like(self.lr, p.dtype)

    def zero_grad(self) -> None:
        """Reset every parameter's ``.grad`` to None."""
        for p in self.params:
            p.grad = None
