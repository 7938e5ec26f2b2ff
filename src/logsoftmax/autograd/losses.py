"""The losses: ``nll_loss`` and the fused ``cross_entropy``, with their fused
backward ops (API.md sections 4 and 7).

A loss is two things:

- a *target plan*, :class:`ClassTargets`: the targets, ``weight``,
  ``ignore_index`` and ``reduction`` validated once, plus the arrays the
  forward and every backward share: per-target weights ``w`` (0 where
  ignored, in the accumulation dtype), the reduction's denominator, and the
  targets with ignored entries replaced by a safe index. Its methods are the
  loss math on arrays: :meth:`~ClassTargets.loss` (the reduced loss of
  log-probabilities) and :meth:`~ClassTargets.coef` (d loss / d picked
  log-probability, per target);
- ops (:class:`~.tensor.Function` subclasses) that run a plan:
  :class:`NllLoss` and :class:`CrossEntropy`, and their fused backward ops
  :class:`NllLossGrad` and :class:`CrossEntropyGrad` (recorded for double
  backward, like the softmax family's in :mod:`.nodes`).

The plan is built once in the forward's ``prepare`` and handed to every
backward op (``plan=``), so no backward re-validates or recomputes weights.
Another kind of target (class probabilities, label smoothing) is another plan
with the same attributes and methods, and its own backward op where the
gradient's formula differs.

Semantics are PyTorch's: class axis 1 (``(N, C, d1, ...)`` input,
``(N, d1, ...)`` target) or 0 (``(C,)`` input, ``()`` target); ``weight`` is
a per-class constant of the input's dtype (``TypeError`` otherwise, as in
PyTorch; under autocast it is cast with the input, float64 excepted);
``ignore_index`` targets contribute nothing, also not to the mean's
denominator; every target ignored with ``"mean"`` gives NaN (0/0).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import _api, amp, dtypes
from ..schema import AmpPolicy, OpSchema, register
from . import _array
from .grad_mode import is_grad_enabled
from .nodes import LogSoftmax, Softmax, SoftmaxGrad, _float_only, _needs, _sum_to
from .tensor import Function, Tensor

__all__ = [
    "ClassTargets",
    "NllLoss",
    "CrossEntropy",
    "NllLossGrad",
    "CrossEntropyGrad",
    # PyTorch-style display names, kept as aliases
    "NllLossBackward",
    "CrossEntropyBackward",
    "NllLossBackwardBackward",
    "CrossEntropyBackwardBackward",
]

REDUCTIONS = ("mean", "sum", "none")


def _schema(name, policy, arity):
    return OpSchema(name, 1, policy, True, arity, 1)


def _array_of(x):
    """The backend array inside ``x`` (a Tensor, an array or an array-like)."""
    x = x.data if isinstance(x, Tensor) else x
    return x if _array.is_array(x) else np.asarray(x)


# ===========================================================================
# the target plan
# ===========================================================================
def _check_options(fn: str, shape, ignore_index, reduction) -> None:
    if len(shape) == 0:
        raise ValueError(f"{fn}: input is 0-d; expected shape (C,) or (N, C, ...)")
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"{fn}: reduction={reduction!r}; expected 'mean', 'sum' or 'none'"
        )
    if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(
        ignore_index, (int, np.integer)
    ):
        raise TypeError(f"{fn}: ignore_index must be an int, got {ignore_index!r}")


def _class_indices(fn: str, target, shape):
    """``target`` as an integer array of the shape a class-index target of an
    input of ``shape`` has (TypeError/ValueError otherwise)."""
    t = _array_of(target)
    tdt = _array.dtype_of(t)
    if tdt.kind not in "iu":
        raise TypeError(
            f"{fn}: target has dtype {tdt}, expected an integer dtype (class indices)"
        )
    want = (shape[0],) + tuple(shape[2:]) if len(shape) > 1 else ()
    if tuple(t.shape) != want:
        raise ValueError(
            f"{fn}: target has shape {tuple(t.shape)}, expected {want} for an "
            f"input of shape {tuple(shape)}"
        )
    return t


def _class_weights(fn: str, weight, num_classes: int, dtype: np.dtype):
    """``weight`` checked: shape ``(C,)``, the input's ``dtype`` (PyTorch
    raises rather than cast silently; under autocast a float32/bfloat16/
    float16 weight is cast like the input, as PyTorch's autocast does)."""
    w = _array_of(weight)
    if tuple(w.shape) != (num_classes,):
        raise ValueError(
            f"{fn}: weight has shape {tuple(w.shape)}, expected ({num_classes},) "
            "(one weight per class)"
        )
    wdt = _array.dtype_of(w)
    autocast_to = amp.cast_dtypes(AmpPolicy.FORCE_FP32, [wdt])[0]
    if (autocast_to or wdt) != dtype:
        raise TypeError(
            f"{fn}: weight has dtype {wdt}, expected {dtype}, the dtype of the "
            "input; cast the weight (the loss never casts it silently)"
        )
    return w


class ClassTargets:
    """Validated class-index targets for a loss over an input of ``shape``.

    Args:
      fn: the loss's name, for error messages.
      shape, dtype: the input's shape, and the dtype the loss computes in
        (after promotion and autocast).
      target, weight, ignore_index, reduction: as ``nll_loss``.

    Attributes:
      axis: the class axis (1, or 0 for a ``(C,)`` input).
      num_classes: ``shape[axis]``.
      cd: the accumulation dtype (float32, float64 for float64 input).
      target: the class indices; ``safe``: the same with ignored entries 0.
      ignored: boolean mask of ``target == ignore_index``.
      w: per-target weight in ``cd`` (0 where ignored).
      weighted: whether a ``weight`` was given.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``; ``denom``: ``sum(w)``
        for ``"mean"``, else None.

    Raises:
      TypeError: non-integer ``target``; ``ignore_index`` not an int;
        ``weight`` of another dtype than the input.
      ValueError: 0-d input; ``target``/``weight`` shape; unknown ``reduction``.
      IndexError: a target outside ``[0, C)`` that is not ``ignore_index``.
    """

    def __init__(self, fn, shape, dtype, target, weight, ignore_index, reduction):
        _check_options(fn, shape, ignore_index, reduction)
        t = _class_indices(fn, target, shape)
        self.axis = 1 if len(shape) > 1 else 0
        self.num_classes = shape[self.axis]
        self.cd = dtypes.accumulation_dtype(np.dtype(dtype))
        ignored = t == ignore_index
        _array.check_targets(t, ignored, self.num_classes, fn)
        self.target, self.safe = t, _array.where(ignored, 0, t)
        self.ignored, self.ignore_index = ignored, ignore_index
        if weight is None:
            w = _array.where(ignored, 0.0, 1.0)
        else:
            table = _class_weights(fn, weight, self.num_classes, np.dtype(dtype))
            per_target = _array.take(_array.astype(table, self.cd), self.safe)
            w = _array.where(ignored, 0.0, per_target)
        self.weighted = weight is not None
        self.w = _array.astype(w, self.cd)
        self.reduction = reduction
        self.denom = self.w.sum() if reduction == "mean" else None

    def unweighted_none(self) -> "ClassTargets":
        """The same targets with unit weights and no reduction."""
        other = object.__new__(ClassTargets)
        other.__dict__.update(self.__dict__)
        other.w = _array.astype(_array.where(self.ignored, 0.0, 1.0), self.cd)
        other.reduction, other.denom, other.weighted = "none", None, False
        return other

    def coef(self):
        """d(loss)/d(g * logp[target]) per target: ``w`` or ``w / denom``."""
        if self.reduction != "mean":
            return self.w
        with np.errstate(divide="ignore", invalid="ignore"):
            return _array.where(self.w == 0, 0.0, self.w / self.denom).astype(self.cd)

    def per_row(self, g):
        """``coef * g`` per target, in the accumulation dtype (g: scalar or
        target-shaped upstream gradient)."""
        return self.coef() * _array.astype(g, self.cd)

    def loss(self, logp, out_dtype):
        """The reduced loss of log-probabilities ``logp`` (any float dtype)."""
        picked = _array.astype(_array.gather(logp, self.safe, self.axis), self.cd)
        terms = -(self.w * _array.where(self.ignored, 0.0, picked))
        return reduce_terms(terms, self.reduction, self.denom, out_dtype)


def reduce_terms(terms, reduction: str, denom, out_dtype):
    """Per-target loss ``terms`` reduced as PyTorch: as is, summed, or summed
    over ``denom`` (0/0 is NaN); cast to ``out_dtype``."""
    if reduction == "sum":
        terms = terms.sum()
    elif reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = terms.sum() / denom
    return _array.astype(terms, out_dtype)


# ===========================================================================
# the ops
# ===========================================================================
class _ClassLoss(Function):
    """Shared by ``nll_loss`` / ``cross_entropy``: inputs ``(x, target)``;
    ``plan=`` reuses a plan (the backward ops pass theirs)."""

    fn: ClassVar[str]
    plan: ClassTargets

    def prepare(self, x, target, *, weight=None, ignore_index=-100, reduction="mean",
                plan=None):
        self.in_shape = x.shape
        self.plan = plan or ClassTargets(
            self.fn, x.shape, x.dtype, target, weight, ignore_index, reduction
        )

    def promote(self, dts):
        first = _float_only(dts[:1])
        return None if first is None else [first[0], None]


@register(_schema("nll_loss", AmpPolicy.FORCE_FP32, 2))
class NllLoss(_ClassLoss):
    r"""``loss = reduce(-w[t] * logp[t])``; mean divides by ``sum(w[t])`` over
    non-ignored targets (PyTorch). Saves only the plan (targets and weights).
    """

    fn = "nll_loss"
    saved_fields = ("plan",)

    def compute(self, logp, target):
        self.dtype = _array.dtype_of(logp)
        return self.plan.loss(logp, self.dtype)

    def backward(self, grad):
        gx = NllLossGrad.forward(
            grad, plan=self.plan, shape=self.in_shape, dtype=self.dtype
        )
        return gx, None


@register(_schema("nll_loss_backward", AmpPolicy.KEEP_INPUT, 1))
class NllLossGrad(Function):
    r"""``dlogp = scatter(-coef * g)`` at the targets (zeros elsewhere). Linear
    in ``g``; its adjoint, hence its gradient, is ``nll_loss`` itself."""

    display_name = "NllLossBackwardBackward"
    saved_fields = ("plan",)

    def prepare(self, g, *, plan, shape, dtype):
        self.plan, self.shape, self.dtype = plan, tuple(shape), dtype

    def compute(self, g):
        vals = _array.astype(-self.plan.per_row(g), self.dtype)
        return _array.scatter(vals, self.plan.safe, self.plan.axis, self.shape, g)

    def backward(self, u):
        return (NllLoss.forward(u, self.plan.target, plan=self.plan),)


@register(_schema("cross_entropy", AmpPolicy.FORCE_FP32, 2))
class CrossEntropy(_ClassLoss):
    r"""Fused ``nll_loss(log_softmax(x, class_axis), target)``; saves only
    ``y = log_softmax(x)`` (one array of x's size) and the plan.

    Backward: :math:`\partial x = c\,g\,(\mathrm{softmax}(x) - \mathrm{onehot}(t))`
    computed as the softmax kernel, a scale, and a scatter-subtract at the
    targets; no one-hot matrix is built.
    """

    fn = "cross_entropy"
    saved_fields = ("saved_output", "plan")
    saved_output = None

    def compute(self, x, target):
        self.dtype = _array.dtype_of(x)
        self.saved_output = _api.log_softmax(x, self.plan.axis)
        return self.plan.loss(self.saved_output, self.dtype)

    def backward(self, grad):
        self._check_alive()
        y = Tensor._make(self.saved_output)
        if is_grad_enabled() and self.next_functions:
            # Recording: y is log_softmax(x) in the graph, so second derivatives
            # reach x through a LogSoftmax node that shares this node's edge.
            lsm = LogSoftmax()
            lsm.axis, lsm.saved_output = self.plan.axis, self.saved_output
            lsm.next_functions = self.next_functions[:1]
            lsm.input_meta = self.input_meta[:1]
            y = Tensor._make(self.saved_output, grad_fn=lsm)
        return self.grad_op().forward(grad, y, plan=self.plan), None

    @staticmethod
    def grad_op() -> type[Function]:
        """The fused backward op (subclasses with other targets bring theirs)."""
        return CrossEntropyGrad

    def saved_arrays(self) -> list:
        return [] if self.saved_output is None else [self.saved_output]


@register(_schema("cross_entropy_backward", AmpPolicy.KEEP_INPUT, 2))
class CrossEntropyGrad(Function):
    r"""``dx = a (softmax(y) - onehot(t))`` with ``a = coef * g`` per row;
    gradient: :math:`\partial g = \mathrm{coef} (\sum_c u\,p - u[t])`,
    :math:`\partial y = \mathrm{softmax\_backward}(u a, p)`."""

    display_name = "CrossEntropyBackwardBackward"
    keep_inputs = True
    saved_fields = ("inputs", "plan")

    def prepare(self, g, y, *, plan):
        self.plan = plan

    def compute(self, g, y):
        plan, dt = self.plan, _array.dtype_of(y)
        a = plan.per_row(g)
        # fused, in the accumulation dtype (``dtype=`` only where it differs:
        # the front door's fast path takes the plain call)
        p = _api.softmax(y, plan.axis, dtype=None if plan.cd == dt else plan.cd)
        p *= _array.expand_at(a, plan.axis)
        p = _array.scatter_sub_(p, a, plan.safe, plan.axis)
        return _array.astype(p, dt)

    def backward(self, u):
        g, y = self.inputs
        plan, ax = self.plan, self.plan.axis
        coef = Tensor._make(_array.astype(plan.coef(), y.dtype))
        p = Softmax.forward(y, axis=ax)
        gg = gy = None
        if _needs(self, 0):
            # d/da per row: sum_c u p - u[t]; nll_loss(u, reduction=none) is -u[t].
            da = (u * p).sum(ax) + NllLoss.forward(
                u, plan.target, plan=plan.unweighted_none()
            )
            gg = _sum_to(da * coef, g.shape)
        if _needs(self, 1):
            a = (g * coef).reshape(_array.expand_at(plan.w, ax).shape)
            gy = SoftmaxGrad.forward(u * a, p, axis=ax)
        return gg, gy


# ===========================================================================
# PyTorch-style names (each op's display name), kept as aliases of the classes
# ===========================================================================
NllLossBackward = NllLoss
CrossEntropyBackward = CrossEntropy
NllLossBackwardBackward = NllLossGrad
CrossEntropyBackwardBackward = CrossEntropyGrad
