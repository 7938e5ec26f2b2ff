"""Timing helpers shared by the benchmarks: interleaved medians, a memory-copy
baseline, and problem loading from the packaged perf set."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import numpy as np
from numba import njit, prange

__all__ = ["Problem", "load_problems", "bench_interleaved", "copy2", "add3"]


@dataclass(frozen=True)
class Problem:
    """One benchmark problem: logical shape, axis, memory order, dtypes."""

    pid: str
    shape: tuple[int, ...]
    axis: int
    #: logical dims in memory order, outermost first (``stag``: "acdb" -> 0,2,3,1)
    order: tuple[int, ...]
    src: str  # 'f32' | 'bf16' | 'f16'
    dst: str
    direction: str  # 'fwd' | 'bwd'
    note: str = ""

    @property
    def nelems(self) -> int:
        return int(np.prod(self.shape))

    def label(self) -> str:
        dims = "x".join(map(str, self.shape))
        layout = "" if self.order == tuple(range(len(self.shape))) else " (NHWC)"
        dt = self.src if self.src == self.dst else f"{self.src}->{self.dst}"
        return f"{self.pid} {dims}{layout} ax{self.axis} {dt} {self.direction}"


def _order(stag: str) -> tuple[int, ...]:
    return tuple(ord(c) - ord("a") for c in stag)


def load_problems() -> list[dict]:
    """The 12 problems of ``logsoftmax/data/perf_set.json`` as dicts."""
    text = resources.files("logsoftmax").joinpath("data/perf_set.json").read_text()
    return json.loads(text)


def problem_from_json(p: dict, src: str, dst: str, direction: str) -> Problem:
    return Problem(
        pid=p["perf_id"].replace("perf", "p"),
        shape=tuple(p["shape"]),
        axis=int(p["axis"]),
        order=_order(p["stag"]),
        src=src,
        dst=dst,
        direction=direction,
    )


def strided_empty(shape, order, dtype) -> np.ndarray:
    """An uninitialised array of logical ``shape`` laid out in memory ``order``."""
    mem_shape = [shape[d] for d in order]
    base = np.empty(mem_shape, dtype)
    inverse = np.argsort(order)
    return base.transpose(inverse)


def bench_interleaved(
    fns: dict[str, Callable[[], object]], repeat: int, skip_repeat: dict | None = None
) -> dict[str, float]:
    """Median seconds per call of each function, timed round-robin.

    One warm-up call each (compilation, first-touch of reused buffers) is
    excluded. ``skip_repeat`` caps the repeats of slow entries (NumPy).
    """
    skip_repeat = skip_repeat or {}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()
    for r in range(repeat):
        for name, fn in fns.items():
            if r >= skip_repeat.get(name, repeat):
                continue
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


@njit(parallel=True, cache=True)
def copy2(a, b):
    """``b[:] = a``: 2 streams (read + write), the forward's floor."""
    for i in prange(a.shape[0]):
        b[i] = a[i]


@njit(parallel=True, cache=True)
def add3(a, b, c):
    """``c[:] = a + b``: 3 streams, the backward's floor."""
    for i in prange(a.shape[0]):
        c[i] = a[i] + b[i]
