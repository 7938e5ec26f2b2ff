"""Map arrays of any strides onto the kernels' ``(outer1, outer2, n, inner)`` view.

The kernels never see numpy strides. Each operand (inputs and output) is
passed as a flat 1-D *storage buffer* that starts at the operand's lowest
address (so negative strides are plain negative element offsets), plus a
geometry ``[offset, s1, s2, sn, si]`` in elements: element
``(i1, i2, k, j)`` lives at ``offset + i1*s1 + i2*s2 + k*sn + j*si``.

How a strided array becomes that view (:func:`plan`):

1. Dimensions of size 1 are dropped; the reduction axis is kept aside.
2. A non-axis dimension the *primary* operand (the first input) walks
   backwards is flipped for every operand (negate the stride, move the
   offset): the result is elementwise, so the order rows are visited in
   does not matter. The axis itself is never flipped: its order fixes the
   summation order, and a reversed view must give the same bits as a
   contiguous copy.
3. Non-axis dimensions are sorted by the primary's stride (largest first)
   and adjacent ones are merged when every operand can be merged
   (``stride_outer == stride_inner * size_inner``) -- contiguous, sliced
   outer dims, transposes of whole blocks all collapse, without copies.
4. If the smallest remaining non-axis stride is smaller than the axis
   stride, it becomes ``inner`` (the kernel vectorises across it: the
   non-last-axis case, e.g. NCHW ``axis=1``); otherwise ``inner = 1`` and
   every remaining dim is a row index (the contiguous-row case). Rows of at
   most :data:`SHORT_ROW` elements also take the inner form, with the row
   index as ``inner``: the tile kernels gather a block of rows transposed
   and vectorise across rows instead of paying per-row overhead.
5. The two innermost remaining row dims go to the kernel (``outer1``,
   ``outer2``); any further non-mergeable dims are looped over in Python
   (:attr:`Plan.loops`), which only happens for views that are sliced in
   three or more independent dimensions.

Nothing here copies data. :func:`storage` builds the flat buffers (bf16 as
uint16, f16 as int16, see :mod:`._simd`) through ``__array_interface__``,
which also makes read-only inputs (``np.broadcast_to``) look writeable to
numba so they share the compiled code of ordinary arrays; kernels never
write to inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = ["Plan", "plan", "storage", "storage_dtype", "strides_ok"]

_STORAGE = {
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
    np.dtype(ml_dtypes.bfloat16): np.dtype(np.uint16),
    np.dtype(np.float16): np.dtype(np.int16),
}


def storage_dtype(dtype) -> np.dtype:
    """The storage type the kernels see for ``dtype`` (see :mod:`._simd`)."""
    return _STORAGE[np.dtype(dtype)]


def strides_ok(a: np.ndarray) -> bool:
    """Whether every byte stride of ``a`` is a whole number of elements."""
    return all(s % a.itemsize == 0 for s in a.strides)


class _Owner:
    """Keeps the source array alive behind a flat storage view of it."""

    def __init__(self, src: np.ndarray, iface: dict):
        self.src = src
        self.__array_interface__ = iface


def storage(a: np.ndarray, lo: int, span: int) -> np.ndarray:
    """Flat writeable 1-D view of ``span`` storage elements of ``a``'s memory,
    starting ``lo`` elements (``lo <= 0``) from ``a``'s first element."""
    st = storage_dtype(a.dtype)
    addr = a.__array_interface__["data"][0] + lo * a.itemsize
    iface = {
        "version": 3,
        "shape": (span,),
        "typestr": st.str,
        "data": (addr, False),
        "strides": None,
    }
    return np.asarray(_Owner(a, iface))


@dataclass
class Plan:
    """How the kernels see a set of same-shape operands (see module docstring)."""

    #: flat storage buffers, one per operand
    bufs: list[np.ndarray]
    #: per operand: int64 ``[offset, s1, s2, sn, si]`` in elements
    geoms: list[np.ndarray]
    #: ``(n1, n2, n, ni)``: outer sizes, axis length, inner length (1 = rows)
    dims: tuple[int, int, int, int]
    #: extra outer dims looped in Python: ``(size, [stride per operand])``
    loops: list[tuple[int, list[int]]] = field(default_factory=list)

    @property
    def inner(self) -> bool:
        """True for the ``inner > 1`` (vectorise across inner) kernels."""
        return self.dims[3] > 1

    def offsets(self):
        """Yield per-operand geometry arrays for every Python-level loop index."""
        if not self.loops:
            yield self.geoms
            return
        idx = [0] * len(self.loops)
        while True:
            geoms = []
            for op, g in enumerate(self.geoms):
                g = g.copy()
                g[0] += sum(i * s[1][op] for i, s in zip(idx, self.loops))
                geoms.append(g)
            yield geoms
            for d in range(len(idx) - 1, -1, -1):
                idx[d] += 1
                if idx[d] < self.loops[d][0]:
                    break
                idx[d] = 0
            else:
                return


#: rows this short run on the inner (tile) kernels with the rows as the
#: vectorised dimension: a block of rows is gathered transposed into an L1/L2
#: tile. Per-row overhead made the row kernel ~36 ns per element at n = 4
#: (8M elements, perf07); see docs/performance.md.
SHORT_ROW = 32


def plan(arrays: list[np.ndarray], axis: int) -> Plan:
    """Map same-shape ``arrays`` (first = primary) reduced along ``axis``.

    Every array must pass :func:`strides_ok`. Returns a :class:`Plan`.
    """
    shape = arrays[0].shape
    nops = len(arrays)
    el = [[s // a.itemsize for s in a.strides] for a in arrays]
    n = shape[axis]
    sn = [e[axis] for e in el]
    off = [0] * nops
    dims = []  # [size, [stride per op]]
    for d, size in enumerate(shape):
        if d == axis or size == 1:
            continue
        strides = [e[d] for e in el]
        if strides[0] < 0:  # flip for every operand: the op is elementwise here
            for op in range(nops):
                off[op] += (size - 1) * strides[op]
            strides = [-s for s in strides]
        dims.append([size, strides])
    dims.sort(key=lambda t: -abs(t[1][0]))
    merged: list[list] = []
    for size, strides in dims:
        if merged:
            psize, pstr = merged[-1]
            if all(pstr[op] == strides[op] * size for op in range(nops)):
                merged[-1] = [psize * size, strides]
                continue
        merged.append([size, strides])
    ni, si = 1, [0] * nops
    if merged and n > 1 and (abs(merged[-1][1][0]) < abs(sn[0]) or n <= SHORT_ROW):
        ni, si = merged.pop()
    while len(merged) < 2:
        merged.insert(0, [1, [0] * nops])
    loops = [(size, strides) for size, strides in merged[:-2]]
    (n1, s1), (n2, s2) = merged[-2], merged[-1]
    bufs, geoms = [], []
    for op, a in enumerate(arrays):
        # lowest and highest element touched, relative to a's first element
        lo = hi = 0
        for size, s in zip(a.shape, el[op]):
            if size > 0:
                lo += min(0, (size - 1) * s)
                hi += max(0, (size - 1) * s)
        bufs.append(storage(a, lo, hi - lo + 1))
        geoms.append(
            np.array([off[op] - lo, s1[op], s2[op], sn[op], si[op]], np.int64)
        )
    return Plan(bufs, geoms, (n1, n2, n, ni), loops)
