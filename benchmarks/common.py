"""What the benchmark scripts share: all of it the driver's (``logsoftmax bench``).

The benchmarks time, lay out and describe problems exactly as the
benchdnn-style driver does, so that a number in docs/performance.md and a
``logsoftmax bench`` line mean the same thing:

- problems: :class:`logsoftmax.driver.problem.Problem` (here with the short
  names the benchmark tables use) and the perf set
  (:func:`logsoftmax.driver.jobs.perf_set`);
- layouts: :mod:`logsoftmax.formats` (format tags, arrays in a memory order);
- timing: :func:`logsoftmax.driver.perf.median_seconds` (interleaved rounds,
  one warm-up call each excluded, medians) over
  :func:`logsoftmax.driver.perf.measure`;
- the memory-copy floor: :class:`logsoftmax.driver.perf.CopyBench` (a copy of
  N bytes) or its kernels :func:`~logsoftmax.driver.perf.copy2` and
  :func:`~logsoftmax.driver.perf.add3` over the problem's own buffers.
"""

from __future__ import annotations

from logsoftmax import formats
from logsoftmax.driver import problem as _problem
from logsoftmax.driver.jobs import perf_set as load_problems
from logsoftmax.driver.perf import CopyBench, add3, copy2, measure, median_seconds

__all__ = [
    "Problem",
    "problem_from_json",
    "load_problems",
    "strided_empty",
    "bench_interleaved",
    "median_seconds",
    "measure",
    "CopyBench",
    "copy2",
    "add3",
]


class Problem(_problem.Problem):
    """A LOGSOFTMAX problem of the perf set: the driver's :class:`Problem`,
    with the names the benchmark tables use."""

    @property
    def pid(self) -> str:
        """Short id: ``p08`` for ``perf08``."""
        return self.name or ""

    @property
    def order(self) -> tuple[int, ...]:
        """Logical dims in memory order, outermost first (``acdb``: 0, 2, 3, 1)."""
        return formats.tag_permutation(self.src_tag, len(self.shape))

    @property
    def src(self) -> str:
        """Data type of the inputs (src; backward: diff_dst and dst)."""
        return self.in_dt

    @property
    def dst(self) -> str:
        """Data type of the output (dst; backward: diff_src)."""
        return self.out_dt

    @property
    def direction(self) -> str:
        return "fwd" if self.is_fwd else "bwd"

    def label(self) -> str:
        dims = "x".join(map(str, self.shape))
        layout = "" if self.order == tuple(range(len(self.shape))) else " (NHWC)"
        dt = self.src if self.src == self.dst else f"{self.src}->{self.dst}"
        return f"{self.pid} {dims}{layout} ax{self.axis} {dt} {self.direction}"


def problem_from_json(p: dict, src: str, dst: str, direction: str) -> Problem:
    """The LOGSOFTMAX problem of perf-set entry ``p`` with input data type
    ``src``, output data type ``dst`` and ``direction`` (``fwd``/``bwd``)."""
    fwd = direction == "fwd"
    return Problem(
        dims=tuple(int(n) for n in p["shape"]),
        dir="FWD_D" if fwd else "BWD_D",
        alg="LOGSOFTMAX",
        # benchdnn's convention: backward sdt is diff_src's, ddt dst's/diff_dst's
        sdt=src if fwd else dst,
        ddt=dst if fwd else src,
        stag=p["stag"],
        axis=int(p["axis"]),
        name=p["perf_id"].replace("perf", "p"),
    )


def strided_empty(shape, order, dtype):
    """An uninitialised array of logical ``shape`` laid out in memory ``order``
    (:func:`logsoftmax.formats.empty_in_order`, arguments in bench_cpu's order)."""
    return formats.empty_in_order(shape, dtype, order)


def bench_interleaved(fns, repeat: int, skip_repeat: dict | None = None):
    """Median seconds per call, ``repeat`` interleaved rounds after one warm-up
    (:func:`logsoftmax.driver.perf.median_seconds`; ``skip_repeat`` caps the
    samples of slow entries)."""
    return median_seconds(fns, repeat, max_times=skip_repeat)
