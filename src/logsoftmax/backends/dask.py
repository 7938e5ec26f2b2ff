r"""The Dask backend: lazy log-softmax on chunked arrays, rows split or not.

Every op takes ``dask.array.Array`` inputs and returns a lazy
``dask.array.Array``; nothing is computed until the user calls
``.compute()``, ``.persist()`` or ``to_zarr``, on whichever Dask scheduler is
active (the threaded one by default, ``dask.distributed`` unchanged). Each
block runs the fused CPU kernels of another backend (``"cpu"`` by default,
see :class:`DaskBackend`); the inputs were validated by the front door, so
blocks are never checked again.

Two plans, chosen per call from the chunking of the reduced axis::

    rows whole in a block              rows split over k blocks along axis
    (axis has one chunk)               (the vocabulary-parallel case)

    +-----------+                      +-----+-----+-----+
    | block 0   | -- kernel --> y0     | b00 | b01 | b02 |  phase 1: per block
    +-----------+                      +-----+-----+-----+  and row, the partial
    | block 1   | -- kernel --> y1       |     |     |      (m_b, s_b); m_b =
    +-----------+                        v     v     v      max, s_b = sum of
                                       (m,s) (m,s) (m,s)    exp(x - m_b)
    one map_blocks, one task             \    |    /
    per block                             merge (tree of     phase 1b: combine,
                                          split_every)       never a whole row
                                             |
                                           (M, S) per row
                                          /  |  \
                                       y00  y01  y02         phase 2: one
                                                             elementwise pass

Merge rule (the online-softmax merge, exact in real arithmetic)::

    M = max_b m_b,    S = sum_b s_b * exp(m_b - M)

carried in float64, so merging adds ~1 float64 ulp per level. The
elementwise pass then keeps API.md's order, ``y = (x - M) - log(S)`` in the
compute precision (float32 for f32/bf16/f16, float64 for f64) with ``log S``
rounded once to it, exactly what the single-block kernel does with its own
``m`` and ``log s``.

Per block, ``s_b`` comes from the fused ``logsumexp`` kernel applied to the
block shifted by its exact max (``x - m_b`` rounded in the compute precision,
as inside the kernel): the kernel returns ``log s_b`` in ``[0, log n_b]``,
whose rounding costs at most half an ulp of ``log s_b`` and so at most half
an eps of ``|y| >= log S``. Feeding the unshifted block would round
``m_b + log s_b`` at the magnitude of ``m_b`` (logits near 1e4 would lose
hundreds of eps).

Special values across blocks: a block whose rows are all ``-inf`` gives
``(m_b, s_b) = (-inf, 0)`` and drops out of the merge; a NaN or ``+inf``
anywhere makes ``M`` NaN or ``+inf``, and the elementwise pass turns such a
row into NaN (``logsumexp``: NaN, or ``+inf``), as API.md demands.

Backward with a split axis: per block, the float64 row sums of ``diff_dst``
(``log_softmax_backward``) or of ``diff_dst * dst`` (``softmax_backward``;
the product of two float32 values is exact in float64), summed in a tree,
then one elementwise pass.
"""

from __future__ import annotations

import importlib.util
import os
from functools import partial, wraps
import numpy as np

from .. import dtypes
from . import Backend, Op, get_backend

__all__ = ["DaskBackend", "STATS_DTYPE", "DEFAULT_KERNEL", "scatter_sub"]

#: the backend whose fused kernels run on each block (the single switch)
DEFAULT_KERNEL = "cpu"

#: the partial statistics of a row (or row segment): max and sum of exp(x - max)
STATS_DTYPE = np.dtype([("m", np.float64), ("s", np.float64)])


# --------------------------------------------------------------------------
# helpers run on numpy blocks (module level, so workers can unpickle them)
# --------------------------------------------------------------------------
def _widen(x: np.ndarray, result=None) -> np.ndarray:
    """A writeable copy of block ``x`` in its working precision (float64 if
    it or the ``result`` dtype is float64, else float32)."""
    return np.array(x, dtype=dtypes.accumulation_dtype(x.dtype, result), copy=True)


def _kept_shape(shape, axes) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _one_kernel_thread(fn):
    """Run ``fn`` with one numba thread in this (dask worker) thread.

    Dask already runs one block per core; letting each block's kernel also
    fork a 2-thread OpenMP region oversubscribes the cores, and the spinning
    pools cost more than the kernels (4096x32000 f32 in 8 row chunks: 118 ms
    with nested threads vs the 53 ms single call). ``numba.set_num_threads``
    is thread-local, so this does not touch the caller's setting.
    """

    @wraps(fn)
    def wrapper(*args, **kwargs):
        import numba

        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            numba.set_num_threads(before)

    return wrapper


def _accurate(dtype, n: int, backward: bool = False) -> bool:
    """The cpu kernels' precision choice for a result of ``dtype`` over rows
    of ``n`` (float32 results of short rows compute in float64 terms)."""
    from .cpu import segment  # deferred: imports numba

    limit = segment.SHORT_BACKWARD if backward else segment.SHORT
    return np.dtype(dtype) == np.float32 and n <= limit


def _name(op: Op) -> str:
    """The op's function name: ``log_softmax`` or ``softmax``."""
    return op.name.lower()


@_one_kernel_thread
def _block_op(x: np.ndarray, *, kernel: str, op: Op, axis: int, dtype) -> np.ndarray:
    """One fused-kernel call on a block that holds whole rows."""
    return getattr(get_backend(kernel), _name(op))(x, axis, None, dtype)


@_one_kernel_thread
def _block_op2(
    diff_dst: np.ndarray, dst: np.ndarray, *, kernel: str, op: Op, axis: int, dtype
) -> np.ndarray:
    backward = getattr(get_backend(kernel), f"{_name(op)}_backward")
    return backward(diff_dst, dst, axis, None, dtype)


@_one_kernel_thread
def _block_logsumexp(x: np.ndarray, *, kernel: str, axes, keepdims: bool):
    return get_backend(kernel).logsumexp(x, tuple(axes), keepdims)


@_one_kernel_thread
def _lse_partial(
    x: np.ndarray, axis, keepdims: bool, *, kernel: str, result=None
) -> np.ndarray:
    """Phase 1 on one block: ``(m_b, s_b)`` per row over ``axis`` (kept as 1)."""
    axes = tuple(axis)
    out = np.empty(_kept_shape(x.shape, axes), STATS_DTYPE)
    if any(x.shape[a] == 0 for a in axes) or x.size == 0:
        out["m"], out["s"] = -np.inf, 0.0  # the merge's identity element
        return out
    xc = _widen(x, result)
    with np.errstate(all="ignore"):
        m = np.max(xc, axis=axes, keepdims=True)  # exact; NaN propagates
        # shift in the compute precision, as the fused kernel does inside
        np.subtract(xc, m, out=xc)
        log_s = get_backend(kernel).logsumexp(xc, axes, True)
        finite = np.isfinite(m)
        out["m"] = m
        # rows that are all -inf, or hold NaN/+inf, carry s = 0: their m
        # alone decides the row (dropped out of the merge, or NaN / +inf)
        out["s"] = np.where(finite, np.exp(log_s.astype(np.float64)), 0.0)
    return out


def _fused(kernel: str, method: str):
    """The kernel backend's fused block method (the cpu backend's
    :meth:`block_stats` ...), or None: the numpy steps below then run."""
    return getattr(get_backend(kernel), method, None)


def _stats_partial(x: np.ndarray, axis, keepdims: bool, *, kernel: str, accurate: bool):
    """Phase 1 of the forward: :func:`_lse_partial`, fused into one pass of
    the kernel backend where it can (a row block of float32-compute data)."""
    fused = _fused(kernel, "block_stats")
    stats = fused(x, axis[0], accurate) if fused is not None and len(axis) == 1 else None
    if stats is None:
        return _lse_partial(x, axis, keepdims, kernel=kernel)
    out = np.empty(_kept_shape(x.shape, tuple(axis)), STATS_DTYPE)
    out["m"] = np.expand_dims(stats[0], axis[0])
    out["s"] = np.expand_dims(stats[1], axis[0])
    return out


def _lse_merge(p: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """Combine partials along ``axis``: M = max m_b, S = sum s_b exp(m_b - M)."""
    axes = tuple(axis)
    with np.errstate(all="ignore"):
        big_m = np.max(p["m"], axis=axes, keepdims=True)
        # m_b == M covers M = -inf (all -inf so far): factor 1, not exp(nan)
        factor = np.where(p["m"] == big_m, 1.0, np.exp(p["m"] - big_m))
        big_s = np.sum(p["s"] * factor, axis=axes, keepdims=True)
    out = np.empty(big_m.shape, STATS_DTYPE)
    out["m"], out["s"] = big_m, big_s
    if not keepdims:
        out = out.reshape([n for i, n in enumerate(out.shape) if i not in axes])
    return out


def _lse_value(st: np.ndarray, *, dtype) -> np.ndarray:
    """``logsumexp`` from merged stats: ``M + log S``, or ``M`` if not finite
    (NaN stays NaN, ``+inf`` stays ``+inf``, all ``-inf`` gives ``-inf``)."""
    big_m = st["m"]
    with np.errstate(all="ignore"):
        r = np.where(np.isfinite(big_m), big_m + np.log(st["s"]), big_m)
    return np.asarray(r).astype(dtype)


def _row_terms(st: np.ndarray, axis: int, ct: np.dtype):
    """``(M, log S, S)`` broadcastable against a block; NaN rows where M is not
    finite, so a row with NaN or +inf comes out NaN in every element."""
    st = np.expand_dims(st, axis)
    big_m = st["m"]
    with np.errstate(all="ignore"):
        finite = np.isfinite(big_m)
        big_s = np.where(finite, st["s"], np.nan)
        log_s = np.log(big_s)
    return big_m.astype(ct), log_s.astype(ct), big_s.astype(ct)


def _forward_apply(
    x: np.ndarray, st: np.ndarray, *, op: Op, axis: int, dtype, kernel: str, accurate: bool
) -> np.ndarray:
    """Phase 2 forward on one block: ``(x - M) - log S`` or ``exp(x - M) / S``
    (one fused pass of the kernel backend where it can)."""
    fused = _fused(kernel, "block_forward")
    if fused is not None:
        y = fused(op, x, axis, dtype, st["m"], st["s"], accurate)
        if y is not None:
            return y
    y = _widen(x, dtype)
    big_m, log_s, big_s = _row_terms(st, axis, y.dtype)
    with np.errstate(all="ignore"):
        np.subtract(y, big_m, out=y)
        if op == Op.LOG_SOFTMAX:
            np.subtract(y, log_s, out=y)
        else:
            np.exp(y, out=y)
            np.divide(y, big_s, out=y)
    return y.astype(dtype, copy=False)


def _sum_partial(
    diff_dst: np.ndarray, dst: np.ndarray, *, op: Op, axis: int, kernel: str
) -> np.ndarray:
    """Phase 1 backward on one block: row sums of ``diff_dst`` or of
    ``diff_dst * dst`` in float64 (long double for float64 data), where the
    products of f32/bf16/f16 values are exact (one fused pass where it can)."""
    fused = _fused(kernel, "block_grad_sums")
    if fused is not None:
        sums = fused(op, diff_dst, dst, axis)
        if sums is not None:
            return np.expand_dims(sums, axis)
    wide = np.longdouble if np.dtype(diff_dst.dtype) == np.float64 else np.float64
    with np.errstate(all="ignore"):
        dd = diff_dst.astype(wide)
        if op == Op.SOFTMAX:
            np.multiply(dd, dst.astype(wide), out=dd)
        return np.sum(dd, axis=axis, keepdims=True)


def _backward_apply(
    diff_dst: np.ndarray,
    dst: np.ndarray,
    row_sum: np.ndarray,
    *,
    op: Op,
    axis: int,
    dtype,
    kernel: str,
    accurate: bool,
) -> np.ndarray:
    """Phase 2 backward on one block, one precision above the data (float64,
    long double for float64), rounded once: ``diff_dst - exp(dst) * S``
    cancels, and in the data's own precision the rounding of ``exp(dst) * S``
    alone cost up to 14 eps (float64, rows of 50). The kernel backend's
    fused pass where it can (its accurate path is float64 as well)."""
    fused = _fused(kernel, "block_backward")
    if fused is not None:
        g = fused(op, diff_dst, dst, axis, dtype, row_sum, accurate)
        if g is not None:
            return g
    wide = np.longdouble if np.dtype(diff_dst.dtype) == np.float64 else np.float64
    s = np.expand_dims(row_sum, axis).astype(wide)
    dd = diff_dst.astype(wide)
    y = dst.astype(wide)
    with np.errstate(all="ignore"):
        if op == Op.LOG_SOFTMAX:
            np.exp(y, out=y)  # exp(-inf) = 0: diff_src = diff_dst there
            np.multiply(y, s, out=y)
            np.subtract(dd, y, out=dd)
        else:
            np.subtract(dd, s, out=dd)
            np.multiply(dd, y, out=dd)
    return dd.astype(dtype)


def _scatter_sub_block(a, values, target, classes, *, axis: int):
    shape = [1] * a.ndim
    shape[axis] = classes.size
    hit = np.expand_dims(target, axis) == classes.reshape(shape)
    vals = np.expand_dims(values, axis).astype(a.dtype)
    return a - np.where(hit, vals, np.zeros((), a.dtype))


def scatter_sub(a, values, target, axis: int):
    """``a[..., target, ...] - values`` along ``axis``, functionally, for dask.

    The immutable counterpart of numpy's ``put_along_axis(a, t, take(a, t) -
    v)`` used by the fused cross-entropy backward: each block subtracts
    ``values`` where its slice of ``arange(a.shape[axis])`` equals ``target``;
    no one-hot matrix exists outside a block.

    Args:
      a: dask array, shape ``S`` (classes along ``axis``).
      values: array of ``S`` without ``axis``; cast to ``a.dtype``.
      target: integer array of ``S`` without ``axis``, values in
        ``[0, a.shape[axis])`` (others subtract nothing).
      axis: canonical non-negative class axis.

    Returns:
      A lazy dask array of ``a``'s shape, chunks and dtype.
    """
    import dask.array as da

    index = tuple(range(a.ndim))
    rest = tuple(i for i in index if i != axis)
    classes = da.arange(a.shape[axis], chunks=(a.chunks[axis],))
    return da.blockwise(
        partial(_scatter_sub_block, axis=axis),
        index,
        a,
        index,
        da.asarray(values),
        rest,
        da.asarray(target),
        rest,
        classes,
        (axis,),
        dtype=a.dtype,
        meta=np.empty((0,) * a.ndim, a.dtype),
        token="scatter-sub",
    )


# --------------------------------------------------------------------------
# the backend
# --------------------------------------------------------------------------
class DaskBackend(Backend):
    """Lazy ops on ``dask.array.Array`` (see the module docstring for the plans).

    Args:
      kernel: name of the backend whose fused kernels run on each numpy
        block (``"cpu"``; ``"reference"`` for a float64 oracle).
      split_every: fan-in of the tree that merges the per-block partials of
        a split axis (``None``: Dask's ``split_every`` config, default 4).

    ``supports_out`` is False: Dask arrays are immutable, so the front door
    rejects ``out=`` with a ``ValueError`` before anything is built.
    """

    name = "dask"
    supports_out = False

    def __init__(
        self, kernel: str = DEFAULT_KERNEL, split_every: int | None = None
    ) -> None:
        self.kernel = kernel
        self.split_every = split_every

    @classmethod
    def available(cls) -> bool:
        # find_spec("dask.array") would import dask itself; look for the
        # subpackage on disk instead, so listing backends stays import-free.
        spec = importlib.util.find_spec("dask")
        return spec is not None and any(
            os.path.isfile(os.path.join(loc, "array", "__init__.py"))
            for loc in spec.submodule_search_locations or ()
        )

    # -- array-type hooks -------------------------------------------------
    def asarray(self, x):
        import dask.array as da

        return da.asarray(x)

    def dtype_of(self, x) -> np.dtype:
        return np.dtype(x.dtype)

    def astype(self, x, dtype: np.dtype):
        return self.asarray(x).astype(np.dtype(dtype))

    # -- forward ------------------------------------------------------------
    def log_softmax(self, x, axis, out, dtype):
        return self._forward(Op.LOG_SOFTMAX, x, axis, dtype)

    def softmax(self, x, axis, out, dtype):
        return self._forward(Op.SOFTMAX, x, axis, dtype)

    def _forward(self, op: Op, x, axis: int, dtype):
        import dask.array as da

        dtype = np.dtype(dtype)
        meta = np.empty((0,) * x.ndim, dtype)
        if x.numblocks[axis] == 1:
            fn = partial(_block_op, kernel=self.kernel, op=op, axis=axis, dtype=dtype)
            return x.map_blocks(
                fn, dtype=dtype, meta=meta, token=f"{_name(op)}-block"
            )
        accurate = _accurate(dtype, x.shape[axis])
        if dtypes.accumulation_dtype(x.dtype, dtype) == np.float64:
            accurate = None  # float64 work: the numpy partials, widened
        stats = self._row_stats(x, (axis,), accurate=accurate, result=dtype)
        index = tuple(range(x.ndim))
        fn = partial(
            _forward_apply, op=op, axis=axis, dtype=dtype, kernel=self.kernel,
            accurate=accurate,
        )
        return da.blockwise(
            fn,
            index,
            x,
            index,
            stats,
            tuple(i for i in index if i != axis),
            dtype=dtype,
            meta=meta,
            token=f"{_name(op)}-apply",
        )

    def _row_stats(
        self, x, axes: tuple[int, ...], keepdims: bool = False, accurate=None, result=None
    ):
        """Lazy merged ``(M, S)`` over ``axes``, combined in a tree (the
        forward's fused phase 1 when ``accurate`` is given, else the
        logsumexp partials, which keep NaN over ``+inf``)."""
        import dask.array as da

        ndim = x.ndim if keepdims else x.ndim - len(axes)
        if accurate is None:
            chunk = partial(_lse_partial, kernel=self.kernel, result=result)
        else:
            chunk = partial(_stats_partial, kernel=self.kernel, accurate=accurate)
        return da.reduction(
            x,
            chunk=chunk,
            combine=_lse_merge,
            aggregate=_lse_merge,
            axis=axes,
            keepdims=keepdims,
            dtype=STATS_DTYPE,
            split_every=self.split_every,
            meta=np.empty((0,) * ndim, STATS_DTYPE),
            name="logsumexp-stats",
        )

    # -- backward -----------------------------------------------------------
    def log_softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self._backward(Op.LOG_SOFTMAX, diff_dst, dst, axis, dtype)

    def softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self._backward(Op.SOFTMAX, diff_dst, dst, axis, dtype)

    def _backward(self, op: Op, diff_dst, dst, axis: int, dtype):
        import dask.array as da

        name = f"{_name(op)}_backward"
        dtype = np.dtype(dtype)
        if dst.chunks != diff_dst.chunks:
            dst = dst.rechunk(diff_dst.chunks)
        meta = np.empty((0,) * diff_dst.ndim, dtype)
        if diff_dst.numblocks[axis] == 1:
            fn = partial(_block_op2, kernel=self.kernel, op=op, axis=axis, dtype=dtype)
            return da.map_blocks(
                fn, diff_dst, dst, dtype=dtype, meta=meta, token=f"{name}-block"
            )
        wide = np.longdouble if diff_dst.dtype == np.float64 else np.float64
        partial_chunks = tuple(
            (1,) * len(c) if i == axis else c for i, c in enumerate(diff_dst.chunks)
        )
        sums = da.map_blocks(
            partial(_sum_partial, op=op, axis=axis, kernel=self.kernel),
            diff_dst,
            dst,
            chunks=partial_chunks,
            dtype=wide,
            meta=np.empty((0,) * diff_dst.ndim, wide),
            token=f"{name}-partial-sums",
        )
        row_sum = sums.sum(axis=axis, split_every=self.split_every)
        index = tuple(range(diff_dst.ndim))
        fn = partial(
            _backward_apply, op=op, axis=axis, dtype=dtype, kernel=self.kernel,
            accurate=_accurate(dtype, diff_dst.shape[axis], backward=True),
        )
        return da.blockwise(
            fn,
            index,
            diff_dst,
            index,
            dst,
            index,
            row_sum,
            tuple(i for i in index if i != axis),
            dtype=dtype,
            meta=meta,
            token=f"{name}-apply",
        )

    # -- logsumexp ------------------------------------------------------------
    def logsumexp(self, x, axes, keepdims):
        import dask.array as da

        axes = tuple(axes)
        dtype = np.dtype(x.dtype)
        if all(x.numblocks[a] == 1 for a in axes):
            fn = partial(
                _block_logsumexp, kernel=self.kernel, axes=axes, keepdims=keepdims
            )
            ndim = x.ndim if keepdims else x.ndim - len(axes)
            meta = np.empty((0,) * ndim, dtype)
            if keepdims:
                chunks = tuple((1,) if i in axes else c for i, c in enumerate(x.chunks))
                return x.map_blocks(
                    fn, chunks=chunks, dtype=dtype, meta=meta, token="logsumexp-block"
                )
            return x.map_blocks(
                fn,
                drop_axis=list(axes),
                dtype=dtype,
                meta=meta,
                token="logsumexp-block",
            )
        stats = self._row_stats(x, axes, keepdims)
        return stats.map_blocks(
            partial(_lse_value, dtype=dtype),
            dtype=dtype,
            meta=np.empty((0,) * stats.ndim, dtype),
            token="logsumexp-value",
        )
