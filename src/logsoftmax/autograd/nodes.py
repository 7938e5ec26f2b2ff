"""The ops: one :class:`~.tensor.Function` subclass each, schema + forward +
backward. The losses (``nll_loss``, ``cross_entropy``) are in :mod:`.losses`.

Every op is registered with :func:`logsoftmax.schema.register` and run by
:func:`~.tensor.dispatch` (which applies the AMP policy). A class holds:

- ``prepare(*inputs, **attrs)``: validation and the op's attributes;
- ``compute(*arrays)``: the forward on backend arrays, through the front door
  (:mod:`logsoftmax._api`) or :mod:`._array`; it saves what the gradient
  needs in the fields named by ``saved_fields`` (freed after backward);
- ``backward(grad)``: the gradient rule, written with Tensor ops, so the same
  code runs eagerly (under ``no_grad``: plain kernel calls) and recorded
  (``create_graph=True``: differentiable again, to any order).

Names: a class is named after its op (``LogSoftmax``, ``MatMul``); its
PyTorch-style display name (``name()``, ``y.grad_fn``) adds ``Backward``
(``LogSoftmaxBackward``), and that name is also kept as an alias of the class
(API.md section 4: ``from logsoftmax.autograd import LogSoftmaxBackward``).
The fused backward kernels are ops of their own, named ``<Op>Grad``
(``log_softmax_backward`` is :class:`LogSoftmaxGrad`, displayed as PyTorch
would, ``LogSoftmaxBackwardBackward``), so a first-order gradient is one fused
kernel call whether or not the backward is recorded, and each of them has its
own (composite) gradient rule for double backward.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from .. import _api, dtypes
from ..schema import AmpPolicy, OpSchema, register
from . import _array
from .grad_mode import is_grad_enabled
from .tensor import Function, Tensor

KEEP, PROMOTE, FP32 = AmpPolicy.KEEP_INPUT, AmpPolicy.PROMOTE, AmpPolicy.FORCE_FP32

__all__ = [
    # the softmax family and their fused backward ops
    "LogSoftmax",
    "Softmax",
    "LogSoftmaxGrad",
    "SoftmaxGrad",
    # linear algebra and elementwise
    "MatMul",
    "Linear",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Exp",
    "Relu",
    # shapes, reductions and casts
    "Sum",
    "Mean",
    "Reshape",
    "Transpose",
    "SumTo",
    "BroadcastTo",
    "Cast",
    # PyTorch-style display names, kept as aliases
    "LogSoftmaxBackward",
    "SoftmaxBackward",
    "LogSoftmaxBackwardBackward",
    "SoftmaxBackwardBackward",
    "MatMulBackward",
    "LinearBackward",
    "AddBackward",
    "SubBackward",
    "MulBackward",
    "DivBackward",
    "NegBackward",
    "ExpBackward",
    "ReluBackward",
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


def _float_only(dts):
    """Promote integer/bool inputs to float32 (API.md section 1); None when
    every input is floating already."""
    if all(dt is None or dt in dtypes.SUPPORTED for dt in dts):
        return None
    return [
        None if dt is None or dt in dtypes.SUPPORTED else dtypes.result_dtype(dt)
        for dt in dts
    ]


def _common(dts):
    """Cast every present input to their common (promoted) dtype; None when
    they share one already."""
    first = dts[0]
    if first is not None and all(dt is first or dt is None for dt in dts):
        return None  # the common case, without promotion rules
    present = [dt for dt in dts if dt is not None]
    common = _array.result_dtype(*present)
    if all(dt == common for dt in present):
        return None
    return [None if dt is None else common for dt in dts]


def _sum_to(g: Tensor, shape) -> Tensor:
    return g if g.shape == tuple(shape) else SumTo.forward(g, shape=shape)


def _broadcast(g: Tensor, shape) -> Tensor:
    return g if g.shape == tuple(shape) else BroadcastTo.forward(g, shape=shape)


def _const(a) -> Tensor:
    return Tensor._make(a)


class _SavesOutput(Function):
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


def _needs(node: Function, i: int) -> bool:
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
        return super().forward(a, axis=axis)

    def prepare(self, a: Tensor, *, axis) -> None:
        self.axis = _api.canonical_axis(axis, a.ndim, self.fn)

    def promote(self, dts):
        return _float_only(dts)


@register(_schema("log_softmax", FP32))
class LogSoftmax(_SoftmaxFamily):
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
        return (LogSoftmaxGrad.forward(grad, y, axis=self.axis),)


@register(_schema("softmax", FP32))
class Softmax(_SoftmaxFamily):
    r"""``y = softmax(a, axis)``; saves only ``y``.

    Backward (fused, :func:`logsoftmax.softmax_backward`):
    :math:`\partial a = y (g - \sum_{axis} g y)`.
    """

    fn = "softmax"

    def compute(self, a):
        self.saved_output = _api.softmax(a, self.axis)
        return self.saved_output

    def backward(self, grad):
        return (SoftmaxGrad.forward(grad, self.output(), axis=self.axis),)


class _FusedGrad(Function):
    """A fused backward kernel as an op of its own: inputs ``(g, y)``."""

    keep_inputs = True
    saved_fields = ("inputs",)
    axis: int

    def prepare(self, g: Tensor, y: Tensor, *, axis: int) -> None:
        self.axis = axis

    def promote(self, dts):
        return _common(dts)


@register(_schema("log_softmax_backward", KEEP, 2))
class LogSoftmaxGrad(_FusedGrad):
    r"""``dx = g - e^{y} \sum g`` (the fused kernel); its own gradient, for
    double backward: :math:`\partial g = u - \sum u e^y`,
    :math:`\partial y = -u e^y \sum g`."""

    display_name = "LogSoftmaxBackwardBackward"

    def compute(self, g, y):
        return _api.log_softmax_backward(g, y, self.axis)

    def backward(self, u):
        g, y = self.inputs
        s = y.exp()
        gg = u - (u * s).sum(self.axis, keepdims=True) if _needs(self, 0) else None
        gy = -(u * s) * g.sum(self.axis, keepdims=True) if _needs(self, 1) else None
        return gg, gy


@register(_schema("softmax_backward", KEEP, 2))
class SoftmaxGrad(_FusedGrad):
    r"""``dx = y (g - \sum g y)`` (the fused kernel); its gradient:
    :math:`\partial g = y (u - \sum u y)` (the same kernel again),
    :math:`\partial y = u (g - \sum g y) - g \sum u y`."""

    display_name = "SoftmaxBackwardBackward"

    def compute(self, g, y):
        return _api.softmax_backward(g, y, self.axis)

    def backward(self, u):
        g, y = self.inputs
        ax = self.axis
        gg = SoftmaxGrad.forward(u, y, axis=ax) if _needs(self, 0) else None
        gy = None
        if _needs(self, 1):
            gy = u * (g - (g * y).sum(ax, keepdims=True)) - g * (u * y).sum(
                ax, keepdims=True
            )
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
    if len(a_shape) <= 2 and len(b_shape) <= 2:
        return  # no batch dimensions to broadcast
    try:
        np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        raise ValueError(
            f"{fn}: batch dimensions of {a_name} {a_shape} and {b_name} {b_shape} "
            "do not broadcast"
        ) from None


@register(_schema("matmul", PROMOTE, 2))
class MatMul(Function):
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
class Linear(Function):
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
            y += b  # into the fresh product: one pass and no second (N, out) array
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
class _Binary(Function):
    def prepare(self, a, b):
        sa, sb = tuple(a.data.shape), tuple(b.data.shape)
        self.shapes = (sa, sb)
        if sa == sb or not sa or not sb:  # the common cases
            return
        try:
            np.broadcast_shapes(sa, sb)
        except ValueError:
            raise ValueError(
                f"{self.schema.name}: operands of shapes {sa} and {sb} "
                "do not broadcast together"
            ) from None

    def promote(self, dts):
        return _common(dts)


@register(_schema("add", KEEP, 2))
class Add(_Binary):
    def compute(self, a, b):
        return a + b

    def backward(self, g):
        return _sum_to(g, self.shapes[0]), _sum_to(g, self.shapes[1])


@register(_schema("sub", KEEP, 2))
class Sub(_Binary):
    def compute(self, a, b):
        return a - b

    def backward(self, g):
        gb = _sum_to(-g, self.shapes[1]) if _needs(self, 1) else None
        return _sum_to(g, self.shapes[0]), gb


@register(_schema("mul", KEEP, 2))
class Mul(_Binary):
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
class Div(_Binary):
    keep_inputs = True
    saved_fields = ("inputs",)

    def promote(self, dts):
        common = _common(dts)
        return _float_only(dts if common is None else common) or common

    def compute(self, a, b):
        return a / b

    def backward(self, g):
        a, b = self.inputs
        ga = _sum_to(g / b, self.shapes[0]) if _needs(self, 0) else None
        gb = _sum_to(-(g * a) / (b * b), self.shapes[1]) if _needs(self, 1) else None
        return ga, gb


@register(_schema("neg", KEEP))
class Neg(Function):
    def compute(self, a):
        return -a

    def backward(self, g):
        return (-g,)


@register(_schema("exp", KEEP))
class Exp(_SavesOutput):
    def promote(self, dts):
        return _float_only(dts)

    def compute(self, a):
        self.saved_output = _array.exp(a)
        return self.saved_output

    def backward(self, g):
        return (g * self.output(),)


@register(_schema("relu", KEEP))
class Relu(_SavesOutput):
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
class _Reduce(Function):
    def prepare(self, a, *, axis=None, keepdims=False):
        self.axes = _api._canonical_axes(axis, a.ndim, self.schema.name)
        self.keepdims = bool(keepdims)
        self.in_shape = a.shape
        self.kept = tuple(1 if i in self.axes else n for i, n in enumerate(a.shape))
        self.count = math.prod(a.shape[i] for i in self.axes)

    def _spread(self, g: Tensor) -> Tensor:
        return _broadcast(g.reshape(self.kept), self.in_shape)


@register(_schema("sum", FP32))
class Sum(_Reduce):
    def compute(self, a):
        return _array.reduce_sum(a, self.axes, self.keepdims)

    def backward(self, g):
        return (self._spread(g),)


@register(_schema("mean", FP32))
class Mean(_Reduce):
    def promote(self, dts):
        return _float_only(dts)

    def compute(self, a):
        dt = _array.dtype_of(a)
        acc = dtypes.accumulation_dtype(dt)
        s = _array.reduce_sum(_array.astype(a, acc), self.axes, self.keepdims)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _array.astype(s / acc.type(self.count), dt)

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
class Reshape(Function):
    fresh = False  # a view

    def prepare(self, a, *, shape):
        self.in_shape = a.shape
        self.shape = _infer_shape(a.shape, shape)

    def compute(self, a):
        return a.reshape(self.shape)

    def backward(self, g):
        return (g.reshape(self.in_shape),)


@register(_schema("transpose", KEEP))
class Transpose(Function):
    fresh = False  # a view

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
class SumTo(Function):
    fresh = False  # may return its input when nothing is summed

    def prepare(self, a, *, shape):
        self.in_shape, self.shape = a.shape, tuple(shape)

    def compute(self, a):
        return _array.sum_to(a, self.shape)

    def backward(self, g):
        return (_broadcast(g, self.in_shape),)


@register(_schema("broadcast_to", KEEP))
class BroadcastTo(Function):
    fresh = False  # a read-only view

    def prepare(self, a, *, shape):
        self.in_shape, self.shape = a.shape, tuple(shape)

    def compute(self, a):
        return _array.broadcast_to(a, self.shape)

    def backward(self, g):
        return (_sum_to(g, self.in_shape),)


@register(_schema("cast", KEEP))
class Cast(Function):
    """``a.astype(dtype)``; the gradient is cast back to ``a``'s dtype. The
    dispatcher's AMP casts are these nodes."""

    def prepare(self, a, *, dtype):
        self.dtype, self.src = np.dtype(dtype), a.dtype

    def compute(self, a):
        return _array.astype(a, self.dtype)

    def backward(self, g):
        return (g.to(self.src),)


# ===========================================================================
# PyTorch-style names (each op's display name), kept as aliases of the classes
# ===========================================================================
LogSoftmaxBackward = LogSoftmax
SoftmaxBackward = Softmax
LogSoftmaxBackwardBackward = LogSoftmaxGrad
SoftmaxBackwardBackward = SoftmaxGrad
MatMulBackward = MatMul
LinearBackward = Linear
AddBackward = Add
SubBackward = Sub
MulBackward = Mul
DivBackward = Div
NegBackward = Neg
ExpBackward = Exp
ReluBackward = Relu
SumBackward = Sum
MeanBackward = Mean
ReshapeBackward = Reshape
TransposeBackward = Transpose
SumToBackward = SumTo
BroadcastToBackward = BroadcastTo
CastBackward = Cast
