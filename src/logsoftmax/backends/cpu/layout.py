"""Map arrays of any strides onto the kernels' ``(outer1, outer2, n, inner)`` view.

The kernels never see numpy strides. Each operand (inputs and output) is
passed as a flat 1-D *storage buffer* that starts at the operand's lowest
address (so negative strides are plain negative element offsets), plus a
geometry ``[offset, s1, s2, sn, si]`` in elements: element
``(i1, i2, k, j)`` lives at ``offset + i1*s1 + i2*s2 + k*sn + j*si``.

How a strided array becomes that view (:func:`layout`):

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
   every remaining dim is a row index (the contiguous-row case).
5. The two innermost remaining row dims go to the kernel (``outer1``,
   ``outer2``); any further non-mergeable dims are looped over in Python
   (:attr:`Layout.loops`), which only happens for views that are sliced in
   three or more independent dimensions.

All of that depends on shapes, strides and dtypes only: the backend caches
the :class:`Layout` per call signature. Nothing here copies data.
:meth:`Layout.buffers` makes the flat buffers (bf16 as uint16, f16 as int16,
see :mod:`._vec`): a plain ``reshape`` of a writeable C-contiguous array,
else a view built through ``__array_interface__`` (:func:`storage`), which
also makes read-only inputs (``np.broadcast_to``) look writeable to numba so
they share the compiled code of ordinary arrays; kernels never write to
inputs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["Layout", "layout", "storage", "storage_dtype", "strides_ok"]

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


class Layout:
    """How the kernels see a set of same-shape operands (module docstring).

    Depends only on shapes, strides, dtypes and the axis, so the backend
    caches it; :meth:`buffers` then makes the flat storage views of a call's
    arrays.
    """

    __slots__ = ("dims", "g", "lo", "span", "loops", "contiguous", "unit_rows")

    def __init__(self, dims, g, lo, span, loops, contiguous):
        #: ``(n1, n2, n, ni)``: outer sizes, axis length, inner length (1 = rows)
        self.dims = dims
        #: int64 ``[n1, n2, n, ni, off, s1, s2, sn, si, off, ...]``: five
        #: per operand, in storage elements (the kernels' geometry array)
        self.g = g
        #: per operand: first storage element relative to the array's
        #: first element (<= 0 with negative strides), and the count
        self.lo = lo
        self.span = span
        #: extra outer dims looped in Python: ``(size, [stride per operand])``
        self.loops = loops
        #: per operand: C-contiguous (its flat view is a plain reshape)
        self.contiguous = contiguous
        #: every operand's rows are unit-stride (the row kernels' fast form)
        self.unit_rows = all(g[4 + 5 * op + 3] == 1 for op in range(len(lo)))

    @property
    def inner(self) -> bool:
        """True for the ``inner > 1`` (vectorise across inner) kernels."""
        return self.dims[3] > 1

    def buffers(self, arrays):
        """Flat storage views of ``arrays`` (one per operand, no copies)."""
        out = []
        for op, a in enumerate(arrays):
            if self.contiguous[op] and a.flags.writeable:
                flat = a.reshape(-1)
                st = _STORAGE[a.dtype]
                out.append(flat if st is a.dtype else flat.view(st))
            else:
                out.append(storage(a, self.lo[op], self.span[op]))
        return out

    def geometries(self):
        """The geometry array for every Python-level loop index (usually one)."""
        if not self.loops:
            yield self.g
            return
        idx = [0] * len(self.loops)
        nops = len(self.lo)
        while True:
            g = self.g.copy()
            for op in range(nops):
                g[4 + 5 * op] += sum(i * s[1][op] for i, s in zip(idx, self.loops))
            yield g
            for d in range(len(idx) - 1, -1, -1):
                idx[d] += 1
                if idx[d] < self.loops[d][0]:
                    break
                idx[d] = 0
            else:
                return


def layout(shape, strides, itemsizes, axis: int) -> Layout:
    """Map same-``shape`` operands with byte ``strides`` (one tuple per
    operand, the first is primary) reduced along ``axis``.

    Every stride must be a whole number of elements (:func:`strides_ok`).
    """
    nops = len(strides)
    el = [[s // isz for s in st] for st, isz in zip(strides, itemsizes)]
    n = shape[axis]
    sn = [e[axis] for e in el]
    off = [0] * nops
    dims = []  # [size, [stride per op]]
    for d, size in enumerate(shape):
        if d == axis or size == 1:
            continue
        st = [e[d] for e in el]
        if st[0] < 0:  # flip for every operand: the op is elementwise here
            for op in range(nops):
                off[op] += (size - 1) * st[op]
            st = [-s for s in st]
        dims.append([size, st])
    dims.sort(key=lambda t: -abs(t[1][0]))
    merged: list[list] = []
    for size, st in dims:
        if merged:
            psize, pstr = merged[-1]
            if all(pstr[op] == st[op] * size for op in range(nops)):
                merged[-1] = [psize * size, st]
                continue
        merged.append([size, st])
    ni, si = 1, [0] * nops
    if merged and n > 1 and abs(merged[-1][1][0]) < abs(sn[0]):
        ni, si = merged.pop()
    while len(merged) < 2:
        merged.insert(0, [1, [0] * nops])
    loops = [(size, st) for size, st in merged[:-2]]
    (n1, s1), (n2, s2) = merged[-2], merged[-1]
    g = [n1, n2, n, ni]
    lo, span, contiguous = [], [], []
    for op in range(nops):
        # lowest and highest element touched, relative to the first element
        a_lo = a_hi = 0
        for size, s in zip(shape, el[op]):
            if size > 0:
                a_lo += min(0, (size - 1) * s)
                a_hi += max(0, (size - 1) * s)
        lo.append(a_lo)
        span.append(a_hi - a_lo + 1)
        contiguous.append(_c_contiguous(shape, el[op]))
        g += [off[op] - a_lo, s1[op], s2[op], sn[op], si[op]]
    return Layout((n1, n2, n, ni), np.array(g, np.int64), lo, span, loops, contiguous)


def _c_contiguous(shape, el_strides) -> bool:
    acc = 1
    for size, s in zip(reversed(shape), reversed(el_strides)):
        if size != 1 and s != acc:
            return False
        acc *= size
    return True
