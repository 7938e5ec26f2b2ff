"""Reverse-mode autograd over the library's fused kernels (API.md section 4).

>>> import numpy as np, logsoftmax as ls
>>> from logsoftmax.nn import functional as F
>>> x = ls.tensor(np.array([[1.0, 2.0, 3.0]]), requires_grad=True)
>>> loss = F.nll_loss(F.log_softmax(x, axis=1), np.array([2]))
>>> loss.backward()
>>> np.round(x.grad.numpy(), 4)
array([[ 0.09  ,  0.2447, -0.3348]])

See ``docs/autograd.md`` for the model: nodes, schemas, saved outputs,
``apply``, double backward and autocast.

Modules, each importing only those listed before it: :mod:`.grad_mode`,
:mod:`._array` (every array-type-specific line), :mod:`.engine` (``Node``,
the backward sweep), :mod:`.tensor` (``Tensor``, ``Function`` and the one
dispatcher), :mod:`.nodes` (the ops; they and ``Tensor`` import each other),
:mod:`.losses` (``nll_loss``, ``cross_entropy``). Importing this package
registers every op's schema (:func:`registry`).
"""

from __future__ import annotations

from typing import Sequence

from ..schema import registry
from .engine import Node, run_backward
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .losses import CrossEntropy, CrossEntropyBackward, NllLoss, NllLossBackward
from .nodes import LogSoftmax, LogSoftmaxBackward, Softmax, SoftmaxBackward
from .tensor import Function, Tensor, _check_roots, as_tensor, tensor

__all__ = [
    "Tensor",
    "tensor",
    "as_tensor",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "grad",
    "registry",
    # the graph and the ops (API.md section 4)
    "Node",
    "Function",
    "LogSoftmax",
    "Softmax",
    "NllLoss",
    "CrossEntropy",
    # PyTorch-style names of the same classes (``y.grad_fn.name()``)
    "LogSoftmaxBackward",
    "SoftmaxBackward",
    "NllLossBackward",
    "CrossEntropyBackward",
]


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``).

    Unlike :meth:`Tensor.backward`, nothing is accumulated into any ``.grad``.

    Args:
      outputs: Tensor(s) to differentiate.
      inputs: Tensor(s) that require grad (leaves or not).
      grad_outputs: per output, a Tensor/array of its shape, or ``None`` for
        a one-element output (taken as 1).
      retain_graph: keep saved arrays (default: ``create_graph``).
      create_graph: record the backward (for higher derivatives).
      allow_unused: return ``None`` for an input the outputs do not depend on
        instead of raising ``RuntimeError``.

    Returns:
      A tuple with one gradient Tensor (input's shape and dtype) per input.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for i, t in enumerate(ins):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"grad: inputs[{i}] is not a Tensor that requires grad")
    if grad_outputs is None or isinstance(grad_outputs, Tensor) or not isinstance(
        grad_outputs, (list, tuple)
    ):
        n = len(outs) if grad_outputs is None else 1
        grad_outputs = [grad_outputs] * n
    roots, grads = _check_roots(outs, list(grad_outputs), "grad")
    retain = create_graph if retain_graph is None else bool(retain_graph)
    result = run_backward(roots, grads, retain, bool(create_graph), inputs=ins)
    for i, g in enumerate(result):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"grad: inputs[{i}] was not used to compute the outputs "
                "(pass allow_unused=True to get None for it)"
            )
        if g is not None and not create_graph:
            result[i] = g.detach()
    return tuple(result)
