"""Performance: interleaved timing, a same-run memory copy, and the peers.

Bandwidth is counted from the bytes a problem must move (forward: read src,
write dst; backward: read dst and diff_dst, write diff_src), and compared
with a memory copy of the same bytes timed in the same rounds: a 2-stream
copy (read, write) for forward, a 3-stream one (read, read, write) for
backward. "% of copy" is ``copy_time / time``: 100% means the op runs at the
speed of the copy floor.

Timing rounds call every function once, in turn, so machine noise hits them
alike; each function runs until it has ``min_times`` samples and
``max_ms`` of total time, or exactly ``fix_times`` samples. The first call of
each is a warm-up (kernel compilation, page faults) and is not counted.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from typing import Callable

import numba
import numpy as np

__all__ = [
    "Timing",
    "measure",
    "median_seconds",
    "CopyBench",
    "copy2",
    "add3",
    "peer_callable",
    "PeerUnavailable",
]


@dataclasses.dataclass
class Timing:
    """Samples of one function, in milliseconds."""

    samples: list[float]

    @property
    def min_ms(self) -> float:
        return min(self.samples) if self.samples else float("nan")

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples)) if self.samples else float("nan")

    @property
    def max_ms(self) -> float:
        return max(self.samples) if self.samples else float("nan")


def measure(
    fns: dict[str, Callable[[], object]],
    *,
    max_ms: float = 1000.0,
    min_times: int = 5,
    fix_times: int = 0,
    max_times: dict[str, int] | None = None,
) -> dict[str, Timing]:
    """Time ``fns`` in interleaved rounds (see the module docstring).

    Args:
      fns: name -> zero-argument callable.
      max_ms: per-function time budget (ms) once ``min_times`` is reached.
      min_times: least number of samples per function.
      fix_times: if > 0, exactly this many samples per function.
      max_times: optional cap on samples per function (slow peers).

    Returns:
      name -> :class:`Timing`.
    """
    for fn in fns.values():
        fn()  # warm-up: compilation, first-touch page faults
    samples: dict[str, list[float]] = {name: [] for name in fns}
    total: dict[str, float] = {name: 0.0 for name in fns}
    caps = max_times or {}

    def done(name: str) -> bool:
        n = len(samples[name])
        if name in caps and n >= caps[name]:
            return True
        if fix_times:
            return n >= fix_times
        return n >= min_times and total[name] >= max_ms

    while not all(done(name) for name in fns):
        for name, fn in fns.items():
            if done(name):
                continue
            t0 = time.perf_counter()
            fn()
            dt = (time.perf_counter() - t0) * 1e3
            samples[name].append(dt)
            total[name] += dt
    return {name: Timing(s) for name, s in samples.items()}


def median_seconds(
    fns: dict[str, Callable[[], object]],
    repeat: int,
    max_times: dict[str, int] | None = None,
) -> dict[str, float]:
    """Median seconds per call of each function: :func:`measure` with exactly
    ``repeat`` interleaved samples each (``max_times`` caps slow ones), after
    one warm-up call each."""
    timings = measure(fns, fix_times=repeat, max_times=max_times)
    return {name: t.median_ms * 1e-3 for name, t in timings.items()}


# --------------------------------------------------------------------------
# memory copy floor
# --------------------------------------------------------------------------
@numba.njit(parallel=True, cache=True)
def copy2(src, dst):
    """``dst[:] = src`` over 1-D arrays: 2 streams (read, write), the
    forward's floor."""
    for i in numba.prange(dst.size):
        dst[i] = src[i]


@numba.njit(parallel=True, cache=True)
def add3(a, b, dst):
    """``dst[:] = a + b`` over 1-D arrays: 3 streams (read, read, write), the
    backward's floor."""
    for i in numba.prange(dst.size):
        dst[i] = a[i] + b[i]


class CopyBench:
    """A memory copy of ``nbytes`` in total over ``streams`` (2 or 3) equal
    streams: one written, the others read. Call the instance to run it."""

    def __init__(self, nbytes: int, streams: int):
        if streams not in (2, 3):
            raise ValueError(f"CopyBench: streams={streams}, expected 2 or 3")
        words = max(1, -(-nbytes // (8 * streams)))
        # filled, so reads touch real pages rather than the shared zero page
        self.bufs = [np.full(words, i + 1, np.uint64) for i in range(streams)]
        self.streams = streams

    def __call__(self) -> None:
        if self.streams == 2:
            copy2(self.bufs[0], self.bufs[1])
        else:
            add3(self.bufs[0], self.bufs[1], self.bufs[2])


# --------------------------------------------------------------------------
# peers
# --------------------------------------------------------------------------
class PeerUnavailable(Exception):
    """The peer library cannot run this problem; the message says why."""


def _torch_tensor(torch, a: np.ndarray):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def peer_callable(lib: str, prb, inputs: dict[str, np.ndarray], out: np.ndarray):
    """A zero-argument callable computing ``prb`` with ``lib`` into ``out``.

    Args:
      lib: ``"torch"`` (``torch._log_softmax`` / ``_log_softmax_backward_data``
        and the softmax siblings, ``out=`` variants, threads set to numba's)
        or ``"numpy"`` (the textbook formula in float32 for bf16/f16 inputs,
        float64 for f64).
      prb: the :class:`~logsoftmax.driver.problem.Problem`.
      inputs: ``{"src": x}`` or ``{"diff_dst": dd, "dst": y}`` in the
        problem's layout and data types.
      out: the output array (any layout); results are written into it.

    Raises:
      PeerUnavailable: the library is not installed or lacks the case (for
        example torch with sdt != ddt, or bf16 for numpy's ufuncs).
    """
    axis = prb.axis
    log = prb.alg == "LOGSOFTMAX"
    if lib == "torch":
        if importlib.util.find_spec("torch") is None:
            raise PeerUnavailable("torch is not installed")
        import torch

        if prb.sdt != prb.ddt:
            raise PeerUnavailable("torch has no mixed-data-type softmax")
        torch.set_num_threads(numba.get_num_threads())
        o = _torch_tensor(torch, out)
        if prb.is_fwd:
            x = _torch_tensor(torch, inputs["src"])
            op = torch._log_softmax if log else torch._softmax
            return lambda: op(x, axis, False, out=o)
        dd = _torch_tensor(torch, inputs["diff_dst"])
        y = _torch_tensor(torch, inputs["dst"])
        op = torch._log_softmax_backward_data if log else torch._softmax_backward_data
        return lambda: op(dd, y, axis, dd.dtype, out=o)
    if lib == "numpy":
        compute = np.float64 if prb.in_dt == "f64" else np.float32

        def fwd():
            x = inputs["src"].astype(compute, copy=False)
            m = np.max(x, axis=axis, keepdims=True)
            d = x - m
            if log:
                d -= np.log(np.sum(np.exp(d), axis=axis, keepdims=True))
                out[...] = d
            else:
                e = np.exp(d)
                out[...] = e / np.sum(e, axis=axis, keepdims=True)

        def bwd():
            dd = inputs["diff_dst"].astype(compute, copy=False)
            y = inputs["dst"].astype(compute, copy=False)
            if log:
                out[...] = dd - np.exp(y) * np.sum(dd, axis=axis, keepdims=True)
            else:
                out[...] = y * (dd - np.sum(dd * y, axis=axis, keepdims=True))

        def run():
            with np.errstate(all="ignore"):
                (fwd if prb.is_fwd else bwd)()

        return run
    raise PeerUnavailable(f"unknown library {lib!r}; expected torch or numpy")
