r"""The loss family on dask arrays: lazy, blockwise, reduced as a tree.

Every function takes arrays the front door (:mod:`logsoftmax._losses`)
validated and returns lazy dask arrays; nothing is computed before the
caller asks. Blocks run the numpy pieces (:mod:`logsoftmax._ce_numpy`,
:mod:`logsoftmax._linear_ce`) with one numba thread each (dask already runs
one block per core).

``cross_entropy`` / ``nll_loss``: the rows (axis 0) stay chunked as they
are; the class axis is gathered into one chunk per block (a loss needs
whole rows; a vocabulary split across blocks would need the two-phase
merge of :mod:`.dask`, not worth it for a per-row scalar). Each block yields
its float64 per-row values (``"none"``) or the partial sums
``(sum loss, sum w_t)`` that a tree of additions (``split_every``) brings to
one ``"mean"`` = ``sum loss / sum w_t``: the denominator is global, never
per block.

``linear_cross_entropy``: tokens chunked across blocks (``input``'s row
chunks; its hidden axis in one chunk), ``linear_weight``/``bias``/class
weights broadcast to every block (one chunk each). Per block: the numpy
chunk plan, giving ``(sum ce, sum z-loss, sum w_t, #valid)``; a tree sum;
then ``sum ce / sum w_t + sum zl / #valid`` (``"mean"``). The gradients
(:func:`linear_cross_entropy_grads`) recompute each block with the *global*
scales: ``grad_input`` is blockwise (the input's chunks) and
``grad_weight`` / ``grad_bias`` are tree sums of per-block products
(``g_b.T @ x_b``), in float32-or-better, rounded once at the end.

Class indices of a lazy target are not range-checked (that would compute
the graph); an out-of-range index contributes a target logit of 0.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .. import _ce_numpy, dtypes
from .dask import _one_kernel_thread

__all__ = [
    "nll_loss",
    "cross_entropy",
    "cross_entropy_probs",
    "linear_cross_entropy",
    "linear_cross_entropy_grads",
]

#: partial sums per block: (sum of the loss terms, sum of w_t, sum of the
#: z-loss terms, number of valid rows)
_PARTS = 4


# --------------------------------------------------------------------------
# block functions (module level: workers unpickle them)
# --------------------------------------------------------------------------
def _reduce_block(vals, wt, zl=None, valid=None):
    out = np.zeros((1, _PARTS))
    out[0, 0] = np.sum(vals, dtype=np.float64)
    out[0, 1] = np.sum(wt, dtype=np.float64)
    if zl is not None:
        out[0, 2] = np.sum(zl, dtype=np.float64)
        out[0, 3] = np.sum(valid, dtype=np.float64)
    return out


@_one_kernel_thread
def _ce_block(x, t, *, w, kind, ignore_index, eps, rdt, per_row, lead):
    if kind == "probs":
        vals = _ce_numpy.prob_rows(x, t, w, eps, rdt)
        wt = np.ones(vals.size)
        shape = (x.shape[0],) + x.shape[2:]
    elif kind == "nll":
        vals, wt = _ce_numpy.nll_rows(x, t, w, ignore_index)
        shape = t.shape
    else:
        vals, wt = _ce_numpy.ce_rows(x, t, w, ignore_index, eps, rdt)
        shape = t.shape
    if per_row:
        return np.asarray(vals, np.float64).reshape(shape)
    return _reduce_block(vals, wt).reshape((1,) * lead + (_PARTS,))


def _finish(parts, *, reduction, rdt, z_loss):
    tot = parts.reshape(-1, _PARTS).sum(axis=0)
    with np.errstate(all="ignore"):
        if reduction == "sum":
            r = tot[0] + tot[2]
        else:
            r = tot[0] / tot[1]
            if z_loss:
                r += tot[2] / tot[3]
    return np.asarray(dtypes.round_to(np.asarray(r, np.float64), rdt))


def _round_block(v, *, rdt):
    return np.asarray(dtypes.round_to(v, rdt))


# --------------------------------------------------------------------------
# cross_entropy / nll_loss
# --------------------------------------------------------------------------
def _whole_rows(x, axis):
    return x if x.numblocks[axis] == 1 else x.rechunk({axis: -1})


def _loss(kind, x, target, weight, ignore_index, reduction, eps, rdt):
    import dask.array as da

    axis = 1 if x.ndim > 1 else 0
    x = _whole_rows(x, axis)
    w = None if weight is None else np.asarray(weight)
    index = tuple(range(x.ndim))
    rest = tuple(i for i in index if i != axis)
    if kind == "probs":
        target = da.asarray(target).rechunk(x.chunks)
        t_index = index
    else:
        target = da.asarray(target)
        target = target.rechunk(tuple(c for i, c in enumerate(x.chunks) if i != axis))
        t_index = rest
    per_row = reduction == "none"
    fn = partial(_ce_block, kind=kind, ignore_index=ignore_index, eps=eps, rdt=rdt,
                 per_row=per_row, w=w, lead=len(rest))
    if per_row:
        vals = da.blockwise(
            fn, rest, x, index, target, t_index,
            concatenate=True, dtype=np.float64,
            meta=np.empty((0,) * len(rest), np.float64), token=f"{kind}-rows",
        )
        return vals.map_blocks(partial(_round_block, rdt=rdt), dtype=rdt,
                               meta=np.empty((0,) * len(rest), rdt))
    # one (1, ..., 4) partial per block of rows, then a tree sum
    blocks = da.blockwise(
        fn, rest + (x.ndim,), x, index, target, t_index,
        new_axes={x.ndim: _PARTS}, concatenate=True, dtype=np.float64,
        meta=np.empty((0,) * (len(rest) + 1), np.float64), token=f"{kind}-parts",
        adjust_chunks={i: 1 for i in rest},
    )
    parts = blocks.reshape(-1, _PARTS) if blocks.ndim > 2 else blocks
    tot = parts.sum(axis=0, keepdims=True)
    return tot.map_blocks(
        partial(_finish, reduction=reduction, rdt=rdt, z_loss=0.0),
        drop_axis=[0, 1], dtype=rdt, meta=np.empty((), rdt),
    )


def nll_loss(x, target, weight, ignore_index, reduction, rdt):
    return _loss("nll", x, target, weight, ignore_index, reduction, 0.0, rdt)


def cross_entropy(x, target, weight, ignore_index, reduction, eps, rdt):
    return _loss("ce", x, target, weight, ignore_index, reduction, eps, rdt)


def cross_entropy_probs(x, y, weight, reduction, eps, rdt):
    return _loss("probs", x, y, weight, -100, reduction, eps, rdt)


# --------------------------------------------------------------------------
# linear_cross_entropy
# --------------------------------------------------------------------------
def _block_problem(p, x, t):
    from .. import _linear_ce

    return _linear_ce.Problem(
        p.fn, "numpy", x, p.w, p.b, np.asarray(t), p.cw, p.dtype, "none",
        p.ignore_index, p.eps, p.z_loss, p.cap,
        (min(p.chunk[0], max(1, x.shape[0])), p.chunk[1]),
    )


@_one_kernel_thread
def _lce_block(x, t, *, p, per_row):
    from .. import _linear_ce

    bp = _block_problem(p, x, t)
    ops = _linear_ce.NumpyOps()
    ce, zl, saved = _linear_ce.forward_terms(bp, ops)
    if per_row:
        return ce if zl is None else ce + zl
    rows = saved.rows
    return _reduce_block(ce, rows.wt, zl if zl is not None else np.zeros(1),
                         rows.valid)


def _materialise(p):
    """The broadcast operands as numpy (weights are one chunk, read once)."""
    import dask

    w, b, cw = dask.compute(p.w, p.b, p.cw)
    p.w = np.asarray(w)
    p.b = None if b is None else np.asarray(b)
    p.cw = None if cw is None else np.asarray(cw)
    return p


def _inputs(p):
    import dask.array as da

    x = da.asarray(p.x)
    if x.numblocks[1] != 1:
        x = x.rechunk({1: -1})
    t = da.asarray(p.target).rechunk((x.chunks[0],))
    return x, t


def _lce_parts(p, x, t):
    """One ``(1, 4)`` block of partial sums per block of tokens."""
    import dask.array as da

    return da.blockwise(
        partial(_lce_block, p=p, per_row=False), (0, 2), x, (0, 1), t, (0,),
        new_axes={2: _PARTS}, adjust_chunks={0: 1}, concatenate=True,
        dtype=np.float64, meta=np.empty((0, 0), np.float64), token="lce-parts",
    )


def linear_cross_entropy(p):
    """Lazy loss of a validated dask :class:`~logsoftmax._linear_ce.Problem`."""
    import dask.array as da

    p = _materialise(p)
    x, t = _inputs(p)
    rdt = p.dtype
    if p.reduction == "none":
        vals = da.blockwise(
            partial(_lce_block, p=p, per_row=True), (0,), x, (0, 1), t, (0,),
            concatenate=True, dtype=np.float64, meta=np.empty((0,), np.float64),
            token="lce-rows",
        )
        return vals.map_blocks(partial(_round_block, rdt=rdt), dtype=rdt,
                               meta=np.empty((0,), rdt))
    parts = _lce_parts(p, x, t)
    tot = parts.sum(axis=0, keepdims=True)  # a tree of additions
    return tot.map_blocks(
        partial(_finish, reduction=p.reduction, rdt=rdt, z_loss=p.z_loss),
        drop_axis=[0, 1], dtype=rdt, meta=np.empty((), rdt),
    )


@_one_kernel_thread
def _lce_grad_block(x, t, d, tot, *, p, what):
    """One block's gradient pieces with the global ``"mean"`` scales."""
    from .. import _linear_ce

    bp = _block_problem(p, x, t)
    ops = _linear_ce.NumpyOps()
    rows = _linear_ce.rows_of(bp, ops)
    tot = np.asarray(tot).reshape(-1)
    if p.reduction == "mean":
        rows.cn = 1.0 / tot[1] if tot[1] else 0.0
        rows.cz = 1.0 / tot[3] if tot[3] else 0.0
    else:
        rows.cn = rows.cz = 1.0
    bp.reduction = "sum" if p.reduction != "none" else "none"
    _, _, saved = _linear_ce.forward_terms(bp, ops, rows=rows)
    saved.rows = rows
    dd = np.asarray(d, np.float64)
    gx, gw, gb = _linear_ce.backward(dd if p.reduction == "none" else dd.reshape(()),
                                     saved, ops, result=False)
    if what == "x":
        return gx
    if what == "w":
        return gw[None]
    return (np.zeros((1, p.v), gw.dtype) if gb is None else gb[None])


def linear_cross_entropy_grads(p, grad_loss):
    """Lazy ``(grad_input, grad_weight, grad_bias)`` for ``dloss = grad_loss``
    (0-d, or ``(N,)`` for ``"none"``), in the input's dtype."""
    import dask.array as da

    p = _materialise(p)
    x, t = _inputs(p)
    g = da.asarray(grad_loss)
    if p.reduction == "none":
        g = g.rechunk((x.chunks[0],))
        g_index = (0,)
    else:
        g_index = ()
    parts = _lce_parts(p, x, t)
    tot = parts.sum(axis=0)
    cdt = p.dtype if p.dtype == dtypes.float64 else dtypes.float32

    def piece(what, out_index, new_axes, adjust):
        return da.blockwise(
            partial(_lce_grad_block, p=p, what=what), out_index,
            x, (0, 1), t, (0,), g, g_index, tot, (2,),
            new_axes=new_axes, adjust_chunks=adjust, concatenate=True,
            dtype=cdt, meta=np.empty((0,) * len(out_index), cdt),
            token=f"lce-grad-{what}",
        )

    gx = piece("x", (0, 1), None, None)
    gw = piece("w", (0, 3, 1), {3: p.v}, {0: 1}).sum(axis=0)
    rnd = partial(_round_block, rdt=p.dtype)
    gx = gx.map_blocks(rnd, dtype=p.dtype)
    gw = gw.map_blocks(rnd, dtype=p.dtype)
    gb = None
    if p.b is not None:
        gb = piece("b", (0, 3), {3: p.v}, {0: 1}).sum(axis=0).map_blocks(
            rnd, dtype=p.dtype)
    return gx, gw, gb
