r"""The fused linear + cross-entropy as an autograd op (API.md section 7).

:class:`LinearCrossEntropy` runs :func:`logsoftmax._linear_ce.forward` on
its inputs (``input``, ``linear_weight``, ``linear_bias``; the target and
the options are attributes) and keeps the :class:`~logsoftmax._linear_ce.Saved`
state; its backward is :func:`logsoftmax._linear_ce.backward`: gradients
for the input, the weight and the bias, never building the ``(N, V)``
logits. When a gradient will be needed and the reduction is a scalar, the
forward already computes the gradients for ``dloss = 1`` (three GEMMs in
all) and the backward scales them; otherwise the backward recomputes each
chunk (docs/losses.md).

Dask inputs run the lazy plan of :mod:`logsoftmax.backends.dask_losses`.
Double backward is not supported: the gradient is not built from
differentiable ops, and ``backward(create_graph=True)`` through this op
raises ``NotImplementedError``.

AMP policy KEEP_INPUT: bfloat16/float16 inputs stay in their dtype (the op
accumulates in float32 itself; an autocast upcast would copy the weight).
"""

from __future__ import annotations

from .. import _linear_ce, _losses
from ..schema import AmpPolicy, OpSchema, register
from . import _array
from .grad_mode import is_grad_enabled
from .nodes import _needs
from .tensor import Function, Tensor

__all__ = ["LinearCrossEntropy"]


@register(OpSchema("linear_cross_entropy", 1, AmpPolicy.KEEP_INPUT, True, 3, 1))
class LinearCrossEntropy(Function):
    """``cross_entropy(softcap(x W^T + b), t) + z_loss lse^2``, fused."""

    display_name = "LinearCrossEntropyBackward"
    saved_fields = ("saved",)
    saved = None

    def prepare(self, x, weight, bias=None, *, target, options):
        self.target, self.options = target, dict(options)

    def compute(self, x, w, b):
        t = self.target.data if isinstance(self.target, Tensor) else self.target
        p = _linear_ce.check("linear_cross_entropy", x, w, t, linear_bias=b,
                             **self.options)
        wants = is_grad_enabled() and any(
            i is not None and i.requires_grad for i in self.inputs)
        if p.kind == "dask":
            from ..backends import dask_losses

            self.saved = p
            return dask_losses.linear_cross_entropy(p)
        loss, self.saved = _linear_ce.forward(p, grads=wants,
                                              ops=_losses.ops_for(p.kind))
        return loss

    def backward(self, grad):
        self._check_alive()
        if is_grad_enabled():
            raise NotImplementedError(
                "linear_cross_entropy: double backward is not supported "
                "(backward(create_graph=True) through the fused loss)")
        g = grad.data if isinstance(grad, Tensor) else grad
        if isinstance(self.saved, _linear_ce.Problem):  # dask: lazy gradients
            from ..backends import dask_losses

            grads = dask_losses.linear_cross_entropy_grads(self.saved, g)
        else:
            grads = _linear_ce.backward(g, self.saved)
        return tuple(
            None if gr is None or not _needs(self, i) else Tensor._make(gr)
            for i, gr in enumerate(grads)
        )

    def saved_arrays(self) -> list:
        s = self.saved
        if s is None or isinstance(s, _linear_ce.Problem) or s.grads is None:
            return []
        return [a for a in s.grads if a is not None and _array.is_array(a)]
