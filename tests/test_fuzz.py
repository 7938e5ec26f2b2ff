"""Random problems through the front door: the accuracy rule and the same bits
for every layout, ``out=``, in place and thread count (``make test-slow``).

Each problem draws a shape of 1-3 dimensions (the axis 1 to 9000 long, the
others up to 1000), an axis (negative half the time), a dtype (float32,
bfloat16, float16, float64), a logit scale (1, 3 or 30), NaN and
infinities in 30% of the problems, and one of the four ops. Its result
must meet the suite's bound against the float64 (long double) oracle, and
give the same bits (NaN payloads aside) with ``out=`` in a permuted layout,
the input in a permuted layout, a strided input, in place and on one
thread. A script of this kind found the float64 backward's error above
PyTorch's (docs/performance.md, the seventh Zen 3 session); it is kept as
a test so every kernel change meets it. Slow (compiles most kernels'
signatures): ``make test-slow``.
"""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest

import logsoftmax
from conftest import (
    REF,
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    backward_scale,
)

pytestmark = pytest.mark.slow

DTYPES = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float64)]
LENGTHS = [1, 2, 3, 5, 8, 9, 16, 17, 31, 32, 33, 48, 49, 64, 100, 112, 128, 129, 250, 384, 1000,
           1024, 1025, 2000, 4096, 4097, 9000]
OTHER = [1, 2, 3, 5, 8, 16, 17, 33, 64, 100, 300, 1000]
OPS = ["log_softmax", "softmax", "log_softmax_backward", "softmax_backward"]
PROBLEMS = 240


def _problem(seed: int):
    rng = np.random.default_rng([20261207, seed])
    dtype = DTYPES[rng.integers(len(DTYPES))]
    nd = int(rng.integers(1, 4))
    n = int(rng.choice(LENGTHS))
    other = [int(rng.choice(OTHER)) for _ in range(nd - 1)]
    while other and np.prod(other) * n > 1_000_000:
        other[int(np.argmax(other))] //= 2
    axis = int(rng.integers(nd))
    shape = list(other)
    shape.insert(axis, n)
    x = rng.normal(0, float(rng.choice([1.0, 3.0, 30.0])), size=shape).astype(dtype)
    if rng.random() < 0.3 and x.size > 4:
        k = int(rng.integers(1, 4))
        x.reshape(-1)[rng.integers(0, x.size, size=k)] = rng.choice([np.inf, -np.inf, np.nan], size=k)
    op = OPS[rng.integers(len(OPS))]
    if rng.random() < 0.5:
        axis -= nd
    return rng, dtype, shape, axis, x, op


def _tolerance(op, dtype, n) -> float:
    # float32 rows longer than 1024 sum float32 terms: up to 5.82 eps with
    # 3-sigma logits at n = 4096, where PyTorch was at 22.7 on the same rows
    # (docs/performance.md, the seventh Zen 3 session): above the suite's 4
    # eps on hundreds of rows. The float64 backward is rounded once.
    if dtype == np.float64 and op.endswith("backward"):
        return 0.51
    if dtype == np.float32 and not op.endswith("backward") and n > 1024:
        return 8.0
    return TOL_EPS[op]


def _same_bits_every_way(f, args, axis, y, rng):
    nd = y.ndim
    perm = list(rng.permutation(nd))
    back = list(np.argsort(perm))
    o = np.empty([y.shape[p] for p in perm], y.dtype).transpose(back)
    f(*args, axis=axis, out=o)
    assert_bitwise_equal(o, y)
    permuted = [np.ascontiguousarray(a.transpose(perm)).transpose(back) for a in args]
    assert_bitwise_equal(f(*permuted, axis=axis), y)
    sax = int(rng.integers(nd))
    strided = []
    for a in args:
        big = list(a.shape)
        big[sax] *= 2
        sl = [slice(None)] * nd
        sl[sax] = slice(0, None, 2)
        b = np.zeros(big, a.dtype)
        b[tuple(sl)] = a
        strided.append(b[tuple(sl)])
    assert_bitwise_equal(f(*strided, axis=axis), y)
    inplace = [a.copy() for a in args]
    f(*inplace, axis=axis, out=inplace[0])
    assert_bitwise_equal(inplace[0], y)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert_bitwise_equal(f(*args, axis=axis), y)
    finally:
        numba.set_num_threads(threads)


@pytest.mark.parametrize("block", range(8))
def test_random_problems_meet_the_accuracy_rule_with_the_same_bits_every_way(block):
    for seed in range(block, PROBLEMS, 8):
        rng, dtype, shape, axis, x, op = _problem(seed)
        n = shape[axis]
        f = getattr(logsoftmax, op)
        where = f"problem {seed}: {dtype} {shape} axis {axis} {op}"
        if op in ("log_softmax", "softmax"):
            args = (x,)
            y = f(x, axis=axis)
            ref, scale = REF[op](x, axis), None
        else:
            fwd = logsoftmax.log_softmax if op == "log_softmax_backward" else logsoftmax.softmax
            dst = fwd(x, axis=axis)
            dst = np.where(np.isfinite(dst.astype(np.float64)), dst, 0).astype(dtype)
            dd = rng.normal(size=shape).astype(dtype)
            args = (dd, dst)
            y = f(dd, dst, axis=axis)
            ref, scale = REF[op](dd, dst, axis), backward_scale(op, dd, dst, axis)
        try:
            assert_close_eps(y, ref, dtype, _tolerance(op, dtype, n), scale=scale)
            _same_bits_every_way(f, args, axis, y, rng)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None
