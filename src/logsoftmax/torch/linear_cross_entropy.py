r"""``linear_cross_entropy`` / ``LinearCrossEntropyLoss`` on torch tensors.

The fused linear + cross-entropy of API.md section 7 as a
``torch.autograd.Function``: torch's own BLAS for the GEMMs (``mm``, and
``addmm_`` to accumulate in place), the library's chunk kernels for the rest
(numba on zero-copy numpy views of CPU tensors, Triton on CUDA tensors),
and the plan of :mod:`logsoftmax._linear_ce`: the ``(N, V)`` logits are never
built.

When autograd will need a gradient and the reduction is a scalar, the
forward computes the gradients for ``dloss = 1`` chunk by chunk (three GEMMs
in all, the floor) and the backward scales them; for ``reduction="none"``
the backward recomputes each chunk (four GEMMs) so that a per-row ``dloss``
reaches ``grad_weight`` correctly (Liger-Kernel #968). A second backward
through the same graph (``retain_graph=True``) recomputes. Double backward
is not supported (the gradients are not built from differentiable ops).

    import torch, logsoftmax.torch as lt
    loss = lt.linear_cross_entropy(h, lm_head.weight, target, z_loss=1e-4)
    loss.backward()
"""

from __future__ import annotations

import torch

from .. import _linear_ce
from .._losses import ops_for

__all__ = ["linear_cross_entropy", "LinearCrossEntropyLoss"]


class _LinearCrossEntropy(torch.autograd.Function):
    """Autograd node over :func:`logsoftmax._linear_ce.forward` / ``backward``."""

    @staticmethod
    def forward(ctx, input, linear_weight, linear_bias, target, options):
        p = _linear_ce.check(
            "linear_cross_entropy", input, linear_weight, target,
            linear_bias=linear_bias, **options,
        )
        ops = ops_for(p.kind)
        wants = ctx.needs_input_grad[:3] if torch.is_grad_enabled() else (False,) * 3
        loss, saved = _linear_ce.forward(p, grads=any(wants), ops=ops)
        ctx.saved = saved
        return loss.to(input.device)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        gx, gw, gb = _linear_ce.backward(grad_loss, ctx.saved)
        need = ctx.needs_input_grad
        return (gx if need[0] else None, gw if need[1] else None,
                gb if need[2] else None, None, None)


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None,
                         weight=None, reduction="mean", ignore_index=-100,
                         label_smoothing=0.0, z_loss=0.0, softcap=None,
                         chunk_size=None):
    r"""``cross_entropy(softcap(input @ linear_weight.T + linear_bias), target)
    + z_loss * lse**2``, fused and chunked (API.md section 7).

    Args:
      input: ``(N, H)`` tensor (float32, bfloat16, float16, float64; CPU or
        CUDA). linear_weight: ``(V, H)``. target: ``(N,)`` int64 class
        indices. linear_bias: optional ``(V,)``. weight: optional ``(V,)``
        class weights (the input's dtype).
      reduction, ignore_index, label_smoothing: as
        ``torch.nn.functional.cross_entropy``.
      z_loss: ``lambda >= 0``; ``lambda * lse**2`` is *part of* the loss.
      softcap: ``None`` or ``c > 0``: logits become ``c tanh(z / c)``.
      chunk_size: ``None`` (chosen from N, V and the caches), rows per
        chunk, or ``(rows, cols)``.

    Returns:
      The loss tensor in the input's dtype: 0-d, or ``(N,)`` for ``"none"``;
      differentiable w.r.t. ``input``, ``linear_weight`` and ``linear_bias``
      (first order).
    """
    options = dict(weight=weight, reduction=reduction, ignore_index=ignore_index,
                   label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                   chunk_size=chunk_size)
    return _LinearCrossEntropy.apply(input, linear_weight, linear_bias, target,
                                     options)


class LinearCrossEntropyLoss(torch.nn.Module):
    """Module form of :func:`linear_cross_entropy`; options fixed at
    construction, ``forward(input, linear_weight, target, linear_bias=None)``.
    ``weight`` (class weights) is registered as a buffer, as in
    ``torch.nn.CrossEntropyLoss``."""

    def __init__(self, weight=None, *, reduction="mean", ignore_index=-100,
                 label_smoothing=0.0, z_loss=0.0, softcap=None, chunk_size=None):
        super().__init__()
        self.register_buffer("weight", weight)
        self.reduction, self.ignore_index = reduction, ignore_index
        self.label_smoothing, self.z_loss = label_smoothing, z_loss
        self.softcap, self.chunk_size = softcap, chunk_size

    def forward(self, input, linear_weight, target, linear_bias=None):
        return linear_cross_entropy(
            input, linear_weight, target, linear_bias=linear_bias,
            weight=self.weight, reduction=self.reduction,
            ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
            z_loss=self.z_loss, softcap=self.softcap, chunk_size=self.chunk_size,
        )

    def extra_repr(self) -> str:
        return (f"reduction={self.reduction!r}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, z_loss={self.z_loss}, "
                f"softcap={self.softcap}")
