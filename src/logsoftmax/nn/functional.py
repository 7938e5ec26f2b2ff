"""Differentiable functions on :class:`~logsoftmax.Tensor` (arrays accepted).

Each function is one op of :mod:`logsoftmax.autograd.nodes` or
:mod:`~logsoftmax.autograd.losses`, run through the dispatcher (schema, AMP policy, recording). Arrays are wrapped as constant
Tensors; the result is always a Tensor.

=================  ============  ==============================================
function           AMP policy    gradient
=================  ============  ==============================================
``log_softmax``    FORCE_FP32    fused ``log_softmax_backward`` on the saved y
``softmax``        FORCE_FP32    fused ``softmax_backward`` on the saved y
``nll_loss``       FORCE_FP32    scatter of ``-w/denom`` at the targets
``cross_entropy``  FORCE_FP32    softmax kernel, scale, scatter-subtract
                                (+ rank-one update with label smoothing)
``linear_cross_   KEEP_INPUT    chunked: per-chunk GEMMs of the in-place
entropy``                       logit gradient (first order only)
``linear``         PROMOTE       ``g W``, ``g^T x``, ``sum g``
``relu``           KEEP_INPUT    ``g * (y > 0)``
=================  ============  ==============================================
"""

from __future__ import annotations

from ..autograd import losses as _losses
from ..autograd import nodes as _nodes
from ..autograd.tensor import Tensor

__all__ = ["log_softmax", "softmax", "nll_loss", "cross_entropy",
           "linear_cross_entropy", "linear", "relu"]


def log_softmax(x, axis: int = -1) -> Tensor:
    r"""Differentiable :func:`logsoftmax.log_softmax`:
    :math:`y = (x - m) - \log \sum e^{x - m}` along ``axis``.

    Args:
      x: Tensor or array (integer/bool promoted to float32).
      axis: int in ``[-x.ndim, x.ndim)``.

    Returns:
      A Tensor of ``x``'s shape and dtype (float32 under autocast unless
      ``x`` is float64); ``y.grad_fn`` is a ``LogSoftmaxBackward`` holding only
      ``y``.

    Raises:
      IndexError: ``axis`` out of range. TypeError: non-integer ``axis``.
    """
    return _nodes.LogSoftmax.forward(x, axis)


def softmax(x, axis: int = -1) -> Tensor:
    r"""Differentiable :func:`logsoftmax.softmax`:
    :math:`e^{x_i - m} / \sum e^{x_j - m}` along ``axis``.

    Same arguments, dtypes and errors as :func:`log_softmax`.
    """
    return _nodes.Softmax.forward(x, axis)


def nll_loss(log_probs, target, *, weight=None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    r"""Negative log-likelihood of class ``target`` under ``log_probs``.

    .. math:: \ell_n = -w_{t_n}\, \mathrm{log\_probs}_{n, t_n}, \qquad
              \mathrm{mean} = \sum_n \ell_n / \sum_n w_{t_n}

    with the sums over targets ``!= ignore_index`` (PyTorch semantics).

    Args:
      log_probs: ``(N, C)``, ``(N, C, d1, ...)`` or ``(C,)`` Tensor/array.
      target: integer array or Tensor of class indices, shape ``(N,)``,
        ``(N, d1, ...)`` or ``()``; values in ``[0, C)`` or ``ignore_index``.
      weight: optional per-class weights, shape ``(C,)``, of ``log_probs``'
        dtype (a constant: no gradient flows to it). Under autocast a
        float32/bfloat16/float16 weight is cast with the input, as in PyTorch.
      ignore_index: targets equal to it contribute nothing (nor to the mean's
        denominator).
      reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-target losses).

    Returns:
      A Tensor of ``log_probs``' dtype (float32 under autocast): 0-d, or of
      ``target``'s shape for ``reduction="none"``.

    Raises:
      TypeError: non-integer ``target``; ``ignore_index`` not an int;
        ``weight`` of another dtype than ``log_probs`` (named in the message).
      ValueError: ``target``/``weight`` shape mismatch; unknown ``reduction``.
      IndexError: a target outside ``[0, C)`` that is not ``ignore_index``.

    Notes:
      With ``reduction="mean"`` and every target ignored the loss is NaN
      (0/0), as in PyTorch.
    """
    return _losses.NllLoss.forward(
        log_probs, target, weight=weight, ignore_index=ignore_index,
        reduction=reduction,
    )


def cross_entropy(logits, target, *, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    r"""``nll_loss(log_softmax(logits, class_axis), target, ...)``, fused, with
    PyTorch's ``label_smoothing`` and class-probability targets.

    The class axis is 1 (0 for 1-D ``logits``). ``target``: class indices
    (integers, as :func:`nll_loss`) or class probabilities (floats of the
    logits' shape and dtype). With ``label_smoothing = eps`` the target is
    ``(1 - eps) onehot + eps / C`` (formulas: docs/losses.md). Only
    ``log_softmax(logits)`` is saved; the backward is
    :math:`G_n (Q_n\,\mathrm{softmax}(x)_n - q_n)`, computed by the softmax
    kernel, a per-row scale, a scatter-subtract at the targets and a rank-one
    update (no one-hot matrix); double backward is supported. Same result and
    errors as :func:`nll_loss`, plus ValueError for ``label_smoothing``
    outside ``[0, 1]``.
    """
    from .._loss_checks import check_fraction

    eps = check_fraction("cross_entropy", "label_smoothing", label_smoothing)
    t = target.data if isinstance(target, Tensor) else target
    kind = getattr(getattr(t, "dtype", None), "kind", "i")
    if eps == 0.0 and kind in "iub":
        return _losses.CrossEntropy.forward(
            logits, target, weight=weight, ignore_index=ignore_index,
            reduction=reduction,
        )
    from ..autograd.soft_losses import SoftCrossEntropy

    return SoftCrossEntropy.forward(
        logits, target, weight=weight, ignore_index=ignore_index,
        reduction=reduction, label_smoothing=eps,
    )


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None,
                         weight=None, reduction: str = "mean",
                         ignore_index: int = -100, label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap=None, chunk_size=None) -> Tensor:
    r"""Differentiable :func:`logsoftmax.linear_cross_entropy`:
    ``cross_entropy(softcap(input @ linear_weight.T + linear_bias), target)
    + z_loss * lse**2``, fused and chunked (the ``(N, V)`` logits never exist).

    Args: as :func:`logsoftmax.linear_cross_entropy`; ``input``,
      ``linear_weight``, ``linear_bias`` may be Tensors (gradients flow to
      all three), ``target`` and ``weight`` are constants.

    Returns:
      A Tensor in the input's dtype: 0-d, or ``(N,)`` for ``"none"``.

    Notes:
      First-order gradients only: ``backward(create_graph=True)`` through
      this op raises ``NotImplementedError``.
    """
    from ..autograd.linear_losses import LinearCrossEntropy

    options = dict(weight=weight, reduction=reduction, ignore_index=ignore_index,
                   label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                   chunk_size=chunk_size)
    return LinearCrossEntropy.forward(input, linear_weight, linear_bias,
                                      target=target, options=options)


def linear(x, weight, bias=None) -> Tensor:
    r""":math:`y = x W^T + b`, with ``weight`` of shape ``(out, in)`` (PyTorch).

    Args:
      x: ``(..., in)``. weight: ``(out, in)``. bias: ``(out,)`` or None.

    Returns:
      ``(..., out)`` in the common dtype (the autocast dtype under autocast,
      float64 operands excepted).

    Raises:
      ValueError: shapes that do not fit.
    """
    return _nodes.Linear.forward(x, weight, bias)


def relu(x) -> Tensor:
    """``max(x, 0)`` elementwise (NaN stays NaN; gradient 0 at 0)."""
    return _nodes.Relu.forward(x)
