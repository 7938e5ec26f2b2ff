"""Scalar building blocks the CPU kernels inline: exp, maxnum, loads, stores.

Everything here is an ``@njit`` function or a numba ``@intrinsic``; LLVM
inlines them into the kernels, and the kernels' loops vectorise around them
(checked with ``inspect_asm``: ``zmm`` registers, ``vmaxps``, no gathers on
the unit-stride paths).

Buffers reach the kernels as flat 1-D arrays of their *storage* type:

==========  ==============  ===============  ===========================
dtype       storage view    compute type     store
==========  ==============  ===============  ===========================
float32     float32         float32          as is
bfloat16    uint16          float32          round-to-nearest-even bits
float16     int16           float32          LLVM ``fptrunc`` (RNE)
float64     float64         float64          as is
==========  ==============  ===============  ===========================

float16 is viewed as *int16* (and bfloat16 as *uint16*) so that numba picks
the right load/store overload from the buffer's type alone; numba 0.68 has no
float16 scalar type on the CPU, so half floats are converted with LLVM's
``fpext``/``fptrunc`` (``vcvtph2ps``/``vcvtps2ph`` on F16C machines).

The float32 ``exp`` is a Cody-Waite range reduction, the Cephes ``expf``
polynomial and an exponent built with integer ops; it vectorises (numba's
``math.exp`` compiles to scalar ``expf`` calls: 0.8 G/s vs 6-7 G/s, see
docs/performance.md) and is within 1 ulp of the correctly rounded result
(``tests/test_cpu_backend.py::test_exp32_ulp``). It must stay free of
fast-math reassociation, which would fold ``(t + magic) - magic`` away; no
function in this package uses ``fastmath``.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

# ln 2 in two parts (the first with 32 trailing zero bits: k * hi is exact),
# log2(e) and the 1.5 * 2**52 rounding constant: one definition, _math's
from ._math import _LN2_HI64, _LN2_LO64, _LOG2E64, _MAGIC64, _MAGIC64_BITS, log_f64
from ._vec import as_float, as_int, lane, splat, vfma, where

__all__ = [
    "wide_vectors",
    "I0",
    "I1",
    "TRUE",
    "FALSE",
    "maxnum",
    "view",
    "keep",
    "elem_ptr",
    "fma",
    "exp32",
    "exp64",
    "exp_c",
    "load",
    "store",
    "neg_inf",
    "scratch",
    "f32_bits",
    "bits_f32",
    "two_prod",
    "two_sum",
    "acc_dd",
    "add_dd",
    "exp_dd",
    "exp_dd_any",
    "exp_dd_any_vec",
    "exp_dd_vec",
    "log_dd",
    "log_dd_vec",
]

#: Constants passed from one jitted function to another. A bare ``0``, ``1``
#: or ``True`` reaches a cached callee as a *literal* type, and numba then
#: compiles a separate specialization of the callee (and of all it calls)
#: for that literal: the JAX bridge compiled every row and column kernel
#: twice (~100 s per dtype in a fresh clone). numpy scalars type as plain
#: int64 / bool. So do helpers (``forceinline``): ``rows._forward_short_rows``
#: compiled twice, once for ``True`` and once for ``False``.
I0 = np.int64(0)
I1 = np.int64(1)
TRUE = np.bool_(True)
FALSE = np.bool_(False)

_F32 = types.float32
_F64 = types.float64


# ---------------------------------------------------------------------------
# intrinsics
# ---------------------------------------------------------------------------
@intrinsic
def maxnum(typingctx, a, b):
    """``llvm.maxnum``: the larger of two floats, ignoring a NaN operand.

    Unlike ``max()``/``np.maximum``/a ternary, this is the one spelling of a
    running max that LLVM vectorises as a reduction (``vmaxps``). Because it
    drops NaN, callers detect NaN rows separately (a NaN makes the sum NaN).
    """
    if a != b or a not in (_F32, _F64):
        raise TypingError("maxnum: expected two float32 or two float64 values")
    sig = a(a, b)

    def codegen(context, builder, signature, args):
        ft = args[0].type
        fn = builder.module.declare_intrinsic(
            "llvm.maxnum", [ft], ir.FunctionType(ft, [ft, ft])
        )
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def wide_vectors(typingctx):
    """Mark the calling function ``"prefer-vector-width"="512"``.

    LLVM's tuning for Intel server cores (``skylake-avx512`` ... ``emeraldrapids``)
    prefers 256-bit vectors even where AVX-512 exists, so numba's loops there
    compiled to ``ymm`` (``_seg_max``: 164 ymm / 0 zmm instructions). The
    attribute lifts that preference for this function only; on AVX2-only CPUs
    it changes nothing (the widest legal vector is 256 bits) and on Zen 4 it
    is already the default. Call it first thing in every ``@njit`` function
    that holds a hot loop: each numba function is optimised (and vectorised)
    in its own LLVM module before it is inlined into its callers, so the
    attribute of the caller does not reach a callee's loops.
    """
    sig = types.none()

    def codegen(context, builder, signature, args):
        # llvmlite's AttributeSet only admits enum attributes by name; a
        # string attribute is written verbatim into the function's group
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def fma(typingctx, a, b, c):
    """``llvm.fma``: ``a * b + c`` with one rounding (``vfmadd`` on AVX-512).

    Used explicitly rather than letting LLVM contract ``a * b + c``: the
    result is then the same in scalar and vector code, which keeps every
    layout's arithmetic bit-identical.
    """
    if not (a == b == c) or a not in (_F32, _F64):
        raise TypingError("fma: expected three float32 or three float64 values")
    sig = a(a, b, c)

    def codegen(context, builder, signature, args):
        ft = args[0].type
        fn = builder.module.declare_intrinsic(
            "llvm.fma", [ft], ir.FunctionType(ft, [ft, ft, ft])
        )
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def elem_ptr(typingctx, arr, idx):
    """Pointer to element ``idx`` of a 1-D array (no bounds or sign checks)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        raise TypingError("elem_ptr: expected (array, integer)")
    sig = types.CPointer(arr.dtype)(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.gep(ary.data, [args[1]])

    return sig, codegen


@intrinsic
def keep(typingctx, buf):
    """A use of ``buf`` that compiles to nothing. numba frees a local array
    after its last use in the function, and an ownerless :func:`view` of it
    is not a use: a function that allocates a scratch array and works
    through views of it calls ``keep(scratch)`` after its last view access,
    or the memory may be handed to the next allocation while the views still
    write it (a view of a freed ``np.zeros(1000)`` read the 7.0 that a later
    ``np.empty(1000)`` was filled with)."""
    sig = types.none(buf)

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return sig, codegen


@njit
def view(buf, off, n):
    """``buf[off:off + n]`` as an array *without* a reference-counted owner.

    A numba slice shares (and atomically increfs/decrefs) the parent's
    meminfo; with two threads slicing rows of the same buffer that cache
    line bounced between cores on every row -- ~250 ns per row at n = 112
    (perf02: 57 ms vs PyTorch's 14). A ``carray`` over the element pointer
    has no meminfo, so no atomics. Valid while ``buf`` is alive (the
    caller's frame holds it).
    """
    return carray(elem_ptr(buf, off), (n,))


@intrinsic
def f32_bits(typingctx, x):
    """Bit pattern of a float32 as an int32 (a bitcast, no conversion)."""
    if x != _F32:
        raise TypingError("f32_bits: expected a float32")

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(_F32), codegen


@intrinsic
def bits_f32(typingctx, i):
    """The float32 whose bit pattern is the low 32 bits of integer ``i``."""
    if not isinstance(i, types.Integer):
        raise TypingError("bits_f32: expected an integer")

    def codegen(context, builder, signature, args):
        v = args[0]
        if v.type.width > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif v.type.width < 32:
            v = builder.zext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return _F32(i), codegen


@intrinsic
def f64_bits(typingctx, x):
    """Bit pattern of a float64 as an int64."""
    if x != _F64:
        raise TypingError("f64_bits: expected a float64")

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(_F64), codegen


@intrinsic
def bits_f64(typingctx, i):
    """The float64 whose bit pattern is int64 ``i``."""
    if not isinstance(i, types.Integer) or i.bitwidth != 64:
        raise TypingError("bits_f64: expected a 64-bit integer")

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return _F64(i), codegen


@intrinsic
def _half_to_f32(typingctx, h):
    """IEEE half stored in an int16 -> float32 (exact)."""

    def codegen(context, builder, signature, args):
        half = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return _F32(types.int16), codegen


@intrinsic
def _f32_to_half(typingctx, x):
    """float32 -> IEEE half bits in an int16, rounded to nearest even."""

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return types.int16(_F32), codegen


# ---------------------------------------------------------------------------
# exp
# ---------------------------------------------------------------------------
_LOG2E = np.float32(1.44269504088896341)
# ln 2 split so that n * _LN2_HI is exact for |n| < 2**9 (Cephes)
_NLN2_HI = np.float32(-0.693359375)
_NLN2_LO = np.float32(2.12194440e-4)
# adding then subtracting 1.5 * 2**23 rounds to the nearest integer, and the
# sum's low mantissa bits hold that integer: no float->int conversion (which
# would be poison for NaN in LLVM) is needed.
_MAGIC = np.float32(12582912.0)
_MAGIC_BITS = np.int32(0x4B400000)
_P0 = np.float32(1.9875691500e-4)
_P1 = np.float32(1.3981999507e-3)
_P2 = np.float32(8.3334519073e-3)
_P3 = np.float32(4.1665795894e-2)
_P4 = np.float32(1.6666665459e-1)
_P5 = np.float32(5.0000001201e-1)
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_INF32 = np.float32(np.inf)
_NINF32 = np.float32(-np.inf)
_NAN32 = np.float32(np.nan)
# below -104 every result is 0 (the smallest subnormal is 2**-149 ~ e**-103.3);
# above 89 every result is inf (FLT_MAX ~ e**88.72)
_UNDER = np.float32(-104.0)
_OVER = np.float32(89.0)


@njit
def exp32(x):
    """float32 ``e**x``, within 1 ulp, vectorisable; NaN -> NaN, -inf -> 0.

    ``n = round(x / ln 2)``, ``r = x - n ln 2`` (two-part ln 2, fused
    multiply-adds), ``e**r`` by the Cephes polynomial in FMA Horner form,
    then ``2**n`` applied as
    two exponent-bit scalings ``2**(n//2) * 2**(n - n//2)`` so subnormal
    results stay graded. ``e**0`` is exactly 1.
    """
    t = fma(x, _LOG2E, _MAGIC)
    nf = t - _MAGIC
    n = f32_bits(t) - _MAGIC_BITS
    r = fma(nf, _NLN2_LO, fma(nf, _NLN2_HI, x))
    p = fma(_P0, r, _P1)
    p = fma(p, r, _P2)
    p = fma(p, r, _P3)
    p = fma(p, r, _P4)
    p = fma(p, r, _P5)
    p = fma(p, r * r, r) + _ONE
    n1 = n >> 1
    n2 = n - n1
    s1 = bits_f32((n1 + 127) << 23)
    s2 = bits_f32((n2 + 127) << 23)
    y = (p * s1) * s2
    # comparisons are False for NaN, so NaN flows through to y
    y = _ZERO if x < _UNDER else y
    y = _INF32 if x > _OVER else y
    return y


# Taylor coefficients 1/k!, k = 8..2: truncation error < 3e-10 on |r| <= ln2/2,
# 1/500 of a float32 ulp: enough to round a float32 result once from it
_Q = tuple(1.0 / math.factorial(k) for k in range(8, 1, -1))


@njit
def exp64(x):
    """Vectorisable float64 ``e**x`` (relative error < 3e-10); NaN -> NaN.

    Used where a float32 result must be rounded once from a value more
    accurate than float32 (the log_softmax backward's ``exp(dst) * S``):
    :func:`exp32`'s 1 ulp would otherwise dominate that error.
    """
    t = fma(x, _LOG2E64, _MAGIC64)
    nf = t - _MAGIC64
    n = f64_bits(t) - _MAGIC64_BITS
    r = fma(nf, -_LN2_LO64, fma(nf, -_LN2_HI64, x))  # fdlibm's split of ln 2
    p = _Q[0]
    for q in _Q[1:]:
        p = fma(p, r, q)
    p = fma(p, r, 1.0)
    p = fma(p, r, 1.0)
    n1 = n >> 1
    n2 = n - n1
    y = (p * bits_f64((n1 + 1023) << 52)) * bits_f64((n2 + 1023) << 52)
    y = 0.0 if x < -746.0 else y
    y = np.inf if x > 710.0 else y
    return y


def exp_c(x):
    """``e**x`` in the compute type: :func:`exp32` or ``math.exp`` (float64)."""
    raise NotImplementedError  # pragma: no cover - replaced by the overload


@overload(exp_c)
def _exp_c_ol(x):
    if x == _F32:
        return lambda x: exp32(x)
    if x == _F64:
        return lambda x: math.exp(x)
    raise TypingError(f"exp_c: unsupported type {x}")


# ---------------------------------------------------------------------------
# loads and stores
# ---------------------------------------------------------------------------
def load(buf, i):
    """Element ``i`` of a storage-typed buffer, widened to the compute type."""
    raise NotImplementedError  # pragma: no cover


@overload(load)
def _load_ol(buf, i):
    dt = buf.dtype
    if dt == _F32 or dt == _F64:
        return lambda buf, i: buf[i]
    if dt == types.uint16:  # bfloat16: the high half of a float32
        return lambda buf, i: bits_f32(np.uint32(buf[i]) << np.uint32(16))
    if dt == types.int16:  # float16
        return lambda buf, i: _half_to_f32(buf[i])
    raise TypingError(f"load: unsupported buffer dtype {dt}")


@njit
def _bf16_bits(v):
    """float32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN."""
    b = np.uint32(f32_bits(v))
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    if v != v:
        r = (b >> np.uint32(16)) | np.uint32(0x0040)
    return np.uint16(r)


@njit
def _f64_to_f32_odd(v):
    """float64 -> float32 rounded to odd: rounding that again to bfloat16 or
    float16 (>= 2 fewer mantissa bits) equals one correct rounding of ``v``.
    """
    f = np.float32(v)
    if np.float64(f) != v and f == f and abs(f) != _INF32:
        b = f32_bits(f)
        # f was rounded away from zero: step one ulp back toward zero
        if abs(np.float64(f)) > abs(v):
            b = b - np.int32(1)
        f = bits_f32(b | np.int32(1))
    elif abs(f) == _INF32 and not math.isinf(v):
        # overflowed while rounding: the odd neighbour below is FLT_MAX
        f = np.float32(math.copysign(3.4028234663852886e38, v))
    return f


def store(buf, i, v):
    """Round compute-type value ``v`` once into element ``i`` of ``buf``."""
    raise NotImplementedError  # pragma: no cover


@overload(store)
def _store_ol(buf, i, v):
    dt = buf.dtype
    if v == _F32:
        if dt == _F32 or dt == _F64:

            def impl(buf, i, v):
                buf[i] = v

        elif dt == types.uint16:

            def impl(buf, i, v):
                buf[i] = _bf16_bits(v)

        elif dt == types.int16:

            def impl(buf, i, v):
                buf[i] = _f32_to_half(v)

        else:
            raise TypingError(f"store: unsupported buffer dtype {dt}")
        return impl
    if v == _F64:
        if dt == _F64 or dt == _F32:

            def impl(buf, i, v):
                buf[i] = v

        elif dt == types.uint16:

            def impl(buf, i, v):
                buf[i] = _bf16_bits(_f64_to_f32_odd(v))

        elif dt == types.int16:

            def impl(buf, i, v):
                buf[i] = _f32_to_half(_f64_to_f32_odd(v))

        else:
            raise TypingError(f"store: unsupported buffer dtype {dt}")
        return impl
    raise TypingError(f"store: unsupported value type {v}")


# ---------------------------------------------------------------------------
# compute-type helpers (the compute type follows the input buffer)
# ---------------------------------------------------------------------------
def neg_inf(buf):
    """``-inf`` in the compute type of ``buf``."""
    raise NotImplementedError  # pragma: no cover


@overload(neg_inf)
def _neg_inf_ol(buf):
    if buf.dtype == _F64:
        return lambda buf: -np.inf
    return lambda buf: _NINF32


def float32_result(buf):
    """Whether ``buf`` holds float32 results: a constant of its type. The
    kernels' accurate path is for float32 results only (the backend's
    plans); ``accurate and float32_result(out)`` lets LLVM drop that path
    from the kernels compiled for 16-bit results: ``rows.forward_short``
    for bfloat16 compiled in 63.7 s against 72.8 (a first call in a fresh
    process and cache, one run each; AMD EPYC Zen 3). For float32 results it
    is ``accurate and True``: the run-time choice as before."""
    raise NotImplementedError  # pragma: no cover


@overload(float32_result, inline="always")
def _float32_result_ol(buf):
    f32 = buf.dtype == types.float32
    return lambda buf: f32


def scratch(buf, n):
    """A new uninitialised 1-D array of ``n`` compute-type elements."""
    raise NotImplementedError  # pragma: no cover


@overload(scratch)
def _scratch_ol(buf, n):
    if buf.dtype == _F64:
        return lambda buf, n: np.empty(n, np.float64)
    return lambda buf, n: np.empty(n, np.float32)


# ---------------------------------------------------------------------------
# double-double helpers (float64 accuracy beyond one rounding)
# ---------------------------------------------------------------------------
@njit
def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e == a + b`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(forceinline=True)
def two_prod(a, b):
    """``(p, e)`` with ``p = fl(a * b)`` and ``p + e == a * b`` exactly (the
    ``fma`` gives ``e``)."""
    p = a * b
    return p, vfma(a, b, -p)


@njit
def acc_dd(hi, lo, v):
    """Add ``v`` to the compensated sum ``(hi, lo)``: ``hi`` is the plain running
    sum, ``lo`` collects every addition's exact rounding error."""
    s, e = two_sum(hi, v)
    return s, lo + e


@njit
def add_dd(ah, al, bh, bl):
    """``(ah + al) + (bh + bl)`` as a normalised double-double."""
    s, e = two_sum(ah, bh)
    e = e + (al + bl)  # (not +=: vectors have no in-place add)
    h = s + e
    return h, e - (h - s)


# 1/k!, k = 17..3, for the tail r**3 * P(r) of exp(r), |r| <= ln2/2
_TAIL = tuple(1.0 / math.factorial(k) for k in range(17, 2, -1))
#: ... to k = 14 for :func:`exp_dd_any_vec`: the first term left out,
#: ``r**15 / 15!``, is 9.8e-20 (2**-63) at ``|r| = ln2/2``
_TAIL14 = _TAIL[3:]


@njit(forceinline=True)
def _exp_dd_reduced(a, tail):
    """``e**a = 2**k (hi + lo)``: the double-double ``(hi, lo)`` of ``e**r``
    and ``t``, whose bits hold ``k`` (:func:`exp_dd_vec`'s doc; ``tail``: the
    Taylor coefficients of ``P``, highest first)."""
    t = vfma(a, _LOG2E64, _MAGIC64)
    kf = t - _MAGIC64
    r0 = a - kf * _LN2_HI64
    p, pe = two_prod(kf, _LN2_LO64)
    r, re = two_sum(r0, -p)
    re = re - pe
    q = splat(tail[0])
    for c in tail[1:]:
        q = vfma(q, r, c)
    q = q * (r * r * r)
    sq, sqe = two_prod(r, r)
    a1, e1 = two_sum(splat(1.0), r)
    a2, e2 = two_sum(a1, 0.5 * sq)
    lo = e1 + e2 + 0.5 * sqe + q + re * a2
    hi = a2 + lo
    return hi, lo - (hi - a2), t


@njit(forceinline=True)
def exp_dd_vec(a):
    """``e**a`` as a double-double ``(hi, lo)`` of float64 vectors (8 lanes),
    relative error ~2**-58, for ``0 <= a <= 700`` (the log of a row sum; no
    special values: other lanes give garbage, never a trap).

    ``a = k ln2 + r`` with ``k`` rounded to nearest by the 1.5 * 2**52
    trick and ``r`` kept as a double-double (``k * ln2_hi`` is exact and
    its subtraction is exact by Sterbenz), ``e**r = 1 + r + r**2/2 + r**3
    P(r)`` with the first three terms summed error-free and the tail
    (< 0.0075) in plain float64, then the exact scaling by ``2**k`` (its
    bits made from ``k``'s, as :func:`._math.log_f64` makes its exponent).
    """
    hi, lo, t = _exp_dd_reduced(a, _TAIL)
    scale = as_float((as_int(t) - _MAGIC64_BITS + 1023) << 52)
    return hi * scale, lo * scale


#: :func:`exp_dd_any_vec` clamps its argument here: beyond it ``e**a`` is 0
#: or inf either way, and ``k`` stays within the two scalings' reach
_DD_CLAMP = 1400.0


@njit(forceinline=True)
def exp_dd_any_vec(a):
    """:func:`exp_dd_vec` for any ``a`` (float64 vectors): ``2**k`` applied
    as two exact scalings ``2**(k//2) * 2**(k - k//2)``, so results that
    are subnormal (``a < -708.4``) or 0 (``a < -745.2``, ``-inf``) and
    overflows (``a > 709.78``, ``+inf``) come out of the arithmetic, as do
    NaNs. Relative error < 2**-57 (``tests/test_float64_kernels.py``) down
    to ``a ~ -670``; below it ``lo`` is subnormal and loses its bits, up to
    2**-53 relative (the rounding of ``hi``), where ``e**a`` is under
    1e-291. The log_softmax backward's ``e**dst`` on float64 data
    (:func:`.float64._bwd_value`), measured against a scale of at least 1."""
    a = where(a < -_DD_CLAMP, -_DD_CLAMP, where(a > _DD_CLAMP, _DD_CLAMP, a))  # (NaN stays)
    hi, lo, t = _exp_dd_reduced(a, _TAIL14)
    k = as_int(t) - _MAGIC64_BITS
    k1 = k >> 1
    s1 = as_float((k1 + 1023) << 52)
    s2 = as_float((k - k1 + 1023) << 52)
    return (hi * s1) * s2, (lo * s1) * s2


@njit(forceinline=True)
def log_dd_vec(s, lo):
    """``log(s + lo)`` as a double-double ``(hi, lo)`` of float64 vectors,
    absolute error ~2**-57 for ``s >= 1`` (a row sum of ``exp(x - max)``):
    :func:`._math.log_f64` then one Newton step ``L += (s - e**L) / e**L``
    with ``e**L`` from :func:`exp_dd_vec`. ``s`` NaN, 0 or +inf give
    ``(log(s), 0)``. Vectors, so a tile's columns take their logs 8 at a
    time (one at a time: 16.5 ns each, 60% of a float64 forward over 3
    rows); rows take the same arithmetic through :func:`log_dd`."""
    h = log_f64(s)
    eh, el = exp_dd_vec(h)
    d = (s - eh) + (lo - el)  # s - eh is exact (Sterbenz: they are an ulp or two apart)
    l_ = where(s >= 1.0, d / eh, 0.0)
    return h, where(s < np.inf, l_, 0.0)


@njit
def exp_dd_any(a):
    """:func:`exp_dd_any_vec` of one float64."""
    h, l_ = exp_dd_any_vec(splat(a))
    return lane(h, 0), lane(l_, 0)


@njit
def exp_dd(a):
    """:func:`exp_dd_vec` of one float64."""
    h, l_ = exp_dd_vec(splat(a))
    return lane(h, 0), lane(l_, 0)


@njit
def log_dd(s, lo):
    """:func:`log_dd_vec` of one float64 (the same bits as a lane of it)."""
    h, l_ = log_dd_vec(splat(s), splat(lo))
    return lane(h, 0), lane(l_, 0)
