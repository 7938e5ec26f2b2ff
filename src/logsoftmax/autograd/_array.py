"""Array-type-generic helpers: the ONLY place autograd touches array types.

A :class:`~logsoftmax.autograd.Tensor` holds a backend array: a numpy array,
a dask array, or a torch (CUDA) tensor. Everything autograd does to arrays
outside the front door (:mod:`logsoftmax._api`) goes through this module, so
supporting another array type means extending these functions only.

- numpy and dask arrays share one path: numpy functions dispatch to dask
  through ``__array_function__`` / ``__array_ufunc__`` and methods
  (``.astype``, ``.sum``, ``.reshape``) exist on both.
- torch tensors get small explicit branches (``is_torch_tensor``). Array-type
  detection and the numpy <-> torch dtype mapping have one home,
  :mod:`logsoftmax.backends`, shared with the CUDA backend.
- Array-type-specific code: :func:`scatter_sub_` mutates its argument (numpy
  and torch only; a dask array is immutable and needs a functional variant,
  see its docstring), and :func:`check_targets` range-checks eagerly (for a
  dask array that is a compute).

Low-precision rules (API.md section 1): reductions and matmul accumulate in
float32 and round once; ml_dtypes' bfloat16 promotes oddly with Python
scalars (``bf16_array * 2.0`` is float32) and has no common type with
float16, so :func:`result_dtype` and :func:`scalar_like` fix the promotion.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes
from ..backends import is_dask_array, is_torch_tensor, numpy_dtype, torch_dtype

__all__ = [
    "is_array",
    "dtype_of",
    "astype",
    "result_dtype",
    "scalar_like",
    "copy",
    "zeros",
    "ones_like",
    "reduce_sum",
    "sum_to",
    "broadcast_to",
    "matmul",
    "relu",
    "exp",
    "where",
    "take",
    "swap_last",
    "expand_at",
    "gather",
    "scatter",
    "scatter_sub_",
    "check_targets",
]

_LOW = dtypes.LOW_PRECISION
_FLOAT_ORDER = {
    dtypes.float16: 1,
    dtypes.bfloat16: 1,
    dtypes.float32: 2,
    dtypes.float64: 3,
}


def is_array(a) -> bool:
    """Whether ``a`` is a backend array (kept as is by ``tensor()``)."""
    if isinstance(a, np.ndarray):
        return True
    return (is_dask_array(a) or is_torch_tensor(a)) and hasattr(a, "shape")


def dtype_of(a) -> np.dtype:
    """The numpy dtype of ``a``'s elements (torch dtypes mapped by name)."""
    dt = a.dtype
    if isinstance(dt, np.dtype):  # numpy and dask: the hot path
        return dt
    return numpy_dtype(dt)


def astype(a, dt: np.dtype):
    """``a`` cast to ``dt`` (no copy when it already has that dtype)."""
    if dtype_of(a) == dt:
        return a
    if is_torch_tensor(a):
        return a.to(torch_dtype(dt))
    return a.astype(dt)


def result_dtype(*dts: np.dtype) -> np.dtype:
    """Promotion for elementwise ops: numpy's, except bf16 with f16 -> f32."""
    if len(set(dts)) == 1:
        return dts[0]
    if all(dt in _FLOAT_ORDER for dt in dts):
        best = max(dts, key=lambda d: _FLOAT_ORDER[d])
        if _FLOAT_ORDER[best] == 1:  # mixed bf16 and f16: no common 16-bit type
            return dtypes.float32
        return best
    return np.result_type(*dts)


def scalar_like(value, dt: np.dtype) -> np.ndarray:
    """A Python scalar as a 0-d array of ``dt`` ("weak" scalar, as in PyTorch)."""
    if np.dtype(dt).kind in "biu" and isinstance(value, float):
        dt = dtypes.float32
    return np.asarray(value, dtype=dt)


def copy(a):
    """A fresh array with ``a``'s values."""
    return a.clone() if is_torch_tensor(a) else a.copy()


def zeros(shape, dt: np.dtype, like):
    """Zeros of ``shape``/``dt`` of ``like``'s array type (and device)."""
    if is_torch_tensor(like):
        import torch

        return torch.zeros(tuple(shape), dtype=torch_dtype(dt), device=like.device)
    if isinstance(like, np.ndarray):
        return np.zeros(shape, dt)
    return np.zeros(shape, dt, like=like)


def ones_like(a):
    """Ones of ``a``'s shape, dtype and array type."""
    if is_torch_tensor(a):
        import torch

        return torch.ones_like(a)
    return np.ones_like(a)


def reduce_sum(a, axis, keepdims: bool):
    """Sum over ``axis`` (int, tuple or None); low precision accumulates in f32."""
    dt = dtype_of(a)
    acc = astype(a, dtypes.float32) if dt in _LOW else a
    if is_torch_tensor(a):
        dims = tuple(range(a.ndim)) if axis is None else axis
        r = acc.sum(dim=dims, keepdim=keepdims)
    else:
        r = acc.sum(axis=axis, keepdims=keepdims)
    return astype(r, dt) if dt in _LOW else r


def sum_to(a, shape: tuple[int, ...]):
    """Reduce a broadcast result ``a`` back to ``shape`` (the gradient rule)."""
    shape = tuple(shape)
    if tuple(a.shape) == shape:
        return a
    lead = len(a.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and a.shape[lead + i] != 1
    )
    r = reduce_sum(a, axes, keepdims=True) if axes else a
    return r.reshape(shape)


def broadcast_to(a, shape: tuple[int, ...]):
    """A read-only broadcast view of ``a`` with ``shape``."""
    if tuple(a.shape) == tuple(shape):
        return a
    if is_torch_tensor(a):
        return a.expand(tuple(shape))
    return np.broadcast_to(a, shape)


def matmul(a, b):
    """``a @ b``; bfloat16/float16 operands are multiplied with float32
    accumulation and the result rounded once (as oneDNN/PyTorch CPU GEMMs)."""
    dt = result_dtype(dtype_of(a), dtype_of(b))
    if dt in _LOW:
        return astype(astype(a, dtypes.float32) @ astype(b, dtypes.float32), dt)
    return a @ b


def relu(a):
    """``max(a, 0)`` elementwise; NaN stays NaN (as torch.relu)."""
    if is_torch_tensor(a):
        return a.clamp(min=0)
    return np.maximum(a, scalar_like(0, dtype_of(a)))


def exp(a):
    """Elementwise ``e**a`` in ``a``'s dtype."""
    return a.exp() if is_torch_tensor(a) else np.exp(a)


def where(cond, a, b):
    """Elementwise ``a if cond else b``."""
    if is_torch_tensor(cond):
        import torch

        return torch.where(cond, a, b)
    return np.where(cond, a, b)


def take(table, idx):
    """``table[idx]`` for a 1-D ``table`` (per-class weights) and any-shape ``idx``."""
    return table[idx]


def swap_last(a):
    """``a`` with its last two axes swapped (a view)."""
    return a.transpose(-1, -2) if is_torch_tensor(a) else a.swapaxes(-1, -2)


def expand_at(a, axis: int):
    """``a`` with a length-1 axis inserted at ``axis`` (to broadcast per-row
    values against the class axis)."""
    return a[(slice(None),) * axis + (None,)] if a.ndim else a[None]


def _index(target, axis: int):
    """Target indices shaped for ``*_along_axis`` over the class ``axis``."""
    return expand_at(target, axis)


def _rows(a, target, axis: int):
    """Fancy-index tuple picking ``target`` per row of a 2-D numpy ``a``
    along axis 1 (one C call, where ``*_along_axis`` costs ~10 us of Python
    per call at 256 x 10), or None for any other case."""
    if axis == 1 and a.ndim == 2 and isinstance(a, np.ndarray) and isinstance(
        target, np.ndarray
    ):
        return np.arange(a.shape[0]), target
    return None


def gather(a, target, axis: int):
    """``a[..., target, ...]`` along the class ``axis``: shape ``target.shape``."""
    rows = _rows(a, target, axis)
    if rows is not None:
        return a[rows]
    idx = _index(target, axis)
    if is_torch_tensor(a):
        import torch

        return torch.gather(a, axis, idx).squeeze(axis)
    return np.take_along_axis(a, idx, axis=axis).squeeze(axis)


def scatter(values, target, axis: int, shape, like):
    """Zeros of ``shape`` with ``values`` written at ``target`` along ``axis``.

    Each position along the other axes gets exactly one write, so there are
    no collisions to accumulate.
    """
    dt = dtype_of(values)
    out = zeros(shape, dt, like)
    idx = _index(target, axis)
    vals = expand_at(values, axis)
    if is_torch_tensor(out):
        return out.scatter_(axis, idx, vals)
    np.put_along_axis(out, idx, vals, axis=axis)
    return out


def scatter_sub_(a, values, target, axis: int):
    """In place: ``a[..., target, ...] -= values`` along ``axis``; returns ``a``.

    numpy and torch write in place. An immutable (dask) array gets a new lazy
    array from the dask backend, which computes the same thing blockwise:
    ``a - where(arange(C) == target, values, 0)`` with ``arange`` broadcast
    along ``axis``; it never builds the one-hot matrix in memory (only per
    block, lazily). Callers must use the returned array.
    """
    if is_dask_array(a):
        from ..backends.dask import scatter_sub

        return scatter_sub(a, values, target, axis)
    rows = _rows(a, target, axis)
    if rows is not None:  # one write per row: no collisions
        a[rows] -= values.astype(a.dtype, copy=False)
        return a
    idx = _index(target, axis)
    vals = expand_at(values, axis)
    if is_torch_tensor(a):
        return a.scatter_add_(axis, idx, -vals)
    cur = np.take_along_axis(a, idx, axis=axis)
    np.put_along_axis(a, idx, cur - vals.astype(a.dtype), axis=axis)
    return a


def check_targets(target, ignored, num_classes: int, fn: str) -> None:
    """IndexError if a non-ignored class index is outside ``[0, num_classes)``.

    Eager: for a dask ``target`` this computes the min and max.
    """
    if target.ndim == 0:
        if bool(ignored):
            return
        valid = target.reshape(1)
    elif isinstance(target, np.ndarray) and target.size and (
        0 <= target.min() and target.max() < num_classes
    ):
        return  # every index in range, ignored or not: no mask needed
    else:
        valid = target[~ignored]
    if int(np.prod(valid.shape)) == 0:
        return
    lo, hi = int(valid.min()), int(valid.max())
    if lo < 0 or hi >= num_classes:
        bad = lo if lo < 0 else hi
        raise IndexError(
            f"{fn}: target contains class index {bad}, out of range for "
            f"{num_classes} classes; expected indices in [0, {num_classes}) or "
            "ignore_index"
        )

