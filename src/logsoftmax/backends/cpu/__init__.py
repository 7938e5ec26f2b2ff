"""The fused CPU backend (numba): the default for numpy arrays.

One pass computes each row's running max and sum of exponentials together
(online softmax at 4096-element chunk granularity), a second pass writes the
result; the backward sums ``diff_dst`` in one pass and writes in another.
Kernels vectorise (AVX-512 on this machine) through a hand-written float32
``exp`` and ``llvm.maxnum``; bf16/f16 are widened to float32 in registers and
rounded once on store; rows run in parallel (``numba.prange``) and long rows
are split into chunks across threads. Results are bit-identical for any
thread count, any output strides, in place or not. See
:mod:`.kernels` (algorithm, accuracy), :mod:`.layout` (how strides map to
``(outer, n, inner)``), :mod:`._simd` (exp, loads/stores) and
:mod:`.alloc` (the allocating path).

Problems under ``SERIAL_MAX`` elements (or with one numba thread) run serial
copies of the kernels (same bits): waking the thread pool costs more than
the work there, and under load it waited 5-8 ms for the second core.

Importing this package defines the jitted functions but compiles nothing;
each kernel compiles on first use per (input, output) dtype pair and is
cached on disk (``cache=True``).
"""

from __future__ import annotations

import importlib.util

import numpy as np

from .. import Backend
from . import alloc
from .layout import plan, storage_dtype, strides_ok

__all__ = ["CpuBackend"]

_FWD_OPS = {"log_softmax": 0, "softmax": 1}
_BWD_OPS = {"log_softmax_backward": 0, "softmax_backward": 1}


def _kernels():
    # deferred so that `import logsoftmax.backends.cpu` stays cheap
    from . import kernels

    return kernels


def _threads() -> int:
    import numba

    return numba.get_num_threads()


#: problems with fewer elements than this run the serial kernels (same bits).
#: Measured (f32 log_softmax, out=, 2 threads, medians): the parallel kernel
#: breaks even at ~2**14 elements (n = 1000 rows: 31 vs 30 us serial vs
#: parallel) and wins 1.5-1.9x at 2**16 (66 vs 46 us; n = 64: 193 vs 100 us);
#: but with another process busy, every parallel call that had to wait for
#: the second core took 5-8 ms (one scheduler slice) at any size from 2**10
#: up. Below 2**16 the serial kernel loses at most ~0.1 ms and never stalls.
SERIAL_MAX = 1 << 16


def _serial(size: int) -> bool:
    """Run the serial kernel variant: small problems (waking numba's pool
    costs more than the work, and spin-waits against OpenBLAS/torch pools
    under load) or a single thread."""
    return size < SERIAL_MAX or _threads() == 1


def _split(rows: int, n: int) -> bool:
    """Spread a row's chunks over threads: few rows, each longer than two
    chunks. Only speed depends on this choice (the arithmetic is the same)."""
    return n > 2 * _kernels().CHUNK and rows < 2 * _threads()


def _tile(n: int, ni: int) -> int:
    """Inner tile width J (a speed choice only). Wide tiles win: each tile row
    is J contiguous elements read from a different page, and at J = 16 the
    kernel ran at 4.5 ns/element vs 0.8-1.0 at J = 512-1024 (n = 64..1000,
    one thread). The tile's terms (min(n, CHUNK) x J) stay <= 1 MiB (L2)."""
    rows = min(n, _kernels().CHUNK)
    j = max(16, min(1024, (262144 // rows) // 16 * 16))
    return min(j, ni)


def _usable(a: np.ndarray) -> np.ndarray:
    """``a`` itself when its strides are whole elements, else a compact copy."""
    return a if strides_ok(a) else np.ascontiguousarray(a)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Exactly the same memory, strides and dtype (the API's "in place")."""
    return a is b or (
        a.dtype == b.dtype
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _round_from_f64(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round float64 ``v`` once to ``dtype`` (float32 round-to-odd first for
    bf16/f16, so the two steps make one correct rounding)."""
    if dtype == np.float64:
        return v.copy()
    f = v.astype(np.float32)
    if dtype == np.float32:
        return f
    with np.errstate(invalid="ignore", over="ignore"):
        inexact = (f.astype(np.float64) != v) & np.isfinite(f)
        bits = f.view(np.int32)
        away = np.abs(f.astype(np.float64)) > np.abs(v)
        bits = np.where(inexact, (bits - away.astype(np.int32)) | 1, bits)
        over = np.isinf(f) & np.isfinite(v)
        flt_max = np.copysign(np.float32(3.4028235e38), v)
        f = np.where(over, flt_max, bits.view(np.float32))
    return f.astype(dtype)


class CpuBackend(Backend):
    """Fused numba kernels for numpy arrays (see module docstring)."""

    name = "cpu"

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("numba") is not None

    def accepts(self, x) -> bool:
        return isinstance(x, np.ndarray)

    # -- forward --------------------------------------------------------------
    def _forward(self, x, axis, out, dtype, op):
        x = np.asarray(x)
        result = alloc.empty_like(x, dtype) if out is None else out
        if x.size == 0:
            return result
        target = result if strides_ok(result) else alloc.empty_like(x, dtype)
        x = _usable(x)
        k = _kernels()
        p = plan([x, target], axis)
        n1, n2, n, ni = p.dims
        ser = _serial(x.size)
        for xg, og in p.offsets():
            xb, ob = p.bufs
            if p.inner:
                f = k.fwd_inner_serial if ser else k.fwd_inner
                f(xb, xg, ob, og, n1, n2, n, ni, op, _tile(n, ni))
            elif not ser and _split(n1 * n2, n):
                k.fwd_rows_split(xb, xg, ob, og, n1, n2, n, op)
            else:
                f = k.fwd_rows_serial if ser else k.fwd_rows
                f(xb, xg, ob, og, n1, n2, n, op, int(_same(x, target)))
        if target is not result:
            result[...] = target
        return result

    def log_softmax(self, x, axis, out, dtype):
        return self._forward(x, axis, out, np.dtype(dtype), 0)

    def softmax(self, x, axis, out, dtype):
        return self._forward(x, axis, out, np.dtype(dtype), 1)

    # -- backward -------------------------------------------------------------
    def _backward(self, diff_dst, dst, axis, out, dtype, op):
        diff_dst, dst = np.asarray(diff_dst), np.asarray(dst)
        result = alloc.empty_like(diff_dst, dtype) if out is None else out
        if diff_dst.size == 0:
            return result
        target = result if strides_ok(result) else alloc.empty_like(diff_dst, dtype)
        diff_dst, dst = _usable(diff_dst), _usable(dst)
        k = _kernels()
        p = plan([diff_dst, dst, target], axis)
        n1, n2, n, ni = p.dims
        db, yb, ob = p.bufs
        ser = _serial(diff_dst.size)
        for dg, yg, og in p.offsets():
            if p.inner:
                f = k.bwd_inner_serial if ser else k.bwd_inner
                f(db, dg, yb, yg, ob, og, n1, n2, n, ni, op, _tile(n, ni))
            elif not ser and _split(n1 * n2, n):
                k.bwd_rows_split(db, dg, yb, yg, ob, og, n1, n2, n, op)
            else:
                ip = 1 if _same(diff_dst, target) else 2 if _same(dst, target) else 0
                f = k.bwd_rows_serial if ser else k.bwd_rows
                f(db, dg, yb, yg, ob, og, n1, n2, n, op, ip)
        if target is not result:
            result[...] = target
        return result

    def log_softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self._backward(diff_dst, dst, axis, out, np.dtype(dtype), 0)

    def softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self._backward(diff_dst, dst, axis, out, np.dtype(dtype), 1)

    # -- logsumexp ------------------------------------------------------------
    def logsumexp(self, x, axes, keepdims):
        """Reduce over sorted ``axes``. Several axes run as one merged axis when
        their strides allow it (in logical order, e.g. any trailing block of a
        contiguous array); otherwise they are first copied together (documented
        in docs/performance.md). Returns ``x.dtype``."""
        x = np.asarray(x)
        axes = tuple(axes)
        nd = x.ndim
        keep_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        if not axes:
            return x.copy()
        if any(x.shape[a] == 0 for a in axes):
            res = np.full(keep_shape, -np.inf)
        elif x.size == 0:
            res = np.empty(keep_shape)
        else:
            xv, ax = self._reduction_view(_usable(x), axes)
            res = np.empty([1 if i == ax else s for i, s in enumerate(xv.shape)])
            rv = np.lib.stride_tricks.as_strided(
                res, xv.shape, [0 if i == ax else s for i, s in enumerate(res.strides)]
            )
            k = _kernels()
            p = plan([xv, rv], ax)
            n1, n2, n, ni = p.dims
            xb, rb = p.bufs
            ser = _serial(xv.size)
            for xg, rg in p.offsets():
                if p.inner:
                    f = k.lse_inner_serial if ser else k.lse_inner
                    f(xb, xg, rb, rg, n1, n2, n, ni, _tile(n, ni))
                elif not ser and _split(n1 * n2, n):
                    k.lse_rows_split(xb, xg, rb, rg, n1, n2, n)
                else:
                    f = k.lse_rows_serial if ser else k.lse_rows
                    f(xb, xg, rb, rg, n1, n2, n)
            res = res.reshape(keep_shape)
        r = _round_from_f64(res, x.dtype)
        if not keepdims:
            r = r.reshape([s for i, s in enumerate(x.shape) if i not in axes])
        return r

    @staticmethod
    def _reduction_view(x: np.ndarray, axes: tuple[int, ...]):
        """``(view, axis)`` reducing ``axes`` as one axis, merged in logical
        order without a copy when strides allow, else a compact copy."""
        if len(axes) == 1:
            return x, axes[0]
        red = [a for a in axes if x.shape[a] != 1]
        ok = all(
            x.strides[a] == x.strides[b] * x.shape[b] for a, b in zip(red, red[1:])
        )
        keep = [i for i in range(x.ndim) if i not in axes]
        size = int(np.prod([x.shape[a] for a in axes]))
        shape = [x.shape[i] for i in keep] + [size]
        if ok:
            step = x.strides[red[-1]] if red else x.itemsize
            strides = [x.strides[i] for i in keep] + [step]
            return np.lib.stride_tricks.as_strided(x, shape, strides), len(keep)
        moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
        return np.ascontiguousarray(moved).reshape(shape), len(keep)
