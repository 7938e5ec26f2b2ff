r"""Front door of the loss family (API.md section 7): validation, dtype
policy and dispatch for ``nll_loss``, ``cross_entropy`` and the fused
``linear_cross_entropy`` on arrays.

Every check happens here, before any work; helpers are named after the
exception they raise and messages name the function, the argument, the
value and what was expected. The arithmetic lives in the backends' loss
pieces: :mod:`.backends.cpu.losses` (numba kernels, numpy arrays),
:mod:`.backends.dask_losses` (dask arrays), :mod:`.backends.cuda.losses`
(Triton, CUDA arrays) and the chunk plan :mod:`._linear_ce`.

PyTorch's formulas, per row ``n`` (class axis 1, or 0 for a 1-D input),
``lse_n = logsumexp(x_n)``, class weights ``w`` (ones if absent),
``W = sum_c w_c``, ``C`` classes, smoothing ``eps``:

* class-index targets ``t_n`` (rows with ``t_n == ignore_index`` give 0)::

      loss_n = (1 - eps) w_{t_n} (lse_n - x_{n,t_n})
               + eps / C * sum_c w_c (lse_n - x_{n,c})

  ``"mean"`` divides the sum by ``sum_n w_{t_n}`` over non-ignored rows
  (NaN when there are none, as PyTorch);
* probability targets ``y`` (the input's shape), ``q = (1 - eps) y + eps/C``::

      loss_n = sum_c w_c q_{n,c} (lse_n - x_{n,c})

  ``"mean"`` divides by the number of rows (``N * d1 * ...``).

Everything accumulates in float64 (the per-row statistics from float32
terms); the result is rounded once to the input's dtype.
"""

from __future__ import annotations

import numpy as np

from . import dtypes
from ._api import _check_type, _check_value
from ._loss_checks import (
    check_class_targets,
    check_class_weight,
    check_float_dtype,
    check_fraction,
    check_ignore_index,
    check_reduction,
    dtype_of,
)
from .backends import select_backend

__all__ = [
    "nll_loss",
    "cross_entropy",
    "linear_cross_entropy",
    "ops_for",
]


def _as_array(backend, a):
    return None if a is None else backend.asarray(a)


def _prepare(fn, input, target, weight, ignore_index, reduction):
    """Common checks; returns ``(backend, x, in_dtype, target, weight, axis, C)``."""
    backend = select_backend(input)
    x = backend.asarray(input)
    in_dt = backend.dtype_of(x)
    rdt = check_float_dtype(fn, "input", in_dt)
    if rdt != in_dt:
        x = backend.astype(x, rdt)
    _check_value(
        len(x.shape) >= 1,
        lambda: f"{fn}: input is 0-d; expected shape (C,) or (N, C, d1, ...)",
    )
    check_reduction(fn, reduction)
    check_ignore_index(fn, ignore_index)
    axis = 1 if len(x.shape) > 1 else 0
    num_classes = int(x.shape[axis])
    target = _as_array(backend, target)
    weight = _as_array(backend, weight)
    if weight is not None and dtype_of(weight).kind in "biu" and rdt != in_dt:
        weight = backend.astype(weight, rdt)
    check_class_weight(fn, weight, num_classes, rdt)
    return backend, x, rdt, target, weight, axis, num_classes


def _impl(backend):
    """The loss pieces for a backend: numpy kernels, dask, or CUDA."""
    if backend.name == "dask":
        from .backends import dask_losses

        return dask_losses
    if backend.name == "cuda":
        from .backends.cuda import losses

        return losses
    from . import _ce_numpy

    return _ce_numpy


# --------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------
def nll_loss(input, target, weight=None, *, ignore_index=-100, reduction="mean"):
    r"""Negative log-likelihood of class ``target`` under log-probabilities.

    .. math:: \ell_n = -w_{t_n}\, \mathrm{input}_{n, t_n}, \qquad
              \mathrm{mean} = \sum_n \ell_n \Big/ \sum_n w_{t_n}

    with the sums over rows whose target is not ``ignore_index`` (PyTorch's
    ``nll_loss``).

    Args:
      input: log-probabilities, ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)``
        (class axis 1); numpy or dask array.
      target: integer class indices, shape ``()``, ``(N,)`` or
        ``(N, d1, ...)``, values in ``[0, C)`` or ``ignore_index``.
      weight: optional ``(C,)`` class weights of the input's dtype.
      ignore_index: targets equal to it contribute nothing.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.

    Returns:
      The loss in the input's dtype (accumulated in float64, rounded once):
      0-d, or of ``target``'s shape for ``"none"``.

    Raises:
      TypeError: non-integer target; weight of another dtype than input.
      ValueError: bad shapes, unknown reduction. IndexError: a target out of
      range.

    >>> import numpy as np, logsoftmax
    >>> float(logsoftmax.nll_loss(np.log(np.array([[0.5, 0.5]])), np.array([0])))
    0.6931471805599453
    """
    fn = "nll_loss"
    backend, x, rdt, target, weight, axis, num_classes = _prepare(
        fn, input, target, weight, ignore_index, reduction
    )
    want = (x.shape[0],) + tuple(x.shape[2:]) if axis == 1 else ()
    check_class_targets(fn, target, want, num_classes, ignore_index,
                        eager=backend.name != "dask")
    return _impl(backend).nll_loss(x, target, weight, int(ignore_index), reduction, rdt)


def cross_entropy(input, target, weight=None, *, ignore_index=-100,
                  reduction="mean", label_smoothing=0.0):
    r"""Cross-entropy between ``softmax(input)`` along the class axis and
    ``target``, with all of PyTorch's options (module docstring for the
    formulas).

    Args:
      input: logits, ``(C,)``, ``(N, C)`` or ``(N, C, d1, ...)`` (class
        axis 1); numpy, dask or CUDA array (int/bool promoted to float32).
      target: class indices (integers, shape ``input.shape`` without the
        class axis) or class probabilities (the input's shape and dtype).
      weight: optional ``(C,)`` class weights of the input's dtype.
      ignore_index: class-index targets equal to it contribute nothing (not
        allowed with probability targets, as in PyTorch).
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      label_smoothing: ``eps`` in ``[0, 1]``: the target becomes
        ``(1 - eps) onehot + eps / C``.

    Returns:
      The loss in the input's dtype, rounded once from float64: 0-d, or one
      value per row (the target's shape without the class axis) for
      ``"none"``.

    Raises:
      TypeError: bad dtypes (target neither integer nor the input's float
        dtype; weight of another dtype). ValueError: bad shapes, unknown
        reduction, ``label_smoothing`` outside ``[0, 1]``, ``ignore_index``
        with probability targets. IndexError: a class index out of range.

    Notes:
      ``"mean"`` over zero non-ignored rows is NaN (0/0), as in PyTorch. A
      row holding NaN or ``+inf``, or only ``-inf``, gives NaN; a target
      logit of ``-inf`` gives ``+inf``. Logits that all share a large offset
      lose nothing: the loss is computed as ``(m - x_t) + log(sum e^{x - m})``.

    >>> import numpy as np, logsoftmax
    >>> float(logsoftmax.cross_entropy(np.zeros((1, 4), np.float32), np.array([2])))
    1.3862943649291992
    """
    fn = "cross_entropy"
    backend, x, rdt, target, weight, axis, num_classes = _prepare(
        fn, input, target, weight, ignore_index, reduction
    )
    eps = check_fraction(fn, "label_smoothing", label_smoothing)
    tdt = dtype_of(target)
    if tdt.kind == "f" or tdt == dtypes.bfloat16:
        _check_type(
            tdt == rdt,
            lambda: f"{fn}: target has dtype {tdt} but input has dtype {rdt}; "
            "class probabilities must have the input's dtype",
        )
        _check_value(
            tuple(target.shape) == tuple(x.shape),
            lambda: f"{fn}: target has shape {tuple(target.shape)}, expected the "
            f"input's shape {tuple(x.shape)} (class probabilities)",
        )
        _check_value(
            ignore_index == -100,
            lambda: f"{fn}: ignore_index={ignore_index} is not supported with "
            "class-probability targets; expected the default -100",
        )
        return _impl(backend).cross_entropy_probs(x, target, weight, reduction, eps, rdt)
    want = (x.shape[0],) + tuple(x.shape[2:]) if axis == 1 else ()
    check_class_targets(fn, target, want, num_classes, ignore_index,
                        eager=backend.name != "dask")
    return _impl(backend).cross_entropy(
        x, target, weight, int(ignore_index), reduction, eps, rdt
    )


def linear_cross_entropy(input, linear_weight, target, *, linear_bias=None,
                         weight=None, reduction="mean", ignore_index=-100,
                         label_smoothing=0.0, z_loss=0.0, softcap=None,
                         chunk_size=None):
    r"""Fused ``cross_entropy(softcap(input @ linear_weight.T + linear_bias),
    target) + z_loss * lse**2``, never building the ``(N, V)`` logits.

    .. math:: \ell_n = (1 - \varepsilon)\, w_{t_n} (\mathrm{lse}_n - z_{n,t_n})
              + \frac{\varepsilon}{V} \sum_c w_c (\mathrm{lse}_n - z_{n,c})
              + \lambda\, \mathrm{lse}_n^2

    with ``z = softcap(x W^T + b)``, ``softcap(z) = c tanh(z / c)``,
    ``lse_n = logsumexp(z_n)`` and ``lambda = z_loss``. ``"mean"`` divides
    the cross-entropy part by ``sum_n w_{t_n}`` and the z-loss part by the
    number of non-ignored rows; ignored rows contribute 0 to everything.
    The z-loss is *part of* the returned loss (not reported apart).

    The work runs in chunks of tokens (and classes), one GEMM per chunk then
    a fused kernel (softcap, online max/sum merge, target pick); peak extra
    memory is one chunk of logits, never ``N * V`` (docs/losses.md).

    Args:
      input: ``(N, H)`` activations (numpy, dask or CUDA array).
      linear_weight: ``(V, H)``, as ``torch.nn.Linear``; the input's dtype.
      target: ``(N,)`` integer class indices (or ``ignore_index``).
      linear_bias: optional ``(V,)``, the input's dtype.
      weight: optional ``(V,)`` class weights, the input's dtype.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
      ignore_index, label_smoothing: as :func:`cross_entropy`.
      z_loss: ``lambda >= 0``.
      softcap: ``None`` or ``c > 0``.
      chunk_size: optional ``(rows, classes)`` per chunk, or an int number of
        rows (all classes); default chosen from ``N``, ``V`` and the caches.

    Returns:
      The loss in the input's dtype (accumulated in float32-or-better,
      rounded once): 0-d, or ``(N,)`` for ``"none"``. Lazy for dask input.

    Raises:
      TypeError / ValueError / IndexError: as :func:`cross_entropy`, plus
      shapes of ``linear_weight``/``linear_bias`` that do not fit ``input``,
      a negative ``z_loss`` or a non-positive ``softcap``.

    See also: :func:`logsoftmax._linear_ce.forward` and
    :func:`logsoftmax._linear_ce.backward` (the gradient building blocks).
    """
    from . import _linear_ce

    problem = _linear_ce.check(
        "linear_cross_entropy", input, linear_weight, target,
        linear_bias=linear_bias, weight=weight, reduction=reduction,
        ignore_index=ignore_index, label_smoothing=label_smoothing,
        z_loss=z_loss, softcap=softcap, chunk_size=chunk_size,
    )
    if problem.kind == "dask":
        from .backends import dask_losses

        return dask_losses.linear_cross_entropy(problem)
    loss, _ = _linear_ce.forward(problem, grads=False, ops=ops_for(problem.kind))
    return loss


def ops_for(kind: str):
    """The fused loss's pieces for an array kind: ``"numpy"`` (numba kernels,
    numpy's BLAS), ``"torch"`` (CPU tensors: torch's BLAS, numba kernels) or
    ``"cuda"`` (torch's cuBLAS, Triton kernels)."""
    from . import _linear_ce

    if kind == "cuda":
        from .backends.cuda.losses import CudaOps

        return CudaOps()
    return _linear_ce.ops_for(kind)
