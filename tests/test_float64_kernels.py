"""The float64 kernels' own pieces: their ``exp`` and the lanes of their sums.

The float64 kernels (``backends/cpu/float64.py``) compute ``exp`` with
``_math.exp_f64_ulp`` (vectors or scalars, the same bits) and sum a row in
``LANES`` compensated lanes; the column kernels keep the same lanes per
column. These tests pin the ``exp``'s accuracy and special values, and that
a row, the same values as a column, a split row and any thread count give
the same bits. (The compensated sums are exact to ~2**-106, so an order of
additions changed between kernels would almost never show in the rounded
results; a lane or element one kernel drops does: 4 of these cases fail
when the row kernel drops every 8th element.)
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit

import logsoftmax
from logsoftmax.backends.cpu._math import exp_f64_ulp
from logsoftmax.backends.cpu._vec import W, vload, vstore


@njit
def _exp_vectors(x, out):
    for i in range(0, x.size, W // 2):
        vstore(out, i, exp_f64_ulp(vload(x, i)))


@njit
def _exp_scalars(x, out):
    for i in range(x.size):
        out[i] = exp_f64_ulp(x[i])


def _exp_both(x):
    x = np.ascontiguousarray(x, np.float64)
    pad = -x.size % (W // 2)
    xp = np.concatenate([x, np.zeros(pad)])
    vec, sca = np.empty_like(xp), np.empty_like(xp)
    _exp_vectors(xp, vec)
    _exp_scalars(xp, sca)
    return vec[: x.size], sca[: x.size]


def test_exp_f64_ulp_is_within_one_ulp_and_vectors_match_scalars():
    if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
        pytest.skip("long double is float64 on this platform")
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-1, 1, 200_000), rng.uniform(-40, 0, 200_000),
                        rng.uniform(-708, 709, 100_000), [0.3465735902799726, -0.3465735902799726]])
    vec, sca = _exp_both(x)
    assert np.array_equal(vec.view(np.int64), sca.view(np.int64))
    ref = np.exp(x.astype(np.longdouble))
    ok = (ref >= np.finfo(np.float64).tiny) & (ref <= np.finfo(np.float64).max)
    ulps = np.abs(vec[ok].astype(np.longdouble) - ref[ok]) / np.spacing(ref[ok].astype(np.float64))
    assert ulps.max() < 0.92  # the docstring's bound (0.856 measured)
    assert ulps.mean() < 0.3


def test_exp_f64_ulp_special_values():
    x = np.array([0.0, -0.0, -np.inf, np.inf, np.nan, -708.39, -708.4, -1000.0, 709.78, 709.79, 1e-300])
    vec, sca = _exp_both(x)
    assert np.array_equal(vec.view(np.int64), sca.view(np.int64))
    assert vec[0] == 1.0 and vec[1] == 1.0
    assert vec[2] == 0.0 and vec[3] == np.inf and np.isnan(vec[4])
    assert vec[5] == np.exp(-708.39)  # the smallest normal results are kept
    assert vec[6] == 0.0 and vec[7] == 0.0  # below DBL_MIN: flushed
    assert vec[8] == np.exp(709.78) and vec[9] == np.inf
    assert vec[10] == 1.0


SHAPES = [(1000, 100), (3, 37), (5, 9000), (1, 20000), (4100, 7), (17, 8), (8, 1), (2, 12289), (9, 15)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_float64_rows_columns_splits_and_threads_give_the_same_bits(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape) * 4
    x[0, 0] = -np.inf
    if shape[0] > 2:
        x[2, :] = -np.inf  # an all--inf row (and, transposed, a column of them)
    threads = numba.get_num_threads()
    for op in (logsoftmax.log_softmax, logsoftmax.softmax):
        want = op(x, 0).view(np.int64)
        assert np.array_equal(op(np.ascontiguousarray(x.T), 1).T.view(np.int64), want)
        assert np.array_equal(op(np.asfortranarray(x), 0).view(np.int64), want)
        try:
            numba.set_num_threads(1)
            one = op(x, 0).view(np.int64)
        finally:
            numba.set_num_threads(threads)
        assert np.array_equal(one, want)
    y = logsoftmax.log_softmax(x.T, 1)
    d = rng.standard_normal(y.shape)
    rows = logsoftmax.log_softmax_backward(d, y, 1)
    cols = logsoftmax.log_softmax_backward(np.ascontiguousarray(d.T), np.ascontiguousarray(y.T), 0).T
    nan = np.isnan(rows)
    assert np.array_equal(nan, np.isnan(cols))
    assert np.array_equal(rows[~nan].view(np.int64), cols[~nan].view(np.int64))


def test_float64_in_place_gives_the_bits_of_out():
    rng = np.random.default_rng(11)
    for shape, axis in (((64, 100), 1), ((100, 30), 0), ((7, 3), 1)):
        x = rng.standard_normal(shape) * 3
        want = logsoftmax.log_softmax(x, axis)
        got = x.copy()
        logsoftmax.log_softmax(got, axis, out=got)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
        y = want
        d = rng.standard_normal(shape)
        gwant = logsoftmax.log_softmax_backward(d, y, axis)
        dd = d.copy()
        logsoftmax.log_softmax_backward(dd, y, axis, out=dd)
        assert np.array_equal(dd.view(np.int64), gwant.view(np.int64))
        yy = y.copy()
        logsoftmax.log_softmax_backward(d, yy, axis, out=yy)
        assert np.array_equal(yy.view(np.int64), gwant.view(np.int64))
