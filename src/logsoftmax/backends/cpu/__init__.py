"""The fused CPU backend (numba): the default for numpy arrays.

One pass computes each row's max and sum of exponentials (online softmax at
4096-element chunk granularity), a second pass writes the result; the
backward sums ``diff_dst`` in one pass and writes in another. The arithmetic
is defined once, per row, in :mod:`.segment`; the kernels that follow it:

==================  =====================================================
:mod:`.rows`        the axis is a row (``inner == 1``); short rows in
                    batches of 16, long rows one at a time
:mod:`.tiny`        rows of up to 24-32 elements (12 backward), a row per
                    vector lane (the plan's choice: ``rows.short_form``)
:mod:`.columns`     the axis is strided and an inner axis is not (NCHW
                    ``axis=1``): vectors across tiles of up to 1024-4096
                    columns (a tile of rows 4 KiB apart staged densely)
:mod:`.strips`      short float32 columns 16 at a time, three strips'
                    passes in one loop (forward; the backward's two),
                    where it measured faster than the tiles
:mod:`.split`       few long rows: chunks spread over threads; the per-block
                    statistics the dask backend merges
:mod:`.float64`     float64 inputs (and results): double-double sums and logs
==================  =====================================================

They are written with explicit vectors (:mod:`._vec`: 16 float32 lanes, one
``zmm`` on AVX-512, two ``ymm`` on AVX2), an ``exp`` and ``log`` of their
own (:mod:`._math`), and masked loads and stores for the last partial
vector of a row. Results are bit-identical for any thread count, any input
or output strides, in place or not, and between AVX2 and AVX-512 machines.

A call maps its arrays' shapes and strides to the kernels' view once
(:mod:`.layout`) and caches that *plan* under the call's signature (op,
shapes, strides, dtypes, axis, ``out``'s too), so a repeated call costs a
dict lookup, the flat views of its arrays and the kernel call (fixed cost
measured in docs/performance.md). A call whose ``dst`` or ``out`` does not
have the input's shape and dtype returns None: the front door's fast path
leaves those checks here, where the input's shape is at hand (~0.1 us of an
``out=`` call), and takes its general path, which raises the error. A small
C-contiguous call with an ``out`` nobody has checked yet goes to
:meth:`CpuBackend.forward_into` (``backward_into``): the allocating call's
plan, whose :mod:`.into` entry checks ``out`` in compiled code.

Problems under ``SERIAL_MAX`` elements (fewer for the kernels whose
elements cost more: ``FEW_SHIFT``, ``ACCURATE_SHIFT``), or with one numba
thread, run the serial forms of the kernels (same bits): waking numba's
thread pool costs more than the work there, and under load it waited 5-8
ms for the second core. Parallel calls whose result is under the pool's
size take a compiled parallel entry (:class:`ParallelEntry`), not the
general path.

Every kernel releases the GIL (``nogil=True``): the dask backend runs blocks
on several threads at once, and with the GIL held they ran one at a time (8
row blocks of 4096x32000 float32 to ``da.store``: 141 -> 100 ms).

Importing this package defines the jitted functions but compiles nothing;
each kernel compiles on first use per (input, output) storage type and is
cached on disk (``cache=True``; numba keys the cache by CPU, so machine code
compiled for one CPU is never loaded on another).

Short rows have a kernel per form (a row per lane, the copies for
constant lengths, the general loop; forward, the row per lane's copy for
rows of 16 too), not one that branches on the row length, so that a first
call compiles only the one its rows take (``rows.short_form``): on a
fresh cache, 64x100 float32 36.5 -> 14.8 s forward, 26.8 -> 11.5 s
backward; 64x10 forward 36.7 -> 14.6 s (docs/performance.md).

Compile time is most of a cold start (a fresh install's first call, a cold
``make test``), and half of it is LLVM finalizing libraries: numba compiles
every ``njit`` function a kernel calls as a library of its own, optimizes
it and emits its machine code with its callees linked in, and the kernel
then links it in and does both again. So the helpers are inlined by LLVM
(``forceinline=True``: one library per signature, however many callers),
but a kernel's *body*, the loop it calls from a few places
(``rows._backward_short_rows``, ``_forward_pipelined``,
``_backward_pipelined``; ``columns._column_stats``,
``_tile_sums_row_major``, ``_tile_sums_lane_major``), is inlined by numba
(``inline="always"``): as a library of its own it was a second finalizing
of nearly the whole kernel. One float32 signature of each of the eight
warm-up kernels, fresh cache (``python benchmarks/compile_libraries.py``,
AMD EPYC Zen 3, two runs each, interleaved): 111.2 and 114.8 s -> 101.8
and 103.9 s, finalizing 58.5-60.9 s -> 49.5-49.8 s; the bits are the same
and the speed too (docs/performance.md). Not the helpers: numba copies the
IR of every nested inline site, and with all of them inlined that way a
first call did not finish in 14 minutes. Nor ``rows._forward_short_rows``,
typed once per call site by numba (four, one per row length it
specializes): ``forward_short`` (then all short rows' forms in one
kernel, since split: ``rows.short_form``) compiled in 43.9 s against 40.6
(one pair). Nor ``tiny._forward_tiny_rows``: inlined by numba, rows of 16
float32 ran 0.94-0.98x (five in-process A/Bs; the same code against itself
0.98-0.99x).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import numpy as np

from ... import dtypes
from .. import Backend, InPlace, Op
from . import alloc
from .layout import layout, storage_dtype, strides_ok

__all__ = ["CpuBackend", "SERIAL_MAX"]

#: problems with fewer elements than this run the serial kernels (same bits).
#: Measured (f32 log_softmax, out=, 2 threads, medians): the parallel kernel
#: breaks even at ~2**14 elements and wins 1.5-1.9x at 2**16; but with
#: another process busy, every parallel call that had to wait for the second
#: core took 5-8 ms (one scheduler slice). Below 2**16 the serial kernel
#: loses at most ~0.1 ms and never stalls.
SERIAL_MAX = 1 << 16
#: few-row columns (:mod:`.fewrows`) and the fast path's rows (forward and
#: backward, any dtype) go parallel from ``SERIAL_MAX >> FEW_SHIFT``
#: elements; a long row split over threads (:mod:`.split`) waits for
#: ``SERIAL_MAX`` (2**15 lost there: one row of 36000 0.54x). Few-row
#: columns, in-process A/B against ``SERIAL_MAX`` (Intel Xeon, LLVM
#: rocketlake, numpy out=, same bits), forward / backward: 16x3x32x32
#: float32 1.45x / 1.37x, bfloat16 1.61x / 1.28x, 4x10x32x32 1.26x /
#: 1.36x; from 2**14 on not always (8x2x32x32 1.12x / 1.01x, 2x16x32x32
#: float16 0.93x). Rows at 2**15 through the parallel entry against the
#: serial kernel (AMD EPYC Zen 4, one process, interleaved, ``out=``):
#: bfloat16 256x128 forward 1.11x, backward 1.07x; float32 backward
#: 256x128 1.23x, 32x1000 1.19x; at 2**14 the backward broke even (128x128
#: 0.93x, 16x1000 0.99x). The fast float32 forward's rows, which waited for
#: 2**16, broke even at 2**15 on a Zen 4 (16x2048 1.02x, 8x4096 1.06x,
#: through the parallel entry) and won on an AVX2-only CPU, whose serial
#: kernel is slower (8x4096 1.25-1.32x in three runs of
#: ``benchmarks/parallel_break_even.py``; in-process A/B, ``out=`` / allocating:
#: 8x4096 1.23x / 1.35x, 16x2048 1.33x / 1.28x, 4x8192 1.27x / 1.49x, 20x2000
#: 1.46x / 1.41x; AMD EPYC Zen 3, LLVM znver3, same bits).
FEW_SHIFT = 1
#: float64 calls go parallel from ``SERIAL_MAX >> F64_SHIFT`` elements: a
#: float64 element costs 2-3x a float32 one (double-double sums). 512x100
#: float64, 2 threads: 182 us serial (PyTorch 56 us, parallel). Parallel /
#: serial at 2**14-2**15 (Intel Xeon, LLVM rocketlake, forward / backward,
#: same bits): 200x100 1.64x / 1.68x, 170x100 1.61x / 1.67x, 100x200 axis 0
#: 1.21x / 1.03x, 2x10000 1.21x / 1.02x
F64_SHIFT = 2
#: rows on the accurate path (float64 terms; float32 rows of up to
#: ``segment.SHORT`` elements forward, ``SHORT_BACKWARD`` backward) go
#: parallel from ``SERIAL_MAX >> ACCURATE_SHIFT`` elements: an element
#: costs ~0.6-1.6 ns there against ~0.25 on the fast path. Through the
#: parallel entry against the serial kernel at 2**14 (AMD EPYC Zen 4, one
#: process, interleaved, ``out=``, same bits): forward 128x128 1.14x,
#: 16x1000 1.26x, 512x32 1.30x, 1024x16 1.39x, 2048x8 1.52x; backward
#: 2048x8 1.53x, 1024x16 1.25x, 512x32 1.24x; at 2**13 they broke even
#: (64x128 0.99x, 8x1000 1.02x, 64x100 1.01x) or lost (backward 0.79-0.84x).
ACCURATE_SHIFT = 2

_F64 = dtypes.float64
_F32 = dtypes.float32
_LSM = int(Op.LOG_SOFTMAX)
_SM = int(Op.SOFTMAX)


def _drop_stale_kernel_cache() -> None:
    """Drop numba's cached machine code when any kernel source changed.

    numba keys a cached function by its *own* file only, but the kernels
    inline functions of other modules (``segment.py``, ``_math.py``,
    ``_vec.py``...): after an edit there, a kernel loaded from the cache
    would still run the old arithmetic (a serial kernel and a freshly
    compiled parallel one then disagreed in their bits). So the sources of
    this package (and of the JAX bridge, which inlines them too) are
    fingerprinted, and on a change the cached code next to them is removed
    before any kernel loads. Skipped when ``NUMBA_CACHE_DIR`` moves the
    cache elsewhere. Costs ~1 ms, once per process, on first use of the
    backend.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    here = Path(__file__).resolve().parent
    dirs = [here, here.parent.parent / "jax"]
    sources = sorted(p for d in dirs if d.is_dir() for p in d.glob("*.py"))
    digest = hashlib.sha256()
    for p in sources:
        digest.update(p.name.encode() + p.read_bytes())
    stamp = digest.hexdigest()
    marker = here / "__pycache__" / "logsoftmax-kernel-sources.sha256"
    try:
        if marker.read_text() == stamp:
            return
    except OSError:
        pass
    try:
        for d in dirs:
            for f in (d / "__pycache__").glob("*.nb[ic]"):
                f.unlink(missing_ok=True)
        marker.parent.mkdir(exist_ok=True)
        tmp = marker.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(stamp)
        tmp.replace(marker)
    except OSError:  # a read-only install: numba then caches elsewhere
        pass


_drop_stale_kernel_cache()


def _k():
    """The kernel modules (deferred: ``import logsoftmax.backends.cpu`` stays
    cheap and imports no numba)."""
    from . import columns, float64, rows, segment, split

    return rows, columns, split, float64, segment


def _strips():
    """The strip kernels (:mod:`.strips`), deferred as :func:`_k`'s."""
    from . import strips

    return strips


def _few():
    """The few-row column kernels (:mod:`.fewrows`), deferred as :func:`_k`'s."""
    from . import fewrows

    return fewrows


def _native():
    """The parallel drivers (:mod:`.native`), deferred as :func:`_k`'s."""
    from . import native

    return native


_num_threads = None


def _threads() -> int:
    """numba's thread count (``numba.get_num_threads()``, as
    ``set_num_threads`` left it for this thread). After the first call, its
    threading layer's own getter: ``get_num_threads`` takes a process lock
    to check that the pool is up, 0.68 us a call against 0.09 (AMD EPYC Zen
    4), and a parallel call asks twice."""
    global _num_threads
    if _num_threads is None:
        import numba
        from numba.np.ufunc import parallel

        numba.get_num_threads()  # starts the pool
        _num_threads = getattr(parallel, "_get_num_threads", None) or numba.get_num_threads
    return _num_threads()


def _serial(size: int, shift: int = 0) -> bool:
    return size < SERIAL_MAX >> shift or _threads() == 1


def _split_tiles(J, n, ni, planes, size):
    """Tile width ``J``, narrowed where a parallel call has fewer tiles than
    threads: 1000x100 axis 0 was one tile of 100 columns, so one thread.
    The width does not change the bits (:func:`.columns.tile_width`). In-process A/B
    (Intel Xeon, LLVM rocketlake, numpy out=, same bits), forward /
    backward: 1000x100 axis 0 float32 1.42x / 1.13x, 4000x120 1.29x /
    2.10x, 500x200 bfloat16 1.27x / 1.29x; 2000x60 keeps its one tile (a
    tile is at least 64 columns)."""
    threads = _threads()
    if size < SERIAL_MAX or threads == 1 or planes * -(-ni // J) >= threads:
        return J
    from ._vec import W
    from .columns import tile_width

    share = -(-ni // threads)
    return tile_width(n, ni, 1 << 20, -(-share // W) * W)


def _usable(a: np.ndarray) -> np.ndarray:
    """``a`` itself when its strides are whole elements, else a compact copy."""
    return a if strides_ok(a) else np.ascontiguousarray(a)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Exactly the same memory, strides and dtype (the API's "in place");
    the address is only read when the two may share memory at all."""
    return a is b or (
        a.dtype == b.dtype
        and a.strides == b.strides
        and np.may_share_memory(a, b)
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def _runner(lay, kernel, dtype):
    """``run(*inputs, out)``: allocate the result unless ``out`` is given,
    make the flat views and run ``kernel(*buffers, geometry)`` once per
    Python-level loop index of the layout (usually once)."""
    # a float32 result of the column tiles starts at its input's phase in a
    # line (alloc.line_phase; the plan's input dtype is fixed, so is this)
    phased = lay.inner and np.dtype(dtype).itemsize == 4

    def run(*args):
        *inputs, out = args
        if out is None:
            res = alloc.empty_like(inputs[0], dtype, phased and inputs[0].itemsize == 4)
        else:
            res = out
        # big outputs are streamed (constants of alloc: _k() costs ~1 us a
        # call; the smaller threshold first, so small calls skip the lookup)
        if res.nbytes >= alloc.STREAM_BYTES_F32_AMD and res.nbytes >= alloc.stream_bytes(res.itemsize, not lay.inner):
            # a fresh result's pages by a store each; an out='s keep its data
            alloc.fault_in(res, _threads(), None if out is not None else _k()[0].touch_pages)
        bufs = lay.buffers([*inputs, res])
        for g in lay.geometries():
            kernel(*bufs, g)
        return res

    return run


def _flat(a, st):
    """Flat storage view of a C-contiguous array (``st``: its storage dtype)."""
    # ravel, a view of a C-contiguous array (the callers' arrays are: their
    # plan's layout says so), costs 85 ns; reshape(-1) 190 (of a 2.5 us call)
    f = a if a.ndim == 1 else a.ravel()
    return f if st is None else f.view(st)


def _stored(a, st):
    """``a`` viewed as its storage dtype ``st`` (None: as it is)."""
    return a if st is None else a.view(st)


def _small_call(run, mod, name, size, shape, in_dt, dtype, g, args, shift=0, units=0):
    """``run`` for big calls; small ones (under ``SERIAL_MAX >> shift``)
    call the serial kernel ``mod.name`` directly on flat views (looked up
    per call: tests swap kernels and ``SERIAL_MAX`` at run time). Its
    ``into``: the same for an ``out`` the front door has not checked
    (:mod:`.into`). Calls from that size up to a result of
    :data:`.alloc.POOL_MIN` bytes run the kernel on its ``units`` (rows or
    tiles, 0: not this way) in parallel through :mod:`.into`'s parallel
    entry (:func:`_parallel_entry`), ``out`` unchecked or not; None past
    that (the general path then runs)."""
    sx = None if storage_dtype(in_dt) == in_dt else storage_dtype(in_dt)
    so = None if storage_dtype(dtype) == dtype else storage_dtype(dtype)
    entry, code, state = _entry(mod, name, args, "forward")
    par = _parallel_entry("forward", code, state, g, args, units, size * dtype.itemsize)

    def small(x, out):
        if size >= SERIAL_MAX or (shift and size >= SERIAL_MAX >> shift):
            if par is None or _threads() == 1:
                return run(x, out)
            res = np.empty(shape, dtype) if out is None else out
            done = par(_stored(x, sx).ravel(), _stored(res, so).ravel())
            return res if done > 0 else run(x, out)
        res = np.empty(shape, dtype) if out is None else out
        if sx is so is None:  # ravel inline: two calls of _flat cost ~0.1 us
            getattr(mod, name)(x.ravel(), res.ravel(), g, *args)
        else:
            getattr(mod, name)(_flat(x, sx), _flat(res, so), g, *args)
        return res

    def into(x, out):  # size and strides: checked by forward_into
        if sx is None:
            xs, os = x, out
        elif out.dtype is not dtype:  # the storage view would hide it
            return None
        else:
            xs, os = x.view(sx), out.view(so)
        done = entry(xs, os, g, *state[0])
        if done < 0:  # UNRESOLVED: the plan's first entry looks up the kernel
            done = entry(xs, os, g, *_resolve(code, state, (xs, os), g, args))
        return out if done > 0 else None  # DONE

    def into_parallel(x, out):  # (the parallel entry takes flat views: its checks, shape aside)
        if _threads() == 1:
            return into(x, out)
        if out.shape != shape:
            return None
        if sx is None:
            return out if par(x.ravel(), out.ravel()) > 0 else None
        if out.dtype is not dtype:
            return None
        return out if par(x.view(sx).ravel(), out.view(so).ravel()) > 0 else None

    small.into = _below(into, into_parallel, size, shift, par)
    return small


def _below(into, into_parallel, size, shift, par):
    """The plan's ``into``: the serial entry's (``into``) for a call under
    ``SERIAL_MAX >> shift`` elements, else the parallel entry's, or with no
    parallel entry (``par``) a function that returns None: the general path
    then runs the call. Chosen once a plan, not per call: a test inside
    ``into`` cost the fixed cost of every small call 1-5% (in-process A/B)."""
    if size < SERIAL_MAX >> shift:
        return into
    return into_parallel if par is not None else lambda *args: None


def _parallel_entry(direction, code, state, g, args, units, nbytes):
    """A :class:`ParallelEntry` of ``direction`` for the plan's serial
    entry (``code``, ``state``: :func:`_entry`); None where a call takes the
    general path: no ``units`` (rows or tiles), fewer than 2, or a result of
    :data:`.alloc.POOL_MIN` bytes or more (the pool allocates it,
    :func:`.alloc.fault_in` may fault it in first)."""
    if units < 2 or nbytes >= alloc.POOL_MIN:
        return None
    from . import into

    return ParallelEntry(getattr(into, direction + "_parallel"), code, state, g, args, units)


class ParallelEntry:
    """``entry(*arrays) -> DONE | REFUSED``: :mod:`.into`'s parallel entry
    (``into.forward_parallel`` or ``backward_parallel``) running a plan's
    serial kernel (``code``, whose address and tag it shares with the
    serial entry's ``state``) over ``min(units, threads)`` ranges of its
    rows or tiles, on flat views of C-contiguous arrays of the plan's shape
    (the callers see to both) and an ``out`` nobody checked otherwise.
    Flat, so that a signature compiles once for every rank: ~0.85 s each
    (``parallel=True``; measured for float32 rows, 2-D and 3-D arrays, AMD
    EPYC Zen 4).

    Why: a parallel call on the general path cost ~6 us more than the
    kernel's own run on two threads (256x128 float32: 17.1 us against
    11.0, AMD EPYC Zen 4): ``run``, the buffers, the kernel closure, two
    thread counts and numba's dispatch of the driver's arguments."""

    __slots__ = ("entry", "code", "state", "g", "args", "units")

    def __init__(self, entry, code, state, g, args, units):
        self.entry, self.code, self.state = entry, code, state
        self.g, self.args, self.units = g, args, units

    @property
    def name(self) -> str:
        return self.code.name

    def __call__(self, *arrays):
        ntask = min(self.units, _threads())
        tail = self.state[0]
        done = self.entry(*arrays, self.g, tail[0], tail[1], ntask, *tail[2:])
        if done < 0:  # UNRESOLVED: the serial entry's lookup, shared
            tail = _resolve(self.code, self.state, arrays, self.g, self.args)
            done = self.entry(*arrays, self.g, tail[0], tail[1], ntask, *tail[2:])
        return done


def _small_call2(run, mod, name, size, shape, in_dt, dtype, g, args, shift=0, units=0):
    """:func:`_small_call` for the backward (two inputs)."""
    sx = None if storage_dtype(in_dt) == in_dt else storage_dtype(in_dt)
    so = None if storage_dtype(dtype) == dtype else storage_dtype(dtype)
    entry, code, state = _entry(mod, name, args, "backward")
    par = _parallel_entry("backward", code, state, g, args, units, size * dtype.itemsize)

    def small(d, y, out):
        if size >= SERIAL_MAX or (shift and size >= SERIAL_MAX >> shift):
            if par is None or _threads() == 1:
                return run(d, y, out)
            res = np.empty(shape, dtype) if out is None else out
            done = par(_stored(d, sx).ravel(), _stored(y, sx).ravel(), _stored(res, so).ravel())
            return res if done > 0 else run(d, y, out)
        res = np.empty(shape, dtype) if out is None else out
        if sx is so is None:
            getattr(mod, name)(d.ravel(), y.ravel(), res.ravel(), g, *args)
        else:
            getattr(mod, name)(_flat(d, sx), _flat(y, sx), _flat(res, so), g, *args)
        return res

    def into(d, y, out):
        if sx is None:
            ds, ys, os = d, y, out
        elif out.dtype is not dtype or y.dtype is not in_dt:
            return None
        else:
            ds, ys, os = d.view(sx), y.view(sx), out.view(so)
        done = entry(ds, ys, os, g, *state[0])
        if done < 0:
            done = entry(ds, ys, os, g, *_resolve(code, state, (ds, ys, os), g, args))
        return out if done > 0 else None

    def into_parallel(d, y, out):
        if _threads() == 1:
            return into(d, y, out)
        if out.shape != shape or y.shape != shape:
            return None
        if sx is None:
            return out if par(d.ravel(), y.ravel(), out.ravel()) > 0 else None
        if out.dtype is not dtype or y.dtype is not in_dt:
            return None
        return out if par(d.view(sx).ravel(), y.view(sx).ravel(), out.view(so).ravel()) > 0 else None

    small.into = _below(into, into_parallel, size, shift, par)
    return small


def _with_into(run):
    """``run`` with an ``into`` (None: the plan has no unchecked-``out`` entry)."""
    if not hasattr(run, "into"):
        run.into = None
    return run


def _entry(mod, name, args, direction):
    """The :mod:`.into` entry of ``direction``, the kernel ``mod.name`` it
    runs (:class:`.native.Compiled`) and the entry's trailing arguments in a
    1-list (the kernel's address and tag, then ``args``, the kernel's last
    one as a 1-tuple for the tile kernels: see there), which
    :func:`_resolve` fills in on the plan's first entry."""
    from . import into, native

    code = native.Compiled(mod, name)
    return getattr(into, direction), code, [(*code.entry, *_tail(args))]


def _tail(args):
    """An entry's arguments after the address and tag: the kernel's, the
    last as a 1-tuple for the tile kernels, () for the row kernels."""
    return (*args, ()) if len(args) == 4 else (*args[:4], args[4:])


def _resolve(code, state, arrays, g, args):
    """``state``'s trailing arguments with the address of ``code`` for the
    flat views of ``arrays`` (the kernel's arguments, as the entry builds
    them); stored for the plan's next calls."""
    flat = [a.reshape(a.size) for a in arrays]
    state[0] = (*code.resolve((*flat, g, *args)), *_tail(args))
    return state[0]


class CpuBackend(Backend):
    """Fused numba kernels for numpy arrays (see module docstring)."""

    name = "cpu"

    def __init__(self):
        self._plans: dict = {}

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("numba") is not None

    # -- the ops --------------------------------------------------------------
    def log_softmax(self, x, axis, out, dtype):
        return self.forward(_LSM, x, axis, out, dtype)

    def softmax(self, x, axis, out, dtype):
        return self.forward(_SM, x, axis, out, dtype)

    def log_softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self.backward(_LSM, diff_dst, dst, axis, out, dtype)

    def softmax_backward(self, diff_dst, dst, axis, out, dtype):
        return self.backward(_SM, diff_dst, dst, axis, out, dtype)

    # -- forward ----------------------------------------------------------------
    def forward(self, op, x, axis, out, dtype):
        """The forward of ``op`` (:class:`Op`, as an int): the plan cached
        under the call's signature, run. The named methods call it, and so
        does the front door's fast path (one Python frame less of a ~1.7 us
        call)."""
        # in place or not is the same plan (the kernels read every vector
        # before writing it); only the float64 kernels ask, per call
        shape = x.shape
        if out is None:
            key = (op, shape, x.strides, x.dtype, dtype, axis)
        elif (out.dtype is not dtype and out.dtype != dtype) or out.shape != shape:
            # not a call to run (the front door's fast path asks); "is" first:
            # the native dtypes are singletons, and ``!=`` alone costs 30 ns
            return None
        else:
            key = (op, shape, x.strides, x.dtype, dtype, axis, out.strides)
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = _with_into(self._plan_forward(op, x, axis, out, np.dtype(dtype)))
        return run(x, out)

    def forward_into(self, op, x, axis, out, dtype):
        """The forward into an ``out`` (an ndarray) that nobody has checked:
        ``out``, or None where this cannot vouch for ``out`` (not a
        C-contiguous call of ``x``'s shape and dtype with a result under
        :data:`.alloc.POOL_MIN` bytes, read-only, overlapping ``x``); nothing
        is written then. The allocating call's plan, whose
        entry checks ``out`` in compiled code (:mod:`.into`).

        An ``out`` with other strides than ``x``'s never reaches the entry:
        it would refuse such an ``out`` by its numba type, but only after a
        dispatch that cost a transposed or sliced 6x37 ``out=`` ~0.85 us
        (7.2 against 6.35 us a call, ``timeit``); the comparison reuses the
        key's strides."""
        strides = x.strides
        if x.nbytes >= alloc.POOL_MIN or out.strides != strides:
            return None
        key = (op, x.shape, strides, x.dtype, dtype, axis)
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = _with_into(self._plan_forward(op, x, axis, None, np.dtype(dtype)))
        into = run.into
        return None if into is None else into(x, out)

    def _plan_forward(self, op, x, axis, out, dtype):
        """The function that runs this call signature (module doc)."""
        if x.size == 0:
            return lambda x, out: alloc.empty_like(x, dtype) if out is None else out
        if dtypes.accumulation_dtype(x.dtype, dtype) == _F64:
            return self._float64_forward(op, axis, dtype)
        if not strides_ok(x) or (out is not None and not strides_ok(out)):
            return self._via_copies(self.forward, op, axis, dtype)
        rows, columns, split, _, segment = _k()
        ostrides = (out if out is not None else alloc.empty_like(x, dtype)).strides
        lay = layout(x.shape, [x.strides, ostrides], [x.itemsize, dtype.itemsize], axis)
        n1, n2, n, ni = lay.dims
        accurate = dtype == _F32 and n <= segment.SHORT
        size = x.size

        strips = _strips()
        few = _few()
        fewp = False
        if lay.inner:
            # (also the serial kernel of small contiguous calls: same bits)
            staged = columns.stages(lay.g, x.itemsize, dtype.itemsize)
            fast16 = x.itemsize == 2 and not accurate
            J = columns.tile_width_for(n, ni, False, _threads(), staged=staged, fast16=fast16)
            J = _split_tiles(J, n, ni, n1 * n2, size)
            tiles = n1 * n2 * -(-ni // J)
            stripsp = strips.takes_strips(lay.g, x.itemsize, dtype.itemsize, accurate)
            fewp = few.takes_few_rows(lay.g, stripsp)

        native = _native()
        if fewp:
            par = native.Parallel(few, "forward_few", native.over_tiles)

            def kernel(xb, ob, g):
                if _serial(size, FEW_SHIFT):
                    par.serial(xb, ob, g, op, accurate, J, 0, -1)
                else:
                    par(min(tiles, _threads()), xb, ob, g, op, accurate, J)

        elif lay.inner and stripsp:

            def kernel(xb, ob, g):
                if _serial(size):
                    count, h, stream = strips.strip_plan(ob, g, 1)
                    strips.forward_strips(xb, ob, g, op, 0, count, h, stream, np.empty(strips.SCRATCH))
                else:
                    strips.forward_strips_parallel(xb, ob, g, op, _threads())

        elif lay.inner:
            par = native.Parallel(columns, "forward_tiles", native.over_tiles)

            def kernel(xb, ob, g):
                if _serial(size):
                    par.serial(xb, ob, g, op, accurate, J, 0, -1)
                else:
                    par(min(tiles, _threads()), xb, ob, g, op, accurate, J)

        else:
            nrows = n1 * n2
            short = lay.unit_rows and n <= segment.CHUNK and not rows.pipelined(n, int(op), accurate)
            splittable = lay.unit_rows and n > 2 * segment.CHUNK
            nch = -(-n // segment.CHUNK)
            shift = ACCURATE_SHIFT if accurate else 0 if splittable else FEW_SHIFT
            mod, name = rows.forward_short_kernel(n, accurate, nrows) if short else (rows, "forward_range")
            par = native.Parallel(mod, name, native.over_rows)

            def kernel(xb, ob, g):
                if _serial(size, shift):
                    par.serial(xb, ob, g, op, accurate, 0, nrows)
                elif splittable and nrows < 2 * _threads():
                    pm = np.empty((nrows, nch), np.float64)
                    ps = np.empty((nrows, nch), np.float64)
                    split.forward_stats(xb, g, accurate, pm, ps)
                    m, lg, inv = np.empty(nrows), np.empty(nrows), np.empty(nrows)
                    split.merge_rows(pm, ps, m, lg, inv)
                    split.forward_apply(xb, ob, g, op, accurate, nch, m, lg, inv)
                else:
                    par(min(nrows, _threads()), xb, ob, g, op, accurate)

        run = _runner(lay, kernel, dtype)
        if lay.loops or not all(lay.contiguous):
            return run
        # Small contiguous calls skip the general machinery: an allocation,
        # two reshapes and the serial kernel (the fixed cost of a small call,
        # docs/performance.md). Big ones are unaffected (`run`).
        if lay.inner:
            args = (op, accurate, J, 0, -1)
            mod, name = (few, "forward_few") if fewp else (columns, "forward_tiles")
            shift = FEW_SHIFT if fewp else 0
            units = 0 if stripsp and not fewp else tiles  # (strips run their own parallel form)
        else:
            args = (op, accurate, 0, nrows)
            units = 0 if splittable else nrows  # (few long rows: split)
        return _small_call(run, mod, name, size, x.shape, x.dtype, dtype, lay.g, args, shift, units)

    # -- backward ---------------------------------------------------------------
    def backward(self, op, diff_dst, dst, axis, out, dtype):
        """The backward of ``op``: as :meth:`forward`."""
        shape = diff_dst.shape
        in_dt = diff_dst.dtype
        if (dst.dtype is not in_dt and dst.dtype != in_dt) or dst.shape != shape:
            return None  # as in forward
        if out is None:
            key = (op, shape, diff_dst.strides, dst.strides, in_dt, dtype, axis)
        elif (out.dtype is not dtype and out.dtype != dtype) or out.shape != shape:
            return None
        else:
            key = (op, shape, diff_dst.strides, dst.strides, in_dt, dtype, axis, out.strides)
        run = self._plans.get(key)
        if run is None:
            run = self._plans[key] = _with_into(
                self._plan_backward(op, diff_dst, dst, axis, out, np.dtype(dtype))
            )
        return run(diff_dst, dst, out)

    def backward_into(self, op, diff_dst, dst, axis, out, dtype):
        """:meth:`forward_into` for the backward (``dst`` unchecked too; ``out``
        may be exactly ``diff_dst`` or ``dst``)."""
        strides = diff_dst.strides
        if diff_dst.nbytes >= alloc.POOL_MIN or out.strides != strides:
            return None
        key = (op, diff_dst.shape, strides, dst.strides, diff_dst.dtype, dtype, axis)
        run = self._plans.get(key)
        if run is None:
            if dst.shape != diff_dst.shape or dst.dtype != diff_dst.dtype:
                return None
            run = self._plans[key] = _with_into(
                self._plan_backward(op, diff_dst, dst, axis, None, np.dtype(dtype))
            )
        into = run.into
        return None if into is None else into(diff_dst, dst, out)

    def _plan_backward(self, op, diff_dst, dst, axis, out, dtype):
        if diff_dst.size == 0:
            return lambda d, y, out: alloc.empty_like(d, dtype) if out is None else out
        if dtypes.accumulation_dtype(diff_dst.dtype, dtype) == _F64:
            return self._float64_backward(op, axis, dtype)
        if not (strides_ok(diff_dst) and strides_ok(dst)) or (
            out is not None and not strides_ok(out)
        ):
            return self._via_copies_bwd(op, axis, dtype)
        rows, columns, split, _, segment = _k()
        ostrides = (out if out is not None else alloc.empty_like(diff_dst, dtype)).strides
        lay = layout(
            diff_dst.shape,
            [diff_dst.strides, dst.strides, ostrides],
            [diff_dst.itemsize, dst.itemsize, dtype.itemsize],
            axis,
        )
        n1, n2, n, ni = lay.dims
        accurate = dtype == _F32 and n <= segment.SHORT_BACKWARD
        size = diff_dst.size

        strips = _strips()
        few = _few()
        fewp = False
        if lay.inner:
            # (also the serial kernel of small contiguous calls: same bits)
            J = columns.tile_width_for(n, ni, True, _threads(), n1 * n2)
            J = _split_tiles(J, n, ni, n1 * n2, size)
            tiles = n1 * n2 * -(-ni // J)
            stripsp = strips.takes_backward_strips(lay.g, diff_dst.itemsize, dst.itemsize, dtype.itemsize)
            fewp = few.takes_backward_few_rows(lay.g)

        native = _native()
        if fewp:
            par = native.Parallel(few, "backward_few", native.over_tiles)

            def kernel(db, yb, ob, g):
                if _serial(size, FEW_SHIFT):
                    par.serial(db, yb, ob, g, op, accurate, J, 0, -1)
                else:
                    par(min(tiles, _threads()), db, yb, ob, g, op, accurate, J)

        elif lay.inner and stripsp:

            def kernel(db, yb, ob, g):
                if _serial(size):
                    count, h, stream = strips.strip_plan(ob, g, 2)
                    strips.backward_strips(db, yb, ob, g, op, accurate, 0, count, h, stream,
                                           np.empty(2 * strips.SCRATCH))
                else:
                    strips.backward_strips_parallel(db, yb, ob, g, op, accurate, _threads())

        elif lay.inner:
            par = native.Parallel(columns, "backward_tiles", native.over_tiles)

            def kernel(db, yb, ob, g):
                if _serial(size):
                    par.serial(db, yb, ob, g, op, accurate, J, 0, -1)
                else:
                    par(min(tiles, _threads()), db, yb, ob, g, op, accurate, J)

        else:
            nrows = n1 * n2
            short = lay.unit_rows and n <= segment.CHUNK
            splittable = lay.unit_rows and n > 2 * segment.CHUNK
            nch = -(-n // segment.CHUNK)
            shift = ACCURATE_SHIFT if accurate else 0 if splittable else FEW_SHIFT
            mod, name = rows.backward_short_kernel(n, op, accurate, nrows) if short else (rows, "backward_range")
            par = native.Parallel(mod, name, native.over_rows)

            def kernel(db, yb, ob, g):
                if _serial(size, shift):
                    par.serial(db, yb, ob, g, op, accurate, 0, nrows)
                elif splittable and nrows < 2 * _threads():
                    ps = np.empty((nrows, nch), np.float64)
                    split.backward_sums(db, yb, g, op, ps)
                    s = np.empty(nrows)
                    for r in range(nrows):  # chunk sums in order, as rows.row_grad_sum
                        acc = 0.0
                        for c in range(nch):
                            acc += ps[r, c]
                        s[r] = acc
                    split.backward_apply(db, yb, ob, g, op, accurate, nch, s)
                else:
                    par(min(nrows, _threads()), db, yb, ob, g, op, accurate)

        run = _runner(lay, kernel, dtype)
        if lay.loops or not all(lay.contiguous):
            return run
        if lay.inner:
            args = (op, accurate, J, 0, -1)
            mod, name = (few, "backward_few") if fewp else (columns, "backward_tiles")
            shift = FEW_SHIFT if fewp else 0
            units = 0 if stripsp and not fewp else tiles
        else:
            args = (op, accurate, 0, nrows)
            units = 0 if splittable else nrows
        return _small_call2(run, mod, name, size, diff_dst.shape, diff_dst.dtype, dtype, lay.g, args, shift, units)

    # -- unusual layouts and float64 -------------------------------------------
    @staticmethod
    def _via_copies(fn, op, axis, dtype):
        """Byte strides that are not whole elements (views into structured
        arrays): run on a compact copy, write back through the view."""

        def run(x, out):
            res = fn(op, np.ascontiguousarray(x), axis, None, dtype)
            if out is None:
                return res
            out[...] = res
            return out

        return run

    def _via_copies_bwd(self, op, axis, dtype):
        def run(d, y, out):
            res = self.backward(
                op, np.ascontiguousarray(d), np.ascontiguousarray(y), axis, None, dtype
            )
            if out is None:
                return res
            out[...] = res
            return out

        return run

    @staticmethod
    def _float64_forward(op, axis, dtype):
        """float64 input or result: :mod:`.float64`'s double-double kernels.
        They compute in the wider of the input and the result: a float32
        input with ``dtype=float64`` is widened first (a float64 copy of the
        input), so the result depends on the values, not on how they were
        stored (PyTorch computes in float64 there too)."""
        f64 = _k()[3]

        def run(x, out):
            res = alloc.empty_like(x, dtype) if out is None else out
            src = x if x.dtype == _F64 else x.astype(_F64)
            target = res if strides_ok(res) else alloc.empty_like(src, res.dtype)
            ip = InPlace.NONE
            if out is not None and src is x and _same(out, x):
                ip = InPlace.SRC
            _f64_forward(f64, _usable(src), target, axis, op, int(ip))
            if target is not res:
                res[...] = target
            return res

        return run

    @staticmethod
    def _float64_backward(op, axis, dtype):
        f64 = _k()[3]

        def run(diff_dst, dst, out):
            res = alloc.empty_like(diff_dst, dtype) if out is None else out
            d = diff_dst if diff_dst.dtype == _F64 else diff_dst.astype(_F64)
            y = dst if dst.dtype == _F64 else dst.astype(_F64)
            target = res if strides_ok(res) else alloc.empty_like(d, res.dtype)
            ip = InPlace.NONE
            if out is not None and d is diff_dst and _same(out, diff_dst):
                ip = InPlace.DIFF_DST
            elif out is not None and y is dst and _same(out, dst):
                ip = InPlace.DST
            _f64_backward(f64, _usable(d), _usable(y), target, axis, op, int(ip))
            if target is not res:
                res[...] = target
            return res

        return run

    # -- per-block pieces of a split axis (the dask backend's plan) -----------
    # A block holds a segment of each row; its statistics are merged across
    # blocks by the caller (online-softmax rule, float64), then pass 2 runs
    # per block. Fused here: one pass each instead of numpy's widen / max /
    # subtract / exp / sum passes. Row blocks (axis unit-stride, float32
    # compute) only; anything else returns None and the caller uses numpy.
    def _block_layout(self, arrays, axis):
        if any(a.dtype == _F64 or not strides_ok(a) for a in arrays):
            return None
        lay = layout(arrays[0].shape, [a.strides for a in arrays], [a.itemsize for a in arrays], axis)
        if lay.inner or lay.loops or not lay.unit_rows:
            return None
        return lay

    def block_stats(self, x, axis: int, accurate: bool):
        """``(m, s)``: float64 arrays of ``x``'s shape without ``axis``: each
        row segment's max and sum of ``exp(x - max)``, or None (unsupported
        layout). ``accurate``: float64 terms (:mod:`.segment`)."""
        lay = self._block_layout([x], axis)
        if lay is None or x.size == 0:
            return None
        split = _k()[2]
        rows_shape = x.shape[:axis] + x.shape[axis + 1 :]
        m, s = np.empty(rows_shape), np.empty(rows_shape)
        (xb,) = lay.buffers([x])
        split.block_stats(xb, lay.g, accurate, m.reshape(-1), s.reshape(-1))
        return m, s

    def block_forward(self, op, x, axis: int, dtype, m, s, accurate: bool):
        """Pass 2 of a block given each row's merged ``(m, s)`` (float64,
        ``x``'s shape without ``axis``); None for an unsupported layout."""
        res = alloc.empty_like(x, dtype)
        lay = self._block_layout([x, res], axis)
        if lay is None or x.size == 0:
            return None
        split = _k()[2]
        rows_, _, _, f64, segment = _k()
        m = np.ascontiguousarray(m, np.float64).reshape(-1)
        s = np.ascontiguousarray(s, np.float64).reshape(-1)
        with np.errstate(all="ignore"):
            inv = 1.0 / s
        lg = np.empty_like(s)
        _log_rows(s, lg)
        xb, ob = lay.buffers([x, res])
        split.block_apply(xb, ob, lay.g, int(op), accurate, m, lg, inv)
        return res

    def block_grad_sums(self, op, diff_dst, dst, axis: int):
        """float64 row sums of ``diff_dst`` (or ``diff_dst * dst``), of the
        shape without ``axis``; None for an unsupported layout."""
        lay = self._block_layout([diff_dst, dst], axis)
        if lay is None or diff_dst.size == 0:
            return None
        split = _k()[2]
        out = np.empty(diff_dst.shape[:axis] + diff_dst.shape[axis + 1 :])
        db, yb = lay.buffers([diff_dst, dst])
        split.block_grad_sums(db, yb, lay.g, int(op), out.reshape(-1))
        return out

    def block_backward(self, op, diff_dst, dst, axis: int, dtype, s, accurate: bool):
        """Pass 2 of the backward on a block given each row's total ``s``."""
        res = alloc.empty_like(diff_dst, dtype)
        lay = self._block_layout([diff_dst, dst, res], axis)
        if lay is None or diff_dst.size == 0:
            return None
        split = _k()[2]
        db, yb, ob = lay.buffers([diff_dst, dst, res])
        s = np.ascontiguousarray(s, np.float64).reshape(-1)
        split.block_backward_apply(db, yb, ob, lay.g, int(op), accurate, s)
        return res

    # -- logsumexp ------------------------------------------------------------
    def logsumexp(self, x, axes, keepdims):
        """Reduce over sorted ``axes``. Several axes run as one merged axis when
        their strides allow it (in logical order, e.g. any trailing block of a
        contiguous array); otherwise they are first copied together (documented
        in docs/performance.md). Returns ``x.dtype``, rounded once from a
        float64 (float32-compute inputs) or double-double (float64) value."""
        x = np.asarray(x)
        axes = tuple(axes)
        keep_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        if not axes:
            return x.copy()
        if any(x.shape[a] == 0 for a in axes):
            res = np.full(keep_shape, -np.inf)
        elif x.size == 0:
            res = np.empty(keep_shape)
        else:
            xv, ax = self._reduction_view(_usable(x), axes)
            res = np.empty([1 if i == ax else s for i, s in enumerate(xv.shape)])
            rv = np.lib.stride_tricks.as_strided(
                res, xv.shape, [0 if i == ax else s for i, s in enumerate(res.strides)]
            )
            self._lse_kernel(xv, rv, ax)
            res = res.reshape(keep_shape)
        r = dtypes.round_to(res, x.dtype)
        if not keepdims:
            r = r.reshape([s for i, s in enumerate(x.shape) if i not in axes])
        return r

    @staticmethod
    def _lse_kernel(xv, rv, ax):
        rows, columns, _, f64, _ = _k()
        lay = layout(xv.shape, [xv.strides, rv.strides], [xv.itemsize, 8], ax)
        xb, rb = lay.buffers([xv, rv])
        n1, n2, n, ni = lay.dims
        ser = _serial(xv.size)
        for g in lay.geometries():
            if xv.dtype == _F64:
                _f64_lse(f64, xb, rb, g, lay, ser)
            elif lay.inner:
                J = columns.tile_width(n, ni)
                tiles = n1 * n2 * -(-ni // J)
                if ser:
                    columns.logsumexp_tiles(xb, rb, g, J, 0, tiles)
                else:
                    columns.logsumexp_parallel(xb, rb, g, J, min(tiles, _threads()))
            elif ser:
                rows.logsumexp_range(xb, rb, g, 0, n1 * n2)
            else:
                rows.logsumexp_parallel(xb, rb, g, min(n1 * n2, _threads()))

    @staticmethod
    def _reduction_view(x: np.ndarray, axes: tuple[int, ...]):
        """``(view, axis)`` reducing ``axes`` as one axis, merged in logical
        order without a copy when strides allow, else a compact copy."""
        if len(axes) == 1:
            return x, axes[0]
        red = [a for a in axes if x.shape[a] != 1]
        ok = all(
            x.strides[a] == x.strides[b] * x.shape[b] for a, b in zip(red, red[1:])
        )
        keep = [i for i in range(x.ndim) if i not in axes]
        size = int(np.prod([x.shape[a] for a in axes]))
        shape = [x.shape[i] for i in keep] + [size]
        if ok:
            step = x.strides[red[-1]] if red else x.itemsize
            strides = [x.strides[i] for i in keep] + [step]
            return np.lib.stride_tricks.as_strided(x, shape, strides), len(keep)
        moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
        return np.ascontiguousarray(moved).reshape(shape), len(keep)


def _log_rows(s, lg):
    """``lg = log(s)`` by the kernels' own log (:func:`._math.log_f64`)."""
    _k()[0]._batch_logs_all(s, lg)


# ---------------------------------------------------------------------------
# float64: the double-double kernels of .float64 (old geometry: one
# [off, s1, s2, sn, si] array per operand)
# ---------------------------------------------------------------------------
def _ops_geom(g, op):
    return g[4 + 5 * op : 9 + 5 * op]


def _f64_tile(f64, n: int, ni: int, planes: int = 1, parallel: bool = False) -> int:
    """Inner tile width of the float64 column kernels (a speed choice only:
    a column's arithmetic is the same in any tile); for a ``parallel`` call
    over ``planes`` planes, narrowed so that every thread gets a tile where
    it can (1000x100 axis 0 was one tile of 100 columns, so one thread)."""
    r = min(n, f64.CHUNK)
    j = min(ni, max(16, min(1024, (262144 // r) // 16 * 16)))
    wanted = -(-_threads() // planes) if parallel else 1
    if -(-ni // j) < wanted:
        share = -(-ni // wanted)  # columns a tile, then whole vectors of them
        j = max(f64.LANES, -(-share // f64.LANES) * f64.LANES)
    return j


def _f64_split(f64, rows: int, n: int) -> bool:
    return n > 2 * f64.CHUNK and rows < 2 * _threads()


def _f64_forward(f64, x, target, axis, op, ip):
    lay = layout(x.shape, [x.strides, target.strides], [8, target.itemsize], axis)
    xb, ob = lay.buffers([x, target])
    n1, n2, n, ni = lay.dims
    ser = _serial(x.size, F64_SHIFT)
    for g in lay.geometries():
        xg, og = _ops_geom(g, 0), _ops_geom(g, 1)
        if lay.inner:
            f = f64.fwd_inner_serial if ser else f64.fwd_inner
            f(xb, xg, ob, og, n1, n2, n, ni, op, _f64_tile(f64, n, ni, n1 * n2, not ser))
        elif not ser and _f64_split(f64, n1 * n2, n):
            f64.fwd_rows_split(xb, xg, ob, og, n1, n2, n, op, ip)
        else:
            f = f64.fwd_rows_serial if ser else f64.fwd_rows
            f(xb, xg, ob, og, n1, n2, n, op, ip)


def _f64_backward(f64, d, y, target, axis, op, ip):
    lay = layout(d.shape, [d.strides, y.strides, target.strides], [8, 8, target.itemsize], axis)
    db, yb, ob = lay.buffers([d, y, target])
    n1, n2, n, ni = lay.dims
    ser = _serial(d.size, F64_SHIFT)
    for g in lay.geometries():
        dg, yg, og = _ops_geom(g, 0), _ops_geom(g, 1), _ops_geom(g, 2)
        if lay.inner:
            f = f64.bwd_inner_serial if ser else f64.bwd_inner
            f(db, dg, yb, yg, ob, og, n1, n2, n, ni, op, _f64_tile(f64, n, ni, n1 * n2, not ser))
        elif not ser and _f64_split(f64, n1 * n2, n):
            f64.bwd_rows_split(db, dg, yb, yg, ob, og, n1, n2, n, op)
        else:
            f = f64.bwd_rows_serial if ser else f64.bwd_rows
            f(db, dg, yb, yg, ob, og, n1, n2, n, op, ip)


def _f64_lse(f64, xb, rb, g, lay, ser):
    n1, n2, n, ni = lay.dims
    xg, rg = _ops_geom(g, 0), _ops_geom(g, 1)
    if lay.inner:
        f = f64.lse_inner_serial if ser else f64.lse_inner
        f(xb, xg, rb, rg, n1, n2, n, ni, _f64_tile(f64, n, ni))
    elif not ser and _f64_split(f64, n1 * n2, n):
        f64.lse_rows_split(xb, xg, rb, rg, n1, n2, n)
    else:
        f = f64.lse_rows_serial if ser else f64.lse_rows
        f(xb, xg, rb, rg, n1, n2, n)
