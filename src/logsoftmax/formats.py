"""Memory layouts: oneDNN's plain format tags, dense strides, arrays in a tag's order.

A plain format tag names a tensor's logical dims by letter (``a`` is dim 0)
from outermost to innermost in memory: ``ab``, ``abcd`` are row-major;
``acdb`` for logical [N, C, H, W] is channels-last (memory order N, H, W, C);
``acb`` makes dim 1 unit-stride (for [8, 384, 1024]: strides [393216, 1,
384]). benchdnn adds the rank-generic ``abx`` (plain) and ``axb`` (channels
last). Blocked tags such as ``aBcd16b`` have no strided numpy view.

This is the one home of tag parsing and tag-to-strides: the benchdnn-style
driver (``--stag``), the graph API (``strides_from_tag``, ``graph run
--in-shapes 0:8x384x1024*acb``) and the benchmarks all import it. Strides are
in elements.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

__all__ = [
    "tag_permutation",
    "dense_strides",
    "strides_from_tag",
    "memory_order",
    "empty_in_order",
    "make_array",
]

_LETTERS = "abcdefghijkl"
_PLAIN_TAG = re.compile(r"^[a-l]+$")
_BLOCKED_TAG = re.compile(r"^[a-lA-L]+(\d+[a-l])+$")


def tag_permutation(tag: str, ndims: int) -> tuple[int, ...]:
    """Memory order of the logical dims for ``tag``, outermost first.

    ``"acdb"`` gives ``(0, 2, 3, 1)``; ``"abx"`` is ``range(ndims)``;
    ``"axb"`` moves dim 1 innermost.

    Raises:
      NotImplementedError: a blocked tag (``aBcd16b``), which has no strided
        numpy view.
      ValueError: a tag that does not name each of the ``ndims`` dims once.
    """
    if tag == "abx":
        return tuple(range(ndims))
    if tag == "axb":
        return (0,) + tuple(range(2, ndims)) + ((1,) if ndims > 1 else ())
    if _BLOCKED_TAG.match(tag) or any(c.isupper() for c in tag):
        raise NotImplementedError(
            f"blocked layout tag {tag!r} has no strided view; only plain tags "
            "(abx, axb, or permutations such as acdb) are supported"
        )
    perm = tuple(ord(c) - ord("a") for c in tag)
    if not _PLAIN_TAG.match(tag) or sorted(perm) != list(range(ndims)):
        raise ValueError(
            f"format tag {tag!r} does not fit a {ndims}-d problem; expected a "
            f"permutation of {_LETTERS[:ndims]!r}, abx or axb"
        )
    return perm


def dense_strides(shape: Sequence[int], order: Sequence[int] | None = None) -> tuple:
    """Compact strides (in elements) for ``shape`` laid out in ``order``.

    Args:
      shape: known, non-negative dims.
      order: dims from outermost to innermost in memory (a permutation of
        ``range(len(shape))``); default row-major ``0, 1, ..., n-1``.

    Returns:
      A tuple of ``len(shape)`` strides; the innermost dim has stride 1.
      A zero dim counts as 1, so the strides stay distinct.
    """
    n = len(shape)
    order = range(n) if order is None else order
    strides = [0] * n
    acc = 1
    for d in reversed(list(order)):
        strides[d] = acc
        acc *= max(int(shape[d]), 1)
    return tuple(strides)


def strides_from_tag(shape: Sequence[int], tag: str) -> tuple:
    """Dense strides (in elements) of ``shape`` in format tag ``tag``'s order.

    Raises:
      NotImplementedError, ValueError: as :func:`tag_permutation`.
    """
    return dense_strides(shape, tag_permutation(tag, len(shape)))


def memory_order(strides: Sequence[int]) -> list[int]:
    """Dims from outermost to innermost in memory, as ``strides`` lay them out
    (ties keep logical order)."""
    return sorted(range(len(strides)), key=lambda d: (-strides[d], d))


def empty_in_order(shape: Sequence[int], dtype, order: Sequence[int]) -> np.ndarray:
    """An uninitialised, dense array of logical ``shape`` whose dims lie in
    memory in ``order`` (outermost first): a transposed view of a C-contiguous
    block, so every element is one of the block's."""
    mem = np.empty([shape[d] for d in order], dtype=dtype)
    if list(order) == list(range(len(order))):
        return mem  # plain C order: the array itself, as np.empty gives it
    return mem.transpose(np.argsort(order))


def make_array(shape: Sequence[int], dtype, tag: str) -> np.ndarray:
    """An uninitialised array of logical ``shape`` laid out as ``tag`` says.

    Raises:
      NotImplementedError, ValueError: as :func:`tag_permutation`.
    """
    return empty_in_order(shape, dtype, tag_permutation(tag, len(shape)))
