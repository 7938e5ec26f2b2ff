"""Conformance of the functional API with API.md sections 1 and 2.

One parametrised suite over backend x dtype x case (see ``cases.py``), plus
one test per rule of the contract. Every expected value comes from the
oracle in ``conftest.py`` (float64 / long double, computed here) or is
written out by hand; nothing is compared with the library's own reference
backend.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import logsoftmax
from cases import INT_DTYPES, Case, case_by_name, cases, int_inputs, special_rows
from conftest import (
    FLOAT_DTYPES,
    REF,
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    backward_scale,
    dtype_id,
    max_err_eps,
    ref_log_softmax,
    ref_logsumexp,
    ref_softmax,
)

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)

FORWARD = {"log_softmax": logsoftmax.log_softmax, "softmax": logsoftmax.softmax}
BACKWARD = {
    "log_softmax_backward": logsoftmax.log_softmax_backward,
    "softmax_backward": logsoftmax.softmax_backward,
}
ALL_AXIS_OPS = {**FORWARD, **BACKWARD}

dtype_params = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
fwd_params = pytest.mark.parametrize("op", list(FORWARD))
bwd_params = pytest.mark.parametrize("op", list(BACKWARD))


def _case_params(selected: list[Case]):
    return [
        pytest.param(c, id=c.name, marks=[pytest.mark.slow] if "slow" in c.tags else [])
        for c in selected
    ]


def _backward_inputs(case: Case, dtype, op: str):
    """``(diff_dst, dst)`` for ``op``: dst is log_softmax or softmax of x."""
    diff_dst, dst = case.backward_inputs(dtype)
    if op == "softmax_backward":
        with np.errstate(all="ignore"):
            sm = np.exp(dst.astype(np.float64)).astype(dtype)
        dst = case.layout_like(sm)
    return diff_dst, dst


def _call_backward(op, diff_dst, dst, axis, **kw):
    return BACKWARD[op](diff_dst, dst, axis, **kw)


def _fresh_strided(shape, dtype) -> np.ndarray:
    """An uninitialised, writeable, non-contiguous array of ``shape``."""
    shape = tuple(shape)
    if not shape:
        return np.empty((), dtype)
    base = np.full(shape[:-1] + (2 * shape[-1] + 1,), 7, dtype)
    return base[..., 1::2]


# ==========================================================================
# Section 1: data types
# ==========================================================================
@pytest.mark.parametrize(
    "name, expected",
    [
        ("float32", np.float32),
        ("bfloat16", ml_dtypes.bfloat16),
        ("float16", np.float16),
        ("float64", np.float64),
    ],
)
def test_dtype_constants_are_numpy_dtypes(name, expected):
    const = getattr(logsoftmax, name)
    assert isinstance(const, np.dtype)
    assert np.dtype(const) == np.dtype(expected)
    assert const == np.dtype(expected)


@pytest.mark.parametrize("in_dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(FORWARD))
def test_int_and_bool_inputs_promote_to_float32(backend, in_dtype, op):
    x = int_inputs(in_dtype)
    y = FORWARD[op](x, axis=-1)
    assert y.dtype == F32 and y.shape == x.shape
    assert_bitwise_equal(y, FORWARD[op](x.astype(np.float32), axis=-1))
    assert_close_eps(y, REF[op](x.astype(np.float32), -1), F32, TOL_EPS[op])


@pytest.mark.parametrize("in_dtype", INT_DTYPES, ids=str)
def test_int_and_bool_promote_in_logsumexp_and_backward(backend, in_dtype):
    x = int_inputs(in_dtype)
    r = logsoftmax.logsumexp(x, axis=1)
    assert r.dtype == F32 and r.shape == (x.shape[0],)
    assert_bitwise_equal(r, logsoftmax.logsumexp(x.astype(np.float32), axis=1))
    dd = np.ones_like(x)
    dst = np.zeros(x.shape, dtype=in_dtype)  # int dst: promoted to float32 too
    g = logsoftmax.log_softmax_backward(dd, dst, axis=1)
    assert g.dtype == F32
    assert_bitwise_equal(
        g,
        logsoftmax.log_softmax_backward(
            dd.astype(np.float32), dst.astype(np.float32), axis=1
        ),
    )


def test_python_lists_and_scalars_are_array_like(backend):
    y = logsoftmax.log_softmax([0.0, 0.0])
    assert isinstance(y, np.ndarray) and y.dtype == F64
    np.testing.assert_array_equal(y, [-np.log(2.0)] * 2)
    assert logsoftmax.logsumexp(3.0, axis=None) == 3.0


BAD_DTYPES = [
    np.dtype(np.complex64),
    np.dtype(np.complex128),
    np.dtype(object),
    np.dtype("U3"),
    np.dtype("datetime64[s]"),
]


def _bad_array(dt: np.dtype) -> np.ndarray:
    if dt.kind == "M":
        return np.array(["2026-11-30T00:00:00"] * 6, dt).reshape(2, 3)
    return np.ones((2, 3)).astype(dt)


@pytest.mark.parametrize("bad", BAD_DTYPES, ids=str)
def test_complex_object_and_other_dtypes_raise_typeerror_naming_dtype(backend, bad):
    x = _bad_array(bad)
    good = np.zeros((2, 3), np.float32)
    calls = [
        lambda: logsoftmax.log_softmax(x),
        lambda: logsoftmax.softmax(x),
        lambda: logsoftmax.logsumexp(x),
        lambda: logsoftmax.log_softmax_backward(x, good),
        lambda: logsoftmax.log_softmax_backward(good, x),
        lambda: logsoftmax.softmax_backward(x, good),
        lambda: logsoftmax.softmax_backward(good, x),
    ]
    for call in calls:
        with pytest.raises(TypeError) as info:
            call()
        assert str(bad) in str(info.value), str(info.value)


def test_long_double_is_rejected_not_silently_narrowed(backend):
    # documented choice (docs/api.md): only the four dtypes compute natively
    x = np.zeros(3, np.longdouble)
    if np.dtype(np.longdouble) == F64:
        pytest.skip("long double is float64 on this platform")
    with pytest.raises(TypeError, match="float128|longdouble|float96"):
        logsoftmax.log_softmax(x)


# ==========================================================================
# Section 2: the value grid (backend x dtype x case)
# ==========================================================================
@fwd_params
@dtype_params
@pytest.mark.parametrize("case", _case_params(cases()))
def test_forward_grid(backend, case: Case, dtype, op):
    x = case.build(dtype)
    before = x.copy()
    y = FORWARD[op](x, axis=case.axis)
    assert isinstance(y, np.ndarray)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close_eps(y, REF[op](x, case.axis), dtype, TOL_EPS[op])
    assert_bitwise_equal(x, before)  # inputs are never written without out=


@dtype_params
@pytest.mark.parametrize("case", _case_params(cases()))
def test_logsumexp_grid(backend, case: Case, dtype):
    x = case.build(dtype)
    for keepdims in (False, True):
        r = logsoftmax.logsumexp(x, axis=case.axis, keepdims=keepdims)
        ref = ref_logsumexp(x, case.axis, keepdims)
        assert np.shape(r) == ref.shape and r.dtype == dtype, keepdims
        assert_close_eps(r, ref, dtype, TOL_EPS["logsumexp"])


@bwd_params
@dtype_params
@pytest.mark.parametrize("case", _case_params(cases()))
def test_backward_grid(backend, case: Case, dtype, op):
    diff_dst, dst = _backward_inputs(case, dtype, op)
    snap = (diff_dst.copy(), dst.copy())
    g = _call_backward(op, diff_dst, dst, case.axis)
    assert g.shape == diff_dst.shape and g.dtype == dtype
    assert_close_eps(
        g, REF[op](diff_dst, dst, case.axis), dtype, TOL_EPS[op],
        scale=backward_scale(op, diff_dst, dst, case.axis),
    )
    assert_bitwise_equal(diff_dst, snap[0])
    assert_bitwise_equal(dst, snap[1])


# ==========================================================================
# axis rules
# ==========================================================================
@pytest.mark.parametrize("op", list(ALL_AXIS_OPS) + ["logsumexp"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_axis_out_of_range_raises_indexerror(backend, op, ndim):
    x = np.zeros((2,) * ndim, np.float32)
    for axis in (ndim, -ndim - 1, 100, -100):
        with pytest.raises(IndexError) as info:
            _call_axis_op(op, x, axis)
        assert str(axis) in str(info.value) and "axis" in str(info.value)


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS) + ["logsumexp"])
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_any_axis_of_a_0d_array_raises_indexerror(backend, op, axis):
    x = np.float32(1.5)
    with pytest.raises(IndexError):
        _call_axis_op(op, np.asarray(x), axis)


def test_logsumexp_of_0d_reduces_nothing_with_none_or_empty_tuple(backend):
    x = np.asarray(np.float32(1.5))
    for axis in (None, ()):
        r = logsoftmax.logsumexp(x, axis=axis)
        assert np.shape(r) == () and r.dtype == F32 and r == np.float32(1.5)


def _call_axis_op(op, x, axis):
    if op == "logsumexp":
        return logsoftmax.logsumexp(x, axis=axis)
    if op in FORWARD:
        return FORWARD[op](x, axis=axis)
    return BACKWARD[op](x, x.copy(), axis=axis)


NON_INT_AXES = [1.0, np.float64(0.0), None, True, False, np.bool_(True), (0,), [0], "0"]


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
@pytest.mark.parametrize("axis", NON_INT_AXES, ids=repr)
def test_non_integer_axis_raises_typeerror(backend, op, axis):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeError) as info:
        _call_axis_op(op, x, axis)
    assert "axis" in str(info.value)


@pytest.mark.parametrize("axis", [1.0, True, np.bool_(False), [0], "0"], ids=repr)
def test_logsumexp_non_integer_axis_raises_typeerror(backend, axis):
    with pytest.raises(TypeError):
        logsoftmax.logsumexp(np.zeros((2, 3), np.float32), axis=axis)


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS) + ["logsumexp"])
@pytest.mark.parametrize(
    "axis, expected",
    [
        (np.int8(1), 1),
        (np.int64(-1), 2),
        (np.uint16(0), 0),
        (np.intp(-3), 0),
        (np.int32(-2), 1),
    ],
    ids=repr,
)
def test_numpy_integer_axes_are_accepted(backend, op, axis, expected):
    x = case_by_name("5d_axis2").build(F32)[0, :, :, :, 0]
    assert_bitwise_equal(_call_axis_op(op, x, axis), _call_axis_op(op, x, expected))


@dtype_params
@pytest.mark.parametrize(
    "axis",
    [(0,), (1, 2), (0, 2), (-1, 0), (0, 1, 2), None, (2, -3, 1), ()],
    ids=repr,
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_takes_tuples_and_none(backend, dtype, axis, keepdims):
    x = case_by_name("3d_axis1").build(dtype)
    r = logsoftmax.logsumexp(x, axis=axis, keepdims=keepdims)
    ref = ref_logsumexp(x, axis, keepdims)
    assert np.shape(r) == ref.shape and r.dtype == dtype
    assert_close_eps(r, ref, dtype, TOL_EPS["logsumexp"])
    if axis == ():
        assert_bitwise_equal(r, x)  # documented: reducing nothing returns x's values


@pytest.mark.parametrize("axis", [(0, 0), (1, -1), (0, 1, 0), (-2, 0)], ids=repr)
def test_logsumexp_duplicate_axes_raise_valueerror(backend, axis):
    with pytest.raises(ValueError, match="axis"):
        logsoftmax.logsumexp(np.zeros((2, 3), np.float32), axis=axis)


@pytest.mark.parametrize("axis", [(0, 2), (-3,), (0, 5)], ids=repr)
def test_logsumexp_out_of_range_tuple_raises_indexerror(backend, axis):
    with pytest.raises(IndexError):
        logsoftmax.logsumexp(np.zeros((2, 3), np.float32), axis=axis)


@pytest.mark.parametrize("op", list(FORWARD))
def test_axis_is_positional_and_defaults_to_last(backend, op):
    x = case_by_name("3d_axis_neg1").build(F32)
    assert_bitwise_equal(FORWARD[op](x), FORWARD[op](x, 2))
    assert_bitwise_equal(FORWARD[op](x), FORWARD[op](x, axis=-1))
    with pytest.raises(TypeError):
        FORWARD[op](x, -1, np.empty_like(x))  # out= is keyword-only


# ==========================================================================
# backward argument rules
# ==========================================================================
@bwd_params
def test_backward_shape_mismatch_raises_valueerror(backend, op):
    dd = np.zeros((3, 4), np.float32)
    for dst in (np.zeros((4, 3), np.float32), np.zeros((3, 5), np.float32),
                np.zeros((3, 4, 1), np.float32), np.zeros(4, np.float32)):
        with pytest.raises(ValueError) as info:
            BACKWARD[op](dd, dst, axis=-1)
        assert str(dst.shape) in str(info.value)


@bwd_params
@pytest.mark.parametrize(
    "dd_dtype, dst_dtype", [(F32, F64), (BF16, F32), (F16, BF16), (F64, F16)],
    ids=lambda d: dtype_id(d),
)
def test_backward_dtype_mismatch_raises_typeerror(backend, op, dd_dtype, dst_dtype):
    dd = np.zeros((3, 4), dd_dtype)
    dst = np.zeros((3, 4), dst_dtype)
    with pytest.raises(TypeError) as info:
        BACKWARD[op](dd, dst, axis=-1)
    assert str(dd_dtype) in str(info.value) and str(dst_dtype) in str(info.value)


# ==========================================================================
# out=
# ==========================================================================
@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
def test_out_wrong_shape_raises_valueerror(backend, op):
    x = np.zeros((3, 4), np.float32)
    for shape in [(4, 3), (3, 4, 1), (12,), ()]:
        out = np.zeros(shape, np.float32)
        with pytest.raises(ValueError) as info:
            _call_with_out(op, x, out)
        assert str(shape) in str(info.value) and "out" in str(info.value)


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
@pytest.mark.parametrize("x_dtype", FLOAT_DTYPES, ids=dtype_id)
def test_out_wrong_dtype_raises_typeerror(backend, op, x_dtype):
    x = np.zeros((3, 4), x_dtype)
    for out_dtype in FLOAT_DTYPES + (np.dtype(np.int32),):
        if out_dtype == x_dtype:
            continue
        with pytest.raises(TypeError) as info:
            _call_with_out(op, x, np.zeros((3, 4), out_dtype))
        assert str(out_dtype) in str(info.value)


def _call_with_out(op, x, out, axis=-1, **kw):
    if op in FORWARD:
        return FORWARD[op](x, axis, out=out, **kw)
    return BACKWARD[op](x, np.zeros_like(x), axis, out=out, **kw)


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
def test_read_only_out_raises_valueerror(backend, op):
    x = np.zeros((3, 4), np.float32)
    out = np.zeros((3, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _call_with_out(op, x, out)
    bout = np.broadcast_to(np.zeros(4, np.float32), (3, 4))  # read-only view
    with pytest.raises(ValueError, match="read-only"):
        _call_with_out(op, x, bout)


@pytest.mark.parametrize("op", list(FORWARD))
def test_in_place_on_a_broadcast_input_is_refused(backend, op):
    x = np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4))
    with pytest.raises(ValueError, match="read-only"):
        FORWARD[op](x, out=x)


def _overlapping_views(dtype=np.float32):
    """``(name, x, out)`` triples where out shares memory with x but is not
    exactly x (same address, shape and strides)."""
    buf = np.random.default_rng(3).normal(size=72).astype(dtype)
    x = buf[:48].reshape(6, 8)
    yield "shifted_by_one", x, buf[1:49].reshape(6, 8)
    yield "reversed", x, x[::-1, ::-1]
    sq = buf[:64].reshape(8, 8)
    yield "transposed_square", sq, sq.T
    yield "same_start_other_strides", x[:3], np.lib.stride_tricks.as_strided(
        x, shape=(3, 8), strides=(x.itemsize, x.itemsize)
    )
    yield "inside", x[1:4, 2:7], x[1:4, 1:6]


@pytest.mark.parametrize("op", list(FORWARD))
def test_partial_overlap_with_x_raises_valueerror_before_writing(backend, op):
    for name, x, out in _overlapping_views():
        assert np.shares_memory(x, out), name
        snap = x.copy()
        with pytest.raises(ValueError, match="overlap") as info:
            FORWARD[op](x, out=out)
        assert "x" in str(info.value), name
        assert_bitwise_equal(x, snap)


@bwd_params
@pytest.mark.parametrize("which", ["diff_dst", "dst"])
def test_partial_overlap_with_backward_inputs_raises_valueerror(backend, op, which):
    for name, a, out in _overlapping_views():
        other = np.zeros_like(a)
        dd, dst = (a, other) if which == "diff_dst" else (other, a)
        snap = a.copy()
        with pytest.raises(ValueError, match="overlap") as info:
            BACKWARD[op](dd, dst, out=out)
        assert which in str(info.value), name
        assert_bitwise_equal(a, snap)


@pytest.mark.parametrize("op", list(FORWARD))
def test_interleaved_but_disjoint_out_is_accepted(backend, op):
    # same buffer, no common element: not an overlap
    buf = case_by_name("2d_n100").build(F32)
    x, out = buf[:, ::2], buf[:, 1::2]
    expected = FORWARD[op](x.copy())
    snap = x.copy()
    assert FORWARD[op](x, out=out) is out
    assert_bitwise_equal(out, expected)
    assert_bitwise_equal(x, snap)


@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
def test_out_is_returned(backend, op):
    x = case_by_name("2d_n100").build(F32)
    out = np.empty_like(x)
    assert _call_with_out(op, x, out) is out
    strided = _fresh_strided(x.shape, F32)
    assert _call_with_out(op, x, strided) is strided


_INPLACE_CASES = cases(exclude=("0d", "broadcast", "slow"))


@fwd_params
@dtype_params
@pytest.mark.parametrize("case", _case_params(_INPLACE_CASES))
def test_forward_alloc_out_and_in_place_are_bit_identical(backend, case, dtype, op):
    x = case.build(dtype)
    y_alloc = FORWARD[op](x, case.axis)
    out = _fresh_strided(x.shape, dtype)
    assert FORWARD[op](x, case.axis, out=out) is out
    assert_bitwise_equal(out, y_alloc)
    xi = case.build(dtype)  # same values, same strides
    assert FORWARD[op](xi, case.axis, out=xi) is xi
    assert_bitwise_equal(xi, y_alloc)


@bwd_params
@dtype_params
@pytest.mark.parametrize("case", _case_params(_INPLACE_CASES))
def test_backward_alloc_out_and_in_place_are_bit_identical(backend, case, dtype, op):
    dd, dst = _backward_inputs(case, dtype, op)
    g = _call_backward(op, dd, dst, case.axis)
    out = _fresh_strided(dd.shape, dtype)
    assert _call_backward(op, dd, dst, case.axis, out=out) is out
    assert_bitwise_equal(out, g)
    # out is exactly diff_dst: diff_dst is overwritten, dst untouched
    dd2, dst2 = _backward_inputs(case, dtype, op)
    assert _call_backward(op, dd2, dst2, case.axis, out=dd2) is dd2
    assert_bitwise_equal(dd2, g)
    assert_bitwise_equal(dst2, dst)
    # out is exactly dst
    dd3, dst3 = _backward_inputs(case, dtype, op)
    assert _call_backward(op, dd3, dst3, case.axis, out=dst3) is dst3
    assert_bitwise_equal(dst3, g)
    assert_bitwise_equal(dd3, dd)


@bwd_params
def test_backward_in_place_through_an_equal_view(backend, op):
    # "exactly" = same address, shape and strides; a distinct view object counts
    case = case_by_name("transposed_axis1")
    dd, dst = _backward_inputs(case, F32, op)
    g = _call_backward(op, dd, dst, 1)
    view = dd[...]
    assert view is not dd
    _call_backward(op, dd, dst, 1, out=view)
    assert_bitwise_equal(dd, g)


@bwd_params
def test_backward_with_diff_dst_is_dst_in_place(backend, op):
    # one array passed as both inputs and as out: exactly both, so allowed
    a = case_by_name("2d_n100").build(F32) * np.float32(0.01)
    g = _call_backward(op, a, a.copy(), -1)
    _call_backward(op, a, a, -1, out=a)
    assert_bitwise_equal(a, g)


# --------------------------------------------------------------------------
# validation happens before anything is written
# --------------------------------------------------------------------------
_RNG = np.random.default_rng(11)


def _arr(shape=(4, 6), dtype=np.float32) -> np.ndarray:
    return _RNG.normal(size=shape).astype(dtype)


# Each scenario: fn -> (call, arrays that must stay unchanged, expected error).
def _fwd_axis_out_of_range(fn):
    x, o = _arr(), _arr()
    return lambda: fn(x, 2, out=o), [x, o], IndexError


def _fwd_axis_float(fn):
    x, o = _arr(), _arr()
    return lambda: fn(x, 1.0, out=o), [x, o], TypeError


def _fwd_in_place_axis_out_of_range(fn):
    x = _arr()
    return lambda: fn(x, -3, out=x), [x], IndexError


def _fwd_in_place_axis_none(fn):
    x = _arr()
    return lambda: fn(x, None, out=x), [x], TypeError


def _fwd_out_wrong_shape(fn):
    x, o = _arr(), _arr((6, 4))
    return lambda: fn(x, out=o), [x, o], ValueError


def _fwd_out_wrong_dtype(fn):
    x, o = _arr(), _arr(dtype=np.float64)
    return lambda: fn(x, out=o), [x, o], TypeError


def _fwd_complex_x(fn):
    x, o = _arr(dtype=np.complex64), _arr()
    return lambda: fn(x, out=o), [x, o], TypeError


def _fwd_partial_overlap(fn):
    b = _arr((30,))
    return lambda: fn(b[:24].reshape(4, 6), out=b[2:26].reshape(4, 6)), [b], ValueError


def _fwd_in_place_wrong_result_dtype(fn):
    x = _arr()
    return lambda: fn(x, out=x, dtype=BF16), [x], TypeError


def _fwd_bad_dtype_argument(fn):
    x, o = _arr(), _arr()
    return lambda: fn(x, out=o, dtype=np.int32), [x, o], TypeError


def _bwd_shape_mismatch_in_place(fn):
    d, y = _arr(), _arr((4, 5))
    return lambda: fn(d, y, out=d), [d, y], ValueError


def _bwd_dtype_mismatch_in_place_dst(fn):
    d, y = _arr(dtype=np.float64), _arr()
    return lambda: fn(d, y, out=y), [d, y], TypeError


def _bwd_axis_out_of_range_in_place(fn):
    d, y = _arr(), _arr()
    return lambda: fn(d, y, 5, out=d), [d, y], IndexError


def _bwd_axis_tuple(fn):
    d, y, o = _arr(), _arr(), _arr()
    return lambda: fn(d, y, (1,), out=o), [d, y, o], TypeError


def _bwd_out_overlaps_dst(fn):
    d, y = _arr(), _arr()
    return lambda: fn(d, y, out=y[::-1]), [d, y], ValueError


def _bwd_out_wrong_dtype(fn):
    d, y, o = _arr(), _arr(), _arr(dtype=np.float16)
    return lambda: fn(d, y, out=o), [d, y, o], TypeError


def _bwd_out_wrong_shape(fn):
    d, y, o = _arr(), _arr(), _arr((4, 6, 1))
    return lambda: fn(d, y, out=o), [d, y, o], ValueError


def _bwd_read_only_out_is_diff_dst(fn):
    d, y = _arr(), _arr()
    d.flags.writeable = False
    return lambda: fn(d, y, out=d), [d, y], ValueError


_FWD_SCENARIOS = [v for k, v in list(globals().items()) if k.startswith("_fwd_")]
_BWD_SCENARIOS = [v for k, v in list(globals().items()) if k.startswith("_bwd_")]
_SCENARIO_PARAMS = [
    pytest.param(FORWARD[f], s, id=f"{f}-{s.__name__[5:]}")
    for f in FORWARD
    for s in _FWD_SCENARIOS
] + [
    pytest.param(BACKWARD[f], s, id=f"{f}-{s.__name__[5:]}")
    for f in BACKWARD
    for s in _BWD_SCENARIOS
]


@pytest.mark.parametrize("fn, scenario", _SCENARIO_PARAMS)
def test_validation_happens_before_any_write(backend, fn, scenario):
    call, arrays, exc = scenario(fn)
    snaps = [a.copy() for a in arrays]
    with pytest.raises(exc):
        call()
    for a, s in zip(arrays, snaps):
        assert_bitwise_equal(a, s)


# ==========================================================================
# strides
# ==========================================================================
_STRIDED = cases(include=("strided",))


@dtype_params
@pytest.mark.parametrize("case", _case_params(_STRIDED))
@pytest.mark.parametrize("op", list(ALL_AXIS_OPS) + ["logsumexp"])
def test_any_strides_equal_a_contiguous_copy_bitwise(backend, case, dtype, op):
    x = case.build(dtype)
    assert not x.flags.c_contiguous
    xc = np.ascontiguousarray(x)
    if op in FORWARD:
        assert_bitwise_equal(FORWARD[op](x, case.axis), FORWARD[op](xc, case.axis))
    elif op == "logsumexp":
        assert_bitwise_equal(
            logsoftmax.logsumexp(x, axis=case.axis),
            logsoftmax.logsumexp(xc, axis=case.axis),
        )
    else:
        dd, dst = _backward_inputs(case, dtype, op)
        assert_bitwise_equal(
            _call_backward(op, dd, dst, case.axis),
            _call_backward(
                op, np.ascontiguousarray(dd), np.ascontiguousarray(dst), case.axis
            ),
        )


@fwd_params
def test_same_values_along_axis_give_same_results_whatever_the_layout(backend, op):
    # the same logical rows laid out along each axis of a 3-D array
    base = case_by_name("2d_n100").build(F32)[:4, :37]  # 4 rows of 37
    ref = FORWARD[op](np.ascontiguousarray(base), -1)
    for axis in range(3):
        shape = [1, 1, 1]
        shape[axis] = 37
        for r in range(4):
            x3 = np.broadcast_to(base[r].reshape(shape), [37 if i == axis else 3
                                                          for i in range(3)])
            y = FORWARD[op](np.ascontiguousarray(x3), axis)
            moved = np.moveaxis(y, axis, -1).reshape(-1, 37)
            for row in moved:
                assert_bitwise_equal(row, ref[r])


# ==========================================================================
# empty arrays
# ==========================================================================
_EMPTY = cases(include=("empty",))


@dtype_params
@pytest.mark.parametrize("case", _case_params(_EMPTY))
def test_empty_arrays_give_empty_results(backend, case, dtype):
    x = case.build(dtype)
    for op in FORWARD:
        y = FORWARD[op](x, case.axis)
        assert y.shape == x.shape and y.dtype == dtype and y.size == 0
        out = np.empty(x.shape, dtype)
        assert FORWARD[op](x, case.axis, out=out) is out
    for op in BACKWARD:
        g = BACKWARD[op](x, x.copy(), case.axis)
        assert g.shape == x.shape and g.dtype == dtype
    r = logsoftmax.logsumexp(x, axis=case.axis)
    expected_shape = x.shape[: case.axis % x.ndim] + x.shape[case.axis % x.ndim + 1 :]
    assert r.shape == expected_shape and r.dtype == dtype
    if x.shape[case.axis] == 0:
        assert np.all(r == -np.inf)  # a zero-length axis sums nothing: log 0


@dtype_params
def test_logsumexp_zero_length_axis_is_neg_inf(backend, dtype):
    x = np.zeros((3, 0), dtype)
    r = logsoftmax.logsumexp(x, axis=1)
    assert r.shape == (3,) and r.dtype == dtype
    assert np.all(np.isneginf(r.astype(np.float64)))
    r_all = logsoftmax.logsumexp(x, axis=None)
    assert np.shape(r_all) == () and np.isneginf(float(r_all))
    r_keep = logsoftmax.logsumexp(x, axis=(0, 1), keepdims=True)
    assert r_keep.shape == (1, 1) and np.isneginf(float(r_keep[0, 0]))


# ==========================================================================
# special values (hand-written expectations)
# ==========================================================================
_NAN_ROWS = {"nan", "nan_last", "posinf", "posinf_neginf", "nan_neginf", "all_neginf"}


def _block(dtype, layout: str):
    rows = special_rows(dtype)
    names = list(rows)
    a = np.array([rows[n] for n in names]).astype(dtype)
    if layout == "cols":  # the same rows along axis 0 of a C-contiguous array
        return names, np.ascontiguousarray(a.T), 0
    if layout == "cols_view":
        return names, a.T, 0
    return names, a, 1


def _rows_of(y, axis):
    return y if axis == 1 else y.T


@dtype_params
@pytest.mark.parametrize("layout", ["rows", "cols", "cols_view"])
def test_special_value_rows_forward(backend, dtype, layout):
    names, x, axis = _block(dtype, layout)
    ls = _rows_of(logsoftmax.log_softmax(x, axis), axis).astype(np.float64)
    sm = _rows_of(logsoftmax.softmax(x, axis), axis).astype(np.float64)
    xr = _rows_of(x, axis).astype(np.float64)
    for i, name in enumerate(names):
        if name in _NAN_ROWS:
            assert np.isnan(ls[i]).all() and np.isnan(sm[i]).all(), name
            continue
        assert not np.isnan(ls[i]).any() and not np.isnan(sm[i]).any(), name
        neg = np.isneginf(xr[i])
        np.testing.assert_array_equal(np.isneginf(ls[i]), neg, err_msg=name)
        assert np.all(sm[i][neg] == 0.0), name
        if name in ("one_finite", "dominant", "dominant_last"):
            k = int(np.argmax(xr[i]))
            assert ls[i][k] == 0.0 and sm[i][k] == 1.0, (name, ls[i], sm[i])
            others = np.arange(xr.shape[1]) != k
            # log(sum) is exactly 0, so y = x - m rounded once to the dtype
            shifted = (xr[i] - xr[i][k]).astype(dtype).astype(np.float64)
            np.testing.assert_array_equal(ls[i][others], shifted[others])
            np.testing.assert_array_equal(sm[i][others], 0.0)


@dtype_params
@pytest.mark.parametrize("layout", ["rows", "cols_view"])
def test_special_value_rows_logsumexp(backend, dtype, layout):
    names, x, axis = _block(dtype, layout)
    r = logsoftmax.logsumexp(x, axis=axis).astype(np.float64)
    xr = _rows_of(x, axis).astype(np.float64)
    expected = {
        "nan": np.nan,
        "nan_last": np.nan,
        "nan_neginf": np.nan,
        "posinf": np.inf,
        "posinf_neginf": np.inf,
        "all_neginf": -np.inf,
        "one_finite": 2.5,
        "dominant": 0.0,
        "dominant_last": 7.0,
    }
    for i, name in enumerate(names):
        if name in expected:
            np.testing.assert_array_equal(r[i], expected[name], err_msg=name)
        else:
            assert np.isfinite(r[i]) and r[i] >= xr[i].max(), (name, r[i])


@dtype_params
def test_logsumexp_special_values_over_several_axes(backend, dtype):
    x = np.zeros((2, 3, 4), dtype)
    x[0, 1, 2] = np.nan
    x[1, 2, 3] = np.inf
    r = logsoftmax.logsumexp(x, axis=(1, 2)).astype(np.float64)
    assert np.isnan(r[0]) and r[1] == np.inf
    x[:] = -np.inf
    assert float(logsoftmax.logsumexp(x, axis=None)) == -np.inf
    x[1, 0, 0] = np.nan
    x[0, 0, 0] = np.inf
    assert np.isnan(float(logsoftmax.logsumexp(x, axis=None)))  # NaN beats +inf


@dtype_params
@pytest.mark.parametrize("axis", [0, 1])
def test_neg_inf_element_backward_passes_diff_dst_through(backend, dtype, axis):
    row = special_rows(dtype)["one_neginf"]
    x = np.array([row, row[::-1]], np.float64).astype(dtype)
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    dst = logsoftmax.log_softmax(x, axis)
    dd = np.random.default_rng(5).normal(size=x.shape).astype(dtype)
    g = logsoftmax.log_softmax_backward(dd, dst, axis)
    neg = np.isneginf(dst.astype(np.float64))
    assert neg.sum() == 2
    assert_bitwise_equal(g[neg], dd[neg])
    assert np.isfinite(g.astype(np.float64)).all()
    sm = logsoftmax.softmax(x, axis)
    gs = logsoftmax.softmax_backward(dd, sm, axis)
    assert np.all(gs.astype(np.float64)[neg] == 0.0)  # dst = 0 there


@dtype_params
def test_special_rows_do_not_leak_into_neighbours(backend, dtype):
    x = case_by_name("special_long").build(dtype)
    y = logsoftmax.log_softmax(x, -1)
    # rows 0-2 hold one NaN/+inf/-inf; 3 is all -inf; 4 one finite; 5 dominant
    assert np.isnan(y[0].astype(np.float64)).all()
    assert np.isnan(y[1].astype(np.float64)).all()
    assert np.isneginf(float(y[2, 0])) and np.isfinite(y[2, 1:].astype(float)).all()
    assert np.isnan(y[3].astype(np.float64)).all()
    assert float(y[4, -1]) == 0.0 and np.isneginf(y[4, :-1].astype(float)).all()
    assert float(y[5, 3]) == 0.0
    lse = logsoftmax.logsumexp(x, axis=-1).astype(np.float64)
    assert np.isnan(lse[0]) and lse[1] == np.inf and np.isfinite(lse[2])
    assert lse[3] == -np.inf and lse[4] == 1.0 and lse[5] == 0.0


# ==========================================================================
# exact cases
# ==========================================================================
LENGTH1_VALUES = [0.0, 1.0, -3.25, 1e4, -6e4, 6e4, 1e-30, np.nextafter(0, 1)]


@dtype_params
@pytest.mark.parametrize("axis_layout", ["last", "first", "middle"])
def test_length_one_rows_are_exact(backend, dtype, axis_layout):
    vals = np.array(LENGTH1_VALUES).astype(dtype)
    shape, axis = {"last": ((len(vals), 1), 1), "first": ((1, len(vals)), 0),
                   "middle": ((2, 1, len(vals) // 2), 1)}[axis_layout]
    x = vals.reshape(shape)
    np.testing.assert_array_equal(logsoftmax.log_softmax(x, axis), 0)
    np.testing.assert_array_equal(logsoftmax.softmax(x, axis), 1)
    assert_bitwise_equal(logsoftmax.logsumexp(x, axis=axis, keepdims=True), x)
    dd = np.random.default_rng(2).normal(size=shape).astype(dtype)
    g = logsoftmax.log_softmax_backward(dd, np.zeros(shape, dtype), axis)
    np.testing.assert_array_equal(g, 0)
    gs = logsoftmax.softmax_backward(dd, np.ones(shape, dtype), axis)
    np.testing.assert_array_equal(gs, 0)


@dtype_params
@pytest.mark.parametrize("n", [2, 3, 17, 100, 4099])
def test_one_finite_among_neg_inf_is_exact(backend, dtype, n):
    x = np.full((3, n), -np.inf, dtype)
    pos = [0, n // 2, n - 1]
    vals = [3.5, -7.0, 1e4]
    for r, (k, v) in enumerate(zip(pos, vals)):
        x[r, k] = v
    ls = logsoftmax.log_softmax(x).astype(np.float64)
    sm = logsoftmax.softmax(x).astype(np.float64)
    lse = logsoftmax.logsumexp(x, axis=-1)
    for r, k in enumerate(pos):
        assert ls[r, k] == 0.0 and sm[r, k] == 1.0
        assert np.isneginf(np.delete(ls[r], k)).all()
        assert (np.delete(sm[r], k) == 0.0).all()
    assert_bitwise_equal(lse, np.array(vals).astype(dtype))


@dtype_params
@pytest.mark.parametrize("n", [2, 7, 1000, 4099])
def test_one_dominant_logit_is_exact(backend, dtype, n):
    rng = np.random.default_rng(n)
    # others >= 1000 below the max: their exp underflows even in long double sums
    others = -1000.0 - rng.uniform(0, 500, size=(2, n)).round()
    others[0, 0] = 5.0
    others[1, -1] = -3.0
    x = others.astype(dtype)
    ls = logsoftmax.log_softmax(x).astype(np.float64)
    sm = logsoftmax.softmax(x).astype(np.float64)
    xf = x.astype(np.float64)
    for r, k in enumerate([0, n - 1]):
        assert ls[r, k] == 0.0 and sm[r, k] == 1.0
        shifted = (xf[r] - xf[r, k]).astype(dtype).astype(np.float64)  # one rounding
        np.testing.assert_array_equal(np.delete(ls[r], k), np.delete(shifted, k))
    assert_bitwise_equal(logsoftmax.logsumexp(x, axis=-1), x.max(axis=-1))


# ==========================================================================
# the accuracy rule
# ==========================================================================
_LENGTHS = [2, 3, 7, 8, 9, 31, 64, 100, 1000, 4096, 4097, 10000]
_LONG = [32768, 65536, 1_000_000]


def _rows(n: int, dist: str, dtype, seed: int = 0):
    rows = max(1, min(64, 200_000 // n))
    rng = np.random.default_rng([n, seed, ["normal", "wide", "flat"].index(dist)])
    if dist == "normal":
        x = rng.normal(0, 3, size=(rows, n))
    elif dist == "wide":
        x = rng.uniform(-60, 60, size=(rows, n))
    else:  # "flat": many similar terms, the hardest case for the sum
        x = rng.uniform(-1, 0, size=(rows, n))
    return x.astype(dtype)


def _length_params():
    return [pytest.param(n, id=f"n{n}") for n in _LENGTHS] + [
        pytest.param(n, id=f"n{n}", marks=pytest.mark.slow) for n in _LONG
    ]


@dtype_params
@pytest.mark.parametrize("n", _length_params())
@pytest.mark.parametrize("dist", ["normal", "wide", "flat"])
def test_accuracy_forward_and_logsumexp(backend, dtype, n, dist):
    x = _rows(n, dist, dtype)
    for op in ("log_softmax", "softmax"):
        assert_close_eps(FORWARD[op](x), REF[op](x, -1), dtype, TOL_EPS[op])
    assert_close_eps(
        logsoftmax.logsumexp(x, axis=-1), ref_logsumexp(x, -1), dtype,
        TOL_EPS["logsumexp"],
    )


@dtype_params
@pytest.mark.parametrize("n", _length_params())
def test_accuracy_backward(backend, dtype, n):
    x = _rows(n, "normal", dtype)
    dst = ref_log_softmax(x).astype(np.float64).astype(dtype)
    dd = np.random.default_rng(n).normal(size=x.shape).astype(dtype)
    sm = ref_softmax(x).astype(np.float64).astype(dtype)
    for op, y in (("log_softmax_backward", dst), ("softmax_backward", sm)):
        assert_close_eps(
            BACKWARD[op](dd, y), REF[op](dd, y), dtype, TOL_EPS[op],
            scale=backward_scale(op, dd, y),
        )


@pytest.mark.parametrize(
    "row",
    [
        [1e4, 9999.0, 9998.0],
        [-1e7, -1e7 - 1, -1e7 - 2],
        [-1e7 + 1, -1e7, -1e7 - 3, -1e7 - 5],
        [9999.5, 1e4, 9998.25, 9990.0],
    ],
    ids=["1e4", "-1e7", "-1e7_b", "1e4_b"],
)
@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_ordering_example_huge_logits_within_one_eps(backend, row, dtype):
    # x - logsumexp(x) with a separately rounded logsumexp loses half an ulp
    # of |logsumexp| (~500 eps at 1e7); (x - m) - log(s) keeps ~1 eps
    x = np.array([row, row[::-1]], dtype)
    assert max_err_eps(logsoftmax.log_softmax(x), ref_log_softmax(x), dtype) <= 1.0
    assert max_err_eps(logsoftmax.softmax(x), ref_softmax(x), dtype) <= 1.0
    xc = np.ascontiguousarray(x.T)
    y0 = logsoftmax.log_softmax(xc, 0)
    assert max_err_eps(y0, ref_log_softmax(xc, 0), dtype) <= 1.0


# ==========================================================================
# dtype= (mixed precision)
# ==========================================================================
# Each pair of storage types is a new signature of the row kernels: the
# float16 pairs cost ~150 s of compiling on a cold cache (AMD EPYC Zen 3,
# where a cold `make test` took 18 minutes) for the same code as the
# bfloat16 pairs, so `make test-slow` runs them
_F16_PAIR = pytest.mark.slow


@pytest.mark.parametrize(
    "in_dtype, out_dtype",
    [(F32, BF16), pytest.param(F32, F16, marks=_F16_PAIR), (BF16, F32),
     pytest.param(F16, F32, marks=_F16_PAIR), (F64, F32), (F32, F64),
     pytest.param(BF16, F16, marks=_F16_PAIR)],
    ids=lambda d: dtype_id(d),
)
@pytest.mark.parametrize("op", list(ALL_AXIS_OPS))
def test_dtype_argument_rounds_the_input_precision_result_once(
    backend, in_dtype, out_dtype, op
):
    case = case_by_name("special_long")
    scale = None
    if op in FORWARD:
        x = case.build(in_dtype)
        y = FORWARD[op](x, -1, dtype=out_dtype)
        ref = REF[op](x, -1)
    else:
        dd, dst = _backward_inputs(case, in_dtype, op)
        y = BACKWARD[op](dd, dst, -1, dtype=out_dtype)
        ref = REF[op](dd, dst, -1)
        scale = backward_scale(op, dd, dst, -1)
    assert y.dtype == out_dtype and y.shape == case.shape
    if in_dtype == F64:
        # float64 precision, then one rounding to out_dtype
        assert_close_eps(y, ref, out_dtype, 1.0 if scale is None else 2.0, scale)
    elif out_dtype == F64:
        # at least float32 precision (the float32 bound), stored in float64
        assert_close_eps(y.astype(F32), ref, F32, TOL_EPS[op], scale)
    else:
        # float32 precision (also for bf16/f16 in), rounded once to out_dtype;
        # for bf16/f16 -> f32 this is finer than the input dtype allows, so a
        # "compute in the input's dtype, then widen" result fails it
        assert_close_eps(y, ref, out_dtype, TOL_EPS[op], scale)


@pytest.mark.parametrize("op", list(FORWARD))
def test_dtype_argument_with_out_and_bad_values(backend, op):
    x = case_by_name("2d_n100").build(F32)
    out = np.empty(x.shape, BF16)
    assert FORWARD[op](x, out=out, dtype=BF16) is out
    assert_bitwise_equal(out, FORWARD[op](x, dtype=BF16))
    with pytest.raises(TypeError):
        FORWARD[op](x, out=np.empty(x.shape, F32), dtype=BF16)
    for bad in (np.int32, np.complex64, "float128", "not-a-dtype"):
        with pytest.raises(TypeError, match="dtype"):
            FORWARD[op](x, dtype=bad)


# ==========================================================================
# determinism across thread counts
# ==========================================================================
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dtype_id)
def test_bit_identical_whatever_the_number_of_threads(backend, dtype):
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba is limited to one thread here")
    x = np.random.default_rng(9).normal(0, 3, size=(64, 3001)).astype(dtype)
    xt = np.ascontiguousarray(x.T)  # axis 0: the inner > 1 path
    dd = np.random.default_rng(10).normal(size=x.shape).astype(dtype)
    saved = numba.get_num_threads()

    def run():
        y = logsoftmax.log_softmax(x)
        return [
            y,
            logsoftmax.log_softmax(xt, 0),
            logsoftmax.softmax(x),
            logsoftmax.logsumexp(x, axis=-1),
            logsoftmax.logsumexp(x, axis=None),
            logsoftmax.log_softmax_backward(dd, y),
            logsoftmax.softmax_backward(dd, logsoftmax.softmax(x)),
        ]

    try:
        numba.set_num_threads(1)
        one = run()
        numba.set_num_threads(2)
        two = run()
    finally:
        numba.set_num_threads(saved)
    for a, b in zip(one, two):
        assert_bitwise_equal(a, b)


# --------------------------------------------------------------------------
# issue 13, contract gap 3: dtype= wider than the input computes in dtype
# --------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["log_softmax", "softmax"])
@pytest.mark.parametrize("src", [BF16, F16, F32], ids=dtype_id)
def test_wider_dtype_computes_in_it_whatever_the_storage(backend, op, src):
    """``f(x_bf16, dtype=float64)`` is the float64 answer for those values,
    the same bits as the same values passed as float32 or as float64 (the
    result depends on the values, not on how they were stored), and it is
    float64-accurate (PyTorch computes in float64 there too)."""
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((7, 300)) * 3).astype(src)
    fn = getattr(logsoftmax, op)
    got = fn(x, 1, dtype=F64)
    assert got.dtype == F64
    for other in (F32, F64):
        if np.dtype(other) != x.dtype:  # the same values stored otherwise
            assert np.array_equal(got, fn(x.astype(other), 1, dtype=F64))
    ref = REF[op](x.astype(F64), 1)
    assert_close_eps(got, ref, F64, TOL_EPS[op])
    dd = rng.standard_normal(x.shape).astype(src)
    y = logsoftmax.log_softmax(x, 1)
    g = logsoftmax.log_softmax_backward(dd, y, 1, dtype=F64)
    assert g.dtype == F64
    assert np.array_equal(g, logsoftmax.log_softmax_backward(dd.astype(F64), y.astype(F64), 1))
