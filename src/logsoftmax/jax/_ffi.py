"""The CPU bridge of :mod:`logsoftmax.jax`: XLA FFI handlers over the kernels.

XLA calls a *handler*, a C function ``XLA_FFI_Error* (XLA_FFI_CallFrame*)``,
from inside a compiled computation: no Python, no GIL, no copies. The
handlers here are numba ``cfunc``\\ s that read the call frame (the structs
of ``xla/ffi/api/c_api.h``, by offset), wrap XLA's buffers as arrays and
run the library's serial CPU kernels (:mod:`logsoftmax.backends.cpu.kernels`)
on them, choosing kernels as the CPU backend's planner does for a dense
row-major array, so the bits are the front door's (tests compare them).

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
nothing.
"""

from __future__ import annotations

import functools
import types as pytypes

import jax
import numpy as np
from llvmlite import ir
from numba import carray, cfunc, njit, types
from numba.extending import intrinsic

from .. import dtypes
from ..backends.cpu import kernels as K
from ..backends.cpu._simd import store
from ..backends.cpu.layout import SHORT_ROW, storage_dtype

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
# kernel choice: the CPU backend's plan for a dense row-major array
# --------------------------------------------------------------------------
@njit
def _tile(n: int, ni: int) -> int:
    """The CPU backend's inner tile width (``backends/cpu/__init__._tile``)."""
    rows = min(n, K.CHUNK)
    return min(max(16, min(1024, (262144 // rows) // 16 * 16)), ni)


@njit
def _inner_form(outer: int, n: int, inner: int) -> bool:
    """Whether the tile kernels run it: a non-last axis, or many short rows
    (``layout.plan``: rows of at most SHORT_ROW become the vectorised dim)."""
    return n > 1 and (inner > 1 or (outer > 1 and n <= SHORT_ROW))


@njit
def _geometry(outer: int, n: int, inner: int):
    """``(n1, ni, g)``: the kernels' outer size, inner size and the
    ``[offset, s1, s2, sn, si]`` geometry of the operands."""
    g = np.zeros(5, np.int64)
    if not _inner_form(outer, n, inner):
        # rows: inner == 1, or n == 1 (then every element is a row)
        g[1], g[3] = n, 1  # row r starts at r * n
        return outer * inner, 1, g
    if inner > 1:
        g[1], g[3], g[4] = n * inner, inner, 1
        return outer, inner, g
    g[3], g[4] = 1, n  # short rows: the row index is the inner dim
    return 1, outer, g


@njit
def _forward(xb, ob, outer, n, inner, op):
    n1, ni, g = _geometry(outer, n, inner)
    if ni > 1:
        K.fwd_inner_serial(xb, g, ob, g, n1, 1, n, ni, op, _tile(n, ni))
    else:
        K.fwd_rows_serial(xb, g, ob, g, n1, 1, n, op, 0)


@njit
def _backward(db, yb, ob, outer, n, inner, op):
    n1, ni, g = _geometry(outer, n, inner)
    if ni > 1:
        K.bwd_inner_serial(db, g, yb, g, ob, g, n1, 1, n, ni, op, _tile(n, ni))
    else:
        K.bwd_rows_serial(db, g, yb, g, ob, g, n1, 1, n, op, 0)


@njit
def _logsumexp(xb, ob, outer, n, inner):
    """Reduce into float64, then round once into ``ob`` (as the backend)."""
    res = np.empty(outer * inner, np.float64)
    if n == 0:
        res[:] = -np.inf
    else:
        n1, ni, g = _geometry(outer, n, inner)
        rg = np.zeros(5, np.int64)
        if ni > 1:
            rg[1], rg[4] = (ni if n1 > 1 else 0), 1
            K.lse_inner_serial(xb, g, res, rg, n1, 1, n, ni, _tile(n, ni))
        else:
            rg[1] = 1
            K.lse_rows_serial(xb, g, res, rg, n1, 1, n)
    for i in range(res.size):
        store(ob, i, res[i])


# --------------------------------------------------------------------------
# the handlers (one per kind and storage dtype, built on first use)
# --------------------------------------------------------------------------
# Each is compiled from one of these functions with the global ``STORAGE``
# set to the dtype's storage type (bfloat16 as uint16, float16 as int16).
STORAGE = np.float32


def _fwd_handler(frame_p):
    frame = _addr(frame_p)
    if not _answer_metadata(frame):
        x, y = _buffer(frame, _FRAME_ARGS, 0), _buffer(frame, _FRAME_RETS, 0)
        outer, n, inner = _split(x, _attr(frame, ord("a")))
        size = outer * n * inner
        if size > 0:
            xb = carray(_ptr(_i64(x + _BUF_DATA)), size, STORAGE)
            yb = carray(_ptr(_i64(y + _BUF_DATA)), size, STORAGE)
            _forward(xb, yb, outer, n, inner, _attr(frame, ord("o")))
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
            _backward(db, yb, ob, outer, n, inner, _attr(frame, ord("o")))
    return _ptr(0)


def _lse_handler(frame_p):
    frame = _addr(frame_p)
    if not _answer_metadata(frame):
        x, r = _buffer(frame, _FRAME_ARGS, 0), _buffer(frame, _FRAME_RETS, 0)
        outer, n, inner = _split(x, _attr(frame, ord("a")))
        if outer * inner > 0:
            xb = carray(_ptr(_i64(x + _BUF_DATA)), outer * n * inner, STORAGE)
            rb = carray(_ptr(_i64(r + _BUF_DATA)), outer * inner, STORAGE)
            _logsumexp(xb, rb, outer, n, inner)
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
    fn = pytypes.FunctionType(
        src.__code__,
        {**src.__globals__, "STORAGE": storage_dtype(dtype).type},
        name,
    )
    fn.__qualname__ = name
    handler = cfunc(types.voidptr(types.voidptr), cache=True)(fn)
    _HANDLERS[name] = handler  # XLA holds the bare pointer: keep it alive
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler.ctypes), platform="cpu")
    return name


_HANDLERS: dict[str, object] = {}
