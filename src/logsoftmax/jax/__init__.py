"""JAX adapter: the library's kernels as differentiable JAX functions.

::

    import jax, logsoftmax.jax as lj
    y = lj.log_softmax(x, axis=-1)       # jit, grad (any order of reverse mode), vmap
    p = lj.softmax(x, axis=-1)
    s = lj.logsumexp(x, axis=None, keepdims=False)

Each function is a :func:`jax.custom_vjp` whose forward runs the library's
CPU kernels inside the compiled computation, as an XLA FFI target
(:mod:`._ffi`: no Python, no GIL, no copy per call), and whose backward is
the library's fused backward kernel (``log_softmax_backward``,
``softmax_backward``), itself a ``custom_vjp`` with the second-order
formulas, so ``jax.grad(jax.grad(f))`` works. Forward-mode (``jax.jvp``,
``jax.hessian``'s ``jacfwd``) is not offered by JAX for ``custom_vjp``.
Results are bit-identical to the front door's (:func:`logsoftmax.log_softmax`
on the same numpy array).

Why an FFI target and not a host callback (:func:`jax.pure_callback`):
measured in ``benchmarks/bench_adapters.py``, see docs/jax.md. CPU only:
on other JAX platforms the FFI target does not exist and compiling fails
naming it.

Validation happens at trace time, where JAX knows every shape and dtype:
the axis (``IndexError``/``TypeError``, the front door's rules and
messages) and the dtype (float32, bfloat16, float16, and float64 when
``jax_enable_x64`` is on; integer/bool inputs are promoted to float32,
complex raises ``TypeError``). The kernels therefore never fail.

Under :func:`jax.vmap` the FFI call receives the batch as extra leading
dimensions (``vmap_method="broadcast_all"``): axes are passed to it counted
from the back, so they keep pointing at the same dimension, and the kernels
run once on the whole batch.

``import logsoftmax`` does not import JAX; this module needs the ``jax``
extra (``pip install 'logsoftmax[jax]'``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .. import _api, dtypes
from . import _ffi

__all__ = ["log_softmax", "softmax", "logsumexp"]

#: ffi_call's batching rule: one call over the whole batch, unbatched
#: operands tiled to it (the backward's two operands must share a shape)
_VMAP_METHOD = "broadcast_all"
_LOG_SOFTMAX, _SOFTMAX = 0, 1  # the kernels' ``op`` selector


# --------------------------------------------------------------------------
# trace-time checks and the kernel call
# --------------------------------------------------------------------------
def _float_input(fn: str, x) -> jax.Array:
    """``x`` as a JAX array of a dtype the kernels compute in (the library's
    dtype policy: bool/int -> float32, complex and others -> TypeError)."""
    x = jnp.asarray(x)
    dt = np.dtype(x.dtype)
    rdt = dtypes.result_dtype(dt, fn, "x")
    return x if rdt == dt else x.astype(rdt)


def _axis_from_back(fn: str, axis, ndim: int) -> int:
    """``axis`` validated by the front door's rule, as a negative index."""
    return _api.canonical_axis(axis, ndim, fn) - ndim


def _axes_from_back(fn: str, axis, ndim: int) -> tuple[int, ...]:
    """``logsumexp``'s axis (int, tuple or None = all) as sorted negative indices."""
    if axis is None:
        return tuple(range(-ndim, 0))
    if isinstance(axis, (tuple, list)):
        axes = [_axis_from_back(fn, a, ndim) for a in axis]
        if len(set(axes)) != len(axes):
            raise ValueError(f"{fn}: axis={axis!r} repeats an axis; expected distinct axes")
        return tuple(sorted(axes))
    return (_axis_from_back(fn, axis, ndim),)


def _kernel(kind: str, shape, *arrays, axis: int, op: int = 0) -> jax.Array:
    """Run FFI handler ``kind`` on ``arrays`` along ``axis`` (negative);
    the result has ``shape`` and the first array's dtype."""
    dtype = arrays[0].dtype
    call = jax.ffi.ffi_call(
        _ffi.target(kind, dtype),
        jax.ShapeDtypeStruct(shape, dtype),
        vmap_method=_VMAP_METHOD,
    )
    return call(*arrays, axis=np.int64(axis), op=np.int64(op))


# --------------------------------------------------------------------------
# the softmax family: forward and fused backward, each a custom_vjp
# --------------------------------------------------------------------------
def _fused_backward(op: int, second_order):
    """The fused backward kernel ``op`` as a ``custom_vjp`` of ``(g, y)``
    whose own gradient is ``second_order(axis, (g, y), v)``."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
    def backward(g, y, axis):
        return _kernel("bwd", g.shape, g, y, axis=axis, op=op)

    backward.defvjp(lambda g, y, axis: (backward(g, y, axis), (g, y)), second_order)
    return backward


def _forward(op: int, backward):
    """The forward kernel ``op`` as a ``custom_vjp`` of ``x`` that saves its
    output (not its input) for ``backward(g, y, axis)``."""

    @functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
    def forward(x, axis):
        return _kernel("fwd", x.shape, x, axis=axis, op=op)

    def save_output(x, axis):
        y = forward(x, axis)
        return y, y

    forward.defvjp(save_output, lambda axis, y, g: (backward(g, y, axis),))
    return forward


def _log_softmax_second_order(axis, res, v):
    """With ``gx = g - exp(y) * sum(g)``: ``d/dg = v - sum(v * exp(y))``,
    ``d/dy = -v * exp(y) * sum(g)`` (PyTorch's ``_log_softmax_backward_data``
    formulas)."""
    g, y = res
    p = jnp.exp(y)
    dg = v - jnp.sum(v * p, axis, keepdims=True)
    dy = -v * p * jnp.sum(g, axis, keepdims=True)
    return dg, dy


def _softmax_second_order(axis, res, v):
    """With ``gx = y * (g - sum(g * y))``: ``d/dg = y * (v - sum(v * y))``
    (the fused op again) and ``d/dy = v * (g - sum(g * y)) - g * sum(v * y)``."""
    g, y = res
    dg = _softmax_backward(v, y, axis)
    dy = v * (g - jnp.sum(g * y, axis, keepdims=True)) - g * jnp.sum(
        v * y, axis, keepdims=True
    )
    return dg, dy


_log_softmax_backward = _fused_backward(_LOG_SOFTMAX, _log_softmax_second_order)
_softmax_backward = _fused_backward(_SOFTMAX, _softmax_second_order)
_log_softmax = _forward(_LOG_SOFTMAX, _log_softmax_backward)
_softmax = _forward(_SOFTMAX, _softmax_backward)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _logsumexp(x, axes, keepdims):
    """The kernels reduce one axis: several reduced axes are first made one
    (a reshape when they are adjacent, else a transpose bringing them last)."""
    if not axes:  # a 0-d array: the logsumexp of one element is that element
        return x
    out_shape = tuple(
        1 if d - x.ndim in axes else n
        for d, n in enumerate(x.shape)
        if keepdims or d - x.ndim not in axes
    )
    first, last = axes[0] + x.ndim, axes[-1] + x.ndim
    if last - first + 1 != len(axes):  # not adjacent: move them to the back
        x = jnp.moveaxis(x, [a + x.ndim for a in axes], range(x.ndim - len(axes), x.ndim))
        first, last = x.ndim - len(axes), x.ndim - 1
    merged = x.shape[:first] + (math.prod(x.shape[first : last + 1]),) + x.shape[last + 1 :]
    kept = merged[:first] + merged[first + 1 :]
    lse = _kernel("lse", kept, x.reshape(merged), axis=first - len(merged))
    return lse.reshape(out_shape)


def _logsumexp_fwd(x, axes, keepdims):
    lse = _logsumexp(x, axes, keepdims)
    return lse, (x, lse)


def _logsumexp_bwd(axes, keepdims, res, g):
    """``g * exp(x - lse)``, broadcast over the reduced axes."""
    x, lse = res
    if not keepdims:
        kept = tuple(d + x.ndim for d in axes)
        g, lse = jnp.expand_dims(g, kept), jnp.expand_dims(lse, kept)
    return (g * jnp.exp(x - lse),)


_logsumexp.defvjp(_logsumexp_fwd, _logsumexp_bwd)


# --------------------------------------------------------------------------
# the public functions
# --------------------------------------------------------------------------
def log_softmax(x, axis: int = -1) -> jax.Array:
    r"""Logarithm of softmax along ``axis``, on the library's fused kernels.

    .. math:: y_i = (x_i - m) - \log \sum_j e^{x_j - m}, \qquad m = \max_j x_j

    Args:
      x: array-like; float32, bfloat16, float16 or (with ``jax_enable_x64``)
        float64 compute natively, bool/integer are promoted to float32.
      axis: int in ``[-x.ndim, x.ndim)``.

    Returns:
      An array of ``x``'s shape and (promoted) dtype.

    Raises:
      IndexError: ``axis`` out of range (any axis of a 0-d array).
      TypeError: non-integer ``axis``; complex ``x``.

    Notes:
      Differentiable in reverse mode to any order (the backward is the fused
      ``log_softmax_backward`` kernel); works under ``jit`` and ``vmap``.
      Rows with a NaN or ``+inf`` are NaN; a ``-inf`` element of a finite
      row gives ``-inf``. Accuracy: API.md section 1 (a few eps of the
      float64 result, low precision rounded once).

    See also: :func:`softmax`, :func:`logsumexp`, :func:`jax.nn.log_softmax`.

    >>> import jax.numpy as jnp, logsoftmax.jax as lj
    >>> lj.log_softmax(jnp.zeros(2))
    Array([-0.6931472, -0.6931472], dtype=float32)
    """
    x = _float_input("log_softmax", x)
    return _log_softmax(x, _axis_from_back("log_softmax", axis, x.ndim))


def softmax(x, axis: int = -1) -> jax.Array:
    r"""Softmax along ``axis``: :math:`y_i = e^{x_i - m} / \sum_j e^{x_j - m}`.

    Same arguments, results and errors as :func:`log_softmax`.

    >>> import jax.numpy as jnp, logsoftmax.jax as lj
    >>> lj.softmax(jnp.zeros(2))
    Array([0.5, 0.5], dtype=float32)
    """
    x = _float_input("softmax", x)
    return _softmax(x, _axis_from_back("softmax", axis, x.ndim))


def logsumexp(x, axis=None, keepdims: bool = False) -> jax.Array:
    r""":math:`m + \log \sum_j e^{x_j - m}` over ``axis`` (int, tuple, or
    ``None`` for all axes).

    Returns an array of ``x``'s (promoted) dtype, the reduced axes removed
    (kept as length 1 with ``keepdims``). All ``-inf`` gives ``-inf``, any
    ``+inf`` gives ``+inf``, any NaN gives NaN; an empty reduction ``-inf``.
    Differentiable to any order in reverse mode (``grad * exp(x - lse)``).

    >>> import jax.numpy as jnp, logsoftmax.jax as lj
    >>> lj.logsumexp(jnp.zeros(2))
    Array(0.6931472, dtype=float32)
    """
    x = _float_input("logsumexp", x)
    return _logsumexp(x, _axes_from_back("logsumexp", axis, x.ndim), bool(keepdims))
