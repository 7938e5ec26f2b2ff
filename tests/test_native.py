"""How the cpu backend runs its kernels (:mod:`logsoftmax.backends.cpu.native`):
ranges claimed one at a time by the threads, and every call with its stack
at one place in its page."""

from __future__ import annotations

import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from llvmlite import ir  # noqa: E402
from numba import njit, prange, types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

from logsoftmax.backends.cpu import native  # noqa: E402


@njit(parallel=True)
def _claims(nthreads, each):
    taken = np.empty(1, np.int64)  # (as the drivers: np.zeros would be a parallel loop)
    taken[0] = 0
    by = np.full(nthreads * each, -1, np.int64)
    for i in prange(nthreads):
        for _ in range(each):
            by[native.claim(taken)] = i
    return taken[0], by


def test_claims_are_numbered_once_each():
    """Every ``claim`` of a shared counter, from any thread, gets a number
    no other claim got: ``n`` claims take exactly ``0 .. n-1``."""
    total, by = _claims(4, 5000)
    assert total == 20000
    assert (by >= 0).all()  # (two claims of one number would leave a -1)


@njit
def _held(g, log, hold, r0, r1):
    """A row kernel for :func:`native.over_rows` (``g = args[-3]``): logs
    which thread ran the range starting at ``r0``; range 0 also works
    ``hold`` steps before it returns."""
    log[r0, 0] = numba.get_thread_id()
    log[r0, 1] = r1
    if r0 == 0:
        acc = 0.0
        for i in range(hold):
            acc = acc * 0.999 + np.sqrt(i + 1.0)
        log[0, 2] = np.int64(acc) & 1


def test_a_held_up_thread_leaves_the_other_ranges_to_the_rest():
    """A parallel run cuts its rows into up to ``RANGES_PER_THREAD``
    ranges a thread (of at least ``RANGE_UNITS`` rows and
    ``RANGE_ELEMENTS`` elements) and each thread
    claims the next one: the ranges cover every row once, and while one
    thread works on a slow range, the other runs all the others (a static
    split would leave it half of them)."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two numba threads")
    numba.set_num_threads(2)
    rows = 2 * native.RANGES_PER_THREAD * native.RANGE_UNITS
    n = native.RANGE_ELEMENTS // native.RANGE_UNITS  # (elements a row: enough for such ranges)
    g = np.array([1, rows, n, 1], np.int64)
    log = np.full((rows, 3), -1, np.int64)
    args = (g, log, np.int64(0))
    _held(*args, np.int64(0), np.int64(rows))  # compiled before its address is taken
    par = native.Parallel(sys.modules[__name__], "_held", native.over_rows)
    par(2, g, log, np.int64(1))
    log[:] = -1
    par(2, g, log, np.int64(300_000_000))  # range 0: ~0.3-1 s
    starts = np.flatnonzero(log[:, 0] >= 0)
    ends = log[starts, 1]
    assert starts[0] == 0 and ends[-1] == rows and (starts[1:] == ends[:-1]).all()
    assert len(starts) == 2 * native.RANGES_PER_THREAD
    held = log[0, 0]
    assert (log[starts[1:], 0] != held).all(), log[starts, 0]


@intrinsic
def _stack_here(typingctx):
    """The address of a slot in the calling function's own frame."""

    def codegen(context, builder, sig, args):
        return builder.ptrtoint(cgutils.alloca_once(builder, ir.IntType(64)), ir.IntType(64))

    return types.int64(), codegen


@intrinsic
def _grow(typingctx, nbytes):
    """Take ``nbytes`` more of the stack for the rest of the function."""

    def codegen(context, builder, sig, args):
        gap = builder.alloca(ir.IntType(8), size=args[0])
        builder.asm(ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]), "", "r", [gap],
                    side_effect=True)
        return context.get_dummy_value()

    return types.none(nbytes), codegen


@njit
def _where(out, r0, r1):
    out[r0] = _stack_here()


@njit
def _deeper(nbytes, addr, args):
    _grow(nbytes)
    native.call_native(addr, args)


@njit
def _deeper_at(nbytes, phase, addr, args):
    _grow(nbytes)
    native.call_native_at(phase, addr, args)


def test_kernels_find_their_stack_at_one_place_in_the_page():
    """``call_native`` (every parallel and serial run of the row, tile and
    few-row kernels) puts the called kernel's stack at ``STACK_PHASE`` in
    its 4 KiB page, however deep the caller's stack: where the main
    thread's stack starts is random (ASLR), and at some places the kernels'
    stack slots 4K-alias the constants their loops load (docs/performance.md).
    ``call_native_at`` puts it where it is asked."""
    out = np.zeros(1, np.int64)
    args = (out, np.int64(0), np.int64(1))
    _where(*args)
    addr, _ = native.Compiled(sys.modules[__name__], "_where").resolve(args)
    seen = set()
    for nbytes in (0, 16, 48, 1000, 2512, 4080, 5000):
        _deeper(np.int64(nbytes), addr, args)
        seen.add(int(out[0]) % 4096)
    assert len(seen) == 1, seen
    (here,) = seen
    for phase in (0, 1024, 2048 + 512):
        for nbytes in (0, 112, 3000):
            _deeper_at(np.int64(nbytes), np.int64(phase), addr, args)
            assert (int(out[0]) - here) % 4096 == (phase - native.STACK_PHASE) % 4096
