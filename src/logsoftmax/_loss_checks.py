"""Checks shared by the loss family's faces (arrays, autograd, torch).

Helpers are named after what they check and raise through :mod:`._api`'s
``_check_*`` (the exception type is in the helper's name there); messages
name the function, the argument, the value and what was expected.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import dtypes
from ._api import _check_index, _check_type, _check_value

__all__ = [
    "REDUCTIONS",
    "dtype_of",
    "check_reduction",
    "check_ignore_index",
    "check_fraction",
    "check_nonnegative",
    "check_softcap",
    "check_float_dtype",
    "check_class_weight",
    "check_class_targets",
]

#: the three reductions, as in PyTorch
REDUCTIONS = ("mean", "sum", "none")


def dtype_of(a) -> np.dtype:
    """The numpy dtype of an array of any library (torch dtypes by name)."""
    dt = a.dtype
    if isinstance(dt, np.dtype):
        return dt
    name = str(dt).removeprefix("torch.")
    return dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


# --------------------------------------------------------------------------
def check_reduction(fn: str, reduction) -> str:
    _check_value(
        isinstance(reduction, str) and reduction in REDUCTIONS,
        lambda: f"{fn}: reduction={reduction!r}; expected 'mean', 'sum' or 'none'",
    )
    return reduction


def check_ignore_index(fn: str, ignore_index) -> int:
    _check_type(
        not isinstance(ignore_index, (bool, np.bool_))
        and isinstance(ignore_index, (numbers.Integral, np.integer)),
        lambda: f"{fn}: ignore_index={ignore_index!r}; expected an int",
    )
    return int(ignore_index)


def _check_real(fn: str, arg: str, value, ok, expected: str) -> float:
    """A real number (TypeError otherwise) for which ``ok(value)`` holds
    (ValueError otherwise); ``expected`` describes the valid values."""
    _check_type(
        isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)),
        lambda: f"{fn}: {arg}={value!r}; expected {expected}",
    )
    _check_value(ok(float(value)), lambda: f"{fn}: {arg}={value!r} is out of "
                 f"range; expected {expected}")
    return float(value)


def check_fraction(fn: str, arg: str, value) -> float:
    """A real number in ``[0, 1]`` (``label_smoothing``)."""
    return _check_real(fn, arg, value, lambda v: 0.0 <= v <= 1.0, "a float in [0, 1]")


def check_nonnegative(fn: str, arg: str, value) -> float:
    """A finite real number ``>= 0`` (``z_loss``)."""
    return _check_real(fn, arg, value, lambda v: math.isfinite(v) and v >= 0.0,
                       "a finite float >= 0")


def check_softcap(fn: str, softcap) -> float:
    """``None`` (0.0: no cap) or a finite real number ``> 0``."""
    if softcap is None:
        return 0.0
    return _check_real(fn, "softcap", softcap, lambda v: math.isfinite(v) and v > 0.0,
                       "None or a finite float > 0")


def check_float_dtype(fn: str, arg: str, dtype) -> np.dtype:
    """The dtype a float input computes in: a supported float dtype as is,
    integer/bool promoted to float32 (API.md section 1), others TypeError."""
    return dtypes.result_dtype(dtype, fn, arg)


def check_class_weight(fn: str, weight, num_classes: int, in_dtype: np.dtype):
    """``weight``: None or a ``(C,)`` array of exactly the input's dtype
    (PyTorch raises for a float64 weight with float32 logits; so do we)."""
    if weight is None:
        return None
    wdt = dtype_of(weight)
    _check_type(
        wdt == in_dtype,
        lambda: f"{fn}: weight has dtype {wdt} but input has dtype {in_dtype}; "
        "expected the same dtype",
    )
    _check_value(
        tuple(weight.shape) == (num_classes,),
        lambda: f"{fn}: weight has shape {tuple(weight.shape)}, expected "
        f"({num_classes},) (one weight per class)",
    )
    return weight


def check_class_targets(fn: str, target, want_shape, num_classes: int,
                        ignore_index: int, *, eager: bool = True):
    """Integer class indices of ``want_shape`` in ``[0, C)`` or ``ignore_index``.

    ``eager=False`` skips the range check (lazy dask targets: the check
    would compute the graph; out-of-range indices then contribute as
    documented in :mod:`.backends.dask_losses`)."""
    tdt = dtype_of(target)
    _check_type(
        tdt.kind in "iu",
        lambda: f"{fn}: target has dtype {tdt}; expected an integer dtype (class "
        "indices) or the input's float dtype (class probabilities)",
    )
    _check_value(
        tuple(target.shape) == tuple(want_shape),
        lambda: f"{fn}: target has shape {tuple(target.shape)}, expected "
        f"{tuple(want_shape)} (class indices)",
    )
    if eager and int(np.prod(target.shape)) > 0:
        t = target.detach().cpu().numpy() if hasattr(target, "detach") else (
            np.asarray(target))
        bad = (t != ignore_index) & ((t < 0) | (t >= num_classes))
        if bad.any():
            val = int(t[bad].flat[0])
            _check_index(
                False,
                lambda: f"{fn}: target contains class index {val}, out of range "
                f"for {num_classes} classes; expected indices in "
                f"[0, {num_classes}) or ignore_index={ignore_index}",
            )
    return target
