"""Data types: the public constants and the one place dtype policy lives.

Every face of the library (functional, autograd, graph, CLI) asks this module
which dtype a computation runs in and which dtype its result has; nothing
else in the package decides that.

- ``float32``, ``bfloat16`` (``ml_dtypes``), ``float16`` and ``float64`` are
  computed natively: float32 accumulation for the first three, float64 (or
  better) for float64.
- Integer and bool inputs are promoted to float32 (as ``torch.log_softmax``
  does for integer tensors once cast, and as JAX does).
- Complex, object, string and other dtypes are rejected with ``TypeError``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = [
    "float32",
    "bfloat16",
    "float16",
    "float64",
    "SUPPORTED",
    "LOW_PRECISION",
    "result_dtype",
    "accumulation_dtype",
    "check_supported",
    "eps",
    "name_of",
    "from_name",
    "round_to",
]

float32 = np.dtype(np.float32)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float64 = np.dtype(np.float64)

#: dtypes the kernels compute in (inputs of any other dtype are promoted or rejected)
SUPPORTED = (float32, bfloat16, float16, float64)
#: dtypes that are widened to float32 in registers and rounded once on store
LOW_PRECISION = (bfloat16, float16)

_NAMES = {float32: "f32", bfloat16: "bf16", float16: "f16", float64: "f64"}
_BY_NAME = {
    **{v: k for k, v in _NAMES.items()},
    "float32": float32,
    "bfloat16": bfloat16,
    "float16": float16,
    "float64": float64,
}


def result_dtype(dtype, fn: str = "logsoftmax", arg: str = "x") -> np.dtype:
    """The dtype an op computes in and returns for an input of ``dtype``.

    Floating dtypes we support map to themselves; bool and integer dtypes are
    promoted to float32; anything else raises ``TypeError`` naming the dtype.
    """
    dt = np.dtype(dtype)
    if dt in SUPPORTED:
        return dt
    if dt.kind in "biu":
        return float32
    raise TypeError(
        f"{fn}: {arg} has dtype {dt}, expected a real floating dtype "
        "(float32, bfloat16, float16, float64) or an integer/bool dtype "
        "(promoted to float32)"
    )


def accumulation_dtype(dtype, result=None) -> np.dtype:
    """The working precision of data of ``dtype`` with a result of ``result``
    (default: the same): float64 if either is float64, float32 for
    everything else (the low-precision types included). The wider of the
    two, so that a result depends on the input's values, not on how they
    were stored: ``log_softmax(x_bf16, dtype=float64)`` is the float64
    answer for those values, as PyTorch computes it."""
    return float64 if float64 in (np.dtype(dtype), np.dtype(result or dtype)) else float32


def check_supported(dtype, fn: str, arg: str) -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is one of :data:`SUPPORTED`, else raise ``TypeError``."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in SUPPORTED:  # np.dtype(None) would be float64
        raise TypeError(
            f"{fn}: {arg}={dtype!r} is not a supported dtype; expected one of "
            "float32, bfloat16, float16, float64"
        )
    return dt


def eps(dtype) -> float:
    """Machine epsilon of ``dtype`` (the unit accuracy is measured in)."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps)


def name_of(dtype) -> str:
    """Short oneDNN-style name: ``f32``, ``bf16``, ``f16``, ``f64``."""
    return _NAMES[np.dtype(dtype)]


def from_name(name: str) -> np.dtype:
    """Inverse of :func:`name_of`; also accepts ``float32``-style names."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unknown data type {name!r}; expected one of f32, bf16, f16, f64"
        ) from None


def round_to(value, dtype) -> np.ndarray:
    """Round a float64 (or long double) array to ``dtype`` once, to nearest even.

    numpy and ml_dtypes convert float64 to bfloat16 through float32, which
    rounds twice (``1 + 2**-8 + 2**-30`` becomes 1.0 instead of 1.0078125).
    Rounding to float32 *to odd* first (truncate, then set the last bit if
    anything was lost) makes the second rounding exact, because float32 keeps
    more than bfloat16's 8 + 2 significant bits.
    """
    value = np.asarray(value)
    dtype = np.dtype(dtype)
    if dtype != bfloat16:
        return value.astype(dtype)
    wide = value.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = wide.astype(np.float32)
        inexact = np.isfinite(f32) & (f32.astype(np.float64) != wide)
        away = inexact & (np.abs(f32.astype(np.float64)) > np.abs(wide))
    bits = f32.view(np.uint32).copy()
    bits[away] -= 1  # one ulp towards zero: the truncated value
    bits[inexact] |= 1  # sticky bit: round to odd
    return bits.view(np.float32).astype(bfloat16)
