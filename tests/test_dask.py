"""The Dask backend on the threaded scheduler: plans, dtypes, axes, chunkings,
special values across blocks, errors, laziness and autograd.

The per-block kernels are the ``DaskBackend``'s kernel backend (``"cpu"``).
Whole-row blocks must be bit-identical to one call of that backend; split
rows are held to API.md's accuracy rule against the float64 oracle of
``conftest`` and to the single-call backend's own error plus a small margin
(the merged ``log S`` is rounded once more than the kernel's; see
docs/dask.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import (
    FLOAT_DTYPES,
    LOW_PRECISION,
    REF,
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    assert_specials_match,
    dtype_id,
    max_err_eps,
)

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import logsoftmax  # noqa: E402
from logsoftmax.backends import get_backend, select_backend  # noqa: E402
from logsoftmax.backends.dask import DaskBackend  # noqa: E402

FORWARD = ("log_softmax", "softmax")
BACKWARD = {"log_softmax_backward": "log_softmax", "softmax_backward": "softmax"}

#: (shape, axis, chunks): whole rows, rows split into 2, 3 and 7 blocks,
#: uneven and empty chunks, a non-last axis, and every axis split at once
CHUNKINGS = [
    pytest.param((6, 50), -1, (6, 50), id="one-chunk"),
    pytest.param((6, 50), -1, (2, 50), id="split-rows"),
    pytest.param((6, 50), -1, (3, 25), id="axis-in-2"),
    pytest.param((6, 50), 1, (6, (17, 16, 17)), id="axis-in-3"),
    pytest.param((6, 50), -1, (4, 8), id="axis-in-7-uneven"),
    pytest.param((6, 50), -1, ((1, 0, 5), (20, 0, 3, 27, 0)), id="empty-chunks"),
    pytest.param((40, 3, 5), 0, (6, 2, 5), id="axis0-in-7"),
    pytest.param((4, 37, 6), 1, (3, (12, 1, 24), 4), id="middle-axis-in-3"),
    pytest.param((4, 37, 6), -2, (4, 37, 2), id="middle-axis-whole"),
]


def _kernel():
    """The single-call backend the dask blocks run (the comparison baseline)."""
    return get_backend(DaskBackend().kernel)


def _data(rng, shape, dtype, offset=0.0) -> np.ndarray:
    # a wide spread plus an offset exercises the shift by the block max
    x = rng.standard_normal(shape) * 4.0 + offset
    return x.astype(dtype)


def _single(op, *args, **kwargs):
    """One call of the kernel backend on numpy arrays (the baseline)."""
    with logsoftmax.use_backend(_kernel().name):
        return getattr(logsoftmax, op)(*args, **kwargs)


def _split(shape, axis, chunks) -> bool:
    d = da.zeros(shape, chunks=chunks)
    return d.numblocks[axis % len(shape)] > 1


def _check(op, got, baseline, ref, dtype, split):
    """Whole rows: bit-identical to the baseline. Split rows: the API bound;
    forward also no worse than the baseline's own error plus 1 eps (backward's
    error is the cancellation in ``diff_dst - exp(dst) * sum``, the same in
    any plan, and the baseline may be the extended-precision oracle)."""
    if not split:
        assert_bitwise_equal(got, baseline)
        return
    assert_close_eps(got, ref, dtype, TOL_EPS[op])
    if op in FORWARD and dtype not in LOW_PRECISION:
        assert max_err_eps(got, ref) <= max_err_eps(baseline, ref) + 1.0


# --------------------------------------------------------------------------
# equivalence grid
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape, axis, chunks", CHUNKINGS)
@pytest.mark.parametrize("op", FORWARD)
def test_forward_matches_single_call(op, shape, axis, chunks, dtype, rng):
    x = _data(rng, shape, dtype, offset=300.0)
    y = getattr(logsoftmax, op)(da.from_array(x, chunks=chunks), axis)
    assert isinstance(y, da.Array) and y.dtype == dtype and y.shape == x.shape
    got = y.compute()
    _check(op, got, _single(op, x, axis), REF[op](x, axis), dtype,
           _split(shape, axis, chunks))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape, axis, chunks", CHUNKINGS)
@pytest.mark.parametrize("op", list(BACKWARD))
def test_backward_matches_single_call(op, shape, axis, chunks, dtype, rng):
    x = _data(rng, shape, dtype)
    dst = _single(BACKWARD[op], x, axis)
    diff_dst = _data(rng, shape, dtype)
    args = (da.from_array(diff_dst, chunks=chunks), da.from_array(dst, chunks=chunks))
    y = getattr(logsoftmax, op)(*args, axis)
    assert isinstance(y, da.Array) and y.dtype == dtype
    got = y.compute()
    _check(op, got, _single(op, diff_dst, dst, axis), REF[op](diff_dst, dst, axis),
           dtype, _split(shape, axis, chunks))


def test_backward_with_differently_chunked_inputs(rng):
    x = _data(rng, (6, 50), np.float32)
    dst = _single("log_softmax", x, -1)
    dd = _data(rng, (6, 50), np.float32)
    y = logsoftmax.log_softmax_backward(
        da.from_array(dd, chunks=(3, 10)), da.from_array(dst, chunks=(2, 25))
    )
    assert_close_eps(y.compute(), REF["log_softmax_backward"](dd, dst), np.float32,
                     TOL_EPS["log_softmax_backward"])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    "axis", [-1, 0, 1, (0, 2), (2, 0, 1), None], ids=lambda a: f"axis={a}"
)
@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("chunks", [(5, 6, 7), (2, 3, 4)], ids=["whole", "split"])
def test_logsumexp(chunks, keepdims, axis, dtype, rng):
    x = _data(rng, (5, 6, 7), dtype, offset=-1000.0)
    y = logsoftmax.logsumexp(da.from_array(x, chunks=chunks), axis, keepdims=keepdims)
    ref = REF["logsumexp"](x, axis, keepdims)
    assert isinstance(y, da.Array) and y.shape == ref.shape and y.dtype == dtype
    got = y.compute()
    if chunks == x.shape:
        assert_bitwise_equal(got, _single("logsumexp", x, axis, keepdims=keepdims))
    else:
        assert_close_eps(got, ref, dtype, TOL_EPS["logsumexp"])


# --------------------------------------------------------------------------
# special values whose rows cross block boundaries
# --------------------------------------------------------------------------
def _special_rows(dtype) -> np.ndarray:
    """Rows of 12 split into blocks [0:4], [4:8], [8:12]."""
    inf, nan = np.inf, np.nan
    x = np.tile(np.linspace(-3.0, 2.0, 12), (9, 1))
    x[0, 0:4] = -inf  # all -inf in block 0 only
    x[1, :] = -inf  # all -inf everywhere
    x[2, 9] = nan  # NaN in one block only
    x[3, 5] = inf  # +inf in one block only
    x[4, 2] = -inf  # a single -inf in a finite row
    x[5, :] = -inf
    x[5, 10] = 7.0  # one finite element among -inf, in the last block
    x[6, 6] = 200.0  # one dominant logit: every other term underflows
    x[7, 4:8] = -inf
    x[7, 1] = nan  # NaN beside an all -inf block
    x[8, 0], x[8, 11] = inf, -inf  # +inf and -inf in different blocks
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", FORWARD)
def test_special_values_across_blocks(op, dtype):
    x = _special_rows(dtype)
    got = getattr(logsoftmax, op)(da.from_array(x, chunks=(3, 4)), -1).compute()
    baseline = _single(op, x, -1)
    assert_specials_match(got, baseline)
    assert_close_eps(got, REF[op](x, -1), dtype, TOL_EPS[op])
    exact = 0.0 if op == "log_softmax" else 1.0
    assert got[5, 10] == exact and got[6, 6] == exact  # exact cases stay exact
    # row 0 is -inf/0 in its all -inf block and finite elsewhere
    assert np.all(np.isfinite(got[0, 4:].astype(np.float64)))
    assert np.all(np.isnan(got[[1, 2, 3, 7, 8]].astype(np.float64)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_logsumexp_special_values_across_blocks(dtype):
    x = _special_rows(dtype)
    got = logsoftmax.logsumexp(da.from_array(x, chunks=(3, 4)), -1).compute()
    ref = REF["logsumexp"](x, -1)
    assert_close_eps(got, ref, dtype, TOL_EPS["logsumexp"])
    assert got[1] == -np.inf and got[3] == np.inf and got[8] == np.inf
    assert np.isnan(float(got[2])) and np.isnan(float(got[7]))
    assert got[5] == 7.0 and got[6] == 200.0  # exactly the max


@pytest.mark.parametrize("op", list(BACKWARD))
def test_backward_special_values_across_blocks(op):
    x = _special_rows(np.float32)
    dst = _single(BACKWARD[op], x, -1)
    dd = np.linspace(-1, 1, x.size, dtype=np.float32).reshape(x.shape)
    got = getattr(logsoftmax, op)(
        da.from_array(dd, chunks=(3, 4)), da.from_array(dst, chunks=(3, 4))
    ).compute()
    assert_specials_match(got, _single(op, dd, dst))
    if op == "log_softmax_backward":  # dst = -inf gives diff_dst there
        assert got[0, 0] == dd[0, 0] and got[4, 2] == dd[4, 2]


def test_large_offsets_keep_the_kernel_accuracy(rng):
    """Logits near -1e7 and 1e4 (API.md's examples): the shift by the block max
    keeps the split plan within the single-call error (the unshifted lse per
    block would lose hundreds of eps)."""
    for offset in (-1e7, 1e4):
        x = (rng.standard_normal((4, 3000)) + offset).astype(np.float32)
        got = logsoftmax.log_softmax(da.from_array(x, chunks=(4, 500))).compute()
        ref = REF["log_softmax"](x)
        assert max_err_eps(got, ref) <= max_err_eps(_single("log_softmax", x), ref) + 1


def test_split_every_two_gives_a_deeper_tree_and_the_same_bound(rng):
    x = _data(rng, (3, 400), np.float32, offset=50.0)
    backend = DaskBackend(split_every=2)
    y = backend.log_softmax(da.from_array(x, chunks=(3, 25)), 1, None, np.float32)
    names = {k[0] if isinstance(k, tuple) else k for k in dict(y.dask)}
    assert any("partial" in n for n in names)  # combine levels exist
    assert_close_eps(y.compute(), REF["log_softmax"](x), np.float32, 4.0)


def test_mixed_precision_result_dtype(rng):
    # bfloat16 in, float32 out: the blocks' kernels are those of the other
    # default tests' pair (a new pair of storage types compiles the row
    # kernels again; test_cpu_backend.py, test_mixed_result_dtype_rounds_once)
    x = _data(rng, (4, 30), LOW_PRECISION[0])
    for chunks in ((4, 30), (4, 7)):
        y = logsoftmax.log_softmax(da.from_array(x, chunks=chunks), dtype=np.float32)
        assert y.dtype == np.float32
        assert_close_eps(y.compute(), REF["log_softmax"](x), np.float32, 4.0)


def test_integer_input_is_promoted(rng):
    x = rng.integers(-5, 5, (3, 10))
    y = logsoftmax.log_softmax(da.from_array(x, chunks=(3, 4)))
    assert y.dtype == np.float32
    assert_close_eps(y.compute(), REF["log_softmax"](x), np.float32, 4.0)


def test_empty_arrays():
    for shape, chunks in (((0, 5), (1, 2)), ((3, 0), (1, 1))):
        x = da.zeros(shape, chunks=chunks, dtype=np.float32)
        assert logsoftmax.log_softmax(x).compute().shape == shape
        assert logsoftmax.softmax(x, 0).compute().shape == shape
    lse = logsoftmax.logsumexp(da.zeros((3, 0), chunks=(1, 1), dtype=np.float32))
    np.testing.assert_array_equal(lse.compute(), np.full(3, -np.inf, np.float32))


# --------------------------------------------------------------------------
# dispatch, laziness and errors
# --------------------------------------------------------------------------
def test_dispatch_picks_dask_for_dask_arrays():
    x = da.ones((2, 3), chunks=1)
    assert select_backend(x).name == "dask"
    assert "dask" in logsoftmax.backends()
    assert select_backend(np.ones(3)).name == "cpu"


def test_forced_dask_backend_converts_numpy_input():
    x = np.array([[0.0, 0.0]], np.float32)
    with logsoftmax.use_backend("dask"):
        y = logsoftmax.log_softmax(x)
    assert isinstance(y, da.Array)
    want = np.full((1, 2), np.log(np.float32(0.5)), np.float32)
    np.testing.assert_array_equal(y.compute(), want)


def _exploding(shape):
    """A dask array whose blocks raise when computed: building must not."""

    def boom():
        raise RuntimeError("computed while building the graph")

    return da.from_delayed(dask.delayed(boom)(), shape=shape, dtype=np.float32)


@pytest.mark.parametrize("op", FORWARD + ("logsumexp",))
def test_results_are_lazy(op):
    x = da.concatenate([_exploding((3, 4)), _exploding((3, 4))], axis=1)
    y = getattr(logsoftmax, op)(x, -1)  # split axis; nothing runs yet
    assert isinstance(y, da.Array)
    with pytest.raises(RuntimeError, match="computed while building"):
        y.compute()


def test_axis_errors_are_raised_at_graph_build_time():
    x = _exploding((3, 4))
    with pytest.raises(IndexError, match=r"axis=2 is out of range"):
        logsoftmax.log_softmax(x, 2)
    with pytest.raises(TypeError, match="axis must be an integer"):
        logsoftmax.softmax(x, 1.0)
    with pytest.raises(IndexError, match="out of range"):
        logsoftmax.logsumexp(x, (0, -3))
    with pytest.raises(IndexError, match="out of range"):
        logsoftmax.log_softmax_backward(x, x, -3)


def test_out_is_rejected_with_a_clear_error():
    x = da.ones((2, 3), chunks=1, dtype=np.float32)
    for out in (x, np.empty((2, 3), np.float32)):
        with pytest.raises(ValueError, match=r"out= is not supported by the 'dask'"):
            logsoftmax.log_softmax(x, out=out)
    with pytest.raises(ValueError, match="immutable"):
        logsoftmax.softmax_backward(x, x, out=x)


def test_backward_shape_and_dtype_errors():
    a = da.ones((2, 3), chunks=1, dtype=np.float32)
    with pytest.raises(ValueError, match="expected the same shape"):
        logsoftmax.log_softmax_backward(a, da.ones((2, 4), chunks=1, dtype=np.float32))
    with pytest.raises(TypeError, match="expected the same dtype"):
        logsoftmax.log_softmax_backward(a, a.astype(np.float16))
    with pytest.raises(TypeError, match="complex"):
        logsoftmax.log_softmax(a.astype(np.complex64))
