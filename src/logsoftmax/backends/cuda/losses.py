r"""The fused linear + cross-entropy on CUDA: cuBLAS GEMMs (torch) per chunk,
Triton kernels for the online logsumexp and the in-place logit gradient.

The plan (chunks, coefficients, reductions) is :mod:`logsoftmax._linear_ce`;
this module brings its pieces (:class:`CudaOps`) for torch CUDA tensors, so
the per-row state (``m``, ``s``, ``zt``, ``zw``: float64) stays on the
device and nothing but the final scalar crosses to the host.

Kernels (one program per row of the chunk, columns in ``BLOCK`` tiles):

* :func:`stats_kernel`: optional softcap written back in place, then the
  *online* logsumexp: ``BLOCK`` lanes each keep a running max ``m_l`` and a
  sum ``s_l`` rescaled by ``exp(m_l_old - m_l_new)`` when the max grows
  (float32 terms, one pass over the chunk); the lanes combine as
  ``M = max m_l, S = sum s_l e^{m_l - M}`` (float64), and the row's state
  merges with the chunk's ``(M, S)`` by the same rule. The target logit is
  picked in the same pass; the smoothing sum ``sum w (m - z)`` is kept per
  lane relative to the lane max (float64), as in the CPU kernels.
* :func:`grad_kernel`: ``g = (a p - b [j == t] - e w) (1 - (z / c)**2)``,
  ``p = exp((z - m) - log s)``, written over the chunk.

Run on a GPU by ``benchmarks/gpu_check.sh``; tested in Triton's interpreter
(``TRITON_INTERPRET=1``, CPU tensors) by ``tests/test_losses_cuda.py``.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ..._linear_ce import TorchOps

__all__ = [
    "CudaOps",
    "stats_kernel",
    "grad_kernel",
    "cap_kernel",
    "BLOCK",
    "cross_entropy",
    "cross_entropy_probs",
    "nll_loss",
]

#: columns per tile (lanes of the online sums): 1024 float32 = 4 KiB per row
#: tile; each lane sums V / 1024 terms (31 at V = 32000)
BLOCK = 1024


@triton.jit
def _capped(z, cap):
    """``cap * tanh(z / cap)`` evaluated in float64 (series near 0), as float32."""
    u = z.to(tl.float64) / cap
    a = tl.minimum(tl.abs(u), 20.0)
    e = tl.exp(2.0 * a)
    big = (e - 1.0) / (e + 1.0)
    a2 = a * a
    small = a * (1.0 - a2 * (1.0 / 3.0 - a2 * (2.0 / 15.0 - a2 * (17.0 / 315.0))))
    t = tl.where(a < 0.01, small, big)
    t = tl.where(u < 0.0, -t, t)
    return (cap * t).to(z.dtype)


@triton.jit
def stats_kernel(z_ptr, stride_z, n, c0, tgt_ptr, cw_ptr, w_seen, w_chunk, cap,
                 m_ptr, s_ptr, zt_ptr, zw_ptr,
                 HAS_W: tl.constexpr, SMOOTH: tl.constexpr, CAP: tl.constexpr,
                 BLOCK: tl.constexpr, ACC: tl.constexpr = tl.float32):
    r = tl.program_id(0)
    row = z_ptr + r.to(tl.int64) * stride_z
    t = tl.load(tgt_ptr + r) - c0
    lanes = tl.arange(0, BLOCK)
    m_l = tl.full([BLOCK], float("-inf"), ACC)
    s_l = tl.zeros([BLOCK], ACC)
    g_l = tl.zeros([BLOCK], tl.float64)  # sum w (m_l - z), relative to m_l
    w_l = tl.zeros([BLOCK], tl.float64)  # sum of w seen by the lane
    zt = tl.zeros([BLOCK], tl.float64)
    for k0 in range(0, n, BLOCK):
        cols = k0 + lanes
        mask = cols < n
        z = tl.load(row + cols, mask=mask, other=float("-inf")).to(ACC)
        if CAP:
            z = _capped(z, cap)
            tl.store(row + cols, z, mask=mask)
            z = tl.where(mask, z, float("-inf"))  # padding must not win the max
        m_new = tl.maximum(m_l, z)
        sh = tl.where(m_new == float("-inf"), 0.0, m_new)
        s_l = s_l * tl.exp(m_l - sh) + tl.exp(z - sh)
        if SMOOTH:
            if HAS_W:
                w = tl.load(cw_ptr + c0 + cols, mask=mask, other=0.0).to(tl.float64)
            else:
                w = tl.where(mask, 1.0, 0.0).to(tl.float64)
            grow = tl.where(w_l != 0.0, (m_new - m_l).to(tl.float64) * w_l, 0.0)
            gap = tl.where(mask, w * (m_new.to(tl.float64) - z.to(tl.float64)), 0.0)
            g_l = g_l + grow + gap
            w_l = w_l + w
        zt += tl.where(cols == t, z.to(tl.float64), 0.0)
        m_l = m_new
    mc = tl.max(m_l, axis=0)
    shc = tl.where(mc == float("-inf"), 0.0, mc)
    sc = tl.sum(s_l.to(tl.float64) * tl.exp((m_l - shc).to(tl.float64)), axis=0)
    # merge with the row's state
    m_old = tl.load(m_ptr + r)
    s_old = tl.load(s_ptr + r)
    mcd = mc.to(tl.float64)
    big = tl.maximum(m_old, mcd)
    fa = tl.where(m_old == big, 1.0, tl.exp(m_old - big))
    fb = tl.where(mcd == big, 1.0, tl.exp(mcd - big))
    s_new = tl.where(big == float("-inf"), s_old + sc, s_old * fa + sc * fb)
    tl.store(s_ptr + r, s_new)
    tl.store(m_ptr + r, big)
    if (t >= 0) & (t < n):
        tl.store(zt_ptr + r, tl.sum(zt, axis=0))
    if SMOOTH:
        gap = tl.sum(g_l + tl.where(w_l != 0.0, (mcd - m_l.to(tl.float64)) * w_l, 0.0),
                     axis=0)
        old = tl.load(zw_ptr + r)
        old += tl.where(w_seen != 0.0, (big - m_old) * w_seen, 0.0)
        gap += tl.where(w_chunk != 0.0, (big - mcd) * w_chunk, 0.0)
        tl.store(zw_ptr + r, old + gap)


@triton.jit
def cap_kernel(z_ptr, stride_z, n, cap, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    row = z_ptr + r.to(tl.int64) * stride_z
    for k0 in range(0, n, BLOCK):
        cols = k0 + tl.arange(0, BLOCK)
        mask = cols < n
        z = tl.load(row + cols, mask=mask, other=0.0)
        tl.store(row + cols, _capped(z, cap), mask=mask)


@triton.jit
def grad_kernel(z_ptr, stride_z, n, c0, tgt_ptr, cw_ptr, a_ptr, b_ptr, e_ptr,
                m_ptr, ls_ptr, inv_cap,
                HAS_W: tl.constexpr, CAP: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    row = z_ptr + r.to(tl.int64) * stride_z
    t = tl.load(tgt_ptr + r) - c0
    a = tl.load(a_ptr + r)
    b = tl.load(b_ptr + r)
    e = tl.load(e_ptr + r)
    m = tl.load(m_ptr + r)
    ls = tl.load(ls_ptr + r)
    dead = (a == 0.0) & (b == 0.0) & (e == 0.0)
    for k0 in range(0, n, BLOCK):
        cols = k0 + tl.arange(0, BLOCK)
        mask = cols < n
        z = tl.load(row + cols, mask=mask, other=0.0)
        p = tl.exp((z - m) - ls)
        if HAS_W:
            w = tl.load(cw_ptr + c0 + cols, mask=mask, other=0.0)
        else:
            w = 1.0
        g = a * p - tl.where(cols == t, b, 0.0) - e * w
        if CAP:
            q = z * inv_cap
            g = g * (1.0 - q * q)
        g = tl.where(dead, 0.0, g)
        tl.store(row + cols, g, mask=mask)


class CudaOps(TorchOps):
    """Pieces for torch CUDA tensors (also CPU tensors under
    ``TRITON_INTERPRET=1``, for the tests): torch GEMMs, Triton kernels,
    per-row state as float64 tensors on the device."""

    xp = torch

    def __init__(self, device=None):
        super().__init__()
        self.device = device

    def bind(self, p):
        self.device = p.x.device

    def empty(self, shape, dt):
        return torch.empty(shape, dtype=self._tdt[np.dtype(dt)], device=self.device)

    def zeros(self, shape, dt):
        return torch.zeros(shape, dtype=self._tdt[np.dtype(dt)], device=self.device)

    def full_f64(self, n, value):
        return torch.full((n,), value, dtype=torch.float64, device=self.device)

    def zeros_f64(self, n):
        return torch.zeros(n, dtype=torch.float64, device=self.device)

    def ones1(self, dt):
        return torch.ones(1, dtype=self._tdt[np.dtype(dt)], device=self.device)

    def as_f64(self, a):
        if isinstance(a, torch.Tensor):
            return a.detach().to(device=self.device, dtype=torch.float64)
        return torch.as_tensor(np.asarray(a, np.float64), device=self.device)

    def cast(self, a, dt):
        return a.to(self._tdt[np.dtype(dt)])

    def target_int64(self, t):
        return t.detach().to(device=self.device, dtype=torch.int64).contiguous()

    def round_loss(self, loss, dt):
        host = loss.detach().cpu().numpy() if isinstance(loss, torch.Tensor) else loss
        return super().round_loss(host, dt).to(self.device)

    def stats(self, z, cap, c0, target, cw, has_w, w_seen, w_chunk, smooth,
              m, s, zt, zw):
        rows, n = z.shape
        if rows == 0:
            return
        stats_kernel[(rows,)](
            z, z.stride(0), n, c0, target, cw, float(w_seen), float(w_chunk),
            float(cap or 1.0), m, s, zt, zw,
            HAS_W=bool(has_w), SMOOTH=bool(smooth), CAP=bool(cap), BLOCK=BLOCK,
            ACC=tl.float64 if z.dtype == torch.float64 else tl.float32,
        )

    def cap(self, z, cap):
        rows, n = z.shape
        if rows:
            cap_kernel[(rows,)](z, z.stride(0), n, float(cap), BLOCK=BLOCK)

    def grad(self, z, c0, target, cw, has_w, a, b, e, m, log_s, cap):
        rows, n = z.shape
        if rows == 0:
            return
        grad_kernel[(rows,)](
            z, z.stride(0), n, c0, target, cw, a, b, e, m, log_s,
            0.0 if not cap else 1.0 / cap,
            HAS_W=bool(has_w), CAP=bool(cap), BLOCK=BLOCK,
        )



# --------------------------------------------------------------------------
# cross_entropy / nll_loss on CUDA arrays (the front door's "cuda" pieces)
# --------------------------------------------------------------------------
def _to_torch(a):
    """A torch view of ``a`` (torch tensors as they are; CUDA arrays through
    DLPack; numpy arrays, e.g. under ``use_backend("cuda")`` in the
    interpreter, through ``from_numpy``, bfloat16 via its uint16 bits)."""
    if isinstance(a, torch.Tensor):
        return a
    if isinstance(a, np.ndarray):
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(
                torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a))
    return torch.from_dlpack(a)


def _like_input(result, x):
    """The result in the caller's array type (numpy in, numpy out)."""
    return result.detach().cpu().numpy() if isinstance(x, np.ndarray) else result


def _rows(t, axis):
    """``(R, C)`` rows with unit class stride (a view for 1-D/2-D input)."""
    c = t.shape[axis]
    rows = t[None] if t.ndim == 1 else t.movedim(1, -1).reshape(-1, c)
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _reduce(vals, reduction, denom, shape, rdt, x):
    if reduction == "none":
        r = vals.reshape(shape)
    elif reduction == "sum":
        r = vals.sum()
    else:
        r = vals.sum() / denom
    ops = CudaOps(vals.device)
    return _like_input(ops.round_loss(r, rdt), x)


def _targets(target, weight, ignore_index, device):
    t = _to_torch(target).to(device=device, dtype=torch.int64).reshape(-1)
    valid = t != ignore_index
    safe = torch.where(valid, t, 0)
    if weight is None:
        wt = valid.to(torch.float64)
    else:
        wt = torch.where(valid, _to_torch(weight).to(device, torch.float64)[safe], 0.0)
    return t.contiguous(), valid, safe, wt


def cross_entropy(x, target, weight, ignore_index, reduction, eps, rdt):
    """Class-index cross-entropy: :func:`stats_kernel` over the rows (one
    chunk per row), then PyTorch's formula in float64 on the device."""
    xt = _to_torch(x)
    axis = 1 if xt.ndim > 1 else 0
    c = int(xt.shape[axis])
    rows = _rows(xt, axis)
    dev = rows.device
    t, valid, _, wt = _targets(target, weight, ignore_index, dev)
    n = rows.shape[0]
    ops = CudaOps(dev)
    cdt = torch.float64 if xt.dtype == torch.float64 else torch.float32
    cw = (torch.ones(1, dtype=cdt, device=dev) if weight is None
          else _to_torch(weight).to(dev, cdt).contiguous())
    big_w = float(c) if weight is None else float(cw.double().sum())
    m, s = ops.full_f64(n, float("-inf")), ops.zeros_f64(n)
    zt, zw = ops.zeros_f64(n), ops.zeros_f64(n)
    if n and c:
        stats_kernel[(n,)](
            rows, rows.stride(0), c, 0, t, cw, 0.0, big_w, 1.0, m, s, zt, zw,
            HAS_W=weight is not None, SMOOTH=eps != 0.0, CAP=False, BLOCK=BLOCK,
            ACC=tl.float64 if cdt == torch.float64 else tl.float32,
        )
    log_s = torch.log(s)
    vals = (1.0 - eps) * wt * ((m - zt) + log_s)
    if eps:
        vals = vals + (eps / c) * (big_w * log_s + zw)
    vals = torch.where(valid, vals, 0.0)
    shape = tuple(_to_torch(target).shape)
    return _reduce(vals, reduction, wt.sum(), shape, rdt, x)


def nll_loss(x, target, weight, ignore_index, reduction, rdt):
    """``-w_t x[t]`` per row: a gather on the device."""
    xt = _to_torch(x)
    axis = 1 if xt.ndim > 1 else 0
    rows = _rows(xt, axis)
    t, valid, safe, wt = _targets(target, weight, ignore_index, rows.device)
    picked = rows.gather(1, safe[:, None])[:, 0].double()
    vals = torch.where(valid, -wt * picked, 0.0)
    return _reduce(vals, reduction, wt.sum(), tuple(_to_torch(target).shape), rdt, x)


def cross_entropy_probs(x, y, weight, reduction, eps, rdt):
    """Probability targets: ``sum_c q_c (m - x_c) + log(s) sum_c q_c`` per row
    in float64 with torch ops (row blocks of the input's size: a reference
    path, not a fused kernel)."""
    xt, yt = _to_torch(x), _to_torch(y)
    axis = 1 if xt.ndim > 1 else 0
    c = int(xt.shape[axis])
    rows, ys = _rows(xt, axis).double(), _rows(yt, axis).double()
    q = (1.0 - eps) * ys + eps / c
    if weight is not None:
        q = q * _to_torch(weight).to(rows.device, torch.float64)
    m = rows.max(dim=1, keepdim=True).values
    lse_shift = torch.log(torch.exp(rows - m).sum(1))
    vals = (q * (m - rows)).sum(1) + lse_shift * q.sum(1)
    vals = torch.where(torch.isfinite(m[:, 0]) | torch.isnan(m[:, 0]), vals, torch.nan)
    shape = (xt.shape[0],) + tuple(xt.shape[2:]) if axis == 1 else ()
    return _reduce(vals, reduction, float(vals.numel()), shape, rdt, x)
