"""Explicit SIMD vectors for numba: a ``Vec`` type that *is* an LLVM vector.

The autovectoriser decides a loop's vector width per CPU (on Intel server
cores LLVM prefers 256 bits: the first version's hot loops ran in ``ymm``
there), cannot vectorise a float reduction without reassociating it, and
leaves every remainder to a scalar loop. The CPU kernels therefore spell
their vectors out: a :class:`Vec` value is an LLVM ``<16 x float>`` (or
``<8 x double>``, ``<16 x i32>``, ...) held in registers, and the functions
here are single LLVM instructions or short fixed sequences on it. LLVM maps a
16-lane float vector to one ``zmm`` register on AVX-512 (with
:func:`logsoftmax.backends.cpu._simd.wide_vectors` in the function) and to
two ``ymm`` registers on AVX2: the *arithmetic* is the same on both, lane by
lane, so results are bit-identical across those CPUs.

Everything that takes a vector also takes a scalar of the element type (the
IR instructions are the same), so one function -- the ``exp`` of
:mod:`.expf`, say -- serves vector loops and scalar remainders alike.

Loads and stores convert at the edge (bfloat16 and float16 storage are
``uint16`` / ``int16`` buffers, see :mod:`._simd`): ``vload`` of any
16-bit or float32 buffer gives ``<16 x float>``; ``vstore`` rounds once to
the buffer's type (bfloat16: round to nearest even, NaN kept quiet --
``vcvtneps2bf16`` where the CPU has AVX512_BF16, integer arithmetic on the
bits elsewhere, the same bits; float16: ``fptrunc``, ``vcvtps2ph``). ``*_part`` variants are masked
(``llvm.masked.load``/``store``): lanes at or past ``count`` are neither
read nor written, so a row's last partial vector never touches memory past
the row.
"""

from __future__ import annotations

import operator
import platform

from llvmlite import ir
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, models, overload, register_model

__all__ = [
    "W",
    "Vec",
    "vload",
    "vload_part",
    "vgather",
    "transpose16",
    "vload_n",
    "vstore_n",
    "lanes_below",
    "lanes_below64",
    "vstore",
    "vstore_part",
    "vstore_nt",
    "vload_pair",
    "vstore_pair",
    "vstore_pair_nt",
    "unpair",
    "pairs_interleave",
    "sfence",
    "address",
    "prefetch",
    "prefetch_w",
    "prefetch_l2",
    "prefetch_ahead",
    "on_amd",
    "is_amd_cpu",
    "splat",
    "vfma",
    "vmax",
    "where",
    "negate",
    "as_int",
    "as_float",
    "scale_pow2",
    "frac_pow2",
    "frac_pow2_normal",
    "pow2_normal",
    "times_pow2",
    "times_pow2_normal",
    "reduce_add",
    "reduce_max",
    "reduce_add_rows",
    "reduce_max_rows",
    "lo_f64",
    "hi_f64",
    "join_f32",
    "join_at",
    "lane",
]

#: float32 lanes per vector (one zmm; two ymm on AVX2)
W = 16


class Vec(types.Type):
    """An LLVM vector of ``count`` elements of numba type ``dtype``."""

    def __init__(self, dtype, count):
        self.dtype = dtype
        self.count = count
        super().__init__(name=f"vec{count}x{dtype}")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elem = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(elem, fe_type.count))


F32x = Vec(types.float32, W)
F64x = Vec(types.float64, W // 2)
I32x = Vec(types.int32, W)
I64x = Vec(types.int64, W // 2)

_I32 = ir.IntType(32)
_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_STORE_16 = (types.uint16, types.int16)


def _ir(ty):
    """The LLVM type of numba type ``ty`` (scalar or Vec)."""
    if isinstance(ty, Vec):
        return ir.VectorType(_ir(ty.dtype), ty.count)
    if ty == types.float32:
        return _F32
    if ty == types.float64:
        return _F64
    if ty == types.boolean:
        return ir.IntType(1)
    if isinstance(ty, types.Integer):
        return ir.IntType(ty.bitwidth)
    raise TypingError(f"no vector element type for {ty}")


def _iname(t):
    """LLVM's mangling of type ``t`` in overloaded intrinsic names (v16f32...)."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_iname(t.element)}"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.HalfType):
        return "f16"
    return f"i{t.width}"


def _elem(ty):
    return ty.dtype if isinstance(ty, Vec) else ty


def _shape(*tys):
    """The vector type among ``tys`` (all Vecs must agree), or None."""
    vs = {t for t in tys if isinstance(t, Vec)}
    if len(vs) > 1:
        raise TypingError(f"mixed vector types {vs}")
    return vs.pop() if vs else None


def _promote(builder, val, ty, target):
    """Splat scalar ``val`` (numba type ``ty``) to vector type ``target``
    (integer scalars are first converted to the vector's integer type)."""
    if target is None or isinstance(ty, Vec):
        return val
    vt = _ir(target)
    if isinstance(ty, types.Integer) and val.type != vt.element:
        w = vt.element.width
        if val.type.width > w:
            val = builder.trunc(val, vt.element)
        else:
            val = (builder.sext if ty.signed else builder.zext)(val, vt.element)
    undef = ir.Constant(vt, ir.Undefined)
    v = builder.insert_element(undef, val, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(_I32, target.count), [0] * target.count))


def _same_elem(*tys):
    els = {_elem(t) for t in tys}
    vec = _shape(*tys)
    if vec is not None and isinstance(vec.dtype, types.Integer):
        if all(isinstance(e, types.Integer) for e in els):
            return vec.dtype  # integer scalars convert to the lanes' type
    if len(els) != 1:
        raise TypingError(f"operands of different element types: {tys}")
    return els.pop()


# ---------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------
def _ptr(context, builder, aryty, ary, idx):
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.gep(data, [idx])


def _load_vec(builder, ptr, vt, align):
    return builder.load(builder.bitcast(ptr, vt.as_pointer()), typ=vt, align=align)


def _load_widened(builder, ptr, dtype, n):
    """``n`` elements of storage ``dtype`` from ``ptr``, widened (:func:`_widen`)."""
    return _widen(builder, _load_vec(builder, ptr, _storage_vt(dtype, n), dtype.bitwidth // 8), dtype)


def _widen(builder, raw, dtype):
    """Storage vector -> compute vector (<16 x float> for 16-bit storage)."""
    n = raw.type.count
    if dtype == types.uint16:  # bfloat16 bits are the top half of a float32
        wide = builder.zext(raw, ir.VectorType(_I32, n))
        wide = builder.shl(wide, ir.Constant(ir.VectorType(_I32, n), [16] * n))
        return builder.bitcast(wide, ir.VectorType(_F32, n))
    if dtype == types.int16:  # IEEE half
        half = builder.bitcast(raw, ir.VectorType(ir.HalfType(), n))
        return builder.fpext(half, ir.VectorType(_F32, n))
    return raw


def _storage_vt(dtype, n):
    return ir.VectorType(_ir(dtype), n)


def _lanes(dtype):
    return W // 2 if dtype == types.float64 else W


def _result_vec(dtype):
    return F64x if dtype == types.float64 else F32x


def _check_buf(buf, idx):
    if not (isinstance(buf, types.Array) and buf.ndim == 1):
        raise TypingError("expected a 1-D array buffer")
    if buf.dtype not in (types.float32, types.float64) + _STORE_16:
        raise TypingError(f"unsupported buffer dtype {buf.dtype}")
    if not isinstance(idx, types.Integer):
        raise TypingError("expected an integer index")


@intrinsic
def vload(typingctx, buf, idx):
    """``W`` consecutive elements of ``buf`` from ``idx``, widened to the
    compute type (``<16 x float>``; ``<8 x double>`` for float64)."""
    _check_buf(buf, idx)
    dtype = buf.dtype
    n = _lanes(dtype)

    def codegen(context, builder, sig, args):
        return _load_widened(builder, _ptr(context, builder, sig.args[0], args[0], args[1]), dtype, n)

    return _result_vec(dtype)(buf, idx), codegen


def _mask(builder, count, n):
    """``<n x i1>``: lane j is on iff ``j < count`` (any count, even <= 0)."""
    i32 = ir.IntType(32)
    if count.type.width > 32:  # clamp to [0, n] before narrowing
        lo = builder.select(builder.icmp_signed("<", count, count.type(0)), count.type(0), count)
        count = builder.select(builder.icmp_signed(">", lo, count.type(n)), count.type(n), lo)
        count = builder.trunc(count, i32)
    iota = ir.Constant(ir.VectorType(i32, n), list(range(n)))
    cv = _promote(builder, count, types.int32, Vec(types.int32, n))
    return builder.icmp_signed("<", iota, cv)


def _masked_intrinsic(builder, name, vt, fnargs):
    ptr_t = ir.PointerType()
    if name == "load":
        fnty = ir.FunctionType(vt, [ptr_t, _I32, ir.VectorType(ir.IntType(1), vt.count), vt])
    else:
        fnty = ir.FunctionType(
            ir.VoidType(), [vt, ptr_t, _I32, ir.VectorType(ir.IntType(1), vt.count)]
        )
    return builder.call(_declare(builder, f"llvm.masked.{name}.{_iname(vt)}.p0", fnty), fnargs)


@intrinsic
def vgather(typingctx, buf, base, idx, j):
    """The float32 vector ``buf[base + idx[j + l]]``, ``l < W`` (``idx``: an
    int32 array): ``llvm.masked.gather``, which LLVM emits as ``vgatherdps``
    or as 16 scalar loads where its tuning for the CPU prefers those (it
    does for the Intel Xeon, LLVM rocketlake: no ``vgatherdps`` in
    :mod:`.tiny`'s code). For transposes through an L1 scratch (:mod:`.tiny`)."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.dtype == types.float32):
        raise TypingError("vgather: a 1-D float32 buffer expected")
    if not (isinstance(idx, types.Array) and idx.ndim == 1 and idx.dtype == types.int32):
        raise TypingError("vgather: a 1-D int32 index array expected")

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        iptr = _ptr(context, builder, sig.args[2], args[2], args[3])
        ivt = ir.VectorType(_I32, W)
        offs = builder.sext(_load_vec(builder, iptr, ivt, 4), ir.VectorType(ir.IntType(64), W))
        i64v = ir.VectorType(ir.IntType(64), W)
        basev = builder.ptrtoint(ptr, ir.IntType(64))
        basev = _promote(builder, basev, types.int64, Vec(types.int64, W))
        addrs = builder.add(basev, builder.mul(offs, ir.Constant(i64v, [4] * W)))
        ptv = ir.VectorType(ir.PointerType(), W)
        ptrs = builder.inttoptr(addrs, ptv)
        vt = ir.VectorType(_F32, W)
        fnty = ir.FunctionType(vt, [ptv, _I32, ir.VectorType(ir.IntType(1), W), vt])
        fn = _declare(builder, "llvm.masked.gather.v16f32.v16p0", fnty)
        ones = ir.Constant(ir.VectorType(ir.IntType(1), W), [1] * W)
        return builder.call(fn, [ptrs, ir.Constant(_I32, 4), ones, ir.Constant(vt, ir.Undefined)])

    return F32x(buf, base, idx, j), codegen


@intrinsic
def transpose16(typingctx, src, s0, ss, dst, d0, ds):
    """``dst[d0 + ds k + i] = src[s0 + ss i + k]`` for ``i, k < 16``: a 16x16
    float32 block (rows ``ss`` and ``ds`` elements apart) transposed in
    registers (16 vector loads, 4 steps of 16 two-vector shuffles, 16 vector
    stores), the classic butterfly: step ``b = 8, 4, 2, 1`` pairs rows ``i``
    and ``i + b`` and swaps their off-diagonal ``b x b`` blocks."""
    for a in (src, dst):
        if not (isinstance(a, types.Array) and a.ndim == 1 and a.dtype == types.float32):
            raise TypingError("transpose16: 1-D float32 buffers expected")

    def codegen(context, builder, sig, args):
        vt = ir.VectorType(_F32, W)
        sp = _ptr(context, builder, sig.args[0], args[0], args[1])
        dp = _ptr(context, builder, sig.args[3], args[3], args[4])
        i64 = ir.IntType(64)
        ss = context.cast(builder, args[2], sig.args[2], types.int64)
        ds = context.cast(builder, args[5], sig.args[5], types.int64)
        rows = [_load_vec(builder, builder.gep(sp, [builder.mul(ss, ir.Constant(i64, r))]), vt, 4)
                for r in range(W)]
        b = W // 2
        while b >= 1:
            lo_m = ir.Constant(ir.VectorType(_I32, W),
                               [l if not (l & b) else W + l - b for l in range(W)])
            hi_m = ir.Constant(ir.VectorType(_I32, W),
                               [l + b if not (l & b) else W + l for l in range(W)])
            for i in range(W):
                if not (i & b):
                    a, c = rows[i], rows[i + b]
                    rows[i] = builder.shuffle_vector(a, c, lo_m)
                    rows[i + b] = builder.shuffle_vector(a, c, hi_m)
            b //= 2
        for k in range(W):
            q = builder.gep(dp, [builder.mul(ds, ir.Constant(i64, k))])
            builder.store(rows[k], builder.bitcast(q, vt.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(src, s0, ss, dst, d0, ds), codegen


@intrinsic
def lanes_below(typingctx, count):
    """The mask of the ``W`` float32 lanes ``j < count`` (as
    :func:`vload_part` uses)."""
    if not isinstance(count, types.Integer):
        raise TypingError("lanes_below: integer expected")

    def codegen(context, builder, sig, args):
        return _mask(builder, args[0], W)

    return Vec(types.boolean, W)(count), codegen


@intrinsic
def lanes_below64(typingctx, count):
    """The mask of the ``W // 2`` float64 lanes ``j < count`` (any count)."""
    if not isinstance(count, types.Integer):
        raise TypingError("lanes_below64: integer expected")

    def codegen(context, builder, sig, args):
        return _mask(builder, args[0], W // 2)

    return Vec(types.boolean, W // 2)(count), codegen


@intrinsic
def vload_part(typingctx, buf, idx, count, fill):
    """:func:`vload` of lanes ``j < count`` only; the other lanes are ``fill``
    (a compute-type scalar) and their memory is not read."""
    _check_buf(buf, idx)
    if not isinstance(count, types.Integer):
        raise TypingError("vload_part: count must be an integer")
    dtype = buf.dtype
    n = _lanes(dtype)
    rv = _result_vec(dtype)

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        svt = _storage_vt(dtype, n)
        mask = _mask(builder, args[2], n)
        raw = _masked_intrinsic(
            builder,
            "load",
            svt,
            [
                builder.bitcast(ptr, ir.PointerType()),
                ir.Constant(_I32, dtype.bitwidth // 8),
                mask,
                ir.Constant(svt, None),
            ],
        )
        wide = _widen(builder, raw, dtype)
        fillv = context.cast(builder, args[3], sig.args[3], rv.dtype)
        return builder.select(mask, wide, _promote(builder, fillv, rv.dtype, rv))

    return rv(buf, idx, count, fill), codegen


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite's IR builder has no name for it): only the
    hardware conversion's result type, bitcast to ``i16`` at once."""

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, _BFloat)

    def __hash__(self):
        return hash(_BFloat)


def _target_has(context, feature):
    """Whether the code being generated may use ISA ``feature`` (LLVM's name):
    numba's target machine features, which also key its on-disk cache, so a
    kernel compiled with an instruction is never loaded on a CPU without it."""
    features = getattr(context.codegen(), "_tm_features", "") or ""
    return "+" + feature in features.split(",")


def _bf16_round_i32(builder, v):
    """<n x float> -> <n x i32> holding the bfloat16 bits in their low half,
    round to nearest even, NaN quiet (integer arithmetic: 8 operations per
    vector)."""
    n = v.type.count
    i32v = ir.VectorType(_I32, n)

    def c(x):
        return ir.Constant(i32v, [x] * n)

    b = builder.bitcast(v, i32v)
    odd = builder.and_(builder.lshr(b, c(16)), c(1))
    r = builder.lshr(builder.add(builder.add(b, c(0x7FFF)), odd), c(16))
    quiet = builder.or_(builder.lshr(b, c(16)), c(0x40))
    isnan = builder.fcmp_unordered("uno", v, v)
    return builder.select(isnan, quiet, r)


def _bf16_round_bits(builder, v):
    """<n x float> -> <n x i16> bfloat16 bits (:func:`_bf16_round_i32`)."""
    return builder.trunc(_bf16_round_i32(builder, v), ir.VectorType(ir.IntType(16), v.type.count))


def _bf16_round(builder, v, hardware):
    """<n x float> -> <n x i16> bfloat16 bits, correctly rounded (nearest even,
    NaN made quiet), the same bits on every CPU.

    With ``hardware`` (AVX512_BF16, 16 lanes) one ``vcvtneps2bf16`` does it:
    the instruction rounds to nearest even and quiets NaN exactly as
    :func:`_bf16_round_bits`, but treats subnormal inputs as zero. Those
    lanes -- found by one ``vfpclassps`` -- take the integer rounding on a
    branch that ordinary data never takes. (Measured on an Intel Xeon with
    AVX512_BF16: see ``docs/performance.md``.)
    """
    n = v.type.count
    if not hardware or n != 16:
        return _bf16_round_bits(builder, v)
    cvt = _declare(builder, "llvm.x86.avx512bf16.cvtneps2bf16.512",
                   ir.FunctionType(ir.VectorType(_BFloat(), n), [v.type]))
    fast = builder.bitcast(builder.call(cvt, [v]), ir.VectorType(ir.IntType(16), n))
    return _unless_subnormal(builder, [v], fast, lambda: _bf16_round_bits(builder, v))


def _unless_subnormal(builder, vs, fast, integer):
    """``fast`` (the hardware rounding of the float32 vectors ``vs``), or
    ``integer()`` (the integer rounding of them all: the same bits in every
    lane) on a branch that runs only when a lane of ``vs`` is subnormal --
    found by one ``vfpclassps`` (class 5) a vector."""
    n = vs[0].type.count
    fpclass = _declare(builder, "llvm.x86.avx512.fpclass.ps.512",
                       ir.FunctionType(ir.VectorType(ir.IntType(1), n), [vs[0].type, _I32]))
    sub = builder.call(fpclass, [vs[0], ir.Constant(_I32, 0x20)])
    for v in vs[1:]:
        sub = builder.or_(sub, builder.call(fpclass, [v, ir.Constant(_I32, 0x20)]))
    anysub = builder.icmp_unsigned("!=", builder.bitcast(sub, ir.IntType(n)), ir.Constant(ir.IntType(n), 0))
    before = builder.block
    with builder.if_then(anysub, likely=False):
        slow = integer()
        slow_block = builder.block
    bits = builder.phi(fast.type)
    bits.add_incoming(fast, before)
    bits.add_incoming(slow, slow_block)
    return bits


def _narrow(builder, v, dtype, hw_bf16=False):
    """Compute vector -> storage vector of ``dtype`` (rounded once);
    ``hw_bf16``: the target has AVX512_BF16 (:func:`_bf16_round`)."""
    n = v.type.count
    if dtype == types.uint16:
        return _bf16_round(builder, v, hw_bf16)
    if dtype == types.int16:
        half = builder.fptrunc(v, ir.VectorType(ir.HalfType(), n))
        return builder.bitcast(half, ir.VectorType(ir.IntType(16), n))
    if dtype == types.float64 and v.type.element == _F32:
        return builder.fpext(v, ir.VectorType(_F64, n))
    if dtype == types.float32 and v.type.element == _F64:
        return builder.fptrunc(v, ir.VectorType(_F32, n))
    return v


def _store_raw(builder, ptr, raw, dtype, nontemporal):
    """Store the vector ``raw`` of storage ``dtype`` at ``ptr``: aligned to
    its element, or, ``nontemporal``, a streaming store aligned to its
    whole size."""
    item = dtype.bitwidth // 8
    st = builder.store(raw, builder.bitcast(ptr, raw.type.as_pointer()),
                       align=raw.type.count * item if nontemporal else item)
    if nontemporal:
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(_I32, 1)]))


def _check_store(buf, idx, v):
    _check_buf(buf, idx)
    if not isinstance(v, Vec) or v.dtype not in (types.float32, types.float64):
        raise TypingError("vstore: expected a float vector")
    if buf.dtype in _STORE_16 and v.dtype != types.float32:
        raise TypingError("vstore: 16-bit storage takes a float32 vector")


@intrinsic
def vstore(typingctx, buf, idx, v):
    """Store vector ``v`` at ``buf[idx:idx + len(v)]``, rounded once to the
    buffer's storage type."""
    _check_store(buf, idx, v)
    dtype = buf.dtype

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        _store_raw(builder, ptr, _narrow(builder, args[2], dtype, _target_has(context, "avx512bf16")), dtype, False)
        return context.get_dummy_value()

    return types.none(buf, idx, v), codegen


@intrinsic
def vstore_nt(typingctx, buf, idx, v):
    """:func:`vstore` as a non-temporal (streaming) store: the line goes to
    memory without first being read into the cache (no read-for-ownership)
    and without filling it. The address of ``buf[idx]`` must be aligned to
    the stored vector's size (64 bytes for 16 float32, 32 for 16 16-bit
    values; callers peel to it), and a kernel that streams ends with
    :func:`sfence`."""
    _check_store(buf, idx, v)
    dtype = buf.dtype

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        _store_raw(builder, ptr, _narrow(builder, args[2], dtype, _target_has(context, "avx512bf16")), dtype, True)
        return context.get_dummy_value()

    return types.none(buf, idx, v), codegen


# ---------------------------------------------------------------------------
# pairs: two vectors of 2W consecutive elements, for elementwise passes
#
# An elementwise pass (pass 2: ``y = x - c``, ``dx = dy - e**y s``) computes
# each element alone, so the order of the elements across the two vectors
# is free, as long as every load and store of the pass agrees on it: each
# takes the pass's ``group``, the tuple of all the arrays it reads and
# writes, and the elements are interleaved only where all of them are
# bfloat16 (:func:`pairs_interleave`). For bfloat16 one
# 512-bit load of 32 elements gives the even ones (``<< 16``) and the odd
# ones (``& 0xffff0000``) in one integer operation each, where two
# :func:`vload` widen 16 and 16 (``vpmovzxwd`` and ``vpslld`` each); and
# with AVX512_BF16 one ``vcvtne2ps2bf16`` rounds both back and one
# ``vpermw`` puts them in order. Same bits as two :func:`vload` /
# :func:`vstore`. In-process A/B against two of each (AMD EPYC Zen 4, LLVM
# znver4, 2 threads, numpy ``out=``, same bits, three runs): bfloat16
# 4096x32000 forward 1.08-1.12x, backward 1.03-1.12x, 256x128256 (p09)
# 1.03-1.09x, 2048x4096 1.08x / 1.10x, 16x16x128x128 1.06-1.13x; float32
# and float16 (two vectors, as before) 0.97-1.05x. Intel not yet measured
# (docs/performance.md, the ninth Zen 4 session).
def _group_interleaves(group):
    """Type-checks a pass's ``group``; whether its arrays are all bfloat16."""
    if not isinstance(group, types.BaseTuple) or not all(isinstance(t, types.Array) for t in group):
        raise TypingError("pairs: the pass's arrays, as a tuple, expected")
    return all(t.dtype == types.uint16 for t in group)


def _interleaved(buf, idx, group):
    """Type-checks a pair's buffer and group; whether its pairs interleave."""
    _check_buf(buf, idx)
    if buf.dtype == types.float64:
        raise TypingError("pairs: float32 or 16-bit buffers only")
    return _group_interleaves(group) and buf.dtype == types.uint16


@intrinsic
def pairs_interleave(typingctx, group):
    """Whether the pairs of a pass over the arrays ``group`` interleave their
    elements (all bfloat16), so that :func:`vload_pair` and
    :func:`vstore_pair` move one vector each rather than two (a constant of
    the compile, as :func:`on_amd`): a loop that interleaves its stores with
    other work keeps one store per vector where there are two."""
    one = _group_interleaves(group)

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(1), int(one))

    return types.boolean(group), codegen


@intrinsic
def vload_pair(typingctx, buf, idx, group):
    """The ``2W`` elements ``buf[idx:idx + 2W]`` as two float32 vectors in the
    order of the pass over the arrays ``group`` (``buf`` among them): the
    even elements, then the odd ones, where they are all bfloat16; else the
    two halves. For elementwise passes that end in :func:`vstore_pair` of
    the same group, which puts them back."""
    interleave = _interleaved(buf, idx, group)
    dtype = buf.dtype

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        if interleave:
            i32v = ir.VectorType(_I32, W)
            raw = _load_vec(builder, ptr, i32v, 2)  # element 2j low, 2j + 1 high
            even = builder.shl(raw, ir.Constant(i32v, [16] * W))
            odd = builder.and_(raw, ir.Constant(i32v, [-0x10000] * W))
            halves = [builder.bitcast(even, ir.VectorType(_F32, W)), builder.bitcast(odd, ir.VectorType(_F32, W))]
        else:
            second = builder.gep(ptr, [ir.Constant(ir.IntType(64), W)])
            halves = [_load_widened(builder, p, dtype, W) for p in (ptr, second)]
        return context.make_tuple(builder, sig.return_type, halves)

    return types.UniTuple(F32x, 2)(buf, idx, group), codegen


def _bf16_pair_bits(builder, even, odd, hardware):
    """The even and odd elements' float32 vectors -> ``<2n x i16>`` bfloat16
    bits in element order, rounded as :func:`_bf16_round`."""
    n = even.type.count
    i16v = ir.VectorType(ir.IntType(16), 2 * n)
    i32v = ir.VectorType(_I32, n)

    def integer():  # bits of odd in the high half of each 32-bit lane
        high = builder.shl(_bf16_round_i32(builder, odd), ir.Constant(i32v, [16] * n))
        return builder.bitcast(builder.or_(high, _bf16_round_i32(builder, even)), i16v)

    if not hardware or n != 16:
        return integer()
    cvt = _declare(builder, "llvm.x86.avx512bf16.cvtne2ps2bf16.512",
                   ir.FunctionType(ir.VectorType(_BFloat(), 2 * n), [even.type, even.type]))
    both = builder.bitcast(builder.call(cvt, [odd, even]), i16v)  # even's in the low half
    order = [j // 2 + (n if j % 2 else 0) for j in range(2 * n)]
    fast = builder.shuffle_vector(both, ir.Constant(i16v, ir.Undefined), ir.Constant(ir.VectorType(_I32, 2 * n), order))
    return _unless_subnormal(builder, [even, odd], fast, integer)


def _store_pair(nontemporal):
    @intrinsic
    def _st(typingctx, buf, idx, a, b, group):
        interleave = _interleaved(buf, idx, group)
        _check_store(buf, idx, a)
        _check_store(buf, idx, b)
        dtype = buf.dtype

        def codegen(context, builder, sig, args):
            ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
            hw_bf16 = _target_has(context, "avx512bf16")
            if interleave:
                raws = [_bf16_pair_bits(builder, args[2], args[3], hw_bf16)]
            else:
                raws = [_narrow(builder, v, dtype, hw_bf16) for v in args[2:4]]
            for i, raw in enumerate(raws):
                _store_raw(builder, builder.gep(ptr, [ir.Constant(ir.IntType(64), i * W)]), raw, dtype, nontemporal)
            return context.get_dummy_value()

        return types.none(buf, idx, a, b, group), codegen

    return _st


#: ``vstore_pair(buf, idx, a, b, group)``: :func:`vload_pair`'s two vectors
#: (after elementwise arithmetic) back to ``buf[idx:idx + 2W]`` in the order
#: of the pass over ``group``, each element rounded once as by :func:`vstore`
vstore_pair = _store_pair(False)
#: :func:`vstore_pair` by streaming stores (:func:`vstore_nt`; ``buf[idx]``
#: on a 64-byte boundary)
vstore_pair_nt = _store_pair(True)


@intrinsic
def unpair(typingctx, a, b, group):
    """Two accumulators of a sum whose terms came by :func:`vload_pair` over
    ``group`` -- ``a`` from the even elements, ``b`` from the odd ones --
    back in element order: lanes ``0 .. n/2`` of both interleaved, then
    lanes ``n/2 .. n`` (two ``vpermt2ps``/``vpermt2pd``); ``(a, b)`` as they
    are where the pairs do not interleave. A sum is a lane-wise running sum
    whose lane is fixed by the element's index (:mod:`.segment`), so a sum
    kept in pair order holds, lane for lane, the same values as one kept in
    element order, and after ``unpair`` gives the same bits. Float32 lanes
    (16) take 32 consecutive elements, ``a``'s from a pair's first vector
    and ``b``'s from its second; float64 lanes (8) take 16, ``a`` and ``b``
    from the same halves (:func:`lo_f64` or :func:`hi_f64`) of a pair's
    two vectors."""
    if not (isinstance(a, Vec) and a == b):
        raise TypingError("unpair: two vectors of one type expected")
    interleave = _group_interleaves(group)

    def codegen(context, builder, sig, args):
        x, y = args[0], args[1]
        if interleave:
            n = sig.args[0].count
            masks = ([j // 2 + (n if j % 2 else 0) for j in range(n)],
                     [n // 2 + j // 2 + (n if j % 2 else 0) for j in range(n)])
            x, y = (builder.shuffle_vector(args[0], args[1], ir.Constant(ir.VectorType(_I32, n), mk))
                    for mk in masks)
        return context.make_tuple(builder, sig.return_type, [x, y])

    return types.UniTuple(a, 2)(a, b, group), codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def sfence(typingctx):
    """Order every earlier streaming store before any later store
    (``sfence``; a sequentially consistent fence off x86)."""

    def codegen(context, builder, sig, args):
        if _X86:
            fn = _declare(builder, "llvm.x86.sse.sfence", ir.FunctionType(ir.VoidType(), []))
            builder.call(fn, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def address(typingctx, buf, idx):
    """The address of ``buf[idx]`` as an integer (for alignment)."""
    _check_buf(buf, idx)

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        return builder.ptrtoint(ptr, ir.IntType(64))

    return types.int64(buf, idx), codegen


def _prefetch_intrinsic(rw, locality=3):
    @intrinsic
    def _pf(typingctx, buf, idx):
        _check_buf(buf, idx)

        def codegen(context, builder, sig, args):
            ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
            level = locality if locality is not None else _ahead_locality(context, sig.args[0].dtype)
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.PointerType(), i32, i32, i32])
            fn = _declare(builder, "llvm.prefetch.p0", fnty)
            # (address, read 0 / write 1, locality 3: L1 / 2: L2, data cache)
            builder.call(fn, [builder.bitcast(ptr, ir.PointerType()), i32(rw), i32(level), i32(1)])
            return context.get_dummy_value()

        return types.none(buf, idx), codegen

    return _pf


#: ``prefetch(buf, idx)``: ask for the cache line of ``buf[idx]`` ahead of its
#: use (``prefetcht0``; never faults, so ``idx`` may run past the buffer). The
#: row kernels ask for the next chunk while they compute on this one
#: (:data:`prefetch_ahead`): the sum pass is compute-bound on data already in
#: L1, the max pass streams from memory, and without it the two ran one after
#: the other (4096x32000 float32 at one thread: 0.9 ns/element, 2.7 times a
#: copy's time).
prefetch = _prefetch_intrinsic(0)
#: :func:`prefetch` for a line about to be written (``prefetchw``)
prefetch_w = _prefetch_intrinsic(1)
#: :func:`prefetch` into L2 only (``prefetcht1``): for data needed after the
#: current working set, which a ``prefetcht0`` would push out of L1
prefetch_l2 = _prefetch_intrinsic(0, 2)


def _ahead_locality(context, dtype):
    """The cache level :func:`prefetch_ahead` fills for a buffer of
    ``dtype``, by the CPU the code is compiled for (numba's target CPU name,
    which also keys its on-disk cache): L2 (2), except 16-bit data on AMD
    Zen: L1 (3).

    Intel Xeon (LLVM rocketlake), 2 threads, 4096x32000 float32 (``python
    benchmarks/vocab_limits.py``): a non-temporal copy 31.1 ms, 25.7 with
    its source asked for 4096 elements ahead into L2 (memcpy 26.5); the row
    statistics (one read stream per core, an exp per element) 33.4 ms with
    ``prefetcht0`` a chunk ahead, 27.7-28.5 with ``prefetcht1``. A
    ``prefetcht0`` holds one of the core's few L1 fill buffers, which the
    streaming stores also use, until its line arrives; a ``prefetcht1``
    goes to L2, which keeps many more misses in flight.

    The Zen 4 kernels were tuned with ``prefetcht0``. Measured again on an
    AMD EPYC Zen 4 (LLVM znver4; in-process A/B, 2 threads, numpy ``out=``,
    same bits; docs/performance.md, the eighth Zen 4 session):
    ``prefetcht1`` for float32 made the vocabulary forward 1.21-1.25x
    faster (4096x32000, 1024x32000, 512x50257) and tied elsewhere; for
    bfloat16, whose forward is bound by its arithmetic there, it lost
    (4096x32000 0.87-0.95x, 256x128256 0.90x), so 16-bit data keeps L1."""
    if _is_amd(context) and dtype in (types.uint16, types.int16):
        return 3
    return 2


def is_amd_cpu(name):
    """Whether the LLVM CPU name ``name`` is an AMD core's (the one test of
    :func:`on_amd` in the kernels and of ``alloc.stream_bytes`` outside)."""
    return name.startswith(("znver", "bdver", "btver", "amdfam"))


def _is_amd(context):
    """Whether numba compiles for an AMD core (its target CPU name)."""
    return is_amd_cpu(context.codegen().magic_tuple()[1])


#: :func:`prefetch` of the next chunk while the kernels compute on this one
#: (:func:`_ahead_locality` picks the cache level per CPU)
prefetch_ahead = _prefetch_intrinsic(0, None)


@intrinsic
def on_amd(typingctx):
    """Whether the code is compiled for an AMD core (a constant of the
    compile, so the branch it guards costs nothing): for kernel choices measured to differ
    between CPU families."""

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(1), int(_is_amd(context)))

    return types.boolean(), codegen


@intrinsic
def vstore_part(typingctx, buf, idx, v, count):
    """:func:`vstore` of lanes ``j < count`` only (memory past them untouched).

    bfloat16 is rounded by integer arithmetic here on every CPU (the same
    bits as :func:`vstore`'s ``vcvtneps2bf16``): a kernel's tail store is
    cold, but the hardware rounding's subnormal branch in it slowed the
    loops around it: the few-row forward (:mod:`.fewrows`; a tail this
    shape never runs), bfloat16 1024x8x32 axis 1, took 1.466 ns an element
    with it and 0.617 with this, float16 0.66 (``python
    benchmarks/few_rows_cache.py``, one thread)."""
    _check_store(buf, idx, v)
    dtype = buf.dtype

    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        raw = _narrow(builder, args[2], dtype, False)
        mask = _mask(builder, args[3], raw.type.count)
        _masked_intrinsic(
            builder,
            "store",
            raw.type,
            [raw, builder.bitcast(ptr, ir.PointerType()), ir.Constant(_I32, dtype.bitwidth // 8), mask],
        )
        return context.get_dummy_value()

    return types.none(buf, idx, v, count), codegen


# ---------------------------------------------------------------------------
# construction and arithmetic
# ---------------------------------------------------------------------------
@intrinsic
def splat(typingctx, x):
    """A vector with every lane ``x`` (float32/int32: 16 lanes, float64/int64: 8)."""
    if x in (types.float32, types.int32):
        vt = Vec(x, W)
    elif x in (types.float64, types.int64):
        vt = Vec(x, W // 2)
    else:
        raise TypingError(f"splat: unsupported scalar {x}")

    def codegen(context, builder, sig, args):
        return _promote(builder, args[0], sig.args[0], sig.return_type)

    return vt(x), codegen


def _binop(opname, float_op, int_op):
    @intrinsic
    def _op(typingctx, a, b):
        vt = _shape(a, b)
        if vt is None:
            raise TypingError("no vector operand")
        _same_elem(a, b)

        def codegen(context, builder, sig, args):
            x = _promote(builder, args[0], sig.args[0], vt)
            y = _promote(builder, args[1], sig.args[1], vt)
            if isinstance(vt.dtype, types.Float):
                return getattr(builder, float_op)(x, y)
            return getattr(builder, int_op)(x, y)

        return vt(a, b), codegen

    _op.__name__ = opname
    return _op


_vadd = _binop("vadd", "fadd", "add")
_vsub = _binop("vsub", "fsub", "sub")
_vmul = _binop("vmul", "fmul", "mul")
_vdiv = _binop("vdiv", "fdiv", "sdiv")
_vand = _binop("vand", "and_", "and_")
_vor = _binop("vor", "or_", "or_")


def _vec_operands(a, b):
    return (isinstance(a, Vec) or isinstance(b, Vec)) and all(
        isinstance(t, (Vec, types.Number)) for t in (a, b)
    )


def _overload_binary(op, impl):
    @overload(op)
    def _ol(a, b):
        if _vec_operands(a, b):
            return lambda a, b: impl(a, b)


for _op, _impl in (
    (operator.add, _vadd),
    (operator.sub, _vsub),
    (operator.mul, _vmul),
    (operator.truediv, _vdiv),
    (operator.and_, _vand),
    (operator.or_, _vor),
):
    _overload_binary(_op, _impl)


@intrinsic
def _vshl(typingctx, a, k):
    if not (isinstance(a, Vec) and isinstance(a.dtype, types.Integer)):
        raise TypingError("shift: integer vector expected")

    def codegen(context, builder, sig, args):
        k = context.cast(builder, args[1], sig.args[1], a.dtype)
        return builder.shl(args[0], _promote(builder, k, a.dtype, a))

    return a(a, k), codegen


@intrinsic
def _vshr(typingctx, a, k):
    if not (isinstance(a, Vec) and isinstance(a.dtype, types.Integer)):
        raise TypingError("shift: integer vector expected")

    def codegen(context, builder, sig, args):
        k = context.cast(builder, args[1], sig.args[1], a.dtype)
        return builder.ashr(args[0], _promote(builder, k, a.dtype, a))

    return a(a, k), codegen


@overload(operator.lshift)
def _ol_shl(a, k):
    if isinstance(a, Vec):
        return lambda a, k: _vshl(a, k)


@overload(operator.rshift)
def _ol_shr(a, k):
    if isinstance(a, Vec):
        return lambda a, k: _vshr(a, k)


@overload(operator.neg)
def _ol_neg(a):
    if isinstance(a, Vec):
        return lambda a: _vneg(a)


@intrinsic
def _vneg(typingctx, a):
    def codegen(context, builder, sig, args):
        if isinstance(a.dtype, types.Float):
            return builder.fneg(args[0])
        return builder.neg(args[0])

    return a(a), codegen


_FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


def _cmp(sym):
    @intrinsic
    def _c(typingctx, a, b):
        vt = _shape(a, b)
        _same_elem(a, b)
        mt = Vec(types.boolean, vt.count)

        def codegen(context, builder, sig, args):
            x = _promote(builder, args[0], sig.args[0], vt)
            y = _promote(builder, args[1], sig.args[1], vt)
            if isinstance(vt.dtype, types.Float):
                fn = builder.fcmp_unordered if sym == "!=" else builder.fcmp_ordered
                return fn(_FCMP[sym], x, y)
            return builder.icmp_signed(sym, x, y)

        return mt(a, b), codegen

    return _c


for _op, _sym in (
    (operator.lt, "<"),
    (operator.le, "<="),
    (operator.gt, ">"),
    (operator.ge, ">="),
    (operator.eq, "=="),
    (operator.ne, "!="),
):
    _overload_binary(_op, _cmp(_sym))


@intrinsic
def negate(typingctx, x):
    """``-x`` (float scalar or vector) that later arithmetic cannot fold:
    an ``llvm.arithmetic.fence`` after the sign flip. For the
    negated statistics that pass 2 multiplies: in code compiled for
    constants LLVM folded ``fma(a, -s, c)`` into a negated FMA, which
    passes a NaN ``s`` on without the sign flip (NaN signs are unspecified
    through LLVM arithmetic), so one kernel's NaN rows came out with the
    other sign bit than another's."""
    el = _elem(x)
    if el not in (types.float32, types.float64):
        raise TypingError("negate: float scalar or vector expected")

    def codegen(context, builder, sig, args):
        v = builder.fneg(args[0])
        t = v.type
        name = (f"v{t.count}f{el.bitwidth}" if isinstance(t, ir.VectorType)
                else f"f{el.bitwidth}")
        fence = _declare(builder, f"llvm.arithmetic.fence.{name}", ir.FunctionType(t, [t]))
        return builder.call(fence, [v])

    return x(x), codegen


@intrinsic
def where(typingctx, cond, a, b):
    """``a`` where ``cond`` else ``b``, lane by lane (scalars: a plain select)."""
    vt = _shape(a, b)
    if vt is None:
        if cond != types.boolean:
            raise TypingError("where: scalar condition must be a bool")
        _same_elem(a, b)

        def scodegen(context, builder, sig, args):
            return builder.select(args[0], args[1], args[2])

        return a(cond, a, b), scodegen
    if not (isinstance(cond, Vec) and cond.count == vt.count):
        raise TypingError("where: mask and vector lanes differ")

    def codegen(context, builder, sig, args):
        x = _promote(builder, args[1], sig.args[1], vt)
        y = _promote(builder, args[2], sig.args[2], vt)
        return builder.select(args[0], x, y)

    return vt(cond, a, b), codegen


def _declare(builder, name, fnty):
    """The declaration of LLVM intrinsic ``name`` (already mangled) in this module."""
    return builder.module.globals.get(name) or ir.Function(builder.module, fnty, name)


def _float_call(builder, name, vals):
    ft = vals[0].type
    fnty = ir.FunctionType(ft, [ft] * len(vals))
    return builder.call(_declare(builder, f"llvm.{name}.{_iname(ft)}", fnty), vals)


def _float_sig(name, *args):
    vt = _shape(*args)
    el = _same_elem(*args)
    if not isinstance(el, types.Float):
        raise TypingError(f"{name}: float operands expected")
    return vt, (vt if vt is not None else el)(*args)


@intrinsic
def vfma(typingctx, a, b, c):
    """``a * b + c`` rounded once (``llvm.fma``; ``vfmadd``), vectors or scalars."""
    vt, sig = _float_sig("vfma", a, b, c)

    def codegen(context, builder, sig, args):
        vals = [_promote(builder, v, t, vt) for v, t in zip(args, sig.args)]
        return _float_call(builder, "fma", vals)

    return sig, codegen


@intrinsic
def vmax(typingctx, a, b):
    """The larger of two values, ignoring a NaN operand (``llvm.maxnum``)."""
    vt, sig = _float_sig("vmax", a, b)

    def codegen(context, builder, sig, args):
        vals = [_promote(builder, v, t, vt) for v, t in zip(args, sig.args)]
        return _float_call(builder, "maxnum", vals)

    return sig, codegen


@intrinsic
def as_int(typingctx, v):
    """Bit pattern of a float (vector) as int32/int64 lanes (a bitcast)."""
    el = _elem(v)
    it = types.int32 if el == types.float32 else types.int64
    rt = Vec(it, v.count) if isinstance(v, Vec) else it

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _ir(rt))

    return rt(v), codegen


@intrinsic
def as_float(typingctx, v):
    """The float (vector) whose bit pattern is int32/int64 ``v`` (a bitcast)."""
    el = _elem(v)
    if el not in (types.int32, types.int64):
        raise TypingError("as_float: int32/int64 expected")
    ft = types.float32 if el == types.int32 else types.float64
    rt = Vec(ft, v.count) if isinstance(v, Vec) else ft

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _ir(rt))

    return rt(v), codegen


#: the rounding magic of the ``exp`` reductions (1.5 * 2**23, 1.5 * 2**52) as
#: bits, and the mantissa width: ``n = bits(t) - magic`` in the low bits of ``t``
_POW2 = {32: (0x4B400000, 23), 64: (0x4338000000000000, 52)}


@intrinsic
def scale_pow2(typingctx, p, t, nf):
    """``p * 2**n`` for an integral float ``nf = n`` that ``t`` also holds in
    its low mantissa bits (``t = nf + 1.5 * 2**23``, or ``2**52`` for
    float64), ``p`` near 1 and ``p * 2**n`` normal (the callers clamp):
    exact.

    On AVX-512 one ``vscalefps``/``vscalefpd`` of ``(p, nf)``. Elsewhere
    ``n`` is added to ``p``'s exponent field (3 integer operations); a NaN
    ``p`` is passed through as it is, as ``vscalef`` does (adding to the
    exponent field of a NaN with payload bits in ``t`` made it a finite
    number). Same bits either way."""
    vt = _shape(p, t, nf)
    el = _same_elem(p, t, nf)
    if el not in (types.float32, types.float64):
        raise TypingError("scale_pow2: float32 or float64 operands expected")
    rt = vt if vt is not None else el

    def codegen(context, builder, sig, args):
        pv, tv, nv = (_promote(builder, a, ty, vt) for a, ty in zip(args, sig.args))
        width = el.bitwidth
        n = rt.count if isinstance(rt, Vec) else 1
        if n * width == 512 and _target_has(context, "avx512f"):
            return _pow2_call(builder, "scalef", pv, nv)  # exact here anyway
        it = ir.IntType(width)
        ivt = ir.VectorType(it, n) if isinstance(rt, Vec) else it
        magic, shift = _POW2[width]

        def c(x):
            return ir.Constant(ivt, [x] * n) if isinstance(rt, Vec) else ir.Constant(it, x)

        expo = builder.shl(builder.sub(builder.bitcast(tv, ivt), c(magic)), c(shift))
        y = builder.bitcast(builder.add(builder.bitcast(pv, ivt), expo), pv.type)
        return builder.select(builder.fcmp_unordered("uno", pv, pv), pv, y)

    return rt(p, t, nf), codegen


def _pow2_vec_sig(name, *args):
    if args[0] not in (F32x, F64x) or any(a != args[0] for a in args):
        raise TypingError(f"{name}: float32 or float64 vectors (all alike) expected")
    return args[0](*args)


#: per float width: (the exponent's bias, the mantissa's width, a bound on
#: |y| past which 2**y is 0 or inf anyway and whose half is still a normal
#: power of two, for :func:`times_pow2`'s two steps)
_POW2_FORMAT = {32: (127, 23, 250.0), 64: (1023, 52, 2000.0)}


def _fwidth(vt):
    """The bit width of float vector type ``vt``'s lanes."""
    return 64 if isinstance(vt.element, ir.DoubleType) else 32


def _pow2_call(builder, name, v, *extra):
    """``llvm.x86.avx512.mask.<name>.p[sd].512`` on every lane of ``v``."""
    n, width = v.type.count, _fwidth(v.type)
    suffix = "ps" if width == 32 else "pd"
    operands = [v, *extra]
    fnty = ir.FunctionType(v.type, [o.type for o in operands] + [v.type, ir.IntType(n), _I32])
    fn = _declare(builder, f"llvm.x86.avx512.mask.{name}.{suffix}.512", fnty)
    # all lanes (mask -1), passthrough undefined, current rounding mode (4)
    return builder.call(fn, [*operands, ir.Constant(v.type, ir.Undefined),
                             ir.Constant(ir.IntType(n), -1), ir.Constant(_I32, 4)])


def _clamp(builder, v, lo, hi):
    """``v`` clamped to ``[lo, hi]`` lane by lane (NaN stays)."""
    lo, hi = _fconst(v.type, lo), _fconst(v.type, hi)
    v = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
    return builder.select(builder.fcmp_ordered(">", v, hi), hi, v)


def _clamp_y(builder, v):
    """``y`` clamped to ``[-bound, bound]`` (:data:`_POW2_FORMAT`; NaN stays)."""
    bound = _POW2_FORMAT[_fwidth(v.type)][2]
    return _clamp(builder, v, -bound, bound)


def _floor(builder, v):
    """``llvm.floor`` of ``v`` (``vroundps``/``vroundpd``)."""
    fn = _declare(builder, f"llvm.floor.{_iname(v.type)}", ir.FunctionType(v.type, [v.type]))
    return builder.call(fn, [v])


@intrinsic
def frac_pow2(typingctx, y):
    """``y - floor(y)``, in ``[0, 1)``, of a float32 or float64 vector: the
    fraction that the ``exp`` of :mod:`._math` raise 2 to
    (:func:`times_pow2` scales by ``2**floor(y)``). 0 for ``y = +-inf``,
    NaN for NaN.

    On AVX-512DQ one ``vreduceps``/``vreducepd`` (which gives 0 for an
    infinity by itself), whose rounding field (down) rounds the difference
    as well as the floor: for ``y`` in ``(-1, 0)``, where ``1 + y`` is
    inexact, ``f`` is rounded down, so ``f < 1``. Elsewhere ``y`` is first
    clamped to +-250 (float32) or +-2000 (float64), integers, so the
    fraction past them is 0 where ``vreduce``'s need not be; ``2**y`` there
    is 0 or inf either way, so the ``exp`` has the same bits. Then
    ``vroundps``/``vroundpd``, a subtraction (to nearest), and the same
    rounding down: the exact error by Fast2Sum, one ulp less where it is
    negative (4 operations). Without that step the AVX2 build's ``f``
    differed for 17% of float32 and 3.8% of float64 ``x`` in ``(-ln 2, 0)``
    (a numpy emulation of the two roundings), and so did some of its ``exp``
    in the last bit (``test_avx2_build_keeps_the_math_in_vectors``: 1, 4 and
    3 results of its ~40,000 for ``exp_f32_sum``, ``exp_f64``,
    ``exp_f64_any``), which the kernels' digest had not caught."""
    return _pow2_vec_sig("frac_pow2", y), _frac_codegen(clamp=True)


def _frac_codegen(clamp):
    """:func:`frac_pow2`'s code (``clamp`` False: :func:`frac_pow2_normal`'s)."""

    def codegen(context, builder, sig, args):
        v = args[0]
        if _target_has(context, "avx512dq"):
            # imm 9: keep 0 fraction bits of the rounding, which is down
            # (floor), no precision exception
            return _pow2_call(builder, "reduce", v, ir.Constant(_I32, 9))
        return _frac_down(builder, _clamp_y(builder, v) if clamp else v)

    return codegen


def _frac_down(builder, v):
    """``v - floor(v)`` rounded down, as ``vreduce`` with imm 9 gives it, for
    finite ``v`` (or NaN)."""
    n = _floor(builder, v)
    f = builder.fsub(v, n)
    # vreduce rounds this difference as its imm says, down, where fsub
    # rounds to nearest. Inexact only for y in (-1, 0) (n = -1; Sterbenz
    # elsewhere): there Fast2Sum's v - (f + n) is the exact error, and
    # where f came out above the exact difference, it takes the float
    # just below (the bits less 1; f > 0 there)
    err = builder.fsub(v, builder.fadd(f, n))
    ivt = ir.VectorType(ir.IntType(_fwidth(v.type)), v.type.count)
    zero = ir.Constant(v.type, [0.0] * v.type.count)
    less = builder.sext(builder.fcmp_ordered("<", err, zero), ivt)
    return builder.bitcast(builder.add(builder.bitcast(f, ivt), less), v.type)


@intrinsic
def times_pow2(typingctx, p, y):
    """``p * 2**floor(y)`` rounded once (to nearest even: a denormal result
    rounds like any other, one below half the least denormal is 0, one past
    the largest finite is inf), for float32 or float64 vectors ``p`` in
    ``[1, 2]`` (or NaN) and any ``y`` (``+-inf`` included): the scaling of
    the ``exp`` of :mod:`._math` that take no clamp (unlike
    :func:`scale_pow2`).

    On AVX-512 one ``vscalefps``/``vscalefpd`` (which takes the floor
    itself). Elsewhere (AVX2) ``n = floor(y)`` of ``y`` clamped as in
    :func:`frac_pow2`, split into ``n1``, ``n`` clamped to the normal
    exponents, and ``n - n1`` (within them too, as ``|n| <= 2 bias``); each
    made a power of two by one addition and one shift, and ``p`` multiplied
    by the first (exact: the product stays normal) and by the second (the
    one rounding): the same bits. Floats throughout, no integer conversion
    (AVX2 has none from double to int64: a 64-bit ``fptosi`` became 8 scalar
    ``cvttsd2si`` and 8 inserts per vector: the float64 paths ran 1.4-1.6x
    slower than with this form, in-process A/B of an AVX2 build,
    docs/performance.md; a conversion to int32 with its shifts still cost
    ~5 operations more than these). A NaN ``y`` comes with a NaN ``p``,
    which the products keep."""
    return _pow2_vec_sig("times_pow2", p, y), _times_codegen(normal=False)


def _times_codegen(normal):
    """:func:`times_pow2`'s code (``normal``: :func:`times_pow2_normal`'s)."""

    def codegen(context, builder, sig, args):
        pv, yv = args
        if _target_has(context, "avx512f"):
            return _pow2_call(builder, "scalef", pv, yv)
        if normal:
            return builder.fmul(pv, _pow2(builder, _floor(builder, yv)))
        bias = _POW2_FORMAT[_fwidth(pv.type)][0]
        n = _floor(builder, _clamp_y(builder, yv))
        n1 = _clamp(builder, n, 1 - bias, bias)
        return builder.fmul(builder.fmul(pv, _pow2(builder, n1)), _pow2(builder, builder.fsub(n, n1)))

    return codegen


def _fconst(vt, x):
    """The float vector constant of type ``vt`` with ``x`` in every lane."""
    return ir.Constant(vt, [float(x)] * vt.count)


def _pow2(builder, k):
    """``2**k`` for an integral float vector ``k``, ``1 - bias <= k <= bias``:
    adding ``1.5 * 2**mantissa + bias`` leaves ``k + bias`` in the low bits,
    the shift moves them into the exponent field and drops the rest."""
    width = _fwidth(k.type)
    bias, shift, _ = _POW2_FORMAT[width]
    ivt = ir.VectorType(ir.IntType(width), k.type.count)
    t = builder.bitcast(builder.fadd(k, _fconst(k.type, 1.5 * 2.0**shift + bias)), ivt)
    return builder.bitcast(builder.shl(t, ir.Constant(ivt, [shift] * k.type.count)), k.type)


@intrinsic
def pow2_normal(typingctx, y):
    """Whether every lane of ``y`` has ``2**floor(y)`` normal, so that
    :func:`frac_pow2_normal` and :func:`times_pow2_normal` may stand for
    :func:`frac_pow2` and :func:`times_pow2` (no clamp, one power of two,
    one exact product; the same bits). Always False on AVX-512, where the
    two are one instruction each (the branch on it folds away); on AVX2
    two compares and a mask test against ~8 operations a vector saved
    (counted in the IR emitted here)."""
    if y not in (F32x, F64x):
        raise TypingError("pow2_normal: a float32 or float64 vector expected")

    def codegen(context, builder, sig, args):
        v = args[0]
        if _target_has(context, "avx512f"):
            return ir.Constant(ir.IntType(1), 0)
        bias = _POW2_FORMAT[_fwidth(v.type)][0]
        ok = builder.and_(builder.fcmp_ordered(">=", v, _fconst(v.type, 1 - bias)),
                          builder.fcmp_ordered("<", v, _fconst(v.type, bias + 1)))
        fnty = ir.FunctionType(ir.IntType(1), [ok.type])
        return builder.call(_declare(builder, f"llvm.vector.reduce.and.v{v.type.count}i1", fnty), [ok])

    return types.boolean(y), codegen


@intrinsic
def frac_pow2_normal(typingctx, y):
    """:func:`frac_pow2` where :func:`pow2_normal` holds (no clamp)."""
    return _pow2_vec_sig("frac_pow2_normal", y), _frac_codegen(clamp=False)


@intrinsic
def times_pow2_normal(typingctx, p, y):
    """:func:`times_pow2` where :func:`pow2_normal` holds: ``p`` times one
    normal power of two, exact (``p`` in ``[1, 2]``; 2 * 2**bias overflows to
    inf, as ``vscalef`` rounds it)."""
    return _pow2_vec_sig("times_pow2_normal", p, y), _times_codegen(normal=True)


# ---------------------------------------------------------------------------
# horizontal reductions and width changes
# ---------------------------------------------------------------------------
def _halves(builder, v):
    n = v.type.count // 2
    undef = ir.Constant(v.type, ir.Undefined)
    lo = builder.shuffle_vector(v, undef, ir.Constant(ir.VectorType(_I32, n), list(range(n))))
    hi = builder.shuffle_vector(
        v, undef, ir.Constant(ir.VectorType(_I32, n), list(range(n, 2 * n)))
    )
    return lo, hi


def _reduce(name):
    @intrinsic
    def _r(typingctx, v):
        if not isinstance(v, Vec):
            raise TypingError(f"{name}: vector expected")

        def codegen(context, builder, sig, args):
            x = args[0]
            while x.type.count > 1:
                lo, hi = _halves(builder, x)
                if name == "add":
                    x = builder.fadd(lo, hi)
                else:  # lo > hi ? lo : hi -- one vmaxps (NaN: either survives)
                    x = builder.select(builder.fcmp_ordered(">", lo, hi), lo, hi)
            return builder.extract_element(x, ir.Constant(_I32, 0))

        return v.dtype(v), codegen

    return _r


#: sum of the lanes by a fixed pairwise tree: lane j + lane j + n/2, then
#: j + n/4, ..., j + 1 (the order every kernel reproduces, in any layout)
reduce_add = _reduce("add")
#: largest lane (a tree of ``a > b ? a : b``: a NaN lane may or may not
#: survive, as with ``vmaxps``; callers let NaN rows fail in their sums)
reduce_max = _reduce("max")


def _fold(builder, name, lo, hi):
    """One level of :func:`_reduce`'s tree, lane by lane."""
    if name == "add":
        return builder.fadd(lo, hi)
    return builder.select(builder.fcmp_ordered(">", lo, hi), lo, hi)


def _reduce_rows(name):
    @intrinsic
    def _r(typingctx, buf, idx):
        if not (isinstance(buf, types.Array) and buf.ndim == 1
                and buf.dtype in (types.float32, types.float64)):
            raise TypingError(f"{name}_rows: a 1-D float32 or float64 array expected")
        _check_buf(buf, idx)
        dtype = buf.dtype
        n = _lanes(dtype)

        def codegen(context, builder, sig, args):
            base = _ptr(context, builder, sig.args[0], args[0], args[1])
            vt = _storage_vt(dtype, n)
            at = args[1].type
            rows = [_load_vec(builder, builder.gep(base, [ir.Constant(at, r * n)]), vt, dtype.bitwidth // 8)
                    for r in range(n)]
            # each vector holds n / width rows of `width` lanes, end to end;
            # two of them fold into one of twice the rows and half the width:
            # the low halves of every row (the first vector's rows, then the
            # second's) against the high halves, lane by lane
            width = n
            while width > 1:
                half = width // 2
                lo_idx = [b * width + j for b in range(n // width) for j in range(half)]
                lo_mask = lo_idx + [n + i for i in lo_idx]
                hi_mask = [i + half for i in lo_mask]
                m32 = ir.VectorType(_I32, n)
                rows = [_fold(builder, name,
                              builder.shuffle_vector(a, b, ir.Constant(m32, lo_mask)),
                              builder.shuffle_vector(a, b, ir.Constant(m32, hi_mask)))
                        for a, b in zip(rows[0::2], rows[1::2])]
                width = half
            return rows[0]

        return _result_vec(dtype)(buf, idx), codegen

    return _r


#: :func:`reduce_add` of ``L`` rows at once, one vector each: ``L`` the lanes
#: of a vector of ``buf``'s type (16 float32, 8 float64), row ``r`` the
#: vector ``buf[idx + r L : idx + (r + 1) L]``; lane ``r`` of the result is
#: row ``r``'s sum, by the same tree to the bit. The rows are folded into
#: each other as they are reduced (two shuffles and one add per pair of
#: vectors a level: ``L - 1`` of each triple in all), where ``L`` separate
#: trees take ``log2 L`` extracts or shuffles and adds each (measured on
#: the short-row forward: :mod:`.rows`)
reduce_add_rows = _reduce_rows("add")
#: :func:`reduce_max` of ``L`` rows at once (as :func:`reduce_add_rows`)
reduce_max_rows = _reduce_rows("max")


def _f64_half(which):
    @intrinsic
    def _h(typingctx, v):
        if v != F32x:
            raise TypingError("expected a float32 vector")

        def codegen(context, builder, sig, args):
            half = _halves(builder, args[0])[which]
            return builder.fpext(half, ir.VectorType(_F64, W // 2))

        return F64x(v), codegen

    return _h


#: lanes 0..7 of a float32 vector, exactly, as float64
lo_f64 = _f64_half(0)
#: lanes 8..15 of a float32 vector, exactly, as float64
hi_f64 = _f64_half(1)


@intrinsic
def join_f32(typingctx, lo, hi):
    """Two float64 vectors rounded (once each) into one float32 vector."""
    if lo != F64x or hi != F64x:
        raise TypingError("join_f32: two float64 vectors expected")

    def codegen(context, builder, sig, args):
        h = W // 2
        a = builder.fptrunc(args[0], ir.VectorType(_F32, h))
        b = builder.fptrunc(args[1], ir.VectorType(_F32, h))
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, W), list(range(W))))

    return F32x(lo, hi), codegen


@intrinsic
def join_at(typingctx, a, b, k):
    """Lanes ``k ..`` of ``a`` then lanes ``.. k`` of ``b``: the vector at
    lane ``k`` of the concatenation ``a ++ b`` (``k`` a constant of the
    compile, ``0 < k < W``; one shuffle on AVX-512, ``valignd`` or
    ``vpermi2pd`` as LLVM picks)."""
    if not (isinstance(a, Vec) and a == b and isinstance(k, types.IntegerLiteral)):
        raise TypingError("join_at: two vectors of one type and a constant lane expected")
    at = k.literal_value

    def codegen(context, builder, sig, args):
        count = sig.args[0].count
        mask = ir.Constant(ir.VectorType(_I32, count), [at + i for i in range(count)])
        return builder.shuffle_vector(args[0], args[1], mask)

    return a(a, b, k), codegen


@intrinsic
def lane(typingctx, v, i):
    """Element ``i`` of vector ``v``."""
    if not isinstance(v, Vec):
        raise TypingError("lane: vector expected")

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], args[1])

    return v.dtype(v, i), codegen


# ---------------------------------------------------------------------------
# full or partial: the masked forms only where a vector is cut short
# ---------------------------------------------------------------------------
# AVX2 has no 16-bit masked loads or stores: LLVM scalarises those (the
# bfloat16 backward ran 2.6x slower on an AVX2 build when every vector went
# through vload_part). These pick the plain instruction for whole vectors; the
# branch is predictable (taken for all but a row's last vector).
from numba import njit as _njit  # noqa: E402  (the intrinsics above need no jit)


@_njit(forceinline=True)
def vload_n(buf, idx, count, fill):
    """:func:`vload` if ``count >= W``, else :func:`vload_part`."""
    if count >= W:
        return vload(buf, idx)
    return vload_part(buf, idx, count, fill)


@_njit(forceinline=True)
def vstore_n(buf, idx, v, count):
    """:func:`vstore` if ``count`` covers the vector, else :func:`vstore_part`."""
    if count >= W:
        vstore(buf, idx, v)
    else:
        vstore_part(buf, idx, v, count)
