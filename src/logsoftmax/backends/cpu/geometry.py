"""Where the rows of a row kernel's operands start: the geometry array ``g``.

:mod:`.layout` maps a call's shapes and strides to ``g = [n1, n2, n, ni,
off_0, s1_0, s2_0, sn_0, si_0, off_1, ...]`` (one block of five per
operand, in elements of the flat storage buffers): row ``r`` of operand
``op`` starts at ``off + (r // n2) * s1 + (r % n2) * s2`` and steps by
``sn``. Row ``r`` is also ``(i1, i2) = (r // n2, r % n2)``; a loop over
rows steps ``(i1, i2)`` instead of dividing per row. For :mod:`.rows`,
:mod:`.tiny` and :mod:`.split`.
"""

from __future__ import annotations

from numba import njit

__all__ = ["first_row", "row_at", "next_row", "dense_rows", "row_offset", "row_step"]


@njit(forceinline=True, error_model="numpy")
def first_row(g, r0):
    """``(i1, i2)`` of row ``r0``: the one division of a batch loop."""
    i1 = r0 // g[1]
    return i1, r0 - i1 * g[1]


@njit(forceinline=True, error_model="numpy")
def row_at(g, op, i1, i2):
    """Where row ``(i1, i2)`` of operand ``op`` starts."""
    b = 4 + 5 * op
    return g[b] + i1 * g[b + 1] + i2 * g[b + 2]


@njit(forceinline=True, error_model="numpy")
def next_row(g, i1, i2):
    """The row after ``(i1, i2)`` (no division per row: a 64-bit ``//``
    per row cost ~20 cycles at n = 16)."""
    i2 += 1
    if i2 == g[1]:
        return i1 + 1, 0
    return i1, i2


@njit(forceinline=True, error_model="numpy")
def dense_rows(g, op, n):
    """Whether operand ``op``'s rows lie end to end (row ``r + 1`` starts
    where row ``r`` ends), so that a batch of them is one span."""
    b = 4 + 5 * op
    return g[b + 3] == 1 and (g[1] == 1 or g[b + 2] == n) and (g[0] == 1 or g[b + 1] == g[1] * n)


@njit(forceinline=True, error_model="numpy")
def row_offset(g, op, r):
    """Where row ``r`` of operand ``op`` starts (one division: for a loop
    that visits rows out of order)."""
    i1, i2 = first_row(g, r)
    return row_at(g, op, i1, i2)


@njit(forceinline=True, error_model="numpy")
def row_step(g, op):
    """The step between the elements of a row of operand ``op``."""
    return g[4 + 5 * op + 3]
