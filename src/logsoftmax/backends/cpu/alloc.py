"""Result allocation for the allocating path.

PyTorch's allocating ``log_softmax`` on 4096x32000 float32 spends ~190 ms of
its ~240 ms in first-touch page faults of the fresh 0.5 GB result (4 KiB
pages, taken by whichever thread touches them). Here the result comes from
``np.empty_like``: numpy's allocator ``madvise(MADV_HUGEPAGE)``s allocations
of 4 MiB and more, which on this machine (THP in ``madvise`` mode) gives
2 MiB pages, 512x fewer faults; and nothing touches the memory before the
kernel's pass 2, which runs in parallel, so the remaining faults (and the
kernel zeroing the pages) are shared by all threads.

The result keeps the input's memory order (numpy's ``order='K'``): a
transposed or channels-last input gets a result with the same layout, so
input and output walk memory the same way (one kernel specialisation, no
strided stores).
"""

from __future__ import annotations

import numpy as np

__all__ = ["empty_like"]


def empty_like(x: np.ndarray, dtype) -> np.ndarray:
    """An uninitialised result of ``x``'s shape and memory order, of ``dtype``.

    Args:
      x: the input (any strides).
      dtype: numpy dtype of the result.

    Returns:
      A new writeable array, ``x.shape``, ``dtype``, compact, in ``x``'s
      dimension order.
    """
    return np.empty_like(x, dtype=np.dtype(dtype), order="K")
