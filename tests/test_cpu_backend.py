"""Kernel properties of the fused CPU backend (``logsoftmax.backends.cpu``).

The API-level conformance suite (tests/test_functional.py) checks the public
contract on every backend; this file checks what is specific to the numba
kernels: agreement with the float64 reference over layouts the stride
mapper must handle, bit-identity across layouts / out= / in place / thread
counts / split long rows, the O(rows) memory rule, accuracy against PyTorch
on long rows, exact cases, the float32 ``exp``, and lazy compilation.

Errors are in units of the dtype's eps (API.md section 1):
``|y - y_ref| / (eps * max(1, |y_ref|))``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import logsoftmax
from logsoftmax import dtypes
from logsoftmax.backends import Op, get_backend

numba = pytest.importorskip("numba")

CPU = get_backend("cpu")
REF = get_backend("reference")

F32, BF16, F16, F64 = dtypes.float32, dtypes.bfloat16, dtypes.float16, dtypes.float64
ALL = [F32, BF16, F16, F64]
FWD = ["log_softmax", "softmax"]
BWD = ["log_softmax_backward", "softmax_backward"]

# Max error in eps vs the float64 reference on random inputs (short rows).
# bf16/f16: the float32 result rounded once, so half an ulp plus a hair.
FWD_TOL = {F32: 2.0, F64: 2.0, BF16: 0.51, F16: 0.51}
BWD_TOL = {F32: 1.0, F64: 4.0, BF16: 0.51, F16: 0.51}


# max error in eps of dtype (API.md section 1; one NaN/inf rule for all)
from logsoftmax.accuracy import max_eps_error as err_eps  # noqa: E402


def bits(a) -> np.ndarray:
    """Raw bytes of ``a`` in logical order, for bit-for-bit comparisons."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8)


def special_rows(dtype, n=37) -> np.ndarray:
    """Rows of special values (see API.md section 2) plus two random rows."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((10, n)) * 3).astype(np.float64)
    x[0, 5] = np.nan
    x[1, 3] = np.inf
    x[2, :] = -np.inf
    x[3, ::3] = -np.inf
    x[4, :] = -np.inf
    x[4, 11] = 1.5  # one finite among -inf: exact 0 / 1
    x[5, 0] = 200.0  # one dominant logit
    x[6, :] = -np.inf
    x[6, 2] = np.nan
    x[7, 1] = np.inf
    x[7, 2] = -np.inf
    return x.astype(dtype)


def layouts(base: np.ndarray) -> dict[str, np.ndarray]:
    """Views of ``base`` (3-d) the stride mapper must handle without copying."""
    return {
        "contiguous": base,
        "negative": base[::-1, :, ::-1],
        "transposed": base.transpose(2, 0, 1),
        "sliced": base[::2, 1:, 3:-2:3],
        "broadcast": np.broadcast_to(base[:1], (3,) + base.shape[1:]),
        "swapped": np.swapaxes(base, 1, 2),
    }


def _fwd(op, x, axis, out=None, dtype=None):
    dt = np.dtype(dtype or x.dtype)
    return getattr(CPU, op)(x, axis, out, dt)


# ---------------------------------------------------------------------------
# agreement with the reference over layouts
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL, ids=dtypes.name_of)
@pytest.mark.parametrize("name", list(layouts(np.zeros((2, 2, 2)))))
def test_forward_layouts_match_reference_and_contiguous_bits(dtype, name):
    rng = np.random.default_rng(1)
    base = (rng.standard_normal((4, 5, 40)) * 4).astype(dtype)
    base[0, 0, :] = -np.inf
    base[1, 2, 7] = np.nan
    base[2, 3, 0] = np.inf
    x = layouts(base)[name]
    for axis in range(3):
        for op in FWD:
            y = _fwd(op, x, axis)
            r = getattr(REF, op)(x, axis, None, dtype)
            assert err_eps(y, r, dtype) <= FWD_TOL[dtype] + 1.0 * (op == "softmax")
            # any input strides: the same bits as a contiguous copy
            c = _fwd(op, np.ascontiguousarray(x), axis)
            assert np.array_equal(bits(y), bits(c)), (op, axis)


@pytest.mark.parametrize("dtype", ALL, ids=dtypes.name_of)
@pytest.mark.parametrize("name", ["contiguous", "negative", "transposed", "broadcast"])
def test_backward_layouts_match_reference(dtype, name):
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((4, 5, 40)) * 3).astype(dtype)
    x = layouts(base)[name]
    for axis in range(3):
        dd = rng.standard_normal(x.shape).astype(dtype)
        for op, fwd in zip(BWD, FWD):
            y = _fwd(fwd, np.ascontiguousarray(x), axis)
            yv = layouts(np.ascontiguousarray(y))["contiguous"]
            g = getattr(CPU, op)(dd, yv, axis, None, np.dtype(dtype))
            r = getattr(REF, op)(dd, yv, axis, None, np.dtype(dtype))
            tol = BWD_TOL[dtype] + (2.0 if op == "softmax_backward" else 0.0)
            assert err_eps(g, r, dtype) <= tol, (op, axis)


@pytest.mark.parametrize("dtype", ALL, ids=dtypes.name_of)
def test_special_value_rows_match_reference(dtype):
    x = special_rows(dtype)
    for axis, xv in [(1, x), (0, np.ascontiguousarray(x.T))]:  # rows and inner
        for op in FWD:
            y = _fwd(op, xv, axis)
            r = getattr(REF, op)(xv, axis, None, dtype)
            assert err_eps(y, r, dtype) <= FWD_TOL[dtype] + 1.0
        lse = CPU.logsumexp(xv, (axis,), False)
        lse_tol = 2.0 if dtype == F64 else 0.51  # float64 vs a long double oracle
        assert err_eps(lse, REF.logsumexp(xv, (axis,), False), dtype) <= lse_tol
    y = _fwd("log_softmax", x, 1)
    assert np.all(np.isnan(y[[0, 1, 2, 6, 7]].astype(np.float64)))
    assert np.all(np.isneginf(y[3, ::3].astype(np.float64)))
    assert y[4, 11] == 0 and _fwd("softmax", x, 1)[4, 11] == 1
    dd = np.ones_like(x)
    g = CPU.log_softmax_backward(dd, y, 1, None, np.dtype(dtype))
    assert np.array_equal(g[3, ::3], dd[3, ::3])  # -inf dst: diff_dst passes


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtypes.name_of)
@pytest.mark.parametrize("n", [100, 3000])  # float32: accurate and fast paths
def test_nan_with_payload_makes_the_whole_row_nan(dtype, n):
    """A NaN is a NaN whatever its payload bits: the row's outputs (and its
    logsumexp, and the gradient through it) are all NaN. The exponent-field
    scaling of ``exp`` once turned a NaN with low payload bits into a finite
    number, so a float32 row of 3000 elements with one such NaN gave 2999
    finite log_softmax outputs."""
    if dtype == F32:
        nans = np.array([0x7FC00001, 0x7F800001, 0xFFC12345, 0x7FC00000], np.uint32)
    else:
        nans = np.array([0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8123456789ABC,
                         0x7FF8000000000000], np.uint64)
    for payload in nans:
        x = (np.random.default_rng(int(payload)).standard_normal((3, n)) * 3).astype(dtype)
        x[1, 5] = payload.view(dtype)
        for axis, xv in [(1, x), (0, np.ascontiguousarray(x.T))]:
            for op in FWD:
                y = np.moveaxis(_fwd(op, xv, axis), axis, 1)
                assert np.isnan(y[1]).all(), (hex(payload), op, axis)
                assert not np.isnan(y[[0, 2]]).any()
            lse = CPU.logsumexp(xv, (axis,), False)
            assert np.isnan(lse[1]) and not np.isnan(lse[[0, 2]]).any()
        y = _fwd("log_softmax", x, 1)
        y[1] = x[1]  # a NaN in dst: exp(dst) is NaN, so is the row's gradient
        g = CPU.log_softmax_backward(np.ones_like(x), y, 1, None, np.dtype(dtype))
        assert np.isnan(g[1, 5]) and not np.isnan(g[[0, 2]]).any()


def test_logsumexp_special_rows():
    x = np.array(
        [
            [-np.inf] * 3,
            [1.0, np.inf, -np.inf],
            [np.nan, np.inf, 1.0],
            [np.nan] + [-np.inf] * 2,
        ],
        np.float32,
    )
    for xv, axis in [(x, 1), (np.ascontiguousarray(x.T), 0)]:
        r = CPU.logsumexp(xv, (axis,), False)
        assert np.isneginf(r[0]) and np.isposinf(r[1])
        assert np.isnan(r[2]) and np.isnan(r[3])


# ---------------------------------------------------------------------------
# mixed result dtypes: compute at the input precision, round once
# ---------------------------------------------------------------------------
def _slow(*values):
    """A parametrize case run by ``make test-slow`` only."""
    return pytest.param(*values, marks=pytest.mark.slow)


# Each pair is a new signature of the short-row kernels (40-67 s of
# compiling a kernel on a cold cache, AMD EPYC Zen 3): the default run takes
# the two pairs that other default tests compile anyway (the driver's
# float32 -> bfloat16 grid, whose backward is bfloat16 -> float32, and the
# bfloat16 sums' float32 results), and `make test-slow` the float16 ones
@pytest.mark.heavy
@pytest.mark.parametrize(
    "src,dst", [(F32, BF16), (BF16, F32), _slow(F16, F32), (F64, F16)]
)
def test_mixed_result_dtype_rounds_once(src, dst):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 300)) * 3).astype(src)
    # the reference rounds its float64 result once; our compute precision is
    # the input's, so measure in the coarser of the two dtypes' eps
    coarse = src if dtypes.eps(src) > dtypes.eps(dst) else dst
    for op in FWD:
        y = _fwd(op, x, 1, dtype=dst)
        assert y.dtype == dst
        r = getattr(REF, op)(x, 1, None, dst)
        assert err_eps(y, r, coarse) <= FWD_TOL[coarse] + 1.0
    y = _fwd("log_softmax", x, 1)
    dd = rng.standard_normal(x.shape).astype(src)
    g = CPU.log_softmax_backward(dd, y, 1, None, dst)
    r = REF.log_softmax_backward(dd, y, 1, None, dst)
    assert g.dtype == dst and err_eps(g, r, coarse) <= BWD_TOL[coarse] + 0.5


# ---------------------------------------------------------------------------
# bit-identity: allocating == out= (any strides) == in place; threads; splits
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dtypes.name_of)
@pytest.mark.parametrize("axis", [0, 1])
def test_inplace_out_alloc_bit_identical(dtype, axis):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((64, 96)) * 3).astype(dtype)
    for op in FWD:
        a = _fwd(op, x, axis)
        strided = np.zeros((64, 192), dtype)[:, ::-2]
        _fwd(op, x, axis, out=strided)
        transposed = np.zeros((96, 64), dtype).T
        _fwd(op, x, axis, out=transposed)
        inplace = x.copy()
        assert _fwd(op, inplace, axis, out=inplace) is inplace
        for other in (strided, transposed, inplace):
            assert np.array_equal(bits(a), bits(other)), op
    dd = rng.standard_normal(x.shape).astype(dtype)
    y = _fwd("log_softmax", x, axis)
    for op in BWD:
        g = getattr(CPU, op)(dd, y, axis, None, np.dtype(dtype))
        d2, y2 = dd.copy(), y.copy()
        getattr(CPU, op)(d2, y, axis, d2, np.dtype(dtype))  # out is diff_dst
        getattr(CPU, op)(dd, y2, axis, y2, np.dtype(dtype))  # out is dst
        assert np.array_equal(bits(g), bits(d2)) and np.array_equal(bits(g), bits(y2))


def _with_threads(n, fn):
    old = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        return fn()
    finally:
        numba.set_num_threads(old)


@pytest.mark.parametrize("shape", [(1, 70_001), (3, 20_000), (200, 999)])
def test_thread_count_and_row_split_deterministic(shape):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    dd = rng.standard_normal(shape).astype(np.float32)

    def run():
        y = _fwd("log_softmax", x, 1)
        return (
            y,
            _fwd("softmax", x, 1),
            CPU.log_softmax_backward(dd, y, 1, None, np.dtype(np.float32)),
            CPU.logsumexp(x, (1,), False),
        )

    one, two = _with_threads(1, run), _with_threads(2, run)
    for a, b in zip(one, two):
        assert np.array_equal(bits(a), bits(b))
    # a long row alone (split over threads) == the same row among many rows
    # (one row per thread), and == the row as a strided (inner) axis
    many = np.concatenate([x] * 4)
    assert np.array_equal(bits(one[0]), bits(_fwd("log_softmax", many, 1)[: shape[0]]))
    inner = _fwd("log_softmax", np.ascontiguousarray(x.T), 0).T
    assert np.array_equal(bits(one[0]), bits(inner))
    lse_many = CPU.logsumexp(many, (1,), False)[: shape[0]]
    assert np.array_equal(bits(one[3]), bits(lse_many))


@pytest.mark.parametrize(
    "dtype, n, threads",
    [(F32, 32_771, 1), (F32, 300, 1), (F32, 100, 1), (F32, 24, 1), (BF16, 32_771, 1),
     (BF16, 112, 1), (F16, 300, 1), (F32, 64, 2), (F32, 16, 2), (BF16, 40, 2),
     (F32, 32, 2), (F32, 30, 1), (BF16, 32_771, 2), (F32, 2000, 2)],  # (rows of <= 32: batches of 64 rows)
)
def test_streaming_stores_same_bits(dtype, n, threads):
    """Outputs of >= ``alloc.stream_bytes`` go out by streaming stores
    (aligned body, ordinary head and tail; short rows only when they start
    on a line, or a task's rows as one span when they lie end to end):
    the same bits as the ordinary stores of smaller calls, at every
    alignment of ``out``, in place, forward and backward, softmax too. Rows
    of odd lengths start at every alignment; on two threads, two spans meet
    inside a line. Long rows (pipelined) off a line write the line one row
    shares with the next as one streaming store, lanes taking either row's
    statistics (in place, after both rows' elements there are read); on two
    threads, the row where a task starts writes that line by ordinary
    stores. Rows past 1000 elements have one whose last chunk is all -inf
    (the chunk's special-value path inside the pipelined loop)."""
    from logsoftmax.backends.cpu.alloc import stream_bytes

    itemsize = np.dtype(dtype).itemsize
    r = -(-stream_bytes(itemsize, True) // (n * itemsize)) + 3
    step = max(16, r // 64)
    rng = np.random.default_rng(16)
    x = (rng.standard_normal((r, n)) * 3).astype(dtype)
    if n > 1000:  # a row whose last chunk is all -inf (a whole row of one chunk)
        x[1, -(n % 4096 or 4096):] = -np.inf
    dd = rng.standard_normal((r, n)).astype(dtype)
    dt = np.dtype(dtype)

    def blocks(fn, *a):  # small calls: ordinary stores
        return np.concatenate([fn(*(v[i : i + step] for v in a)) for i in range(0, r, step)])

    def run():
        y = blocks(lambda v: _fwd("log_softmax", v, 1), x)
        sm = blocks(lambda v: _fwd("softmax", v, 1), x)
        g = blocks(lambda d, v: CPU.log_softmax_backward(d, v, 1, None, dt), dd, y)
        gs = blocks(lambda d, v: CPU.softmax_backward(d, v, 1, None, dt), dd, sm)
        buf = np.empty(x.size + 64, dtype)
        for shift in (0, 1, 5):
            o = buf[shift : shift + x.size].reshape(x.shape)
            _fwd("log_softmax", x, 1, o)
            assert np.array_equal(bits(o), bits(y)), shift
            _fwd("softmax", x, 1, o)
            assert np.array_equal(bits(o), bits(sm)), shift
            CPU.log_softmax_backward(dd, y, 1, o, dt)
            assert np.array_equal(bits(o), bits(g)), shift
            CPU.softmax_backward(dd, sm, 1, o, dt)
            assert np.array_equal(bits(o), bits(gs)), shift
        xi, di, yi = x.copy(), dd.copy(), y.copy()
        _fwd("log_softmax", xi, 1, xi)
        CPU.log_softmax_backward(di, y, 1, di, dt)
        assert np.array_equal(bits(xi), bits(y)) and np.array_equal(bits(di), bits(g))
        CPU.log_softmax_backward(dd, yi, 1, yi, dt)  # in place into dst
        assert np.array_equal(bits(yi), bits(g))
        smi = sm.copy()
        CPU.softmax_backward(dd, smi, 1, smi, dt)
        assert np.array_equal(bits(smi), bits(gs))

    _with_threads(threads, run)


def test_python_and_the_kernels_stream_from_the_same_size():
    """``alloc.stream_bytes`` (the front door faults a streamed output's
    pages in first) and the kernels' ``rows.streams_items`` (streaming
    stores) draw one line, per item size, row or column kernels, on this
    CPU: float32 rows from ``STREAM_BYTES_F32_AMD`` on an AMD core, every
    other output from ``STREAM_BYTES``."""
    from numba import njit

    from logsoftmax.backends.cpu import alloc, rows
    from logsoftmax.backends.cpu._vec import on_amd

    @njit
    def kernels_stream(g, itemsize, row_kernels):
        return rows.streams_items(g, itemsize, row_kernels)

    amd = njit(lambda: on_amd())()

    for itemsize in (2, 4, 8):
        for row_kernels in (True, False):
            line = alloc.stream_bytes(itemsize, row_kernels)
            assert line in (alloc.STREAM_BYTES, alloc.STREAM_BYTES_F32_AMD)
            assert (line == alloc.STREAM_BYTES) == (itemsize != 4 or not row_kernels or not amd)
            for elems, streamed in ((line // itemsize - 1, False), (line // itemsize, True)):
                g = np.zeros(16, np.int64)
                g[:4] = (1, 1, elems, 1)  # (outer1, outer2, n, inner)
                assert kernels_stream(g, itemsize, row_kernels) == streamed, (itemsize, row_kernels, elems)


@pytest.mark.parametrize("n, in_dtype", [(32, F32), (48, F32), (128, F32), (32, BF16)],
                         ids=["32", "48", "128", "32-bf16-in"])
def test_streamed_rows_of_whole_vectors_off_a_line_give_the_same_bits(n, in_dtype):
    """A streamed float32 output whose rows are 2 or 8 whole vectors,
    starting 16 bytes past a line (as numpy's big arrays do), is written as
    one span of lines, each joined from the end of one row-frame vector and
    the start of the next (``rows._write_span_joined``); 32 or 48 bytes
    past, or rows of 3 vectors, its shared lines blend two rows' statistics
    (``rows._write_span``). The bits of small unstreamed calls, log_softmax
    and softmax, into outputs that start as a sentinel, in place (float32
    input), on one thread and on two (two spans, each with its own first
    and last partial lines); bfloat16 rows into a float32 output too."""
    from logsoftmax.backends.cpu.alloc import stream_bytes

    r = -(-stream_bytes(4, True) // (n * 4)) + 21  # a partial last batch
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((r, n)) * 3).astype(in_dtype)
    x[3, 5] = np.nan
    x[70, :] = -np.inf
    x[r - 2, 0] = np.inf
    step = max(16, r // 64)
    want = {op: np.concatenate([_fwd(op, x[i : i + step], 1, dtype=F32) for i in range(0, r, step)])
            for op in ("log_softmax", "softmax")}
    buf = np.empty(x.size + 64, F32)
    line = (-buf.ctypes.data) % 64 // 4  # buf[line] starts a line

    def run():
        for past in (4, 8, 12):  # elements past a line: 16, 32, 48 bytes
            o = buf[line + past : line + past + x.size].reshape(x.shape)
            for op in ("log_softmax", "softmax"):
                o[...] = 7.0
                _fwd(op, x, 1, o, dtype=F32)
                assert np.array_equal(bits(o), bits(want[op])), (past, op)
                if in_dtype != F32:
                    continue
                o[...] = x
                _fwd(op, o, 1, o)  # in place
                assert np.array_equal(bits(o), bits(want[op])), (past, op, "in place")

    for threads in (1, 2):
        _with_threads(threads, run)


@pytest.mark.parametrize(
    "dtype, c, w",
    [(F32, 64, 1000), (BF16, 64, 1000), (F32, 40, 1000), (F32, 42, 1008), (F32, 100, 2000),
     (F16, 300, 256), (BF16, 100, 200)],
)
def test_streaming_column_stores_same_bits(dtype, c, w):
    """The column kernels stream big outputs too (each tile row from its
    first 64-byte boundary), forward and backward: the same bits as small
    calls on slices, at two alignments of ``out`` and in place (40
    channels: the float32 backward's accurate path). Rows of 1008 float32
    (a whole number of lines) take the forward's sweeps of
    ``columns.WRITE_ROWS`` rows; 42 of them leave two rows over. 100
    channels of 2000 columns (two tiles a plane) take each next tile's max
    inside this one's sums (``columns.PIPED_LANE_ROWS``). 16-bit rows under
    1 KiB stream each tile as one span on AMD cores (``columns.spans16``):
    rows of 256 float16 (whole lines) and of 200 bfloat16 (a line holds
    the end of one row and the start of the next at every offset)."""
    from logsoftmax.backends.cpu.alloc import STREAM_BYTES

    # NCHW-like: axis 1, inner w columns (tiles of up to 1024)
    dt = np.dtype(dtype)
    outer = -(-STREAM_BYTES // (c * w * dt.itemsize)) + 1
    rng = np.random.default_rng(17)
    x = (rng.standard_normal((outer, c, w)) * 3).astype(dtype)
    dd = rng.standard_normal(x.shape).astype(dtype)

    def slices(fn, *a):
        return np.concatenate([fn(*(v[i : i + 1] for v in a)) for i in range(outer)])

    ref = slices(lambda v: _fwd("log_softmax", v, 1), x)
    sm = slices(lambda v: _fwd("softmax", v, 1), x)
    g = slices(lambda d, v: CPU.log_softmax_backward(d, v, 1, None, dt), dd, ref)
    gs = slices(lambda d, v: CPU.softmax_backward(d, v, 1, None, dt), dd, sm)
    buf = np.empty(x.size + 64, dtype)
    for shift in (0, 3):
        o = buf[shift : shift + x.size].reshape(x.shape)
        _fwd("log_softmax", x, 1, o)
        assert np.array_equal(bits(o), bits(ref)), shift
        _fwd("softmax", x, 1, o)
        assert np.array_equal(bits(o), bits(sm)), shift
        CPU.log_softmax_backward(dd, ref, 1, o, dt)
        assert np.array_equal(bits(o), bits(g)), shift
        CPU.softmax_backward(dd, sm, 1, o, dt)
        assert np.array_equal(bits(o), bits(gs)), shift
    xi, di = x.copy(), dd.copy()
    _fwd("log_softmax", xi, 1, xi)
    CPU.log_softmax_backward(di, ref, 1, di, dt)
    assert np.array_equal(bits(xi), bits(ref)) and np.array_equal(bits(di), bits(g))


@pytest.mark.parametrize("dtype, n", [(F32, 600), (F32, 1100), (BF16, 700)])
def test_column_tile_width_changes_no_bit(dtype, n):
    """Wide column tiles (``columns.tile_width_for``: the backward's, and
    the forward's on CPUs with a big L3) give the bits of the 1024-wide ones and of the public call, forward and
    backward, log_softmax and softmax, in place too (600 rows: the float32
    forward's accurate path; 1100: its fast path; widths that end
    mid-vector too). Tiles wider than 1024 take the pipelined statistics
    (the next tile's max inside this tile's sums); 1024 does not."""
    from logsoftmax.backends import Op
    from logsoftmax.backends.cpu import columns
    from logsoftmax.backends.cpu.layout import layout

    dt = np.dtype(dtype)
    rng = np.random.default_rng(18)
    x = (rng.standard_normal((n, 4100)) * 3).astype(dtype)
    dd = rng.standard_normal(x.shape).astype(dtype)
    accurate = np.bool_(dt == F32 and n <= 1024)
    flat = lambda a: a.reshape(-1).view(np.uint16) if dt.itemsize == 2 else a.reshape(-1)  # noqa: E731
    for name, op in (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX))):
        y = _fwd(name, x, 0)
        g = getattr(CPU, name + "_backward")(dd, y, 0, None, dt)
        # 800: FAST16_WIDTH; 4112: one tile spans every column
        for J in (800, 1024, 2048, 2096, 4096, 4112):
            o = np.empty_like(x)
            lay = layout(x.shape, [x.strides, o.strides], [dt.itemsize] * 2, 0)
            columns.forward_tiles(flat(x), flat(o), lay.g, op, accurate, J, 0, -1)
            assert np.array_equal(bits(o), bits(y)), (name, J)
            o[...] = x  # in place: the next tile's max is read while this one is written
            columns.forward_tiles(flat(o), flat(o), lay.g, op, accurate, J, 0, -1)
            assert np.array_equal(bits(o), bits(y)), (name, J, "in place")
            lay = layout(x.shape, [dd.strides, y.strides, o.strides], [dt.itemsize] * 3, 0)
            columns.backward_tiles(flat(dd), flat(y), flat(o), lay.g, op, np.bool_(False), J, 0, -1)
            assert np.array_equal(bits(o), bits(g)), (name, J)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtypes.name_of)
@pytest.mark.parametrize("n", [257, 300, 384, 1024, 1025])
def test_long_16bit_columns_give_the_bits_of_rows(dtype, n):
    """16-bit columns of more than ``columns.LANE_MAJOR_ROWS`` rows (the fast
    path's row-major sums: lane by lane up to ``columns.LANE_ORDER_ROWS``,
    through the ``64 x J`` scratch beyond) give the bits of the same values
    laid out as contiguous rows (the row kernels), log_softmax and softmax,
    in place too; with an all--inf column, a NaN, an inf and one finite
    value among -inf."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((2, n, 200)) * 3).astype(dtype)
    x[0, :, 3] = -np.inf
    x[1, n // 2, 5] = np.nan
    x[0, n - 1, 9] = np.inf
    x[1, :, 11] = -np.inf
    x[1, 200, 11] = 1.5
    rows = np.ascontiguousarray(np.moveaxis(x, 1, 2))
    for op in FWD:
        want = np.moveaxis(_fwd(op, rows, 2), 2, 1)
        assert np.array_equal(bits(_fwd(op, x, 1)), bits(want)), op
        o = x.copy()
        _fwd(op, o, 1, o)
        assert np.array_equal(bits(o), bits(want)), (op, "in place")


@pytest.mark.parametrize("dtype, n", [(F16, 300), (BF16, 600), (F16, 1500)], ids=str)
def test_write_piped_tiles_give_the_bits_of_rows(dtype, n):
    """16-bit fast-path column tiles of more than ``columns.LANE_MAJOR_ROWS``
    rows take the next tile's max inside their write pass
    (``columns.WRITE_PIPED_BYTES``; Intel only). Over every range of tiles a
    thread may get (the next tile in the same plane, in the next plane, or
    none) and several widths (the last tile of a plane ending mid-vector
    too), the results are
    the bits of the same values laid out as rows, log_softmax and softmax,
    in place too. Special values lie in tiles that a write pass takes the
    max of (an all--inf column, a NaN, an inf, one finite value among -inf),
    and so do maxima on the first, second, middle and last two rows, far
    above the rest (a missed one makes the sums overflow)."""
    from logsoftmax.backends import Op
    from logsoftmax.backends.cpu import columns
    from logsoftmax.backends.cpu.layout import layout

    dt = np.dtype(dtype)
    rng = np.random.default_rng(n)
    ni = 200
    x = (rng.standard_normal((3, n, ni)) * 3).astype(dtype)
    x[1, :, 150] = -np.inf
    x[2, n // 3, 20] = np.nan
    x[0, n - 1, 199] = np.inf
    x[2, :, 77] = -np.inf
    x[2, n - 2, 77] = 2.5
    # a max the write pass must not miss: without it, exp(x - m) overflows
    for i, r in enumerate((0, 1, n // 2, n - 2, n - 1)):
        x[:, r, 30 + 37 * i] = 100.0
    rows = np.ascontiguousarray(np.moveaxis(x, 1, 2))
    raw = np.int16 if dt == F16 else np.uint16  # the backend's views of 16-bit data
    flat = lambda a: a.reshape(-1).view(raw)  # noqa: E731
    for name, op in (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX))):
        want = np.moveaxis(_fwd(name, rows, 2), 2, 1)
        # (widths are multiples of W, tiles need not be)
        widths = [J for J in (64, 80, 208) if n * J * dt.itemsize <= columns.WRITE_PIPED_BYTES]
        assert columns.LANE_MAJOR_ROWS < n <= columns.CHUNK and widths  # the tiles that pipe
        for J in widths:
            ntile = 3 * -(-ni // J)
            o = np.empty_like(x)
            lay = layout(x.shape, [x.strides, o.strides], [dt.itemsize] * 2, 1)
            for t0, t1 in ((0, ntile), (0, 1), (1, ntile - 1), (ntile - 2, ntile)):
                o[...] = 0
                columns.forward_tiles(flat(x), flat(o), lay.g, op, np.bool_(False), J, t0, t1)
                for t in range(t0, t1):
                    k = t % (ntile // 3)
                    got = o[t // (ntile // 3), :, k * J:(k + 1) * J]
                    exp = want[t // (ntile // 3), :, k * J:(k + 1) * J]
                    assert np.array_equal(bits(got), bits(exp)), (name, J, t0, t1, t)
            o[...] = x  # in place: the next tile's max is read while this one is written
            columns.forward_tiles(flat(o), flat(o), lay.g, op, np.bool_(False), J, 0, ntile)
            assert np.array_equal(bits(o), bits(want)), (name, J, "in place")


def test_staged_column_tiles_give_the_same_bits():
    """Long float32 columns whose rows lie a multiple of 4 KiB apart (300 x
    32768, axis 0: 128 KiB) are copied a tile at a time into a dense stage
    before the column passes (``columns.staged_rows``; outputs of at least
    32 MiB only). Their bits are the row kernel's on the same values (a
    transposed copy) and those of the same columns 64 bytes further apart
    (not staged), allocating, into ``out=`` and in place, log_softmax and
    softmax, with special values, tiles ending mid-vector too."""
    from logsoftmax.backends import Op
    from logsoftmax.backends.cpu import columns
    from logsoftmax.backends.cpu.layout import layout

    n, ni = 300, 32768
    assert columns.staged_rows(n, ni * 4, 4)
    assert not columns.staged_rows(n, (ni + 16) * 4, 4)  # the padded twin
    assert not columns.staged_rows(256, ni * 4, 4)  # summed lane-major
    rng = np.random.default_rng(23)
    x = (rng.standard_normal((n, ni)) * 3).astype(F32)
    x[:, 5] = -np.inf
    x[7, 9] = np.nan
    x[3, 11] = np.inf
    x[:40, 13] = -np.inf
    padded = np.empty((n, ni + 16), F32)[:, :ni]
    padded[...] = x
    for name, op in (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX))):
        rows = _fwd(name, np.ascontiguousarray(x.T), 1).T
        y = _fwd(name, x, 0)
        assert np.array_equal(bits(y), bits(rows)), name
        assert np.array_equal(bits(_fwd(name, padded, 0)), bits(rows)), name
        o = np.empty_like(x)
        lay = layout(x.shape, [x.strides, o.strides], [4, 4], 0)
        assert columns.stages(lay.g, 4, 4)
        # 256: the staged width (columns.STAGED_WIDTH) the front door takes on Intel
        for J in (256, 1024, 2096):  # (o: numpy's, 16 bytes past a line: tiles moved to lines)
            columns.forward_tiles(x.reshape(-1), o.reshape(-1), lay.g, op, np.bool_(True), J, 0, -1)
            assert np.array_equal(bits(o), bits(rows)), (name, J)
        z = x.copy()
        _fwd(name, z, 0, z)
        assert np.array_equal(bits(z), bits(rows)), (name, "in place")


def test_staged_sums_lane_major_and_row_major_give_the_same_bits():
    """A staged tile's sums run lane-major on AMD and row-major elsewhere
    (``columns.forward_tiles``: a per-CPU speed choice), so the front door
    exercises one loop per machine; here both loops run on one dense stage,
    with special values and a tile ending mid-vector, and give the same
    chunk sums, accurate and fast."""
    from logsoftmax.backends.cpu import columns
    from logsoftmax.backends.cpu._vec import W
    from logsoftmax.backends.cpu.segment import LANES32, LANES64

    n, J, jn = 300, 96, 83
    rng = np.random.default_rng(31)
    stage = (rng.standard_normal(n * J + W) * 3).astype(F32)
    tile = stage[: n * J].reshape(n, J)
    tile[:, 5] = -np.inf
    tile[7, 9] = np.nan
    tile[3, 11] = np.inf
    tile[:40, 13] = -np.inf
    mc = np.full(J + W, -np.inf, F32)
    mc[:jn] = tile[:, :jn].max(axis=0)
    for accurate in (True, False):
        sums = []
        for major in ("lane", "row"):
            acc32 = np.empty(LANES32 * J, F32)
            acc64 = np.empty(LANES64 * J)
            sc = np.zeros(J + W)
            if major == "lane":
                columns._tile_sums_lane_major(stage, 0, J, n, jn, accurate, acc32, acc64, mc, sc, -1, 0, -1, 0, mc)
            else:
                columns._tile_sums_row_major(
                    stage, 0, J, n, jn, accurate, acc32, acc64, mc, sc, J, -1, 0, mc
                )
            sums.append(sc[:jn].copy())
        assert np.array_equal(bits(sums[0]), bits(sums[1])), accurate
        finite = np.isfinite(mc[:jn])
        with np.errstate(invalid="ignore"):
            ref = np.exp(tile[:, :jn].astype(np.float64) - mc[:jn]).sum(axis=0)
        np.testing.assert_allclose(sums[0][finite], ref[finite], rtol=1e-5)


def test_column_tiles_moved_to_the_output_lines_give_the_same_bits():
    """A streamed column output whose rows all start at one offset in a
    64-byte line has its tiles moved so that each tile row starts on a line
    (``columns.line_shift``; one more tile where the columns were a whole
    number of tiles): the same bits as the aligned output, for outputs 0,
    16 and 48 bytes past a line, forward and backward, and in place."""
    from logsoftmax.backends.cpu import columns
    from logsoftmax.backends.cpu.layout import layout

    n, ni = 40, 1 << 18  # 42 MB: streamed
    rng = np.random.default_rng(29)
    x = (rng.standard_normal((n, ni)) * 3).astype(F32)
    x[:, 17] = -np.inf
    x[5, 33] = np.nan
    dd = rng.standard_normal(x.shape).astype(F32)
    want = _fwd("log_softmax", x, 0)
    gwant = CPU.log_softmax_backward(dd, want, 0, None, F32)
    raw = np.empty(x.size + 64, F32)
    base = (-raw.ctypes.data % 64) // 4
    for off in (0, 4, 12):  # elements: 0, 16, 48 bytes past a line
        o = raw[base + off : base + off + x.size].reshape(x.shape)
        lay = layout(x.shape, [x.strides, o.strides], [4, 4], 0)
        J = columns.tile_width_for(n, ni, False, 2)
        assert columns.line_shift(o.reshape(-1), lay.g, 1, J) == off
        o[...] = 0
        _fwd("log_softmax", x, 0, o)
        assert np.array_equal(bits(o), bits(want)), off
        o[...] = x
        _fwd("log_softmax", o, 0, o)
        assert np.array_equal(bits(o), bits(want)), (off, "in place")
        o[...] = 0
        CPU.log_softmax_backward(dd, want, 0, o, F32)
        assert np.array_equal(bits(o), bits(gwant)), (off, "backward")


def test_column_tile_width_for_the_caches(monkeypatch):
    """Long columns take wide tiles only where a thread's share of L3 is at
    least ``WIDE_TILE_L3``; short columns and small caches keep 1024;
    staged forward tiles take ``STAGED_WIDTH`` columns where that stage fits
    half of L2, and 16-bit fast-path forward tiles up to ``FAST16_WIDTH``
    (on Intel)."""
    from logsoftmax.backends.cpu import columns

    import numba

    from logsoftmax.backends.cpu._vec import on_amd

    monkeypatch.setattr(columns, "_cache_bytes", lambda: (2 << 20, 480 << 20))
    assert columns.tile_width_for(1000, 65536, False, 2) == 2048
    assert columns.tile_width_for(4000, 16384, False, 2) == 512
    assert columns.tile_width_for(1000, 65536, False, 16) == 1024  # 30 MiB a thread
    assert columns.tile_width_for(256, 65536, True, 2) == 1024  # fits L2 at 1024
    assert columns.tile_width_for(1000, 100, True, 2) == 112  # no wider than the columns
    # staged forward tiles whose stage of STAGED_WIDTH columns fits half of L2
    # take that width, on Intel only (measured there); the backward never
    intel = not numba.njit(lambda: on_amd())()
    assert columns.tile_width_for(1000, 65536, False, 2, staged=True) == (256 if intel else 2048)
    assert columns.tile_width_for(300, 65536, False, 2, staged=True) == (256 if intel else 1024)
    assert columns.tile_width_for(2000, 32768, False, 2, staged=True) == 1040  # a 2 MB stage
    assert columns.tile_width_for(1000, 65536, True, 2, staged=True) == 16384
    # 16-bit fast-path forward tiles of lane-major columns: up to FAST16_WIDTH
    # columns (Intel); not the backward's, nor columns over LANE_MAJOR_ROWS
    assert columns.tile_width_for(64, 12544, False, 2) == 976
    assert columns.tile_width_for(64, 12544, False, 2, fast16=True) == (800 if intel else 976)
    assert columns.tile_width_for(64, 12544, True, 2, fast16=True) == 976
    assert columns.tile_width_for(384, 4096, False, 2, fast16=True) == 1024
    monkeypatch.setattr(columns, "_cache_bytes", lambda: (1 << 20, 32 << 20))
    assert columns.tile_width_for(1000, 65536, False, 2) == 1024
    assert columns.tile_width_for(1000, 65536, False, 2, staged=True) == 1024  # 1 MB over half of L2
    assert columns.tile_width_for(500, 131072, False, 2, staged=True) == (256 if intel else 1024)
    assert columns.tile_width_for(4000, 16384, False, 2) == 256
    # the backward: the widest tiles that give each thread two, whatever the L3
    assert columns.tile_width_for(1000, 65536, True, 2) == 16384
    assert columns.tile_width_for(500, 131072, True, 2) == columns.WIDE_BACKWARD
    assert columns.tile_width_for(4000, 16384, True, 2) == 4096
    assert columns.tile_width_for(1000, 65536, True, 16) == 2048
    assert columns.tile_width_for(1000, 4096, True, 2, 16) == 4096  # 16 planes: one tile each
    assert columns.tile_width_for(1000, 1000, True, 2) == 1008  # never narrower than tile_width
    monkeypatch.setattr(columns, "_cache_bytes", lambda: (0, 0))  # unknown caches
    assert columns.tile_width_for(1000, 65536, False, 2) == 1024
    assert columns.tile_width_for(1000, 65536, True, 2) == 16384
    assert columns.tile_width_for(64, 3136, True, 2, 64) == 800  # L2 taken as 1 MiB
    # the JAX handlers' call (one thread, caches unknown): the same rule
    assert columns.column_tile_width(1000, 65536, True, 1, 1, 0, 0) == columns.WIDE_BACKWARD
    assert columns.column_tile_width(256, 65536, True, 1, 1, 0, 0) == 1024


@pytest.mark.parametrize("ni", [100, 1000, 1040, 3136, 12544, 16384, 65536])
def test_column_tiles_even(ni):
    """Columns that 1024-wide tiles do not divide take tiles of even width
    (no narrow last tile), with room for ``line_shift``'s move of under 64
    bytes: the same number of tiles either way."""
    from logsoftmax.backends.cpu import columns

    J = columns.tile_width(64, ni)
    tiles = -(-ni // 1024)
    assert J % 16 == 0 and J <= 1024 and -(-ni // J) == tiles
    if ni > 1024 and ni % 1024:
        assert -(-(ni + 31) // J) == tiles  # room for line_shift's move
        assert ni - (tiles - 1) * J >= J // 2  # no narrow last tile


def test_column_tiles_even_nchw56():
    from logsoftmax.backends.cpu import columns

    assert columns.tile_width(64, 3136) == 800  # NCHW 56x56: 4 x 800, not 3 x 1024 + 64
    assert columns.tile_width(64, 12544) == 976  # 112x112: 13 x 976, not 12 x 1024 + 256


@pytest.mark.parametrize("dtype", [F32, BF16], ids=dtypes.name_of)
def test_one_tile_of_columns_split_between_threads(dtype):
    """1000x100 axis 0 (one 100-column tile at the cache's width) is cut into
    narrower tiles where the call runs on 2 threads (``_split_tiles``), with
    the same bits as on one thread and as the rows of its transposed copy."""
    from logsoftmax.backends import cpu

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one numba thread")
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((1000, 100)) * 3).astype(dtype)
    d = rng.standard_normal((1000, 100)).astype(dtype)
    y = CPU.log_softmax(x, 0, None, np.dtype(dtype))
    ref = bits(CPU.log_softmax(np.ascontiguousarray(x.T), 1, None, np.dtype(dtype)).T)
    ref_b = bits(CPU.log_softmax_backward(np.ascontiguousarray(d.T), np.ascontiguousarray(y.T), 1,
                                          None, np.dtype(dtype)).T)
    threads = numba.get_num_threads()
    try:
        for t in (1, 2):
            numba.set_num_threads(t)
            assert (cpu._split_tiles(112, 1000, 100, 1, 100_000) < 112) == (t == 2)
            assert np.array_equal(bits(CPU.log_softmax(x, 0, None, np.dtype(dtype))), ref), t
            got = CPU.log_softmax_backward(d, y, 0, None, np.dtype(dtype))
            assert np.array_equal(bits(got), ref_b), t
    finally:
        numba.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtypes.name_of)
def test_split_row_in_place_bit_identical(dtype):
    """A long row split over threads gives the same bits in place as out of
    place (the float64 split forward once rewrote the overlapping last block
    of its last chunk from its own output: -25.3 for -13.6)."""
    x = (np.random.default_rng(6).standard_normal((1, 70_001)) * 3).astype(dtype)

    def run():
        for op in FWD:
            inplace = x.copy()
            _fwd(op, inplace, 1, out=inplace)
            assert np.array_equal(bits(_fwd(op, x, 1)), bits(inplace)), op

    _with_threads(2, run)


@pytest.mark.parametrize(
    "dtype, n", [(F32, 9000), (dtypes.bfloat16, 9000), (F32, 3000), (dtypes.bfloat16, 512)]
)
def test_pipelined_rows_match_rows_one_at_a_time(dtype, n):
    """log_softmax rows on the fast path of at least ``rows.PIPELINE_MIN``
    elements are pipelined (row r's statistics pass writes row r - 1): the
    same bits as each row alone, out of place and in place, with a whole
    chunk of -inf (all but one element, in rows of one chunk), a single
    -inf, a NaN and an +inf among the rows."""
    x = (np.random.default_rng(7).standard_normal((6, n)) * 3).astype(dtype)
    x[1, : min(4096, n - 1)] = -np.inf
    x[2, 17] = -np.inf
    x[3, n - 1] = np.nan
    x[4, n * 5 // 9] = np.inf
    alone = np.concatenate([_fwd("log_softmax", x[r:r + 1], 1) for r in range(6)])

    def run():
        assert np.array_equal(bits(_fwd("log_softmax", x, 1)), bits(alone))
        inplace = x.copy()
        _fwd("log_softmax", inplace, 1, out=inplace)
        assert np.array_equal(bits(inplace), bits(alone))

    for threads in (1, 2):
        _with_threads(threads, run)


@pytest.mark.parametrize("dtype, n", [(F32, 9000), (F32, 300), (dtypes.bfloat16, 1000), (F16, 40)])
def test_pipelined_backward_matches_rows_one_at_a_time(dtype, n):
    """The fast-path backward is pipelined (row r's gradient sum writes row
    r - 1, each step's stores after the next step's loads): the same bits as
    each row alone (a one-row call takes the row-by-row loop), log_softmax
    and softmax, out of place, into a shifted ``out`` and in place, with a
    NaN, an infinity and a -inf ``dst`` among the rows."""
    rng = np.random.default_rng(8)
    dt = np.dtype(dtype)
    x = (rng.standard_normal((7, n)) * 3).astype(dtype)
    dd = rng.standard_normal((7, n)).astype(dtype)
    dd[2, 5] = np.nan
    dd[4, n - 1] = np.inf
    y = _fwd("log_softmax", x, 1)
    sm = _fwd("softmax", x, 1)
    y[5, 3] = -np.inf
    cases = [(CPU.log_softmax_backward, y), (CPU.softmax_backward, sm)]
    alone = [np.concatenate([f(dd[r:r + 1], v[r:r + 1], 1, None, dt) for r in range(7)])
             for f, v in cases]
    buf = np.empty(dd.size + 7, dtype)

    def run():
        for (f, v), ref in zip(cases, alone):
            assert np.array_equal(bits(f(dd, v, 1, None, dt)), bits(ref))
            o = buf[3 : 3 + dd.size].reshape(dd.shape)
            f(dd, v, 1, o, dt)
            assert np.array_equal(bits(o), bits(ref))
            di = dd.copy()
            f(di, v, 1, di, dt)
            assert np.array_equal(bits(di), bits(ref))

    for threads in (1, 2):
        _with_threads(threads, run)


def _rows_call(kernel, arrays, dtypes_, op, accurate, cuts=()):
    """``kernel`` (a row kernel's ``(*buffers, g, op, accurate, r0, r1)``)
    over every row of 2-d ``arrays`` (inputs, then the output, axis 1), in
    one call or in ranges split at the rows ``cuts`` (as threads' tasks)."""
    from logsoftmax.backends.cpu.layout import layout

    lay = layout(arrays[0].shape, [a.strides for a in arrays], [a.itemsize for a in arrays], 1)
    g = next(iter(lay.geometries()))
    ends = [0, *cuts, arrays[0].shape[0]]
    for r0, r1 in zip(ends[:-1], ends[1:]):
        kernel(*lay.buffers(arrays), g, op, accurate, r0, r1)


def _special_rows(x):
    """``x`` (rows of at least 10) with special values in rows 3-9: a NaN, a
    row of ``-inf``, a ``+inf`` at the end of a row, a leading ``-inf``."""
    x[3, 0] = np.nan
    x[5, :] = -np.inf
    x[7, -1] = np.inf
    x[9, 0] = -np.inf
    return x


def test_tiny_backward_threshold_follows_the_cpu_family():
    """The plan hands rows to the tiny backward up to ``tiny.backward_max``
    of the CPU compiled for: on AMD cores 3 on the accurate path and 16 on
    the fast one (measured there, tiny.py), elsewhere ``BACKWARD_MAX`` for
    both; the plan (Python) and the JAX handlers (compiled, ``on_amd``)
    agree on which CPU that is."""
    from numba import njit
    from numba.core.registry import cpu_target

    from logsoftmax.backends.cpu import _vec, alloc, tiny

    @njit
    def limits():
        return tiny.backward_max(True, _vec.on_amd()), tiny.backward_max(False, _vec.on_amd())

    amd = alloc.compiles_for_amd()
    assert amd == _vec._is_amd(cpu_target.target_context)
    assert limits() == (tiny.backward_max(True, amd), tiny.backward_max(False, amd))
    if amd:
        assert limits() == (tiny.AMD_BACKWARD_MAX_ACCURATE, tiny.AMD_BACKWARD_MAX) == (3, 16)
    else:
        assert limits() == (tiny.BACKWARD_MAX, tiny.BACKWARD_MAX)


@pytest.mark.parametrize(
    "dtype, out_dtype, accurate",
    [(F32, F32, True), (F32, F32, False), (BF16, BF16, False), (F16, F16, False),
     (F32, BF16, False)],
    ids=["f32", "f32-fast", "bf16", "f16", "f32-to-bf16"],
)
def test_tiny_rows_give_the_row_kernels_bits(dtype, out_dtype, accurate):
    """Rows of up to 32 elements run a row per vector lane
    (``backends/cpu/tiny.py``): the same bits as the row kernels row by row
    (``rows.forward_range`` / ``backward_range``), for every n from 1 to 32
    (gathered and register-transposed batches, one and two lane vectors a
    row, whatever the thresholds that pick the kernel), log_softmax and softmax,
    forward and backward, with a partial last batch, rows that do not lie
    end to end, and rows of special values (a forward batch holding one is
    redone row by row)."""
    from logsoftmax.backends.cpu import rows, tiny
    from logsoftmax.backends.cpu._vec import W

    rng = np.random.default_rng(21)
    for n in range(1, max(tiny.FORWARD_MAX, tiny.BACKWARD_MAX) + 1):
        # 37 rows: two whole batches and a part; 32: two whole batches, the
        # second too near the end to be transposed straight from its rows
        for r, dense in ((37, True), (32, True), (21, False)):
            base = (rng.standard_normal((r, n + 3)) * 3).astype(dtype)
            x = _special_rows(np.ascontiguousarray(base[:, :n]) if dense else base[:, :n])
            x[11, :] = 0.0
            x[11, 0] = -0.0
            for op in (0, 1):
                ref, got = np.empty(x.shape, out_dtype), np.full(x.shape, 7, out_dtype)
                _rows_call(rows.forward_range, [x, ref], None, op, accurate)
                _rows_call(tiny.forward_tiny, [x, got], None, op, accurate)
                assert np.array_equal(bits(got), bits(ref)), ("forward", n, dense, op)
                if n == W:  # (its copy for rows of one vector)
                    got = np.full(x.shape, 7, out_dtype)
                    _rows_call(tiny.forward_tiny_vector, [x, got], None, op, accurate)
                    assert np.array_equal(bits(got), bits(ref)), ("forward", n, dense, op, "vector")
            if dtype != out_dtype:
                continue
            dd = rng.standard_normal(x.shape).astype(dtype)
            dd[2, 0] = -0.0
            dd[4, :] = -0.0
            dd[6, 0] = np.nan
            y = np.ascontiguousarray(x)
            for op in (0, 1):
                ref, got = np.empty(x.shape, dtype), np.full(x.shape, 7, dtype)
                _rows_call(rows.backward_range, [dd, y, ref], None, op, accurate)
                _rows_call(tiny.backward_tiny, [dd, y, got], None, op, accurate)
                assert np.array_equal(bits(got), bits(ref)), ("backward", n, dense, op)


def test_tiny_direct_run_resumes_after_a_batch_that_is_not_finite():
    """Whole batches of float32 rows of 16 run as one loop
    (``tiny._direct_batches``), which stops before a batch with a sum that
    is not finite; that batch is written row by row and the loop resumes
    after it. Not-finite rows in the first, two consecutive middle and the
    last whole batch, a partial batch after them, tasks that start inside a
    batch, in place and not, log_softmax and softmax: the row kernels' bits
    everywhere, in both tiny kernels (the general one and the copy for rows
    of one vector)."""
    from logsoftmax.backends.cpu import rows, tiny

    n = 16
    rng = np.random.default_rng(16)
    x = (rng.standard_normal((100, n)) * 3).astype(F32)  # 6 whole batches and 4 rows
    x[1, 2] = np.nan
    x[35, :] = -np.inf
    x[50, 3] = np.inf
    x[95, 0] = np.nan
    for op in (0, 1):
        ref = np.empty_like(x)
        _rows_call(rows.forward_range, [x, ref], None, op, True)
        for cuts, kernel in [(c, k) for c in ((), (7, 50)) for k in (tiny.forward_tiny, tiny.forward_tiny_vector)]:
            got = np.full_like(x, 7.0)
            _rows_call(kernel, [x, got], None, op, True, cuts)
            assert np.array_equal(bits(got), bits(ref)), (op, cuts, kernel)
            xi = x.copy()
            _rows_call(kernel, [xi, xi], None, op, True, cuts)
            assert np.array_equal(bits(xi), bits(ref)), (op, cuts, kernel, "in place")


@pytest.mark.parametrize("n", [31, 32, 33, 64, 128])
@pytest.mark.parametrize("dtype, accurate", [(F32, True), (BF16, False)], ids=["f32", "bf16"])
def test_short_rows_of_whole_vectors_give_the_row_kernels_bits(n, dtype, accurate):
    """``rows.forward_whole`` compiles the short rows' batch loop once more
    for rows of exactly 2, 4 and 8 vectors (32, 64, 128 elements: the
    constant length lets LLVM unroll the per-row loops). Every copy gives
    the row kernel's bits (``rows.forward_range`` row by row), as does the
    general loop (``rows.forward_short``, which takes 31 and 33), with a
    partial last batch, rows that do not lie end to end, special values and
    in place."""
    from logsoftmax.backends.cpu import rows

    kernels = [rows.forward_short] + ([rows.forward_whole] if n in (32, 64, 128) else [])
    rng = np.random.default_rng(n)
    for r, dense in ((200, True), (37, False)):
        base = (rng.standard_normal((r, n + 5)) * 3).astype(dtype)
        x = _special_rows(np.ascontiguousarray(base[:, :n]) if dense else base[:, :n])
        for op in (0, 1):
            ref = np.empty(x.shape, dtype)
            _rows_call(rows.forward_range, [x, ref], None, op, accurate)
            for kernel in kernels:
                got = np.full(x.shape, 7, dtype)
                _rows_call(kernel, [x, got], None, op, accurate)
                assert np.array_equal(bits(got), bits(ref)), (kernel, n, dense, op)
                xi = x.copy()
                _rows_call(kernel, [xi, xi], None, op, accurate)
                assert np.array_equal(bits(xi), bits(ref)), (kernel, n, dense, op, "in place")


@pytest.mark.parametrize("n", [3, 16, 20, 32, 40, 48, 100])
def test_short_rows_backward_kernels_give_the_general_loops_bits(n):
    """The backward of short rows runs one of three kernels
    (``rows.short_backward_form``): the tiny rows' (a batch of rows up to
    ``tiny.backward_max``), the accurate path's copies for float32
    ``log_softmax`` (``rows.backward_accurate``), else the general loops
    (``rows.backward_short``). Each gives the general loop's bits, rows end
    to end and not, one row or many, and the front door takes the kernel
    of the form."""
    import logsoftmax as L
    from logsoftmax.backends.cpu import alloc, rows, segment, tiny

    amd = alloc.compiles_for_amd()
    form, W = rows.ShortForm, rows.W
    assert segment.SHORT_BACKWARD <= 3 * W  # (the plan's accurate rows all have copies)
    assert rows.short_backward_form(2, 0, False, W, amd) == form.TINY
    assert rows.short_backward_form(2, 0, False, W - 1, amd) == form.ROWS
    assert rows.short_backward_form(16, 0, True, 1, amd) == form.ACCURATE
    assert rows.short_backward_form(48, 0, True, 1000, amd) == form.ACCURATE
    assert rows.short_backward_form(48, 1, True, 1000, amd) == form.ROWS  # (softmax)
    assert rows.short_backward_form(100, 0, False, 1000, amd) == form.ROWS
    assert rows.backward_short_kernel(40, 0, True, 5) == (rows, "backward_accurate")
    rng = np.random.default_rng(n)
    for dtype, accurate in ((F32, True), (F32, False), (BF16, False)):
        for r, dense in ((3, True), (37, True), (37, False)):
            base = (rng.standard_normal((r + 10, n + 3)) * 3).astype(dtype)
            y = _special_rows(np.ascontiguousarray(base[:, :n]) if dense else base[:, :n])[-r:]
            dd = rng.standard_normal(y.shape).astype(dtype)
            for op in (0, 1):
                ref = np.full(y.shape, 7, dtype)
                _rows_call(rows.backward_short, [dd, y, ref], None, op, accurate)
                form = rows.short_backward_form(n, op, accurate, r, amd)
                if form != rows.ShortForm.ROWS:  # (ROWS is backward_short itself)
                    kernel = {rows.ShortForm.TINY: tiny.backward_tiny,
                              rows.ShortForm.ACCURATE: rows.backward_accurate}[form]
                    got = np.full(y.shape, 7, dtype)
                    _rows_call(kernel, [dd, y, got], None, op, accurate)
                    assert np.array_equal(bits(got), bits(ref)), (dtype, n, r, dense, op, form)
                if accurate == (dtype == F32 and n <= segment.SHORT_BACKWARD):  # the front door's path
                    grad = L.log_softmax_backward if op == 0 else L.softmax_backward
                    front = grad(dd, np.ascontiguousarray(y), axis=-1)
                    assert np.array_equal(bits(front), bits(ref)), (dtype, n, r, dense, op)


def test_short_rows_forward_kernel_follows_the_row_length_and_count():
    """A call on short rows compiles and runs one of four kernels
    (``rows.short_form``): a row per lane (a copy of its own for rows of
    ``W``) for rows of up to
    ``tiny.FORWARD_MAX_ACCURATE`` (float32 results) or ``FORWARD_MAX``
    (16-bit) when there is a batch of rows, the copies for 2, 4 and 8 whole
    vectors, else the general loop. Through the front door every choice
    gives the general loop's bits, one row or many, on either side of each
    threshold."""
    import logsoftmax as L
    from logsoftmax.backends.cpu import rows, tiny
    from logsoftmax.backends.cpu._vec import W

    form = rows.ShortForm
    assert rows.short_form(tiny.FORWARD_MAX_ACCURATE, True, W) == form.TINY
    assert rows.short_form(tiny.FORWARD_MAX_ACCURATE + 1, True, W) == form.ROWS
    assert rows.short_form(tiny.FORWARD_MAX_ACCURATE, True, W - 1) == form.ROWS
    assert rows.short_form(2 * W, True, 1000) == form.WHOLE
    assert rows.short_form(2 * W, False, 1000) == form.TINY  # (16-bit results: FORWARD_MAX = 2 W)
    assert rows.short_form(2 * W, False, W - 1) == form.WHOLE
    assert [rows.short_form(n, True, 1000) for n in (4 * W, 8 * W, 8 * W + 1, 100)] == [
        form.WHOLE, form.WHOLE, form.ROWS, form.ROWS]
    assert rows.forward_short_kernel(8 * W, True, 5) == (rows, "forward_whole")
    assert rows.forward_short_kernel(10, True, W) == (tiny, "forward_tiny")
    assert rows.short_form(W, True, W) == form.TINY_VECTOR  # (its copy for rows of one vector)
    assert rows.forward_short_kernel(W, False, 100) == (tiny, "forward_tiny_vector")

    rng = np.random.default_rng(7)
    for dtype, accurate in ((F32, True), (BF16, False)):
        for n in (10, W, tiny.FORWARD_MAX_ACCURATE, 2 * W, 4 * W, 100):
            for r in (3, W, 2 * W + 5):
                x = _special_rows((rng.standard_normal((r + 10, n)) * 3).astype(dtype))[-r:]
                ref = np.full(x.shape, 7, dtype)
                _rows_call(rows.forward_short, [x, ref], None, 0, accurate)
                got = L.log_softmax(x, axis=-1)
                assert np.array_equal(bits(got), bits(ref)), (dtype, n, r)


@pytest.mark.parametrize("n", [64, 100])
def test_short_rows_asking_for_the_next_batch_give_the_row_kernels_bits(n):
    """Accurate rows of ``rows.FETCH_ROW_N`` or more elements whose output
    has ``rows.FETCH_BYTES`` (but does not stream) ask for the next batch's
    rows during each batch's sums: rows end to end and rows that are not
    (their starts stepped through the geometry), log_softmax and softmax,
    the row kernel's bits."""
    from logsoftmax.backends.cpu import rows
    from logsoftmax.backends.cpu.alloc import STREAM_BYTES

    assert n >= rows.FETCH_ROW_N
    r = -(-rows.FETCH_BYTES // (4 * n)) + 3  # just past the threshold, a partial batch
    rng = np.random.default_rng(n)
    base = (rng.standard_normal((r, n + 3)) * 3).astype(F32)
    for x in (np.ascontiguousarray(base[:, :n]), base[:, :n]):
        assert rows.FETCH_BYTES <= x.size * 4 < STREAM_BYTES
        for op in (0, 1):
            ref, got = np.empty(x.shape, F32), np.full(x.shape, 7.0, F32)
            _rows_call(rows.forward_range, [x, ref], None, op, True)
            _rows_call(rows.forward_short, [x, got], None, op, True)
            assert np.array_equal(bits(got), bits(ref)), (n, x.flags.c_contiguous, op)


@pytest.mark.parametrize("n", [13, 15, 16, 17, 20, 24, 31, 32, 33, 36, 40, 41, 47, 48])
def test_short_backward_rows_of_whole_vectors_give_the_row_kernels_bits(n):
    """``rows.backward_short`` compiles its accurate batch loop once more for
    float32 log_softmax rows of exactly 1 and 2 vectors (16, 32 elements:
    ``n``, the op and the path constants), and for rows of 1, 2 and 3
    vectors with a partial last one (13-15, 17-31, 33-47: the vector count
    a constant); off AMD, rows of 17-31 and 33-36 that lie end to end run
    pass 2 over the rows as one run of vectors (``_backward_flat_rows``).
    Each gives the row kernel's bits (``rows.backward_range`` row by row),
    with a partial last batch, rows that do not lie end to end, special
    values, in place into either operand, and in ranges that start and end
    anywhere (threads' tasks); 48 takes the general copy, as does
    softmax."""
    from logsoftmax.backends.cpu import rows

    rng = np.random.default_rng(n)
    for r, dense in ((203, True), (37, False)):
        base = (rng.standard_normal((r, n + 5)) * 3).astype(F32)
        x = np.ascontiguousarray(base[:, :n]) if dense else base[:, :n]
        dd = _special_rows(rng.standard_normal(x.shape).astype(F32))
        for op in (0, 1):
            y = np.empty_like(x)
            _rows_call(rows.forward_range, [x, y], None, op, True)
            ref, got = np.empty_like(x), np.empty_like(x)
            _rows_call(rows.backward_range, [dd, y, ref], None, op, True)
            _rows_call(rows.backward_short, [dd, y, got], None, op, True)
            assert np.array_equal(bits(got), bits(ref)), (n, dense, op)
            got[...] = 7
            _rows_call(rows.backward_short, [dd, y, got], None, op, True, cuts=(1, 4, 21, 22, 150)[:5 if r > 150 else 4])
            assert np.array_equal(bits(got), bits(ref)), (n, dense, op, "ranges")
            for which in (0, 1):
                ops = [dd.copy(), y.copy()]
                _rows_call(rows.backward_short, ops + [ops[which]], None, op, True)
                assert np.array_equal(bits(ops[which]), bits(ref)), (n, dense, op, which)


@pytest.mark.parametrize("n", [2, 7, 12, 16, 24])
def test_tiny_rows_in_place_out_and_threads(n):
    """Tiny rows through the backend: allocating, into a shifted ``out``, in
    place, on one thread and two (tasks that split a batch), forward and
    backward: one set of bits, the row kernels' (row by row); rows of 16 go
    into the transposes straight from their rows, and the forward writes
    them as they lie (``tiny._forward_rows_direct``). These n take
    ``tiny.forward_tiny`` (the backward: ``backward_tiny`` up to 12, the row
    kernel at 24)."""
    from logsoftmax.backends.cpu import rows, tiny

    assert n <= tiny.FORWARD_MAX_ACCURATE

    r = 70_001 // n + 5  # over SERIAL_MAX elements: the parallel kernels
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((r, n)) * 3).astype(np.float32)
    dd = rng.standard_normal((r, n)).astype(np.float32)
    ref = np.empty_like(x)
    _rows_call(rows.forward_range, [x, ref], None, 0, True)
    gref = np.empty_like(x)
    _rows_call(rows.backward_range, [dd, ref, gref], None, 0, True)
    buf = np.empty(x.size + 3, np.float32)

    def run():
        assert np.array_equal(bits(_fwd("log_softmax", x, 1)), bits(ref))
        o = buf[3:].reshape(x.shape)
        _fwd("log_softmax", x, 1, o)
        assert np.array_equal(bits(o), bits(ref))
        xi = x.copy()
        _fwd("log_softmax", xi, 1, xi)
        assert np.array_equal(bits(xi), bits(ref))
        assert np.array_equal(bits(CPU.log_softmax_backward(dd, ref, 1, None, F32)), bits(gref))
        di = dd.copy()
        CPU.log_softmax_backward(di, ref, 1, di, F32)
        assert np.array_equal(bits(di), bits(gref))

    for threads in (1, 2):
        _with_threads(threads, run)


def test_keep_holds_a_viewed_scratch_alive():
    """numba frees a local array after its last use, and an ownerless
    ``_simd.view`` of it is none: without ``_simd.keep`` the next allocation
    of its size takes the memory the view still reads."""
    from numba import njit

    from logsoftmax.backends.cpu._simd import keep, view

    @njit
    def kept():
        a = np.zeros(1000)
        v = view(a, 0, 1000)
        b = np.empty(1000)
        b[:] = 7.0
        r = v[0] + b[0]
        keep(a)
        return r

    assert kept() == 7.0


# ---------------------------------------------------------------------------
# memory: O(rows) extra, nothing full-size besides the result
# ---------------------------------------------------------------------------
def test_peak_extra_memory_is_output_only():
    x = np.random.default_rng(6).standard_normal((256, 16384)).astype(np.float32)
    out = np.empty_like(x)
    dd = np.ones_like(x)
    xt = np.ascontiguousarray(x.T)
    _fwd("log_softmax", x, 1, out=out)  # compile outside the measurement
    _fwd("log_softmax", xt, 0, out=out.T.copy())
    CPU.log_softmax_backward(dd, x, 1, out, np.dtype(np.float32))
    cases = [
        ("fwd out=", lambda: _fwd("log_softmax", x, 1, out=out), 0),
        ("fwd alloc", lambda: _fwd("log_softmax", x, 1), x.nbytes),
        ("fwd inner alloc", lambda: _fwd("log_softmax", xt, 0), x.nbytes),
        (
            "bwd out=",
            lambda: CPU.log_softmax_backward(dd, x, 1, out, np.dtype(np.float32)),
            0,
        ),
    ]
    for name, fn, expected in cases:
        tracemalloc.start()
        fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # O(rows) slack (partials, numba's per-call bookkeeping) plus the
        # tile kernels' per-thread scratch (<= 1 MiB of terms + staging)
        slack = 4 * x.shape[0] * 64 + 2**20 + numba.get_num_threads() * 2**21
        assert peak <= expected + slack, (name, peak)


# ---------------------------------------------------------------------------
# accuracy against PyTorch on long rows (API.md section 1)
# ---------------------------------------------------------------------------
def _torch_errors(n, rows, seed=0):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    x64 = x.astype(np.float64)
    m = x64.max(1, keepdims=True)
    lse = m + np.log(np.exp(x64 - m).sum(1, keepdims=True))
    y_ref = (x64 - m) - (lse - m)
    tx = torch.from_numpy(x)
    y = _fwd("log_softmax", x, 1)
    dd = rng.standard_normal(x.shape).astype(np.float32)
    s = dd.astype(np.float64).sum(1, keepdims=True)
    g_ref = dd - np.exp(y.astype(np.float64)) * s
    g_t = torch._log_softmax_backward_data(
        torch.from_numpy(dd), torch.from_numpy(y), 1, torch.float32
    ).numpy()
    return {
        "fwd": (
            err_eps(y, y_ref, F32),
            err_eps(torch.log_softmax(tx, 1).numpy(), y_ref, F32),
        ),
        "lse": (
            err_eps(CPU.logsumexp(x, (1,), False), lse[:, 0], F32),
            err_eps(torch.logsumexp(tx, 1).numpy(), lse[:, 0], F32),
        ),
        "bwd": (
            err_eps(CPU.log_softmax_backward(dd, y, 1, None, F32), g_ref, F32),
            err_eps(g_t, g_ref, F32),
        ),
    }


@pytest.mark.parametrize("n", [3, 250, 32768, 65536])
def test_long_rows_no_worse_than_torch(n):
    for what, (ours, theirs) in _torch_errors(n, rows=max(2, 400_000 // n)).items():
        # a hair of slack for ties at tiny n, where both are ~0.5-1 eps
        assert ours <= max(theirs, 0.5) + 0.01, (what, ours, theirs)


@pytest.mark.slow
def test_million_element_rows_no_worse_than_torch():
    for what, (ours, theirs) in _torch_errors(1_000_000, rows=3).items():
        assert ours <= max(theirs, 0.5) + 0.01, (what, ours, theirs)


# ---------------------------------------------------------------------------
# exact cases
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL, ids=dtypes.name_of)
def test_exact_cases(dtype):
    x = np.array([[3.5], [-7.0], [1e4 if dtype != F16 else 6e4]], dtype)
    assert np.all(_fwd("log_softmax", x, 1) == 0)
    assert np.all(_fwd("softmax", x, 1) == 1)
    assert np.array_equal(CPU.logsumexp(x, (1,), False), x[:, 0])
    dd = np.array([[2.0], [-3.0], [0.25]], dtype)
    y = _fwd("log_softmax", x, 1)
    assert np.all(CPU.log_softmax_backward(dd, y, 1, None, np.dtype(dtype)) == 0)
    # one dominant logit: every other term underflows
    row = np.full((1, 300), -1e4 if dtype != F16 else -6e4, dtype)
    row[0, 17] = 5
    assert _fwd("log_softmax", row, 1)[0, 17] == 0
    assert _fwd("softmax", row, 1)[0, 17] == 1
    assert CPU.logsumexp(row, (1,), False)[0] == row[0, 17]
    # the same through the inner kernel
    col = np.ascontiguousarray(row.T)
    assert _fwd("softmax", col, 0)[17, 0] == 1


def test_exp32_within_one_ulp():
    from logsoftmax.backends.cpu._simd import exp32

    @numba.njit
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = exp32(x[i])

    x = np.concatenate(
        [
            np.linspace(-87, 88.7, 400_001),
            np.random.default_rng(8).uniform(-20, 0, 100_000),
        ]
    ).astype(np.float32)
    out = np.empty_like(x)
    run(x, out)
    ref = np.exp(x.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(out - ref) / ulp) <= 1.0
    special = np.array([0, -np.inf, np.inf, np.nan, -150, 100], np.float32)
    got = np.empty_like(special)
    run(special, got)
    assert got[0] == 1 and got[1] == 0 and np.isposinf(got[2]) and np.isnan(got[3])
    assert got[4] == 0 and np.isposinf(got[5])


def _apply_exp64(fn, x):
    """``fn`` (a float64 vector ``exp`` of ``_math``) on every element of ``x``."""
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vload, vstore

    @numba.njit(error_model="numpy")
    def apply(x, out):
        wide_vectors()
        for k in range(0, x.size, W // 2):
            vstore(out, k, fn(vload(x, k)))

    assert x.size % (W // 2) == 0  # whole vectors: the loop has no tail
    out = np.empty_like(x)
    apply(x, out)
    return out


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_row_trees_give_each_rows_tree_bits(dtype):
    """``_vec.reduce_add_rows`` / ``reduce_max_rows`` reduce a vector's worth
    of rows (16 float32, 8 float64) at once by folding them into each other;
    lane ``r`` is row ``r``'s ``reduce_add`` / ``reduce_max`` to the bit
    (the same pairs in the same order): magnitudes 16 decades apart, so
    that another order of additions rounds differently, signed zeros,
    NaN and infinities."""
    from logsoftmax.backends.cpu._vec import reduce_add, reduce_add_rows, reduce_max, reduce_max_rows, vload, vstore

    @numba.njit(error_model="numpy")
    def both(buf, lanes):
        out = np.empty(4 * lanes, buf.dtype)
        vstore(out, 0, reduce_add_rows(buf, 0))
        vstore(out, lanes, reduce_max_rows(buf, 0))
        for r in range(lanes):
            out[2 * lanes + r] = reduce_add(vload(buf, r * lanes))
            out[3 * lanes + r] = reduce_max(vload(buf, r * lanes))
        return out

    lanes = 16 if dtype == F32 else 8
    rng = np.random.default_rng(5)
    differs = 0
    for t in range(300):
        buf = (rng.standard_normal(lanes * lanes) * 10.0 ** rng.integers(-8, 8, lanes * lanes)).astype(dtype)
        if t % 3 == 0:
            buf[rng.integers(0, lanes * lanes, 6)] = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, -0.0], dtype)
        out = both(buf, lanes)
        assert np.array_equal(bits(out[:lanes]), bits(out[2 * lanes : 3 * lanes])), t
        assert np.array_equal(bits(out[lanes : 2 * lanes]), bits(out[3 * lanes :])), t
        with np.errstate(invalid="ignore"):  # (inf - inf)
            differs += not np.array_equal(bits(out[:lanes]), bits(buf.reshape(lanes, lanes).sum(axis=1)))
    assert differs > 0  # the data tells one order of additions from another


def test_exp_f64_accuracy_and_range():
    """The accurate forward's float64 terms (``_math.exp_f64``, ``2**y`` by
    ``vreducepd``/``vscalefpd``, no clamp): within 2.1e-9 of ``e**x`` for
    ``x <= 0`` down to where it is a denormal, exactly 1 at 0, 0 for
    ``-inf`` and far below, NaN kept."""
    from logsoftmax.backends.cpu._math import exp_f64

    x = np.concatenate([np.linspace(-708, 0, 400_000), -np.logspace(-15, 0, 40_000),
                        np.random.default_rng(11).uniform(-30, 0, 100_000)])
    out = _apply_exp64(exp_f64, x)
    assert np.max(np.abs(out / np.exp(x.astype(np.longdouble)) - 1)) < 2.1e-9
    special = np.array([0.0, -0.0, -np.inf, np.nan, -745.2, -1e300, -720.0, -1.0])
    got = _apply_exp64(exp_f64, special)
    assert got[0] == 1 and got[1] == 1 and got[2] == 0 and np.isnan(got[3])
    assert (got[4:6] == 0).all() and 0 < got[6] < np.finfo(np.float64).tiny
    assert abs(got[7] * np.e - 1) < 2.1e-9


def test_exp_f64_any_accuracy_and_range():
    """The backward's float64 ``e**dst`` (``_math.exp_f64_any``): within
    4.4e-11 of ``e**x`` (and ``y = x log2(e)``'s rounding, ``|x| 2**-53``)
    from where it is a denormal up to where ``e**x`` overflows, 0 far below
    and for ``-inf``, ``inf`` from ``ln(DBL_MAX)`` on (the scaling's own
    overflow: finite just below it), NaN kept."""
    from logsoftmax.backends.cpu._math import exp_f64_any

    x = np.concatenate([np.linspace(-708, 709.78, 400_000),
                        np.random.default_rng(9).uniform(-30, 0, 100_000)])
    out = _apply_exp64(exp_f64_any, x)
    ref = np.exp(x.astype(np.longdouble))
    assert (np.abs(out / ref - 1) < 4.4e-11 + np.abs(x) * 2.0 ** -53).all()
    big = np.log(np.finfo(np.float64).max)  # 709.782712893384
    special = np.array([0.0, -0.0, -np.inf, np.inf, np.nan, -745.2, -1e300, -720.0,
                        709.781, np.nextafter(big, 0) - 1e-12, big + 1e-12, 710.0, 1e300, 1.0,
                        -1.0, -2.0])
    got = _apply_exp64(exp_f64_any, special)
    assert got[0] == 1 and got[1] == 1 and got[2] == 0 and np.isposinf(got[3])
    assert np.isnan(got[4]) and (got[5:7] == 0).all() and 0 < got[7] < np.finfo(np.float64).tiny
    assert np.isfinite(got[8:10]).all() and got[9] > 1.7976e308
    assert np.isposinf(got[10:13]).all()
    assert abs(got[13] / np.e - 1) < 4.4e-11


def test_exp_f32_sum_accuracy_and_range():
    """The 16-bit fast path's terms (``_math.exp_f32_sum``, ``2**y`` split by
    ``vreduceps``/``vscalefps``, no clamp): for ``x <= 0`` within 1.9e-7 of
    ``e**x`` relative to the row's largest term (1), which also bounds the
    relative error of the terms near it; exactly 1 at 0; 0 for ``-inf`` and
    far below; a denormal, rounded once, where ``e**x`` is one; NaN kept."""
    from logsoftmax.backends.cpu._math import exp_f32_sum
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vload, vstore

    @numba.njit(error_model="numpy")
    def apply(x, out):
        wide_vectors()
        for k in range(0, x.size, W):
            vstore(out, k, exp_f32_sum(vload(x, k)))

    def run(x):
        assert x.size % W == 0  # whole vectors: the loop has no tail
        out = np.empty_like(x)
        apply(x, out)
        return out.astype(np.float64)

    rng = np.random.default_rng(10)
    x = np.concatenate([np.linspace(-110, 0, 400_000), rng.uniform(-1, 0, 200_000),
                        -np.logspace(-12, 0, 40_000)]).astype(np.float32)
    ref = np.exp(x.astype(np.longdouble))
    got = run(x)
    assert np.max(np.abs(got - ref)) < 1.9e-7
    near = x > -1  # terms near the largest: relative
    assert np.max(np.abs(got[near] / ref[near] - 1)) < 1.9e-7
    # far from 0, y = x log2(e)'s rounding (and log2(e)'s) cost up to
    # 7.3e-8 |x| relative; below FLT_MIN, the one rounding to a denormal
    far = x < -1
    bound = 2.0 ** -150 + ref[far] * (1.5e-7 + 7.3e-8 * np.abs(x[far]))
    assert (np.abs(got[far] - ref[far]) <= bound).all()
    special = np.array([0.0, -0.0, -np.inf, np.nan, -104.0, -150.0, -1e30, -3.4e38,
                        -87.0, -100.0, -1.0, -0.5, -6e-8, -1e-9, -20.0, -50.0], np.float32)
    got = run(special)
    assert got[0] == 1 and got[1] == 1 and got[2] == 0 and np.isnan(got[3])
    assert (got[4:8] == 0).all()
    assert 0 < got[9] < np.finfo(np.float32).tiny < got[8]  # a denormal, a normal
    assert abs(got[10] / np.exp(-1.0) - 1) < 1.9e-7


def test_bfloat16_store_correctly_rounded_every_class():
    """A bfloat16 store rounds to nearest even and keeps NaN quiet -- on a CPU
    with AVX512_BF16 through ``vcvtneps2bf16``, which flushes subnormal
    inputs to zero: those lanes must still round correctly (a subnormal
    float32 is a subnormal bfloat16, not 0)."""
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vload, vstore

    def narrow(x, o):
        wide_vectors()
        for i in range(0, x.size, W):
            vstore(o, i, vload(x, i))

    special = [0, 1 << 31, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
               0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFBFFFFF]
    # subnormal ties and near-ties that round to a nonzero bfloat16
    special += [(k << 16) | t for k in (1, 2, 0x7F, 0x807F) for t in (0x7FFF, 0x8000, 0x8001)]
    rand = np.random.default_rng(12).integers(0, 1 << 32, 1 << 16, dtype=np.uint64)
    # ... and every subnormal exponent pattern of the random mantissas
    sub = rand[: 1 << 12] & 0x807FFFFF
    b = np.concatenate([np.array(special, np.uint64), rand, sub]).astype(np.uint32)
    b = np.concatenate([b, np.zeros(-b.size % W, np.uint32)])
    x = b.view(np.float32)
    got = np.empty(x.size, np.uint16)
    fn = numba.njit(narrow)  # uncompiled by anything else: inspect_asm below
    fn(x, got)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    want = np.where(np.isnan(x), ((b >> 16) | 0x40).astype(np.uint16), want)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(b[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    from numba.core.registry import cpu_target

    # the features numba compiles for (NUMBA_CPU_FEATURES, else the host's)
    if "+avx512bf16" in cpu_target.target_context.codegen()._tm_features.split(","):
        assert "vcvtneps2bf16" in next(iter(fn.inspect_asm().values()))


def _storage(dtype):
    return {np.float32: np.float32, np.float16: np.int16, ml_dtypes.bfloat16: np.uint16}[dtype]


@pytest.mark.parametrize("src_dt,dst_dt", [
    (ml_dtypes.bfloat16, ml_dtypes.bfloat16), (np.float32, ml_dtypes.bfloat16),
    (ml_dtypes.bfloat16, np.float32), (np.float16, np.float16), (np.float32, np.float32)])
def test_pairs_give_the_bits_of_single_vectors(src_dt, dst_dt):
    """``vload_pair`` / ``vstore_pair`` (an elementwise pass's two vectors in
    an order of their own: even and odd elements where the pass is all
    bfloat16) store what ``vload`` / ``vstore`` of each vector store, every
    element rounded once, subnormal and NaN results included, and a pass
    over mixed dtypes keeps every element in its place."""
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import (
        W, vfma, vload, vload_pair, vstore, vstore_pair, vstore_pair_nt)

    def single(x, o, c):
        wide_vectors()
        for i in range(0, x.size, W):
            vstore(o, i, vfma(vload(x, i), c, c))

    def paired(x, o, c, nt):
        wide_vectors()
        for i in range(0, x.size, 2 * W):
            a, b = vload_pair(x, i, (x, o))
            if nt:
                vstore_pair_nt(o, i, vfma(a, c, c), vfma(b, c, c), (x, o))
            else:
                vstore_pair(o, i, vfma(a, c, c), vfma(b, c, c), (x, o))

    rng = np.random.default_rng(21)
    n = 1 << 14
    if src_dt == np.float32:  # every float32 class, through the rounding to 16 bits
        x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        x[: n // 8] = (x[: n // 8].view(np.uint32) & 0x807FFFFF).view(np.float32)  # subnormal
    else:  # every 16-bit pattern, subnormals and NaNs among them
        x = rng.integers(0, 1 << 16, n, dtype=np.uint64).astype(np.uint16).view(src_dt)
        x[:256] = np.arange(256, dtype=np.uint16).view(src_dt)
    x = x.view(_storage(src_dt))
    buf = np.empty(n + 64, _storage(dst_dt))  # the streaming stores' 64-byte lines
    off = (-buf.ctypes.data % 64) // buf.itemsize
    single, paired = numba.njit(single), numba.njit(paired)
    # c (x + 1): c = 2**-130 takes most results below float32's smallest
    # normal (the hardware rounding's subnormal branch)
    for c in (np.float32(1.0), np.float32(-0.75), np.float32(2.0 ** -130)):
        want = np.empty(n, _storage(dst_dt))
        single(x, want, c)
        if dst_dt == ml_dtypes.bfloat16:  # and both against an oracle: float32, then ml_dtypes
            exact = np.empty(n, np.float32)
            single(x, exact, c)
            b = exact.view(np.uint32)
            with np.errstate(invalid="ignore"):
                oracle = exact.astype(ml_dtypes.bfloat16).view(np.uint16)
            oracle = np.where(np.isnan(exact), ((b >> 16) | 0x40).astype(np.uint16), oracle)
            assert (want == oracle).all()
            if 0 < c < np.finfo(np.float32).tiny:
                assert (np.abs(exact) < np.finfo(np.float32).tiny).sum() > n // 4
        for streaming in (False, True):
            got = buf[off: off + n]
            got[:] = 0
            paired(x, got, c, streaming)
            bits = np.uint16 if got.itemsize == 2 else np.uint32
            bad = np.flatnonzero(got.view(bits) != want.view(bits))
            assert bad.size == 0, (c, streaming, [(i, hex(got.view(bits)[i]), hex(want.view(bits)[i]))
                                                   for i in bad[:4]])


@pytest.mark.parametrize("n", [9000, 4096 + 100, 2000])
def test_bfloat16_sums_in_pair_order_give_the_float32_sums(n):
    """bfloat16 sums take their terms by pairs (even and odd elements,
    ``segment._sum32_pairs``, ``_grad_step_pairs``) and put their lanes back
    in element order before the tail and the tree (``_vec.unpair``);
    float32 data takes them in element order. The same values in both
    dtypes must give the same sums, so the same float32 results (the same
    fast-path arithmetic): forward, the log_softmax and softmax backward,
    rows of one chunk and of several (pipelined, ``far``), one and two
    threads. Sums in another order must show: each row has one term of 1
    and small ones (``s - 1`` about 1e-3, so that a change of one ulp in
    ``s`` moves ``y = -log s`` at the max by hundreds of ulps), and the
    gradients hold +-2**60 in two lanes, so that a float64 sum in another
    order absorbs other terms (a sum of ordinary bfloat16 terms is exact
    in float64 in any order)."""
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((5, n)) * 3 - 20).astype(BF16)
    x[:, 5] = 0
    dd = rng.standard_normal((5, n)).astype(BF16)
    x[2, 7] = -np.inf
    dd[:, 0], dd[:, 1] = 2.0**60, -(2.0**60)
    f32 = np.dtype(F32)

    def run():
        y = _fwd("log_softmax", x, 1, dtype=F32)
        assert np.array_equal(bits(y), bits(_fwd("log_softmax", x.astype(F32), 1)))
        for f in (CPU.log_softmax_backward, CPU.softmax_backward):
            v = _fwd("log_softmax" if f is CPU.log_softmax_backward else "softmax", x, 1)
            g = f(dd, v, 1, None, f32)
            assert np.array_equal(bits(g), bits(f(dd.astype(F32), v.astype(F32), 1, None, f32)))

    for threads in (1, 2):
        _with_threads(threads, run)


def test_unpair_puts_pair_order_lanes_back():
    """``unpair`` interleaves the low lanes, then the high lanes, of a sum's
    even-element and odd-element accumulators (bfloat16 pairs), and leaves
    them as they are where the pairs do not interleave: float32 (16 lanes)
    and float64 (8) accumulators."""
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, lo_f64, unpair, vload_pair, vstore

    def lanes(x, o32, o64):
        wide_vectors()
        a, b = vload_pair(x, 0, (x,))
        a, b = unpair(a, b, (x,))
        vstore(o32, 0, a)
        vstore(o32, W, b)
        c, d = unpair(lo_f64(vload_pair(x, 0, (x,))[0]), lo_f64(vload_pair(x, 0, (x,))[1]), (x,))
        vstore(o64, 0, c)
        vstore(o64, W // 2, d)

    fn = numba.njit(lanes)
    for dt in (ml_dtypes.bfloat16, np.float32, np.float16):
        v = np.arange(2 * 16, dtype=np.float32).astype(dt)
        o32, o64 = np.empty(32, np.float32), np.empty(16, np.float64)
        fn(v.view(_storage(dt)), o32, o64)
        assert np.array_equal(o32, np.arange(32, dtype=np.float32))
        # lo_f64 of each: the even and odd elements 0..14 / 1..15 (bfloat16)
        # or elements 0..7 and 16..23 (two halves)
        want = np.arange(16.0) if dt == ml_dtypes.bfloat16 else np.r_[np.arange(8.0), np.arange(16.0, 24.0)]
        assert np.array_equal(o64, want)


def test_exp_f32_16bit_accuracy_and_range():
    """The 16-bit backward's ``e**dst`` (``_math.exp_f32_16bit``): the
    arithmetic of ``exp_f32_sum`` for any ``x``, within ``1.5e-7 e**x +
    7.3e-8 |x| e**x`` up to the overflow, inf past it, 0 at ``-inf``."""
    from logsoftmax.backends.cpu._math import exp_f32_16bit
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vload, vstore

    @numba.njit(error_model="numpy")
    def apply(x, out):
        wide_vectors()
        for k in range(0, x.size, W):
            vstore(out, k, exp_f32_16bit(vload(x, k)))

    x = np.linspace(-87, 88.7, 400_000).astype(np.float32)
    got = np.empty_like(x)
    apply(x, got)
    ref = np.exp(x.astype(np.longdouble))
    err = np.abs(got.astype(np.longdouble) - ref) / ref
    assert (err <= 1.5e-7 + 7.3e-8 * np.abs(x)).all()
    special = np.array([0.0, -np.inf, np.inf, np.nan, 88.8, 100.0, 1e30, -110.0] * 2, np.float32)
    got = np.empty_like(special)
    apply(special, got)
    assert got[0] == 1 and got[1] == 0 and np.isposinf(got[2]) and np.isnan(got[3])
    assert np.isposinf(got[4:7]).all() and got[7] == 0


def _backward_by_formula(dd, y, half):
    """``dd - e**y * S`` per element, ``S`` the row's exact ``sum(dd)``
    rounded to float32, by one FMA with the float32 ``exp`` that the fast
    path uses for a 16-bit result (``half``) or a float32 one."""
    from logsoftmax.backends.cpu._math import exp_f32, exp_f32_16bit
    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vfma, vload, vstore

    @numba.njit(error_model="numpy")
    def apply(d, yv, ns, out):
        wide_vectors()
        for k in range(0, d.size, W):
            e = exp_f32_16bit(vload(yv, k)) if half else exp_f32(vload(yv, k))
            vstore(out, k, vfma(e, vload(ns, k), vload(d, k)))

    d32, y32 = dd.astype(np.float32).ravel(), y.astype(np.float32).ravel()
    s = np.sum(dd.astype(np.float64), axis=-1, keepdims=True)  # its float32 rounding: the kernels
    ns = np.broadcast_to(-s.astype(np.float32), dd.shape).ravel().copy()
    out = np.empty_like(d32)
    apply(d32, y32, ns, out)
    return out.reshape(dd.shape).astype(dd.dtype)


@pytest.mark.parametrize("dtype", [F32, BF16, F16])
@pytest.mark.parametrize("shape, axis", [((256, 1008), -1), ((32, 8016), -1), ((1008, 256), 0)])
def test_fast_backward_takes_the_exp_of_its_result_precision(dtype, shape, axis):
    """The fast backward (float32 rows longer than ``SHORT_BACKWARD``, every
    16-bit row) computes ``d - e**y * S`` with ``exp_f32`` for float32
    results and ``exp_f32_16bit`` for 16-bit ones, in every kernel: rows,
    long rows, columns (16-bit data into a float32 output takes
    ``exp_f32``: ``test_bfloat16_sums_in_pair_order_give_the_float32_sums``).
    Bit for bit against the formula (float32 ``S`` exact; whole vectors).
    The two exponentials differ by up to ~10 float32 ulps, which
    moves some of these 16-bit results (and many float32 ones) by an ulp:
    the formula with the other ``exp`` does not match."""
    # dd: one value in [256, 1024) a row and small ones after it (|dd| <
    # 2**-10), so that dx = dd - e**y S there is mostly the exp's term and
    # carries its error; y in [-12, -2], where the two exps differ the most
    # (a 16-bit y takes a few hundred values there: the small dd vary the
    # results)
    rng = np.random.default_rng(31)
    y = rng.uniform(-12, -2, shape).astype(dtype)
    dd = rng.uniform(-2.0**-10, 2.0**-10, shape).astype(dtype)
    if axis == 0:
        dd[0] = rng.uniform(256, 1024, shape[1])
    else:
        dd[:, 0] = rng.uniform(256, 1024, shape[0])
    got = logsoftmax.log_softmax_backward(dd, y, axis)
    half = dtype != F32
    if axis == 0:
        want = _backward_by_formula(dd.T, y.T, half).T
        other = _backward_by_formula(dd.T, y.T, not half).T
    else:
        want = _backward_by_formula(dd, y, half)
        other = _backward_by_formula(dd, y, not half)
    assert np.array_equal(bits(got), bits(want))
    assert not np.array_equal(bits(got), bits(other))


def test_bfloat16_pairs_use_the_paired_hardware_rounding():
    """An all-bfloat16 pass rounds its two vectors with one
    ``vcvtne2ps2bf16`` where the CPU has AVX512_BF16."""
    from numba.core.registry import cpu_target

    from logsoftmax.backends.cpu._simd import wide_vectors
    from logsoftmax.backends.cpu._vec import W, vload_pair, vstore_pair

    if "+avx512bf16" not in cpu_target.target_context.codegen()._tm_features.split(","):
        pytest.skip("no AVX512_BF16 on this CPU")

    def paired(x, o):
        wide_vectors()
        for i in range(0, x.size, 2 * W):
            a, b = vload_pair(x, i, (x, o))
            vstore_pair(o, i, a - np.float32(1.0), b - np.float32(1.0), (x, o))

    fn = numba.njit(paired)
    x = np.zeros(64, np.uint16)
    fn(x, x.copy())
    asm = next(iter(fn.inspect_asm().values()))
    assert "vcvtne2ps2bf16" in asm and "vpmovzxwd" not in asm


# ---------------------------------------------------------------------------
# logsumexp reductions, shapes, empty arrays
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [(1, 2), (0, 2), (0, 1, 2), (0,), ()])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_axes(axes, keepdims):
    x = (np.random.default_rng(9).standard_normal((5, 6, 70)) * 3).astype(np.float32)
    for xv in (x, x.transpose(1, 2, 0), x[:, ::2]):
        r = CPU.logsumexp(xv, axes, keepdims)
        ref = REF.logsumexp(xv, axes, keepdims)
        assert r.shape == ref.shape and r.dtype == xv.dtype
        # 1 ulp: float32 terms; the strict (vs PyTorch) bound is tested above
        assert err_eps(r, ref, F32) <= 1.0


def test_size_zero_and_zero_length_axis():
    x = np.zeros((3, 0), np.float32)
    assert _fwd("log_softmax", x, 1).shape == (3, 0)
    assert CPU.log_softmax_backward(x, x, 0, None, np.dtype(F32)).shape == (3, 0)
    r = CPU.logsumexp(x, (1,), False)
    assert r.shape == (3,) and np.all(np.isneginf(r))
    assert CPU.logsumexp(x, (0,), True).shape == (1, 0)


# ---------------------------------------------------------------------------
# lazy compilation and vectorisation
# ---------------------------------------------------------------------------
def test_import_compiles_nothing():
    code = (
        "import logsoftmax\n"
        "from logsoftmax.backends.cpu import CpuBackend, rows, columns, split, float64\n"
        "mods = (rows, columns, split, float64)\n"
        "fns = [getattr(m, n) for m in mods for n in m.__all__]\n"
        "fns = [f for f in fns if hasattr(f, 'overloads')]\n"
        "assert fns and all(not f.overloads for f in fns), 'compiled at import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_kernel_modules_export_what_they_define():
    """Every name in a CPU backend module's ``__all__`` exists (a helper
    removed from a module and left in its ``__all__`` broke only ``import
    *``, which no kernel does)."""
    import importlib
    import pkgutil

    from logsoftmax.backends import cpu

    names = [m.name for m in pkgutil.iter_modules(cpu.__path__)]
    missing = {}
    for name in names:
        mod = importlib.import_module(f"{cpu.__name__}.{name}")
        gone = [n for n in getattr(mod, "__all__", ()) if not hasattr(mod, n)]
        if gone:
            missing[name] = gone
    assert "_vec" in names and not missing


def test_hot_loops_vectorise():
    """The kernels' explicit vectors reach the widest registers the CPU has:
    zmm on AVX-512 (LLVM's Intel tuning would pick ymm without the
    ``prefer-vector-width`` attribute), ymm on AVX2; no scalar libm calls."""
    flags = open("/proc/cpuinfo").read() if sys.platform == "linux" else ""
    if " avx2" not in flags and " avx512f" not in flags:
        pytest.skip("no AVX2/AVX-512 here")
    from logsoftmax.backends.cpu import rows

    # a fresh (uncached) compile, so that inspect_asm has the assembly
    fwd = numba.njit(error_model="numpy")(rows.forward_short.py_func)
    x = np.random.default_rng(10).standard_normal((64, 300)).astype(np.float32)
    g = np.array([1, 64, 300, 1] + [0, 0, 300, 1, 0] * 2, np.int64)
    fwd(x.reshape(-1), np.empty(x.size, np.float32), g, 0, True, 0, 64)
    asm = next(iter(fwd.inspect_asm().values()))
    wide = "zmm" if " avx512f" in flags else "ymm"
    assert asm.count(wide) > 100, wide
    assert "vmaxps" in asm and "vfmadd" in asm
    assert "expf" not in asm and "log@" not in asm  # no scalar libm calls


def test_prefetch_ahead_fills_the_level_chosen_for_the_cpu():
    """``_vec.prefetch_ahead`` (the kernels' next-chunk prefetch) is a
    ``prefetcht1`` (into L2), except for 16-bit data on AMD Zen: a
    ``prefetcht0`` (measured on an Intel Xeon and an AMD EPYC Zen 4:
    docs/performance.md), chosen by the CPU numba compiles for and the
    buffer's dtype."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("x86 prefetch instructions")
    from numba.core.registry import cpu_target

    from logsoftmax.backends.cpu._vec import prefetch_ahead

    @numba.njit
    def touch(a):
        prefetch_ahead(a, 64)
        return a[0]

    cpu = cpu_target.target_context.codegen().magic_tuple()[1]
    for dtype, sixteen in ((np.float32, False), (np.uint16, True), (np.int16, True)):
        touch(np.zeros(4, dtype))
        asm = touch.inspect_asm(touch.signatures[-1])
        level = "prefetcht0" if sixteen and cpu.startswith("znver") else "prefetcht1"
        other = "prefetcht1" if level == "prefetcht0" else "prefetcht0"
        assert level in asm and other not in asm, (cpu, dtype, level)


# ---------------------------------------------------------------------------
# serial kernels for small problems: same bits as the parallel ones
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, BF16, F64], ids=dtypes.name_of)
@pytest.mark.parametrize(
    "shape, axis",
    [((40, 300), 1), ((300, 40), 0), ((3000, 4), 1), ((2, 9000), 1), ((5, 6, 70), 1)],
)
def test_serial_and_parallel_kernels_bit_identical(monkeypatch, dtype, shape, axis):
    from logsoftmax.backends import cpu

    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x.flat[7] = -np.inf
    dd = rng.standard_normal(shape).astype(dtype)

    def run():
        y = _fwd("log_softmax", x, axis)
        return [
            y,
            _fwd("softmax", x, axis),
            CPU.log_softmax_backward(dd, y, axis, None, np.dtype(dtype)),
            CPU.softmax_backward(dd, np.exp(y), axis, None, np.dtype(dtype)),
            CPU.logsumexp(x, (axis,), False),
        ]

    monkeypatch.setattr(cpu, "SERIAL_MAX", 1 << 62)
    serial = run()
    monkeypatch.setattr(cpu, "SERIAL_MAX", 0)
    parallel = run()
    for i, (a, b) in enumerate(zip(serial, parallel)):
        assert np.array_equal(bits(a), bits(b)), i


def test_parallel_runs_follow_their_arguments_types():
    """A parallel run calls the serial kernel's code by address
    (:mod:`.native`), which is only good for the types it was compiled
    for: a driver given another signature's tag runs nothing, and a
    :class:`~.native.Parallel` whose arguments change dtype resolves the
    kernel for the new ones. Each run gives the serial call's bits."""
    from logsoftmax.backends.cpu import native, rows
    from logsoftmax.backends.cpu.layout import layout

    par = native.Parallel(rows, "forward_short", native.over_rows)
    rng = np.random.default_rng(23)
    for dt in (F32, BF16, F32):
        x = (rng.standard_normal((64, 100)) * 3).astype(dt)
        serial, parallel = np.empty_like(x), np.full_like(x, 7)
        lay = layout(x.shape, [x.strides, x.strides], [x.itemsize] * 2, 1)
        flat = [a.reshape(-1).view(np.uint16) if dt == BF16 else a.reshape(-1) for a in (x, serial, parallel)]
        accurate = np.bool_(dt == F32)
        rows.forward_short(flat[0], flat[1], lay.g, 0, accurate, 0, 64)
        if dt == BF16:  # the float32 code's tag: refused, nothing written
            assert not native.over_rows(*par.entry, 2, flat[0], flat[2], lay.g, 0, accurate)
            assert np.all(parallel == 7)
        par(2, flat[0], flat[2], lay.g, 0, accurate)
        assert np.array_equal(bits(parallel), bits(serial)), dt


def test_small_problems_choose_serial_kernels(monkeypatch):
    from conftest import count_kernel_calls

    from logsoftmax.backends.cpu import columns, fewrows, rows, tiny

    called = []
    count_kernel_calls(monkeypatch, called, [(rows, "forward_short"), (columns, "forward_tiles"),
                                             (fewrows, "forward_few"), (tiny, "forward_tiny")])
    x = np.random.default_rng(0).standard_normal((64, 10)).astype(np.float32)
    _fwd("log_softmax", x, 1)  # 64 rows of 10: a row per lane
    _fwd("log_softmax", x[:8], 1)  # 8 rows: fewer than a batch of them
    _fwd("log_softmax", x, 0)  # 64 rows of 10 columns: the few-row kernel
    _fwd("log_softmax", x.repeat(8, 1), 0)  # of 80: the tiles
    big = np.zeros((256, 1024), np.float32)
    want = _fwd("log_softmax", big, 1)
    expected = ["forward_tiny", "forward_short", "forward_few", "forward_tiles"]
    expected.append("forward_short in parallel" if numba.get_num_threads() > 1 else "forward_short")
    assert called == expected
    assert np.array_equal(want, np.full(big.shape, np.float32(-np.log(1024.0))))  # rounded once


# ---------------------------------------------------------------------------
# float64 and logsumexp: rounded once from a double-double (~correctly rounded)
# ---------------------------------------------------------------------------
def test_exp_dd_and_log_dd_accuracy():
    from logsoftmax.backends.cpu._simd import exp_dd, log_dd

    rng = np.random.default_rng(12)
    a = np.concatenate([[0.0, 0.3465, 1.0], rng.uniform(0, 20, 500)])
    for v in a:
        hi, lo = exp_dd(v)
        want = np.exp(np.longdouble(v))
        rel = abs((np.longdouble(hi) + np.longdouble(lo)) - want) / want
        assert rel < 2.0**-56, (v, rel)
    for s in np.concatenate([[1.0, 2.0], 1 + rng.uniform(0, 1, 300),
                             rng.uniform(1, 1e6, 300)]):
        lo = float(rng.uniform(-0.5, 0.5) * np.spacing(s))
        hi, l2 = log_dd(s, lo)
        want = np.log(np.longdouble(s) + np.longdouble(lo))
        assert abs(np.longdouble(hi) + np.longdouble(l2) - want) < 2.0**-55, s
    assert log_dd(0.0, 0.0)[0] == -np.inf and np.isnan(log_dd(np.nan, 0.0)[0])
    assert log_dd(np.inf, 0.0)[0] == np.inf


@pytest.mark.parametrize("n", [2, 7, 100, 1000, 9000])
def test_f64_forward_and_logsumexp_rounded_once(n):
    # oracle in long double (tests/conftest.py). Bound: 0.5 eps of the final
    # rounding plus the float64 exp terms' <= 0.5 ulp each, which move
    # log(sum) by <= 0.5 eps * (sum - 1) / sum in the worst case (random signs
    # average them out; measured max 0.56-0.64 over 50000 rows). Plain float64
    # arithmetic reached 1.48 eps at n = 7.
    from conftest import ref_log_softmax, ref_logsumexp

    rng = np.random.default_rng([n, 13])
    x = rng.normal(0, 3, size=(max(2, 100_000 // n), n))
    x[0, 0] = -np.inf
    ref = ref_log_softmax(x)
    got = _fwd("log_softmax", x, 1)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref.astype(np.float64)))
    fin = np.isfinite(ref)
    scale = dtypes.eps(F64) * np.maximum(1, np.abs(ref[fin]))
    e = np.abs(got[fin] - ref[fin]) / scale
    assert e.max() <= 0.75, e.max()
    inner = _fwd("log_softmax", np.ascontiguousarray(x.T), 0).T
    assert np.array_equal(bits(got), bits(inner))
    lref = ref_logsumexp(x)
    lse = CPU.logsumexp(x, (1,), False)
    el = np.abs(lse - lref) / (dtypes.eps(F64) * np.maximum(1, np.abs(lref)))
    assert el.max() <= 0.75, el.max()
    assert np.array_equal(bits(lse), bits(CPU.logsumexp(np.ascontiguousarray(x.T),
                                                           (0,), False)))


@pytest.mark.parametrize("n", [2, 7, 100, 1000, 9000])
def test_f32_logsumexp_rounded_once(n):
    rng = np.random.default_rng([n, 14])
    x = rng.normal(0, 3, size=(max(2, 100_000 // n), n)).astype(np.float32)
    x64 = x.astype(np.float64)
    m = x64.max(axis=1)
    ref = m + np.log(np.sum(np.exp(x64 - m[:, None]), axis=1))
    got = CPU.logsumexp(x, (1,), False)
    assert got.dtype == F32
    assert err_eps(got, ref, F32) <= 0.51
    col = CPU.logsumexp(np.ascontiguousarray(x.T), (0,), False)
    assert np.array_equal(bits(got), bits(col))


@pytest.mark.parametrize("n", [32, 100, 250, 1000])
def test_f32_short_rows_no_worse_than_torch(n):
    """float32 rows up to ``SHORT64`` sum float64 terms: log_softmax/softmax
    are then ~0.5 eps, never above PyTorch's (with float32 terms they lost on
    some seeds at n = 3-250), row and column kernels alike (same bits)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    for seed in range(3):
        rng = np.random.default_rng([n, seed, 15])
        x = (rng.standard_normal((4096, n)) * 3).astype(np.float32)
        x64 = x.astype(np.float64)
        m = x64.max(1, keepdims=True)
        ref = (x64 - m) - np.log(np.exp(x64 - m).sum(1, keepdims=True))
        tx = torch.from_numpy(x)
        for op, r, tf in (("log_softmax", ref, torch.log_softmax),
                          ("softmax", np.exp(ref), torch.softmax)):
            got = _fwd(op, x, 1)
            ours, theirs = err_eps(got, r, F32), err_eps(tf(tx, 1).numpy(), r, F32)
            assert ours <= theirs, (op, seed, ours, theirs)
            assert ours <= 0.55, (op, seed, ours)
            col = _fwd(op, np.ascontiguousarray(x.T), 0).T
            assert np.array_equal(bits(got), bits(col)), op


# ---------------------------------------------------------------------------
# portable bits: AVX2 code gives the AVX-512 code's results
# ---------------------------------------------------------------------------
_DIGEST = """
import hashlib, sys
import ml_dtypes, numpy as np
import logsoftmax as ls
rng = np.random.default_rng(3)
h = hashlib.sha256()
for dt in (np.float32, ml_dtypes.bfloat16, np.float16, np.float64):
    for shape, axis in (((37, 300), 1), ((300, 37), 0), ((3, 9000), 1), ((5, 40, 7), 1), ((4, 3, 37), 1),
                         ((2, 21, 70), 1), ((2, 60, 8), 1)):
        x = (rng.standard_normal(shape) * 3).astype(dt)
        dd = rng.standard_normal(shape).astype(dt)
        y = ls.log_softmax(x, axis)
        sm = ls.softmax(x, axis)
        for a in (y, sm, ls.log_softmax_backward(dd, y, axis),
                  ls.softmax_backward(dd, sm, axis), ls.logsumexp(x, axis)):
            h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
# the 16-bit fast path's terms over their whole range: e**(x - m) from 1 down
# to denormals and 0 (-inf, far below)
for dt in (ml_dtypes.bfloat16, np.float16):
    x = np.array([[0, -1, -87.5, -90, -100, -103.5, -104, -150, -1e4, -6e4, -np.inf, 3, 2.5, -0.001,
                   -20, -50]], np.float32).astype(dt)
    for a in (ls.log_softmax(x, 1), ls.softmax(x, 1), ls.logsumexp(x, 1), ls.log_softmax(x.T.copy(), 0)):
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
# the backward's exp at the ends of its range (float64 exp of dst: 0 below
# -708, inf from where it overflows) against gradients of 0, +-inf and NaN
dst = np.array([0.0, -700, -708.5, -745.5, 709.781, 709.79, 710, 1e30, -np.inf, np.inf, np.nan,
                -1.0, -2.5, -3.0, -40.0, -0.5], np.float32)
for dd in (np.zeros(16, np.float32), np.full(16, -0.0, np.float32), np.linspace(-0.5, 1.5, 16, dtype=np.float32),
           np.r_[np.float32(np.inf), np.zeros(15, np.float32)], np.r_[np.float32(np.nan), np.zeros(15, np.float32)]):
    for shape in ((1, 16), (3, 16)):
        a = ls.log_softmax_backward(np.broadcast_to(dd, shape).copy(), np.broadcast_to(dst, shape).copy())
        h.update(a.view(np.uint8).tobytes())
# the accurate float32 path's float64 terms at the ends of theirs: x - m from
# 0 down past -708 (denormal terms) and -745 (0) to -inf
x = np.array([[0, -1, -700, -708.5, -720, -745, -746, -800, -1e4, -np.inf, 2.0, -0.25]], np.float32)
for a in (ls.log_softmax(x, 1), ls.softmax(x, 1), ls.logsumexp(x, 1), ls.log_softmax(x.T.copy(), 0)):
    h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
print(h.hexdigest())
"""


def _avx2_env():
    """``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` for an AVX2 build on this
    machine (LLVM ``haswell``, its features minus AVX-512, AMX and AVX10);
    skips where the CPU has no AVX2."""
    import llvmlite.binding as llb

    flags = open("/proc/cpuinfo").read() if sys.platform == "linux" else ""
    if " avx2" not in flags:
        pytest.skip("no AVX2 here")
    feats = [
        "-" + f[1:] if f.startswith("+") and any(k in f for k in ("avx512", "amx", "avx10"))
        else f
        for f in llb.get_host_cpu_features().flatten().split(",")
    ]
    return {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ",".join(feats)}


@pytest.mark.slow
def test_avx2_build_gives_the_same_bits(tmp_path):
    """The kernels' vectors are 16 float32 lanes whatever the CPU: LLVM maps
    them to one zmm (AVX-512) or two ymm (AVX2) with the same arithmetic per
    lane, so an AVX2 build (``NUMBA_CPU_NAME=haswell`` with this CPU's
    features minus AVX-512/AMX, compiled into a fresh cache) gives the same
    bits as this machine's build."""
    def digest(env):
        run = subprocess.run(
            [sys.executable, "-c", _DIGEST],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        return run.stdout.strip()

    env = {**_avx2_env(), "NUMBA_CACHE_DIR": str(tmp_path)}
    assert digest({}) == digest(env)


_AVX2_ASM = """
import hashlib, re, sys
import numpy as np
from numba import njit
from logsoftmax.backends.cpu._math import (exp_f32, exp_f32_16bit, exp_f32_sum, exp_f64, exp_f64_any,
                                           exp_f64_ulp, log_f64)
from logsoftmax.backends.cpu._simd import wide_vectors
from logsoftmax.backends.cpu._vec import W, vload, vstore

def kernel(fn, step):
    @njit(error_model="numpy")
    def k(a, o):
        wide_vectors()
        for i in range(0, a.shape[0], step):
            vstore(o, i, fn(vload(a, i)))
    return k

# every function over its range: denormal results, 0, overflow, +-inf, NaN
grid = np.r_[np.linspace(-800, 800, 40001), -745.2, -708.4, -103.3, -87.4, 88.8, 709.79,
             np.ldexp(1.0, np.arange(-1074, 1024, 7)), 0.0, -0.0, np.inf, -np.inf, np.nan]
grid = np.r_[grid, np.zeros(-len(grid) % 16)]
for fn, dt in ((exp_f32, np.float32), (exp_f32_sum, np.float32), (exp_f32_16bit, np.float32),
               (exp_f64, np.float64), (exp_f64_any, np.float64), (exp_f64_ulp, np.float64), (log_f64, np.float64)):
    k = kernel(fn, W if dt == np.float32 else W // 2)
    a = grid.astype(dt)
    o = np.empty_like(a)
    k(-np.abs(a) if fn in (exp_f32_sum, exp_f64) else a, o)
    asm = next(iter(k.inspect_asm().values()))
    scalar = re.findall(r"cvtt?s[sd]2si|cvtsi2s[sd]|vpextr[dq]|vpinsr[dq]", asm)
    digest = hashlib.sha256(o.view(np.uint8).tobytes()).hexdigest()[:16]
    print(fn.__name__, len(scalar), "zmm" in asm, "ymm" in asm, digest)
"""


def test_avx2_build_keeps_the_math_in_vectors():
    """An AVX2 build (``NUMBA_CPU_NAME=haswell``, AVX-512 off) of every
    ``exp`` and ``log`` of :mod:`._math` stays in ``ymm`` vectors: no lane
    goes through a scalar conversion or an extract/insert. AVX2 converts
    doubles to int32 but not to int64: a 64-bit conversion in the AVX2 form
    of ``times_pow2`` became 8 scalar ``cvttsd2si`` a vector, which made the
    float64 paths 1.4-1.6x slower there (docs/performance.md). And it gives
    this machine's bits over each function's whole range (denormals, 0,
    overflow, infinities, NaN), which the kernels' digest above cannot see
    where a float32 output rounds a float64 term away. The grid's vectors
    of 8 or 16 neighbours take both of the AVX2 form's branches
    (``_vec.pow2_normal``: every lane normal, or not)."""
    env = {**os.environ, **_avx2_env(), "NUMBA_DISABLE_CACHE": "1"}

    def run(env):
        out = subprocess.run([sys.executable, "-c", _AVX2_ASM], env=env, capture_output=True,
                             text=True, timeout=600, check=True).stdout
        return [ln.split() for ln in out.strip().splitlines()]

    avx2 = run(env)
    native = run({**os.environ, "NUMBA_DISABLE_CACHE": "1"})
    assert [ln[0] for ln in avx2] == ["exp_f32", "exp_f32_sum", "exp_f32_16bit", "exp_f64", "exp_f64_any",
                                      "exp_f64_ulp", "log_f64"]
    for (name, scalar, zmm, ymm, digest), mine in zip(avx2, native):
        assert (scalar, zmm, ymm) == ("0", "False", "True"), (name, scalar, zmm, ymm)
        assert digest == mine[4], name


def _resident(addr, pages):
    """Which of the ``pages`` 4 KiB pages from ``addr`` (page-aligned) are
    mapped (Linux ``mincore``)."""
    import ctypes

    vec = ctypes.create_string_buffer(pages)
    assert ctypes.CDLL(None).mincore(ctypes.c_void_p(addr), ctypes.c_size_t(pages * 4096), vec) == 0
    return [b & 1 for b in vec.raw]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore/madvise: Linux")
def test_fault_in_maps_every_page_and_keeps_the_data():
    """``alloc.fault_in`` (run before a big output is streamed into) maps a
    fresh buffer's pages in parallel slices and changes no byte; a buffer
    whose first page is mapped is left alone."""
    import mmap

    from logsoftmax.backends.cpu import alloc

    page, pages = mmap.PAGESIZE, 64
    buf = mmap.mmap(-1, pages * page)
    a = np.frombuffer(buf, np.uint8)
    a[5 * page + 3] = 7  # one page touched (not the first)

    def resident():
        return _resident(a.ctypes.data, pages)

    assert sum(resident()) < pages
    alloc.fault_in(a[1:], 3)  # any start within the first page
    assert all(resident())
    assert a[5 * page + 3] == 7 and a.sum() == 7
    del a
    buf.close()


def test_touch_pages_stores_into_every_page_and_nowhere_else():
    """``rows.touch_pages`` (a fresh result's page faults) stores a zero
    every 4 KiB of its array and into its last byte, so every page the
    array spans is written even when it starts and ends inside one, and no
    byte around it; an empty array is left alone."""
    from logsoftmax.backends.cpu import rows

    page = 4096
    whole = np.full(64 * page, 7, np.uint8)
    inner = whole[page + 100 : 40 * page + 5]
    rows.touch_pages(inner, 3)
    zeros = np.flatnonzero(whole == 0)
    expect = list(range(page + 100, 40 * page + 5, page)) + [40 * page + 4]
    assert zeros.tolist() == expect
    assert {(int(i) // page) for i in zeros} == set(range(1, 41))  # pages 1..40, each
    rows.touch_pages(whole[5:5], 2)
    assert np.count_nonzero(whole == 0) == len(expect)


def test_pooled_results_freed_past_the_limit_or_alive_at_exit_print_nothing():
    """A result freed when the pool is full, or still alive at exit, leaves
    no "Exception ignored ... BufferError" on stderr (its buffer was closed
    while the dying owner still exported it), and the pool keeps working."""
    code = (
        "import numpy as np, logsoftmax\n"
        "from logsoftmax.backends.cpu import alloc\n"
        "x = np.ones((64, 32768), np.float32)  # 8 MiB results, a 4 MiB pool\n"
        "for _ in range(3):\n"
        "    y = logsoftmax.log_softmax(x); del y\n"
        "assert alloc.pooled_bytes() == 0\n"
        "kept = [logsoftmax.log_softmax(x) for _ in range(3)]\n"
        "assert all((k == kept[0]).all() for k in kept)\n"
    )
    _run_with_pool_limit(code, 4 << 20)


def _run_with_pool_limit(code, limit):
    """``code`` in a fresh interpreter whose pool keeps ``limit`` bytes: it
    passes, and no buffer was closed under a dying owner (no "Exception
    ignored ... BufferError" on stderr)."""
    env = {**os.environ, "LOGSOFTMAX_POOL_LIMIT": str(limit)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert "Exception ignored" not in run.stderr and "BufferError" not in run.stderr, run.stderr


def test_a_full_pool_keeps_the_newest_freed_result():
    """A result freed into a full pool stays there, the buffers freed
    longest ago unmapped to make room: the next call of its size reuses it
    (a pool filled by other sizes once mapped and faulted in every call of
    a new size), whatever the result's phase in a line."""
    code = (
        "import numpy as np, logsoftmax\n"
        "from logsoftmax.backends.cpu import alloc\n"
        "M = 1 << 20\n"
        "small, big = np.ones((64, 32768), np.float32), np.ones((96, 32768), np.float32)\n"
        "held = [logsoftmax.log_softmax(small) for _ in range(2)]  # 8 MiB: 10 MiB buffers\n"
        "del held\n"
        "assert alloc.pooled_bytes() == 20 * M, alloc.pooled_bytes()\n"
        "y = logsoftmax.log_softmax(big); del y  # 12 MiB: a 14 MiB buffer, both others out\n"
        "assert alloc.pooled_bytes() == 14 * M, alloc.pooled_bytes()\n"
        "y = logsoftmax.log_softmax(big)\n"
        "assert alloc.pooled_bytes() == 0\n"
        "z = logsoftmax.log_softmax(big.reshape(96, 32, 1024), 1); del y, z  # phased, one class\n"
        "assert alloc.pooled_bytes() == 14 * M, alloc.pooled_bytes()\n"
    )
    _run_with_pool_limit(code, 20 << 20)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore, /proc: Linux")
def test_fault_in_touch_maps_a_fresh_pool_result_which_is_private_memory():
    """A big fresh result comes from the pool's *private* anonymous maps
    (a shared one's page faults cost more), and ``alloc.fault_in`` with
    ``touch`` maps all its pages, in whatever dimension order it is laid
    out (``touch`` gets its bytes as a view); with its first page mapped it
    is left alone."""
    from logsoftmax.backends.cpu import alloc, rows

    n = alloc.POOL_MIN // 4 + 1000
    for like in (np.empty(n, F32), np.empty((8, n // 8 + 1), F32, order="F")):
        alloc.clear_pool()  # a fresh map each time, not the last one back
        _check_touched_pool_result(alloc.empty_like(like, F32), rows.touch_pages)
    alloc.clear_pool()


def test_pooled_float32_column_results_start_at_their_inputs_phase():
    """An allocating call's pooled float32 result of the column tiles (a
    strided reduction axis) starts as far into a 64-byte line as its input
    (``alloc.line_phase``: the tiles align their vectors to the output's
    lines, and a load at another phase straddles two); row kernels' results
    and 16-bit ones start on a line."""
    from logsoftmax.backends.cpu import alloc

    shape = (16, 64, 32, 32)  # 4 MiB of float32: the pool's smallest
    n = int(np.prod(shape))
    raw = np.empty(n * 4 + 128, np.uint8)
    for phase in (0, 16, 32, 48):
        off = (phase - raw.ctypes.data) % 64
        x = raw[off : off + n * 4].view(F32).reshape(shape)
        x[...] = np.random.default_rng(phase).standard_normal(shape)
        assert x.ctypes.data % 64 == phase
        y = logsoftmax.log_softmax(x, 1)
        assert y.ctypes.data % 64 == phase
        assert np.array_equal(bits(y), bits(logsoftmax.log_softmax(x, 1, out=np.empty_like(x))))
        g = logsoftmax.log_softmax_backward(x, y, 1)
        assert g.ctypes.data % 64 == phase
        assert logsoftmax.log_softmax(x, -1).ctypes.data % 64 == 0  # rows
        x16 = np.concatenate([x, x]).astype(BF16)  # 4 MiB: pooled
        assert logsoftmax.log_softmax(x16, 1).ctypes.data % 64 == 0  # 16-bit
        assert alloc.empty_like(x, F32, phased=True).ctypes.data % 64 == phase
    del x, y, g, x16
    alloc.clear_pool()


def _check_touched_pool_result(a, touch):
    from logsoftmax.backends.cpu import alloc

    addr, nbytes = a.ctypes.data, a.nbytes
    page = 4096
    pages = -(-nbytes // page)

    def resident():
        return _resident(addr, pages)

    assert sum(resident()) == 0
    maps = [ln.split() for ln in open("/proc/self/maps")]
    (perms,) = [m[1] for m in maps if int(m[0].split("-")[0], 16) <= addr < int(m[0].split("-")[1], 16)]
    assert perms == "rw-p"  # private, not shared
    seen = []

    def spy(pages, threads):  # the result's own bytes, not a copy of them
        seen.append(pages.size == nbytes and np.shares_memory(pages, a))
        touch(pages, threads)

    alloc.fault_in(a, 2, spy)
    assert seen == [True] and all(resident())
    a.flat[0] = 5.0
    a.flat[-1] = 6.0
    alloc.fault_in(a, 2, touch)  # first page mapped: left alone
    assert a.flat[0] == 5.0 and a.flat[-1] == 6.0


def test_backend_call_declines_an_out_or_dst_of_another_shape_or_dtype():
    """The front door's fast path leaves the shape and dtype checks of
    ``out`` (and of the backward's ``dst``) to the backend's call, which
    returns None for a mismatch (the general path then raises), writing
    nothing; a matching call still runs."""
    x = np.random.default_rng(18).standard_normal((4, 8)).astype(F32)
    y = _fwd("log_softmax", x, 1)
    lsm = int(Op.LOG_SOFTMAX)
    for out in (np.full((8, 4), 7, F32), np.full((4, 8), 7, np.float16)):
        assert CPU.forward(lsm, x, 1, out, F32) is None
        assert CPU.backward(lsm, x, y, 1, out, F32) is None
        assert np.all(out == 7)
    assert CPU.backward(lsm, x, y.T.copy(), 1, None, F32) is None
    assert CPU.backward(lsm, x, y.astype(np.float16), 1, None, F32) is None
    out = np.empty_like(x)
    assert CPU.forward(lsm, x, 1, out, F32) is out
    assert np.array_equal(bits(out), bits(y))
    with pytest.raises(ValueError):
        logsoftmax.log_softmax(x, out=np.empty((8, 4), F32))
    with pytest.raises(TypeError):
        logsoftmax.log_softmax_backward(x, y.astype(np.float16))


@pytest.mark.parametrize("dtype,shape,axis", [
    *[(F32, s, a) for s, a in (((1, 8), -1), ((40, 10), 1), ((64, 10), 0), ((2, 3000), 1),
                               ((7,), 0), ((4, 16, 5), 1))],
    (BF16, (40, 10), 1), (BF16, (64, 10), 0), (F16, (40, 10), 1),
])
def test_unchecked_out_checked_in_compiled_code(monkeypatch, dtype, shape, axis):
    """Small C-contiguous calls check ``out`` in compiled code (backends/cpu/
    into.py), not with the front door's Python checks: with those made to
    fail, a fitting ``out`` (a view, which sends the Python checks to their
    overlap test), ``x`` itself and, backward, ``diff_dst`` or ``dst`` itself
    still get the allocating call's bits; short rows, long rows and
    columns."""
    import logsoftmax._api as api

    rng = np.random.default_rng(20)
    x = rng.standard_normal(shape).astype(dtype)
    d = rng.standard_normal(shape).astype(dtype)
    y = logsoftmax.log_softmax(x, axis)
    dx = logsoftmax.log_softmax_backward(d, y, axis)

    def refuse(*args):
        raise AssertionError("the Python out= checks ran")

    monkeypatch.setattr(api, "_apart", refuse)
    view = np.empty(x.size + 3, dtype)[3:].reshape(shape)
    assert logsoftmax.log_softmax(x, axis, out=view) is view
    assert np.array_equal(bits(view), bits(y))
    xi = x.copy()
    assert logsoftmax.log_softmax(xi, axis, out=xi) is xi
    assert np.array_equal(bits(xi), bits(y))
    view[...] = 0
    assert logsoftmax.log_softmax_backward(d, y, axis, out=view) is view
    assert np.array_equal(bits(view), bits(dx))
    for which in ("diff_dst", "dst"):
        di, yi = d.copy(), y.copy()
        o = di if which == "diff_dst" else yi
        assert logsoftmax.log_softmax_backward(di, yi, axis, out=o) is o
        assert np.array_equal(bits(o), bits(dx)), which


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_unchecked_out_refused_untouched(dtype):
    """What the compiled check refuses goes to the general path, which raises
    API.md's error; nothing was written: read-only, partly overlapping, of
    another dtype (bfloat16 and float16 share a storage width), shape or
    rank, forward and backward (``dst`` of another shape too)."""
    rng = np.random.default_rng(21)
    x = rng.standard_normal((4, 8)).astype(dtype)
    y = logsoftmax.log_softmax(x)
    other = F16 if dtype == BF16 else F64
    ro = np.full((4, 8), 3, dtype)
    ro.setflags(write=False)
    buf = np.full(40, 3, dtype)
    xs = buf[:32].reshape(4, 8)
    xs[...] = x
    before = buf.copy()
    wrong = [(ro, ValueError), (np.full((4, 8), 3, other), TypeError),
             (np.full((8, 4), 3, dtype), ValueError), (np.full((2, 16), 3, dtype), ValueError),
             (np.full((32,), 3, dtype), ValueError), (np.full((1, 4, 8), 3, dtype), ValueError)]
    if dtype == BF16:
        wrong.append((np.full((4, 8), 3, np.uint16), TypeError))
    for out, err in wrong:
        kept = out.copy()
        with pytest.raises(err):
            logsoftmax.log_softmax(x, out=out)
        with pytest.raises(err):
            logsoftmax.log_softmax_backward(x, y, out=out)
        assert np.array_equal(bits(out), bits(kept)), (out.shape, out.dtype)
    with pytest.raises(ValueError, match="overlap"):
        logsoftmax.log_softmax(xs, out=buf[4:36].reshape(4, 8))
    with pytest.raises(ValueError, match="overlap"):
        logsoftmax.log_softmax_backward(x, xs, out=buf[8:40].reshape(4, 8))
    assert np.array_equal(bits(buf), bits(before))
    with pytest.raises(ValueError):
        logsoftmax.log_softmax_backward(x, y.reshape(8, 4), out=np.empty_like(x))
    y2 = np.repeat(y, 2, axis=0)[::2]  # y's values and shape, other strides
    got = logsoftmax.log_softmax_backward(x, y2, out=np.empty_like(x))
    assert np.array_equal(bits(got), bits(logsoftmax.log_softmax_backward(x, y)))


# Each case compiles its kernels for read-only types: the whole grid took
# 5:22 of compiling on a cold numba cache (one worker), so the default run
# keeps the case of the bug (column tiles) and two cheap ones
@pytest.mark.parametrize("dtype,shape,axis", [
    (F32, (300, 120), 0), (F32, (1000, 40), 0), (F32, (4, 16, 5), 1),
    _slow(BF16, (300, 120), 0), _slow(F32, (30, 12), 0), _slow(BF16, (30, 12), 0),
    _slow(BF16, (1000, 40), 0), _slow(F32, (16, 2, 32, 32), 1), _slow(BF16, (16, 2, 32, 32), 1),
    _slow(F32, (40, 300), 1), _slow(BF16, (40, 300), 1), _slow(F32, (300, 40), 1),
    _slow(BF16, (300, 40), 1), _slow(BF16, (4, 16, 5), 1),
])
def test_read_only_inputs_take_every_kernel(dtype, shape, axis):
    """Read-only inputs (``np.broadcast_to``, a memory map opened for
    reading) give the writeable arrays' bits, forward and backward, in
    every kernel: rows, rows gathered from a transposed view, column tiles
    (staged or not), few-row columns; serial, through the parallel entry
    and the general path. A read-only 300x120 float32 array over axis 0
    raised numba's TypingError: the tile kernel's scratch took the read-only
    input's type (``rows.stage_for``)."""
    rng = np.random.default_rng(24)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    d = rng.standard_normal(shape).astype(dtype)
    y = logsoftmax.log_softmax(x, axis)
    want = [y, logsoftmax.log_softmax(x.T, 0), logsoftmax.log_softmax_backward(d, y, axis)]
    xr, dr, yr = x.copy(), d.copy(), y.copy()
    for a in (xr, dr, yr):
        a.setflags(write=False)
    got = [logsoftmax.log_softmax(xr, axis), logsoftmax.log_softmax(xr.T, 0),
           logsoftmax.log_softmax_backward(dr, yr, axis)]
    for i, (a, b) in enumerate(zip(want, got)):
        assert np.array_equal(bits(a), bits(b)), i


@pytest.mark.parametrize("dtype,shape,axis", [
    (F32, (400, 100), 1), (F32, (40, 1000), 1), (F32, (2048, 8), 1), (BF16, (512, 128), 1),
    (F32, (1000, 100), 0), (F32, (16, 2, 32, 32), 1),
])
def test_parallel_entry_gives_the_serial_bits(monkeypatch, dtype, shape, axis):
    """Calls from ``SERIAL_MAX >> shift`` elements to a result of
    ``alloc.POOL_MIN`` bytes run their kernel in parallel through
    :mod:`.into`'s parallel entry (:class:`~logsoftmax.backends.cpu.ParallelEntry`),
    ``out`` checked or not: the serial kernel's bits allocating, into a numpy
    ``out``, in place, and backward into ``diff_dst`` or ``dst``; rows
    (accurate, fast, 16-bit), column tiles and few-row columns. What it
    refuses (read-only, partly overlapping) raises API.md's error with
    nothing written."""
    import numba
    from conftest import count_kernel_calls

    from logsoftmax.backends import cpu, default_cpu

    rng = np.random.default_rng(23)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    d = rng.standard_normal(shape).astype(dtype)
    parallel_max = cpu.SERIAL_MAX
    monkeypatch.setattr(cpu, "SERIAL_MAX", 1 << 62)
    y = logsoftmax.log_softmax(x, axis)
    dx = logsoftmax.log_softmax_backward(d, y, axis)
    default_cpu()._plans.clear()  # (a plan's tiles are cut for the threads it runs on)
    monkeypatch.setattr(cpu, "SERIAL_MAX", parallel_max)
    called = []
    count_kernel_calls(monkeypatch, called, [])
    got = [logsoftmax.log_softmax(x, axis), logsoftmax.log_softmax(x, axis, out=np.empty_like(x))]
    xi = x.copy()
    got.append(logsoftmax.log_softmax(xi, axis, out=xi))
    for r in got:
        assert np.array_equal(bits(r), bits(y))
    got = [logsoftmax.log_softmax_backward(d, y, axis),
           logsoftmax.log_softmax_backward(d, y, axis, out=np.empty_like(x))]
    for which in ("diff_dst", "dst"):
        di, yi = d.copy(), y.copy()
        got.append(logsoftmax.log_softmax_backward(di, yi, axis, out=di if which == "diff_dst" else yi))
    for r in got:
        assert np.array_equal(bits(r), bits(dx))
    if numba.get_num_threads() > 1:
        assert len(called) == 7 and all(c.endswith(" in parallel") for c in called), called
    ro = np.full(shape, 3, dtype)
    ro.setflags(write=False)
    with pytest.raises(ValueError):
        logsoftmax.log_softmax(x, axis, out=ro)
    buf = np.full(x.size + 8, 3, dtype)
    xs = buf[:x.size].reshape(shape)
    xs[...] = x
    before = buf.copy()
    with pytest.raises(ValueError, match="overlap"):
        logsoftmax.log_softmax(xs, axis, out=buf[8:].reshape(shape))
    with pytest.raises(ValueError, match="overlap"):
        logsoftmax.log_softmax_backward(d, xs, axis, out=buf[8:].reshape(shape))
    assert np.array_equal(bits(buf), bits(before))


def test_strided_out_skips_the_compiled_entry(monkeypatch):
    """An ``out`` that is not C-contiguous goes straight to the general path:
    the entry would only refuse it, after a numba dispatch (~0.85 us of a
    6x37 call). A C-contiguous one goes through the entry; both get the
    allocating call's bits."""
    from logsoftmax.backends.cpu import into

    called = []
    for name in ("forward", "backward"):
        real = getattr(into, name)
        monkeypatch.setattr(into, name, lambda *a, _f=real, _n=name: called.append(_n) or _f(*a))
    x = np.random.default_rng(22).standard_normal((3, 29)).astype(F32)  # a fresh plan
    y = logsoftmax.log_softmax(x)
    dx = logsoftmax.log_softmax_backward(x, y)
    for out in (np.empty((29, 3), F32).T, np.empty((3, 58), F32)[:, ::2]):
        assert np.array_equal(bits(logsoftmax.log_softmax(x, out=out)), bits(y))
        assert np.array_equal(bits(logsoftmax.log_softmax_backward(x, y, out=out)), bits(dx))
    assert called == []
    out = np.empty_like(x)
    assert np.array_equal(bits(logsoftmax.log_softmax(x, out=out)), bits(y))
    assert np.array_equal(bits(logsoftmax.log_softmax_backward(x, y, out=out)), bits(dx))
    assert called == ["forward", "forward", "backward", "backward"]  # (the first resolves the kernel)


def test_into_entries_refuse_unfit_types_without_the_kernel():
    """An ``out`` the compiled check cannot take gets a function that returns
    ``REFUSED`` and never runs or compiles a kernel: no kernel signature with
    a read-only, non-contiguous or float64 output appears (each would cost
    the kernel's ~10 s compile), and nothing is written. A fitting ``out``
    with a tag that is not its arguments' gets ``UNRESOLVED``, and nothing
    written either."""
    from numba import types

    from logsoftmax.backends.cpu import columns, into, rows

    x = np.zeros((2, 8), F32)
    g = np.zeros(14, np.int64)
    ro = np.zeros((2, 8), F32)
    ro.setflags(write=False)
    for out in (np.zeros((2, 8), F32)[:, ::-1], np.zeros((2, 8), F64), ro):
        assert into.forward(x, out, g, 0, -1, 0, True, 0, 2, ()) == into.REFUSED
        assert into.backward(x, x, out, g, 0, -1, 0, True, 16, 0, (-1,)) == into.REFUSED
    assert not np.any(ro)
    out = np.full((2, 8), 3, F32)
    assert into.forward(x, out, g, 0, -1, 0, True, 0, 2, ()) == into.UNRESOLVED
    assert into.backward(x, x, out, g, 0, -1, 0, True, 16, 0, (-1,)) == into.UNRESOLVED
    assert np.all(out == 3)
    for kernel, out_arg in ((rows.forward_short, 1), (columns.backward_tiles, 2)):
        for sig in kernel.signatures:
            ob = sig[out_arg]
            assert ob.mutable and ob.layout == "C" and ob.dtype != types.float64, sig


def test_plans_of_outs_of_one_shape_and_other_strides():
    """Plans are cached per call signature, ``out``'s strides included: a
    C-contiguous ``out`` whose length-1 dimension has an odd stride, and
    transposed and sliced ``out``s of the same shape after a contiguous
    one, each get the contiguous call's bits; forward and backward."""
    from numpy.lib.stride_tricks import as_strided

    rng = np.random.default_rng(19)
    x = rng.standard_normal((1, 37)).astype(F32)
    d = rng.standard_normal((1, 37)).astype(F32)
    y = logsoftmax.log_softmax(x)
    dx = logsoftmax.log_softmax_backward(d, y)
    odd = as_strided(np.empty(37, F32), (1, 37), (7 * 4, 4))
    assert odd.flags.c_contiguous and odd.strides != y.strides
    for call, want in ((lambda o: logsoftmax.log_softmax(x, out=o), y),
                       (lambda o: logsoftmax.log_softmax_backward(d, y, out=o), dx)):
        for o in (np.empty_like(x), odd):
            assert call(o) is o and np.array_equal(bits(o), bits(want))
    x2 = rng.standard_normal((6, 37)).astype(F32)
    d2 = rng.standard_normal((6, 37)).astype(F32)
    y2 = logsoftmax.log_softmax(x2)
    dx2 = logsoftmax.log_softmax_backward(d2, y2)
    for call, want in ((lambda o: logsoftmax.log_softmax(x2, out=o), y2),
                       (lambda o: logsoftmax.log_softmax_backward(d2, y2, out=o), dx2)):
        for o in (np.empty_like(x2), np.empty((37, 6), F32).T, np.empty((6, 74), F32)[:, ::2]):
            o[...] = 7
            assert call(o) is o and np.array_equal(bits(o), bits(want))
