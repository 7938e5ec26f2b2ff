"""PyTorch-style functions over the ``torch.ops.logsoftmax`` operators.

Drop-in replacements for ``torch.log_softmax``, ``torch.softmax``,
``torch.logsumexp``, ``torch.nn.functional.cross_entropy`` and
``torch.nn.functional.nll_loss``: the same argument names, positions,
defaults and dtypes; results and gradients are torch tensors.

``cross_entropy`` is PyTorch's own composition with the library's
log-softmax in it: ``log_softmax`` over the class dim (our kernel), then
``nll_loss`` (PyTorch's gather) and, for ``label_smoothing`` and
probability targets, PyTorch's formulas written with torch ops
(``aten/src/ATen/native/LossNLL.cpp``), so every option combination gives
PyTorch's value and gradient up to the log-softmax's own rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as tf

from .. import dtypes
from . import _ops

__all__ = ["log_softmax", "softmax", "logsumexp", "cross_entropy", "nll_loss"]


def _float_input(fn: str, input: torch.Tensor, dtype) -> torch.Tensor:
    """PyTorch's ``dtype=`` (cast the input first), then the library's dtype
    policy: bool/integer inputs are promoted to float32; complex and other
    dtypes raise ``TypeError`` naming the dtype."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(
            f"{fn}: input must be a torch.Tensor, got {type(input).__name__}"
        )
    if dtype is not None:
        input = input.to(dtype)
    if input.dtype in _ops.FLOAT_DTYPES:
        return input
    if not input.is_floating_point() and not input.is_complex():
        return input.to(torch.float32)
    raise TypeError(
        f"{fn}: input has dtype {input.dtype}, expected a real floating dtype "
        "(float32, bfloat16, float16, float64) or an integer/bool dtype "
        "(promoted to float32)"
    )


def log_softmax(input: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    r"""Logarithm of softmax along ``dim``, on the library's fused kernels.

    .. math:: y_i = (x_i - m) - \log \sum_j e^{x_j - m}, \qquad m = \max_j x_j

    Args:
      input: a CPU or CUDA tensor of any shape and strides; float32,
        bfloat16, float16 or float64 (integer/bool are promoted to float32).
      dim: int in ``[-input.dim(), input.dim())`` (0 or -1 for a 0-d tensor).
      dtype: as in PyTorch, the input is cast to ``dtype`` first.

    Returns:
      A new tensor of ``input``'s shape, dtype (or ``dtype``) and device,
      laid out like ``input`` when that is dense. Differentiable to any
      order; ``torch.compile`` captures it as ``torch.ops.logsoftmax.log_softmax``.

    Raises:
      IndexError: ``dim`` out of range. TypeError: non-integer ``dim``,
      complex input. NotImplementedError: a device other than CPU and CUDA.

    Notes:
      API.md section 1's accuracy: correctly rounded within a few eps of the
      float64 result, so values may differ from ``torch.log_softmax`` by
      PyTorch's own error. Rows with a NaN or ``+inf`` are NaN; ``-inf``
      elements of a finite row give ``-inf``.

    >>> import torch, logsoftmax.torch as lt
    >>> lt.log_softmax(torch.zeros(2), dim=0)
    tensor([-0.6931, -0.6931])
    """
    return _ops.log_softmax(_float_input("log_softmax", input, dtype), dim)


def softmax(input: torch.Tensor, dim: int = -1, dtype=None) -> torch.Tensor:
    r"""Softmax along ``dim``: :math:`y_i = e^{x_i - m} / \sum_j e^{x_j - m}`.

    Same arguments, results and errors as :func:`log_softmax`.

    >>> import torch, logsoftmax.torch as lt
    >>> lt.softmax(torch.zeros(2), dim=0)
    tensor([0.5000, 0.5000])
    """
    return _ops.softmax(_float_input("softmax", input, dtype), dim)


def logsumexp(input: torch.Tensor, dim, keepdim: bool = False) -> torch.Tensor:
    r""":math:`m + \log \sum_j e^{x_j - m}` over ``dim`` (an int or a
    sequence of ints; an empty sequence reduces every dim).

    Returns a new tensor of ``input``'s dtype (integer/bool input: float32)
    with the reduced dims removed, or kept as length 1 with ``keepdim``.
    All ``-inf`` gives ``-inf``, any ``+inf`` gives ``+inf``, any NaN NaN.

    >>> import torch, logsoftmax.torch as lt
    >>> lt.logsumexp(torch.zeros(2), 0)
    tensor(0.6931)
    """
    dims = [dim] if not isinstance(dim, (list, tuple)) else list(dim)
    return _ops.logsumexp(_float_input("logsumexp", input, None), dims, bool(keepdim))


# --------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------
def _reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's legacy ``size_average``/``reduce`` arguments, if given."""
    if size_average is not None or reduce is not None:
        return torch.nn._reduction.legacy_get_string(size_average, reduce)
    return reduction


def nll_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> torch.Tensor:
    r"""Negative log-likelihood of class-index targets given log-probabilities:
    PyTorch's own ``nll_loss`` (a gather and a weighted reduction: no
    log-softmax in it, so nothing of the library's to add).

    .. math:: \ell_n = -w_{t_n} \, \mathrm{input}_{n, t_n}, \qquad
              \text{mean} = \sum_n \ell_n / \sum_{n: t_n \ne \text{ignore}} w_{t_n}

    Same signature, results and errors as ``torch.nn.functional.nll_loss``.
    """
    return tf.nll_loss(
        input, target, weight, ignore_index=ignore_index,
        reduction=_reduction(size_average, reduce, reduction),
    )


def cross_entropy(
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    r"""Cross entropy between logits and targets, PyTorch's formulas over the
    library's log-softmax.

    ``input`` is ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``: the class dim is
    1 (0 for 1-D input). ``target`` is either class indices (an integer
    tensor of the input's shape without the class dim) or class
    probabilities (a floating tensor of the input's shape). With
    :math:`\ell = \mathrm{log\_softmax}(x)`, :math:`\epsilon` the
    ``label_smoothing`` and :math:`C` the number of classes:

    - indices: :math:`(1 - \epsilon)\,\mathrm{nll}(\ell, t) + \frac{\epsilon}{C}
      \sum_c -w_c \ell_c`, rows whose target is ``ignore_index`` contributing
      0 and ``"mean"`` dividing by the summed weight of the other rows;
    - probabilities: :math:`-\sum_c w_c\, \ell_c\, ((1 - \epsilon)\, p_c +
      \epsilon / C)`, ``"mean"`` dividing by the number of rows.

    Args: as ``torch.nn.functional.cross_entropy`` (the legacy
    ``size_average``/``reduce`` included).

    Returns:
      The loss: a scalar for ``"mean"``/``"sum"``, the target's shape (without
      the class dim) for ``"none"``; the input's dtype. ``"mean"`` over zero
      rows (or zero total weight) is NaN, as in PyTorch.

    Raises:
      RuntimeError: ``label_smoothing`` outside [0, 1]; ``ignore_index`` with
      probability targets; anything ``nll_loss`` rejects (a target out of
      range...). ValueError: an unknown ``reduction``.

    >>> import torch, logsoftmax.torch as lt
    >>> lt.cross_entropy(torch.zeros(1, 4), torch.tensor([2]))
    tensor(1.3863)
    """
    reduction = _reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(
            f"cross_entropy: reduction={reduction!r} is not a valid value; "
            "expected 'none', 'mean' or 'sum'"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(
            f"cross_entropy: label_smoothing={label_smoothing!r} is out of range; "
            "expected a number in [0, 1]"
        )
    class_dim = 0 if input.dim() == 1 else 1
    logp = log_softmax(input, class_dim)
    if input.shape == target.shape:
        return _probability_targets(
            logp, target, weight, class_dim, ignore_index, reduction, label_smoothing
        )
    nll = tf.nll_loss(logp, target, weight, ignore_index=ignore_index,
                      reduction=reduction)
    if label_smoothing == 0.0:
        return nll
    smooth = _smoothing_term(logp, target, weight, class_dim, ignore_index, reduction)
    n_classes = logp.shape[class_dim]
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def _class_weight(weight: torch.Tensor, ndim: int, class_dim: int) -> torch.Tensor:
    """``weight`` (C,) viewed to broadcast along the class dim."""
    shape = [1] * ndim
    shape[class_dim] = weight.shape[0]
    return weight.view(shape)


def _smoothing_term(logp, target, weight, class_dim, ignore_index, reduction):
    """The label-smoothing part for class-index targets (PyTorch's
    ``cross_entropy_loss_label_smoothing``): ``-sum_c w_c logp_c`` per row,
    0 on ignored rows, reduced like the NLL part."""
    if weight is not None:
        logp = logp * _class_weight(weight, logp.dim(), class_dim)
    ignored = target == ignore_index
    loss = (-logp.sum(class_dim)).masked_fill(ignored, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if weight is None:
        return loss.sum() / (~ignored).sum()
    return loss.sum() / weight.gather(0, target.masked_select(~ignored).flatten()).sum()


def _probability_targets(logp, target, weight, class_dim, ignore_index, reduction,
                         label_smoothing):
    """PyTorch's ``cross_entropy_loss_prob_target``."""
    if not target.is_floating_point():
        raise RuntimeError(
            f"cross_entropy: target has the input's shape, so it holds class "
            f"probabilities, but its dtype is {target.dtype}; expected a floating dtype"
        )
    if ignore_index >= 0:
        raise RuntimeError(
            f"cross_entropy: ignore_index={ignore_index} is not supported for "
            "probability (floating point) targets"
        )
    n_classes = logp.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    terms = logp * target
    if weight is not None:
        terms = terms * _class_weight(weight, logp.dim(), class_dim)
    if reduction == "none":
        return -terms.sum(class_dim)
    if reduction == "sum":
        return -terms.sum()
    if logp.numel() == 0:
        return -terms.sum() * float("nan")
    return -terms.sum() / (logp.numel() / n_classes)
