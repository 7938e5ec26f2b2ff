"""The accuracy metric: error in units of the result dtype's eps.

API.md section 1 defines accuracy per element as::

    err = |y - y_ref| / (eps(dtype) * max(1, |y_ref|))

with ``y_ref`` a float64 (long double for float64 results) oracle. This module
is the one place that formula is written; the tests, the benchdnn-style driver
(``logsoftmax bench``) and ``logsoftmax graph run`` all import it. The oracle
itself is computed by the caller (the tests never compute it through the
library).

Special values. The formula is meaningless where either side is NaN or
infinite, so one rule covers those elements:

- matching values are exact (error 0): both NaN, or ``y`` equal to ``y_ref``
  rounded once to ``dtype`` -- the same infinity, including a finite oracle
  that overflows to that infinity in ``dtype`` (a float16 result of -65600
  is ``-inf``);
- anything else is a mismatch, error ``inf``: a NaN against a number, an
  infinity against a finite value it does not round to, or the opposite
  infinity.

The NaN sign is not compared (numpy does not propagate it reliably).
"""

from __future__ import annotations

import numpy as np

from . import dtypes

__all__ = ["eps_errors", "max_eps_error"]


def _dtype(dtype, y: np.ndarray) -> np.dtype:
    if dtype is None:
        return y.dtype
    if isinstance(dtype, str):
        return dtypes.from_name(dtype)
    return np.dtype(dtype)


def eps_errors(y, y_ref, dtype=None) -> np.ndarray:
    """Per-element error of ``y`` against the oracle ``y_ref``, in eps of ``dtype``.

    Args:
      y: the result (any real dtype; array-like, read with ``np.asarray``).
      y_ref: the oracle, of ``y``'s shape; float64 or long double (the
        error is computed in the wider of the two).
      dtype: the dtype whose eps is the unit: a numpy dtype, a oneDNN-style
        name (``"f32"``, ``"bf16"``, ``"f16"``, ``"f64"``) or ``None`` for
        ``y``'s own dtype.

    Returns:
      float64 array of ``y``'s shape: ``|y - y_ref| / (eps * max(1, |y_ref|))``
      where both are finite, 0 for matching special values, ``inf`` for a
      mismatch (module docstring).

    Raises:
      ValueError: ``y`` and ``y_ref`` differ in shape (broadcasting would
        compare the wrong elements).
    """
    y = np.asarray(y)
    ref = np.asarray(y_ref)
    if y.shape != ref.shape:
        raise ValueError(
            f"eps_errors: y has shape {y.shape}, y_ref has shape {ref.shape}; "
            "expected the same shape"
        )
    dt = _dtype(dtype, y)
    long = np.longdouble in (y.dtype, ref.dtype)
    wide = np.dtype(np.longdouble if long else np.float64)
    yw = y.astype(wide)
    rw = ref.astype(wide)
    with np.errstate(all="ignore"):
        err = np.abs(yw - rw) / (wide.type(dtypes.eps(dt)) * np.maximum(1, np.abs(rw)))
        err = np.array(err, dtype=np.float64)  # an array even for 0-d inputs
    special = ~(np.isfinite(yw) & np.isfinite(rw))
    if special.any():
        ys, rs = yw[special], rw[special]
        with np.errstate(all="ignore"):
            rounded = dtypes.round_to(rs, dt).astype(wide)
        same = (ys == rounded) | (np.isnan(ys) & np.isnan(rs))
        err[special] = np.where(same, 0.0, np.inf)
    return err


def max_eps_error(y, y_ref, dtype=None) -> float:
    """The largest of :func:`eps_errors` (same arguments); 0.0 for an empty ``y``."""
    err = eps_errors(y, y_ref, dtype)
    return float(err.max()) if err.size else 0.0
