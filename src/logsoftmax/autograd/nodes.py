"""The ops: one :class:`Node` subclass each, schema + forward + backward.

Every op is registered with :func:`logsoftmax.schema.register` and run by
:func:`~.dispatch.dispatch` (which applies the AMP policy). A class holds:

- ``prepare(*inputs, **attrs)``: validation and the op's attributes;
- ``compute(*arrays)``: the forward on backend arrays, through the front door
  (:mod:`logsoftmax._api`) or :mod:`._array`; it saves what the gradient
  needs in the fields named by ``saved_fields`` (freed after backward);
- ``backward(grad)``: the gradient rule, written with Tensor ops, so the same
  code runs eagerly (under ``no_grad``: plain kernel calls) and recorded
  (``create_graph=True``: differentiable again, to any order).

The fused backward kernels are ops of their own (``log_softmax_backward``,
``softmax_backward``, ``nll_loss_backward``, ``cross_entropy_backward``), so a
first-order gradient is one fused kernel call whether or not the backward is
recorded, and each of them has its own (composite) gradient rule for double
backward. Nodes are named after PyTorch's (``LogSoftmaxBackward``...).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from .. import _api, dtypes
from ..schema import AmpPolicy, OpSchema, register
from . import _array
from . import dispatch as _dispatch
from .engine import Node
from .grad_mode import is_grad_enabled
from .tensor import Tensor

KEEP, PROMOTE, FP32 = AmpPolicy.KEEP_INPUT, AmpPolicy.PROMOTE, AmpPolicy.FORCE_FP32

__all__ = [
    # the softmax family and losses
    "LogSoftmaxBackward",
    "SoftmaxBackward",
    "NllLossBackward",
    "CrossEntropyBackward",
    # their backward ops (recorded for double backward)
    "LogSoftmaxBackwardBackward",
    "SoftmaxBackwardBackward",
    "NllLossBackwardBackward",
    "CrossEntropyBackwardBackward",
    # linear algebra and elementwise
    "MatMulBackward",
    "LinearBackward",
    "AddBackward",
    "SubBackward",
    "MulBackward",
    "DivBackward",
    "NegBackward",
    "ExpBackward",
    "ReluBackward",
    # shapes, reductions and casts
    "SumBackward",
    "MeanBackward",
    "ReshapeBackward",
    "TransposeBackward",
    "SumToBackward",
    "BroadcastToBackward",
    "CastBackward",
]


def _schema(name, policy, arity=1, deterministic=True):
    return OpSchema(name, 1, policy, deterministic, arity, 1)


def _compute_dtype(dt: np.dtype) -> np.dtype:
    """Accumulation dtype: float64 for float64, float32 for everything else."""
    return dtypes.float64 if dt == dtypes.float64 else dtypes.float32


def _float_only(dts):
    """Promote integer/bool inputs to float32 (API.md section 1)."""
    return [
        None if dt is None or dt in dtypes.SUPPORTED else dtypes.result_dtype(dt)
        for dt in dts
    ]


def _common(dts):
    """Cast every present input to their common (promoted) dtype."""
    present = [dt for dt in dts if dt is not None]
    common = _array.result_dtype(*present)
    return [None if dt is None else common for dt in dts]


def _sum_to(g: Tensor, shape) -> Tensor:
    return g if g.shape == tuple(shape) else SumToBackward.forward(g, shape=shape)


def _broadcast(g: Tensor, shape) -> Tensor:
    return g if g.shape == tuple(shape) else BroadcastToBackward.forward(g, shape=shape)


def _const(a) -> Tensor:
    return Tensor._make(a)


class _SavesOutput(Node):
    """Ops whose gradient needs only their output ``y`` (never the input)."""

    saved_fields: ClassVar[tuple[str, ...]] = ("saved_output",)
    saved_output = None

    def output(self) -> Tensor:
        """``y`` as a Tensor; while recording, its grad_fn is this node, so a
        gradient rule that uses ``y`` is differentiated through it."""
        self._check_alive()
        if is_grad_enabled() and self.next_functions:
            return Tensor._make(self.saved_output, grad_fn=self)
        return Tensor._make(self.saved_output)

    def saved_arrays(self) -> list:
        """Every array this node holds for its backward."""
        return [] if self.saved_output is None else [self.saved_output]


def _needs(node: Node, i: int) -> bool:
    """Whether input ``i`` wants a gradient (``apply`` on a bare node: all)."""
    return not node.next_functions or node.next_functions[i] is not None


# ===========================================================================
# softmax and log_softmax
# ===========================================================================
class _SoftmaxFamily(_SavesOutput):
    fn: ClassVar[str]
    axis: int

    @classmethod
    def forward(cls, a, axis=-1) -> Tensor:  # type: ignore[override]
        """Validate ``axis`` (IndexError/TypeError), apply the AMP policy,
        dispatch to ``a``'s backend, save the output, and record the node."""
        return _dispatch.dispatch(cls, (a,), {"axis": axis})

    def prepare(self, a: Tensor, *, axis) -> None:
        self.axis = _api.canonical_axis(axis, a.ndim, self.fn)

    def promote(self, dts):
        return _float_only(dts)


@register(_schema("log_softmax", FP32))
class LogSoftmaxBackward(_SoftmaxFamily):
    r"""``y = log_softmax(a, axis)``; saves only ``y``.

    Backward (fused, :func:`logsoftmax.log_softmax_backward`):
    :math:`\partial a = g - e^{y} \sum_{axis} g`.
    """

    fn = "log_softmax"

    def compute(self, a):
        self.saved_output = _api.log_softmax(a, self.axis)
        return self.saved_output

    def backward(self, grad):
        y = self.output()
        return (LogSoftmaxBackwardBackward.forward(grad, y, axis=self.axis),)


@register(_schema("softmax", FP32))
class SoftmaxBackward(_SoftmaxFamily):
    r"""``y = softmax(a, axis)``; saves only ``y``.

    Backward (fused, :func:`logsoftmax.softmax_backward`):
    :math:`\partial a = y (g - \sum_{axis} g y)`.
    """

    fn = "softmax"

    def compute(self, a):
        self.saved_output = _api.softmax(a, self.axis)
        return self.saved_output

    def backward(self, grad):
        return (SoftmaxBackwardBackward.forward(grad, self.output(), axis=self.axis),)


class _FusedBackward(Node):
    """A fused backward kernel as an op of its own: inputs ``(g, y)``."""

    keep_inputs = True
    saved_fields = ("inputs",)
    axis: int

    def prepare(self, g: Tensor, y: Tensor, *, axis: int) -> None:
        self.axis = axis

    def promote(self, dts):
        return _common(dts)


@register(_schema("log_softmax_backward", KEEP, 2))
class LogSoftmaxBackwardBackward(_FusedBackward):
    r"""``dx = g - e^{y} \sum g`` (the fused kernel); its own gradient, for
    double backward: :math:`\partial g = u - \sum u e^y`,
    :math:`\partial y = -u e^y \sum g`."""

    def compute(self, g, y):
        return _api.log_softmax_backward(g, y, self.axis)

    def backward(self, u):
        g, y = self.inputs
        s = y.exp()
        gg = u - (u * s).sum(self.axis, keepdims=True) if _needs(self, 0) else None
        gy = -(u * s) * g.sum(self.axis, keepdims=True) if _needs(self, 1) else None
        return gg, gy


@register(_schema("softmax_backward", KEEP, 2))
class SoftmaxBackwardBackward(_FusedBackward):
    r"""``dx = y (g - \sum g y)`` (the fused kernel); its gradient:
    :math:`\partial g = y (u - \sum u y)` (the same kernel again),
    :math:`\partial y = u (g - \sum g y) - g \sum u y`."""

    def compute(self, g, y):
        return _api.softmax_backward(g, y, self.axis)

    def backward(self, u):
        g, y = self.inputs
        ax = self.axis
        gg = SoftmaxBackwardBackward.forward(u, y, axis=ax) if _needs(self, 0) else None
        gy = None
        if _needs(self, 1):
            gy = u * (g - (g * y).sum(ax, keepdims=True)) - g * (u * y).sum(
                ax, keepdims=True
            )
        return gg, gy


# ===========================================================================
# losses: nll_loss and the fused cross_entropy
# ===========================================================================
_REDUCTIONS = ("mean", "sum", "none")


class _Targets:
    """Validated class targets for a loss over an input of ``shape``.

    The class axis is 1 (``(N, C, d1, ...)`` input, ``(N, d1, ...)`` target)
    or 0 (``(C,)`` input, ``()`` target), as in PyTorch. ``w`` holds each
    target's weight (0 where ``target == ignore_index``) in the accumulation
    dtype; ``denom`` is ``sum(w)`` for ``reduction="mean"``.
    """

    def __init__(self, fn, shape, dtype, target, weight, ignore_index, reduction):
        if len(shape) == 0:
            raise ValueError(f"{fn}: input is 0-d; expected shape (C,) or (N, C, ...)")
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"{fn}: reduction={reduction!r}; expected 'mean', 'sum' or 'none'"
            )
        if isinstance(ignore_index, (bool, np.bool_)) or not isinstance(
            ignore_index, (int, np.integer)
        ):
            raise TypeError(f"{fn}: ignore_index must be an int, got {ignore_index!r}")
        t = target.data if isinstance(target, Tensor) else target
        t = t if _array.is_array(t) else np.asarray(t)
        tdt = _array.dtype_of(t)
        if tdt.kind not in "iu":
            raise TypeError(
                f"{fn}: target has dtype {tdt}, expected an integer dtype (class "
                "indices)"
            )
        self.axis = 1 if len(shape) > 1 else 0
        self.num_classes = shape[self.axis]
        want = (shape[0],) + tuple(shape[2:]) if len(shape) > 1 else ()
        if tuple(t.shape) != want:
            raise ValueError(
                f"{fn}: target has shape {tuple(t.shape)}, expected {want} for an "
                f"input of shape {tuple(shape)}"
            )
        self.cd = _compute_dtype(np.dtype(dtype))
        ignored = t == ignore_index
        _array.check_targets(t, ignored, self.num_classes, fn)
        self.target, self.safe = t, _array.where(ignored, 0, t)
        if weight is None:
            w = _array.where(ignored, 0.0, 1.0)
        else:
            wt = weight.data if isinstance(weight, Tensor) else weight
            wt = wt if _array.is_array(wt) else np.asarray(wt)
            if tuple(wt.shape) != (self.num_classes,):
                raise ValueError(
                    f"{fn}: weight has shape {tuple(wt.shape)}, expected "
                    f"({self.num_classes},) (one weight per class)"
                )
            if _array.dtype_of(wt).kind != "f" and _array.dtype_of(wt) not in (
                dtypes.SUPPORTED
            ):
                raise TypeError(
                    f"{fn}: weight has dtype {_array.dtype_of(wt)}, expected a "
                    "floating dtype"
                )
            per_target = _array.take(_array.astype(wt, self.cd), self.safe)
            w = _array.where(ignored, 0.0, per_target)
        self.weighted = weight is not None
        self.ignored, self.ignore_index = ignored, ignore_index
        self.w = _array.astype(w, self.cd)
        self.reduction = reduction
        self.denom = self.w.sum() if reduction == "mean" else None

    def unweighted_none(self) -> "_Targets":
        """The same targets with unit weights and no reduction."""
        other = object.__new__(_Targets)
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

    def loss(self, logp, out_dtype):
        """The reduced loss of log-probabilities ``logp`` (any float dtype)."""
        picked = _array.astype(_array.gather(logp, self.safe, self.axis), self.cd)
        terms = -(self.w * _array.where(self.ignored, 0.0, picked))
        if self.reduction == "sum":
            terms = terms.sum()
        elif self.reduction == "mean":
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = terms.sum() / self.denom
        return _array.astype(terms, out_dtype)

    def per_row(self, g):
        """``coef * g`` per target, in the accumulation dtype (g: scalar or
        target-shaped upstream gradient)."""
        return self.coef() * _array.astype(g, self.cd)


class _Loss(Node):
    """Shared prepare for ``nll_loss`` / ``cross_entropy``: inputs (x, target)."""

    fn: ClassVar[str]
    plan: _Targets

    def prepare(self, x, target, *, weight=None, ignore_index=-100, reduction="mean",
                plan=None):
        self.in_shape = x.shape
        self.plan = plan or _Targets(
            self.fn, x.shape, x.dtype, target, weight, ignore_index, reduction
        )

    def promote(self, dts):
        return [_float_only(dts[:1])[0], None]


@register(_schema("nll_loss", FP32, 2))
class NllLossBackward(_Loss):
    r"""``loss = reduce(-w[t] * logp[t])``; mean divides by ``sum(w[t])`` over
    non-ignored targets (PyTorch). Saves only the targets' indices and weights.
    """

    fn = "nll_loss"
    saved_fields = ("plan",)

    def compute(self, logp, target):
        self.dtype = _array.dtype_of(logp)
        return self.plan.loss(logp, self.dtype)

    def backward(self, grad):
        gx = NllLossBackwardBackward.forward(
            grad, plan=self.plan, shape=self.in_shape, dtype=self.dtype
        )
        return gx, None


@register(_schema("nll_loss_backward", KEEP, 1))
class NllLossBackwardBackward(Node):
    r"""``dlogp = scatter(-coef * g)`` at the targets (zeros elsewhere). Linear
    in ``g``; its adjoint, hence its gradient, is ``nll_loss`` itself."""

    saved_fields = ("plan",)

    def prepare(self, g, *, plan, shape, dtype):
        self.plan, self.shape, self.dtype = plan, tuple(shape), dtype

    def compute(self, g):
        vals = _array.astype(-self.plan.per_row(g), self.dtype)
        return _array.scatter(vals, self.plan.safe, self.plan.axis, self.shape, g)

    def backward(self, u):
        return (NllLossBackward.forward(u, self.plan.target, plan=self.plan),)


@register(_schema("cross_entropy", FP32, 2))
class CrossEntropyBackward(_Loss):
    r"""Fused ``nll_loss(log_softmax(x, class_axis), target)``; saves only
    ``y = log_softmax(x)`` (one array of x's size) and the targets.

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
            # reach x through a LogSoftmaxBackward that shares this node's edge.
            lsm = LogSoftmaxBackward()
            lsm.axis, lsm.saved_output = self.plan.axis, self.saved_output
            lsm.next_functions = self.next_functions[:1]
            lsm.input_meta = self.input_meta[:1]
            y = Tensor._make(self.saved_output, grad_fn=lsm)
        return CrossEntropyBackwardBackward.forward(grad, y, plan=self.plan), None

    def saved_arrays(self) -> list:
        return [] if self.saved_output is None else [self.saved_output]


@register(_schema("cross_entropy_backward", KEEP, 2))
class CrossEntropyBackwardBackward(Node):
    r"""``dx = a (softmax(y) - onehot(t))`` with ``a = coef * g`` per row;
    gradient: :math:`\partial g = \mathrm{coef} (\sum_c u\,p - u[t])`,
    :math:`\partial y = \mathrm{softmax\_backward}(u a, p)`."""

    keep_inputs = True
    saved_fields = ("inputs", "plan")

    def prepare(self, g, y, *, plan):
        self.plan = plan

    def compute(self, g, y):
        plan, dt = self.plan, _array.dtype_of(y)
        a = plan.per_row(g)
        p = _api.softmax(y, plan.axis, dtype=plan.cd)  # fused, accumulation dtype
        p *= _array.expand_at(a, plan.axis)
        p = _array.scatter_sub_(p, a, plan.safe, plan.axis)
        return _array.astype(p, dt)

    def backward(self, u):
        g, y = self.inputs
        plan, ax = self.plan, self.plan.axis
        coef = _const(_array.astype(plan.coef(), y.dtype))
        p = SoftmaxBackward.forward(y, axis=ax)
        gg = gy = None
        if _needs(self, 0):
            # d/da per row: sum_c u p - u[t]; nll_loss(u, reduction=none) is -u[t].
            da = (u * p).sum(ax) + NllLossBackward.forward(
                u, plan.target, plan=plan.unweighted_none()
            )
            gg = _sum_to(da * coef, g.shape)
        if _needs(self, 1):
            a = (g * coef).reshape(_array.expand_at(plan.w, ax).shape)
            gy = SoftmaxBackwardBackward.forward(u * a, p, axis=ax)
        return gg, gy


# ===========================================================================
# linear algebra
# ===========================================================================
def _matmul_shapes(fn, a_shape, b_shape, a_name="a", b_name="b"):
    if not a_shape or not b_shape:
        raise ValueError(
            f"{fn}: {a_name if not a_shape else b_name} is 0-d; expected at least 1 "
            "dimension"
        )
    k_b = b_shape[-2] if len(b_shape) > 1 else b_shape[0]
    if a_shape[-1] != k_b:
        raise ValueError(
            f"{fn}: shapes {a_shape} and {b_shape} are not aligned: {a_name}'s last "
            f"dimension {a_shape[-1]} != {b_name}'s "
            f"{'second-to-last' if len(b_shape) > 1 else 'only'} dimension {k_b}"
        )
    try:
        np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ValueError(
            f"{fn}: batch dimensions of {a_name} {a_shape} and {b_name} {b_shape} "
            "do not broadcast"
        ) from None


@register(_schema("matmul", PROMOTE, 2))
class MatMulBackward(Node):
    r"""``a @ b`` (numpy semantics: 1-D operands, broadcast batch dims).

    Backward: :math:`\partial a = g b^T`, :math:`\partial b = a^T g`, summed
    over broadcast batch dimensions."""

    keep_inputs = True
    saved_fields = ("inputs",)

    def prepare(self, a, b):
        _matmul_shapes("matmul", a.shape, b.shape)

    def promote(self, dts):
        return _common(dts)

    def compute(self, a, b):
        return _array.matmul(a, b)

    def backward(self, g):
        a, b = self.inputs
        a2 = a if a.ndim > 1 else a.reshape(1, a.shape[0])
        b2 = b if b.ndim > 1 else b.reshape(b.shape[0], 1)
        g2 = g
        if a.ndim == 1:
            g2 = g2.reshape(g.shape[:-1] + (1,) + g.shape[-1:]) if b.ndim > 1 else g2
        if b.ndim == 1:
            g2 = g2.reshape(g2.shape + (1,))
        if a.ndim == 1 and b.ndim == 1:
            g2 = g.reshape(1, 1)
        ga = _sum_to(g2 @ b2.T, a2.shape).reshape(a.shape) if _needs(self, 0) else None
        gb = _sum_to(a2.T @ g2, b2.shape).reshape(b.shape) if _needs(self, 1) else None
        return ga, gb


@register(_schema("linear", PROMOTE, 3))
class LinearBackward(Node):
    r"""``y = x @ weight.T + bias``; weight is ``(out, in)`` (PyTorch layout).

    Backward: :math:`\partial x = g W`, :math:`\partial W = g^T x` (over all
    leading dimensions), :math:`\partial b = \sum g`."""

    keep_inputs = True
    saved_fields = ("inputs",)

    def prepare(self, x, weight, bias=None):
        if weight.ndim != 2:
            raise ValueError(
                f"linear: weight has shape {weight.shape}, expected 2-D (out, in)"
            )
        if x.ndim == 0 or x.shape[-1] != weight.shape[1]:
            raise ValueError(
                f"linear: x has shape {x.shape} but weight has shape {weight.shape}; "
                f"expected x's last dimension to equal weight's in={weight.shape[1]}"
            )
        if bias is not None and bias.shape != (weight.shape[0],):
            raise ValueError(
                f"linear: bias has shape {bias.shape}, expected ({weight.shape[0]},)"
            )

    def promote(self, dts):
        return _common(dts)

    def compute(self, x, w, b):
        y = _array.matmul(x, _array.swap_last(w))
        if b is not None:
            y = y + b
        return y

    def backward(self, g):
        x, w, b = self.inputs
        out_f, in_f = w.shape
        # (N, in) inputs need no flattening; each skipped reshape is one op less
        g2 = g if g.ndim == 2 else g.reshape(-1, out_f)
        gx = (g @ w) if _needs(self, 0) else None
        if _needs(self, 1):
            gw = g2.T @ (x if x.ndim == 2 else x.reshape(-1, in_f))
        else:
            gw = None
        gb = g2.sum(0) if b is not None and _needs(self, 2) else None
        return gx, gw, gb


# ===========================================================================
# elementwise (numpy broadcasting; gradients summed back to input shapes)
# ===========================================================================
class _Binary(Node):
    def prepare(self, a, b):
        self.shapes = (a.shape, b.shape)
        if a.shape == b.shape or not a.shape or not b.shape:  # the common cases
            return
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValueError(
                f"{self.schema.name}: operands of shapes {a.shape} and {b.shape} "
                "do not broadcast together"
            ) from None

    def promote(self, dts):
        return _common(dts)


@register(_schema("add", KEEP, 2))
class AddBackward(_Binary):
    def compute(self, a, b):
        return a + b

    def backward(self, g):
        return _sum_to(g, self.shapes[0]), _sum_to(g, self.shapes[1])


@register(_schema("sub", KEEP, 2))
class SubBackward(_Binary):
    def compute(self, a, b):
        return a - b

    def backward(self, g):
        gb = _sum_to(-g, self.shapes[1]) if _needs(self, 1) else None
        return _sum_to(g, self.shapes[0]), gb


@register(_schema("mul", KEEP, 2))
class MulBackward(_Binary):
    keep_inputs = True
    saved_fields = ("inputs",)

    def compute(self, a, b):
        return a * b

    def backward(self, g):
        a, b = self.inputs
        ga = _sum_to(g * b, self.shapes[0]) if _needs(self, 0) else None
        gb = _sum_to(g * a, self.shapes[1]) if _needs(self, 1) else None
        return ga, gb


@register(_schema("div", KEEP, 2))
class DivBackward(_Binary):
    keep_inputs = True
    saved_fields = ("inputs",)

    def promote(self, dts):
        return _float_only(_common(dts))

    def compute(self, a, b):
        return a / b

    def backward(self, g):
        a, b = self.inputs
        ga = _sum_to(g / b, self.shapes[0]) if _needs(self, 0) else None
        gb = _sum_to(-(g * a) / (b * b), self.shapes[1]) if _needs(self, 1) else None
        return ga, gb


@register(_schema("neg", KEEP))
class NegBackward(Node):
    def compute(self, a):
        return -a

    def backward(self, g):
        return (-g,)


@register(_schema("exp", KEEP))
class ExpBackward(_SavesOutput):
    def promote(self, dts):
        return _float_only(dts)

    def compute(self, a):
        self.saved_output = _array.exp(a)
        return self.saved_output

    def backward(self, g):
        return (g * self.output(),)


@register(_schema("relu", KEEP))
class ReluBackward(_SavesOutput):
    """``max(x, 0)``; backward ``g * (y > 0)`` (0 at 0, as PyTorch)."""

    def compute(self, a):
        self.saved_output = _array.relu(a)
        return self.saved_output

    def backward(self, g):
        self._check_alive()
        y = self.saved_output
        return (g * _const(_array.astype(y > 0, _array.dtype_of(y))),)


# ===========================================================================
# reductions, shapes, casts
# ===========================================================================
class _Reduce(Node):
    def prepare(self, a, *, axis=None, keepdims=False):
        self.axes = _api._canonical_axes(axis, a.ndim, self.schema.name)
        self.keepdims = bool(keepdims)
        self.in_shape = a.shape
        self.kept = tuple(1 if i in self.axes else n for i, n in enumerate(a.shape))
        self.count = math.prod(a.shape[i] for i in self.axes)

    def _spread(self, g: Tensor) -> Tensor:
        return _broadcast(g.reshape(self.kept), self.in_shape)


@register(_schema("sum", FP32))
class SumBackward(_Reduce):
    def compute(self, a):
        return _array.reduce_sum(a, self.axes, self.keepdims)

    def backward(self, g):
        return (self._spread(g),)


@register(_schema("mean", FP32))
class MeanBackward(_Reduce):
    def promote(self, dts):
        return _float_only(dts)

    def compute(self, a):
        dt = _array.dtype_of(a)
        s = _array.reduce_sum(_array.astype(a, _compute_dtype(dt)), self.axes,
                              self.keepdims)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _array.astype(s / _compute_dtype(dt).type(self.count), dt)

    def backward(self, g):
        return (self._spread(g) * (1.0 / self.count if self.count else math.nan),)


def _infer_shape(in_shape, shape) -> tuple[int, ...]:
    """``shape`` with its one ``-1`` resolved; ValueError if sizes disagree."""
    try:
        dims = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise TypeError(
            f"reshape: shape must be a tuple of ints, got {shape!r}"
        ) from None
    size, known = math.prod(in_shape), math.prod(n for n in dims if n != -1)
    free = [i for i, n in enumerate(dims) if n == -1]
    ok = len(free) <= 1 and all(n >= -1 for n in dims)
    if ok and free:
        ok = known != 0 and size % known == 0
        dims = dims[: free[0]] + (size // known if ok else -1,) + dims[free[0] + 1 :]
    if not ok or math.prod(dims) != size:
        raise ValueError(
            f"reshape: cannot reshape a Tensor of shape {tuple(in_shape)} "
            f"({size} elements) into shape {tuple(shape)}"
        )
    return dims


@register(_schema("reshape", KEEP))
class ReshapeBackward(Node):
    def prepare(self, a, *, shape):
        self.in_shape = a.shape
        self.shape = _infer_shape(a.shape, shape)

    def compute(self, a):
        return a.reshape(self.shape)

    def backward(self, g):
        return (g.reshape(self.in_shape),)


@register(_schema("transpose", KEEP))
class TransposeBackward(Node):
    def prepare(self, a):
        if a.ndim < 2:
            raise ValueError(
                f"transpose: Tensor has shape {a.shape}; expected at least 2 dims"
            )

    def compute(self, a):
        return _array.swap_last(a)

    def backward(self, g):
        return (g.T,)


@register(_schema("sum_to", KEEP))
class SumToBackward(Node):
    def prepare(self, a, *, shape):
        self.in_shape, self.shape = a.shape, tuple(shape)

    def compute(self, a):
        return _array.sum_to(a, self.shape)

    def backward(self, g):
        return (_broadcast(g, self.in_shape),)


@register(_schema("broadcast_to", KEEP))
class BroadcastToBackward(Node):
    def prepare(self, a, *, shape):
        self.in_shape, self.shape = a.shape, tuple(shape)

    def compute(self, a):
        return _array.broadcast_to(a, self.shape)

    def backward(self, g):
        return (_sum_to(g, self.in_shape),)


@register(_schema("cast", KEEP))
class CastBackward(Node):
    """``a.astype(dtype)``; the gradient is cast back to ``a``'s dtype. The
    dispatcher's AMP casts are these nodes."""

    def prepare(self, a, *, dtype):
        self.dtype, self.src = np.dtype(dtype), a.dtype

    def compute(self, a):
        return _array.astype(a, self.dtype)

    def backward(self, g):
        return (g.to(self.src),)
