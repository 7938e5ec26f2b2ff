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
  that returns False and touches nothing (it compiles in ~0.1 s: the
  kernel is not typed for them);
* at run time: the shapes, and ``out``'s addresses against each input's
  (exactly the input, in place, or apart from it);
* then the kernel on flat views of the same memory, and True.

False sends the caller to the general path, which checks ``out`` in Python
and raises the errors API.md names; nothing was written. The entries bear
the serial kernels' names and take their arguments, with whole arrays in
place of the flat buffers and the last argument in a tuple (``c``), and run
the same kernel: the same bits as any other call.

Only C-contiguous native storage reaches them (the plan decides, and
:meth:`.CpuBackend.forward_into` sends an ``out`` whose strides differ from
the input's elsewhere first): float32, and float16/bfloat16 through their
integer storage views, made by the caller after it checked ``out``'s dtype
(a view would hide it).

Measured (``python benchmarks/fixed_cost.py``, 8 float32 elements): the
entry with its checks 0.79 us, the kernel's plain small call 0.78; the
``out=`` call 1.44 us against the allocating one's 1.57 (it was 1.62
against 1.58). The price is compile time: an entry links its kernel, so
its first call on a cold cache compiles for ~4 s more (``python
benchmarks/compile_time.py --only out=``: 17.4 s against 13.0 for a first
``out=`` call of 64x100 float32; from the disk cache 0.43 s, as before).
"""

from __future__ import annotations

from numba import njit, types
from numba.extending import overload

from . import columns, fewrows, rows

__all__ = [
    "forward_short",
    "forward_range",
    "forward_tiles",
    "forward_few",
    "backward_short",
    "backward_range",
    "backward_tiles",
    "backward_few",
]


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


def _entry1(kernel):
    """A function ``(x, out, g, *tail)`` whose numba overload runs ``kernel``
    on flat views where ``out`` fits ``x``, else returns False."""

    def entry(x, out, g, op, accurate, a, b, c):
        raise NotImplementedError("called from jitted code only")

    @overload(entry, jit_options={"error_model": "numpy"})
    def typed(x, out, g, op, accurate, a, b, c):
        if not _fit((x,), out):
            return lambda x, out, g, op, accurate, a, b, c: False

        def run(x, out, g, op, accurate, a, b, c):
            if x.shape != out.shape or not _same_or_apart(x, out):
                return False
            kernel(x.reshape(x.size), out.reshape(out.size), g, op, accurate, a, b, *c)
            return True

        return run

    return entry


def _entry2(kernel):
    """:func:`_entry1` for the backward: ``(diff_dst, dst, out, g, *tail)``;
    ``out`` may be exactly either input."""

    def entry(d, y, out, g, op, accurate, a, b, c):
        raise NotImplementedError("called from jitted code only")

    @overload(entry, jit_options={"error_model": "numpy"})
    def typed(d, y, out, g, op, accurate, a, b, c):
        if not _fit((d, y), out):
            return lambda d, y, out, g, op, accurate, a, b, c: False

        def run(d, y, out, g, op, accurate, a, b, c):
            if d.shape != out.shape or y.shape != out.shape:
                return False
            if not (_same_or_apart(d, out) and _same_or_apart(y, out)):
                return False
            n = out.size
            kernel(d.reshape(n), y.reshape(n), out.reshape(n), g, op, accurate, a, b, *c)
            return True

        return run

    return entry


# ``c``: the tile kernels' third trailing argument as a 1-tuple, the row
# kernels' as () (one signature per entry, whatever the kernel's arity)
_forward_short = _entry1(rows.forward_short)
_forward_range = _entry1(rows.forward_range)
_forward_tiles = _entry1(columns.forward_tiles)
_forward_few = _entry1(fewrows.forward_few)
_backward_short = _entry2(rows.backward_short)
_backward_range = _entry2(rows.backward_range)
_backward_tiles = _entry2(columns.backward_tiles)
_backward_few = _entry2(fewrows.backward_few)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_short(x, out, g, op, accurate, a, b, c):
    """:func:`.rows.forward_short` on whole ``x`` and ``out``; False (nothing
    written) where ``out`` does not fit."""
    return _forward_short(x, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_range(x, out, g, op, accurate, a, b, c):
    """:func:`.rows.forward_range`, as :func:`forward_short`."""
    return _forward_range(x, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_tiles(x, out, g, op, accurate, a, b, c):
    """:func:`.columns.forward_tiles`, as :func:`forward_short`."""
    return _forward_tiles(x, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def forward_few(x, out, g, op, accurate, a, b, c):
    """:func:`.fewrows.forward_few`, as :func:`forward_short`."""
    return _forward_few(x, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_short(d, y, out, g, op, accurate, a, b, c):
    """:func:`.rows.backward_short` on whole arrays, as :func:`forward_short`."""
    return _backward_short(d, y, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_range(d, y, out, g, op, accurate, a, b, c):
    """:func:`.rows.backward_range`, as :func:`backward_short`."""
    return _backward_range(d, y, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_tiles(d, y, out, g, op, accurate, a, b, c):
    """:func:`.columns.backward_tiles`, as :func:`backward_short`."""
    return _backward_tiles(d, y, out, g, op, accurate, a, b, c)


@njit(cache=True, nogil=True, error_model="numpy")
def backward_few(d, y, out, g, op, accurate, a, b, c):
    """:func:`.fewrows.backward_few`, as :func:`backward_short`."""
    return _backward_few(d, y, out, g, op, accurate, a, b, c)
