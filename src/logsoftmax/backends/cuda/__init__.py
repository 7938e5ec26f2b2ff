"""The ``"cuda"`` backend: Triton kernels on CUDA arrays (extra ``logsoftmax[cuda]``).

Arrays it runs on, and what comes back:

- torch tensors: the kernels read and write them in place of their strides;
  results are torch tensors on the input's device.
- other CUDA arrays (CuPy, or anything with ``__cuda_array_interface__`` or
  a CUDA ``__dlpack__``): aliased as torch tensors without a copy
  (``torch.as_tensor`` / ``torch.from_dlpack``); an ``out=`` is written in
  place and returned, an allocated result is handed back through the
  array's own library (``<module>.from_dlpack``), zero-copy.
- numpy arrays, under ``use_backend("cuda")``: results are numpy arrays.
  When the kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` set
  before the kernels are first used) the arrays are aliased, zero-copy, as
  CPU torch tensors over the byte span the view covers, so negative and
  zero strides need no copy either (bfloat16 goes through a uint16 view);
  on a GPU they are copied to the device and the result copied back into
  the caller's array (``out=`` included, written in place).

Design: :meth:`CudaBackend.asarray` leaves every array in its own type, so
each op knows the caller's array type. An op converts its arguments into
:class:`~.launch.Operand` views on one compute device (a staging copy only
where the memory is not on that device), launches, writes staged outputs
back, and returns ``out`` or a result of the caller's type.

``available()`` is true when torch and triton are importable *and* the
kernels can run here: a CUDA driver is present (``/proc/driver/nvidia``) or
``TRITON_INTERPRET=1`` is set. It imports neither (``find_spec`` only).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from .. import Backend, Op, is_cuda_array, is_torch_tensor, numpy_dtype, torch_dtype

__all__ = ["CudaBackend", "interpreting"]

_BF16 = np.dtype(ml_dtypes.bfloat16)


def _interpret_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in (
        "1",
        "true",
        "yes",
        "on",
    )


def _driver_present() -> bool:
    return (
        Path("/proc/driver/nvidia/version").exists()
        or Path("/dev/nvidiactl").exists()
    )


_LIB: tuple = ()


def _lib():
    """(torch, launch, kernels), imported on first use."""
    global _LIB
    if not _LIB:
        import torch

        from . import kernels, launch

        _LIB = (torch, launch, kernels)
    return _LIB


def interpreting() -> bool:
    """Whether the kernels run in Triton's CPU interpreter (imports triton)."""
    return _lib()[2].INTERPRETED


# --------------------------------------------------------------------------
# array kinds and dtypes
# --------------------------------------------------------------------------
def _is_foreign_cuda(x) -> bool:
    """A CUDA array that is not a torch tensor (CuPy, numba.cuda, ...)."""
    return not is_torch_tensor(x) and is_cuda_array(x)


def _foreign_to_torch(x):
    torch = _lib()[0]
    if hasattr(x, "__cuda_array_interface__"):
        return torch.as_tensor(x, device="cuda")
    return torch.from_dlpack(x)


def _torch_to_foreign(like, t):
    """``t`` as an array of ``like``'s library (zero-copy through DLPack)."""
    mod = sys.modules.get(type(like).__module__.partition(".")[0])
    from_dlpack = getattr(mod, "from_dlpack", None)
    if from_dlpack is None:
        return t  # no way back: the torch tensor is the closest CUDA array
    return from_dlpack(t)


def _to_numpy(t) -> np.ndarray:
    """A CPU torch tensor's values as numpy (bfloat16 through int16 bits)."""
    torch = _lib()[0]
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(_BF16)
    return t.numpy()


def _numpy_span(a: np.ndarray):
    """A zero-copy Operand over the byte span of numpy view ``a``, or None.

    The span starts at the lowest address the view touches (reached by
    flipping every negative-stride axis), so the torch tensor is a plain
    contiguous 1-D alias and the kernels apply ``a``'s own strides (any sign)
    from an element offset.
    """
    torch, launch, _ = _lib()
    item = a.itemsize
    if not a.dtype.isnative or any(s % item for s in a.strides):
        return None
    if a.size == 0:
        t = torch.empty(0, dtype=torch_dtype(a.dtype))
        return launch.Operand(t, 0, a.shape, (0,) * a.ndim)
    flip = tuple(slice(None, None, -1) if s < 0 else slice(None) for s in a.strides)
    flipped = a[flip]
    lo = flipped.__array_interface__["data"][0]
    addr = a.__array_interface__["data"][0]
    span = 1 + sum((n - 1) * abs(s) // item for n, s in zip(a.shape, a.strides))
    flat = np.lib.stride_tricks.as_strided(flipped, shape=(span,), strides=(item,))
    if a.dtype == _BF16:
        flat = flat.view(np.uint16)
    with warnings.catch_warnings():
        # read-only inputs (broadcast views) are never written
        warnings.filterwarnings("ignore", message=".*not writable.*")
        t = torch.from_numpy(flat)
    if a.dtype == _BF16:
        t = t.view(torch.bfloat16)
    strides = tuple(s // item for s in a.strides)
    return launch.Operand(t, (addr - lo) // item, a.shape, strides)


# --------------------------------------------------------------------------
# one op call: device, operands, staging
# --------------------------------------------------------------------------
class _Call:
    """Operands of one op call on one compute device, plus staged writebacks."""

    def __init__(self, arrays):
        torch, _, kernels = _lib()
        self.torch = torch
        self.device = None
        for a in arrays:
            if is_torch_tensor(a) and a.device.type == "cuda":
                self.device = a.device
                break
            if _is_foreign_cuda(a):
                self.device = _foreign_to_torch(a).device
                break
        if self.device is None:
            if kernels.INTERPRETED:
                self.device = torch.device("cpu")
            elif torch.cuda.is_available():
                self.device = torch.device("cuda", torch.cuda.current_device())
            else:
                raise RuntimeError(
                    "cuda backend: no CUDA device is available to torch "
                    "(torch.cuda.is_available() is False) and the Triton "
                    "interpreter is off; use a CUDA build of torch on a GPU, or "
                    "set TRITON_INTERPRET=1 before logsoftmax's CUDA kernels are "
                    "first used to run them on the CPU"
                )
        self._writebacks: list[tuple[Any, Any]] = []

    def _torch_view(self, a):
        """``a`` as a torch tensor (no copy), or None for numpy arrays."""
        if is_torch_tensor(a):
            return a
        if _is_foreign_cuda(a):
            return _foreign_to_torch(a)
        return None

    def input(self, a):
        """An Operand reading ``a`` on the compute device."""
        _, launch, _ = _lib()
        t = self._torch_view(a)
        if t is not None:
            return launch.Operand.of(t.to(self.device))  # no copy when already there
        a = np.asarray(a)
        if self.device.type == "cpu":
            op = _numpy_span(a)
            if op is not None:
                return op
        native = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
        t = self._from_numpy(native).to(self.device)
        return launch.Operand.of(t)

    def output(self, a):
        """An Operand writing ``a`` (staged and written back if not on device)."""
        _, launch, _ = _lib()
        t = self._torch_view(a)
        if t is not None and t.device == self.device:
            return launch.Operand.of(t)
        if t is None and self.device.type == "cpu":
            op = _numpy_span(a)
            if op is not None:
                return op
        dt = t.dtype if t is not None else torch_dtype(a.dtype)
        tmp = self.torch.empty(tuple(a.shape), dtype=dt, device=self.device)
        self._writebacks.append((a if t is None else t, tmp))
        return launch.Operand.of(tmp)

    def finish(self) -> None:
        """Copy staged outputs back into the caller's arrays."""
        for a, tmp in self._writebacks:
            if is_torch_tensor(a):
                a.copy_(tmp)
            else:
                a[...] = _to_numpy(tmp)
        self._writebacks.clear()

    def _from_numpy(self, a: np.ndarray):
        if a.dtype == _BF16:
            return self.torch.from_numpy(a.view(np.uint16)).view(self.torch.bfloat16)
        return self.torch.from_numpy(a)


def _empty_like(x, dtype: np.dtype, shape=None):
    """A new result of ``x``'s array type: ``dtype``, and ``x``'s layout when
    ``shape`` is None (so reads and writes walk memory alike), else C order."""
    if isinstance(x, np.ndarray):
        if shape is None:
            return np.empty_like(x, dtype=dtype)
        return np.empty(shape, dtype)
    torch = _lib()[0]
    t = x if is_torch_tensor(x) else _foreign_to_torch(x)
    tdt = torch_dtype(dtype)
    if shape is None:
        return torch.empty_like(t, dtype=tdt)
    return torch.empty(tuple(shape), dtype=tdt, device=t.device)


def _on_gpu(a, device: int | None = None) -> bool:
    """Whether ``a`` is a torch tensor on a CUDA device (of index ``device``,
    if given: an int compare, not ``torch.device`` objects built per call)."""
    return (
        is_torch_tensor(a)
        and a.is_cuda
        and (device is None or a.get_device() == device)
    )


def _numel(a) -> int:
    return a.size if isinstance(a, np.ndarray) else a.numel()


def _deliver(x, result):
    """``result`` (allocated by :func:`_empty_like`) as ``x``'s array type."""
    if _is_foreign_cuda(x) and is_torch_tensor(result):
        return _torch_to_foreign(x, result)
    return result


# --------------------------------------------------------------------------
# the backend
# --------------------------------------------------------------------------
class CudaBackend(Backend):
    """Triton kernels for CUDA arrays (see the module docstring)."""

    name = "cuda"

    @classmethod
    def available(cls) -> bool:
        if importlib.util.find_spec("torch") is None:
            return False
        if importlib.util.find_spec("triton") is None:
            return False
        return _interpret_requested() or _driver_present()

    # -- array-type hooks -------------------------------------------------
    def asarray(self, x):
        if isinstance(x, np.ndarray) or is_torch_tensor(x) or _is_foreign_cuda(x):
            return x
        return np.asarray(x)

    def dtype_of(self, x) -> np.dtype:
        if is_torch_tensor(x):
            return numpy_dtype(x.dtype)
        if isinstance(x, np.ndarray):
            dt = x.dtype
            return dt.newbyteorder("=") if not dt.isnative else dt
        try:
            return np.dtype(x.dtype)
        except TypeError:
            return numpy_dtype(_foreign_to_torch(x).dtype)

    def astype(self, x, dtype: np.dtype):
        if isinstance(x, np.ndarray):
            return x.astype(dtype)
        if is_torch_tensor(x):
            return x.to(torch_dtype(dtype))
        return _torch_to_foreign(x, _foreign_to_torch(x).to(torch_dtype(dtype)))

    # -- the ops ------------------------------------------------------------
    def forward(self, op: Op, x, axis: int, out, dtype):
        """``log_softmax``/``softmax`` (``op``) of ``x`` along ``axis`` (the
        cpu backend's signature: the front door's fast path calls it)."""
        _, launch, _ = _lib()
        result = _empty_like(x, dtype) if out is None else out
        if _on_gpu(x) and (out is None or _on_gpu(out, x.get_device())):
            # torch tensors on the GPU: no staging, no conversions (the
            # common call; see _PLANS in launch.py for why every us counts)
            launch.forward(op, launch.Operand.of(x), launch.Operand.of(result), axis)
            return result
        call = _Call([x, out])
        launch.forward(op, call.input(x), call.output(result), axis)
        call.finish()
        return out if out is not None else _deliver(x, result)

    def backward(self, op: Op, diff_dst, dst, axis: int, out, dtype):
        """The backward of ``op`` (as :meth:`forward`)."""
        _, launch, _ = _lib()
        result = _empty_like(diff_dst, dtype) if out is None else out
        dev = diff_dst.get_device() if _on_gpu(diff_dst) else None
        if dev is not None and _on_gpu(dst, dev) and (out is None or _on_gpu(out, dev)):
            of = launch.Operand.of
            launch.backward(op, of(diff_dst), of(dst), of(result), axis)
            return result
        call = _Call([diff_dst, dst, out])
        d, y = call.input(diff_dst), call.input(dst)
        launch.backward(op, d, y, call.output(result), axis)
        call.finish()
        return out if out is not None else _deliver(diff_dst, result)

    def log_softmax(self, x, axis, out, dtype):
        return self.forward(Op.LOG_SOFTMAX, x, axis, out, dtype)

    def softmax(self, x, axis, out, dtype):
        return self.forward(Op.SOFTMAX, x, axis, out, dtype)

    def log_softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self.backward(Op.LOG_SOFTMAX, diff_dst, dst, axis, out, dtype)

    def softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self.backward(Op.SOFTMAX, diff_dst, dst, axis, out, dtype)

    def logsumexp(self, x, axes, keepdims):
        """Reduce over ``axes`` with :func:`~.launch.logsumexp`.

        Reduced axes that merge into one strided dimension take one launch;
        otherwise one launch per axis, with float32 (float64) intermediates
        and one rounding at the end.
        """
        torch, launch, _ = _lib()
        dtype = self.dtype_of(x)
        kept = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
        if not axes:
            result = _empty_like(x, dtype)
            self._forward_copy(x, result)
            return _deliver(x, result)
        result = _empty_like(x, dtype, kept)
        if any(x.shape[a] == 0 for a in axes):
            result[...] = float("-inf")
        elif _numel(result):
            call = _Call([x, result])
            xo, oo = call.input(x), call.output(result)
            merged = _merge_axes(xo, oo, axes)
            if merged is not None:
                launch.logsumexp(merged[0], merged[1], len(merged[0].shape) - 1)
            else:
                f64 = xo.tensor.dtype == torch.float64
                acc = torch.float64 if f64 else torch.float32
                cur = xo
                for i, a in enumerate(sorted(axes, reverse=True)):
                    last = i == len(axes) - 1
                    shape = tuple(1 if d == a else n for d, n in enumerate(cur.shape))
                    if last:
                        dst = oo
                    else:
                        tmp = torch.empty(shape, dtype=acc, device=call.device)
                        dst = launch.Operand.of(tmp)
                    launch.logsumexp(cur, dst, a)
                    cur = dst
            call.finish()
        if not keepdims:
            shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
            result = result.reshape(shape)
        return _deliver(x, result)

    def _forward_copy(self, x, result) -> None:
        if isinstance(result, np.ndarray):
            result[...] = x
        else:
            result.copy_(x if is_torch_tensor(x) else _foreign_to_torch(x))


def _merge_axes(x, out, axes):
    """``(x, out)`` Operands with the reduced axes as one last axis, or None.

    Possible when the reduced dimensions of size > 1, sorted by stride, tile
    memory like one strided dimension (e.g. ``axis=None`` on a contiguous
    array). ``out``'s reduced dimensions have length 1.
    """
    red = [(x.shape[d], x.strides[d]) for d in axes if x.shape[d] != 1]
    red.sort(key=lambda e: -abs(e[1]))
    for (n0, s0), (n1, s1) in zip(red, red[1:]):
        if s0 != s1 * n1:
            return None
    n = 1
    for size, _ in red:
        n *= size
    stride = red[-1][1] if red else 0
    keep = [d for d in range(len(x.shape)) if d not in axes]
    xv = x._replace(
        shape=tuple(x.shape[d] for d in keep) + (n,),
        strides=tuple(x.strides[d] for d in keep) + (stride,),
    )
    ov = out._replace(
        shape=tuple(out.shape[d] for d in keep) + (1,),
        strides=tuple(out.strides[d] for d in keep) + (0,),
    )
    return xv, ov
