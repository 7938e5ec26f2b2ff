r"""The fused linear + cross-entropy plan: chunks, online merge, gradients.

One plan for every array library; each brings its *pieces* (an ``Ops``
object): a GEMM (the library's own BLAS) and three chunk kernels (numba for
numpy and CPU torch tensors, Triton for CUDA). The logits exist only one
chunk of ``rows x cols`` at a time.

Forward (per chunk ``(r0:r1, c0:c1)``, tokens outer, classes inner)::

    z   = x[r0:r1] @ W[c0:c1].T (+ b[c0:c1])       one GEMM, float32 for
                                                   f32/bf16/f16 (upcast per chunk)
    z   = softcap(z)                               in place
    (m, s, zt, zw)[r0:r1] <- merge(chunk stats)    online softmax, float64

then per row ``lse = m + log s`` and the loss (:func:`row_loss`).

Gradient of the loss w.r.t. a capped logit, per row (``d`` = dloss)::

    g_j = (A p_j - B [j == t] - E w_j) * (1 - (z_j / c)**2)
    B = (1 - eps) w_t cn d,   E = eps / V * cn d,   A = B + E W + 2 lambda cz d lse

(``cn = 1 / sum w_t``, ``cz = 1 / #valid`` for ``"mean"``, 1 otherwise),
written over the chunk in place, then ``grad_x[r] += g @ W[c]``,
``grad_W[c] += g.T @ x[r]``, ``grad_b[c] += sum_r g``: two GEMMs.

Two schedules, measured in docs/losses.md:

* **fused** (Liger's): when the chunk spans every class and the reduction
  is a scalar (``"mean"``/``"sum"``), the forward already knows each row's
  lse after its chunk, so it computes the gradients right away for
  ``d = 1``; the backward only scales them by ``dloss``. Three GEMMs in
  all, the floor.
* **recompute**: the forward keeps ``(m, log s)`` per row (``O(N)``); the
  backward recomputes each chunk's logits: four GEMMs. Used for
  ``"none"`` (a per-row ``dloss`` cannot be applied to ``grad_W``
  afterwards: Liger-Kernel #968) and whenever the forward did not ask for
  gradients.

Peak extra memory: one chunk (``rows * cols`` compute-type values), one
``cols x H`` / ``rows x H`` accumulation tile where the library cannot
accumulate in place, ``O(N)`` row state, and the gradients themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import dtypes
from ._api import _check_type, _check_value
from ._loss_checks import (
    check_class_targets,
    check_class_weight,
    check_fraction,
    check_ignore_index,
    check_nonnegative,
    check_reduction,
    check_softcap,
    dtype_of,
)
from .backends import is_cuda_array, is_dask_array

__all__ = [
    "Problem",
    "Saved",
    "check",
    "forward",
    "forward_terms",
    "backward",
    "rows_of",
    "default_chunk",
    "NumpyOps",
    "TorchOps",
    "ops_for",
]

#: the default chunk holds as many compute-type values as ``grad_W``
#: (``V x H``), within these bounds (32 and 128 MiB of float32): a chunk
#: the size of the gradient the call returns anyway keeps the peak at about
#: twice ``grad_W`` (PyTorch's chunked loss peaks there too) while giving
#: the GEMMs as many rows as that allows. Measured (docs/losses.md,
#: OpenBLAS, 2 threads, fwd + bwd / the three-GEMM floor): N=2048, H=512,
#: V=32000: 256 rows 1.5x at 94 MiB, 512 rows (the rule) 1.2x at 125 MiB,
#: 1024 rows 1.0x at 188 MiB; N=4096, H=1024: 1024 rows (the rule) 0.96x
#: at 266 MiB against PyTorch's chunked 290 MiB. ``chunk_size`` overrides.
CHUNK_MIN = 1 << 23
CHUNK_MAX = 1 << 25
#: fewest token rows per chunk: below this the GEMMs with the chunk's rows
#: as their short side stream W from memory for too little work
MIN_ROWS = 256


# --------------------------------------------------------------------------
# the validated problem
# --------------------------------------------------------------------------
@dataclass
class Problem:
    """A validated ``linear_cross_entropy`` call (arrays of one library)."""

    fn: str
    kind: str  # "numpy", "torch" (CPU tensors), "cuda", "dask"
    x: Any
    w: Any
    b: Any
    target: Any
    cw: Any
    dtype: np.dtype
    reduction: str
    ignore_index: int
    eps: float
    z_loss: float
    cap: float
    chunk: tuple[int, int]

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def h(self) -> int:
        return int(self.x.shape[1])

    @property
    def v(self) -> int:
        return int(self.w.shape[0])

    @property
    def cdt(self) -> np.dtype:
        return dtypes.float64 if self.dtype == dtypes.float64 else dtypes.float32


def _kind(a) -> str:
    if is_dask_array(a):
        return "dask"
    if type(a).__module__.startswith("torch"):
        return "cuda" if is_cuda_array(a) else "torch"
    return "cuda" if is_cuda_array(a) else "numpy"


def default_chunk(n: int, v: int, h: int = 0, budget: int | None = None) -> tuple[int, int]:
    """``(rows, cols)`` per chunk of a budget of ``V x H`` values (within
    ``[CHUNK_MIN, CHUNK_MAX]``; ``budget`` overrides): whole vocabulary rows
    when ``MIN_ROWS`` of them fit (the fused schedule needs whole rows),
    else ``MIN_ROWS`` rows of a vocabulary slice of ``budget / MIN_ROWS``."""
    if budget is None:
        budget = min(max(v * h, CHUNK_MIN), CHUNK_MAX)
    n, v = max(n, 1), max(v, 1)
    if v * MIN_ROWS <= budget:
        rows = max(MIN_ROWS, budget // v // 16 * 16)
        return min(rows, n), v
    return min(MIN_ROWS, n), max(1, min(v, budget // MIN_ROWS))


def _check_chunk(fn, chunk_size, n, v, h) -> tuple[int, int]:
    if chunk_size is None:
        return default_chunk(n, v, h)
    pair = chunk_size if isinstance(chunk_size, tuple) else (chunk_size, v)
    ok = len(pair) == 2 and all(
        isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c > 0
        for c in pair
    )
    _check_value(
        ok,
        lambda: f"{fn}: chunk_size={chunk_size!r}; expected None, a positive int "
        "(rows) or a (rows, cols) pair of positive ints",
    )
    return min(int(pair[0]), max(n, 1)), min(int(pair[1]), max(v, 1))


def check(fn, input, linear_weight, target, *, linear_bias=None, weight=None,
          reduction="mean", ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
          softcap=None, chunk_size=None) -> Problem:
    """Validate a ``linear_cross_entropy`` call (every check, before any work)."""
    kind = _kind(input)
    if kind == "numpy":
        input, linear_weight = np.asarray(input), np.asarray(linear_weight)
        target = np.asarray(target)
        linear_bias = None if linear_bias is None else np.asarray(linear_bias)
        weight = None if weight is None else np.asarray(weight)
    # the GEMMs need a float input: no integer promotion here
    dt = dtypes.check_supported(dtype_of(input), fn, "input")
    _check_value(
        len(input.shape) == 2,
        lambda: f"{fn}: input has shape {tuple(input.shape)}; expected (N, H)",
    )
    n, h = (int(d) for d in input.shape)
    _check_value(
        len(linear_weight.shape) == 2 and int(linear_weight.shape[1]) == h,
        lambda: f"{fn}: linear_weight has shape {tuple(linear_weight.shape)}; "
        f"expected (V, {h}) for an input of shape {(n, h)}",
    )
    v = int(linear_weight.shape[0])
    for name, arr, shape in (("linear_weight", linear_weight, None),
                             ("linear_bias", linear_bias, (v,))):
        if arr is None:
            continue
        adt = dtype_of(arr)
        _check_type(
            adt == dt,
            lambda: f"{fn}: {name} has dtype {adt} but input has dtype {dt}; "
            "expected the same dtype",
        )
        if shape is not None:
            _check_value(
                tuple(arr.shape) == shape,
                lambda: f"{fn}: {name} has shape {tuple(arr.shape)}, expected {shape}",
            )
    if weight is not None:
        _check_type(
            dtype_of(weight) == dt,
            lambda: f"{fn}: weight has dtype {dtype_of(weight)} but input has "
            f"dtype {dt}; expected the same dtype",
        )
        check_class_weight(fn, _NpDtype(weight, dt), v, dt)
    check_reduction(fn, reduction)
    ignore_index = check_ignore_index(fn, ignore_index)
    eps = check_fraction(fn, "label_smoothing", label_smoothing)
    zl = check_nonnegative(fn, "z_loss", z_loss)
    cap = check_softcap(fn, softcap)
    tdt = dtype_of(target)
    _check_type(
        tdt.kind in "iu",
        lambda: f"{fn}: target has dtype {tdt}; expected an integer dtype (class "
        "indices)",
    )
    t_check = target if kind in ("numpy", "dask") else _host(target)
    check_class_targets(fn, t_check, (n,), v, ignore_index, eager=kind != "dask")
    return Problem(fn, kind, input, linear_weight, linear_bias, target, weight, dt,
                   reduction, ignore_index, eps, zl, cap,
                   _check_chunk(fn, chunk_size, n, v, h))


class _NpDtype:
    """Shape/dtype stand-in so the shared weight check sees numpy dtypes."""

    def __init__(self, a, dt):
        self.shape, self.dtype = tuple(a.shape), dt


def _host(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


# --------------------------------------------------------------------------
# pieces: numpy (numba kernels, numpy's BLAS)
# --------------------------------------------------------------------------
class NumpyOps:
    """numpy arrays: ``np.matmul`` (OpenBLAS) and the numba chunk kernels."""

    xp = np

    def __init__(self):
        from ._ce_numpy import storage
        from .backends.cpu import losses

        self.k, self._storage = losses, storage

    def bind(self, p):
        """Called with the problem before any work (CUDA: its device)."""

    # arrays
    def empty(self, shape, dt):
        return np.empty(shape, dt)

    def zeros(self, shape, dt):
        return np.zeros(shape, dt)

    def chunk(self, buf, rows, cols):
        return buf[: rows * cols].reshape(rows, cols)

    def to_host(self, a):
        return np.asarray(a)

    def target_int64(self, t):
        return np.ascontiguousarray(t, np.int64)

    def compute(self, a, cdt):
        """``a`` in the compute dtype (a per-chunk upcast for bf16/f16)."""
        return a if a.dtype == cdt else a.astype(cdt)

    def result(self, a, dt):
        """Round a compute-type array once to the input dtype."""
        return a if a.dtype == dt else dtypes.round_to(a, dt)

    def round_loss(self, loss, dt):
        return np.asarray(dtypes.round_to(np.asarray(loss, np.float64), dt))

    def as_f64(self, a):
        return np.asarray(a, np.float64)

    def cast(self, a, dt):
        return np.asarray(a).astype(dt, copy=False)

    def full_f64(self, n, value):
        return np.full(n, value)

    def zeros_f64(self, n):
        return np.zeros(n)

    def ones1(self, dt):
        return np.ones(1, dt)

    def fill_zero(self, a):
        a[...] = 0

    def scale_(self, a, d):
        if d != 1.0:
            a *= a.dtype.type(d)
        return a

    # GEMMs
    def logits(self, xr, wc, bc, out):
        np.matmul(xr, wc.T, out=out)
        if bc is not None:
            out += bc

    def acc_gx(self, dst, g, wc, first):
        # as dst.T = wc.T @ g.T: OpenBLAS ran g @ wc (a short-and-wide g, inner
        # dimension V) 16x slower at 64 rows (28 s vs 1.7 s summed over
        # N = 2048, H = 512, V = 32000; benchmarks/bench_losses.py)
        prod = np.matmul(wc.T, g.T)
        if first:
            dst[...] = prod.T
        else:
            dst += prod.T

    def acc_gw(self, dst, g, xr, first):
        if first:
            np.matmul(g.T, xr, out=dst)
        else:
            _gemm_acc(dst, g.T, xr)

    def acc_gb(self, dst, g, first):
        if first:
            np.sum(g, axis=0, out=dst)
        else:
            dst += g.sum(axis=0)

    # kernels
    def stats(self, z, cap, c0, target, cw, has_w, w_seen, w_chunk, smooth,
              m, s, zt, zw):
        if cap:
            self.k.cap_stats_rows(z, cap, c0, target, cw, has_w, w_seen, w_chunk,
                                  smooth, m, s, zt, zw)
        else:
            self.k.stats_rows(self._storage(z), c0, target, cw, has_w, w_seen,
                              w_chunk, smooth, m, s, zt, zw)

    def cap(self, z, cap):
        self.k.cap_rows(z, cap)

    def grad(self, z, c0, target, cw, has_w, a, b, e, m, log_s, cap):
        self.k.grad_rows(z, c0, target, cw, has_w, a, b, e, m, log_s, cap)


def _fortran(a: np.ndarray):
    """``(array, trans)`` for BLAS: a Fortran-ordered operand and whether it is
    to be transposed, for ``a`` C-contiguous (``a.T`` is Fortran) or the
    transpose of a C-contiguous array (``a`` itself is Fortran)."""
    if a.flags.c_contiguous:
        return a.T, 1
    if a.flags.f_contiguous:
        return a, 0
    return np.ascontiguousarray(a).T, 1


def _gemm_acc(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``c += a @ b`` in place (``c`` C-contiguous, float32/float64).

    With SciPy, one BLAS ``gemm`` with ``beta = 1`` on ``c``'s memory (viewed
    as the Fortran ``c.T = b.T @ a.T``): no temporary, no second pass over
    ``c``. Without it, numpy's ``matmul`` into a temporary, added in row
    tiles of at most 2**18 elements (1 MiB f32) so the extra memory stays
    bounded. Measured in docs/losses.md."""
    blas = _scipy_blas()
    if blas is not None and c.flags.c_contiguous:
        gemm = blas.sgemm if c.dtype == np.float32 else blas.dgemm
        bt, tb = _fortran(b)  # b.T as (Fortran operand, transposed?)
        at, ta = _fortran(a)
        gemm(1.0, bt, at, beta=1.0, c=c.T, overwrite_c=True,
             trans_a=1 - tb, trans_b=1 - ta)
        return
    step = max(1, (1 << 18) // max(1, c.shape[1]))
    for i in range(0, c.shape[0], step):
        c[i:i + step] += a[i:i + step] @ b


_BLAS: list = []


def _scipy_blas():
    if not _BLAS:
        try:
            from scipy.linalg import blas
        except ImportError:  # optional: numpy's matmul + tiled add instead
            blas = None
        _BLAS.append(blas)
    return _BLAS[0]


class TorchOps(NumpyOps):
    """CPU torch tensors: torch's BLAS (``mm``/``addmm`` accumulate in place)
    for the GEMMs, the numba kernels on zero-copy numpy views of the chunk;
    per-row bookkeeping stays in float64 numpy arrays."""

    def __init__(self):
        super().__init__()
        import torch

        self.torch = torch
        self._tdt = {
            dtypes.float32: torch.float32,
            dtypes.float64: torch.float64,
            dtypes.bfloat16: torch.bfloat16,
            dtypes.float16: torch.float16,
        }

    @staticmethod
    def _np(a):
        return a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a

    def empty(self, shape, dt):
        return self.torch.empty(shape, dtype=self._tdt[np.dtype(dt)])

    def zeros(self, shape, dt):
        return self.torch.zeros(shape, dtype=self._tdt[np.dtype(dt)])

    def chunk(self, buf, rows, cols):
        return buf[: rows * cols].view(rows, cols)

    def to_host(self, a):
        return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)

    def as_f64(self, a):
        if hasattr(a, "detach"):
            return a.detach().to(self.torch.float64).cpu().numpy()
        return np.asarray(a, np.float64)

    def target_int64(self, t):
        return np.ascontiguousarray(self.to_host(t), np.int64)

    def compute(self, a, cdt):
        tdt = self._tdt[np.dtype(cdt)]
        return a if a.dtype == tdt else a.to(tdt)

    def result(self, a, dt):
        tdt = self._tdt[np.dtype(dt)]
        return a if a.dtype == tdt else a.to(tdt)  # one round-to-nearest-even

    def round_loss(self, loss, dt):
        r = np.asarray(dtypes.round_to(np.asarray(loss, np.float64), dt))
        wide = r if r.dtype == np.float64 else r.astype(np.float32)  # exact
        return self.torch.from_numpy(np.array(wide)).to(self._tdt[np.dtype(dt)])

    def fill_zero(self, a):
        a.zero_()

    def scale_(self, a, d):
        return a if d == 1.0 else a.mul_(d)

    def logits(self, xr, wc, bc, out):
        if bc is None:
            self.torch.mm(xr, wc.t(), out=out)
        else:
            self.torch.addmm(bc, xr, wc.t(), out=out)

    def acc_gx(self, dst, g, wc, first):
        if first:
            self.torch.mm(g, wc, out=dst)
        else:
            dst.addmm_(g, wc)

    def acc_gw(self, dst, g, xr, first):
        if first:
            self.torch.mm(g.t(), xr, out=dst)
        else:
            dst.addmm_(g.t(), xr)

    def acc_gb(self, dst, g, first):
        if first:
            self.torch.sum(g, 0, out=dst)
        else:
            dst += g.sum(0)

    def stats(self, z, cap, c0, target, cw, has_w, w_seen, w_chunk, smooth,
              m, s, zt, zw):
        super().stats(z.numpy(), cap, c0, target, self._np(cw), has_w, w_seen,
                      w_chunk, smooth, m, s, zt, zw)

    def cap(self, z, cap):
        super().cap(z.numpy(), cap)

    def grad(self, z, c0, target, cw, has_w, a, b, e, m, log_s, cap):
        super().grad(z.numpy(), c0, target, self._np(cw), has_w, a, b, e, m, log_s,
                     cap)


def ops_for(kind: str):
    """The host-side pieces: ``"numpy"`` or ``"torch"`` (CPU tensors). CUDA
    pieces live in :mod:`.backends.cuda.losses` (the front door's
    :func:`logsoftmax._losses.ops_for` picks them)."""
    if kind == "numpy":
        return NumpyOps()
    if kind == "torch":
        return TorchOps()
    raise ValueError(f"{kind!r} arrays: pass the pieces (logsoftmax._losses.ops_for)")


# --------------------------------------------------------------------------
# per-row bookkeeping (float64, on the host for numpy/torch, on the device
# for CUDA: written with the array library's own operators)
# --------------------------------------------------------------------------
@dataclass
class Rows:
    """Per-row targets, weights and reduction scales of a problem."""

    target: Any  # int64 (N,)
    valid: Any  # bool (N,)
    wt: Any  # float64 (N,): w_t, 0 where ignored
    big_w: float  # sum of the class weights (V without weights)
    cn: float  # scale of the cross-entropy part (1 / sum w_t for "mean")
    cz: float  # scale of the z-loss part (1 / #valid for "mean")
    denom: float
    count: float


def rows_of(p: Problem, ops) -> Rows:
    xp = ops.xp
    t = ops.target_int64(p.target)
    valid = t != p.ignore_index
    safe = xp.where(valid, t, 0)
    if p.cw is None:
        wt = ops.as_f64(valid)
        big_w = float(p.v)
    else:
        cw64 = ops.as_f64(p.cw)
        wt = xp.where(valid, cw64[safe], 0.0)
        big_w = float(cw64.sum())
    denom, count = float(wt.sum()), float(ops.as_f64(valid).sum())
    if p.reduction == "mean":
        cn = 1.0 / denom if denom else 0.0
        cz = 1.0 / count if count else 0.0
    else:
        cn = cz = 1.0
    return Rows(t, valid, wt, big_w, cn, cz, denom, count)


def row_coefficients(p: Problem, rows: Rows, sl, lse, d, ops):
    """``(A, B, E)`` of the gradient for the rows ``sl`` (module docstring),
    in the compute dtype; ``d``: dloss (a float, or float64 per row)."""
    xp = ops.xp
    valid = ops.as_f64(rows.valid[sl])
    b = (1.0 - p.eps) * rows.cn * rows.wt[sl] * d
    e = (p.eps / p.v) * rows.cn * valid * d
    a = b + e * rows.big_w
    if p.z_loss:
        a = a + xp.where(rows.valid[sl], 2.0 * p.z_loss * rows.cz * lse * d, 0.0)
    return ops.cast(a, p.cdt), ops.cast(b, p.cdt), ops.cast(e, p.cdt)


def row_loss(p: Problem, rows: Rows, m, s, zt, zw, ops):
    """Per-row ``(cross-entropy, z-loss)`` terms (float64, 0 where ignored).

    The cross-entropy is ``(1 - eps) w_t ((m - z_t) + log s) + eps/V (W log s
    + zw)``: no ``lse - z_t`` cancellation, so logits that share a large
    offset lose nothing (PyTorch #195829). The smoothing term is left out
    when ``eps == 0``, as PyTorch does.
    """
    xp = ops.xp
    log_s = xp.log(s)
    ce = (1.0 - p.eps) * rows.wt * ((m - zt) + log_s)
    if p.eps:
        ce = ce + (p.eps / p.v) * (rows.big_w * log_s + zw)
    ce = xp.where(rows.valid, ce, 0.0)
    if not p.z_loss:
        return ce, None
    lse = m + log_s
    return ce, xp.where(rows.valid, p.z_loss * lse * lse, 0.0)


def reduce_loss(p: Problem, rows: Rows, ce, zl):
    """PyTorch's reductions with API.md's z-loss rule: ``"mean"`` divides the
    cross-entropy by ``sum w_t`` and the z-loss by the number of valid rows
    (0/0 is NaN, as PyTorch)."""
    if p.reduction == "none":
        return ce if zl is None else ce + zl
    total = float(ce.sum())
    extra = 0.0 if zl is None else float(zl.sum())
    if p.reduction == "sum":
        return total + extra
    mean = total / rows.denom if rows.denom else math.nan
    if zl is not None:
        mean += extra / rows.count if rows.count else math.nan
    return mean


# --------------------------------------------------------------------------
# forward and backward
# --------------------------------------------------------------------------
@dataclass
class Saved:
    """What the backward needs: per-row ``(m, log s)`` and the problem; with
    the fused schedule also the gradients for ``dloss = 1``."""

    problem: Problem
    rows: Rows
    ops: Any = None
    m: Any = None
    log_s: Any = None
    grads: tuple | None = field(default=None)


def _chunks(p: Problem):
    rows, cols = p.chunk
    for r0 in range(0, p.n, rows):
        r1 = min(p.n, r0 + rows)
        for c0 in range(0, p.v, cols):
            yield r0, r1, c0, min(p.v, c0 + cols)


def _class_weights(p: Problem, ops):
    if p.cw is None:
        return ops.ones1(p.cdt), False
    return ops.compute(p.cw, p.cdt), True


def forward(p: Problem, grads: bool = False, ops=None):
    """The loss, and what its backward needs.

    Args:
      p: a validated :class:`Problem`.
      grads: compute the gradients now (for ``dloss = 1``) when the fused
        schedule applies (scalar reduction, chunks of whole rows).
      ops: the pieces (default: by ``p.kind``).

    Returns:
      ``(loss, saved)``: the loss in the input's dtype (0-d, or ``(N,)``),
      and a :class:`Saved` for :func:`backward`.
    """
    ops = ops or ops_for(p.kind)
    ce, zl, saved = forward_terms(p, ops, grads=grads)
    loss = reduce_loss(p, saved.rows, ce, zl)
    return ops.round_loss(loss, p.dtype), saved


def forward_terms(p: Problem, ops, *, grads: bool = False, rows: Rows | None = None):
    """The chunk pass: per-row float64 ``(ce, zl)`` terms (``zl`` None without
    z-loss) and the :class:`Saved` state. ``rows`` may carry scales other
    than this problem's own (dask: the global ``"mean"`` denominators)."""
    ops.bind(p)
    rows = rows or rows_of(p, ops)
    n, v, cdt = p.n, p.v, p.cdt
    r_chunk, c_chunk = p.chunk
    fused = grads and p.reduction != "none" and c_chunk >= v
    cw, has_w = _class_weights(p, ops)
    smooth = p.eps != 0.0
    m = ops.full_f64(n, -math.inf)
    s, zt, zw = ops.zeros_f64(n), ops.zeros_f64(n), ops.zeros_f64(n)
    tgt = rows.target
    acc = _GradAcc(p, ops) if fused else None
    buf = ops.empty((min(r_chunk, max(n, 1)) * min(c_chunk, max(v, 1)),), cdt)
    w_cum = _weight_prefix(p, ops, cw, has_w)
    cache: dict = {}
    for r0, r1, c0, c1 in _chunks(p):
        z = ops.chunk(buf, r1 - r0, c1 - c0)  # contiguous, for BLAS
        xr = ops.compute(p.x[r0:r1], cdt)
        wc = _weight_chunk(p, ops, c0, c1, cache)
        bc = None if p.b is None else ops.compute(p.b[c0:c1], cdt)
        ops.logits(xr, wc, bc, z)
        ops.stats(z, p.cap, c0, tgt[r0:r1], cw, has_w, w_cum(c0), w_cum(c1) - w_cum(c0),
                  smooth, m[r0:r1], s[r0:r1], zt[r0:r1], zw[r0:r1])
        if fused:
            sl = slice(r0, r1)
            log_s = ops.xp.log(s[sl])
            lse = m[sl] + log_s
            a, b, e = row_coefficients(p, rows, sl, lse, 1.0, ops)
            ops.grad(z, c0, tgt[sl], cw, has_w, a, b, e, ops.cast(m[sl], cdt),
                     ops.cast(log_s, cdt), p.cap)
            acc.add(z, xr, wc, r0, r1, c0, c1)
    ce, zl = row_loss(p, rows, m, s, zt, zw, ops)
    saved = Saved(p, rows, ops, m, ops.xp.log(s))
    if fused:
        saved.grads = acc.finish()
    return ce, zl, saved


def _weight_chunk(p: Problem, ops, c0: int, c1: int, cache: dict):
    """``W[c0:c1]`` in the compute dtype. bfloat16/float16 weights are upcast
    one class chunk at a time; when one chunk spans every class (token
    chunking) the upcast copy is made once and reused by every token chunk
    (one ``V x H`` float32 array, the size of ``grad_W``'s accumulator)."""
    if c0 == 0 and c1 == p.v and p.v in cache:
        return cache[p.v]
    wc = ops.compute(p.w[c0:c1], p.cdt)
    if c0 == 0 and c1 == p.v:
        cache[p.v] = wc
    return wc


def _weight_prefix(p, ops, cw, has_w):
    """``W(c) = sum of the class weights below class c`` (a closure over a
    host-side float64 prefix sum; only label smoothing needs it)."""
    if p.eps == 0.0:
        return lambda c: 0.0
    if not has_w:
        return lambda c: float(c)
    pre = np.concatenate([[0.0], np.cumsum(ops.to_host(ops.as_f64(p.cw)))])
    return lambda c: float(pre[c])


class _GradAcc:
    """Accumulates grad_x, grad_W, grad_b (compute dtype) chunk by chunk."""

    def __init__(self, p: Problem, ops):
        self.p, self.ops = p, ops
        self.gx = ops.empty((p.n, p.h), p.cdt)
        self.gw = ops.empty((p.v, p.h), p.cdt)
        self.gb = None if p.b is None else ops.empty((p.v,), p.cdt)

    def add(self, g, xr, wc, r0, r1, c0, c1):
        """Add chunk ``(r0:r1, c0:c1)``. :func:`_chunks` walks token rows
        outside and classes inside, so a row block meets its first chunk at
        ``c0 == 0`` and a class block at ``r0 == 0``: those write, the rest
        accumulate."""
        ops = self.ops
        ops.acc_gx(self.gx[r0:r1], g, wc, c0 == 0)
        ops.acc_gw(self.gw[c0:c1], g, xr, r0 == 0)
        if self.gb is not None:
            ops.acc_gb(self.gb[c0:c1], g, r0 == 0)

    def finish(self):
        if self.p.n == 0:  # no chunk ran: the gradients are zero
            self.ops.fill_zero(self.gw)
            if self.gb is not None:
                self.ops.fill_zero(self.gb)
        return self.gx, self.gw, self.gb


def backward(grad_loss, saved: Saved, ops=None, *, result: bool = True):
    """Gradients ``(grad_input, grad_weight, grad_bias)`` in the input's dtype
    (``grad_bias`` None without a bias).

    ``grad_loss``: 0-d (scalar reductions) or ``(N,)`` (``"none"``). With
    precomputed gradients (fused schedule) they are scaled by it; otherwise
    every chunk's logits are recomputed (four GEMMs in all). ``result=False``
    returns the compute-dtype accumulators unrounded (dask sums them first).
    """
    p = saved.problem
    ops = ops or saved.ops
    if saved.grads is not None:
        # consumed in place: a second backward (retain_graph) recomputes
        grads, saved.grads = saved.grads, None
        d = float(ops.to_host(ops.as_f64(grad_loss)))
        grads = tuple(None if g is None else ops.scale_(g, d) for g in grads)
    else:
        grads = _recompute_grads(grad_loss, saved, ops)
    if not result:
        return grads
    return tuple(None if g is None else ops.result(g, p.dtype) for g in grads)


def _recompute_grads(grad_loss, saved: Saved, ops):
    """The recompute schedule's backward: every chunk's logits again."""
    p = saved.problem
    rows = saved.rows
    cdt = p.cdt
    d_all = ops.as_f64(grad_loss)
    per_row = p.reduction == "none"
    if not per_row:
        d_all = float(ops.to_host(d_all))
    cw, has_w = _class_weights(p, ops)
    acc = _GradAcc(p, ops)
    r_chunk, c_chunk = p.chunk
    buf = ops.empty((min(r_chunk, max(p.n, 1)) * min(c_chunk, max(p.v, 1)),), cdt)
    m_c, ls_c = ops.cast(saved.m, cdt), ops.cast(saved.log_s, cdt)
    lse = saved.m + saved.log_s
    cache: dict = {}
    for r0, r1, c0, c1 in _chunks(p):
        sl = slice(r0, r1)
        z = ops.chunk(buf, r1 - r0, c1 - c0)  # contiguous, for BLAS
        xr = ops.compute(p.x[r0:r1], cdt)
        wc = _weight_chunk(p, ops, c0, c1, cache)
        bc = None if p.b is None else ops.compute(p.b[c0:c1], cdt)
        ops.logits(xr, wc, bc, z)
        if p.cap:
            ops.cap(z, p.cap)
        d = d_all[sl] if per_row else d_all
        a, b, e = row_coefficients(p, rows, sl, lse[sl], d, ops)
        ops.grad(z, c0, rows.target[sl], cw, has_w, a, b, e, m_c[sl], ls_c[sl], p.cap)
        acc.add(z, xr, wc, r0, r1, c0, c1)
    return acc.finish()
