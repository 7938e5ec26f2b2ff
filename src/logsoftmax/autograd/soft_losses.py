r"""Cross-entropy with soft targets: label smoothing and class probabilities
(API.md section 7), fused, with double backward.

Both kinds are one formula. Per row ``n`` the target is a distribution-like
vector ``q_n`` (class weights folded in) and

.. math:: \ell_n = \sum_c q_{n,c} (\mathrm{lse}_n - x_{n,c})
          = -\sum_c q_{n,c}\, \mathrm{logp}_{n,c}, \qquad
          \frac{\partial \ell_n}{\partial x_{n,j}} = Q_n p_{n,j} - q_{n,j},
          \quad Q_n = \sum_c q_{n,c}

- class indices with smoothing ``eps`` (``C`` classes, ``W = sum_c w_c``):
  ``q_{n,c} = B_n [c = t_n] + E_n w_c`` with ``B_n = (1 - eps) w_{t_n}``,
  ``E_n = eps / C`` (both 0 for an ignored row): sparse plus rank one, never
  built; ``"mean"`` divides by ``sum_n w_{t_n}`` (PyTorch);
- class probabilities ``y``: ``q = w ((1 - eps) y + eps / C)``, built a
  block of rows at a time; ``"mean"`` divides by the number of rows.

The op :class:`SoftCrossEntropy` saves ``logp = log_softmax(x)`` only; its
backward :class:`SoftCrossEntropyGrad` is ``G (Q p - q)`` with
``G = g / denom``: the softmax kernel, a per-row scale, a scatter at the
targets and a rank-one update (class indices) or a blockwise subtraction
(probabilities). ``dx`` is linear in ``g``, and in ``logp`` only through
``p``, so its gradient is ``dg = r (Q sum_j u_j p_j - sum_j u_j q_j)`` and
``dlogp = softmax_backward(u G Q, p)``.
"""

from __future__ import annotations

import numpy as np

from .. import _api, dtypes
from ..backends import is_dask_array
from ..schema import AmpPolicy, OpSchema, register
from . import _array
from .losses import (
    ClassTargets,
    CrossEntropy,
    CrossEntropyGrad,
    _array_of,
    _check_options,
    _class_weights,
    reduce_terms,
)
from .nodes import Softmax, SoftmaxGrad, _needs, _sum_to
from .tensor import Tensor

__all__ = ["SoftTargets", "SoftCrossEntropy", "SoftCrossEntropyGrad"]

#: rows per block when a (rows, C) temporary is unavoidable (probabilities)
_ROWS = 256


def _schema(name, policy, arity):
    return OpSchema(name, 1, policy, True, arity, 1)


def _row_dot(a, v, axis):
    """``sum_c a[..., c, ...] * v[c]`` along ``axis`` (a matrix-vector product
    for 2-D ``a``: no temporary of ``a``'s size)."""
    moved = a if axis == a.ndim - 1 else np.moveaxis(a, axis, -1)
    return moved @ v


class SoftTargets:
    """The soft-target plan: validated targets, options and the per-row
    pieces of ``q`` (module docstring).

    Attributes:
      axis, num_classes, cd: as :class:`~.losses.ClassTargets`.
      probs: True for probability targets (``y``), False for class indices.
      eps: label smoothing. reduction, denom: the reduction and ``"mean"``'s
        denominator (``sum w_t``, or the number of rows).
      cw: class weights in ``cd`` (None: ones); big_w: their sum.
      b, e: per-row ``B_n``, ``E_n`` (class indices).
    """

    def __init__(self, fn, shape, dtype, target, weight, ignore_index, reduction,
                 eps):
        _check_options(fn, shape, ignore_index, reduction)
        self.axis = 1 if len(shape) > 1 else 0
        self.num_classes = c = shape[self.axis]
        self.cd = dtypes.accumulation_dtype(np.dtype(dtype))
        self.eps, self.reduction = float(eps), reduction
        self.cw = None
        if weight is not None:
            self.cw = _array.astype(_class_weights(fn, weight, c, np.dtype(dtype)),
                                    self.cd)
        self.big_w = float(c) if self.cw is None else float(self.cw.sum())
        t = _array_of(target)
        self.probs = _array.dtype_of(t).kind == "f" or _array.dtype_of(t) == dtypes.bfloat16
        if self.probs:
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"{fn}: target has shape {tuple(t.shape)}, expected the "
                                 f"input's shape {tuple(shape)} (class probabilities)")
            if _array.dtype_of(t) != np.dtype(dtype):
                raise TypeError(f"{fn}: target has dtype {_array.dtype_of(t)} but input "
                                f"has dtype {np.dtype(dtype)}; class probabilities must "
                                "have the input's dtype")
            if ignore_index != -100:
                raise ValueError(f"{fn}: ignore_index={ignore_index} is not supported "
                                 "with class-probability targets")
            self.y = _array.astype(t, self.cd)
            rows = int(np.prod(t.shape)) // c if c else 0
            self.denom = float(rows) if reduction == "mean" else None
            return
        self.classes = ClassTargets(fn, shape, dtype, target, weight, ignore_index,
                                    "sum")
        ct = self.classes
        valid = _array.astype(_array.where(ct.ignored, 0.0, 1.0), self.cd)
        self.b = (1.0 - self.eps) * ct.w
        self.e = (self.eps / c) * valid
        self.denom = ct.w.sum() if reduction == "mean" else None
        self.safe, self.target = ct.safe, ct.target

    # -- pieces -------------------------------------------------------------
    def scale(self):
        """``r``: ``1 / denom`` for ``"mean"`` (0 when denom is 0 and the
        gradient has nothing to reach), else 1."""
        if self.reduction != "mean":
            return 1.0
        return 0.0 if float(self.denom) == 0.0 else 1.0 / float(self.denom)

    def q_total(self):
        """``Q_n = sum_c q_{n,c}`` per row (class indices: ``B + E W``)."""
        if self.probs:
            qy = _row_dot(self.y, self._wv(), self.axis)
            return (1.0 - self.eps) * qy + (self.eps / self.num_classes) * self.big_w
        return self.b + self.e * self.big_w

    def _wv(self):
        return np.ones(self.num_classes, self.cd) if self.cw is None else self.cw

    def row_shape(self):
        return tuple(self.b.shape) if not self.probs else tuple(
            n for i, n in enumerate(self.y.shape) if i != self.axis)

    def q_dot(self, a):
        """``sum_c q_{n,c} a_{n,c}`` per row, for an input-shaped ``a``."""
        if self.probs:
            return _row_dot_weighted(a, self.y, self.cw, self.eps, self.axis)
        picked = _array.astype(_array.gather(a, self.safe, self.axis), self.cd)
        w_sum = _array.astype(_row_dot(a, self._wv(), self.axis), self.cd)
        with np.errstate(invalid="ignore"):
            val = self.b * picked + self.e * w_sum
        # ignored rows are 0 even where their logits are not finite (PyTorch)
        return _array.where(self.classes.ignored, 0.0, val)

    def loss(self, logp, out_dtype):
        """``reduce(-sum_c q logp)``; NaN for ``"mean"`` over nothing."""
        return reduce_terms(-self.q_dot(logp), self.reduction, self.denom, out_dtype)

    def subtract_q_(self, dx, gr):
        """``dx -= gr * q`` in place (``gr``: per-row scale); returns ``dx``."""
        ax = self.axis
        if self.probs:
            return _sub_probs_(dx, gr, self.y, self.cw, self.eps, ax)
        dx = _array.scatter_sub_(dx, gr * self.b, self.safe, ax)
        return _sub_rows_(dx, lambda s: _array.expand_at(_rows(gr, s) * _rows(self.e, s),
                                                         ax)
                          * _bcast(self._wv(), ax, dx.ndim))


def _whole(a):
    """Blocks of rows are pointless (1-D) or impossible (dask: immutable)."""
    return a.ndim == 1 or is_dask_array(a)


def _row_dot_weighted(a, y, cw, eps, axis):
    """``sum_c w_c ((1 - eps) y_c + eps / C) a_c`` per row, in blocks of
    :data:`_ROWS` rows (the product is a temporary of the block's size)."""
    c = a.shape[axis]
    wv = np.ones(c, y.dtype) if cw is None else cw
    if _whole(a):
        return _row_dot(((1.0 - eps) * y + eps / c) * a, wv, axis)
    return np.concatenate([_row_dot(((1.0 - eps) * y[s] + eps / c) * a[s], wv, axis)
                           for s in _blocks(a.shape[0])])


def _sub_probs_(dx, gr, y, cw, eps, axis):
    c = dx.shape[axis]
    wv = _bcast(np.ones(c, y.dtype) if cw is None else cw, axis, dx.ndim)
    return _sub_rows_(dx, lambda s: _array.expand_at(_rows(gr, s), axis)
                      * (((1.0 - eps) * _rows(y, s) + eps / c) * wv))


def _rows(a, s):
    """``a[s]`` over rows; a 0-d per-row value (a 1-D input's) as is."""
    return a[s] if a.ndim else a


def _sub_rows_(dx, term):
    """``dx -= term(rows)`` for every block of rows (``term(slice)`` builds one
    block's values); dask arrays get one lazy subtraction."""
    if _whole(dx):
        return dx - term(slice(None)).astype(dx.dtype)
    for s in _blocks(dx.shape[0]):
        dx[s] -= term(s).astype(dx.dtype)
    return dx


def _bcast(v, axis, ndim):
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return v.reshape(shape)


def _blocks(n):
    return [slice(i, i + _ROWS) for i in range(0, n, _ROWS)]


@register(_schema("soft_cross_entropy", AmpPolicy.FORCE_FP32, 2))
class SoftCrossEntropy(CrossEntropy):
    r"""Fused ``-sum_c q logp`` with ``logp = log_softmax(x)`` (module
    docstring); as :class:`~.losses.CrossEntropy` (saves only ``logp`` and
    the plan) with the soft-target plan and backward op."""

    display_name = "CrossEntropyBackward"

    def prepare(self, x, target, *, weight=None, ignore_index=-100,
                reduction="mean", label_smoothing=0.0):
        self.plan = SoftTargets("cross_entropy", x.shape, x.dtype, target, weight,
                                ignore_index, reduction, label_smoothing)

    @staticmethod
    def grad_op():
        return SoftCrossEntropyGrad


@register(_schema("soft_cross_entropy_backward", AmpPolicy.KEEP_INPUT, 2))
class SoftCrossEntropyGrad(CrossEntropyGrad):
    r"""``dx = G (Q softmax(logp) - q)``, ``G = g r`` per row (inputs, saved
    fields and display name as :class:`~.losses.CrossEntropyGrad`)."""

    def compute(self, g, y):
        plan, dt = self.plan, _array.dtype_of(y)
        gr = _array.broadcast_to(_array.astype(g, plan.cd) * plan.scale(),
                                 plan.row_shape())
        p = _api.softmax(y, plan.axis, dtype=plan.cd)
        p *= _array.expand_at(gr * plan.q_total(), plan.axis)
        p = plan.subtract_q_(p, gr)
        return _array.astype(p, dt)

    def backward(self, u):
        g, y = self.inputs
        plan, ax = self.plan, self.plan.axis
        r = plan.scale()
        p = Softmax.forward(y, axis=ax)
        gg = gy = None
        if _needs(self, 0):
            qt = Tensor._make(_array.astype(plan.q_total() * r, y.dtype))
            qu = Tensor._make(_array.astype(plan.q_dot(u.data) * r, y.dtype))
            gg = _sum_to((u * p).sum(ax) * qt - qu, g.shape)
        if _needs(self, 1):
            qt = _array.astype(plan.q_total() * r, y.dtype)
            a = (g * Tensor._make(qt)).reshape(_array.expand_at(qt, ax).shape)
            gy = SoftmaxGrad.forward(u * a, p, axis=ax)
        return gg, gy
