"""Result allocation for the allocating path: a pool of large buffers.

A fresh 0.5 GB result costs more than the op itself: PyTorch's allocating
``log_softmax`` on 4096x32000 float32 spent ~190 ms of its ~240 ms in
first-touch page faults (notes/cpu-kernels.md), and numpy's allocator, which
``madvise``\\ s large blocks for transparent huge pages, made the *first* such
allocation of a process stall for 0.7-1.4 s in memory compaction where THP
defrag is ``madvise`` (issue 10). So results of :data:`POOL_MIN` bytes and
more come from a pool of anonymous memory maps:

* a buffer is a private anonymous map of ordinary 4 KiB pages (no
  huge-page advice, hence no compaction stall; :data:`_PRIVATE`); its page
  faults are shared by the threads: by the kernel's own parallel pass 2,
  or, for outputs the kernels write by streaming stores, by
  :func:`fault_in` just before (a store per page of a fresh result);
* when the last array viewing a buffer is garbage collected, the buffer
  goes back to the pool (a ``weakref.finalize`` on the buffer's owner, which
  every view keeps alive) instead of being unmapped, and the next result of
  the same size class reuses it with its pages already present: a repeated
  allocating call costs what an ``out=`` call does;
* the pool keeps at most :func:`pool_limit` bytes (default 2 GiB, or
  ``LOGSOFTMAX_POOL_LIMIT``), unmapping the buffers freed longest ago to
  keep the one freed now; :func:`clear_pool` unmaps everything kept;
* a float32 result of the column tiles starts as far into a 64-byte line
  as its input does (:func:`line_phase`), any other on a line.

Measured on this machine: docs/performance.md ("The allocating path").

The result keeps the input's memory order (numpy's ``order='K'``): a
transposed or channels-last input gets a result with the same layout, so
input and output walk memory the same way (one kernel specialisation, no
strided stores).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import threading
import weakref

import numpy as np

__all__ = [
    "empty_like",
    "POOL_MIN",
    "pool_limit",
    "set_pool_limit",
    "clear_pool",
    "pooled_bytes",
    "fault_in",
    "line_phase",
    "STREAM_BYTES",
    "STREAM_BYTES_F32_AMD",
    "stream_line",
    "compiles_for_amd",
    "stream_bytes",
]

#: results of at least this many bytes come from the pool (smaller ones from
#: numpy: a small np.empty costs ~0.2 us, a mapping ~10 us)
POOL_MIN = 4 << 20
#: buffers are mapped in multiples of this (the size classes of the pool)
_GRAIN = 2 << 20

#: private anonymous maps: Python's ``mmap.mmap(-1, n)`` is a *shared* one
#: (shmem-backed), whose page faults cost more. A fresh process, 500 MiB
#: (4096x32000 float32), 2 threads (AMD EPYC, LLVM znver4): faulted in by a
#: store per page, 147-156 ms private against 210-239 shared; by
#: ``MADV_POPULATE_WRITE``, 198-221 against 174-227 (2-9 fresh processes
#: each); PyTorch's ``empty`` + ``fill_`` 112-155 ms.
_PRIVATE = (
    {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS} if hasattr(mmap, "MAP_PRIVATE") else {}
)
_lock = threading.Lock()
#: freed buffers by size, each with the count of frees when it came back
#: (oldest first): ``{cap: [(freed, buf), ...]}``
_free: dict[int, list[tuple[int, mmap.mmap]]] = {}
_freed = 0
_kept = 0
_limit = int(os.environ.get("LOGSOFTMAX_POOL_LIMIT", 2 << 30))


def pool_limit() -> int:
    """Bytes of freed result buffers the pool keeps mapped at most."""
    return _limit


def set_pool_limit(nbytes: int) -> None:
    """Keep at most ``nbytes`` of freed result buffers (0 disables reuse)."""
    global _limit
    _limit = int(nbytes)
    _trim()


def pooled_bytes() -> int:
    """Bytes currently kept by the pool (freed buffers awaiting reuse)."""
    return _kept


def clear_pool() -> None:
    """Unmap every buffer the pool keeps."""
    global _kept
    with _lock:
        bufs = [b for v in _free.values() for _, b in v]
        _free.clear()
        _kept = 0
    for b in bufs:
        b.close()


def _trim() -> None:
    global _kept
    drop = []
    with _lock:
        for cap in sorted(_free, reverse=True):
            while _free[cap] and _kept > _limit:
                drop.append(_free[cap].pop()[1])
                _kept -= cap
            if not _free[cap]:
                del _free[cap]
    for b in drop:
        b.close()


def _take(cap: int) -> mmap.mmap:
    global _kept
    with _lock:
        bufs = _free.get(cap)
        if bufs:
            _kept -= cap
            buf = bufs.pop()[1]
            if not bufs:
                del _free[cap]
            return buf
    return mmap.mmap(-1, cap, **_PRIVATE)


def _give_back(buf: mmap.mmap) -> None:
    """Keep ``buf`` for the next result of its size, within the limit: the
    buffers freed longest ago (of any size) are unmapped to make room.

    Why the newest: a process whose pool filled with other sizes before
    (``make bench``: 2 GiB of earlier problems' buffers) otherwise mapped
    and faulted in a fresh result at every call of a new size
    (64x64x112x112 float32, 205 MB: 75 ms a call against 19-23).

    Runs while the dying owner still exports ``buf``: closing it here raised
    ``BufferError`` (printed as "Exception ignored") for every result freed
    past the limit. A buffer not kept is unmapped with its last reference,
    once the owner is gone; the ones evicted are nobody's and close here.
    """
    global _kept, _freed
    cap = len(buf)
    drop = []
    with _lock:
        if cap > _limit:
            return
        while _kept + cap > _limit:
            oldest = min(_free, key=lambda c: _free[c][0][0])
            drop.append(_free[oldest].pop(0)[1])
            if not _free[oldest]:
                del _free[oldest]
            _kept -= oldest
        _freed += 1
        _free.setdefault(cap, []).append((_freed, buf))
        _kept += cap
    for b in drop:
        b.close()


def _pooled(nbytes: int, dtype: np.dtype, offset: int = 0) -> np.ndarray:
    """A flat array of ``nbytes // itemsize`` elements on a pooled buffer,
    starting ``offset < 64`` bytes into it (every buffer has room for any
    offset: one size class for a result size, phased or not)."""
    cap = -(-(nbytes + 64) // _GRAIN) * _GRAIN
    buf = _take(cap)
    owner = (ctypes.c_char * nbytes).from_buffer(buf, offset)
    # every view of the array keeps `owner` alive; when the last one goes,
    # the buffer returns to the pool (the finalizer holds `buf`, not `owner`)
    # not at exit: results still alive then (their buffers exported) would
    # be pooled or closed under them; the process's maps go with it anyway
    weakref.finalize(owner, _give_back, buf).atexit = False
    return np.frombuffer(owner, dtype)


def empty_like(x: np.ndarray, dtype, phased: bool = False) -> np.ndarray:
    """An uninitialised result of ``x``'s shape and memory order, of ``dtype``.

    Args:
      x: the input (any strides).
      dtype: numpy dtype of the result.
      phased: a pooled result starts as far into a 64-byte line as ``x``
        does (:func:`line_phase`: for the kernels that reduce across a
        strided axis), else on a line (for the row kernels).

    Returns:
      A new writeable array, ``x.shape``, ``dtype``, compact, in ``x``'s
      dimension order; from the pool when it has :data:`POOL_MIN` bytes or
      more.
    """
    dtype = np.dtype(dtype)
    nbytes = x.size * dtype.itemsize
    if nbytes < POOL_MIN or _limit <= 0:
        return np.empty_like(x, dtype=dtype, order="K")
    flat = _pooled(nbytes, dtype, line_phase(x, dtype.itemsize) if phased else 0)
    if x.flags.c_contiguous:
        return flat.reshape(x.shape)
    # x's axes from the largest stride to the smallest (numpy's order='K')
    order = sorted(range(x.ndim), key=lambda a: (-abs(x.strides[a]), a))
    arranged = flat.reshape([x.shape[a] for a in order])
    return arranged.transpose(np.argsort(order))


def line_phase(x: np.ndarray, itemsize: int) -> int:
    """Bytes into a 64-byte line at which a phased pooled result of
    ``itemsize`` elements starts (:func:`empty_like`): as many elements in
    as ``x``'s first element is.

    Why: the column tiles (a reduction across a strided axis) align their
    vectors to the output's lines, so an input at another phase has every
    64-byte vector load straddle two lines. numpy's big arrays start 16
    bytes past a line (glibc's chunk header), the pool's buffers on one:
    NCHW 64x64x56x56 float32 (axis 1) took 5.7-6.8 ms allocating against
    3.8 into a numpy ``out=`` (AMD EPYC Zen 4, 2 threads, one process,
    three runs). In-process A/B of the allocating call, phased against on
    a line (``python benchmarks/ab_inprocess.py --old <tree> --allocating
    --rounds 11``, same bits): 64x64x56x56 axis 1 1.45-1.57x,
    64x64x112x112 axis 1 1.15-1.16x, 1000x65536 axis 0 1.00x; the
    backward, 64x64x56x56 axis 1, 1.72-2.69x. Float32 only: 16-bit data
    read bfloat16 64x64x56x56 backward 0.93-0.96x, forward 0.99-1.00x,
    float16 8x16x384x384 axis 2 1.01x, then 0.94-0.97x (a 16-bit vector is
    half a line). The row kernels want their output on a line (whole lines
    a row, streamed): phased, 131072x64 read 0.94x, 262144x32 0.96-0.97x,
    32x16x250x250 axis 3 0.96-0.98x, so they keep it."""
    return (x.__array_interface__["data"][0] % 64) // x.itemsize * itemsize % 64


# ---------------------------------------------------------------------------
# faulting a big output in before the kernel streams into it
# ---------------------------------------------------------------------------
#: outputs of at least this many bytes are written by streaming stores
#: (:func:`.segment.sum32_writing`, :func:`.segment.write_forward`, the
#: column tiles; :func:`.rows.streams`) and faulted in first (:func:`fault_in`);
#: smaller ones stay in cache. Measured (Intel Xeon, 2 threads, ``out=``
#: reused, so a cache-sized output is still cached from the call before):
#: 32768x128 float32 (16 MiB) 1.81 -> 2.27 ms streamed, 64x3x224x224 (37 MiB)
#: 5.12 -> 5.03, 1024x32000 (125 MiB) 10.6 -> 6.4 (threshold at 4 MiB vs
#: none, same session; 8x16x384x384, 72 MiB, 10.0 ms in the stop before ->
#: 8.1-8.9). The threshold was 64 MiB; at 32 MiB (a 32 MiB L3 here), in-process
#: A/B on an AMD EPYC (LLVM znver4): 64x3x224x224 float32 (37 MiB) 1.12-1.14x,
#: 12288x1000 float32 backward (47 MiB) 1.14x, 1024x16000 float32 (62.5 MiB)
#: 1.34-1.40x, 18 MiB problems unchanged. Here, not in :mod:`.rows`, so that a
#: call reads it without importing the kernel modules.
STREAM_BYTES = 1 << 25
#: ... and on an AMD core, float32 outputs of the row kernels from half that
#: (16 MiB). There an input as big as the output fills the 32 MiB L3 with
#: it: written by ordinary stores, each output line is read first, and (the
#: likely reason; no cache counters here) the output pushes the input out
#: of L3 before the next call. In-process A/B
#: against 32 MiB (AMD EPYC, LLVM znver4, 2 threads, same bits; ``python
#: benchmarks/ab_inprocess.py --old <tree> --numpy-out --rounds 15``,
#: ranges over 2-4 runs), ``out=`` / allocating: 32768x128 forward
#: 1.09-1.15x / 1.09-1.11x, backward 1.14-1.30x / 1.09-1.12x; 6144x1000
#: backward 1.14-1.29x / 1.20-1.27x; 1024x4096 forward 1.51-1.76x / 1.81x;
#: 16384x256 1.09-1.16x; 131072x32 0.96-1.13x / 0.85-1.11x; 87381x48 and
#: 65536x64 0.98-1.04x. Not 16-bit or float64 outputs (bfloat16 65536x128
#: 0.95-1.00x, float16 8x16x256x256 axis 2 0.94-0.97x, float64 16384x128
#: 1.00x), not from 8 MiB (16384x128 backward 0.86-0.88x), and not the
#: column kernels, whose A/B swung both ways (64x64x32x32 axis 1
#: 0.75-1.34x, 32x64x56x56 0.67-1.15x).
STREAM_BYTES_F32_AMD = 1 << 24


@functools.cache
def compiles_for_amd() -> bool:
    """Whether numba compiles for an AMD core: the CPU name of its target
    (``NUMBA_CPU_NAME``, else the host's), as :func:`._vec.on_amd` reads it
    inside the kernels (imported here, when a big output first asks)."""
    import llvmlite.binding as ll
    from numba.core import config

    from ._vec import is_amd_cpu

    return is_amd_cpu(config.CPU_NAME or ll.get_host_cpu_name())


def stream_line(itemsize, rows, amd):
    """The output size (bytes) from which the kernels stream an output of
    ``itemsize``-byte items, the row kernels' (``rows``) or the column
    ones', on an AMD core or not (``amd``). Plain Python, so that this
    module imports no numba: the kernels compile it themselves
    (:func:`.rows.streams_items`, with :func:`._vec.on_amd`)."""
    if rows and itemsize == 4 and amd:
        return STREAM_BYTES_F32_AMD
    return STREAM_BYTES


@functools.cache
def stream_bytes(itemsize: int, rows: bool) -> int:
    """:func:`stream_line` for the CPU numba compiles for: where the front
    door faults a streamed output's pages in first."""
    return stream_line(itemsize, rows, compiles_for_amd())
_PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault a range in for writing, data kept
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _madvise, _mincore = _libc.madvise, _libc.mincore
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
except (OSError, AttributeError):  # not Linux
    _madvise = _mincore = None


def fault_in(a: np.ndarray, threads: int, touch=None) -> None:
    """Map every page of ``a`` for writing, in ``threads`` parallel slices,
    if its first page is not mapped yet (a fresh pool buffer or ``np.empty``).

    ``touch(pages, threads)``, given for a fresh compact result only (its
    contents are not kept), faults them in instead by a store per page into
    ``pages``, ``a``'s own bytes as ``uint8`` (a view: ``a`` is compact;
    ``threads`` in parallel): a fresh 500 MiB
    result 147-156 ms, against 198-221 by ``MADV_POPULATE_WRITE`` (numbers
    at :data:`_PRIVATE`).

    The kernels write big outputs by streaming stores, which are slow into a
    page the kernel has just zeroed (its lines are in the cache and must be
    written back first); the page faults themselves are then shared by the
    threads, as when the kernel's own stores fault them in.
    ``MADV_POPULATE_WRITE`` keeps the data (an in-place ``out`` is safe);
    ctypes releases the GIL during the call.
    """
    if _madvise is None:
        return
    start = a.ctypes.data // _PAGE * _PAGE
    end = -(-(a.ctypes.data + a.nbytes) // _PAGE) * _PAGE
    resident = ctypes.create_string_buffer(1)
    if _mincore(start, _PAGE, resident) != 0 or resident.raw[0] & 1:
        return
    if touch is not None:  # a compact array: its bytes in memory order are a view
        touch(a.ravel(order="K").view(np.uint8), threads)
        return
    pages = (end - start) // _PAGE
    bounds = [start + pages * i // threads * _PAGE for i in range(threads + 1)]
    parts = [
        threading.Thread(target=_madvise, args=(lo, hi - lo, _MADV_POPULATE_WRITE))
        for lo, hi in zip(bounds, bounds[1:])
    ]
    for t in parts:
        t.start()
    for t in parts:
        t.join()
