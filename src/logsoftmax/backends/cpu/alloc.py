"""Result allocation for the allocating path (placeholder, refined below)."""

from __future__ import annotations

import numpy as np

__all__ = ["empty_like"]


def empty_like(x: np.ndarray, dtype) -> np.ndarray:
    """An uninitialised result of ``x``'s shape and memory order, ``dtype``."""
    return np.empty_like(x, dtype=dtype)
