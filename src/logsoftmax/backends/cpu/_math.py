"""``exp`` and ``log`` for the CPU kernels, on :mod:`._vec` vectors or scalars.

Every function here takes and returns :mod:`._vec` vectors (``<16 x float>``
or ``<8 x double>``) and computes each lane independently, so the row
kernels, the column kernels and a single value (``lane(f(splat(v)), 0)``)
share one arithmetic and get the same bits. (Scalars are not accepted:
numba's scalar integer promotion would silently widen the bit tricks.)

Four exponentials, by the precision their callers need (the accuracy rules
are API.md section 1; the measurements are in ``tests/test_cpu_backend.py``
and ``docs/performance.md``):

* :func:`exp_f32` -- float32, within 1 ulp: Cody-Waite reduction
  ``x = n ln2 + r`` (two-part ln 2, FMAs), a degree-6 polynomial in Horner
  form (minimax-fitted, 3.8e-9 relative on ``|r| <= ln2/2``; the old
  Cephes degree-7 form bought nothing more at float32), and the scaling by
  ``2**n`` (:func:`._vec.scale_pow2`: one ``vscalefps`` on AVX-512, ``n``
  added to the exponent bits elsewhere; exact, since the clamps keep every
  result normal). Results below ``FLT_MIN`` flush to 0 (they are 2**-126 of
  the row's largest term, invisible in a row sum and in every output's eps
  budget); ``-inf -> 0``, NaN -> NaN (any payload), ``x > 88.72 -> inf``.
  14 operations per 16 lanes on AVX-512. :func:`exp_f32_sum` is its cheaper
  sibling for the terms of a fast-path row sum (``x <= 0``: degree 5, a
  clamp instead of the range tests; ~1.5 ulp, 11 operations).
* :func:`exp_f64` -- float64, relative error 3.1e-9 (2**-28.3): the same
  scheme in double (one-part ln 2 suffices: its error times ``|n| <= 1022``
  stays below 1e-13), degree 6. The float32 kernels' accurate path uses it
  on the exact float64 difference ``x - m`` of two float32 values: the
  float32 result is then rounded once from a value ~2**-28 accurate, where
  a float32 ``exp`` (1 ulp per term) left float32 log_softmax at 0.69-0.73
  eps on short rows (API.md demands no worse than PyTorch; the test suite
  holds it to 0.55). For ``x <= 0`` (row sums, pass 2 of softmax).
  :func:`exp_f64_any` is degree 7 (5.2e-11) for any ``x`` (``inf`` where
  ``e**x`` overflows): the backward's ``exp(dst)``, which ``|sum(diff_dst)|``
  multiplies.
* :func:`log_f64` -- float64 ``log`` to ~1 ulp, for row sums ``s >= 1`` (and
  0, inf, NaN): one implementation for every kernel, so a row and the same
  values as a column get the same bits (a libm ``log`` in one kernel and a
  vector one in another would differ in the last bit, which then rounds
  differently in ~1 of 10**5 float32 results).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._vec import as_float, as_int, scale_pow2, scale_pow2_inf, vfma, where

__all__ = ["exp_f32", "exp_f32_sum", "exp_f64", "exp_f64_any", "log_f64"]

_f32 = np.float32

# -- float32 ---------------------------------------------------------------
_LOG2E = _f32(1.44269504088896341)
# ln 2 split so that n * _NLN2_HI is exact for |n| < 2**9 (Cephes)
_NLN2_HI = _f32(-0.693359375)
_NLN2_LO = _f32(2.12194440e-4)
# adding 1.5 * 2**23 rounds to an integer held in the low mantissa bits
_MAGIC = _f32(12582912.0)
# e**r ~ 1 + r (1 + r (C0 + r (C1 + r (C2 + r (C3 + r C4))))), |r| <= ln2/2
_C0 = _f32(0.4999999403953552)
_C1 = _f32(0.1666652113199234)
_C2 = _f32(0.04166838899254799)
_C3 = _f32(0.008368710055947304)
_C4 = _f32(0.0013814611593261361)
_ONE = _f32(1.0)
_ZERO = _f32(0.0)
_INF = _f32(np.inf)
# e**-87.33 ~ FLT_MIN; e**88.72 ~ FLT_MAX
_UNDER = _f32(-87.33)
_OVER = _f32(88.72)


@njit(forceinline=True, error_model="numpy")
def exp_f32(x):
    """float32 ``e**x`` within 1 ulp (normal results), vector or scalar."""
    t = vfma(x, _LOG2E, _MAGIC)
    nf = t - _MAGIC
    r = vfma(nf, _NLN2_LO, vfma(nf, _NLN2_HI, x))
    p = vfma(_C4, r, _C3)
    p = vfma(p, r, _C2)
    p = vfma(p, r, _C1)
    p = vfma(p, r, _C0)
    p = vfma(p, r, _ONE)
    p = vfma(p, r, _ONE)
    # x >= -87.33 > -126 ln2 keeps p * 2**n normal (so the scaling is exact)
    y = where(x < _UNDER, _ZERO, scale_pow2(p, t, nf))
    return where(x > _OVER, _INF, y)


# e**r ~ 1 + r (1 + r (S0 + r (S1 + r (S2 + r S3)))): 1.06e-7 (0.9 ulp)
_S0 = _f32(0.499992311000824)
_S1 = _f32(0.16667114198207855)
_S2 = _f32(0.041890114545822144)
_S3 = _f32(0.008312548510730267)


@njit(forceinline=True, error_model="numpy")
def exp_f32_sum(x):
    """float32 ``e**x`` for the terms of a row sum, ``x <= 0`` (or NaN), within
    ~1.5 ulp: degree 5, and ``x`` clamped at -87.33 instead of tested, so
    ``-inf`` gives ~1.2e-38 (FLT_MIN), not 0 -- invisible in a sum whose
    largest term is exactly 1. 12 operations per 16 lanes (16 in
    :func:`exp_f32`); the fast path's sums are exp-bound for 16-bit data.
    Callers zero masked-off lanes themselves."""
    x = where(x < _UNDER, _UNDER, x)  # NaN stays NaN (the compare is False)
    t = vfma(x, _LOG2E, _MAGIC)
    nf = t - _MAGIC
    r = vfma(nf, _NLN2_LO, vfma(nf, _NLN2_HI, x))
    p = vfma(_S3, r, _S2)
    p = vfma(p, r, _S1)
    p = vfma(p, r, _S0)
    p = vfma(p, r, _ONE)
    p = vfma(p, r, _ONE)
    return scale_pow2(p, t, nf)


# -- float64 ---------------------------------------------------------------
_LOG2E64 = 1.4426950408889634
_NLN2_64 = -0.6931471805599453
_MAGIC64 = 6755399441055744.0  # 1.5 * 2**52
_MAGIC64_BITS = np.int64(0x4338000000000000)
# e**r ~ 1 + r (1 + r (E0 + r (E1 + ... + r E4))), |r| <= ln2/2: 3.1e-9
# (2**-28.3): the forward's float64 terms; a float32 log_softmax rounded
# once from them is within 0.5 + 0.03 eps
_E = (
    0.49999993451646163,
    0.16666520689273687,
    0.041668387373605384,
    0.008368709876176599,
    0.001381461267519394,
)
# one degree more (5.2e-11): the backward's e**dst, which |sum(diff_dst)|
# (up to ~20 on short random rows) multiplies
_D = (
    0.5000000067646355,
    0.16666665869416117,
    0.041666295082823206,
    0.008333497003360595,
    0.001394464925092057,
    0.00019790356920548828,
)
# below -708.39 the scale 2**n would leave the normal range (results there
# are 1e-308 of a row's largest term: 0 to every float32 kernel)
_UNDER64 = -708.0
# past ln(DBL_MAX) (709.78): e**x overflows from a little below it on
_CLAMP64 = 710.0


@njit(forceinline=True, error_model="numpy")
def _reduce64(x):
    """``(t, nf, r)``: ``x = n ln2 + r``, ``n = nf``, also in the low bits of ``t``."""
    t = vfma(x, _LOG2E64, _MAGIC64)
    nf = t - _MAGIC64
    return t, nf, vfma(nf, _NLN2_64, x)


@njit(forceinline=True, error_model="numpy")
def exp_f64(x):
    """float64 ``e**x`` for ``x <= 0`` (or NaN), relative error < 3.1e-9;
    ``x < -708`` (``-inf`` included) gives ``e**-708`` (~1e-308), which no
    float32 kernel can tell from 0. 11 operations per 8 lanes on AVX-512."""
    x = where(x < _UNDER64, _UNDER64, x)  # NaN stays NaN (the compare is False)
    t, nf, r = _reduce64(x)
    p = vfma(_E[4], r, _E[3])
    p = vfma(p, r, _E[2])
    p = vfma(p, r, _E[1])
    p = vfma(p, r, _E[0])
    p = vfma(p, r, 1.0)
    p = vfma(p, r, 1.0)
    return scale_pow2(p, t, nf)


@njit(forceinline=True, error_model="numpy")
def exp_f64_any(x):
    """float64 ``e**x`` for any ``x``, relative error < 5.2e-11; 0 below
    -708, ``inf`` where ``e**x`` overflows (above ``ln(DBL_MAX)`` = 709.78;
    ``x`` is clamped at 710, which overflows too).

    The overflow is the scaling's own (:func:`._vec.scale_pow2_inf`) rather
    than a test of ``x`` before and a select of ``inf`` after (AMD EPYC,
    LLVM znver4): pass 2 of the float32 backward, ``d - e**y S``, alone in
    cache on one thread (a scratch loop) 0.60-0.67 -> 0.53-0.59 ns per
    element; in-process A/B of the short-row backward, 2 threads, 1.03-1.20x
    (``docs/performance.md``, the seventh Zen 4 session). The same bits at
    every ``x`` up to 709.78; above it, up to ``ln(DBL_MAX)``, the old cut
    said ``inf`` where ``e**x`` is finite."""
    xc = where(x > _CLAMP64, _CLAMP64, where(x < _UNDER64, _UNDER64, x))
    t, nf, r = _reduce64(xc)
    p = vfma(_D[5], r, _D[4])
    p = vfma(p, r, _D[3])
    p = vfma(p, r, _D[2])
    p = vfma(p, r, _D[1])
    p = vfma(p, r, _D[0])
    p = vfma(p, r, 1.0)
    p = vfma(p, r, 1.0)
    return where(x < _UNDER64, 0.0, scale_pow2_inf(p, t, nf))


# -- log -------------------------------------------------------------------
_LN2_64 = 0.6931471805599453
_LN2_64_LO = 2.3190468138462996e-17
_SQRT_HALF_BITS = np.int64(0x3FE6A09E667F3BCD)  # sqrt(1/2)
_HIGH_MASK = np.int64(-(1 << 52))  # sign and exponent fields
# 2 atanh(u) = 2u + u**3 (L1 + u**2 (L2 + ...)), |u| <= 0.1716 (Taylor:
# the next term is 2 u**21 / 21 < 1.2e-17)
_L = tuple(2.0 / (2 * k + 1) for k in range(1, 10))


@njit(forceinline=True, error_model="numpy")
def log_f64(s):
    """float64 ``log(s)`` within ~1 ulp for ``s > 0``; ``log(0) = -inf``,
    ``log(inf) = inf``, NaN -> NaN (``s`` normal or 0: the kernels' row sums).

    ``s = 2**k f`` with ``f`` in ``[sqrt(1/2), sqrt(2))``,
    ``log f = 2 atanh((f - 1) / (f + 1))`` by its odd series, and
    ``k ln2`` added in two parts.
    """
    bits = as_int(s)
    # k = the exponent that brings s into [sqrt(1/2), sqrt(2)) (as in musl)
    tmp = bits - _SQRT_HALF_BITS
    f = as_float(bits - (tmp & _HIGH_MASK))
    kf = as_float((tmp >> 52) + _MAGIC64_BITS) - _MAGIC64  # int -> float
    u = (f - 1.0) / (f + 1.0)
    u2 = u * u
    p = vfma(_L[8], u2, _L[7])
    p = vfma(p, u2, _L[6])
    p = vfma(p, u2, _L[5])
    p = vfma(p, u2, _L[4])
    p = vfma(p, u2, _L[3])
    p = vfma(p, u2, _L[2])
    p = vfma(p, u2, _L[1])
    p = vfma(p, u2, _L[0])
    lf = vfma(p * u2, u, u + u)
    y = vfma(kf, _LN2_64, vfma(kf, _LN2_64_LO, lf))
    y = where(s == 0.0, -np.inf, y)
    y = where(s == np.inf, np.inf, y)
    return where(s != s, s, y)
