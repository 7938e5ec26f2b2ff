"""``exp`` and ``log`` for the CPU kernels, on :mod:`._vec` vectors or scalars.

Every function here takes and returns :mod:`._vec` vectors (``<16 x float>``
or ``<8 x double>``) and computes each lane independently, so the row
kernels, the column kernels and a single value (``lane(f(splat(v)), 0)``)
share one arithmetic and get the same bits. (Scalars are not accepted:
numba's scalar integer promotion would silently widen the bit tricks.)

Six exponentials, by the precision their callers need (the accuracy rules
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
  14 operations per 16 lanes on AVX-512. Its output is a result (softmax,
  the backward's ``e**dst``), so it keeps the two-part reduction.
* :func:`exp_f32_sum` -- the terms of a fast-path row sum (16-bit data,
  ``x <= 0``), whose largest term is exactly 1: ``2**y`` for ``y = x
  log2(e)`` rounded once, ``2**(y - floor(y))`` by a degree-5 polynomial
  and the scaling by ``2**floor(y)`` (:func:`._vec.frac_pow2`,
  :func:`._vec.times_pow2`: one ``vreduceps`` and one ``vscalefps`` on
  AVX-512, the same bits elsewhere). ``y``'s rounding costs ``|x| 2**-24``
  relative, which far from 0 exceeds an ulp, but ``|x| e**x <= 1/e``: no
  term is off by more than 1.8e-7 of the largest. No clamp (``vscalefps``
  gives denormals and 0 by itself): 8 operations, where the Cody-Waite
  form took 11.
* :func:`exp_f32_16bit` -- :func:`exp_f32_sum`'s arithmetic for any ``x``,
  for the backward's ``e**dst`` where the result is 16-bit: within
  ``1.5e-7 + 7.3e-8 |x|`` relative, invisible once rounded to 8 or 11
  bits, in 8 operations where :func:`exp_f32` takes 14 (the bfloat16
  backward 1.16-1.20x faster, docs/performance.md).
* :func:`exp_f64` -- float64, relative error 2.1e-9 (2**-28.8): the
  ``2**y`` scheme in double (``y``'s rounding is worth ``|x| 2**-53``:
  nothing), degree 6, 9 operations per 8 lanes (11 for Cody-Waite). The
  float32 kernels' accurate path uses it on the exact float64 difference
  ``x - m`` of two float32 values: the float32 result is then rounded once
  from a value ~2**-28 accurate, where a float32 ``exp`` (1 ulp per term)
  left float32 log_softmax at 0.69-0.73 eps on short rows (API.md demands
  no worse than PyTorch; the test suite holds it to 0.55). For ``x <= 0``
  (row sums, pass 2 of softmax). :func:`exp_f64_any` is degree 7
  (4.4e-11) for any ``x`` (``inf`` where ``e**x`` overflows: the scaling's
  own): the backward's ``exp(dst)``, which ``|sum(diff_dst)|`` multiplies.
* :func:`exp_f64_ulp` -- float64 results (the float64 kernels,
  :mod:`.float64`): within one ulp (0.86 measured), Cody-Waite reduction
  with a two-part ln 2, the Taylor series to degree 13 and the exact
  scaling; 0 below ``DBL_MIN``, ``inf`` above ``DBL_MAX``. ~22 operations
  per 8 lanes: 0.48 ns an element in L1 against 4.6 for a ``math.exp``
  call (one thread, the Intel Xeon).
* :func:`log_f64` -- float64 ``log`` to ~1 ulp, for row sums ``s >= 1`` (and
  0, inf, NaN): one implementation for every kernel, so a row and the same
  values as a column get the same bits (a libm ``log`` in one kernel and a
  vector one in another would differ in the last bit, which then rounds
  differently in ~1 of 10**5 float32 results).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._vec import (
    as_float,
    as_int,
    frac_pow2,
    frac_pow2_normal,
    pow2_normal,
    scale_pow2,
    times_pow2,
    times_pow2_normal,
    vfma,
    where,
)

__all__ = ["exp_f32", "exp_f32_sum", "exp_f32_16bit", "exp_f32_for", "exp_f64", "exp_f64_any", "exp_f64_ulp", "log_f64"]

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


# 2**f ~ 1 + f (P[0] + f (P[1] + ... + f P[4])), 0 <= f < 1: relative
# 8.2e-8 (a least-squares fit reweighted to equal ripple, 1 exact at f = 0:
# ``python benchmarks/exp_fit.py``), 1.4e-7 with float32 Horner's roundings
_P = (
    _f32(0.6931513118153957),
    _f32(0.24016445003508546),
    _f32(0.05579991352046722),
    _f32(0.009017029756601378),
    _f32(0.001867130331958636),
)


@njit(forceinline=True, error_model="numpy")
def _exp_pow2(x, log2e, q, one):
    """``e**x`` as ``2**floor(y) * 2**f``, ``y = x log2e`` rounded once and
    ``f = y - floor(y)`` (:func:`._vec.frac_pow2`: one ``vreduce``), with
    ``2**f = 1 + f (q[0] + f (q[1] + ...))`` by Horner's rule, an ``fma`` a
    step, and the scaling's one rounding (:func:`._vec.times_pow2`: one
    ``vscalef``): the scheme of :func:`exp_f32_sum`, :func:`exp_f64` and
    :func:`exp_f64_any`, which differ in precision and degree only.

    On AVX2, where each of those two instructions takes several, a vector
    whose every ``2**floor(y)`` is normal (:func:`._vec.pow2_normal`, as
    good as every vector of real rows) skips the clamps and the second
    power of two: the same bits, 1.04-1.22x faster there (in-process A/B
    of an AVX2 build, docs/performance.md). On AVX-512 ``pow2_normal`` is
    the constant False and the branch folds away."""
    y = x * log2e
    if pow2_normal(y):  # AVX2 only (False on AVX-512): no clamps, one scaling
        return times_pow2_normal(_horner(frac_pow2_normal(y), q, one), y)
    return times_pow2(_horner(frac_pow2(y), q, one), y)


@njit(forceinline=True, error_model="numpy")
def _horner(f, q, one):
    """``1 + f (q[0] + f (q[1] + ...))``, an ``fma`` a step."""
    p = vfma(q[-1], f, q[-2])
    for i in range(len(q) - 3, -1, -1):  # unrolled: q is a constant tuple
        p = vfma(p, f, q[i])
    return vfma(p, f, one)


@njit(forceinline=True, error_model="numpy")
def exp_f32_sum(x):
    """float32 ``e**x`` for the terms of a row sum, ``x <= 0`` (or NaN), as
    ``2**y``, ``y = x log2(e)`` rounded once: ``2**f`` of its fraction ``f =
    y - floor(y)`` (:func:`._vec.frac_pow2`, one ``vreduceps``) by a degree-5
    polynomial, scaled by ``2**floor(y)`` (:func:`._vec.times_pow2`, one
    ``vscalefps``, which takes the floor itself). 8 operations per 16 lanes
    where the Cody-Waite form took 11 (a clamp, the rounding trick, a
    two-part reduction): 0.092-0.096 ns an element alone in L1 against
    0.115 (``python benchmarks/strided_limits.py``, its "exp alone"; Intel
    Xeon, LLVM rocketlake), and the fast path's sums are exp-bound for
    16-bit data.

    Error: ``2**f`` within 1.4e-7 relative, plus ``y``'s rounding (up to
    ``2**-24 |x|`` relative) and ``log2(e)``'s (``1.3e-8 |x|``). So a term
    is within ``1.5e-7 e**x + 7.3e-8 |x| e**x`` (``tests/test_cpu_backend.py``),
    and as ``|x| e**x <= 1/e``, no term is off by more than 1.8e-7 of the
    row's largest term (exactly 1, at ``x = 0``), which is what a sum sees:
    the old form's ~1.5 ulp. Exact where it matters: ``e**0 = 1``. No
    clamp: ``-inf`` and everything below ~-103.3 give 0, below -87.3 a
    denormal (rounded once), NaN gives NaN. Callers zero masked-off lanes
    themselves."""
    return _exp_pow2(x, _LOG2E, _P, _ONE)


@njit(forceinline=True, error_model="numpy")
def exp_f32_16bit(x):
    """float32 ``e**x`` for a result rounded to bfloat16 or float16: the
    backward's ``e**dst`` when its output is 16-bit
    (:func:`.segment.backward_vec`). :func:`exp_f32_sum`'s arithmetic, for
    any ``x``: within ``1.5e-7 e**x + 7.3e-8 |x| e**x`` (``y = x
    log2(e)``'s rounding costs ``2**-24 |x|`` relative). For ``x <= 0`` (``|x| e**x <= 1/e``) the term ``e**dst S``
    is then off by at most 1.8e-7 ``|S|``, the scale the backward's error
    is measured against (the suite's bound: 16 float32 eps, 1.9e-6), which
    a 16-bit result then rounds at 2**-11 (float16) or 2**-8 relative; for
    ``x > 0`` (a ``dst`` that no forward gave) 6.6e-6 relative at most
    below the overflow (measured over [-110, 95]: 0.97 of that bound at
    most, 64 float32 ulps near the overflow). Below -87.3 a denormal, 0 below
    about -104 and for ``-inf``; ``x > 88.72`` gives inf (the scaling's
    own); NaN gives NaN. 8 operations per 16 lanes where :func:`exp_f32`
    takes 14: the 16-bit backward's pass 2 was exp-bound."""
    return _exp_pow2(x, _LOG2E, _P, _ONE)


@njit(forceinline=True, error_model="numpy")
def exp_f32_for(x, half):
    """The float32 ``e**x`` of a result: :func:`exp_f32_16bit` where it is
    rounded to 16 bits (``half``, a constant of the compile), :func:`exp_f32`
    (within 1 ulp) for a float32 result. The one place the fast backward's
    ``e**dst`` is chosen (:func:`.segment.backward_vec`,
    :func:`.columns._grad_vec`)."""
    return exp_f32_16bit(x) if half else exp_f32(x)


# -- float64 ---------------------------------------------------------------
_LOG2E64 = 1.4426950408889634
_MAGIC64 = 6755399441055744.0  # 1.5 * 2**52
_MAGIC64_BITS = np.int64(0x4338000000000000)
# 2**f ~ 1 + f (E[0] + f (E[1] + ... + f E[5])), 0 <= f < 1: 2.1e-9 (2**-28.8;
# least-squares reweighted to equal ripple, 1 exact at f = 0): the
# forward's float64 terms; a float32 log_softmax rounded once from them is
# within 0.5 + 0.03 eps
_E = (
    0.6931470444429508,
    0.24022930555807864,
    0.05548528058845635,
    0.00967545163485346,
    0.0012467845756323618,
    0.00021612917541450282,
)
# one degree more (4.4e-11): the backward's e**dst, which |sum(diff_dst)|
# (up to ~20 on short random rows) multiplies
_D = (
    0.693147184344226,
    0.24022640511621873,
    0.05550502302047056,
    0.009614283171233593,
    0.0013419015743850087,
    0.0001437720697601242,
    2.1430617323953813e-05,
)


@njit(forceinline=True, error_model="numpy")
def exp_f64(x):
    """float64 ``e**x`` for ``x <= 0`` (or NaN), relative error < 2.1e-9, as
    ``2**y``, ``y = x log2(e)`` (its rounding is worth ``|x| 2**-53``
    relative, nothing at float32): ``2**f`` of ``f = y - floor(y)``
    (:func:`._vec.frac_pow2`, one ``vreducepd``) by a degree-6 polynomial,
    scaled by ``2**floor(y)`` (:func:`._vec.times_pow2`, one ``vscalefpd``).
    9 operations per 8 lanes on AVX-512 (11 for the Cody-Waite form before,
    with its clamp). ``e**0 = 1`` exactly; no clamp: denormals below -708.4,
    0 below -745.2 and for ``-inf``; NaN gives NaN."""
    return _exp_pow2(x, _LOG2E64, _E, 1.0)


@njit(forceinline=True, error_model="numpy")
def exp_f64_any(x):
    """float64 ``e**x`` for any ``x``, relative error < 4.4e-11 (plus ``y``'s
    rounding, ``|x| 2**-53``): :func:`exp_f64` with a degree-7 polynomial.
    ``inf`` where ``e**x`` overflows (the scaling's own: ``vscalefpd``
    rounds past ``DBL_MAX`` to inf), denormals below -708.4, 0 below -745.2
    and for ``-inf``, NaN for NaN. No range tests: 10 operations per 8
    lanes where the Cody-Waite form took 14 (two clamps, a select)."""
    return _exp_pow2(x, _LOG2E64, _D, 1.0)


# float64 results (the float64 kernels, :mod:`.float64`): ln 2 in two parts,
# the first with 32 trailing zero bits, so n * _LN2_HI64 is exact (fdlibm)
_LN2_HI64 = 6.93147180369123816490e-01
_LN2_LO64 = 1.90821492927058770002e-10
# e**r = 1 + r (1 + r/2 + r**2/6 + ... + r**12/13!) (Taylor, |r| <= ln2/2:
# the next term is 4.3e-18 relative)
_TAYLOR = tuple(1.0 / float(np.prod(np.arange(1, k + 1, dtype=np.float64))) for k in range(1, 14))
# e**x < DBL_MIN below: flushed to 0 (2**-1022 of a row's largest term,
# nothing in a float64 sum); e**x > DBL_MAX above
_UNDER64 = -708.3964185322641
_OVER64 = 709.782712893384


@njit(forceinline=True, error_model="numpy")
def exp_f64_ulp(x):
    """float64 ``e**x`` within one ulp (0.91 worst case, ~0.5 typical), for
    float64 results: vector or scalar, so the float64 kernels' loops
    vectorise (a ``math.exp`` call per element kept them scalar: 70% of
    their time, docs/performance.md).

    Cody-Waite reduction ``x = n ln2 + r`` (``n ln2_hi`` exact, ``|r| <=
    ln2/2``), ``e**r = 1 + r u(r)`` with ``u`` the Taylor series to
    ``r**12/13!`` by Horner (its error, ``|r u| 2**-53``, adds at most 0.41
    ulp to the last addition's 0.5), scaled by ``2**n``
    (:func:`._vec.scale_pow2`: exact, the result normal). Results below
    ``DBL_MIN`` flush to 0 (``-inf -> 0``), above ``DBL_MAX`` are ``inf``;
    NaN gives NaN."""
    t = vfma(x, _LOG2E64, _MAGIC64)
    nf = t - _MAGIC64
    r = vfma(nf, -_LN2_HI64, x)
    r = vfma(nf, -_LN2_LO64, r)
    u = vfma(_TAYLOR[12], r, _TAYLOR[11])
    for i in range(10, -1, -1):  # unrolled: a constant tuple
        u = vfma(u, r, _TAYLOR[i])
    y = scale_pow2(vfma(u, r, 1.0), t, nf)
    y = where(x < _UNDER64, 0.0, y)
    return where(x > _OVER64, np.inf, y)


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
