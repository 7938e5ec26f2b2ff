"""Backend registry and dispatch rules (API.md section 2, "Backend dispatch").

Forcing a backend is process-wide (``set_backend``) or per context
(``use_backend``); every test here restores dispatch by array type on exit.
A throw-away backend name ("conformance-probe", the reference class under
another name) lets these tests tell "forced" from "dispatched" without
needing the cpu backend; the registry entry is removed at teardown.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

import logsoftmax
from conftest import cpu_module_exists

# `logsoftmax.backends` is the function backends(); the module is reached this way
backends_mod = importlib.import_module("logsoftmax.backends")

PROBE = "conformance-probe"


@pytest.fixture
def probe(monkeypatch):
    """Register ``PROBE`` for this test only; restore forcing on exit."""
    monkeypatch.setitem(
        backends_mod._REGISTRY, PROBE, "logsoftmax.backends.reference:ReferenceBackend"
    )
    monkeypatch.setattr(backends_mod, "_INSTANCES", dict(backends_mod._INSTANCES))
    try:
        yield backends_mod.get_backend(PROBE)
    finally:
        logsoftmax.set_backend(None)


def _default_name_for_numpy():
    """What dispatch picks for a numpy array with nothing forced, or the
    ValueError it raises while the cpu backend is missing."""
    try:
        return backends_mod.select_backend(np.zeros(3, np.float32)).name
    except ValueError as e:
        return e


requires_cpu = pytest.mark.skipif(
    not cpu_module_exists(), reason="the cpu backend is not written yet"
)


# --------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------
def test_backends_lists_reference_and_cpu():
    names = logsoftmax.backends()
    assert isinstance(names, list) and all(isinstance(n, str) for n in names)
    assert "reference" in names
    if cpu_module_exists():
        assert "cpu" in names
    assert set(names) <= {"cpu", "reference", "dask", "cuda"}


def test_dask_is_listed_exactly_when_installed():
    import importlib.util

    has_dask = importlib.util.find_spec("dask") is not None
    has_module = importlib.util.find_spec("logsoftmax.backends.dask") is not None
    if not has_module:
        pytest.skip("the dask backend is not written yet")
    assert ("dask" in logsoftmax.backends()) == has_dask


@pytest.mark.parametrize("name", ["nope", "CPU", "", "numpy", 3])
def test_unknown_name_raises_valueerror_listing_available(name):
    def enter(n):
        with logsoftmax.use_backend(n):
            pass

    for call in (logsoftmax.set_backend, enter):
        with pytest.raises(ValueError) as info:
            call(name)
        msg = str(info.value)
        assert repr(name) in msg
        for available in logsoftmax.backends():
            assert available in msg


def test_failed_set_backend_changes_nothing(probe):
    logsoftmax.set_backend(PROBE)
    with pytest.raises(ValueError):
        logsoftmax.set_backend("nope")
    assert backends_mod.select_backend(np.zeros(2)) is probe


# --------------------------------------------------------------------------
# forcing and restoring
# --------------------------------------------------------------------------
def test_set_backend_forces_and_none_restores(probe):
    before = _default_name_for_numpy()
    logsoftmax.set_backend(PROBE)
    assert backends_mod.select_backend(np.zeros(2)) is probe
    assert backends_mod.select_backend([1.0, 2.0]) is probe
    logsoftmax.set_backend(None)
    after = _default_name_for_numpy()
    assert type(after) is type(before) and str(after) == str(before)
    if cpu_module_exists():
        assert after == "cpu"


def test_use_backend_is_a_context_manager_that_restores(probe):
    before = _default_name_for_numpy()
    with logsoftmax.use_backend(PROBE) as b:
        assert b is probe
        assert backends_mod.select_backend(np.zeros(2)) is probe
        y = logsoftmax.log_softmax(np.zeros(2, np.float32))
        np.testing.assert_array_equal(y, np.float32(-np.log(2)))
    assert str(_default_name_for_numpy()) == str(before)


def test_use_backend_restores_on_exception(probe):
    before = _default_name_for_numpy()
    with pytest.raises(RuntimeError, match="boom"):
        with logsoftmax.use_backend(PROBE):
            raise RuntimeError("boom")
    assert str(_default_name_for_numpy()) == str(before)


def test_use_backend_nests_and_beats_set_backend(probe):
    ref = backends_mod.get_backend("reference")
    logsoftmax.set_backend("reference")
    assert backends_mod.select_backend(np.zeros(2)) is ref
    with logsoftmax.use_backend(PROBE):
        assert backends_mod.select_backend(np.zeros(2)) is probe
        with logsoftmax.use_backend("reference"):
            assert backends_mod.select_backend(np.zeros(2)) is ref
        assert backends_mod.select_backend(np.zeros(2)) is probe
    assert backends_mod.select_backend(np.zeros(2)) is ref


def test_use_backend_is_local_to_its_thread(probe):
    seen = {}

    def other():
        try:
            seen["name"] = backends_mod.select_backend(np.zeros(2)).name
        except ValueError as e:  # no cpu backend yet: still not the probe
            seen["name"] = f"error: {e}"
        seen["is_probe"] = "name" in seen and seen["name"] == PROBE

    with logsoftmax.use_backend(PROBE):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["is_probe"] is False


# --------------------------------------------------------------------------
# dispatch by array type
# --------------------------------------------------------------------------
@requires_cpu
def test_numpy_arrays_go_to_cpu_by_default():
    for x in (np.zeros(3, np.float32), np.zeros((2, 2), np.float64)[::-1], [1.0, 2.0]):
        assert backends_mod.select_backend(x).name == "cpu"


@requires_cpu
def test_numpy_results_match_the_reference_backend_closely():
    x = np.random.default_rng(0).normal(size=(4, 33)).astype(np.float32)
    y_default = logsoftmax.log_softmax(x)
    with logsoftmax.use_backend("reference"):
        y_ref = logsoftmax.log_softmax(x)
    assert np.max(np.abs(y_default - y_ref)) <= 4 * np.finfo(np.float32).eps * 10


def test_dask_arrays_go_to_the_dask_backend():
    da = pytest.importorskip("dask.array")
    if "dask" not in logsoftmax.backends():
        pytest.skip("the dask backend is not available")
    x = da.from_array(np.zeros((4, 6), np.float32), chunks=(2, 6))
    assert backends_mod.select_backend(x).name == "dask"


class _FakeCudaArray:
    """Exposes ``__cuda_array_interface__`` only (a CuPy/Numba-like array)."""

    def __init__(self):
        self.shape = (2, 3)
        self.dtype = np.dtype(np.float32)
        self.__cuda_array_interface__ = {
            "shape": (2, 3), "typestr": "<f4", "data": (0, False), "version": 3,
            "strides": None,
        }


class _FakeDlpackCuda:
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


@pytest.mark.parametrize("make", [_FakeCudaArray, _FakeDlpackCuda])
def test_cuda_arrays_are_routed_to_the_cuda_backend(make):
    x = make()
    if "cuda" in logsoftmax.backends():
        assert backends_mod.select_backend(x).name == "cuda"
    else:
        # routed to "cuda", which cannot run here: the error names it
        with pytest.raises(ValueError, match="cuda"):
            backends_mod.select_backend(x)


def test_a_cpu_dlpack_array_is_not_cuda():
    class CpuDlpack:
        def __dlpack_device__(self):
            return (1, 0)  # kDLCPU

    name = _default_name_for_numpy()
    got = None
    try:
        got = backends_mod.select_backend(CpuDlpack()).name
    except ValueError as e:
        got = e
    assert str(got) == str(name)


def test_forcing_beats_array_type(probe):
    logsoftmax.set_backend(PROBE)
    assert backends_mod.select_backend(_FakeCudaArray()) is probe


# --------------------------------------------------------------------------
# import is light (checked in a fresh interpreter)
# --------------------------------------------------------------------------
_HEAVY = ("torch", "dask", "distributed", "triton", "zarr", "matplotlib", "sklearn")


def _modules_after(code: str) -> list[str]:
    script = (
        "import sys, json\n" + code + "\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_import_logsoftmax_imports_no_optional_dependency_and_no_kernels():
    mods = _modules_after("import logsoftmax")
    heavy = sorted(m for m in mods if m.split(".")[0] in _HEAVY)
    assert heavy == [], heavy
    lazy = ("logsoftmax.backends.", "logsoftmax.autograd", "logsoftmax.graph",
            "logsoftmax.driver")
    kernels = [m for m in mods if m.startswith(lazy)]
    assert kernels == [], kernels


def test_import_logsoftmax_does_not_import_numba():
    # numba loads with the first kernel (compilation is lazy, API.md)
    mods = _modules_after("import logsoftmax")
    assert not [m for m in mods if m.split(".")[0] in ("numba", "llvmlite")]


def test_listing_backends_imports_no_optional_dependency():
    # backend modules import torch/triton/dask lazily, on first use
    mods = _modules_after("import logsoftmax; logsoftmax.backends()")
    heavy = sorted({m.split(".")[0] for m in mods if m.split(".")[0] in _HEAVY})
    assert heavy == [], heavy
