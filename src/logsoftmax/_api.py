"""The front door: validation, ``out=`` / in-place rules, and dispatch.

Every face of the library (functional API, autograd, graph, CLI) calls these
functions; backends receive only arrays that passed here (see
:mod:`logsoftmax.backends`). Nothing is written before every check passed.

Helpers are named after the exception they raise (``_check_index`` raises
``IndexError``...), and every message names the function, the argument, the
value and what was expected.
"""

from __future__ import annotations

import operator

import numpy as np

from . import dtypes
from .backends import (
    Backend,
    Op,
    default_cpu,
    is_torch_tensor,
    numpy_dtype,
    select_backend,
    unforced_backend,
)

__all__ = [
    "log_softmax",
    "log_softmax_backward",
    "softmax",
    "softmax_backward",
    "logsumexp",
    "canonical_axis",
]


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------
def _check_index(cond: bool, msg) -> None:
    if not cond:
        raise IndexError(msg())


def _check_type(cond: bool, msg) -> None:
    if not cond:
        raise TypeError(msg())


def _check_value(cond: bool, msg) -> None:
    if not cond:
        raise ValueError(msg())


def canonical_axis(axis, ndim: int, fn: str = "log_softmax", arg: str = "axis") -> int:
    """Wrap ``axis`` into ``[0, ndim)``.

    Raises ``TypeError`` for a non-integer axis (float, None, bool, tuple;
    numpy integers are fine) and ``IndexError`` when the wrapped axis is out
    of range, which includes every axis of a 0-d array.
    """
    _check_type(
        not isinstance(axis, (bool, np.bool_)) and hasattr(axis, "__index__"),
        lambda: f"{fn}: {arg} must be an integer, got {axis!r} "
        f"of type {type(axis).__name__}",
    )
    axis = operator.index(axis)
    _check_index(
        -ndim <= axis < ndim,
        lambda: f"{fn}: {arg}={axis} is out of range for an array of {ndim} "
        f"dimension(s); expected an integer in [{-ndim}, {ndim})",
    )
    return axis + ndim if axis < 0 else axis


def _canonical_axes(axis, ndim: int, fn: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, tuple):
        axes = tuple(canonical_axis(a, ndim, fn) for a in axis)
        _check_value(
            len(set(axes)) == len(axes),
            lambda: f"{fn}: axis={axis!r} repeats an axis; expected distinct axes",
        )
        return tuple(sorted(axes))
    return (canonical_axis(axis, ndim, fn),)


def _input(fn: str, arg: str, x, backend: Backend | None = None):
    """Pick the backend (unless given), convert ``x`` to its array type and
    promote int/bool to float32. Returns ``(backend, array, dtype)``."""
    if backend is None:
        backend = select_backend(x)
    x = backend.asarray(x)
    dt = backend.dtype_of(x)
    rdt = dtypes.result_dtype(dt, fn, arg)
    if rdt != dt:
        x = backend.astype(x, rdt)
    return backend, x, rdt


def _result_dtype(fn: str, in_dtype: np.dtype, dtype) -> np.dtype:
    return in_dtype if dtype is None else dtypes.check_supported(dtype, fn, "dtype")


# --------------------------------------------------------------------------
# out= and in-place
# --------------------------------------------------------------------------
def _memory(a):
    """``(address, shape, byte strides)`` of an array, or None if unknown."""
    if is_torch_tensor(a):
        # before the interfaces, which a torch tensor either lacks (CPU: the
        # lookup raises inside) or builds as a dict per call (CUDA). With
        # _check_out handing each _memory to _overlaps instead of computing it
        # twice: out= on 1x8 CPU tensors through the cuda backend's front door
        # (interpreter, kernel launch stubbed) 23.4-24.4 -> 16.7-17.6 us
        size = a.element_size()
        return a.data_ptr(), tuple(a.shape), tuple(s * size for s in a.stride())
    iface = getattr(a, "__array_interface__", None) or getattr(
        a, "__cuda_array_interface__", None
    )
    if iface is not None:
        shape = tuple(iface["shape"])
        strides = iface.get("strides")
        if strides is None:  # C-contiguous
            item = np.dtype(iface["typestr"]).itemsize
            strides, acc = [], item
            for n in reversed(shape):
                strides.append(acc)
                acc *= n
            strides = tuple(reversed(strides))
        return iface["data"][0], shape, tuple(strides)
    return None


def _byte_range(mem, itemsize: int) -> tuple[int, int]:
    addr, shape, strides = mem
    lo = hi = addr
    for n, s in zip(shape, strides):
        if n == 0:
            return addr, addr
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + itemsize


def _overlaps(a, b, itemsize_a: int, itemsize_b: int, ma, mb) -> bool:
    """Whether ``a`` and ``b`` share memory (``ma``, ``mb``: their _memory)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if not np.may_share_memory(a, b):
            return False
        try:
            return bool(np.shares_memory(a, b, max_work=100_000))
        except np.exceptions.TooHardError:
            return True
    if ma is None or mb is None:
        return a is b
    lo_a, hi_a = _byte_range(ma, itemsize_a)
    lo_b, hi_b = _byte_range(mb, itemsize_b)
    return lo_a < hi_b and lo_b < hi_a


def _check_out(fn, backend: Backend, out, shape, dtype, inputs, in_place_ok):
    """Validate ``out=`` against the result and the inputs; return ``out``.

    ``inputs``: ``(name, array)`` pairs. ``out`` may be exactly one of the
    inputs named in ``in_place_ok`` (same address, shape, strides, dtype);
    any other overlap with an input is an error.
    """
    if out is None:
        return None
    _check_value(
        backend.supports_out,
        lambda: f"{fn}: out= is not supported by the {backend.name!r} backend "
        f"(its arrays are immutable); use the returned array",
    )
    out_shape = tuple(getattr(out, "shape", ()))
    _check_value(
        out_shape == tuple(shape),
        lambda: f"{fn}: out has shape {out_shape}, expected {tuple(shape)}",
    )
    try:
        out_dt = backend.dtype_of(out)
    except Exception:
        out_dt = getattr(out, "dtype", type(out).__name__)
    _check_type(
        out_dt == dtype,
        lambda: f"{fn}: out has dtype {out_dt}, expected {dtype}",
    )
    # torch tensors have no flags (a failing lookup raises inside)
    flags = None if is_torch_tensor(out) else getattr(out, "flags", None)
    _check_value(
        flags is None or bool(flags.writeable),
        lambda: f"{fn}: out is read-only; expected a writeable array",
    )
    mem_out = _memory(out)
    for name, arr in inputs:
        mem_in = mem_out if arr is out else _memory(arr)
        same = arr is out or (mem_out is not None and mem_in == mem_out)
        in_dt = backend.dtype_of(arr)
        if same and in_dt == out_dt:
            _check_value(
                name in in_place_ok,
                lambda: f"{fn}: out is the same array as {name}; in place is "
                f"only supported for {' or '.join(in_place_ok)}",
            )
            continue
        _check_value(
            not _overlaps(
                out, arr, np.dtype(out_dt).itemsize, in_dt.itemsize, mem_out, mem_in
            ),
            lambda: f"{fn}: out partially overlaps {name}; out must be exactly "
            f"{' or '.join(in_place_ok)} (same address, shape and strides) or "
            "not share memory with any input",
        )
    return out


# --------------------------------------------------------------------------
# the fast path: numpy arrays of a native dtype, an int axis, a fresh out
# --------------------------------------------------------------------------
# The common call -- a numpy array of a supported dtype, an int axis, no
# ``dtype=``, ``out`` absent or a separate writeable array (or exactly the
# input) -- passes every check of the general path below by construction,
# so it is recognised with a few type and attribute tests and handed to the
# cpu backend directly. Anything else (and every error) takes the general
# path. Measured: the general path cost ~10 us (allocating) / ~24 us (out=)
# before the kernel; this one ~0.5 us (docs/performance.md). An allocating
# call on CUDA tensors goes to the cuda backend the same way.
_NATIVE = frozenset(dtypes.SUPPORTED)
_LSM, _SM = int(Op.LOG_SOFTMAX), int(Op.SOFTMAX)
_ndarray = np.ndarray


def _owner(a):
    """The array that owns ``a``'s memory (numpy points a view's ``base``
    at the owner itself), or None when that is not an ndarray owning its
    data (a buffer, a pooled result)."""
    base = a.base
    if base is None:
        return a
    return base if type(base) is _ndarray and base.base is None else None


def _apart(a, b) -> bool:
    """``a`` and ``b`` share no memory: two distinct owning arrays, or views
    of two different owning arrays, are two allocations (a few attribute
    reads); else numpy's bounds test (~0.3 us, a fifth of a small call)."""
    if a.base is None and b.base is None:  # two owners (the common out=)
        return a is not b
    oa, ob = _owner(a), _owner(b)
    return (oa is not None and ob is not None and oa is not ob) or (
        not np.may_share_memory(a, b)
    )


def _fast_forward(op: int, x, axis, out):
    """The backend result for the common call, or None (take the general path).

    An allocating call on a CUDA tensor goes to the cuda backend too: on an
    H200 a 1x8 call went from 3.21x torch's to 2.91x with this and one other
    change (docs/cuda.md, "second lease")."""
    if type(x) is _ndarray and type(axis) is int:
        dt = x.dtype
        if dt in _NATIVE:
            nd = x.ndim
            if -nd <= axis < nd:
                cpu = default_cpu()
                if cpu is None:
                    return None
                axis %= nd
                if out is None:
                    return cpu.forward(op, x, axis, None, dt)
                if type(out) is _ndarray:
                    # small C-contiguous calls check out in compiled code,
                    # where its checks cost less than the np.empty an
                    # allocating call pays (backends/cpu/into.py)
                    y = cpu.forward_into(op, x, axis, out, dt)
                    if y is not None:
                        return y
                    # out: exactly x, or a separate writeable ndarray; its
                    # shape and dtype, the backend's call checks (None for
                    # any other: the general path, which raises)
                    if (
                        out is x or (out.base is None and x.base is None) or _apart(out, x)
                    ) and out.flags.writeable:
                        return cpu.forward(op, x, axis, out, dt)
    if out is None and type(axis) is int and is_torch_tensor(x) and x.is_cuda:
        dt = numpy_dtype(x.dtype)
        nd = x.dim()
        if dt in _NATIVE and -nd <= axis < nd:
            cuda = unforced_backend("cuda")
            if cuda is not None:
                return cuda.forward(op, x, axis % nd, None, dt)
    return None


def _fast_backward(op: int, diff_dst, dst, axis, out):
    """:func:`_fast_forward` for the backward (``dst``'s and ``out``'s shape
    and dtype: checked by the backend's call, as there)."""
    if type(diff_dst) is _ndarray and type(dst) is _ndarray and type(axis) is int:
        dt = diff_dst.dtype
        if dt in _NATIVE:
            nd = diff_dst.ndim
            if -nd <= axis < nd:
                cpu = default_cpu()
                if cpu is None:
                    return None
                axis %= nd
                if out is None:
                    return cpu.backward(op, diff_dst, dst, axis, None, dt)
                if type(out) is _ndarray:
                    y = cpu.backward_into(op, diff_dst, dst, axis, out, dt)
                    if y is not None:
                        return y
                    if (
                        out is diff_dst
                        or out is dst
                        or (out.base is None and diff_dst.base is None and dst.base is None)
                        or (_apart(out, diff_dst) and _apart(out, dst))
                    ) and out.flags.writeable:
                        return cpu.backward(op, diff_dst, dst, axis, out, dt)
    cuda_tensor = is_torch_tensor(diff_dst) and diff_dst.is_cuda
    if out is None and type(axis) is int and cuda_tensor:
        dt = numpy_dtype(diff_dst.dtype)
        nd = diff_dst.dim()
        if (
            dt in _NATIVE
            and -nd <= axis < nd
            and is_torch_tensor(dst)
            and dst.dtype == diff_dst.dtype
            and dst.shape == diff_dst.shape
        ):
            cuda = unforced_backend("cuda")
            if cuda is not None:
                return cuda.backward(op, diff_dst, dst, axis % nd, None, dt)
    return None


# --------------------------------------------------------------------------
# the public functions
# --------------------------------------------------------------------------
def _forward(fn: str, op: str, x, axis, out, dtype):
    backend, x, in_dt = _input(fn, "x", x)
    axis = canonical_axis(axis, len(x.shape), fn)
    rdt = _result_dtype(fn, in_dt, dtype)
    out = _check_out(fn, backend, out, x.shape, rdt, [("x", x)], ("x",))
    return getattr(backend, op)(x, axis, out, rdt)


def _backward(fn: str, op: str, diff_dst, dst, axis, out, dtype):
    backend, diff_dst, dd_dt = _input(fn, "diff_dst", diff_dst)
    _, dst, d_dt = _input(fn, "dst", dst, backend)
    _check_value(
        tuple(diff_dst.shape) == tuple(dst.shape),
        lambda: f"{fn}: diff_dst has shape {tuple(diff_dst.shape)} but dst has "
        f"shape {tuple(dst.shape)}; expected the same shape",
    )
    _check_type(
        dd_dt == d_dt,
        lambda: f"{fn}: diff_dst has dtype {dd_dt} but dst has dtype {d_dt}; "
        "expected the same dtype",
    )
    axis = canonical_axis(axis, len(diff_dst.shape), fn)
    rdt = _result_dtype(fn, dd_dt, dtype)
    out = _check_out(
        fn,
        backend,
        out,
        diff_dst.shape,
        rdt,
        [("diff_dst", diff_dst), ("dst", dst)],
        ("diff_dst", "dst"),
    )
    return getattr(backend, op)(diff_dst, dst, axis, out, rdt)


def log_softmax(x, axis=-1, *, out=None, dtype=None):
    r"""Logarithm of softmax along ``axis``.

    .. math:: y_i = (x_i - m) - \log \sum_j e^{x_j - m}, \qquad m = \max_j x_j

    computed in that order (never ``log(softmax(x))``, never
    ``x - logsumexp(x)`` with a separately rounded logsumexp).

    Args:
      x: array-like of any shape and strides. float32/bfloat16/float16/float64
        compute natively (float32 accumulation, float64 for float64);
        integer and bool inputs are promoted to float32.
      axis: int in ``[-x.ndim, x.ndim)``.
      out: optional array of the result's shape and dtype, any strides; may be
        exactly ``x`` (in place).
      dtype: optional result dtype (benchdnn's mixed data types): the result
        is computed in the wider of ``x``'s working precision and
        ``dtype``'s (``dtype=float64`` on float32 data computes in float64)
        and rounded once to ``dtype``. A narrower ``dtype`` differs from
        PyTorch's ``dtype=``, which casts the *input* first.

    Returns:
      An array of ``x``'s shape and dtype (or ``dtype``), of ``x``'s array
      type; ``out`` if given.

    Raises:
      IndexError: ``axis`` out of range (any axis of a 0-d array).
      TypeError: non-integer ``axis``; complex/object ``x``; ``out`` of the
        wrong dtype.
      ValueError: ``out`` of the wrong shape, read-only, or partially
        overlapping ``x``.

    Notes:
      Per row along ``axis``: a NaN or a ``+inf`` makes the whole row NaN; an
      all-``-inf`` row is NaN; a ``-inf`` in an otherwise finite row gives
      ``-inf`` there. A length-1 row gives exactly 0.

    See also: :func:`softmax`, :func:`logsumexp`, :func:`log_softmax_backward`.

    >>> import numpy as np, logsoftmax
    >>> logsoftmax.log_softmax(np.array([0.0, 0.0], np.float32))
    array([-0.6931472, -0.6931472], dtype=float32)
    """
    if dtype is None:
        y = _fast_forward(_LSM, x, axis, out)
        if y is not None:
            return y
    return _forward("log_softmax", "log_softmax", x, axis, out, dtype)


def softmax(x, axis=-1, *, out=None, dtype=None):
    r"""Softmax along ``axis``: :math:`y_i = e^{x_i - m} / \sum_j e^{x_j - m}`.

    Same arguments, dtypes, errors, in-place and special-value rules as
    :func:`log_softmax` (an all-``-inf`` row is NaN; a ``-inf`` element in a
    finite row gives 0; a single dominant logit gives exactly 1).

    >>> import numpy as np, logsoftmax
    >>> logsoftmax.softmax(np.array([0.0, 0.0], np.float32))
    array([0.5, 0.5], dtype=float32)
    """
    if dtype is None:
        y = _fast_forward(_SM, x, axis, out)
        if y is not None:
            return y
    return _forward("softmax", "softmax", x, axis, out, dtype)


def log_softmax_backward(diff_dst, dst, axis=-1, *, out=None, dtype=None):
    r"""Gradient of :func:`log_softmax` with respect to its input.

    .. math:: \mathrm{diff\_src}_i = \mathrm{diff\_dst}_i - e^{\mathrm{dst}_i}
              \sum_j \mathrm{diff\_dst}_j

    Args:
      diff_dst: gradient of the loss with respect to the forward output.
      dst: the forward output ``y = log_softmax(x)`` (not ``x``); any finite
        values are accepted (benchdnn feeds ones that are not log-probabilities).
      axis: the forward's axis.
      out: optional; may be exactly ``diff_dst`` or exactly ``dst`` (in place).
      dtype: optional result dtype (see :func:`log_softmax`).

    Returns:
      ``diff_src``: an array of ``diff_dst``'s shape and dtype (or ``dtype``).

    Raises:
      ValueError: ``diff_dst`` and ``dst`` shapes differ; bad ``out``.
      TypeError: ``diff_dst`` and ``dst`` dtypes differ; bad dtypes.
      IndexError: ``axis`` out of range.

    Notes:
      Where ``dst`` is ``-inf`` the result is ``diff_dst``. A length-1 row
      gives exactly 0 for a proper ``dst`` (``dst == 0``).

    >>> import numpy as np, logsoftmax
    >>> y = logsoftmax.log_softmax(np.array([0.0, 0.0], np.float32))
    >>> logsoftmax.log_softmax_backward(np.array([1.0, 0.0], np.float32), y)
    array([ 0.5, -0.5], dtype=float32)
    """
    if dtype is None:
        g = _fast_backward(_LSM, diff_dst, dst, axis, out)
        if g is not None:
            return g
    return _backward(
        "log_softmax_backward", "log_softmax_backward", diff_dst, dst, axis, out, dtype
    )


def softmax_backward(diff_dst, dst, axis=-1, *, out=None, dtype=None):
    r"""Gradient of :func:`softmax` with respect to its input.

    .. math:: \mathrm{diff\_src}_i = \mathrm{dst}_i \,(\mathrm{diff\_dst}_i -
              \sum_j \mathrm{diff\_dst}_j \,\mathrm{dst}_j)

    Same arguments, errors and in-place rules as :func:`log_softmax_backward`,
    with ``dst = softmax(x)``.
    """
    if dtype is None:
        g = _fast_backward(_SM, diff_dst, dst, axis, out)
        if g is not None:
            return g
    return _backward(
        "softmax_backward", "softmax_backward", diff_dst, dst, axis, out, dtype
    )


def logsumexp(x, axis=-1, *, keepdims=False):
    r"""Log of the sum of exponentials: :math:`m + \log \sum_j e^{x_j - m}`.

    Args:
      x: array-like (dtype rules as :func:`log_softmax`).
      axis: int, tuple of ints, or ``None`` (all axes).
      keepdims: keep reduced axes as length 1.

    Returns:
      An array of ``x``'s dtype with the reduced shape.

    Notes:
      All ``-inf`` gives ``-inf``; any ``+inf`` gives ``+inf``; any NaN gives
      NaN; a zero-length reduction gives ``-inf``. Exactly the max where every
      other term underflows.

    >>> import numpy as np, logsoftmax
    >>> float(logsoftmax.logsumexp(np.array([0.0, 0.0])))  # log 2
    0.6931471805599453
    """
    backend, x, _ = _input("logsumexp", "x", x)
    axes = _canonical_axes(axis, len(x.shape), "logsumexp")
    return backend.logsumexp(x, axes, bool(keepdims))
