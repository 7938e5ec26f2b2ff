"""The "cuda" backend's Triton kernels against the float64 oracle.

Without a GPU the kernels run in Triton's CPU interpreter: ``TRITON_INTERPRET``
defaults to 1 here, before anything imports the kernels (Triton decides at
decoration time; each pytest-xdist worker imports this module itself). On a
GPU, ``TRITON_INTERPRET=0 pytest tests/test_cuda.py`` runs the same cases on
the device (``benchmarks/gpu_check.sh``): torch tensors are then created on
``cuda`` and numpy inputs take the staging path.

The interpreter is slow (~1 ms per program and op), so shapes stay small;
tiny block sizes (``launch.tile_limits``) push short rows through the looped
online-softmax path. Larger interpreter cases are marked ``slow``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import logsoftmax  # noqa: E402
from logsoftmax.backends import select_backend  # noqa: E402

from cases import CASES, case_by_name, cases, int_inputs  # noqa: E402
from conftest import (  # noqa: E402
    FLOAT_DTYPES,
    REF,
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    assert_specials_match,
    dtype_id,
    max_err_eps,
    ref_log_softmax,
    ref_logsumexp,
)

if "cuda" not in logsoftmax.backends():
    pytest.skip("the cuda backend cannot run here", allow_module_level=True)

from logsoftmax.backends import cuda as cuda_backend  # noqa: E402
from logsoftmax.backends.cuda import kernels, launch  # noqa: E402

DEVICE = "cpu" if kernels.INTERPRETED else "cuda"
BF16 = np.dtype(ml_dtypes.bfloat16)
FORWARD = ("log_softmax", "softmax")
BACKWARD = ("log_softmax_backward", "softmax_backward")
# tiny blocks: rows longer than 16 take the looped online path, 8 lanes wide
LOOPED = dict(max_fused=16, max_fused_f64=16, loop_block=8, loop_block_f64=8)

# The default run covers every dtype for log_softmax (fwd + bwd) on every
# case, and softmax / logsumexp on every case in float32 and bfloat16; the
# remaining combinations run under `make test-slow`.
_CASES = cases(exclude=("0d", "slow"))
_INTERP_SLOW = {"2d_n5000", "special_long", "special_long_axis0", "2d_n1000_axis0"}


def _fn(name):
    return getattr(logsoftmax, name)


def _params(ops, dtypes, fast_dtypes, case_list):
    out = []
    for op in ops:
        for c in case_list:
            for dt in dtypes:
                slow = (kernels.INTERPRETED and c.name in _INTERP_SLOW) or (
                    op not in ("log_softmax", "log_softmax_backward")
                    and dt not in fast_dtypes
                )
                marks = [pytest.mark.slow] if slow else []
                pid = f"{op}-{c.name}-{dtype_id(dt)}"
                out.append(pytest.param(op, c, dt, marks=marks, id=pid))
    return out


def _to_device(a: np.ndarray):
    """A torch tensor on DEVICE with ``a``'s values (bf16 through int16 bits)."""
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(DEVICE)
    return torch.from_numpy(a).to(DEVICE)


def _to_numpy(t) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


@pytest.fixture
def cuda():
    with logsoftmax.use_backend("cuda") as b:
        yield b


# --------------------------------------------------------------------------
# the conformance grid (numpy in, numpy out, through use_backend)
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op,case,dtype", _params(FORWARD, FLOAT_DTYPES, (np.float32, BF16), _CASES)
)
def test_forward_matches_oracle(cuda, op, case, dtype):
    x = case.build(dtype)
    y = _fn(op)(x, axis=case.axis)
    assert isinstance(y, np.ndarray) and y.shape == x.shape
    assert_close_eps(y, REF[op](x, case.axis), dtype, TOL_EPS[op])


def _backward_inputs(case, dtype, op):
    diff_dst, dst = case.backward_inputs(dtype)
    if op == "softmax_backward":  # a proper softmax output for dst
        with np.errstate(all="ignore"):
            dst = case.layout_like(np.exp(dst.astype(np.float64)).astype(dtype))
    return diff_dst, dst


@pytest.mark.parametrize(
    "op,case,dtype", _params(BACKWARD, FLOAT_DTYPES, (np.float32, BF16), _CASES)
)
def test_backward_matches_oracle(cuda, op, case, dtype):
    diff_dst, dst = _backward_inputs(case, dtype, op)
    dx = _fn(op)(diff_dst, dst, axis=case.axis)
    assert isinstance(dx, np.ndarray) and dx.shape == diff_dst.shape
    assert_close_eps(dx, REF[op](diff_dst, dst, case.axis), dtype, TOL_EPS[op])


@pytest.mark.parametrize(
    "op,case,dtype", _params(("logsumexp",), FLOAT_DTYPES, (np.float32, BF16), _CASES)
)
def test_logsumexp_matches_oracle(cuda, op, case, dtype):
    x = case.build(dtype)
    r = logsoftmax.logsumexp(x, axis=case.axis)
    assert_close_eps(r, ref_logsumexp(x, case.axis), dtype, TOL_EPS["logsumexp"])


_LOOP_CASES = [
    case_by_name(n)
    for n in (
        "2d_n100",
        "3d_axis1",
        "3d_axis_neg1",
        "transposed_axis0",
        "sliced_steps",
        "negative_strides",
        "special_rows",
        "special_cols",
        "huge_rows",
        "broadcast_rows",
        "5d_permuted_axis3",
    )
]


@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(d, marks=[] if d in (np.float32, BF16) else [pytest.mark.slow])
        for d in FLOAT_DTYPES
    ],
    ids=dtype_id,
)
@pytest.mark.parametrize("case", _LOOP_CASES, ids=lambda c: c.name)
def test_looped_path_matches_oracle(cuda, case, dtype):
    """The online-softmax path (forced by tiny blocks) on short rows."""
    x = case.build(dtype)
    with launch.tile_limits(**LOOPED):
        for op in FORWARD:
            y = _fn(op)(x, axis=case.axis)
            assert_close_eps(y, REF[op](x, case.axis), dtype, TOL_EPS[op])
        r = logsoftmax.logsumexp(x, axis=case.axis)
        assert_close_eps(r, ref_logsumexp(x, case.axis), dtype, TOL_EPS["logsumexp"])
        for op in BACKWARD:
            diff_dst, dst = _backward_inputs(case, dtype, op)
            dx = _fn(op)(diff_dst, dst, axis=case.axis)
            assert_close_eps(dx, REF[op](diff_dst, dst, case.axis), dtype, TOL_EPS[op])


@pytest.mark.parametrize("dtype", (np.float32, np.float64), ids=dtype_id)
@pytest.mark.parametrize("looped", [False, True], ids=["one_pass", "looped"])
def test_softmax_backward_of_arbitrary_dst(cuda, dtype, looped):
    """benchdnn feeds any finite dst: the products must not round (TwoProduct)."""
    case = case_by_name("3d_axis1")
    diff_dst, dst = case.backward_inputs(dtype)  # dst: log-probabilities
    with launch.tile_limits(**(LOOPED if looped else {})):
        dx = logsoftmax.softmax_backward(diff_dst, dst, axis=1)
    ref = REF["softmax_backward"](diff_dst, dst, 1)
    assert_close_eps(dx, ref, dtype, TOL_EPS["softmax_backward"])


def test_looped_special_values_across_blocks(cuda):
    """Specials in a later block than the running max, and in the last lane."""
    n = 50
    rows = np.full((8, n), -1.0, np.float32)
    rows[0, 45] = np.nan  # NaN after several finite blocks
    rows[1, 3], rows[1, 47] = 100.0, np.inf  # +inf after a big finite max
    rows[2, :] = -np.inf
    rows[2, 49] = 3.0  # the only finite element is the last one
    rows[3, :] = -np.inf
    rows[4, 0], rows[4, 1:] = 0.0, -1000.0  # dominant first element
    rows[5, 10], rows[5, 40] = np.inf, np.nan  # logsumexp: NaN wins over +inf
    rows[6, 40] = 80.0  # the max grows late: earlier lanes are rescaled
    rows[7, 5] = -np.inf
    with launch.tile_limits(**LOOPED):
        y = logsoftmax.log_softmax(rows)
        s = logsoftmax.softmax(rows)
        r = logsoftmax.logsumexp(rows)
    assert_close_eps(y, ref_log_softmax(rows), np.float32, TOL_EPS["log_softmax"])
    assert_close_eps(s, REF["softmax"](rows), np.float32, TOL_EPS["softmax"])
    assert_close_eps(r, ref_logsumexp(rows), np.float32, TOL_EPS["logsumexp"])
    assert y[2, 49] == 0.0 and y[4, 0] == 0.0 and s[4, 0] == 1.0
    assert np.isnan(r[5]) and r[1] == np.inf and r[3] == -np.inf and r[2] == 3.0


@pytest.mark.parametrize("looped", [False, True], ids=["one_pass", "looped"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_exact_cases_are_exact(cuda, dtype, looped):
    """API.md: length-1 rows, one finite element, one dominant logit."""
    x = np.array(
        [[-np.inf] * 20 + [2.5] + [-np.inf] * 19, [0.0] + [-1000.0] * 39], np.float64
    )
    x = x.astype(dtype) if dtype != np.float16 else np.maximum(x, -6e4).astype(dtype)
    one = np.array([[3.0], [-7.5]], dtype)
    limits = LOOPED if looped else {}
    with launch.tile_limits(**limits):
        y, s = logsoftmax.log_softmax(x), logsoftmax.softmax(x)
        assert y[0, 20] == 0 and y[1, 0] == 0 and s[0, 20] == 1 and s[1, 0] == 1
        assert (logsoftmax.logsumexp(x) == np.array([2.5, 0.0], dtype)).all()
        y1 = logsoftmax.log_softmax(one)
        assert (y1 == 0).all()
        assert (logsoftmax.log_softmax_backward(np.ones_like(one), y1) == 0).all()


# --------------------------------------------------------------------------
# out=, in place, mixed dtypes, determinism
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_out_and_in_place_are_bit_identical(cuda, dtype):
    case = case_by_name("3d_axis1")
    x = case.build(dtype)
    fresh = logsoftmax.log_softmax(x, axis=1)
    out = np.empty(x.shape[::-1], dtype).transpose(2, 1, 0)  # strided out=
    assert logsoftmax.log_softmax(x, axis=1, out=out) is out
    assert_bitwise_equal(out, fresh)
    xi = x.copy()
    assert logsoftmax.log_softmax(xi, axis=1, out=xi) is xi
    assert_bitwise_equal(xi, fresh)
    dd, dst = case.backward_inputs(dtype)
    ref = logsoftmax.log_softmax_backward(dd, dst, axis=1)
    for target in ("diff_dst", "dst"):
        a, b = dd.copy(), dst.copy()
        o = a if target == "diff_dst" else b
        assert logsoftmax.log_softmax_backward(a, b, axis=1, out=o) is o
        assert_bitwise_equal(o, ref)


@pytest.mark.parametrize("looped", [False, True], ids=["one_pass", "looped"])
def test_in_place_torch_keeps_the_tensor(cuda, looped):
    x = _to_device(case_by_name("2d_n100").build(np.float32))
    fresh = logsoftmax.softmax(x)
    with launch.tile_limits(**(LOOPED if looped else {})):
        fresh_l = logsoftmax.softmax(x)
        ptr = x.data_ptr()
        y = logsoftmax.softmax(x, out=x)
    assert y is x and x.data_ptr() == ptr
    assert_bitwise_equal(_to_numpy(x), _to_numpy(fresh_l))
    fresh_f64 = _to_numpy(fresh_l).astype(np.float64)
    assert_close_eps(_to_numpy(fresh), fresh_f64, np.float32, 4)
    dd = _to_device(np.random.default_rng(3).normal(size=x.shape).astype(np.float32))
    ref = logsoftmax.softmax_backward(dd, x)
    got = logsoftmax.softmax_backward(dd, x, out=dd)
    assert got is dd
    assert_bitwise_equal(_to_numpy(dd), _to_numpy(ref))


@pytest.mark.parametrize(
    "src,dst",
    [
        (np.float32, BF16),
        (np.float32, np.float16),
        (BF16, np.float32),
        (np.float16, np.float32),
        (np.float64, np.float32),
        (np.float32, np.float64),
    ],
    ids=lambda d: dtype_id(d),
)
def test_mixed_result_dtype(cuda, src, dst):
    """dtype=: computed at the input's precision, rounded once to ``dtype``."""
    case = case_by_name("special_rows")
    x = case.build(src)
    ref = ref_log_softmax(x)
    y = logsoftmax.log_softmax(x, dtype=dst)
    assert y.dtype == np.dtype(dst)
    assert_specials_match(y, ref)
    if np.dtype(src) == np.float64:
        # float64 input, float32 result: one rounding of a float64 result
        assert_close_eps(y, ref, dst, 1.0)
    elif np.dtype(dst).itemsize > np.dtype(src).itemsize:
        # a wider result holds the computed value itself: the input's bound
        assert max_err_eps(y, ref, np.float32) <= TOL_EPS["log_softmax"]
    else:
        assert_close_eps(y, ref, dst, TOL_EPS["log_softmax"])
    dd, d = case.backward_inputs(src)
    g = logsoftmax.log_softmax_backward(dd, d, dtype=dst)
    assert g.dtype == np.dtype(dst)
    with logsoftmax.use_backend("reference"):
        g_ref = logsoftmax.log_softmax_backward(dd, d, dtype=np.float64)
    narrower = dst if np.dtype(dst).itemsize <= np.dtype(src).itemsize else src
    assert max_err_eps(g, g_ref, narrower) <= TOL_EPS["log_softmax_backward"]


def test_deterministic(cuda):
    x = case_by_name("2d_n100").build(np.float32)
    a = logsoftmax.log_softmax(x)
    b = logsoftmax.log_softmax(x)
    assert_bitwise_equal(a, b)


def test_layout_does_not_change_bits(cuda):
    """A row's arithmetic depends on its length only, not on strides."""
    x = case_by_name("2d_n100").build(np.float32)
    contiguous = logsoftmax.log_softmax(x, axis=1)
    transposed = logsoftmax.log_softmax(np.asfortranarray(x), axis=1)
    flipped = logsoftmax.log_softmax(x[::-1], axis=1)[::-1]
    assert_bitwise_equal(transposed, contiguous)
    assert_bitwise_equal(flipped, contiguous)


def test_integer_input_promotes_to_float32(cuda):
    x = int_inputs(np.int32)
    y = logsoftmax.log_softmax(x)
    assert y.dtype == np.float32
    assert_close_eps(y, ref_log_softmax(x), np.float32, TOL_EPS["log_softmax"])
    t = torch.from_numpy(int_inputs(np.int16)).to(DEVICE)
    yt = logsoftmax.log_softmax(t)
    assert yt.dtype == torch.float32


# --------------------------------------------------------------------------
# array types: torch in/out, numpy in/out, zero-copy
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    "view",
    ["contiguous", "transposed", "sliced", "expanded"],
)
def test_torch_tensors(cuda, dtype, view):
    base = np.random.default_rng(7).normal(0, 3, size=(6, 40)).astype(dtype)
    t = _to_device(base)
    if view == "transposed":
        t, axis = t.t(), 0
    elif view == "sliced":
        t, axis = t[::2, 3::3], 1
    elif view == "expanded":
        t, axis = t[:1].expand(5, 40), 1
    else:
        axis = 1
    x = _to_numpy(t.contiguous())
    y = logsoftmax.log_softmax(t, axis=axis)
    assert isinstance(y, torch.Tensor) and y.device == t.device and y.shape == t.shape
    tol = TOL_EPS["log_softmax"]
    assert_close_eps(_to_numpy(y), ref_log_softmax(x, axis), dtype, tol)
    out = torch.empty_like(t.contiguous())
    assert logsoftmax.log_softmax(t, axis=axis, out=out) is out
    assert_bitwise_equal(_to_numpy(out), _to_numpy(y))
    r = logsoftmax.logsumexp(t, axis=axis)
    assert isinstance(r, torch.Tensor)
    assert_close_eps(_to_numpy(r), ref_logsumexp(x, axis), dtype, TOL_EPS["logsumexp"])


def test_torch_dispatch_without_forcing():
    """A CUDA tensor picks the cuda backend by type (GPU runs only)."""
    if DEVICE != "cuda":
        pytest.skip("needs a CUDA device")
    t = torch.randn(4, 9, device="cuda")
    assert select_backend(t).name == "cuda"
    y = logsoftmax.log_softmax(t)
    assert isinstance(y, torch.Tensor) and y.is_cuda
    torch.testing.assert_close(y, torch.log_softmax(t, -1))


def test_numpy_out_is_written_in_place(cuda):
    x = case_by_name("negative_strides").build(BF16)
    out = np.zeros(x.shape[::-1], BF16).T[::-1]  # negative-stride out
    got = logsoftmax.log_softmax(x, out=out)
    assert got is out
    assert_close_eps(out, ref_log_softmax(x), BF16, TOL_EPS["log_softmax"])


def test_numpy_input_is_not_copied_in_the_interpreter(cuda):
    if not kernels.INTERPRETED:
        pytest.skip("numpy arrays are staged through the device on a GPU")
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[::-1, ::2]
    op = cuda_backend._numpy_span(x)
    assert op.tensor.data_ptr() == x[-1:, :1].__array_interface__["data"][0]
    assert op.offset == (x.__array_interface__["data"][0] - op.tensor.data_ptr()) // 4
    assert op.strides == (-6, 2) and op.shape == (4, 3)
    assert np.shares_memory(op.tensor.numpy(), x)


def test_readonly_broadcast_input(cuda):
    x = np.broadcast_to(np.linspace(-3, 3, 37, dtype=np.float32), (3, 37))
    assert not x.flags.writeable
    y = logsoftmax.log_softmax(x)
    assert_close_eps(y, ref_log_softmax(x), np.float32, TOL_EPS["log_softmax"])


def test_byteswapped_numpy_input(cuda):
    x = np.linspace(-3, 3, 12).reshape(3, 4).astype(">f4")
    assert cuda.dtype_of(x) == np.float32
    y = cuda.log_softmax(x, 1, None, np.dtype(np.float32))
    assert_close_eps(y, ref_log_softmax(x.astype(np.float32), 1), np.float32, 4)


@pytest.mark.parametrize(
    "tdt,ndt",
    [
        ("float32", np.float32),
        ("bfloat16", BF16),
        ("float16", np.float16),
        ("float64", np.float64),
        ("int64", np.int64),
        ("bool", np.bool_),
    ],
)
def test_dtype_of_maps_torch_to_numpy(cuda, tdt, ndt):
    t = torch.zeros(2, dtype=getattr(torch, tdt))
    assert cuda.dtype_of(t) == np.dtype(ndt)
    if np.dtype(ndt).kind == "f":
        cast = cuda.astype(torch.zeros(2, dtype=torch.int32), np.dtype(ndt))
        assert cast.dtype == t.dtype


def test_complex_tensor_is_rejected(cuda):
    t = torch.zeros(3, dtype=torch.complex64)
    with pytest.raises(TypeError, match="complex64"):
        logsoftmax.log_softmax(t)


# --------------------------------------------------------------------------
# logsumexp over several axes
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "axis,keepdims",
    [(None, False), ((0, 2), False), ((1, 2), True), ((0, 1, 2), True), ((), False)],
)
@pytest.mark.parametrize("view", ["contiguous", "permuted"])
def test_logsumexp_axes(cuda, axis, keepdims, view):
    x = np.random.default_rng(11).normal(0, 4, size=(3, 5, 7)).astype(np.float32)
    if view == "permuted":
        x = x.transpose(1, 2, 0)[:, ::-1]
    x[0, 0, 0] = -np.inf
    r = logsoftmax.logsumexp(x, axis=axis, keepdims=keepdims)
    expected = ref_logsumexp(x, axis if axis != () else (), keepdims)
    assert r.shape == expected.shape
    assert_close_eps(r, expected, np.float32, TOL_EPS["logsumexp"])


def test_logsumexp_empty_and_zero_length(cuda):
    x = np.zeros((3, 0), np.float32)
    assert (logsoftmax.logsumexp(x, axis=1) == -np.inf).all()
    assert logsoftmax.logsumexp(x, axis=0).shape == (0,)
    t = torch.zeros(0, 4, device=DEVICE, dtype=torch.bfloat16)
    r = logsoftmax.logsumexp(t, axis=0, keepdims=True)
    assert r.shape == (1, 4) and bool((r == float("-inf")).all())


# --------------------------------------------------------------------------
# dispatch and availability
# --------------------------------------------------------------------------
class _CudaInterfaceStandIn:
    """A CPU object that claims CUDA memory (routing only; never launched)."""

    __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (0, False)}
    shape = (2, 3)
    dtype = np.dtype(np.float32)


class _DLPackStandIn:
    def __init__(self, device_type: int):
        self._dev = device_type

    def __dlpack_device__(self):
        return (self._dev, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("routing must not touch the data")


def test_select_backend_routes_cuda_arrays():
    assert select_backend(_CudaInterfaceStandIn()).name == "cuda"
    assert select_backend(_DLPackStandIn(2)).name == "cuda"  # kDLCUDA
    assert select_backend(_DLPackStandIn(13)).name == "cuda"  # kDLCUDAManaged
    cuda = select_backend(_DLPackStandIn(2))
    assert select_backend(_DLPackStandIn(1)).name == "cpu"  # kDLCPU
    assert select_backend(np.zeros(3)).name == "cpu"
    assert select_backend(torch.zeros(3)).name == "cpu"
    assert cuda.asarray(_CudaInterfaceStandIn()).__class__ is _CudaInterfaceStandIn
    assert cuda.dtype_of(_CudaInterfaceStandIn()) == np.float32


def test_foreign_results_come_back_through_from_dlpack(monkeypatch):
    """An allocated result goes back through the caller's library."""
    import types

    calls = []
    fake = types.ModuleType("fakecupy")
    fake.from_dlpack = lambda t: calls.append(t) or ("wrapped", t)
    monkeypatch.setitem(__import__("sys").modules, "fakecupy", fake)
    stand_in = type("ndarray", (), {"__module__": "fakecupy.core"})()
    t = torch.zeros(3)
    assert cuda_backend._torch_to_foreign(stand_in, t) == ("wrapped", t)
    assert calls == [t]


def test_available_needs_a_driver_or_the_interpreter(monkeypatch):
    cls = cuda_backend.CudaBackend
    monkeypatch.setattr(cuda_backend, "_driver_present", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not cls.available()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cls.available()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(cuda_backend, "_driver_present", lambda: True)
    assert cls.available()


def test_no_device_and_no_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(kernels, "INTERPRETED", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        cuda_backend._Call([np.zeros(3, np.float32)])


def test_tile_limits_validate_and_plan_by_length_only():
    with pytest.raises(ValueError, match="loop_block=3"):
        with launch.tile_limits(loop_block=3):
            pass
    assert launch.row_plan(1000, False) == launch.RowPlan(False, 1024)
    assert launch.row_plan(32768, False) == launch.RowPlan(False, 32768)
    assert launch.row_plan(32769, False) == launch.RowPlan(True, 8192)
    assert launch.row_plan(16384, True) == launch.RowPlan(True, 2048)
    assert launch.row_plan(0, False) == launch.RowPlan(False, 1)


def test_launch_plans_are_kept_per_block_table(cuda):
    """A cached plan is reused only under the table that made it."""
    x = _to_device(case_by_name("2d_n100").build(np.float32))
    launch._PLANS.clear()
    y = logsoftmax.log_softmax(x)
    assert logsoftmax.log_softmax(x).equal(y) and len(launch._PLANS) == 1
    with launch.tile_limits(**LOOPED):
        y_looped = logsoftmax.log_softmax(x)
    assert len(launch._PLANS) == 2
    looped = sorted(plan.meta["LOOPED"] for plan in launch._PLANS.values())
    assert looped == [False, True]
    with launch.tile_limits(max_warps=2):
        logsoftmax.log_softmax(x)
    assert sorted(p.meta["num_warps"] for p in launch._PLANS.values()) == [2, 4, 4]
    assert_close_eps(_to_numpy(y_looped), _to_numpy(y).astype(np.float64), np.float32, 4)


def test_warps_follow_the_tile_and_the_input_width(cuda):
    """Tiles of 4096 elements take 4 warps for 16-bit inputs, 8 for float32
    (measured on an H200: docs/cuda.md); 16 from 16384 elements on."""
    warps = {}
    for dt in (np.float32, ml_dtypes.bfloat16, np.float16):
        for shape in ((64, 1000), (2, 32000)):
            launch._PLANS.clear()
            logsoftmax.log_softmax(_to_device(np.ones(shape, dtype=dt)))
            (plan,) = launch._PLANS.values()
            warps[np.dtype(dt).name, shape] = (
                plan.meta["BLOCK_R"] * plan.meta["BLOCK_N"],
                plan.meta["num_warps"],
            )
    assert warps == {
        ("float32", (64, 1000)): (4096, 8),
        ("bfloat16", (64, 1000)): (4096, 4),
        ("float16", (64, 1000)): (4096, 4),
        ("float32", (2, 32000)): (32768, 16),
        ("bfloat16", (2, 32000)): (32768, 16),
        ("float16", (2, 32000)): (32768, 16),
    }


class _ClaimsCuda(torch.Tensor):
    """A CPU tensor that says it is on a GPU: the interpreter's stand-in for a
    CUDA tensor at the front door's fast path (the kernels run on CPU
    tensors there)."""

    @property
    def is_cuda(self):
        return True


def _unforced_tensor(a: np.ndarray):
    t = _to_device(a)
    return t if DEVICE == "cuda" else t.as_subclass(_ClaimsCuda)


def test_cuda_tensors_take_the_front_doors_fast_path(monkeypatch):
    """An allocating call on CUDA tensors goes from the front door straight
    to the cuda backend, without the general path's backend selection, and
    gives the general path's bits; a forced backend, ``out=``, ``dtype=``,
    an integer tensor, an axis out of range or mismatched backward operands
    take the general path (which raises where it must)."""
    from logsoftmax import _api

    general = []
    real_select = _api.select_backend

    def select(x):
        general.append(x)
        return real_select(x)

    monkeypatch.setattr(_api, "select_backend", select)
    rng = np.random.default_rng(3)
    x = _unforced_tensor((rng.standard_normal((5, 37)) * 3).astype(np.float32))
    dd = _unforced_tensor(rng.standard_normal((5, 37)).astype(np.float32))
    for fwd, bwd in zip(FORWARD, BACKWARD):
        for axis in (1, 0, -1):
            y = _fn(fwd)(x, axis=axis)
            g = _fn(bwd)(dd, y, axis=axis)
            assert general == []
            with logsoftmax.use_backend("cuda"):  # forced: the general path
                y_general = _fn(fwd)(x, axis=axis)
                g_general = _fn(bwd)(dd, y_general, axis=axis)
            assert len(general) == 2
            general.clear()
            assert torch.equal(y.view(torch.int32), y_general.view(torch.int32))
            assert torch.equal(g.view(torch.int32), g_general.view(torch.int32))
    logsoftmax.log_softmax(x, out=torch.empty_like(x))
    logsoftmax.log_softmax(x, dtype=np.float64)
    ints = _unforced_tensor(np.arange(6, dtype=np.int64).reshape(2, 3))
    assert logsoftmax.log_softmax(ints).dtype == torch.float32  # promoted
    with pytest.raises(IndexError, match="axis=2"):
        logsoftmax.log_softmax(x, axis=2)
    with pytest.raises(ValueError, match="shape"):
        logsoftmax.log_softmax_backward(dd, x[:, :5])
    with pytest.raises(TypeError, match="dtype"):
        logsoftmax.log_softmax_backward(dd, x.double())
    assert len(general) == 6


def test_device_guard_counts_gpus_at_the_first_launch_only(monkeypatch):
    """Only with more than one visible GPU can a tensor's device differ from
    the current one; the count is asked once, at the first GPU launch (not
    when launch.py is imported)."""
    asked = []

    def count():
        asked.append(1)
        return gpus

    monkeypatch.setattr(launch.torch.cuda, "device_count", count)
    monkeypatch.setattr(launch.torch.cuda, "current_device", lambda: 0)
    for gpus, want in ((1, [False, False]), (2, [False, True])):
        monkeypatch.setattr(launch, "_MULTI_GPU", None)
        asked.clear()
        assert [launch._elsewhere(0), launch._elsewhere(1)] == want
        assert asked == [1]


def test_torch_out_partially_overlapping_an_input_is_refused(cuda):
    """The overlap check reads torch tensors' pointers (not an interface)."""
    buf = _to_device(np.arange(40, dtype=np.float32))
    x, out = buf[:32].view(4, 8), buf[8:40].view(4, 8)
    before = buf.clone()
    with pytest.raises(ValueError, match="out partially overlaps x"):
        logsoftmax.log_softmax(x, out=out)
    assert buf.equal(before)
    dd, y = buf[:32].view(4, 8), logsoftmax.log_softmax(buf[:32].view(4, 8))
    with pytest.raises(ValueError, match="out partially overlaps diff_dst"):
        logsoftmax.log_softmax_backward(dd, y, out=out)
    assert buf.equal(before)
    assert logsoftmax.log_softmax(x, out=x) is x  # exactly an input: in place


def test_geometry_merges_and_sorts_dimensions():
    t = torch.zeros(2, 3, 4, 5)
    op = launch.Operand.of(t)
    g = launch._geometry([op, op], axis=1)
    assert g.n == 3 and g.axis_strides == (20, 20)
    assert g.batch == [(2, (60, 60)), (20, (1, 1))]  # (4, 5) merged
    p = launch.Operand.of(t.permute(3, 1, 0, 2))
    g = launch._geometry([p], axis=0)
    assert g.n == 5 and g.batch == [(24, (5,))]  # (2, 3, 4) merged, axis stride 1


def test_many_unmergeable_dimensions(cuda):
    """Rank 6 with every non-axis dimension permuted: the extra-dims loop."""
    base = np.random.default_rng(5).normal(size=(2, 3, 2, 3, 2, 5)).astype(np.float32)
    x = base.transpose(4, 2, 0, 5, 3, 1)[:, :, ::-1]
    y = logsoftmax.log_softmax(x, axis=3)
    assert_close_eps(y, ref_log_softmax(x, 3), np.float32, TOL_EPS["log_softmax"])


# --------------------------------------------------------------------------
# slow: longer rows through the interpreter with the default block table
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(d, marks=[] if d == np.float32 else [pytest.mark.slow])
        for d in FLOAT_DTYPES
    ],
    ids=dtype_id,
)
@pytest.mark.parametrize(
    "shape,axis",
    [((3, 40000), 1), ((40000, 2), 0), ((2, 32768), 1), ((1, 300000), 1)],
    ids=["3x40000", "40000x2_axis0", "2x32768", "1x300000"],
)
def test_long_rows_default_blocks(cuda, shape, axis, dtype):
    """The default table: one pass up to 32768, then looped 8192-wide blocks."""
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, size=shape).astype(dtype)
    for op in FORWARD:
        y = _fn(op)(x, axis=axis)
        assert_close_eps(y, REF[op](x, axis), dtype, TOL_EPS[op])
    r = logsoftmax.logsumexp(x, axis=axis)
    assert_close_eps(r, ref_logsumexp(x, axis), dtype, TOL_EPS["logsumexp"])
    dd = rng.normal(size=shape).astype(dtype)
    dx = logsoftmax.log_softmax_backward(dd, y, axis=axis)
    ref = REF["log_softmax_backward"](dd, y, axis)
    assert_close_eps(dx, ref, dtype, TOL_EPS["log_softmax_backward"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", [c for c in CASES if "slow" in c.tags], ids=lambda c: c.name
)
def test_slow_cases_float32(cuda, case):
    x = case.build(np.float32)
    y = logsoftmax.log_softmax(x, axis=case.axis)
    tol = TOL_EPS["log_softmax"]
    assert_close_eps(y, ref_log_softmax(x, case.axis), np.float32, tol)


def test_bench_without_cuda_exits_cleanly(capsys, tmp_path, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: gpu_check.sh runs the benchmark")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_cuda.py"
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "bench_cuda", bench)  # dataclasses
    spec.loader.exec_module(bench)
    names = {(p.name, p.direction, p.sdt) for p in bench.problems(quick=False)}
    assert ("perf11", "bwd", "f32") in names and ("32768x128", "fwd", "bf16") in names
    assert len(names) == 12 + 4 * 3 * 2
    assert bench.main(["--out", str(tmp_path)]) == 0
    assert "no CUDA device" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------
# autograd: a Tensor holding a torch tensor, through the node
# --------------------------------------------------------------------------
def _spy(orig, name, calls):
    def spy(self, *args):
        calls.append(name)
        return orig(self, *args)

    return spy


@pytest.mark.parametrize("looped", [False, True], ids=["one_pass", "looped"])
def test_autograd_tensor_with_torch_data(cuda, looped, monkeypatch):
    """``tensor(torch_tensor)`` -> nn.functional.log_softmax -> backward."""
    pytest.importorskip("logsoftmax.nn.functional")
    calls = []
    for name in ("log_softmax", "log_softmax_backward"):
        orig = getattr(cuda_backend.CudaBackend, name)
        monkeypatch.setattr(cuda_backend.CudaBackend, name, _spy(orig, name, calls))
    rng = np.random.default_rng(2)
    x_np = rng.normal(0, 2, size=(5, 40)).astype(np.float32)
    w_np = rng.normal(size=(5, 40)).astype(np.float32)
    t = logsoftmax.tensor(_to_device(x_np), requires_grad=True)
    assert isinstance(t.data, torch.Tensor)
    with launch.tile_limits(**(LOOPED if looped else {})):
        y = logsoftmax.nn.functional.log_softmax(t, axis=1)
        assert isinstance(y.data, torch.Tensor) and y.data.device.type == DEVICE
        loss = (y * logsoftmax.tensor(_to_device(w_np))).sum()
        loss.backward()
    assert isinstance(t.grad.data, torch.Tensor)
    assert calls == ["log_softmax", "log_softmax_backward"]  # the fused node path
    # torch's own autograd in float64 as the oracle
    xt = torch.from_numpy(x_np.astype(np.float64)).requires_grad_(True)
    y_ref = torch.log_softmax(xt, 1)
    (y_ref * torch.from_numpy(w_np.astype(np.float64))).sum().backward()
    assert_close_eps(_to_numpy(y.data), y_ref.detach().numpy(), np.float32, 4)
    assert_close_eps(_to_numpy(t.grad.data), xt.grad.numpy(), np.float32, 8)


def test_bench_problem_runs_in_the_interpreter(cuda, monkeypatch):
    """The benchmark's problem builder and providers, on a tiny CPU problem."""
    if not kernels.INTERPRETED:
        pytest.skip("gpu_check.sh runs the real benchmark")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_cuda.py"
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "bench_cuda", bench)
    spec.loader.exec_module(bench)
    probs = [
        bench.Problem("nhwc", "fwd", "f32", "f32", (2, 8, 3, 5), 1, "acdb"),
        bench.Problem("mixed", "fwd", "f32", "bf16", (4, 33), 1, "ab"),
        bench.Problem("bwd", "bwd", "bf16", "bf16", (6, 20), 1, "ab"),
    ]
    rows = [bench.run_problem(torch, logsoftmax, p, 1, device="cpu") for p in probs]
    for row in rows:
        assert set(row.ms) == {"logsoftmax", "torch", "copy"}
        assert row.max_abs_diff < 0.05  # agrees with torch (bf16 rounding)
    assert [r.bytes for r in rows] == [240 * 8, 132 * 6, 120 * 6]
    x = bench._make(torch, probs[0], "f32", torch.Generator().manual_seed(0), "cpu")
    assert x.shape == (2, 8, 3, 5) and x.stride(1) == 1  # channels-last
    md = bench.table(rows)
    assert "| nhwc | fwd | f32 | 2x8x3x5 | 1 | acdb |" in md
    assert "| mixed | fwd | f32->bf16 |" in md
