"""The serial kernels entered with whole arrays and an ``out`` nobody checked.

An ``out=`` call on a small array spent more on checking ``out`` in Python
than an allocating call spends on ``np.empty``: ``out``'s dtype, shape,
strides (in the plan key), ``flags.writeable`` and its overlap with the
input, ~160 ns, against ~130 for the ``np.empty`` of a 1.6 us call (Intel
Xeon, LLVM rocketlake; ``python benchmarks/fixed_cost.py``;
docs/performance.md, the ninth session). Numba's
dispatcher reads most of that anyway to pick the compiled function, since
an array's dtype, rank, layout and read-only flag are part of its numba
type. So each entry here takes the arrays whole and decides:

* at compile time (:func:`_fit`): an ``out`` of another dtype or rank, not
  C-contiguous, or read-only (and inputs not C-contiguous) get a function
  that returns :data:`REFUSED` and touches nothing (it compiles in ~0.1 s);
* at run time: the shapes, and ``out``'s addresses against each input's
  (exactly the input, in place, or apart from it);
* then the kernel on flat views of the same memory, and :data:`DONE`.

:data:`REFUSED` sends the caller to the general path, which checks
``out`` in Python and raises the errors API.md names; nothing was
written. The entries take the kernel's arguments, with whole arrays in
place of the flat buffers and the last argument in a tuple (``c``), and
run the same kernel: the same bits as any other call.

Only C-contiguous native storage reaches them (the plan decides, and
:meth:`.CpuBackend.forward_into` sends an ``out`` whose strides differ from
the input's elsewhere first): float32, and float16/bfloat16 through their
integer storage views, made by the caller after it checked ``out``'s dtype
(a view would hide it).

Measured (``python benchmarks/fixed_cost.py``, 8 float32 elements): the
entry with its checks 0.79 us, the kernel's plain small call 0.78; the
``out=`` call 1.44 us against the allocating one's 1.57 (it was 1.62
against 1.58).

Calls big enough to run in parallel (``SERIAL_MAX`` and its shifts, in
:mod:`.`) whose result is under the pool's :data:`.alloc.POOL_MIN` take
the parallel entries (:func:`forward_parallel`, :func:`backward_parallel`),
on flat views (one compile for every rank; the caller compares ``out``'s
shape): the same checks, then the same serial kernel over ``ntask`` ranges of its
rows or tiles in a ``prange``, as :func:`.native.over_rows` and
:func:`.native.over_tiles` run it; allocating calls too, on a fresh
``np.empty``. On the general path such a call cost ~6 us more than the
kernel's own run on two threads (256x128 float32: 17.1 us against 11.0,
AMD EPYC Zen 4): ``run``, the buffers, the kernel closure, numba's
dispatch of the driver's arguments and two thread counts.

The entries call the kernel by its address (:mod:`.native`), passed in
with its signature's tag: an entry linked its kernel at first, which made
numba compile the kernel again inside each entry, once per rank and
dtype (2-10 s each on a cold cache, ~100 s of a cold ``make test``'s
compiling). Two entries serve all the kernels, one per direction, and a
tag that does not match the arguments' types returns :data:`UNRESOLVED`
(nothing written): the caller compiles or looks up the kernel for them
(:class:`.native.Compiled`) and calls again. The two arguments more cost
~0.06-0.1 us of an 8-element ``out=`` call, numba's dispatch of them (the
call through the address costs nothing measurable: in-process A/B and
``timeit``, AMD EPYC Zen 4, docs/performance.md, the twelfth session).
"""

from __future__ import annotations

from numba import njit, prange, types
from numba.extending import overload

from .columns import line_shift, tiles_per_outer
from .native import _in_ranges, call_native, tag_of

__all__ = ["forward", "backward", "forward_parallel", "backward_parallel", "REFUSED", "DONE", "UNRESOLVED"]

#: what an entry returns: ``out`` does not fit (nothing written; the general
#: path checks it and raises API.md's errors), the kernel ran, or ``tag`` is
#: not the tag of the kernel's arguments' types (nothing written). The
#: caller tests the signs (``> 0``: done; a comparison with a literal is the
#: cheapest test of an 8-element call's ~2 us)
REFUSED, DONE, UNRESOLVED = 0, 1, -1


def _fit(inputs, out) -> bool:
    """Compile time: C-contiguous arrays of one dtype and rank, ``out``
    writeable (numba types, not values)."""
    arrays = (*inputs, out)
    return (
        all(isinstance(a, types.Array) and a.layout == "C" for a in arrays)
        and out.mutable
        and all(a.dtype == out.dtype and a.ndim == out.ndim for a in inputs)
    )


@njit(inline="always")
def _same_or_apart(a, out):
    """``out`` is exactly ``a`` (same start; the shapes were compared and both
    are C-contiguous) or shares no byte with it."""
    pa, po = a.ctypes.data, out.ctypes.data
    return pa == po or pa + a.nbytes <= po or po + out.nbytes <= pa


@njit(inline="always")
def _run(addr, tag, args):
    """The kernel at ``addr`` on ``args`` if ``tag`` is theirs."""
    if tag != tag_of(args):
        return UNRESOLVED
    call_native(addr, args)
    return DONE


def _forward(x, out, g, addr, tag, op, accurate, a, b, c):
    raise NotImplementedError("called from jitted code only")


@overload(_forward, jit_options={"error_model": "numpy"})
def _forward_typed(x, out, g, addr, tag, op, accurate, a, b, c):
    if not _fit((x,), out):
        return lambda x, out, g, addr, tag, op, accurate, a, b, c: REFUSED

    def run(x, out, g, addr, tag, op, accurate, a, b, c):
        if x.shape != out.shape or not _same_or_apart(x, out):
            return REFUSED
        return _run(addr, tag, (x.reshape(x.size), out.reshape(out.size), g, op, accurate, a, b) + c)

    return run


def _backward(d, y, out, g, addr, tag, op, accurate, a, b, c):
    raise NotImplementedError("called from jitted code only")


@overload(_backward, jit_options={"error_model": "numpy"})
def _backward_typed(d, y, out, g, addr, tag, op, accurate, a, b, c):
    if not _fit((d, y), out):
        return lambda d, y, out, g, addr, tag, op, accurate, a, b, c: REFUSED

    def run(d, y, out, g, addr, tag, op, accurate, a, b, c):
        if d.shape != out.shape or y.shape != out.shape:
            return REFUSED
        if not (_same_or_apart(d, out) and _same_or_apart(y, out)):
            return REFUSED
        n = out.size
        return _run(addr, tag, (d.reshape(n), y.reshape(n), out.reshape(n), g, op, accurate, a, b) + c)

    return run


@njit(inline="always")
def _refused():
    """The parallel entries' :data:`REFUSED`, behind a parallel loop of one
    task: a function compiled ``parallel=True`` with no parallel loop in it
    warns at its compile (``NumbaPerformanceWarning``)."""
    for _ in prange(1):
        pass
    return REFUSED


@njit(inline="always")
def _over_rows(addr, tag, ntask, head, a, b, out, g, out_op):
    """A row kernel (``kernel(*head, lo, hi)``) over its rows ``[a = 0, b)``
    in ``ntask`` ranges at once, as :func:`.native.over_rows` runs it
    (:func:`_over_tiles`' arguments: the entries call either alike)."""
    return DONE if _in_ranges(addr, tag, ntask, head, b, g[2]) else UNRESOLVED


@njit(inline="always")
def _over_tiles(addr, tag, ntask, head, a, b, out, g, out_op):
    """A tile kernel (``kernel(*head, J, lo, hi)``, ``J = a``) over all its
    tiles in ``ntask`` ranges at once, as :func:`.native.over_tiles` runs it
    (``out``: the flat output, operand ``out_op`` of the geometry ``g``)."""
    tiles = g[0] * g[1] * tiles_per_outer(g[3], a, line_shift(out, g, out_op, a))
    return DONE if _in_ranges(addr, tag, ntask, head + (a,), tiles, g[2] * a) else UNRESOLVED


def _ranges(c):
    """Compile time: the driver of the kernel whose last argument is ``c``
    (``()``: a row kernel, ``(-1,)``: a tile kernel; :func:`forward`)."""
    return _over_rows if len(c) == 0 else _over_tiles


def _forward_parallel(x, out, g, addr, tag, ntask, op, accurate, a, b, c):
    raise NotImplementedError("called from jitted code only")


@overload(_forward_parallel, inline="always", jit_options={"error_model": "numpy"})
def _forward_parallel_typed(x, out, g, addr, tag, ntask, op, accurate, a, b, c):
    if not _fit((x,), out):
        return lambda x, out, g, addr, tag, ntask, op, accurate, a, b, c: _refused()
    over = _ranges(c)

    def run(x, out, g, addr, tag, ntask, op, accurate, a, b, c):
        if x.size != out.size or not _same_or_apart(x, out):  # (flat views)
            return REFUSED
        return over(addr, tag, ntask, (x, out, g, op, accurate), a, b, out, g, 1)

    return run


def _backward_parallel(d, y, out, g, addr, tag, ntask, op, accurate, a, b, c):
    raise NotImplementedError("called from jitted code only")


@overload(_backward_parallel, inline="always", jit_options={"error_model": "numpy"})
def _backward_parallel_typed(d, y, out, g, addr, tag, ntask, op, accurate, a, b, c):
    if not _fit((d, y), out):
        return lambda d, y, out, g, addr, tag, ntask, op, accurate, a, b, c: _refused()
    over = _ranges(c)

    def run(d, y, out, g, addr, tag, ntask, op, accurate, a, b, c):
        if d.size != out.size or y.size != out.size:  # (flat views)
            return REFUSED
        if not (_same_or_apart(d, out) and _same_or_apart(y, out)):
            return REFUSED
        return over(addr, tag, ntask, (d, y, out, g, op, accurate), a, b, out, g, 2)

    return run


# ``c``: the tile kernels' third trailing argument as a 1-tuple, the row
# kernels' as () (one signature per entry, whatever the kernel's arity)
@njit(cache=True, nogil=True, error_model="numpy")
def forward(x, out, g, addr, tag, op, accurate, a, b, c):
    """The forward kernel at ``addr`` (``kernel(x, out, g, op, accurate, a,
    b, *c)`` on flat views) on whole ``x`` and ``out``: :data:`DONE`, or
    :data:`REFUSED` / :data:`UNRESOLVED` with nothing written."""
    return _forward(x, out, g, addr, tag, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def backward(d, y, out, g, addr, tag, op, accurate, a, b, c):
    """:func:`forward` for a backward kernel (``diff_dst``, ``dst``, ``out``;
    ``out`` may be exactly either input)."""
    return _backward(d, y, out, g, addr, tag, op, accurate, a, b, c)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def forward_parallel(x, out, g, addr, tag, ntask, op, accurate, a, b, c):
    """:func:`forward` on ``ntask`` threads: the kernel at ``addr`` (the
    serial kernel :func:`forward` runs, same arguments) over ``ntask`` ranges
    of its rows or tiles at once, as :func:`.native.over_rows` and
    :func:`.native.over_tiles` run it (the same bits)."""
    return _forward_parallel(x, out, g, addr, tag, ntask, op, accurate, a, b, c)


@njit(cache=True, nogil=True, parallel=True, error_model="numpy")
def backward_parallel(d, y, out, g, addr, tag, ntask, op, accurate, a, b, c):
    """:func:`backward` on ``ntask`` threads (:func:`forward_parallel`)."""
    return _backward_parallel(d, y, out, g, addr, tag, ntask, op, accurate, a, b, c)
