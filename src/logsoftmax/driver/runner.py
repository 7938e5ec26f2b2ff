"""Run one problem: check it can run, fill, execute, verify, time.

States, as benchdnn names them: ``PASSED``, ``FAILED`` (a point broke the
rule, the result is wrong, or the library raised), ``MISTRUSTED`` (passed
but too many exact zeros to mean anything), ``SKIPPED`` (an option, layout
or data type this driver cannot honour, an invalid in-place case, or not
enough memory; the reason is printed), ``UNIMPLEMENTED`` (the backend raised
``NotImplementedError``) and ``EXECUTED`` (performance / run-only modes: no
check was made).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import numpy as np

from .. import _api, dtypes
from ..accuracy import max_eps_error
from ..backends import get_backend, use_backend
from . import compare, fill, perf
from .problem import DATA_TYPES, DIRS, Problem, make_array, tag_permutation

__all__ = ["Result", "PeerResult", "run_problem", "skip_reason", "available_memory"]

# bytes per element the driver holds at its peak, beyond the problem's own
# tensors: float32 fill(s), float32 reference and float64 reference, and the
# comparison's float32/bool temporaries
_DRIVER_BYTES_PER_ELEM = 48


@dataclasses.dataclass
class PeerResult:
    """A peer library's time and error on the same problem."""

    timing: perf.Timing | None = None
    err64: float | None = None
    reason: str = ""


@dataclasses.dataclass
class Result:
    """Everything measured for one problem."""

    problem: Problem
    index: int
    state: str
    reason: str = ""
    impl: str = ""
    check: compare.CheckResult | None = None
    err64: float | None = None
    bound64: float | None = None
    timing: perf.Timing | None = None
    copy: perf.Timing | None = None
    peers: dict[str, PeerResult] = dataclasses.field(default_factory=dict)
    wall_s: float = 0.0

    def gbps(self, timing: perf.Timing | None = None) -> float:
        """GB/s from the median time of ``timing`` (ours by default)."""
        t = self.timing if timing is None else timing
        if t is None or not t.samples or t.median_ms <= 0:
            return float("nan")
        return self.problem.bytes_moved / (t.median_ms * 1e-3) / 1e9

    def copy_pct(self, timing: perf.Timing | None = None) -> float:
        """Speed as % of the same-run copy of the same bytes (median times)."""
        t = self.timing if timing is None else timing
        if t is None or self.copy is None or not t.samples:
            return float("nan")
        return 100.0 * self.copy.median_ms / t.median_ms


def available_memory() -> int:
    """Bytes of memory available to this process (MemAvailable)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    return 1 << 62


def _needed_bytes(prb: Problem, n_peers: int) -> int:
    n = prb.nelems
    size_in = dtypes.from_name(prb.in_dt).itemsize
    size_out = dtypes.from_name(prb.out_dt).itemsize
    tensors = n * ((1 if prb.is_fwd else 2) * size_in + size_out)
    return tensors * (2 + n_peers) + n * _DRIVER_BYTES_PER_ELEM


def skip_reason(prb: Problem, n_peers: int = 0) -> str:
    """Why ``prb`` cannot run here, or ``""``."""
    if prb.unsupported:
        return f"option {' '.join(prb.unsupported)} is not supported by this driver"
    if prb.alg not in ("SOFTMAX", "LOGSOFTMAX"):
        return f"alg={prb.alg} is not supported; expected SOFTMAX or LOGSOFTMAX"
    if prb.dir not in DIRS:
        return f"dir={prb.dir} is not supported; expected one of {', '.join(DIRS)}"
    for name in ("sdt", "ddt"):
        dt = getattr(prb, name)
        if dt not in DATA_TYPES:
            return (
                f"{name}={dt} is not supported; expected one of "
                f"{', '.join(DATA_TYPES)}"
            )
    nd = len(prb.shape)
    if nd == 0 or any(n < 0 for n in prb.shape):
        return f"invalid dims {prb.shape}"
    if not 0 <= prb.axis < nd:
        return f"invalid case: axis={prb.axis} is out of range for a {nd}-d problem"
    for name in ("stag", "dtag"):
        tag = getattr(prb, name)
        if tag == "any":
            if name == "stag":
                return "invalid case: stag=any; the source layout must be given"
            continue
        try:
            tag_permutation(tag, nd)
        except NotImplementedError as e:
            return str(e)
        except ValueError as e:
            return f"invalid case: {e}"
    if prb.inplace:
        if prb.sdt != prb.ddt:
            return (
                f"invalid case: in-place needs sdt == ddt, got sdt={prb.sdt} "
                f"ddt={prb.ddt} (benchdnn skips it too)"
            )
        if prb.dtag != "any" and prb.stag != prb.dtag:
            return (
                f"invalid case: in-place needs stag == dtag, got stag={prb.stag} "
                f"dtag={prb.dtag} (benchdnn skips it too)"
            )
    need, avail = _needed_bytes(prb, n_peers), available_memory()
    if need > 0.8 * avail:
        return (
            f"needs about {need / 2**30:.1f} GiB of memory, "
            f"{avail / 2**30:.1f} GiB available"
        )
    return ""


def _layout(dense: np.ndarray, dt: np.dtype, tag: str) -> np.ndarray:
    a = make_array(dense.shape, dt, tag)
    a[...] = dense.astype(dt)
    return a


def _op(prb: Problem):
    if prb.is_fwd:
        return _api.log_softmax if prb.alg == "LOGSOFTMAX" else _api.softmax
    if prb.alg == "LOGSOFTMAX":
        return _api.log_softmax_backward
    return _api.softmax_backward


def run_problem(prb: Problem, index: int, opts) -> Result:
    """Run ``prb`` under the whole-run options ``opts``
    (:class:`~logsoftmax.driver.parser.RunOptions`); never raises for a
    problem-level failure, which becomes the result's state and reason."""
    t0 = time.perf_counter()
    peers = [p for p in opts.compare if opts.mode in ("P", "CP")]
    reason = skip_reason(prb, len(peers))
    if reason:
        return Result(prb, index, "SKIPPED", reason)
    backend_ctx = (
        use_backend(opts.backend) if opts.backend else contextlib.nullcontext()
    )
    try:
        # in-place timing reruns the op on its own output, which may overflow
        with backend_ctx, np.errstate(all="ignore"):
            res = _run(prb, index, opts, peers)
    except MemoryError:
        res = Result(prb, index, "SKIPPED", "ran out of memory")
    res.wall_s = time.perf_counter() - t0
    return res


def _run(prb: Problem, index: int, opts, peers: list[str]) -> Result:
    """Fill, execute once, check (modes C, CP) and time (modes P, CP)."""
    in_dt = dtypes.from_name(prb.in_dt)
    out_dt = dtypes.from_name(prb.out_dt)
    dense_in = _dense_inputs(prb, opts)
    inputs = {k: _layout(v, in_dt, prb.src_tag) for k, v in dense_in.items()}
    if prb.inplace:
        out = inputs["src" if prb.is_fwd else "diff_dst"]
    else:
        out = make_array(prb.shape, out_dt, prb.dst_tag)
    op = _op(prb)
    args = (inputs["src"],) if prb.is_fwd else (inputs["diff_dst"], inputs["dst"])
    call_dtype = None if out_dt == in_dt else out_dt

    def ours():
        return op(*args, axis=prb.axis, out=out, dtype=call_dtype)

    res = Result(prb, index, "EXECUTED", impl=_impl_name(opts))
    try:
        ours()
    except NotImplementedError as e:
        reason = str(e) or "not implemented"
        return dataclasses.replace(res, state="UNIMPLEMENTED", reason=reason)
    except Exception as e:  # the library must not raise on a valid problem
        reason = f"{type(e).__name__}: {e}"
        return dataclasses.replace(res, state="FAILED", reason=reason)

    checking = opts.mode in ("C", "CP")
    ref64 = None
    if checking or peers:
        ref_args = tuple(dense_in[k] for k in _input_names(prb))
        with use_backend("reference"):
            ref64 = op(*ref_args, axis=prb.axis, dtype=dtypes.float64)
    if checking:
        got = np.array(out, copy=True) if prb.inplace else out
        _check(res, got, ref64, dense_in, opts)
        del got
    if opts.mode in ("P", "CP"):
        # peers read their own copies: an in-place run overwrites our inputs
        peer_inputs = (
            {k: _layout(v, in_dt, prb.src_tag) for k, v in dense_in.items()}
            if peers and prb.inplace
            else inputs
        )
        _time(res, ours, peers, peer_inputs, ref64, opts)
    return res


def _input_names(prb: Problem) -> tuple[str, ...]:
    """The op's inputs, in call order."""
    return ("src",) if prb.is_fwd else ("diff_dst", "dst")


def _dense_inputs(prb: Problem, opts) -> dict[str, np.ndarray]:
    """The inputs by name, dense (logical order) and rounded to their data
    type: benchdnn's fill, or random values (``--fill=random``)."""
    shape, axis = prb.shape, prb.axis
    in_dt = dtypes.from_name(prb.in_dt)
    benchdnn = opts.effective_fill == "benchdnn"
    if prb.is_fwd:
        dense = (
            fill.fill_fwd(shape, axis, prb.sdt, prb.ddt)
            if benchdnn
            else fill.fill_random(shape, opts.seed)
        )
        return {"src": dense.astype(in_dt)}
    if benchdnn:
        dd, y = fill.fill_bwd(shape, prb.alg, prb.ddt)
    else:
        dd = fill.fill_random(shape, opts.seed + 1)
        logits = fill.fill_random(shape, opts.seed)
        y = compare.reference_f32(prb.alg, True, axis, x=logits)
    return {"diff_dst": dd.astype(in_dt), "dst": y.astype(in_dt)}


def _check(res: Result, got, ref64, dense_in: dict, opts) -> None:
    """Set ``res``'s error against float64 and its state: benchdnn's rule
    against the float32 reference (benchdnn fill), else the eps bound."""
    prb = res.problem
    res.err64 = max_eps_error(got, ref64, prb.out_dt)
    if opts.effective_fill != "benchdnn":
        res.bound64 = compare.eps_bound(prb.alg, prb.is_fwd, prb.out_dt)
        if res.err64 <= res.bound64:
            res.state = "PASSED"
        else:
            res.state = "FAILED"
            res.reason = (
                f"max error {res.err64:.3g} eps against float64 exceeds the "
                f"bound {res.bound64:.3g} eps"
            )
        return
    f32_args = {k: v.astype(np.float32) for k, v in dense_in.items()}
    exp_f32 = compare.reference_f32(
        prb.alg, prb.is_fwd, prb.axis,
        x=f32_args.get("src"), diff_dst=f32_args.get("diff_dst"),
        dst=f32_args.get("dst"),
    )
    del f32_args
    trh = compare.threshold(prb.alg, prb.is_fwd, prb.out_dt, prb.acc_mode)
    zt = compare.zero_trust_percent(prb.alg, prb.is_fwd, prb.axis_size)
    res.check = compare.benchdnn_check(got, exp_f32, prb.out_dt, trh, zt)
    if not res.check.passed:
        res.state = "FAILED"
        res.reason = _describe_errors(res.check, trh)
    elif res.check.mistrusted:
        res.state = "MISTRUSTED"
        res.reason = (
            f"{res.check.zeros} of {res.check.total} outputs are exactly 0 "
            f"(> {res.check.zero_trust:.0f}% allowed)"
        )
    else:
        res.state = "PASSED"


def _time(res: Result, ours, peers: list[str], peer_inputs: dict, ref64, opts) -> None:
    """Time ours, the same-run copy of the same bytes and each peer, in
    interleaved rounds; a peer's error is measured against ``ref64``."""
    prb = res.problem
    fns = {"ours": ours}
    fns["copy"] = perf.CopyBench(prb.bytes_moved, 2 if prb.is_fwd else 3)
    caps = {}
    for lib in peers:
        pr = res.peers[lib] = PeerResult()
        try:
            # torch's out= kernels mishandle some strided outputs (a
            # channels-last out= of _log_softmax_backward_data is wrong in
            # torch 2.13); peers write a row-major result, their default
            p_out = np.empty(prb.shape, dtypes.from_name(prb.out_dt))
            fn = perf.peer_callable(lib, prb, peer_inputs, p_out)
            fn()
        except perf.PeerUnavailable as e:
            pr.reason = str(e)
            continue
        except Exception as e:  # a peer's failure is reported, not fatal
            pr.reason = f"{type(e).__name__}: {e}"
            continue
        if ref64 is not None:
            pr.err64 = max_eps_error(p_out, ref64, prb.out_dt)
        fns[lib] = fn
        if lib == "numpy":
            caps[lib] = 3  # the textbook formula is slow; a few samples do
    timings = perf.measure(
        fns,
        max_ms=opts.max_ms_per_prb,
        min_times=opts.min_times_per_prb,
        fix_times=opts.fix_times_per_prb,
        max_times=caps,
    )
    res.timing, res.copy = timings["ours"], timings["copy"]
    for lib, pr in res.peers.items():
        pr.timing = timings.get(lib)
    if opts.mode == "P":
        res.state = "EXECUTED"


def _impl_name(opts) -> str:
    if opts.backend:
        return opts.backend
    try:
        return get_backend("cpu").name
    except ValueError:
        return "cpu(unavailable)"


def _describe_errors(check: compare.CheckResult, trh: float) -> str:
    pts = "; ".join(
        f"[{','.join(map(str, idx))}] exp:{e:.9g} got:{g:.9g} rdiff:{r:.3g}"
        for idx, e, g, r in check.first_errors[:3]
    )
    return (
        f"{check.n_errors} of {check.total} points differ beyond trh={trh:.3g} "
        f"(max rdiff {check.max_rdiff:.3g}); first: {pts}"
    )
