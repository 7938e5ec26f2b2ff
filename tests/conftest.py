"""Shared fixtures and accuracy helpers for the logsoftmax test suites.

Generic on purpose: other suites (CPU kernels, dask, cuda, autograd, graph,
driver) import these helpers too. Nothing here forces a backend globally;
the ``backend`` fixture forces one only for the test that requests it, through
``logsoftmax.use_backend`` (a context manager, reset at teardown).

Accuracy follows API.md section 1: per element,
``err = |y - y_ref| / (eps(dtype) * max(1, |y_ref|))`` with ``y_ref`` computed
here, in the test, in float64 (long double for float64 input) from the same
rounded inputs; never through the library.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import logsoftmax
# the metric (API.md section 1, one NaN/inf rule) has one home; the oracles
# below are computed here, never through the library
from logsoftmax.accuracy import eps_errors as err_eps
from logsoftmax.accuracy import max_eps_error as max_err_eps

# --------------------------------------------------------------------------
# dtypes and bounds
# --------------------------------------------------------------------------
FLOAT_DTYPES = (
    np.dtype(np.float32),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float16),
    np.dtype(np.float64),
)
LOW_PRECISION = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
DTYPE_IDS = {np.dtype(np.float32): "f32", np.dtype(ml_dtypes.bfloat16): "bf16",
             np.dtype(np.float16): "f16", np.dtype(np.float64): "f64"}

#: Documented error bounds, in eps of the dtype, for float32/float64 results
#: (and, in float32 eps, the "float32 bound" that bfloat16/float16 results may
#: use near ties and near zero). See docs/api.md, "Accuracy contract".
#: Backward errors are measured relative to max(1, |y_ref|, cancelling terms)
#: (see backward_scale) and get a wider bound: a float64 row sum has no wider
#: accumulator to hide in (the cpu backend measured 8.2 eps at n=10^4, where
#: PyTorch is at 19). API.md's own rule, "no worse than PyTorch", is checked
#: in test_torch_parity.py.
TOL_EPS = {
    "log_softmax": 4.0,
    "softmax": 4.0,
    "logsumexp": 4.0,
    "log_softmax_backward": 16.0,
    "softmax_backward": 16.0,
}


def eps(dtype) -> float:
    """Machine epsilon of ``dtype`` (bfloat16: 2**-7, float16: 2**-10...)."""
    return float(ml_dtypes.finfo(np.dtype(dtype)).eps)


def oracle_dtype(dtype) -> np.dtype:
    """Accumulation dtype of the oracle: long double for float64, else float64."""
    return np.dtype(np.longdouble if np.dtype(dtype) == np.float64 else np.float64)


def dtype_id(dtype) -> str:
    return DTYPE_IDS.get(np.dtype(dtype), str(np.dtype(dtype)))


# --------------------------------------------------------------------------
# the oracle (independent of the library)
# --------------------------------------------------------------------------
def _widen(a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in FLOAT_DTYPES:  # int/bool: the library promotes to float32
        a = a.astype(np.float32)
    return a.astype(oracle_dtype(a.dtype))


def ref_log_softmax(x, axis: int = -1) -> np.ndarray:
    """``(x - m) - log(sum(exp(x - m)))`` in float64/long double.

    The row rules of API.md fall out of IEEE arithmetic: a NaN or ``+inf``
    makes ``x - m`` NaN somewhere, so the whole row is NaN; an all ``-inf`` row
    gives ``-inf - -inf = NaN``; a single ``-inf`` gives ``exp(-inf) = 0``.
    """
    a = _widen(x)
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
        s = a - m
        return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def ref_softmax(x, axis: int = -1) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.exp(ref_log_softmax(x, axis))


def ref_logsumexp(x, axis=-1, keepdims: bool = False) -> np.ndarray:
    """logsumexp with API.md's rules: all -inf -> -inf, +inf -> +inf, NaN -> NaN,
    zero-length -> -inf."""
    a = _widen(x)
    if axis is None:
        axis = tuple(range(a.ndim))
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
        mf = np.where(np.isfinite(m), m, 0)  # keep +-inf out of x - m
        r = mf + np.log(np.sum(np.exp(a - mf), axis=axis, keepdims=True))
    if not keepdims:
        r = np.squeeze(r, axis=axis)
    return r


def ref_log_softmax_backward(diff_dst, dst, axis: int = -1) -> np.ndarray:
    dd, y = _widen(diff_dst), _widen(dst)
    with np.errstate(all="ignore"):
        return dd - np.exp(y) * np.sum(dd, axis=axis, keepdims=True)


def ref_softmax_backward(diff_dst, dst, axis: int = -1) -> np.ndarray:
    dd, y = _widen(diff_dst), _widen(dst)
    with np.errstate(all="ignore"):
        return y * (dd - np.sum(dd * y, axis=axis, keepdims=True))


REF = {
    "log_softmax": ref_log_softmax,
    "softmax": ref_softmax,
    "logsumexp": ref_logsumexp,
    "log_softmax_backward": ref_log_softmax_backward,
    "softmax_backward": ref_softmax_backward,
}


# --------------------------------------------------------------------------
# error measurement
# --------------------------------------------------------------------------
def _round(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # long double -> float64 first is exact enough here: the interval below is
    # many float64 ulps wide, and rounding is monotone.
    return v.astype(np.float64).astype(dtype)


def _fmt(a, idx) -> str:
    return repr(np.asarray(a)[idx].item()) if np.ndim(a) else repr(np.asarray(a).item())


def assert_specials_match(actual, ref) -> None:
    """NaN exactly where ``ref`` is NaN, and the same infinities."""
    a = np.asarray(actual).astype(np.float64)
    r = np.asarray(ref).astype(np.float64)
    nan_a, nan_r = np.isnan(a), np.isnan(r)
    if not np.array_equal(nan_a, nan_r):
        bad = tuple(np.argwhere(nan_a != nan_r)[0])
        raise AssertionError(
            f"NaN mismatch at {bad}: got {_fmt(a, bad)}, expected {_fmt(r, bad)} "
            f"({int((nan_a != nan_r).sum())} element(s))"
        )
    inf_r = np.isinf(r)
    inf_a = np.isinf(a)
    bad_mask = (inf_r | inf_a) & ~nan_r & (a != r)
    if bad_mask.any():
        bad = tuple(np.argwhere(bad_mask)[0])
        raise AssertionError(
            f"infinity mismatch at {bad}: got {_fmt(a, bad)}, expected {_fmt(r, bad)}"
        )


def backward_scale(op: str, diff_dst, dst, axis: int = -1) -> np.ndarray:
    """Magnitude of the terms that cancel in a backward result.

    ``diff_dst - exp(dst) * S`` (log_softmax) and ``dst * (diff_dst - S')``
    (softmax) lose everything below ``eps * |term|`` when the result is much
    smaller than its terms, in any implementation at the dtype's precision
    (PyTorch included). Backward errors are measured relative to
    ``max(1, |y_ref|, scale)``.
    """
    dd, y = _widen(diff_dst), _widen(dst)
    with np.errstate(all="ignore"):
        if op == "log_softmax_backward":
            s = np.abs(np.exp(y) * np.sum(dd, axis=axis, keepdims=True))
        else:
            s = np.abs(y) * (
                np.abs(dd) + np.abs(np.sum(dd * y, axis=axis, keepdims=True))
            )
    return np.where(np.isfinite(s), s, 0)


def assert_close_eps(actual, ref, dtype, tol: float, scale=None) -> None:
    """Assert API.md's accuracy rule for a result of ``dtype``.

    - NaN and infinities must match ``ref`` exactly (position and sign).
    - float32/float64 (and any non-low-precision dtype): every finite element
      within ``tol`` eps of ``ref`` (relative to ``max(1, |ref|)``).
    - bfloat16/float16: the result must be ``ref`` rounded once (RNE) from
      *some* value within the float32 bound (``tol`` float32 eps) of ``ref``:
      ``round(ref - b) <= y <= round(ref + b)``. Away from rounding ties and
      from zero this is exactly "equal to the oracle rounded once"; near a
      tie it admits the float32 result's own error, and near zero (where
      float32 cannot resolve the answer) it is the float32 bound.
    - ``scale`` (backward, see :func:`backward_scale`): errors are measured
      relative to ``max(1, |ref|, scale)`` instead of ``max(1, |ref|)``.
    """
    dtype = np.dtype(dtype)
    a = np.asarray(actual)
    r = np.asarray(ref)
    assert a.dtype == dtype, f"result dtype {a.dtype}, expected {dtype}"
    assert a.shape == r.shape, f"result shape {a.shape}, expected {r.shape}"
    assert_specials_match(a, r)
    rl = r.astype(np.longdouble)
    fin = np.isfinite(rl)
    mag = np.ones(r.shape) if scale is None else np.broadcast_to(scale, r.shape)
    mag = np.maximum(1, mag).astype(np.longdouble)
    if dtype in LOW_PRECISION:
        rf = np.where(fin, rl, 0)
        bound = tol * eps(np.float32) * np.maximum(mag, np.abs(rf))
        with np.errstate(over="ignore"):  # near the dtype's max, round to inf
            lo = _round(rf - bound, dtype).astype(np.float64)
            hi = _round(rf + bound, dtype).astype(np.float64)
        av = a.astype(np.float64)
        bad_mask = fin & ~((lo <= av) & (av <= hi))
        if bad_mask.any():
            bad = tuple(np.argwhere(bad_mask)[0])
            raise AssertionError(
                f"{dtype} result at {bad} is {_fmt(av, bad)}; the oracle "
                f"{float(rl[bad])!r} rounded once gives "
                f"{float(_round(rl[bad], dtype))!r} (allowed "
                f"[{_fmt(lo, bad)}, {_fmt(hi, bad)}] with the {tol} float32-eps "
                f"bound); {int(bad_mask.sum())} element(s) out of bound"
            )
        return
    e = err_eps(a, r, dtype)
    if scale is not None:  # err_eps divides by max(1, |ref|); rescale
        denom = np.maximum(mag, np.abs(np.where(fin, rl, 0)))
        e = e * (np.maximum(1, np.abs(np.where(fin, rl, 0))) / denom).astype(np.float64)
    if e.size and e.max() > tol:
        bad = np.unravel_index(int(np.argmax(e)), e.shape)
        raise AssertionError(
            f"max error {e.max():.3g} eps > {tol} at {bad}: got {_fmt(a, bad)}, "
            f"oracle {float(rl[bad])!r}; {int((e > tol).sum())} element(s) out "
            "of bound"
        )


def _isnan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc" or a.dtype in LOW_PRECISION:
        return np.isnan(a)
    return np.zeros(a.shape, bool)


def assert_bitwise_equal(a, b) -> None:
    """Bit-identical values (same shape and dtype), NaN payloads aside."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (
        f"{a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    )
    ab = np.ascontiguousarray(a).view(np.uint8).reshape(a.shape + (a.itemsize,))
    bb = np.ascontiguousarray(b).view(np.uint8).reshape(b.shape + (b.itemsize,))
    diff = (ab != bb).any(axis=-1) & ~(_isnan(a) & _isnan(b))
    if diff.any():
        bad = tuple(np.argwhere(diff)[0])
        raise AssertionError(
            f"not bit-identical at {bad}: {_fmt(a, bad)} vs {_fmt(b, bad)} "
            f"({int(diff.sum())} of {a.size} element(s) differ)"
        )


# --------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------
BACKEND_NAMES = ("reference", "cpu")


def backend_available(name: str) -> bool:
    """True if backend ``name`` can be loaded here (its module exists)."""
    try:
        return name in logsoftmax.backends()
    except ImportError:
        return False


def cpu_module_exists() -> bool:
    """True once ``logsoftmax/backends/cpu/__init__.py`` exists (a bare
    directory of work-in-progress kernel files does not count)."""
    package = Path(logsoftmax.__file__).parent
    return (package / "backends" / "cpu" / "__init__.py").exists()


@pytest.fixture(params=BACKEND_NAMES)
def backend(request) -> Iterator[str]:
    """Run the test on each backend in turn (skipping those not importable).

    Forces the backend with ``logsoftmax.use_backend`` for this test only.
    """
    name = request.param
    # A cpu module that exists but fails to load must fail the test, not skip.
    missing = not cpu_module_exists() if name == "cpu" else not backend_available(name)
    if missing:
        pytest.skip(f"backend {name!r} is not available here")
    with logsoftmax.use_backend(name):
        yield name


def count_kernel_calls(monkeypatch, called: list, kernels) -> None:
    """Record in ``called`` each call of the cpu kernels ``kernels``
    (``(module, name)`` pairs), by name, and ``"<name> in parallel"`` for
    each parallel run of any kernel
    (:class:`logsoftmax.backends.cpu.native.Parallel` and the plans'
    :class:`~logsoftmax.backends.cpu.ParallelEntry`, which call the
    kernel's compiled code, not the module attribute; a
    :meth:`~logsoftmax.backends.cpu.native.Parallel.serial` run of one of
    ``kernels`` counts as a call of it). The wrappers
    stand for the kernels otherwise, so a parallel run can still compile
    them (``compile``, ``overloads``)."""
    from logsoftmax.backends import cpu
    from logsoftmax.backends.cpu import native

    class Counted:
        def __init__(self, kernel, name):
            self._kernel, self._name = kernel, name

        def __call__(self, *args):
            called.append(self._name)
            return self._kernel(*args)

        def __getattr__(self, attr):
            return getattr(self._kernel, attr)

    for module, name in kernels:
        monkeypatch.setattr(module, name, Counted(getattr(module, name), name))
    parallel = native.Parallel.__call__

    def counted_parallel(self, *args):
        called.append(self.name + " in parallel")
        return parallel(self, *args)

    monkeypatch.setattr(native.Parallel, "__call__", counted_parallel)
    watched = {(module.__name__, name) for module, name in kernels}
    serial = native.Parallel.serial

    def counted_serial(self, *args):
        if (self.module.__name__, self.name) in watched:
            called.append(self.name)
        return serial(self, *args)

    monkeypatch.setattr(native.Parallel, "serial", counted_serial)
    entered = cpu.ParallelEntry.__call__

    def counted_entry(self, *args):
        called.append(self.name + " in parallel")
        return entered(self, *args)

    monkeypatch.setattr(cpu.ParallelEntry, "__call__", counted_entry)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261130)


def pytest_addoption(parser):
    parser.addoption(
        "--warm-kernels", action="store_true",
        help="under pytest-xdist, compile the shared kernels first, each by one worker "
             "(tests/warm_kernels.py; `make test` passes it)")


def pytest_sessionstart(session):
    """An xdist worker's share of the kernel warm-up (tests/warm_kernels.py)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if session.config.getoption("--warm-kernels") and worker:
        from warm_kernels import warm

        warm(int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"]),
             os.environ.get("PYTEST_XDIST_TESTRUNUID", "run"))


def pytest_sessionfinish(session):
    if session.config.getoption("--warm-kernels") and os.environ.get("PYTEST_XDIST_WORKER") == "gw0":
        from warm_kernels import clean

        clean(os.environ.get("PYTEST_XDIST_TESTRUNUID", "run"))


def pytest_collection_modifyitems(config, items):
    """The ``heavy`` tests first (a stable sort: the rest keep their order).
    ``make test`` runs two workers that steal work from each other
    (``--dist worksteal``), so a long test started first overlaps the rest
    of the suite instead of, started late, leaving one worker to finish it
    alone (the longest, ``test_public_problems_200_pass``, spent 178 s on
    first compiles in a run after ``make clean-kernels``). One fresh-clone
    run each way, AMD EPYC Zen 4: pytest 14:43 before, 14:14 after, within
    that machine's run-to-run spread."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)
