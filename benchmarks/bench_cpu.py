"""Log-softmax on the CPU: against PyTorch, SciPy and a copy of the same bytes.

**What the operation must move.** A textbook log-softmax of ``N`` elements
in float32 makes five passes, each over the whole array::

    m = x.max(axis)            # read x                       4N bytes
    d = x - m                  # read x, write d              8N
    e = exp(d)                 # read d, write e              8N
    s = e.sum(axis)            # read e                       4N
    y = d - log(s)             # read d, write y              8N   -> 32N

(``scipy.special.log_softmax`` is this sequence.) The operation itself
only has to read ``x`` once and write ``y`` once. A fused kernel gets there
by reading a row once for its max and sum of exponentials together (the
online softmax, chunk by chunk, so the second look at a chunk hits L1) and
writing ``y`` in a second pass over the row, which is still in cache when
rows are short and mostly in L2 when they are long. The floor is therefore a
memory copy of the bytes the operation must move::

    forward   bytes = N * (size(src) + size(dst))               # 2 streams
    backward  bytes = N * (2 * size(dst) + size(diff_src))      # diff_dst, dst
                                                                #   in; diff_src out

timed in the same process, in the same rounds, over the problem's own
buffers: ``b[:] = a`` for the forward and ``c[:] = a + b`` for the backward
(numba ``prange`` on the same threads; one thread for problems the library
runs serially, under ``SERIAL_MAX`` elements).

**The columns.** Per problem: ours allocating (``log_softmax(x, axis)``) and
ours with ``out=``; PyTorch allocating (``torch.log_softmax`` /
``torch._log_softmax_backward_data``) and with ``out=`` (the ``_log_softmax``
/ ``_log_softmax_backward_data`` ``out=`` overloads; bf16 and f16 native);
SciPy (``scipy.special.log_softmax``, forward f32/f64 problems only); the
copy; then our effective bandwidth on the ``out=`` path (bytes / time), the
percentage of the copy's speed (copy time / our time) and the speed-ups
(their time / ours) against PyTorch ``out=``, PyTorch allocating and SciPy.
perf07 (f32 in, bf16 out) has no PyTorch op: its PyTorch columns time the f32
op followed by a cast (``out=``: into preallocated f32 scratch, then
``copy_`` into the bf16 output).

**The problems.** The 12 of the performance set (``perf_set.json``) in their
own data types and direction, and issue 10's rows: 8 and 1000 elements and
256x128 (the fixed cost of a call), 32768x128, 4096x1000 backward,
16x16x128x128 bf16, 4096x32000 f32/bf16 forward and backward, 1024x128256
f16 backward, 64x64x56x56 axis 1, 1000x65536 axis 0. ``--all`` adds every
shape in f32, bf16 and f16, forward and backward. Each problem is of one
kind, judged against its own target (``docs/performance.md``):
*fixed* (a few microseconds: the cost of the call), *short* rows (the axis
contiguous, 2-1024 elements), *vocab* rows (contiguous, longer) and
*strided* axes.

**Timing.** Medians of ``--repeat`` interleaved rounds: every variant of a
problem takes one sample in turn, so machine noise hits them alike. Each
variant is called once first (compilation, first-touch page faults: not
counted); a sample is as many back-to-back calls as last >= 20 ms (one call
of a big problem, ~10^4 of an 8-element one), divided by their number.
numba and PyTorch run on ``--threads`` threads (SciPy on NumPy's one).

**The first call of a process** (``--first-call``; in the full run by
default). A script that runs once pays its first allocating call, whose
fresh pages can stall in the kernel's huge-page compaction. Fresh
interpreters each load the kernels with an ``out=`` call on a small array,
then time their first allocating call on 4096x32000 f32 and three more: ours,
PyTorch's, and a bare ``np.empty_like(x).fill(0)``; medians over
``--procs`` processes of each, run in turn.

The run prints one markdown table headed with the CPU, and (unless
``--quick`` or ``--no-write``) rewrites this CPU's section of
``docs/performance.md`` (other CPUs' sections are kept), the targets summary
at the top of that page and ``docs/img/cpu_bandwidth_<cpu>.png``.

Usage::

    python benchmarks/bench_cpu.py                 # everything, writes docs (make bench)
    python benchmarks/bench_cpu.py --quick         # ~1 minute subset, prints only
    python benchmarks/bench_cpu.py --only 's*,p08' --no-first-call
    python benchmarks/bench_cpu.py --all --repeat 9 --threads 2
    python benchmarks/bench_cpu.py --avx2          # as an AVX2-only CPU: its own section

``--avx2`` re-runs the script with numba building the kernels for LLVM
``haswell`` without AVX-512 and PyTorch on its AVX2 kernels
(:func:`common.avx2_only_env`): this machine standing in for an AVX2-only
CPU (issue 10 asks for speed there too), in a section of its own.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import importlib
import json
import math
import os
import platform
import re
import shlex
import subprocess
import textwrap
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

if "--avx2" in sys.argv[1:] and "NUMBA_CPU_NAME" not in os.environ:
    # numba and PyTorch read these when they are imported: run afresh
    from common import avx2_only_env

    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
              {**os.environ, **avx2_only_env()})

import numpy as np  # noqa: E402

from common import (  # noqa: E402
    Problem,
    add3,
    add3_serial,
    copy2,
    copy2_serial,
    cpu_info,
    load_problems,
    problem_from_json,
    paired_rounds,
    replace_block,
    strided_empty,
    time_calls,
)

import logsoftmax  # noqa: E402
from logsoftmax import dtypes  # noqa: E402
from logsoftmax.backends.cpu import SERIAL_MAX  # noqa: E402
from logsoftmax.driver.perf import CopyBench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"

# ----------------------------------------------------------------------------
# problems
# ----------------------------------------------------------------------------
FIXED, SHORT, VOCAB, STRIDED = "fixed", "short", "vocab", "strided"
KINDS = (FIXED, SHORT, VOCAB, STRIDED)

#: issue 10's rows beyond the perf set: id, shape, axis, data type, direction
EXTRA = [
    ("s8", (1, 8), 1, "f32", "fwd"),
    ("s1000", (1, 1000), 1, "f32", "fwd"),
    ("s256x128", (256, 128), 1, "f32", "fwd"),
    ("r2", (4194304, 2), 1, "f32", "fwd"),
    ("r2", (4194304, 2), 1, "f32", "bwd"),
    ("r16", (524288, 16), 1, "f32", "fwd"),
    ("r16", (524288, 16), 1, "f32", "bwd"),
    ("r32", (262144, 32), 1, "f32", "fwd"),
    ("r32", (262144, 32), 1, "f32", "bwd"),
    ("r128", (32768, 128), 1, "f32", "fwd"),
    ("r1000", (4096, 1000), 1, "f32", "bwd"),
    ("attn", (16, 16, 128, 128), 3, "bf16", "fwd"),
    ("v32k", (4096, 32000), 1, "f32", "fwd"),
    ("v32k", (4096, 32000), 1, "f32", "bwd"),
    ("v32k", (4096, 32000), 1, "bf16", "fwd"),
    ("v32k", (4096, 32000), 1, "bf16", "bwd"),
    ("v128k", (1024, 128256), 1, "f16", "bwd"),
    ("nchw56", (64, 64, 56, 56), 1, "f32", "fwd"),
    ("ax0", (1000, 65536), 0, "f32", "fwd"),
    ("ax0", (1000, 65536), 0, "f32", "bwd"),
]
#: ids whose cost is the call itself (microseconds): the fixed-cost target
FIXED_IDS = ("s8", "s1000", "s256x128")
#: the --quick subset: every kind, about a minute
QUICK = ("s8", "s1000", "s256x128", "r128", "p05", "p08", "p09", "p11", "nchw56")
#: shapes --all sweeps over f32/bf16/f16 x fwd/bwd besides the perf set
SWEEP_EXTRA = ("v32k", "ax0")
#: the longest row that counts as a "short" row (issue 10: 2 to 1024)
SHORT_MAX = 1024


def kind_of(p: Problem) -> str:
    """The target a problem is judged against: fixed cost, short or
    vocabulary rows (the axis innermost in memory), or a strided axis."""
    if p.pid in FIXED_IDS:
        return FIXED
    after = p.order[p.order.index(p.axis) + 1 :]
    if any(p.shape[d] > 1 for d in after):
        return STRIDED
    return SHORT if p.axis_size <= SHORT_MAX else VOCAB


def _entry(pid, shape, axis, dt, direction) -> dict:
    return {"perf_id": pid, "shape": list(shape), "axis": axis, "stag": "abx",
            "sdt": dt, "ddt": dt, "dir": direction}


def problems(quick: bool, sweep: bool, only: list[str] | None) -> list[Problem]:
    """The problems of this run, grouped by kind (fixed, short, vocab,
    strided), each group in the order of the perf set then EXTRA."""
    raw = load_problems()
    extra = [_entry(*e) for e in EXTRA]
    todo = [(p, p["sdt"], p["ddt"], p["dir"].lower()) for p in raw + extra]
    if sweep:
        shapes = raw + [e for e in extra if e["perf_id"] in SWEEP_EXTRA]
        todo += [(p, dt, dt, d) for p in shapes for dt in ("f32", "bf16", "f16")
                 for d in ("fwd", "bwd")]
    seen, out = set(), []
    for p, src, dst, direction in todo:
        prb = problem_from_json(p, src, dst, direction)
        key = (prb.shape, prb.axis, prb.order, prb.src, prb.dst, prb.direction)
        if key in seen:
            continue
        if quick and prb.pid not in QUICK:
            continue
        if only and not any(fnmatch.fnmatchcase(prb.pid, pat) for pat in only):
            continue
        seen.add(key)
        out.append(prb)
    return sorted(out, key=lambda prb: KINDS.index(kind_of(prb)))


# ----------------------------------------------------------------------------
# one problem: its arrays and the variants timed
# ----------------------------------------------------------------------------
def filled(p: Problem, dt: str, rng, scale: float) -> np.ndarray:
    """An array of ``p``'s shape and layout, normal(0, scale) values, filled in
    memory order a block at a time (no full-size float32 temporary)."""
    a = strided_empty(p.shape, p.order, dtypes.from_name(dt))
    flat = a.transpose(p.order).reshape(-1)
    step = 1 << 22
    for i in range(0, flat.size, step):
        v = rng.standard_normal(min(step, flat.size - i), dtype=np.float32)
        flat[i : i + step] = (v * np.float32(scale)).astype(flat.dtype)
    return a


def _storage(a: np.ndarray, order) -> np.ndarray:
    """``a``'s elements in memory order as a flat array of unsigned words of
    its item size (what the copy floor moves)."""
    flat = a.transpose(order).reshape(-1)
    return flat.view(np.dtype(f"u{flat.itemsize}"))


def _torch_view(torch, a: np.ndarray, order):
    """A torch tensor sharing ``a``'s memory and strides (bf16 via uint16)."""
    base = a.transpose(order)  # memory order, contiguous
    if base.dtype == dtypes.bfloat16:
        t = torch.from_numpy(base.view(np.uint16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(base)
    return t.permute(*[int(i) for i in np.argsort(order)])


def variants(p: Problem, torch, scipy_special, rng) -> dict:
    """The calls timed for ``p``: ``ours``, ``ours_out``, ``torch``,
    ``torch_out``, ``scipy``, ``copy`` (those that apply)."""
    axis, lsm = p.axis, logsoftmax.log_softmax
    serial = p.nelems < SERIAL_MAX
    fns = {}
    if p.direction == "fwd":
        x = filled(p, p.src, rng, 3.0)
        out = strided_empty(p.shape, p.order, dtypes.from_name(p.dst))
        if p.src == p.dst:
            fns["ours"] = lambda: lsm(x, axis)
            fns["ours_out"] = lambda: lsm(x, axis, out=out)
        else:
            ddt = dtypes.from_name(p.dst)
            fns["ours"] = lambda: lsm(x, axis, dtype=ddt)
            fns["ours_out"] = lambda: lsm(x, axis, out=out, dtype=ddt)
        if torch is not None:
            tx, to = _torch_view(torch, x, p.order), _torch_view(torch, out, p.order)
            if p.src == p.dst:
                fns["torch"] = lambda: torch.log_softmax(tx, axis)
                fns["torch_out"] = lambda: torch._log_softmax(tx, axis, False, out=to)
            else:  # no mixed-type op in torch: the f32 op, then a cast
                scratch = torch.empty_like(tx)
                fns["torch"] = lambda: torch.log_softmax(tx, axis).to(to.dtype)
                fns["torch_out"] = lambda: to.copy_(
                    torch._log_softmax(tx, axis, False, out=scratch)
                )
        if scipy_special is not None and p.src == p.dst and p.src in ("f32", "f64"):
            fns["scipy"] = lambda: scipy_special.log_softmax(x, axis=axis)
        if p.src == p.dst:
            a, b = _storage(x, p.order), _storage(out, p.order)
            copy = copy2_serial if serial else copy2
            fns["copy"] = lambda: copy(a, b)
        else:  # a 2-stream copy of as many bytes as the op moves
            fns["copy"] = CopyBench(p.bytes_moved, 2)
    else:
        x = filled(p, p.src, rng, 3.0)
        y = strided_empty(p.shape, p.order, x.dtype)
        lsm(x, axis, out=y)
        del x
        dy = filled(p, p.src, rng, 1.0)
        out = strided_empty(p.shape, p.order, dtypes.from_name(p.dst))
        bwd = logsoftmax.log_softmax_backward
        fns["ours"] = lambda: bwd(dy, y, axis)
        fns["ours_out"] = lambda: bwd(dy, y, axis, out=out)
        if torch is not None:
            tdy, ty = _torch_view(torch, dy, p.order), _torch_view(torch, y, p.order)
            to = _torch_view(torch, out, p.order)
            tbw = torch._log_softmax_backward_data
            fns["torch"] = lambda: tbw(tdy, ty, axis, ty.dtype)
            fns["torch_out"] = lambda: tbw(tdy, ty, axis, ty.dtype, out=to)
        fa, fb, fc = (_storage(a, p.order) for a in (dy, y, out))
        add = add3_serial if serial else add3
        fns["copy"] = lambda: add(fa, fb, fc)
    return fns


def run_problem(p: Problem, repeat: int, torch, scipy_special) -> dict:
    gc.collect()
    rng = np.random.default_rng(0)
    fns = {}
    try:
        fns = variants(p, torch, scipy_special, rng)
        t, errors = time_calls(fns, repeat)
    except Exception as e:  # setting the problem up failed: a row of "-"
        t, errors = {}, {"setup": f"{type(e).__name__}: {e}"}
    for name, err in errors.items():
        print(f"{p.label()}: {name}: {err}", file=sys.stderr)
    del fns
    return {"problem": p, "kind": kind_of(p), "bytes": p.bytes_moved, "t": t}


# ----------------------------------------------------------------------------
# the tables
# ----------------------------------------------------------------------------
def fmt_time(s: float | None) -> str:
    """``2.35 us``, ``141 us``, ``4.21 ms``, ``693 ms``: three significant
    digits in microseconds below 1 ms, milliseconds above."""
    if s is None or not math.isfinite(s):
        return "-"
    v, unit = (s * 1e6, "us") if s < 1e-3 else (s * 1e3, "ms")
    digits = max(0, 2 - int(math.floor(math.log10(v)))) if v > 0 else 0
    return f"{v:.{digits}f} {unit}"


def ratio(r: dict, num: str, den: str) -> float | None:
    """``t[num] / t[den]`` (a speed-up of ``den`` over ``num``), or None."""
    t = r["t"]
    return t[num] / t[den] if num in t and den in t else None


def gbs(r: dict, name: str) -> float | None:
    t = r["t"].get(name)
    return r["bytes"] / t / 1e9 if t else None


def _x(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


HEADER = ["kind", "problem", "ours", "ours out=", "torch", "torch out=", "scipy",
          "copy", "GB/s (out=)", "% of copy", "vs torch out=", "vs torch", "vs scipy"]


def row_cells(r: dict) -> list[str]:
    t = r["t"]
    g = gbs(r, "ours_out")
    return [
        r["kind"],
        r["problem"].label(),
        *(fmt_time(t.get(k)) for k in ("ours", "ours_out", "torch", "torch_out",
                                       "scipy", "copy")),
        "-" if g is None else f"{g:.1f}",
        _pct(ratio(r, "copy", "ours_out")),
        _x(ratio(r, "torch_out", "ours_out")),
        _x(ratio(r, "torch", "ours")),
        _x(ratio(r, "scipy", "ours")),
    ]


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def fixed_cost_table(results: list[dict]) -> str | None:
    """The cost of a call on a small array, microseconds, and its ratios as
    issue 10 states the target (ours / theirs: lower is better)."""
    rs = [r for r in results if r["kind"] == FIXED]
    if not rs:
        return None
    us = lambda r, k: f"{r['t'][k] * 1e6:.2f}" if k in r["t"] else "-"  # noqa: E731
    rows = [
        [r["problem"].label(), *(us(r, k) for k in ("ours", "ours_out", "torch",
                                                    "torch_out", "scipy")),
         _x(ratio(r, "ours", "torch")), _x(ratio(r, "ours_out", "torch_out")),
         _x(ratio(r, "ours", "scipy")), _x(ratio(r, "ours_out", "ours"))]
        for r in rs
    ]
    header = ["problem", "ours us", "ours out= us", "torch us", "torch out= us",
              "scipy us", "ours / torch", "ours out= / torch out=", "ours / scipy",
              "ours out= / ours"]
    return markdown(header, rows)


# ----------------------------------------------------------------------------
# the first call of a process
# ----------------------------------------------------------------------------
FIRST_SHAPE = (4096, 32000)

#: run in a fresh interpreter: argv = which, threads, later calls
FIRST_CALL = r"""
import json, sys, time
import numpy as np
which, threads, later = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
x = rng.standard_normal(SHAPE, dtype=np.float32)
small = rng.standard_normal((64, SHAPE[1]), dtype=np.float32)  # > SERIAL_MAX
if which == "ours":
    import numba, logsoftmax
    numba.set_num_threads(threads)
    logsoftmax.log_softmax(small, -1, out=np.empty_like(small))
    call = lambda: logsoftmax.log_softmax(x, -1)
elif which == "torch":
    import torch
    torch.set_num_threads(threads)
    ts = torch.from_numpy(small)
    torch._log_softmax(ts, -1, False, out=torch.empty_like(ts))
    tx = torch.from_numpy(x)
    call = lambda: torch.log_softmax(tx, -1)
else:
    call = lambda: np.empty_like(x).fill(0)
times = []
for _ in range(1 + later):
    t0 = time.perf_counter()
    y = call()
    times.append(time.perf_counter() - t0)
    del y
print(json.dumps(times))
""".replace("SHAPE", repr(FIRST_SHAPE))

FIRST_WHO = {
    "ours": "ours, `log_softmax(x, -1)`",
    "torch": "PyTorch, `torch.log_softmax(tx, -1)`",
    "numpy": "a bare `np.empty_like(x).fill(0)`",
}


def first_calls(procs: int, threads: int, torch_ok: bool) -> dict[str, dict]:
    """First and later call times (seconds) per variant, ``procs`` fresh
    processes each, run in turn."""
    who = [w for w in FIRST_WHO if w != "torch" or torch_ok]
    got = {w: {"first": [], "later": []} for w in who}
    for _ in range(procs):
        for w in who:
            cmd = [sys.executable, "-c", FIRST_CALL, w, str(threads), "3"]
            res = None
            try:
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                times = json.loads(res.stdout.strip().splitlines()[-1])
            except Exception as e:
                print(f"first call, {w}: {type(e).__name__}: {e}", file=sys.stderr)
                if res is not None and res.stderr:
                    print(res.stderr[-2000:], file=sys.stderr)
                continue
            got[w]["first"].append(times[0])
            got[w]["later"].extend(times[1:])
    return {w: g for w, g in got.items() if g["first"]}


def first_call_table(fc: dict[str, dict], procs: int) -> str:
    torch_first = np.median(fc["torch"]["first"]) if "torch" in fc else None
    rows = []
    for w, g in fc.items():
        f = np.array(g["first"])
        rows.append([
            FIRST_WHO[w],
            f"{np.median(f) * 1e3:.0f} ({f.min() * 1e3:.0f}-{f.max() * 1e3:.0f})",
            f"{np.median(g['later']) * 1e3:.0f}",
            _x(None if torch_first is None else np.median(f) / torch_first),
        ])
    dims = "x".join(map(str, FIRST_SHAPE))
    header = [f"fresh process, {dims} f32, allocating",
              f"first call ms: median (min-max) of {procs}", "later calls ms (median)",
              "first / PyTorch's first"]
    return markdown(header, rows)


# ----------------------------------------------------------------------------
# the targets (issue 10)
# ----------------------------------------------------------------------------
#: one-sided sign-test level below which the paired re-timing calls ``out=``
#: slower than allocating (:func:`recheck_out`)
SIGN_P = 0.05
#: paired rounds of that re-timing
RECHECK_ROUNDS = 15


def recheck_out(results: list[dict]) -> None:
    """Re-time each problem whose ``out=`` median came out above its
    allocating one: the two calls alone, in :data:`RECHECK_ROUNDS` paired
    rounds (:func:`common.paired_rounds`), stored as ``r["recheck"]``.

    Medians of 7 rounds put ``out=`` above allocating on a different few of
    32 problems in every run (by 1.02-1.12x on an AMD EPYC Zen 4), and each
    worst case re-timed
    alone came out level. The target ("never slower") is a claim about a
    difference, so a one-sided sign test on paired rounds decides it:
    slower where ``out=`` lost at least 12 of 15 rounds (p < 0.05),
    whatever the size of the loss.

    A run re-times 4-11 problems, and the test's level at 15 rounds is
    1.8% (12 or more of 15 by chance), so a run with nothing slower still
    flags one of 11 with a chance of 18%. A problem that tests slower is
    therefore re-timed once more (``r["confirm"]``, as many rounds) and
    called slower only if that replication is significant too (0.03% per
    problem by chance). The run that
    led to it (AMD EPYC, LLVM znver4) flagged p03 f32 forward (12 of 15, p
    0.018) and p04 f16 forward (13 of 15, p 0.0037); re-run alone twice
    (``bench_cpu.py --only p03,p04``), p04's `out=` took 4.80 and 4.79 ms
    against 4.81 and 5.01 allocating (never re-timed: not slower), p03's
    6.68 against 6.57 (re-timed: slower in 12 of 15 again) and 6.46
    against 7.06."""
    for r in results:
        v = ratio(r, "ours_out", "ours")
        if v is None or v <= 1.0:
            continue
        gc.collect()
        fns = variants(r["problem"], None, None, np.random.default_rng(0))
        for key in ("recheck", "confirm"):
            r[key] = paired_rounds(fns["ours_out"], fns["ours"], RECHECK_ROUNDS)
            print(f"{'re-timed' if key == 'recheck' else 'confirmed'} {_pid(r)}: "
                  f"out= / allocating {r[key]['median']:.3f}x, slower in {r[key]['slower']} "
                  f"of {RECHECK_ROUNDS} (p = {r[key]['p']:.2g})", flush=True)
            if r[key]["p"] >= SIGN_P:
                break
        del fns


def _worst(rs, f, higher_is_better=True):
    """(value, result) pairs with a value, worst first."""
    vals = [(f(r), r) for r in rs if f(r) is not None]
    return sorted(vals, key=lambda vr: vr[0], reverse=not higher_is_better)


def _pid(r):
    p = r["problem"]
    return f"{p.pid} {p.src} {p.direction}"


#: the physics cap: an ``out=`` call at this fraction of the same-run copy's
#: speed for the bytes it must move has met any speed target against a peer
AT_FLOOR = 0.9


def _at_floor(r) -> bool:
    c = ratio(r, "copy", "ours_out")
    return c is not None and c >= AT_FLOOR


def _at_least(rs, f, goal, fmt=_x, capped=False):
    """A target row: ``f(r) >= goal`` on every problem of ``rs`` (``capped``:
    or the problem runs at :data:`AT_FLOOR` of the copy)."""
    vals = _worst(rs, f)
    if not vals:
        return "not measured in this run", "-"
    below = [f"{_pid(r)} {fmt(v)}" for v, r in vals
             if v < goal and not (capped and _at_floor(r))]
    floor = [f"{_pid(r)} {fmt(v)}" for v, r in vals if v < goal and capped and _at_floor(r)]
    med = float(np.median([v for v, _ in vals]))
    if len(vals) == 1:
        text = f"{fmt(vals[0][0])} ({_pid(vals[0][1])}, the only problem of this kind)"
    else:
        text = (f"min {fmt(vals[0][0])} ({_pid(vals[0][1])}), median {fmt(med)} "
                f"over {len(vals)} problems")
    if below and len(vals) > 1:
        text += "; below: " + ", ".join(below[:6]) + (" ..." if len(below) > 6 else "")
    if floor:
        text += (f"; at >= {AT_FLOOR:.0%} of the copy (meets it by the physics cap): "
                 + ", ".join(floor))
    return text, ("met" if not below else f"not met ({len(below)} of {len(vals)})")


def targets(results: list[dict], fc: dict | None) -> list[list[str]]:
    """One row per issue-10 target: target, measured, status."""
    by = {k: [r for r in results if r["kind"] == k] for k in KINDS}
    rows = []

    fixed = [(r, ratio(r, "ours", "torch"), ratio(r, "ours_out", "torch_out"))
             for r in by[FIXED]]
    if fixed and all(a is not None and b is not None for _, a, b in fixed):
        text = "; ".join(f"{r['problem'].pid}: {a:.2f}x / {b:.2f}x" for r, a, b in fixed)
        ok = all(max(a, b) <= 2.5 for _, a, b in fixed)
        rows.append(["fixed cost: a call on 8, 1000, 256x128 elements <= 2.5x "
                     "PyTorch's (allocating / `out=`)", text, "met" if ok else "not met"])
    else:
        rows.append(["fixed cost: <= 2.5x PyTorch's call", "not measured in this run", "-"])

    sc = [(r, max(r["t"]["ours"], r["t"]["ours_out"]), r["t"]["scipy"]) for r in by[FIXED]
          if {"ours", "ours_out", "scipy"} <= r["t"].keys()]
    if sc:
        text = "; ".join(f"{r['problem'].pid}: {fmt_time(o)} vs {fmt_time(s)}"
                         for r, o, s in sc)
        rows.append(["fixed cost: below `scipy.special.log_softmax` (our slower path)",
                     text, "met" if all(o < s for _, o, s in sc) else "not met"])

    slow = _worst(results, lambda r: ratio(r, "ours_out", "ours"), higher_is_better=False)
    if slow:
        over = [(v, r) for v, r in slow if v > 1.0]
        text = f"worst `out=` / allocating: {slow[0][0]:.2f}x ({_pid(slow[0][1])})"
        if over:
            text += f"; slower on {len(over)} of {len(slow)}: " + ", ".join(
                f"{_pid(r)} {v:.2f}x" for v, r in over[:6])
        # the medians' "slower" is settled by the paired re-timing where it ran
        # (:func:`recheck_out`): slower only where the sign test says so
        checked = [r for _, r in over if "recheck" in r]
        if checked:
            sig = [r for r in checked if r["recheck"]["p"] < SIGN_P]
            text += (f". Re-timed paired ({checked[0]['recheck']['rounds']} rounds each, "
                     f"`out=` / allocating per round): " + ", ".join(
                         f"{_pid(r)} {r['recheck']['median']:.2f}x, slower in "
                         f"{r['recheck']['slower']} (p = {r['recheck']['p']:.2g})"
                         for r in checked[:6]))
            for r in sig:  # (recheck_out re-timed each of these again)
                c = r["confirm"]
                text += (f"; {_pid(r)} re-timed again: {c['median']:.2f}x, slower in "
                         f"{c['slower']} (p = {c['p']:.2g})")
            sig = [r for r in sig if r["confirm"]["p"] < SIGN_P]
            text += (f"; significantly slower (sign test, p < {SIGN_P}, twice): "
                     + (", ".join(_pid(r) for r in sig) if sig else "none"))
            ok = not sig and len(checked) == len(over)
        else:
            ok = not over
        rows.append(["`out=` never slower than allocating (every problem)", text,
                     "met" if ok else "not met"])

    def speed(num, den):
        return lambda r: ratio(r, num, den)

    for label, rs, f, goal, fmt, capped in [
        ("short rows (2-1024 elements): `out=` >= 1.2x PyTorch `out=`",
         by[SHORT], speed("torch_out", "ours_out"), 1.2, _x, True),
        ("vocabulary rows: `out=` >= 1.2x PyTorch `out=`",
         by[VOCAB], speed("torch_out", "ours_out"), 1.2, _x, True),
        ("vocabulary rows: `out=` >= 80% of the copy's bandwidth",
         by[VOCAB], speed("copy", "ours_out"), 0.8, _pct, False),
        ("vocabulary rows: allocating >= 1.7x PyTorch allocating",
         by[VOCAB], speed("torch", "ours"), 1.7, _x, False),
        ("strided axis: `out=` >= 1.2x PyTorch `out=`",
         by[STRIDED], speed("torch_out", "ours_out"), 1.2, _x, True),
        ("strided axis: `out=` >= 50% of the copy's bandwidth",
         by[STRIDED], speed("copy", "ours_out"), 0.5, _pct, False),
    ]:
        rows.append([label, *_at_least(rs, f, goal, fmt, capped)])

    if fc and "ours" in fc and "torch" in fc:
        of, tf = np.median(fc["ours"]["first"]), np.median(fc["torch"]["first"])
        ol, tl = np.median(fc["ours"]["later"]), np.median(fc["torch"]["later"])
        text = (f"first call {of * 1e3:.0f} ms vs PyTorch's {tf * 1e3:.0f} ms "
                f"({of / tf:.2f}x); later calls {ol * 1e3:.0f} vs {tl * 1e3:.0f} ms")
        status = "met" if of <= 1.2 * tf else "not met"
    else:
        text, status = "not measured in this run (`--first-call`)", "-"
    rows.append(["first allocating call of a process (4096x32000 f32) <= 1.2x "
                 "PyTorch's first call, later calls kept", text, status])
    return rows


# ----------------------------------------------------------------------------
# docs: this CPU's section, the summary, the plot
# ----------------------------------------------------------------------------
SECTIONS = "<!-- bench_cpu.py:cpu-sections -->"
SUMMARY_BEGIN = "<!-- bench_cpu.py:summary:begin -->"
SUMMARY_END = "<!-- bench_cpu.py:summary:end -->"


def slug(key: str) -> str:
    """``intel-xeon-processor-llvm-emeraldrapids`` for the CPU's key."""
    key = re.sub(r"\((r|tm)\)", "", key.lower())
    return re.sub(r"[^a-z0-9]+", "-", key).strip("-")


def plot(results: list[dict], path: Path, title: str) -> bool:
    """GB/s bars per problem (the fixed-cost ones left out): the copy, ours
    ``out=``, PyTorch ``out=``. False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return False
    rs = [r for r in results if r["kind"] != FIXED]
    if not rs:
        return False
    labels = [r["problem"].label() for r in rs]
    y = np.arange(len(rs))
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(rs) + 1.6))
    for dy, name, label, color in [
        (-0.27, "copy", "memory copy of the same bytes", "#bbbbbb"),
        (0.0, "ours_out", "logsoftmax (out=)", "#1f77b4"),
        (0.27, "torch_out", "PyTorch (out=)", "#ff7f0e"),
    ]:
        ax.barh(y + dy, [gbs(r, name) or 0 for r in rs], 0.27, label=label, color=color)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("effective bandwidth, GB/s (bytes the op must move / time)")
    ax.set_title(title, fontsize=9, pad=22)
    ax.legend(fontsize=8, ncol=3, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _prose(text: str, bullet: bool = False) -> str:
    """``text`` wrapped at 78 columns (a ``- `` bullet's lines indented)."""
    return textwrap.fill(text, 78, subsequent_indent="  " if bullet else "",
                         break_long_words=False, break_on_hyphens=False)


def write_docs(results, fc, info, ctx) -> None:
    """Rewrite this CPU's section of docs/performance.md (inserted after the
    SECTIONS anchor, newest first, if the CPU has none yet), its plot, and
    the targets summary at the top of the page (not for a stand-in build,
    ``--avx2``: it has a section of its own and leaves the summary be)."""
    key, s, date = info["key"], slug(info["key"]), ctx["date"]
    anchor = f"cpu-{s}"
    img = f"img/cpu_bandwidth_{s}.png"
    tgt = markdown(["target (issue 10)", "measured", "status"], targets(results, fc))
    lines = [
        f"<!-- bench_cpu.py:cpu:{s}:begin -->",
        f'<a id="{anchor}"></a>',
        "",
        f"## CPU: {key}, measured {date}",
        "",
        _prose("Written by `benchmarks/bench_cpu.py` (`make bench`); a new run on "
               "this CPU replaces this section, other CPUs keep theirs."),
        "",
        _prose(f"- CPU: {info['model']}, LLVM host CPU `{info['llvm']}`, "
               f"{info['cpus']} logical CPUs; {info['isa']}; transparent huge pages "
               f"{info['thp']}.", bullet=True),
        *([_prose(f"- Built for `{info['built']}`: our kernels compiled for LLVM "
                  f"`{info['built']}` with the features above, PyTorch's kernels "
                  f"{ctx['torch_isa']} (`python benchmarks/bench_cpu.py --avx2`). This "
                  "CPU stands in for one without AVX-512 (its ports and clocks stay): "
                  "read the ratios to PyTorch, not the times, and as an estimate until "
                  "measured on such a CPU.", bullet=True)]
          if info["built"] else []),
        _prose(f"- Software: Python {platform.python_version()}, numpy "
               f"{np.__version__}, numba {ctx['numba']}, PyTorch {ctx['torch']}, SciPy "
               f"{ctx['scipy']}; {ctx['threads']} threads for numba and PyTorch "
               "(SciPy: one).", bullet=True),
        _prose(f"- Command: `{ctx['cmd']}`: {ctx['n']} problems, medians of "
               f"{ctx['repeat']} interleaved rounds (a sample lasts >= 20 ms), "
               f"{ctx['wall']:.0f} s; load average {ctx['load0']:.1f} at the start, "
               f"{ctx['load1']:.1f} at the end.", bullet=True),
        "",
        "### Targets",
        "",
        tgt,
        "",
        "### All problems",
        "",
        _prose("Times per call; GB/s and % of copy on the `out=` path; `vs x` = x's "
               "time / ours (above 1: we are faster). Kinds: *fixed* cost of a call, "
               "*short* (<= 1024) and *vocab* rows (the axis contiguous), *strided* "
               "axis."),
        "",
        markdown(HEADER, [row_cells(r) for r in results]),
        "",
    ]
    fixed = fixed_cost_table(results)
    if fixed:
        lines += ["### Fixed cost of a call", "",
                  _prose("Microseconds per call (each sample loops >= 20 ms of "
                         "calls); ratios are ours / theirs (issue 10: at most 2.5x "
                         "PyTorch, below SciPy, `out=` not above allocating)."),
                  "", fixed, ""]
    if fc:
        lines += ["### First call of a process", "",
                  _prose("Fresh interpreters, run in turn; each loads its kernels "
                         "with an `out=` call on a 64x32000 array, then times its "
                         "first allocating call on a new 4096x32000 f32 array and "
                         "three more (\"later\")."),
                  "", first_call_table(fc, ctx["procs"]), ""]
    title = f"log-softmax, {ctx['threads']} threads: {key}"
    if plot(results, ROOT / "docs" / img, title):
        lines += [f"![CPU bandwidth, {key}]({img})", ""]
    lines.append(f"<!-- bench_cpu.py:cpu:{s}:end -->")
    replace_block(DOC, lines[0], lines[-1], "\n".join(lines), anchor=SECTIONS)
    if info["built"]:  # a stand-in build: the summary stays the native run's
        print(f"wrote {DOC.relative_to(ROOT)} ({key}) and {img}", file=sys.stderr)
        return

    summary = [
        SUMMARY_BEGIN,
        _prose(f"Newest CPU measured: **{key}** ({date}, `{ctx['cmd']}`; "
               f"[its section](#{anchor}))."),
        "",
        tgt,
        SUMMARY_END,
    ]
    replace_block(DOC, SUMMARY_BEGIN, SUMMARY_END, "\n".join(summary))
    print(f"wrote {DOC.relative_to(ROOT)} and {img}", file=sys.stderr)


# ----------------------------------------------------------------------------
def _optional(name: str):
    """The module, or None (its columns stay empty) if it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        print(f"{name} not available ({e}): its columns are empty", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a subset of every kind, ~1 minute; prints only")
    ap.add_argument("--all", action="store_true",
                    help="add every shape in f32/bf16/f16 x fwd/bwd")
    ap.add_argument("--only", default=None,
                    help="comma list of problem ids or patterns (p08,s*,v32k)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="interleaved rounds (default 7; --quick 3)")
    ap.add_argument("--threads", type=int, default=2)
    fcg = ap.add_mutually_exclusive_group()
    fcg.add_argument("--first-call", dest="first_call", action="store_true", default=None,
                     help="time the first call of fresh processes (default: full run only)")
    fcg.add_argument("--no-first-call", dest="first_call", action="store_false")
    ap.add_argument("--procs", type=int, default=5,
                    help="fresh processes per variant for --first-call")
    ap.add_argument("--no-write", action="store_true", help="don't update docs/")
    ap.add_argument("--avx2", action="store_true",
                    help="stand in for an AVX2-only CPU: our kernels built for LLVM haswell "
                         "without AVX-512, PyTorch's AVX2 kernels (common.avx2_only_env); "
                         "writes a section of its own")
    args = ap.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    first_call = (args.first_call if args.first_call is not None
                  else not (args.quick or args.only))

    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    torch = _optional("torch")
    if torch is not None:
        torch.set_num_threads(args.threads)
    scipy_special = _optional("scipy.special")

    info = cpu_info()
    only = args.only.split(",") if args.only else None
    todo = problems(args.quick, args.all, only)
    load0 = os.getloadavg()[0]
    print(f"CPU: {info['key']}; {info['isa']}; {info['cpus']} logical CPUs; "
          f"THP {info['thp']}")
    print(f"{args.threads} threads; numba {numba.__version__}, numpy {np.__version__}, "
          f"torch {getattr(torch, '__version__', '-')}; medians of {repeat} rounds; "
          f"load average {load0:.1f}\n")
    print("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER), flush=True)
    t0 = time.time()
    results = []
    for p in todo:
        results.append(run_problem(p, repeat, torch, scipy_special))
        print("| " + " | ".join(row_cells(results[-1])) + " |", flush=True)
    recheck_out(results)
    fixed = fixed_cost_table(results)
    if fixed:
        print("\nFixed cost of a call (ratios: ours / theirs)\n\n" + fixed)
    fc = None
    if first_call:
        fc = first_calls(args.procs, args.threads, torch is not None)
        if fc:
            print("\nFirst call of a process\n\n" + first_call_table(fc, args.procs))
    print("\nTargets (issue 10)\n\n" + markdown(["target", "measured", "status"],
                                               targets(results, fc)))
    wall = time.time() - t0
    print(f"\n({len(todo)} problem{'s' if len(todo) != 1 else ''}, {wall:.0f} s)")
    if args.quick or args.no_write:
        return 0
    ctx = {
        "date": time.strftime("%Y-%m-%d"),
        "cmd": shlex.join(["python", "benchmarks/bench_cpu.py", *argv]),
        "numba": numba.__version__,
        "torch": getattr(torch, "__version__", "not installed"),
        "torch_isa": (torch.backends.cpu.get_cpu_capability() if torch is not None
                      else "not installed"),
        "scipy": sys.modules["scipy"].__version__ if scipy_special else "not installed",
        "threads": args.threads,
        "repeat": repeat,
        "n": len(todo),
        "wall": wall,
        "load0": load0,
        "load1": os.getloadavg()[0],
        "procs": args.procs,
    }
    write_docs(results, fc, info, ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
