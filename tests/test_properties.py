"""Property-based checks (hypothesis) of the functional API, per backend.

Each property runs a bounded number of examples (``max_examples``) with no
deadline, so the file stays fast on a 2-core machine. The backend is forced
inside the test body (not with a fixture: hypothesis re-runs the body, not
the fixture).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

import logsoftmax  # noqa: E402
from conftest import (  # noqa: E402
    BACKEND_NAMES,
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    backend_available,
    cpu_module_exists,
    dtype_id,
    eps,
    ref_log_softmax,
    ref_log_softmax_backward,
    ref_softmax_backward,
)

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # reproducible in CI; failures print the example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _available(name: str) -> bool:
    return cpu_module_exists() if name == "cpu" else backend_available(name)


backend_names = pytest.mark.parametrize(
    "backend_name",
    [
        pytest.param(
            n, marks=pytest.mark.skipif(not _available(n), reason=f"no {n} backend")
        )
        for n in BACKEND_NAMES
    ],
)


@st.composite
def row_arrays(draw, dtype=F32, lo=-80.0, hi=80.0, max_n=200):
    """A 1-3 D array of finite values and one of its axes."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    shape = [draw(st.integers(1, 4)) for _ in range(ndim)]
    shape[axis] = draw(st.integers(1, max_n))
    # elements as float32 (exact in every wider dtype), then rounded once
    elems = st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False)
    x = draw(hnp.arrays(np.float32, tuple(shape), elements=elems, fill=elems))
    if draw(st.booleans()):  # a strided view of the same values
        x = np.flip(x, axis=axis)
    return x.astype(dtype), axis


@st.composite
def grid_arrays(draw):
    """Values on a 1/64 grid in [-64, 64] and an integer shift c, so that
    x + c is exact in float32 and in every row x - max is bit-identical."""
    n = draw(st.integers(1, 200))
    rows = draw(st.integers(1, 4))
    ints = draw(hnp.arrays(np.int32, (rows, n), elements=st.integers(-4096, 4096)))
    c = draw(st.integers(-2**16, 2**16))
    return ints.astype(np.float32) / np.float32(64), np.float32(c)


@backend_names
@SETTINGS
@given(data=grid_arrays())
def test_shift_invariance(backend_name, data):
    x, c = data
    xs = x + c
    np.testing.assert_array_equal(xs - c, x)  # the shift is exact
    with logsoftmax.use_backend(backend_name):
        y, ys = logsoftmax.log_softmax(x), logsoftmax.log_softmax(xs)
        lse, lses = logsoftmax.logsumexp(x, axis=-1), logsoftmax.logsumexp(xs, axis=-1)
    tol = TOL_EPS["log_softmax"]
    ref = ref_log_softmax(x)
    assert_close_eps(y, ref, F32, tol)
    assert_close_eps(ys, ref, F32, tol)
    bound = 2 * tol * eps(F32) * np.maximum(1, np.abs(y))
    assert np.all(np.abs(ys.astype(np.float64) - y) <= bound)
    # logsumexp shifts with c (up to the rounding of the larger result)
    d = np.abs((lses.astype(np.float64) - c) - lse)
    bound = 2 * TOL_EPS["logsumexp"] * eps(F32) * np.maximum(1, np.abs(lses))
    assert np.all(d <= bound)


@backend_names
@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@SETTINGS
@given(data=st.data())
def test_probabilities_sum_to_one(backend_name, dtype, data):
    x, axis = data.draw(row_arrays(dtype))
    with logsoftmax.use_backend(backend_name):
        y = logsoftmax.log_softmax(x, axis)
        s = logsoftmax.softmax(x, axis)
    total = np.sum(np.exp(y.astype(np.float64)), axis=axis)
    # each y_i is within tol*eps*max(1,|y_i|); sum_i p_i*max(1,|y_i|) <= 1 + 1/e
    bound = 1.4 * TOL_EPS["log_softmax"] * eps(dtype) + x.shape[axis] * 1e-15
    assert np.all(np.abs(total - 1) <= bound), np.abs(total - 1).max()
    # softmax values carry a relative error of the same order as exp(y)'s
    total_s = np.sum(s.astype(np.float64), axis=axis)
    bound_s = 2 * TOL_EPS["softmax"] * eps(dtype) + x.shape[axis] * 1e-15
    assert np.all(np.abs(total_s - 1) <= bound_s), np.abs(total_s - 1).max()


@backend_names
@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=dtype_id)
@SETTINGS
@given(data=st.data())
def test_softmax_is_exp_of_log_softmax(backend_name, dtype, data):
    x, axis = data.draw(row_arrays(dtype, lo=-30, hi=30))
    with logsoftmax.use_backend(backend_name):
        y = logsoftmax.log_softmax(x, axis).astype(np.float64)
        s = logsoftmax.softmax(x, axis).astype(np.float64)
    # |exp(y) - exp(y_ref)| <= p*tol*eps*max(1,|y|) <= tol*eps (p*|y| <= 1/e)
    e = eps(F32) if dtype in (BF16, F16) else eps(dtype)
    bound = (TOL_EPS["softmax"] + TOL_EPS["log_softmax"]) * e
    if dtype in (BF16, F16):  # both results are rounded once to the dtype
        bound += eps(dtype) * (np.abs(s) + np.exp(y) * np.maximum(1, np.abs(y)))
    assert np.all(np.abs(s - np.exp(y)) <= bound)


@backend_names
@pytest.mark.parametrize("dtype", [F32, BF16, F16, F64], ids=dtype_id)
@SETTINGS
@given(data=st.data())
def test_in_place_equals_out_of_place_bitwise(backend_name, dtype, data):
    x, axis = data.draw(row_arrays(dtype))
    op = data.draw(st.sampled_from(["log_softmax", "softmax", "lsm_bwd", "sm_bwd"]))
    with logsoftmax.use_backend(backend_name):
        if op in ("log_softmax", "softmax"):
            fn = getattr(logsoftmax, op)
            y = fn(x, axis)
            xi = x.copy()
            assert fn(xi, axis, out=xi) is xi
            assert_bitwise_equal(xi, y)
        else:
            fn = logsoftmax.log_softmax_backward if op == "lsm_bwd" else (
                logsoftmax.softmax_backward
            )
            dst = (logsoftmax.log_softmax if op == "lsm_bwd" else logsoftmax.softmax)(
                x, axis
            )
            dd = np.flip(x, axis=axis) / np.asarray(80, dtype)
            g = fn(dd, dst, axis)
            which = data.draw(st.sampled_from(["diff_dst", "dst"]))
            dd2, dst2 = dd.copy(), dst.copy()
            target = dd2 if which == "diff_dst" else dst2
            assert fn(dd2, dst2, axis, out=target) is target
            assert_bitwise_equal(target, g)


@backend_names
@pytest.mark.parametrize("dtype", [F32, F64, BF16], ids=dtype_id)
@SETTINGS
@given(data=st.data())
def test_backward_matches_the_float64_oracle(backend_name, dtype, data):
    x, axis = data.draw(row_arrays(dtype, lo=-20, hi=20))
    dd_vals = data.draw(
        hnp.arrays(np.float32, x.shape,
                   elements=st.floats(-10, 10, width=32, allow_nan=False))
    )
    dd = dd_vals.astype(dtype)
    dst = ref_log_softmax(x, axis).astype(np.float64).astype(dtype)
    sm = np.exp(dst.astype(np.float64)).astype(dtype)
    with logsoftmax.use_backend(backend_name):
        g = logsoftmax.log_softmax_backward(dd, dst, axis)
        gs = logsoftmax.softmax_backward(dd, sm, axis)
    # the bound scales with the cancellation in diff_dst - p * sum(diff_dst)
    for got, ref, name, p_s in (
        (g, ref_log_softmax_backward(dd, dst, axis), "log_softmax_backward",
         np.exp(dst.astype(np.float64)) * np.abs(dd.astype(np.float64)).sum(
             axis=axis, keepdims=True)),
        (gs, ref_softmax_backward(dd, sm, axis), "softmax_backward",
         sm.astype(np.float64) * (np.abs(dd.astype(np.float64))
                                  + np.abs(dd.astype(np.float64) * sm).sum(
                                      axis=axis, keepdims=True))),
    ):
        e = eps(F32) if dtype == BF16 else eps(dtype)
        ref = np.asarray(ref, np.float64)
        err = np.abs(got.astype(np.float64) - ref)
        bound = TOL_EPS[name] * e * np.maximum(np.maximum(1, np.abs(ref)), p_s)
        if dtype == BF16:
            bound = bound + 0.5 * eps(BF16) * np.abs(ref) * 2
        assert np.all(err <= bound), (name, float((err / bound).max()))


@backend_names
@SETTINGS
@given(data=row_arrays(F32, lo=-(2.0**99), hi=2.0**99))
def test_logsumexp_is_at_least_the_max(backend_name, data):
    x, axis = data
    with logsoftmax.use_backend(backend_name):
        r = logsoftmax.logsumexp(x, axis=axis)
    m = np.max(x, axis=axis)
    assert np.all(r >= m)
    # ... and at most max + log(n)
    n = x.shape[axis]
    slack = TOL_EPS["logsumexp"] * eps(F32) * np.maximum(1, np.abs(m) + np.log(n))
    assert np.all(r.astype(np.float64) <= m + np.log(n) + slack)


@backend_names
@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=dtype_id)
@SETTINGS
@given(
    dd=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
        elements=st.floats(-1e4, 1e4, width=32, allow_nan=False),
    ),
    axis_seed=st.integers(0, 2),
)
def test_backward_of_length_one_rows_is_exactly_zero(
    backend_name, dtype, dd, axis_seed
):
    axis = axis_seed % dd.ndim
    dd = np.expand_dims(dd, axis).astype(dtype)  # length 1 along axis
    with logsoftmax.use_backend(backend_name):
        g = logsoftmax.log_softmax_backward(dd, np.zeros_like(dd), axis)
        gs = logsoftmax.softmax_backward(dd, np.ones_like(dd), axis)
        y = logsoftmax.log_softmax(dd, axis)
    assert np.all(g.astype(np.float64) == 0)
    assert np.all(gs.astype(np.float64) == 0)
    assert np.all(y.astype(np.float64) == 0)
