"""PyTorch adapter (minimal placeholder from branch ``losses``: the lead
replaces this file with branch ``adapters``' package ``__init__`` at merge and
adds the two names below to it).

Only the fused loss lives here on this branch: :func:`linear_cross_entropy`
and :class:`LinearCrossEntropyLoss` (:mod:`.linear_cross_entropy`).
"""

from __future__ import annotations

from .linear_cross_entropy import LinearCrossEntropyLoss, linear_cross_entropy

__all__ = ["linear_cross_entropy", "LinearCrossEntropyLoss"]
