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
  :func:`~logsoftmax.driver.perf.add3` over the problem's own buffers
  (:func:`copy2_serial` / :func:`add3_serial` for problems small enough that
  the library runs its serial kernels).

Added here for the CPU benchmark: :func:`time_calls`, the interleaved timer
for calls of a few microseconds (each sample loops a call until it lasts
``min_sample_s``), :func:`cpu_info` (what the tables are headed with) and
:func:`replace_block` (rewrite a marked block of a docs page).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable

import ml_dtypes
import numba
import numpy as np

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
    "copy2_serial",
    "add3_serial",
    "time_calls",
    "paired_rounds",
    "cpu_info",
    "replace_block",
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


def torch_view(torch, a: np.ndarray):
    """``a`` as a torch tensor on the same memory (bfloat16 by its bits);
    ``torch``: the module, imported by the caller (an optional extra)."""
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def strided_empty(shape, order, dtype):
    """An uninitialised array of logical ``shape`` laid out in memory ``order``
    (:func:`logsoftmax.formats.empty_in_order`, arguments in bench_cpu's order)."""
    return formats.empty_in_order(shape, dtype, order)


def line_aligned(n_elems: int, dtype=np.float32) -> np.ndarray:
    """An uninitialised 1-d array of ``n_elems`` that starts on a 64-byte
    line (streaming stores need it; numpy's large arrays are only 16-byte
    aligned)."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n_elems * itemsize + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off : off + n_elems * itemsize].view(dtype)


def bench_interleaved(fns, repeat: int, skip_repeat: dict | None = None):
    """Median seconds per call, ``repeat`` interleaved rounds after one warm-up
    (:func:`logsoftmax.driver.perf.median_seconds`; ``skip_repeat`` caps the
    samples of slow entries)."""
    return median_seconds(fns, repeat, max_times=skip_repeat)


@numba.njit(cache=True)
def copy2_serial(src, dst):
    """:func:`copy2` on one thread: the floor for problems the library runs
    serially (below ``SERIAL_MAX`` elements), where waking a thread pool
    would cost more than the copy."""
    for i in range(dst.size):
        dst[i] = src[i]


@numba.njit(cache=True)
def add3_serial(a, b, dst):
    """:func:`add3` on one thread (see :func:`copy2_serial`)."""
    for i in range(dst.size):
        dst[i] = a[i] + b[i]


def _calls_per_sample(fn: Callable[[], object], min_sample_s: float) -> int:
    """How many back-to-back calls of ``fn`` last at least ``min_sample_s``
    (doubling, then scaled from the last try; at most 2**20)."""
    k = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_sample_s or k >= 1 << 20:
            return k
        k = min(1 << 20, max(2 * k, math.ceil(k * 1.2 * min_sample_s / max(dt, 1e-9))))


def time_calls(
    fns: dict[str, Callable[[], object]],
    repeat: int,
    *,
    min_sample_s: float = 0.02,
    slow_s: float = 3.0,
    min_samples: int = 3,
) -> tuple[dict[str, float], dict[str, str]]:
    """Median seconds per call of each function, from interleaved samples.

    Each function is called once as a warm-up (compilation, first-touch page
    faults: not counted), then calibrated: a sample is ``k`` back-to-back
    calls lasting at least ``min_sample_s``, and counts as ``time / k``. So a
    2 us call is timed over ~10^4 calls per sample, where the timer's own
    resolution and one scheduler hiccup would otherwise dominate; a 100 ms
    call is one call per sample. ``repeat`` rounds then take one sample of
    each function, so machine noise hits them alike, each round in its own
    (seeded) order: a function timed right after a slow one can read slow
    (``benchmarks/column_tiles.py``: 300x65536 axis 0 at 256 columns took
    11.7 ms right after 128 columns, 8.8-9.3 ms otherwise), and a fixed
    order would give it the same neighbour every round. A function whose
    samples have already cost ``slow_s`` seconds stops after
    ``min_samples`` samples (the slow peers).

    Returns:
      ``(seconds, errors)``: name -> median seconds per call for the
      functions that ran, name -> ``"ExceptionType: message"`` for those that
      raised (they are dropped from the remaining rounds).
    """
    errors: dict[str, str] = {}
    calls: dict[str, int] = {}
    for name, fn in fns.items():
        try:
            fn()
            calls[name] = _calls_per_sample(fn, min_sample_s)
        except Exception as e:  # a variant the problem does not support
            errors[name] = f"{type(e).__name__}: {e}"
    samples: dict[str, list[float]] = {name: [] for name in calls}
    spent = dict.fromkeys(calls, 0.0)
    names = list(samples)
    order = np.random.default_rng(0)
    for _ in range(repeat):
        for i in order.permutation(len(names)):
            name = names[i]
            if name in errors or (
                len(samples[name]) >= min_samples and spent[name] >= slow_s
            ):
                continue
            fn, k = fns[name], calls[name]
            try:
                t0 = time.perf_counter()
                for _ in range(k):
                    fn()
                dt = time.perf_counter() - t0
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"
                continue
            samples[name].append(dt / k)
            spent[name] += dt
    seconds = {
        name: float(np.median(s)) for name, s in samples.items() if s and name not in errors
    }
    return seconds, errors


def paired_rounds(a: Callable[[], object], b: Callable[[], object], rounds: int) -> dict:
    """``a`` against ``b`` in ``rounds`` paired rounds: each round times a
    sample of each (back-to-back calls lasting >= 20 ms, as
    :func:`time_calls`), the order alternating from round to round, and
    keeps ``a``'s time over ``b``'s.

    Returns ``{"rounds", "median"`` (of the per-round ratios), ``"slower"``
    (rounds where ``a`` took longer), ``"p"}``: the one-sided sign test's
    chance of ``a`` losing that many rounds or more if the two were equally
    fast.
    """
    a(), b()
    k = max(_calls_per_sample(a, 0.02), _calls_per_sample(b, 0.02))
    ratios = []
    for i in range(rounds):
        t = {}
        for name, fn in ((("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a))):
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            t[name] = time.perf_counter() - t0
        ratios.append(t["a"] / t["b"])
    slower = sum(v > 1.0 for v in ratios)
    p = sum(math.comb(rounds, i) for i in range(slower, rounds + 1)) / 2**rounds
    return {"rounds": rounds, "median": float(np.median(ratios)), "slower": slower, "p": p}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def avx2_only_env() -> dict:
    """The environment that makes this machine stand in for an AVX2-only
    x86 CPU (Zen 2/3, Haswell to Alder Lake): numba compiles for LLVM's
    ``haswell`` with this CPU's features minus AVX-512, AMX and AVX10
    (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``; numba keys its cache on
    both, so these kernels compile apart from the native ones), and PyTorch
    runs its AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``). Vector ports and
    clocks stay this CPU's, so the ratios against PyTorch, not the times,
    are what carries over to a real AVX2 machine."""
    import llvmlite.binding as llvm

    feats = [
        "-" + f[1:] if f.startswith("+") and any(k in f for k in ("avx512", "amx", "avx10")) else f
        for f in llvm.get_host_cpu_features().flatten().split(",")
    ]
    return {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ",".join(feats),
            "ATEN_CPU_CAPABILITY": "avx2"}


def cpu_info() -> dict:
    """The machine a table was measured on.

    Keys: ``model`` (``/proc/cpuinfo``'s "model name"), ``llvm`` (LLVM's
    name for the host CPU, which picks numba's instructions and keys its
    cache), ``isa`` (the vector extensions LLVM sees, in words), ``cpus``
    (logical CPUs), ``thp`` (transparent huge pages: enabled / defrag), and
    ``key``: ``"<model> (LLVM <llvm>)"``, the name of the CPU's section.
    """
    text = _read("/proc/cpuinfo")
    model = next(
        (ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")),
        "unknown CPU",
    )
    try:
        import llvmlite.binding as llvm

        host = llvm.get_host_cpu_name()
        feats = numba.config.CPU_FEATURES or llvm.get_host_cpu_features().flatten()
        feats = {f[1:] for f in feats.split(",") if f[:1] == "+"}
    except Exception:  # no llvmlite: fall back to the kernel's flag names
        host = "?"
        flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                      if ln.startswith("flags")), [])
        feats = {f.replace("_", "") for f in flags}

    def has(*names):
        return all(n in feats for n in names)

    if has("avx512f"):
        ext = [e for e in ("bw", "dq", "vl", "vnni", "ifma", "vbmi") if has("avx512" + e)]
        yes_no = ", ".join(f"{e}: {'yes' if has('avx512' + e) else 'no'}" for e in ("bf16", "fp16"))
        isa = f"AVX-512 (F {' '.join(e.upper() for e in ext)}; {yes_no})"
    else:
        isa = "no AVX-512"
    isa += ", AVX2" if has("avx2") else ", no AVX2"
    isa += ", FMA" if has("fma") else ""
    isa += ", F16C" if has("f16c") else ", no F16C"
    isa += ", AMX" if has("amx-tile") else ", no AMX"

    def thp(name):
        words = _read(f"/sys/kernel/mm/transparent_hugepage/{name}").split()
        return next((w[1:-1] for w in words if w.startswith("[")), "?")

    # numba compiling for another CPU than the host (avx2_only_env)
    built = numba.config.CPU_NAME if numba.config.CPU_NAME not in (None, host) else None
    return {
        "model": model,
        "llvm": host,
        "isa": isa,
        "cpus": os.cpu_count(),
        "thp": f"enabled={thp('enabled')}, defrag={thp('defrag')}",
        "key": f"{model} (LLVM {host})" + (f", built for {built}" if built else ""),
        "built": built,
    }


def replace_block(path: Path, begin: str, end: str, block: str, *, anchor: str | None = None) -> None:
    """Replace the text from ``begin`` to ``end`` (markers included) in the
    file at ``path`` with ``block`` (which holds the markers). Absent: insert
    ``block`` after the line ``anchor`` if the file has it, else append."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text:
        i, j = text.index(begin), text.index(end) + len(end)
        text = text[:i] + block + text[j:]
    elif anchor and anchor in text:
        i = text.index(anchor) + len(anchor)
        text = text[:i] + "\n\n" + block + "\n\n" + text[i:].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
