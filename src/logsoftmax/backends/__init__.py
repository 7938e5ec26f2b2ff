"""Backends: one interface, a name registry, and selection by array type.

A backend *computes*; it never validates. The front door
(:mod:`logsoftmax._api`) hands it arrays of a supported dtype, a canonical
non-negative ``axis``, and an ``out`` that is either ``None`` (allocate a
result of ``dtype``) or an already-checked array of the result's shape and
``dtype`` which may be exactly one of the inputs (in place). Size-0 inputs
reach the backend too and must give a size-0 result (``logsumexp`` over a
zero-length axis gives ``-inf``).

Selection, in order: the backend forced by :func:`use_backend` (this
context/thread), else the one forced by :func:`set_backend` (process-wide),
else by array type: dask arrays -> ``"dask"``, CUDA arrays (anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``) -> ``"cuda"``,
everything else -> ``"cpu"``.

Backends are registered by name with the dotted path of their class and
imported on first use, so ``import logsoftmax`` never imports dask, torch or
triton and never touches a GPU.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import importlib
import importlib.util
import sys
from typing import Iterator

import ml_dtypes
import numpy as np

__all__ = [
    "Op",
    "InPlace",
    "Backend",
    "register_backend",
    "get_backend",
    "backends",
    "set_backend",
    "use_backend",
    "select_backend",
    "default_cpu",
    "is_dask_array",
    "is_cuda_array",
    "is_torch_tensor",
    "torch_dtype",
    "numpy_dtype",
]


class Op(enum.IntEnum):
    """Which member of the family a kernel computes: the one operation
    selector every backend uses (numba and Triton kernels take it as an int)."""

    #: ``log_softmax`` forward / ``log_softmax_backward``
    LOG_SOFTMAX = 0
    #: ``softmax`` forward / ``softmax_backward``
    SOFTMAX = 1


class InPlace(enum.IntEnum):
    """Where a kernel's result goes when ``out`` is exactly one of its inputs."""

    #: ``out`` is a separate array (or a fresh result)
    NONE = 0
    #: ``out`` is ``x`` (forward)
    SRC = 1
    #: ``out`` is ``diff_dst`` (backward); the same slot as ``SRC``
    DIFF_DST = 1
    #: ``out`` is ``dst`` (backward)
    DST = 2


class Backend:
    """The interface every backend implements (the seed's ``IBackend``).

    Array-type hooks (``asarray``, ``dtype_of``, ``astype``)
    have numpy defaults; the five ops must be implemented.

    Op arguments:
      x, diff_dst, dst: arrays of one supported dtype (f32/bf16/f16/f64),
        any strides, possibly size 0.
      axis: canonical non-negative int.
      out: ``None`` or a checked array of the result's shape and ``dtype``.
      dtype: numpy dtype of the result (``out.dtype`` when ``out`` is given);
        may differ from the input dtype (benchdnn's mixed data types).
    """

    name: str = "?"
    #: whether ``out=`` / in-place is meaningful (False for immutable arrays)
    supports_out: bool = True

    @classmethod
    def available(cls) -> bool:
        """True if this backend's optional dependencies are importable here.

    Must be cheap and must not import the optional dependencies themselves
    (use ``importlib.util.find_spec``); backend modules import them lazily.
    """
        return True

    # -- array-type hooks -------------------------------------------------
    def asarray(self, x):
        """Convert an array-like into this backend's array type."""
        return np.asarray(x)

    def dtype_of(self, x) -> np.dtype:
        """The numpy dtype describing ``x``'s elements."""
        return np.dtype(x.dtype)

    def astype(self, x, dtype: np.dtype):
        """Cast ``x`` to the numpy ``dtype`` (used for promotion and AMP)."""
        return x.astype(dtype)

    # -- the ops ------------------------------------------------------------
    def log_softmax(self, x, axis: int, out, dtype: np.dtype):
        raise NotImplementedError

    def log_softmax_backward(self, diff_dst, dst, axis: int, out, dtype: np.dtype):
        raise NotImplementedError

    def softmax(self, x, axis: int, out, dtype: np.dtype):
        raise NotImplementedError

    def softmax_backward(self, diff_dst, dst, axis: int, out, dtype: np.dtype):
        raise NotImplementedError

    def logsumexp(self, x, axes: tuple[int, ...], keepdims: bool):
        """Reduce over ``axes`` (sorted, canonical, possibly empty = no-op).

        The result has ``x``'s dtype.
        """
        raise NotImplementedError


# name -> "module:Class"; instances are created on first use
_REGISTRY: dict[str, str] = {
    "cpu": "logsoftmax.backends.cpu:CpuBackend",
    "reference": "logsoftmax.backends.reference:ReferenceBackend",
    "dask": "logsoftmax.backends.dask:DaskBackend",
    "cuda": "logsoftmax.backends.cuda:CudaBackend",
}
_INSTANCES: dict[str, Backend] = {}
_forced_global: str | None = None
_forced_local: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "logsoftmax_backend", default=None
)


def register_backend(name: str, target: str) -> None:
    """Register (or replace) backend ``name`` as ``"module:Class"``."""
    _REGISTRY[name] = target
    _INSTANCES.pop(name, None)


def _load_class(name: str):
    module_name, _, cls_name = _REGISTRY[name].partition(":")
    if importlib.util.find_spec(module_name) is None:
        return None
    return getattr(importlib.import_module(module_name), cls_name)


def backends() -> list[str]:
    """Names of the backends that can run here (their extras are installed)."""
    return [name for name in _REGISTRY if _is_available(name)]


def _is_available(name: str) -> bool:
    try:
        cls = _load_class(name)
        return cls is not None and bool(cls.available())
    except Exception:  # a broken optional backend must not break the others
        return False


def _check_name(name) -> None:
    if name in _INSTANCES:
        return
    if not isinstance(name, str) or name not in _REGISTRY or not _is_available(name):
        raise ValueError(
            f"unknown backend {name!r}; available backends: {', '.join(backends())}"
        )


def get_backend(name: str) -> Backend:
    """The backend instance registered as ``name`` (ValueError if unavailable)."""
    inst = _INSTANCES.get(name)
    if inst is None:
        _check_name(name)
        inst = _INSTANCES[name] = _load_class(name)()
    return inst


def set_backend(name: str | None) -> None:
    """Force backend ``name`` process-wide; ``None`` restores dispatch by array type."""
    global _forced_global
    if name is not None:
        _check_name(name)
    _forced_global = name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[Backend]:
    """Context manager forcing backend ``name`` in this thread/context."""
    _check_name(name)
    token = _forced_local.set(name)
    try:
        yield get_backend(name)
    finally:
        _forced_local.reset(token)


#: DLPack device types that live on a CUDA device
CUDA_DLPACK_DEVICES = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def is_dask_array(x) -> bool:
    """Whether ``x`` is a dask array (checked without importing dask)."""
    return type(x).__module__.startswith("dask.")


def is_cuda_array(x) -> bool:
    """Whether ``x`` lives on a CUDA device: ``__cuda_array_interface__`` or a
    CUDA ``__dlpack_device__`` (checked without importing torch or CuPy)."""
    if is_torch_tensor(x):
        # a CUDA tensor builds its interface dict on each lookup, a CPU one
        # raises inside it: among the larger items of a 1x8 call's cProfile
        # on an H200 (benchmarks/cuda_front_door.py)
        return x.is_cuda
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None or isinstance(x, np.ndarray):
        return False
    try:
        return int(dev()[0]) in CUDA_DLPACK_DEVICES
    except Exception:
        return False


def is_torch_tensor(x) -> bool:
    """Whether ``x`` is a ``torch.Tensor`` (without importing torch: if torch
    is not loaded, no tensor exists)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


@functools.lru_cache(maxsize=None)
def torch_dtype(dtype):
    """The torch dtype of numpy ``dtype`` (bfloat16 is ml_dtypes'); imports
    torch. ``TypeError`` for a dtype torch has no equivalent of."""
    import torch

    dt = np.dtype(dtype)
    if dt == np.dtype(ml_dtypes.bfloat16):
        return torch.bfloat16
    return torch.from_numpy(np.empty(0, dt.newbyteorder("="))).dtype


@functools.lru_cache(maxsize=None)
def numpy_dtype(tdtype) -> np.dtype:
    """The numpy dtype of torch dtype ``tdtype`` (mapped by name, so torch is
    not imported); ``TypeError`` for one numpy has no equivalent of."""
    name = str(tdtype).removeprefix("torch.")
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError:
        raise TypeError(
            f"torch dtype {tdtype} has no numpy equivalent; expected float32, "
            "bfloat16, float16, float64 or an integer/bool dtype"
        ) from None


def default_cpu():
    """The ``"cpu"`` backend when no backend is forced, else None: the front
    door's fast path for numpy arrays (two variable reads once the backend
    exists)."""
    if _forced_local.get() is None and _forced_global is None:
        inst = _INSTANCES.get("cpu")
        return inst if inst is not None else get_backend("cpu")
    return None


def unforced_backend(name: str):
    """Backend ``name`` when no backend is forced, else None (the front door's
    fast path for CUDA tensors; :func:`default_cpu` is the numpy one's)."""
    if _forced_local.get() is None and _forced_global is None:
        inst = _INSTANCES.get(name)
        return inst if inst is not None else get_backend(name)
    return None


def select_backend(x) -> Backend:
    """The backend that runs ``x``: forced, else by array type (dispatch is
    by these two tests, in this order; no backend is asked)."""
    name = _forced_local.get() or _forced_global
    if name is None:
        if is_dask_array(x):
            name = "dask"
        elif is_cuda_array(x):
            name = "cuda"
        else:
            name = "cpu"
    return get_backend(name)
