"""Serial kernels called through their addresses: compiled once, not once more per caller.

Numba links every njit function a kernel calls into the caller's own LLVM
module, then optimizes and generates the machine code of the whole again.
A ``prange`` loop over a serial kernel (the row, tile and few-row kernels'
``*_parallel`` twins) so compiled that kernel a second time for every
signature, and each :mod:`.into` entry a third: the twin of
``rows.forward_short`` for float32 took 17.7 s to compile with the serial
kernel already compiled, a ``prange`` calling its address 0.35 s (one
process, cold cache; AMD EPYC Zen 4, LLVM znver4). Of the ~1250 s that a
cold ``make test`` spent compiling (``numba:compile`` events of both
workers), 288 went to the eight twins and ~100 to the entries
(docs/performance.md).

So the parallel drivers here (:func:`over_rows`, :func:`over_tiles`) and
the entries call the serial kernel's compiled code by its address
(:func:`call_native`: the native calling convention numba uses between
its own functions). The kernel is compiled, or loaded from the disk cache,
once per signature by its own dispatcher; a driver or an entry is a loop
and a call, and the same machine code runs, so the bits are the serial
call's (``test_serial_and_parallel_kernels_bit_identical``).

Every call goes through :func:`call_native`, which puts the kernel's stack
at one place in its page (:data:`STACK_PHASE`: a random place made some
processes several times slower), and a parallel run cuts its rows or
tiles into more ranges than threads where it can, which the threads claim
one at a time (:func:`_in_ranges`: a thread on a busy core does fewer).

An address is only good for the argument types it was compiled for. So a
caller takes the :func:`signature_tag` of those types along with the
address (:class:`Compiled`), and the compiled side runs nothing where the
tag of the arguments it was called with differs (:func:`tag_of`, a
constant of each compiled signature): :class:`Compiled` then compiles or
looks up the kernel for the new types, and the call is made again. A plan
keeps its own :class:`Parallel` and entry state, so its calls (one
signature) resolve once.
"""

from __future__ import annotations

import zlib

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, prange, typeof, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._simd import I0
from .columns import line_shift, tiles_per_outer

__all__ = ["Compiled", "Parallel", "call_native", "call_native_at", "claim", "in_turn", "tag_of",
           "signature_tag", "over_rows", "over_tiles", "kernel_types", "link", "linked", "STACK_PHASE"]


def signature_tag(argtypes) -> int:
    """A stable 32-bit tag of a tuple of numba types (crc32 of its name, as
    numba names the tuple type): the same in every process, so it can be
    compiled into a cached caller."""
    return zlib.crc32(str(types.BaseTuple.from_types(tuple(argtypes))).encode())


@intrinsic
def tag_of(typingctx, args):
    """:func:`signature_tag` of the types of the tuple ``args``, a constant."""
    if not isinstance(args, types.BaseTuple):
        return None
    tag = signature_tag(args.types)

    def codegen(context, builder, sig, llargs):
        return context.get_constant(types.int64, tag)

    return types.int64(args), codegen


#: where in its 4 KiB page a kernel called by :func:`call_native` finds
#: its stack: ``rsp % 4096`` at the call. The main thread's stack starts
#: at a random place in its page (ASLR), and at some places the kernels'
#: stack slots fall on the address bits 0-11 of the constants their loops
#: load: a 4K alias, which the loads wait on. A process then ran a kernel
#: several times slower for its whole life (AMD EPYC Zen 3, LLVM znver3):
#: the float32 forward of 8x32000, one thread, in cache, took 15.3-18.6 ms
#: in 4 of 24 processes against 4.6-5.1, 4.8 in a new thread of a slow
#: process; 1024x32000 ``out=`` on two threads, 33-37 ms forward and
#: 21-63 ms backward in 2 of 12 processes each against ~10 and ~12
#: (``python benchmarks/process_spread.py``). Swept over the page
#: (:func:`call_native_at`), the same places were slow in every process.
#: So every call goes to one place, where ``python
#: benchmarks/stack_phase.py`` finds no kernel slow; 12 processes with
#: it ran 10.0-11.5 ms and 11.3-20.6 ms. The place still moves some
#: kernels by a few percent: at 3072 instead, in-process A/B, 8x4096
#: float32 forward 1.09-1.11x, 256x1000 0.84x, 32768x128 0.93x; 0 stays.
STACK_PHASE = 0


def _stack_at(builder, phase):
    """Lower the stack to ``phase`` (an ``i64`` value) modulo 4096 for the
    call that follows; returns what :func:`_stack_back` takes."""
    i8p = ir.IntType(8).as_pointer()
    i64 = ir.IntType(64)
    save = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i8p, []), "llvm.stacksave.p0")
    saved = builder.call(save, [])
    pad = builder.and_(builder.sub(builder.ptrtoint(saved, i64), phase), ir.Constant(i64, 4095))
    gap = builder.alloca(ir.IntType(8), size=pad)
    builder.asm(ir.FunctionType(ir.VoidType(), [i8p]), "", "r", [gap], side_effect=True)  # (kept)
    return saved


def _stack_back(builder, saved):
    """Give back what :func:`_stack_at` took."""
    restore = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), "llvm.stackrestore.p0")
    builder.call(restore, [saved])


def _call(context, builder, phase, addr, args, argtypes):
    """The call of :func:`call_native`, the stack at ``phase``."""
    cc = context.call_conv
    fnty = cc.get_function_type(types.none, argtypes)
    fn = builder.inttoptr(addr, fnty.as_pointer())
    retval = cgutils.alloca_once(builder, fnty.args[0].pointee)
    builder.store(cgutils.get_null_value(retval.type.pointee), retval)
    excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
    values = cgutils.unpack_tuple(builder, args, len(argtypes))
    packed = list(cc._get_arg_packer(argtypes).as_arguments(builder, values))
    saved = _stack_at(builder, phase)
    code = builder.call(fn, [retval, excinfo, *packed])
    _stack_back(builder, saved)
    status = cc._get_return_status(builder, code, builder.load(excinfo))
    with cgutils.if_unlikely(builder, status.is_error):
        cc.return_status_propagate(builder, status)
    return context.get_dummy_value()


@intrinsic
def call_native(typingctx, addr, args):
    """Call the numba-compiled function at ``addr`` (an integer) with the
    tuple ``args``, whose types must be those it was compiled for, its
    stack at :data:`STACK_PHASE` in its page; its return value is dropped
    and an exception it raises goes on, as from a direct call."""
    if not isinstance(addr, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    argtypes = tuple(args.types)

    def codegen(context, builder, sig, llargs):
        phase = ir.Constant(ir.IntType(64), STACK_PHASE)
        return _call(context, builder, phase, llargs[0], llargs[1], argtypes)

    return types.none(addr, args), codegen


@intrinsic
def call_native_at(typingctx, phase, addr, args):
    """:func:`call_native` with the stack at ``phase`` (an integer) in its
    page instead (``benchmarks/stack_phase.py`` sweeps it)."""
    if not isinstance(addr, types.Integer) or not isinstance(args, types.BaseTuple):
        return None
    argtypes = tuple(args.types)

    def codegen(context, builder, sig, llargs):
        phase = context.cast(builder, llargs[0], sig.args[0], types.int64)
        return _call(context, builder, phase, llargs[1], llargs[2], argtypes)

    return types.none(phase, addr, args), codegen


@intrinsic
def claim(typingctx, counter):
    """``counter[0]``, incremented by one in the same atomic step (an
    ``int64`` array shared by the threads of a parallel loop): each thread
    that claims gets a number of its own."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, sig, llargs):
        data = context.make_array(sig.args[0])(context, builder, llargs[0]).data
        return builder.atomic_rmw("add", data, context.get_constant(types.int64, 1), "monotonic")

    return types.int64(counter), codegen


#: ranges per thread that a parallel call is cut into, where it has
#: :data:`RANGE_UNITS` rows or tiles for each, and the threads claim them
#: one at a time: a thread that runs slower (a core shared with another
#: process, a noisy neighbour) then does fewer of them instead of holding
#: the others up at the loop's end. With a spinning process on one of the
#: two CPUs (``python benchmarks/process_spread.py --busy-core``, 6 fresh
#: processes each, AMD EPYC Zen 3), 1024x32000 float32 ``out=``: forward
#: 22.0 -> 16.0 ms, backward 24.0 -> 16.4 (medians; 10.2 and 12.3 with
#: both CPUs free). In-process A/B against halves with both CPUs free:
#: 0.96-1.10x (noise), 8x4096 (two ranges) unchanged.
RANGES_PER_THREAD = 8
#: rows or tiles a range holds at least ...
RANGE_UNITS = 8
#: ... and elements: ranges of 16 rows of 128 float32 (256x128, 16
#: ranges) ran 0.83-0.87x of two halves in-process, the claims and calls
#: costing more than a thread's imbalance there
RANGE_ELEMENTS = 1 << 15


@njit(error_model="numpy")
def _claimed(addr, args, count, nrange, taken, first, claims):
    """One thread's share of :func:`_in_ranges`' ranges: range ``first``
    (its own), then, where ``claims``, each range it claims from ``taken``.
    (A function of its own: the same loop written in the ``prange`` body,
    its first range ``t = i + 0``, ran 32768x128 float32 0.93-0.95x
    in-process, six runs of seven, same bits.)"""
    t = first
    while t < nrange:
        call_native(addr, args + (np.int64(t * count // nrange), np.int64((t + 1) * count // nrange)))
        t = claim(taken) if claims else nrange


@njit(inline="always")
def _in_ranges(addr, tag, ntask, args, count, unit):
    """``kernel(*args, lo, hi)`` (the kernel at ``addr``) over ``[0,
    count)`` on ``ntask`` threads: True; False, having run nothing, where
    ``tag`` is not that of these arguments.

    ``ntask`` ranges, one a thread, where the rows or tiles (of ``unit``
    elements each) are too few for more; else up to
    :data:`RANGES_PER_THREAD` times as many, of at least
    :data:`RANGE_UNITS` rows or tiles and :data:`RANGE_ELEMENTS` elements
    each: each thread runs its own first one, then claims the next range
    left (:func:`claim`) until none is. A range's results depend neither
    on the thread that runs it nor on where ranges begin: the same bits
    either way.

    One ``prange`` loop serves both: numba compiles each such loop as a
    function of its own, and a driver with a static loop beside the
    claiming one took 1.43-2.04 s to compile per signature against
    1.06-1.51 (``rows.forward_short`` float32, fresh cache, five times
    each, interleaved, AMD EPYC Zen 3); in-process A/B, same bits, paired
    0.96-1.00x (noise)."""
    if tag != tag_of(args + (I0, I0)):
        return False
    per = max(RANGE_UNITS, -(-RANGE_ELEMENTS // max(unit, 1)))
    nrange = min(ntask * RANGES_PER_THREAD, count // per)
    # (where the ranges would be no more than the threads, none is claimed:
    # a claim on every call, one loop without this flag, cost 8x4096
    # float32, ~18 us, 7% in-process in the last session's A/B)
    claims = nrange > ntask
    nrange = max(nrange, ntask)
    taken = np.empty(1, np.int64)  # (np.zeros: a parallel loop of its own, and its 0 propagated)
    taken[0] = ntask
    for i in prange(ntask):
        _claimed(addr, args, count, nrange, taken, i, claims)
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def in_turn(addr, tag, *args):
    """``kernel(*args)`` (the kernel at ``addr``, ``args`` ending with its
    range) on this thread, its stack where :func:`call_native` puts it:
    True; False, having run nothing, where ``tag`` is not that of these
    arguments."""
    if tag != tag_of(args):
        return False
    call_native(addr, args)
    return True


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def over_rows(addr, tag, ntask, *args):
    """:func:`_in_ranges` of a row kernel (its geometry ``g`` is
    ``args[-3]``) over all rows."""
    g = args[-3]
    return _in_ranges(addr, tag, ntask, args, g[0] * g[1], g[2])


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def over_tiles(addr, tag, ntask, *args):
    """:func:`_in_ranges` of a tile kernel (:mod:`.columns`, :mod:`.fewrows`:
    ``args`` end ``out, g, op, accurate, J``) over every tile
    (:func:`.columns.line_shift`)."""
    ob, g, J = args[-5], args[-4], args[-1]
    tiles = g[0] * g[1] * tiles_per_outer(g[3], J, line_shift(ob, g, len(args) - 5, J))
    return _in_ranges(addr, tag, ntask, args, tiles, g[2] * J)


class Compiled:
    """The address and :func:`signature_tag` of the compiled code of the
    kernel ``module.name`` for the types of the arguments it was last
    resolved for (``entry``; ``(0, -1)`` before that: no tag is -1). The
    kernel is looked up by name when an address is needed, as the small
    calls look theirs up per call (tests swap kernels for counting
    wrappers)."""

    __slots__ = ("module", "name", "entry")

    def __init__(self, module, name):
        self.module, self.name = module, name
        self.entry = (0, -1)

    def resolve(self, args):
        """Compile the kernel for the types of ``args`` (or load it from the
        disk cache) and return its new ``entry``."""
        kernel = getattr(self.module, self.name)
        sig = tuple(typeof(a) for a in args)
        kernel.compile(sig)
        res = kernel.overloads[sig]
        self.entry = res.library.get_pointer_to_function(res.fndesc.llvm_func_name), signature_tag(sig)
        return self.entry


class Parallel(Compiled):
    """A serial kernel that takes a range last (``kernel(*args, lo, hi)``)
    run in parallel by ``driver`` (:func:`over_rows`, :func:`over_tiles`):
    ``Parallel(rows, "forward_short", over_rows)(ntask, *args)``, or on
    this thread: ``.serial(*args, lo, hi)``."""

    __slots__ = ("driver",)

    def __init__(self, module, name, driver):
        super().__init__(module, name)
        self.driver = driver

    def __call__(self, ntask, *args):
        self._run(self.driver, (ntask, *args), (*args, I0, I0))

    def serial(self, *args):
        """The kernel on ``args`` (its range included) on this thread,
        through :func:`in_turn`: the stack where the parallel runs put it."""
        self._run(in_turn, args, args)

    def _run(self, driver, driver_args, kernel_args):
        """``driver(address, tag, *driver_args)``, resolving the kernel for
        ``kernel_args`` first where the entry held is not for them."""
        if driver(*self.entry, *driver_args):
            return
        if not driver(*self.resolve(kernel_args), *driver_args):
            raise RuntimeError(f"{self.module.__name__}.{self.name}: no code for these arguments")


def kernel_types(backward: bool, tiles: bool, storage, result) -> tuple:
    """The numba argument types of a row or tile kernel (:mod:`.rows`'
    ``forward_short`` ..., :mod:`.columns`' and :mod:`.fewrows`' tile
    kernels) for input storage dtype ``storage`` and result storage dtype
    ``result``: the flat arrays, the geometry, ``op``, ``accurate``, then
    the range (``J, t0, t1`` for tiles, ``r0, r1`` for rows), as the
    backend passes them."""
    x = types.Array(typeof(np.dtype(storage).type(0)), 1, "C")
    out = types.Array(typeof(np.dtype(result).type(0)), 1, "C")
    arrays = (x, x, out) if backward else (x, out)
    return arrays + (types.Array(types.int64, 1, "C"), types.int64, types.boolean) + (types.int64,) * (3 if tiles else 2)


# --------------------------------------------------------------------------
# calls by symbol: for code cached on its own (the JAX FFI handlers)
# --------------------------------------------------------------------------
# A numba ``cfunc`` has no arguments to take an address in (an XLA FFI
# handler gets one pointer, XLA's call frame), and its cache holds machine
# code. So it calls each kernel by a *symbol*: an external function named
# after the kernel and its signature's tag, which the JIT's linker resolves
# when it loads the cached code. :func:`link` registers the symbol
# (llvmlite's ``add_symbol``, the way numba provides its own C helpers),
# compiling the kernel or loading it from the disk cache first. A cached
# caller must be loaded after :func:`link` has run for every kernel it
# calls, in every process: an unresolved symbol is a crash, not an error
# (the handlers' :func:`logsoftmax.jax._ffi.target` links first; a test
# compares its list with the calls the handlers compile).
def _symbol(kernel, argtypes) -> str:
    return f"{kernel.py_func.__module__}.{kernel.__name__}.{signature_tag(argtypes):08x}"


def link(module, name: str, argtypes) -> tuple[str, object]:
    """Compile ``module.name`` for ``argtypes`` (or load it from the disk
    cache) and register its code under its symbol: ``(symbol, return type)``."""
    kernel = getattr(module, name)
    argtypes = tuple(argtypes)
    kernel.compile(argtypes)
    res = kernel.overloads[argtypes]
    symbol = _symbol(kernel, argtypes)
    llvm.add_symbol(symbol, res.library.get_pointer_to_function(res.fndesc.llvm_func_name))
    return symbol, res.signature.return_type


#: the symbols that callers compiled in this process call (:func:`linked`;
#: the test of :func:`logsoftmax.jax._ffi.target`'s list reads it)
LINKED: set[str] = set()


def linked(module, name: str):
    """An intrinsic ``call(args)`` that calls the kernel ``module.name`` on
    the tuple ``args`` through its symbol (:func:`link`, run when a caller
    is typed), dropping its result; an exception it raises goes on. The
    caller's code holds a call, not a copy of the kernel."""

    @intrinsic
    def call(typingctx, args):
        if not isinstance(args, types.BaseTuple):
            return None
        given = tuple(args.types)
        argtypes = tuple(types.unliteral(t) for t in given)
        symbol, restype = link(module, name, argtypes)

        def codegen(context, builder, sig, llargs):
            LINKED.add(symbol)  # (here: numba types a call once a process)
            cc = context.call_conv
            fn = cgutils.get_or_insert_function(builder.module, cc.get_function_type(restype, argtypes), symbol)
            values = [context.cast(builder, v, t, u)
                      for v, t, u in zip(cgutils.unpack_tuple(builder, llargs[0], len(given)), given, argtypes)]
            saved = _stack_at(builder, ir.Constant(ir.IntType(64), STACK_PHASE))  # (as call_native)
            status, _ = cc.call_function(builder, fn, restype, argtypes, values)
            _stack_back(builder, saved)
            with cgutils.if_unlikely(builder, status.is_error):
                cc.return_status_propagate(builder, status)
            return context.get_dummy_value()

        return types.none(args), codegen

    call.__name__ = f"linked_{name}"
    return call
