"""The CPU bridge of :mod:`logsoftmax.jax`: XLA FFI handlers over the kernels.

XLA calls a *handler*, a C function ``XLA_FFI_Error* (XLA_FFI_CallFrame*)``,
from inside a compiled computation: no Python, no GIL, no copies. The
handlers here are numba ``cfunc``\\ s that read the call frame (the structs
of ``xla/ffi/api/c_api.h``, by offset), wrap XLA's buffers as arrays and
run the library's serial CPU kernels on them (:mod:`~logsoftmax.backends.cpu`:
``rows`` and ``columns``, ``float64`` for float64), choosing the form the CPU
backend's layout chooses for a dense row-major array, so the bits are the
front door's (tests compare them).

Why this and not :func:`jax.pure_callback` (measured in
``benchmarks/bench_adapters.py``, docs/jax.md): a host callback costs
~100-300 us per call on this machine (GIL, Python, an output copy) against
~10 us here, and at 4M elements it was still ~3x slower.

Validation is not the handler's job: the JAX functions check axes and
dtypes at trace time with the front door's helpers and pick the handler
for the dtype, so a handler only computes. Inputs are dense row-major (the
layout ``jax.ffi.ffi_call`` asks for); the reduction axis comes as the
attribute ``axis`` counted from the back, so batch dimensions that
``vmap`` prepends (``vmap_method="broadcast_all"``) change nothing, and
``op`` selects log_softmax (0) or softmax (1).

Serial kernels only: XLA calls handlers from its own threads, possibly
while Python runs the library's parallel kernels elsewhere, and the
problems a JAX program hands to one op are mostly below the backend's
``SERIAL_MAX`` anyway. Handlers compile on first use per (kind, dtype)
and are cached on disk (``cache=True``); ``import logsoftmax.jax`` compiles
nothing. They call the kernels through symbols (:func:`links`, linked by
:func:`target` before a handler is compiled or loaded), not copies of them.
"""

from __future__ import annotations

import functools
import types as pytypes

import jax
import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.extending import intrinsic
from numba.np.numpy_support import from_dtype as numba_dtype

from .. import dtypes
from ..backends import InPlace
from ..backends.cpu import columns as C
from ..backends.cpu import float64 as F64
from ..backends.cpu import rows as R
from ..backends.cpu import segment as S
from ..backends.cpu import tiny as T
from ..backends.cpu._simd import I0, I1, store
from ..backends.cpu._vec import on_amd
from ..backends.cpu.layout import storage_dtype
from ..backends.cpu.native import kernel_types, link, linked

__all__ = ["target", "KINDS"]

#: handler kinds: forward (log_softmax/softmax), backward, logsumexp
KINDS = ("fwd", "bwd", "lse")

# --------------------------------------------------------------------------
# raw memory access (the call frame is a C struct)
# --------------------------------------------------------------------------
@intrinsic
def _i64(typingctx, addr):
    """The int64 at address ``addr``."""

    def codegen(context, builder, sig, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()))

    return types.int64(types.int64), codegen


@intrinsic
def _i32(typingctx, addr):
    """The int32 at address ``addr``."""

    def codegen(context, builder, sig, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(32).as_pointer()))

    return types.int32(types.int64), codegen


@intrinsic
def _u8(typingctx, addr):
    """The byte at address ``addr``."""

    def codegen(context, builder, sig, args):
        byte = builder.load(builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return builder.zext(byte, ir.IntType(64))

    return types.int64(types.int64), codegen


@intrinsic
def _set_i32(typingctx, addr, value):
    """Store int32 ``value`` at address ``addr``."""

    def codegen(context, builder, sig, args):
        builder.store(args[1], builder.inttoptr(args[0], ir.IntType(32).as_pointer()))
        return context.get_dummy_value()

    return types.void(types.int64, types.int32), codegen


@intrinsic
def _ptr(typingctx, addr):
    """Address ``addr`` as a ``void*``."""

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return types.voidptr(types.int64), codegen


@intrinsic
def _addr(typingctx, p):
    """A ``void*`` as an integer address."""

    def codegen(context, builder, sig, args):
        return builder.ptrtoint(args[0], ir.IntType(64))

    return types.int64(types.voidptr), codegen


# Byte offsets into the structs of xla/ffi/api/c_api.h (x86-64 / aarch64 LP64).
_FRAME_EXTENSION = 8  # XLA_FFI_CallFrame.extension_start
_FRAME_ARGS = 40 + 32  # XLA_FFI_CallFrame.args (at 40) .args (void**, at +32)
_FRAME_RETS = 80 + 32  # XLA_FFI_CallFrame.rets (at 80) .rets
_FRAME_ATTRS = 120  # XLA_FFI_CallFrame.attrs: size +16, names +32, attrs +40
_EXT_TYPE = 8  # XLA_FFI_Extension_Base.type
_EXT_METADATA = 24  # XLA_FFI_Metadata_Extension.metadata
_META_VERSION = 8 + 16  # XLA_FFI_Metadata.api_version.major_version (minor +4)
_META_TRAITS = 32  # XLA_FFI_Metadata.traits
_BUF_DATA, _BUF_RANK, _BUF_DIMS = 24, 32, 40  # XLA_FFI_Buffer fields
_SCALAR_VALUE = 8  # XLA_FFI_Scalar.value (a pointer to the int64)
#: the FFI API version these offsets follow (XLA_FFI_API_MAJOR/MINOR)
_API_MAJOR, _API_MINOR = 0, 1


@njit
def _answer_metadata(frame: int) -> bool:
    """XLA asks each handler once for its API version (an extension on the
    call frame, no arguments); answer and report whether it was that."""
    ext = _i64(frame + _FRAME_EXTENSION)
    if ext == 0 or _i32(ext + _EXT_TYPE) != 1:  # XLA_FFI_Extension_Metadata
        return False
    meta = _i64(ext + _EXT_METADATA)
    _set_i32(meta + _META_VERSION, np.int32(_API_MAJOR))
    _set_i32(meta + _META_VERSION + 4, np.int32(_API_MINOR))
    _set_i32(meta + _META_TRAITS, np.int32(0))
    return True


@njit
def _buffer(frame: int, field: int, i: int) -> int:
    """Address of the ``i``-th argument/result ``XLA_FFI_Buffer``."""
    return _i64(_i64(frame + field) + 8 * i)


@njit
def _attr(frame: int, first_letter: int) -> int:
    """The int64 attribute whose name starts with ``first_letter`` (ours:
    ``axis``, ``op``), 0 if absent."""
    attrs = frame + _FRAME_ATTRS
    for i in range(_i64(attrs + 16)):
        name = _i64(_i64(attrs + 32) + 8 * i)  # XLA_FFI_ByteSpan*: ptr, len
        if _i64(name + 8) > 0 and _u8(_i64(name)) == first_letter:
            return _i64(_i64(_i64(_i64(attrs + 40) + 8 * i) + _SCALAR_VALUE))
    return 0


@njit
def _split(buf: int, axis: int):
    """``(outer, n, inner)`` of a dense row-major buffer reduced along
    ``axis`` (counted from the back)."""
    rank = _i64(buf + _BUF_RANK)
    dims = _i64(buf + _BUF_DIMS)
    a = rank + axis
    outer = 1
    for d in range(a):
        outer *= _i64(dims + 8 * d)
    inner = 1
    for d in range(a + 1, rank):
        inner *= _i64(dims + 8 * d)
    return outer, _i64(dims + 8 * a), inner


# --------------------------------------------------------------------------
# kernel choice: the CPU backend's plan for dense row-major operands
# --------------------------------------------------------------------------
# A dense row-major array reduced along one axis is ``(outer, n, inner)``.
# The backend's layout (backends/cpu/layout.py) makes that a column problem
# when ``inner > 1`` (and ``n > 1``), else rows, ``outer * inner`` of them
# (with ``n == 1`` every element is a row). Every kernel runs the same
# per-row arithmetic, so any form gives the front door's bits (tested).
# The kernels are called through their symbols (backends/cpu/native.py,
# ``linked``), not linked into each handler: a handler that held its own
# copies of the kernels compiled them again, for ~70 s of a cold `make
# test`'s compiling (AMD EPYC Zen 3)
_FORWARD_TILES, _FORWARD_SHORT, _FORWARD_RANGE = (linked(C, "forward_tiles"), linked(R, "forward_short"),
                                                  linked(R, "forward_range"))
_FORWARD_WHOLE, _FORWARD_TINY, _FORWARD_TINY_VECTOR = (linked(R, "forward_whole"), linked(T, "forward_tiny"),
                                                        linked(T, "forward_tiny_vector"))
_BACKWARD_TILES, _BACKWARD_SHORT, _BACKWARD_RANGE = (linked(C, "backward_tiles"), linked(R, "backward_short"),
                                                     linked(R, "backward_range"))
_BACKWARD_ACCURATE, _BACKWARD_TINY = linked(R, "backward_accurate"), linked(T, "backward_tiny")
_LOGSUMEXP_TILES, _LOGSUMEXP_RANGE = linked(C, "logsumexp_tiles"), linked(R, "logsumexp_range")
_FWD_INNER64, _FWD_ROWS64 = linked(F64, "fwd_inner_serial"), linked(F64, "fwd_rows_serial")
_BWD_INNER64, _BWD_ROWS64 = linked(F64, "bwd_inner_serial"), linked(F64, "bwd_rows_serial")
_LSE_INNER64, _LSE_ROWS64 = linked(F64, "lse_inner_serial"), linked(F64, "lse_rows_serial")


def links(kind: str, dtype) -> list[tuple[object, str, tuple]]:
    """``(module, kernel, argument types)`` of every kernel the handler
    ``kind`` for numpy ``dtype`` calls: what :func:`target` links before it
    compiles the handler or loads it from the disk cache."""
    A = types.Array(numba_dtype(storage_dtype(dtype)), 1, "C")
    G, F64A = types.Array(types.int64, 1, "C"), types.Array(types.float64, 1, "C")
    i = types.int64
    if np.dtype(dtype) == dtypes.float64:
        return {
            "fwd": [(F64, "fwd_inner_serial", (A, G, A, G) + (i,) * 6),
                    (F64, "fwd_rows_serial", (A, G, A, G) + (i,) * 5)],
            "bwd": [(F64, "bwd_inner_serial", (A, G, A, G, A, G) + (i,) * 6),
                    (F64, "bwd_rows_serial", (A, G, A, G, A, G) + (i,) * 5)],
            "lse": [(F64, "lse_inner_serial", (A, G, A, G) + (i,) * 5),
                    (F64, "lse_rows_serial", (A, G, A, G) + (i,) * 3)],
        }[kind]
    if kind == "lse":
        return [(C, "logsumexp_tiles", (A, F64A, G, i, i, i)), (R, "logsumexp_range", (A, F64A, G, i, i))]
    st, bwd = storage_dtype(dtype), kind == "bwd"
    rows_ = [(R, "backward_short"), (R, "backward_accurate"), (T, "backward_tiny"), (R, "backward_range")] if bwd else [
        (R, "forward_short"), (R, "forward_whole"), (T, "forward_tiny"), (T, "forward_tiny_vector"),
        (R, "forward_range")]
    return [(C, "backward_tiles" if bwd else "forward_tiles", kernel_types(bwd, True, st, st))] + [
        (module, kernel, kernel_types(bwd, False, st, st)) for module, kernel in rows_]


@njit
def _geometry(outer: int, n: int, inner: int, nops: int):
    """The row/column kernels' geometry ``[n1, n2, n, ni, (off, s1, s2, sn,
    si) per operand]`` for ``nops`` operands of one dense shape."""
    g = np.zeros(4 + 5 * nops, np.int64)
    columns_ = inner > 1 and n > 1
    g[0], g[1], g[2] = (outer if columns_ else outer * inner), 1, n
    g[3] = inner if columns_ else 1
    for o in range(nops):
        b = 4 + 5 * o
        if columns_:
            g[b + 1], g[b + 3], g[b + 4] = n * inner, inner, 1
        else:
            g[b + 1], g[b + 3] = n, 1
    return g


@njit
def _tiles(g, J) -> int:
    return g[0] * ((g[3] + J - 1) // J)


@njit
def _forward(xb, ob, outer, n, inner, op, accurate):
    g = _geometry(outer, n, inner, 2)
    if g[3] > 1:
        J = C.tile_width(n, g[3])
        _FORWARD_TILES((xb, ob, g, op, accurate, J, I0, -I1))  # every tile
    elif n <= S.CHUNK:  # the kernel the backend's plan takes (R.short_form)
        form = R.short_form(n, accurate, g[0])
        if form == R.ShortForm.TINY:
            _FORWARD_TINY((xb, ob, g, op, accurate, I0, g[0]))
        elif form == R.ShortForm.TINY_VECTOR:
            _FORWARD_TINY_VECTOR((xb, ob, g, op, accurate, I0, g[0]))
        elif form == R.ShortForm.WHOLE:
            _FORWARD_WHOLE((xb, ob, g, op, accurate, I0, g[0]))
        else:
            _FORWARD_SHORT((xb, ob, g, op, accurate, I0, g[0]))
    else:
        _FORWARD_RANGE((xb, ob, g, op, accurate, I0, g[0]))


@njit
def _backward(db, yb, ob, outer, n, inner, op, accurate):
    g = _geometry(outer, n, inner, 3)
    if g[3] > 1:
        J = C.column_tile_width(n, g[3], True, 1, g[0], 0, 0)  # (caches unknown here)
        _BACKWARD_TILES((db, yb, ob, g, op, accurate, J, I0, -I1))
    elif n <= S.CHUNK:  # as the forward (R.short_backward_form)
        form = R.short_backward_form(n, op, accurate, g[0], on_amd())
        if form == R.ShortForm.TINY:
            _BACKWARD_TINY((db, yb, ob, g, op, accurate, I0, g[0]))
        elif form == R.ShortForm.ACCURATE:
            _BACKWARD_ACCURATE((db, yb, ob, g, op, accurate, I0, g[0]))
        else:
            _BACKWARD_SHORT((db, yb, ob, g, op, accurate, I0, g[0]))
    else:
        _BACKWARD_RANGE((db, yb, ob, g, op, accurate, I0, g[0]))


@njit
def _logsumexp(xb, ob, outer, n, inner, accurate):
    """Reduce into float64, then round once into ``ob`` (as the backend)."""
    res = np.empty(outer * inner, np.float64)
    if n == 0:
        res[:] = -np.inf
    else:
        g = _geometry(outer, n, inner, 2)
        g[9 + 3] = 0  # the result: one element per row or column
        if g[3] > 1:
            g[9 + 1] = inner
            J = C.tile_width(n, g[3])
            _LOGSUMEXP_TILES((xb, res, g, J, I0, _tiles(g, J)))
        else:
            g[9 + 1] = 1
            _LOGSUMEXP_RANGE((xb, res, g, I0, g[0]))
    for i in range(res.size):
        store(ob, i, res[i])


# float64: the double-double kernels (backends/cpu/float64.py), one
# [off, s1, s2, sn, si] geometry array per operand; XLA's results are
# never one of its operands
_NOT_IN_PLACE = np.int64(InPlace.NONE)


@njit
def _geometry64(outer: int, n: int, inner: int):
    """``(n1, ni, g)`` for dense operands (all share ``g``)."""
    g = np.zeros(5, np.int64)
    if inner > 1 and n > 1:
        g[1], g[3], g[4] = n * inner, inner, 1
        return outer, inner, g
    g[1], g[3] = n, 1
    return outer * inner, 1, g


@njit
def _tile64(n: int, ni: int) -> int:
    """The float64 column kernels' tile width (``backends/cpu._f64_tile``)."""
    r = min(n, F64.CHUNK)
    return min(max(16, min(1024, (262144 // r) // 16 * 16)), ni)


@njit
def _forward64(xb, ob, outer, n, inner, op, accurate):
    n1, ni, g = _geometry64(outer, n, inner)
    if ni > 1:
        _FWD_INNER64((xb, g, ob, g, n1, I1, n, ni, op, _tile64(n, ni)))
    else:
        _FWD_ROWS64((xb, g, ob, g, n1, I1, n, op, _NOT_IN_PLACE))


@njit
def _backward64(db, yb, ob, outer, n, inner, op, accurate):
    n1, ni, g = _geometry64(outer, n, inner)
    if ni > 1:
        _BWD_INNER64((db, g, yb, g, ob, g, n1, I1, n, ni, op, _tile64(n, ni)))
    else:
        _BWD_ROWS64((db, g, yb, g, ob, g, n1, I1, n, op, _NOT_IN_PLACE))


@njit
def _logsumexp64(xb, ob, outer, n, inner, accurate):
    if n == 0:
        ob[:] = -np.inf
        return
    n1, ni, g = _geometry64(outer, n, inner)
    rg = np.zeros(5, np.int64)
    if ni > 1:
        rg[1], rg[4] = inner, 1
        _LSE_INNER64((xb, g, ob, rg, n1, I1, n, ni, _tile64(n, ni)))
    else:
        rg[1] = 1
        _LSE_ROWS64((xb, g, ob, rg, n1, I1, n))


# --------------------------------------------------------------------------
# the handlers (one per kind and storage dtype, built on first use)
# --------------------------------------------------------------------------
# Each is compiled from one of these functions with its globals set for the
# dtype: ``STORAGE`` (bfloat16 as uint16, float16 as int16), the kernel
# choice (``FORWARD`` ..., the float64 ones for float64) and ``FLOAT32`` (the
# backend's accurate path for float32 results of rows of at most
# segment.SHORT elements, segment.SHORT_BACKWARD for the backward).
STORAGE = np.float32
FLOAT32 = True
FORWARD, BACKWARD, LOGSUMEXP = _forward, _backward, _logsumexp


def _fwd_handler(frame_p):
    frame = _addr(frame_p)
    if not _answer_metadata(frame):
        x, y = _buffer(frame, _FRAME_ARGS, 0), _buffer(frame, _FRAME_RETS, 0)
        outer, n, inner = _split(x, _attr(frame, ord("a")))
        size = outer * n * inner
        if size > 0:
            xb = carray(_ptr(_i64(x + _BUF_DATA)), size, STORAGE)
            yb = carray(_ptr(_i64(y + _BUF_DATA)), size, STORAGE)
            # np.bool_: a plain bool, not a literal (backends/cpu/_simd.I0)
            accurate = np.bool_(FLOAT32 and n <= S.SHORT)
            FORWARD(xb, yb, outer, n, inner, _attr(frame, ord("o")), accurate)
    return _ptr(0)  # NULL: no error


def _bwd_handler(frame_p):
    frame = _addr(frame_p)
    if not _answer_metadata(frame):
        d = _buffer(frame, _FRAME_ARGS, 0)
        y = _buffer(frame, _FRAME_ARGS, 1)
        o = _buffer(frame, _FRAME_RETS, 0)
        outer, n, inner = _split(d, _attr(frame, ord("a")))
        size = outer * n * inner
        if size > 0:
            db = carray(_ptr(_i64(d + _BUF_DATA)), size, STORAGE)
            yb = carray(_ptr(_i64(y + _BUF_DATA)), size, STORAGE)
            ob = carray(_ptr(_i64(o + _BUF_DATA)), size, STORAGE)
            accurate = np.bool_(FLOAT32 and n <= S.SHORT_BACKWARD)
            BACKWARD(db, yb, ob, outer, n, inner, _attr(frame, ord("o")), accurate)
    return _ptr(0)


def _lse_handler(frame_p):
    frame = _addr(frame_p)
    if not _answer_metadata(frame):
        x, r = _buffer(frame, _FRAME_ARGS, 0), _buffer(frame, _FRAME_RETS, 0)
        outer, n, inner = _split(x, _attr(frame, ord("a")))
        if outer * inner > 0:
            xb = carray(_ptr(_i64(x + _BUF_DATA)), outer * n * inner, STORAGE)
            rb = carray(_ptr(_i64(r + _BUF_DATA)), outer * inner, STORAGE)
            LOGSUMEXP(xb, rb, outer, n, inner, True)
    return _ptr(0)


_SOURCES = {"fwd": _fwd_handler, "bwd": _bwd_handler, "lse": _lse_handler}


@functools.lru_cache(maxsize=None)
def target(kind: str, dtype) -> str:
    """The FFI target name of handler ``kind`` for numpy ``dtype``; compiles
    (or loads from numba's cache) and registers it with XLA on first use."""
    dtype = np.dtype(dtype)
    name = f"logsoftmax_{kind}_{dtypes.name_of(dtype)}"
    src = _SOURCES[kind]
    # A copy of the source function whose global STORAGE is this dtype's;
    # its own qualname keeps numba's on-disk cache entries apart (the cache
    # is keyed by qualname and bytecode, not by globals).
    f64 = dtype == dtypes.float64
    fn = pytypes.FunctionType(
        src.__code__,
        {
            **src.__globals__,
            "STORAGE": storage_dtype(dtype).type,
            "FLOAT32": dtype == dtypes.float32,
            "FORWARD": _forward64 if f64 else _forward,
            "BACKWARD": _backward64 if f64 else _backward,
            "LOGSUMEXP": _logsumexp64 if f64 else _logsumexp,
        },
        name,
    )
    fn.__qualname__ = name
    for module, kernel, argtypes in links(kind, dtype):
        link(module, kernel, argtypes)
    handler = cfunc(types.voidptr(types.voidptr), cache=True)(fn)
    _HANDLERS[name] = handler  # XLA holds the bare pointer: keep it alive
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.ctypes), platform="cpu")
    return name


_HANDLERS: dict[str, object] = {}
