"""The one place an op is run: coerce inputs, validate, apply AMP, compute,
record.

Every op, forward or backward, public or internal, is a :class:`Node`
subclass with an :class:`~logsoftmax.schema.OpSchema`, and every call goes
through :func:`dispatch`:

1. inputs become Tensors (arrays as constants; a Python scalar as a 0-d array
   of the first Tensor input's dtype, a "weak" scalar as in PyTorch);
2. ``node.prepare(*tensors, **attrs)`` validates (axis, shapes, targets) and
   stores the op's attributes on the node;
3. the AMP rule: :func:`logsoftmax.amp.cast_dtypes` with the schema's policy
   gives each input's compute dtype; the op may add its own promotion
   (``node.promote``, e.g. bf16 + f32 -> f32). Casts go through the recorded
   ``cast`` op, so gradients flow back to each input in its own dtype;
4. ``node.compute(*arrays)`` runs the math through the front door / fused
   kernels and saves what the gradient needs;
5. if grad mode is on and an input requires grad, the node is wired in:
   ``next_functions``, ``input_meta``, and the output's ``grad_fn``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import amp
from . import _array
from .engine import Node
from .grad_mode import is_grad_enabled
from .tensor import Tensor

__all__ = ["dispatch", "cast"]


def _coerce(x, ref_dtype) -> Tensor | None:
    if x is None or isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float)) and ref_dtype is not None:
        return Tensor._make(_array.scalar_like(x, ref_dtype))
    return Tensor(x)


def cast(t: Tensor, dtype) -> Tensor:
    """``t`` as ``dtype`` through the recorded ``cast`` op (identity if equal)."""
    if t.dtype == dtype:
        return t
    from .nodes import CastBackward

    return dispatch(CastBackward, (t,), {"dtype": dtype})


def dispatch(cls: type[Node], inputs: tuple, attrs: dict[str, Any]) -> Tensor:
    """Run op ``cls`` on ``inputs`` with keyword ``attrs``; see module docstring."""
    ref = next((x.dtype for x in inputs if isinstance(x, Tensor)), None)
    tensors = [_coerce(x, ref) for x in inputs]
    node = cls()
    node.prepare(*tensors, **attrs)

    dts = [None if t is None else t.dtype for t in tensors]
    want = amp.cast_dtypes(cls.schema.amp_policy, dts)  # the AMP rule, for every op
    promoted = node.promote(dts)
    for i, t in enumerate(tensors):
        dt = want[i] or (promoted[i] if promoted is not None else None)
        if dt is not None and dt != dts[i]:
            tensors[i] = cast(t, dt)
    node.inputs = tensors
    out = node.compute(*[None if t is None else t.data for t in tensors])
    if isinstance(out, np.generic):  # numpy reductions return scalars, not 0-d arrays
        out = np.asarray(out)

    record = is_grad_enabled() and any(
        t is not None and t.requires_grad for t in tensors
    )
    if not record:
        return Tensor._make(out)
    node.next_functions = tuple(
        None if t is None or not t.requires_grad else (t.grad_fn or t) for t in tensors
    )
    node.input_meta = tuple(None if t is None else (t.shape, t.dtype) for t in tensors)
    if not node.keep_inputs:
        node.inputs = None
    return Tensor._make(out, grad_fn=node)
