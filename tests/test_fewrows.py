"""The few-row column kernels (:mod:`logsoftmax.backends.cpu.fewrows`):
columns of up to 16 rows (NCHW ``axis=1`` with a few channels), a strip of
16 columns at a time from L1. They must give the column tiles' bits (so
the row kernel's, on a transposed copy) for any split of their tiles
between threads, in place or not, with special values and partial strips,
on the accurate and the fast path."""

from __future__ import annotations

import ml_dtypes
import numba
import numpy as np
import pytest

from logsoftmax.backends import Op, get_backend
from logsoftmax.backends.cpu import columns, fewrows, segment
from logsoftmax.backends.cpu.layout import layout

from cases import column_grad_inputs, line_out as _line_out, special_columns as _special  # noqa: E402
from conftest import count_kernel_calls  # noqa: E402

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
CPU = get_backend("cpu")
OPS = (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX)))  # ints, as the front door passes them


def bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.itemsize == 2 else np.uint32)


def flat(a) -> np.ndarray:
    """The kernels' flat storage view (16-bit data as integers)."""
    a = a.reshape(-1)
    if a.dtype == BF16:
        return a.view(np.uint16)
    if a.dtype == F16:
        return a.view(np.int16)
    return a


def _cuts(total):
    return sorted({0, 1, total // 2, total - 1, total} - {-1})


#: (rows, columns of a plane) the kernels take: few rows; up to 48 (the
#: lanes of float64 terms wrap past 32); up to a chunk in narrow planes
#: (100: every kind of lane wraps; 2000: float32 on the fast path)
_SHAPES = [(n, ni) for n in (2, 3, 7, 16, 33) for ni in (6, 64, 83, 200)] + [(100, 6), (100, 40), (2000, 6)]


@pytest.mark.parametrize("n, ni", _SHAPES)
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["f32", "bf16", "f16"])
def test_few_rows_give_the_tiles_bits(n, ni, dtype):
    """Forward, log_softmax and softmax: :func:`.columns.forward_tiles`'
    bits for every split of the tiles in two and in place, with special
    columns; float32 on the accurate path, 16-bit data on the fast one;
    blocks (``BLOCK`` strips) cut mid-tile (200 columns) and partial strips."""
    rng = np.random.default_rng(n * 1000 + ni)
    with np.errstate(over="ignore"):  # 3e38 is inf in float16
        x = _special((rng.standard_normal((3, n, ni)) * 4).astype(F32)).astype(dtype)
    accurate = np.bool_(dtype == F32)
    lay = layout(x.shape, [x.strides, x.strides], [x.itemsize] * 2, 1)
    assert lay.inner and fewrows.takes_few_rows(lay.g, False)
    g = lay.g
    J = 64 if ni == 200 else columns.tile_width_for(n, ni, False, 2)  # 200: 4 tiles a plane
    tiles_per_plane = -(-ni // J)
    for _name, op in OPS:
        ref = np.empty_like(x)
        columns.forward_tiles(flat(x), flat(ref), g, op, accurate, J, 0, -1)
        for cut in _cuts(3 * tiles_per_plane):
            o = np.full_like(x, np.nan)
            fewrows.forward_few(flat(x), flat(o), g, op, accurate, J, 0, cut)
            fewrows.forward_few(flat(x), flat(o), g, op, accurate, J, cut, -1)
            assert np.array_equal(bits(o), bits(ref)), (op, cut)
        z = x.copy()
        fewrows.forward_few(flat(z), flat(z), g, op, accurate, J, 0, -1)
        assert np.array_equal(bits(z), bits(ref)), op


@pytest.mark.parametrize("n, ni", [(n, ni) for n in (2, 5, 16, 33) for ni in (6, 83, 200)] + [(100, 6), (2000, 6)])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
def test_backward_few_rows_give_the_tiles_bits(n, ni, dtype):
    """Backward, log_softmax and softmax: :func:`.columns.backward_tiles`'
    bits for every split of the tiles in two and in place into either
    input, with NaN, inf, huge and ``-0.0`` gradients (the lanes start at
    ``+0.0``: a column of ``-0.0`` sums to ``+0.0``); float32 on the
    accurate path (on the fast one past ``SHORT_BACKWARD`` rows: 100),
    bfloat16 on the fast one."""
    x, d = column_grad_inputs(n * 7 + ni, (3, n, ni))
    d[:, :, 4] = -0.0
    d = d.astype(dtype)
    accurate = np.bool_(dtype == F32 and n <= segment.SHORT_BACKWARD)
    for name, op in OPS:
        y = getattr(CPU, name)(x, 1, None, np.dtype(F32)).astype(dtype)
        y[0, :, 4] = -np.inf if name == "log_softmax" else 0.0
        lay = layout(x.shape, [d.strides, y.strides, d.strides], [d.itemsize] * 3, 1)
        assert lay.inner and fewrows.takes_backward_few_rows(lay.g)
        g = lay.g
        J = 64 if ni == 200 else columns.tile_width_for(n, ni, True, 2, 3)
        ref = np.empty_like(d)
        columns.backward_tiles(flat(d), flat(y), flat(ref), g, op, accurate, J, 0, -1)
        for cut in _cuts(3 * -(-ni // J)):
            o = np.full_like(d, np.nan)
            fewrows.backward_few(flat(d), flat(y), flat(o), g, op, accurate, J, 0, cut)
            fewrows.backward_few(flat(d), flat(y), flat(o), g, op, accurate, J, cut, -1)
            assert np.array_equal(bits(o), bits(ref)), (name, cut)
        for into in ("diff_dst", "dst"):
            d2, y2 = d.copy(), y.copy()
            o = d2 if into == "diff_dst" else y2
            fewrows.backward_few(flat(d2), flat(y2), flat(o), g, op, accurate, J, 0, -1)
            assert np.array_equal(bits(o), bits(ref)), (name, into)


def test_which_columns_take_few_rows():
    """The rule, its boundaries checked (not its constants): forward, up to
    16 rows, or 48 where the strips do not take the call, or a chunk (4096)
    in planes of fewer than 64 columns; backward, up to 48 rows or a chunk
    in such planes; unit column strides; any dtype."""

    def geom(shape, axis=1, itemsize=4, operands=2, column_stride=1):
        st = [int(np.prod(shape[i + 1 :])) * itemsize * (column_stride if i == len(shape) - 1 else 1)
              for i in range(len(shape))]
        if column_stride != 1:  # every other element of a wider last axis
            st = [s * column_stride for s in st[:-1]] + [st[-1]]
        return layout(shape, [tuple(st)] * operands, [itemsize] * operands, axis).g

    take = fewrows.takes_few_rows
    for strips_take in (False, True):
        assert take(geom((16, 3, 32, 32)), strips_take)
        assert take(geom((8, 16, 64, 64), itemsize=2), strips_take)
        assert not take(geom((8, 3, 64, 64), column_stride=2), strips_take)
    assert take(geom((8, 17, 64, 64)), False) and not take(geom((8, 17, 64, 64)), True)
    assert take(geom((8, 48, 8, 8)), False) and not take(geom((8, 49, 8, 8)), False)
    assert take(geom((8, 1000, 63)), False) and not take(geom((8, 1000, 64)), False)
    assert take(geom((2, 4096, 8)), False) and not take(geom((2, 4097, 8)), False)
    grad = fewrows.takes_backward_few_rows
    assert grad(geom((16, 48, 8, 8), operands=3))
    assert not grad(geom((16, 49, 8, 8), operands=3))
    assert grad(geom((8, 1000, 63), operands=3)) and not grad(geom((8, 1000, 64), operands=3))
    assert grad(geom((2, 4096, 8), operands=3)) and not grad(geom((2, 4097, 8), operands=3))
    assert not grad(geom((8, 3, 64, 64), operands=3, column_stride=2))


def _rows_reference(name, x, dtype):
    moved = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    return np.moveaxis(getattr(CPU, name)(moved, moved.ndim - 1, None, np.dtype(dtype)), -1, 1)


@pytest.mark.parametrize(
    "shape, dtype",
    [((16, 3, 32, 32), F32),  # small: the serial kernel's direct call
     ((8, 3, 64, 64), F32),  # 2 threads
     ((48, 3, 256, 256), F32),  # 36 MiB out: streaming stores
     ((4, 10, 16, 16), BF16),
     ((24, 2, 256, 256), F16),  # 6 MiB of float16: ordinary stores
     ((8, 21, 32, 32), BF16),  # more rows: where the strips do not go
     ((64, 100, 5, 8), F32)],  # a plane of 40 columns: any number of rows
    ids=["small", "parallel", "streamed", "bf16", "f16", "bf16-21", "narrow"],
)
def test_the_front_door_takes_few_rows(monkeypatch, shape, dtype):
    """Few-channel NCHW ``axis=1`` through the public call (counted):
    allocating, ``out=`` 4 items past a line, in place, on 1 and 2 threads,
    forward and backward; the row kernel's bits on the same values."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(F32).astype(dtype)
    x[0, :, 0, :7] = -np.inf
    x[1, 1, 2, 2] = np.nan
    d = rng.standard_normal(shape).astype(F32).astype(dtype)
    # every kernel compiled before the counting wrappers replace the globals
    for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
        numba.set_num_threads(t)
        CPU.log_softmax(x, 1, None, np.dtype(dtype))
        CPU.log_softmax_backward(d, x, 1, None, np.dtype(dtype))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    calls = []
    count_kernel_calls(monkeypatch, calls, [(fewrows, "forward_few"), (fewrows, "backward_few")])
    threads = numba.get_num_threads()
    for name in ("log_softmax", "softmax"):
        ref = bits(_rows_reference(name, x, dtype))
        y = np.ascontiguousarray(_rows_reference(name, x, dtype))
        moved = [np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (d, y)]
        bwd = "log_softmax_backward" if name == "log_softmax" else "softmax_backward"
        ref_b = bits(np.moveaxis(getattr(CPU, bwd)(*moved, 3, None, np.dtype(dtype)), -1, 1))
        for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(t)
            try:
                calls.clear()
                assert np.array_equal(bits(getattr(CPU, name)(x, 1, None, np.dtype(dtype))), ref)
                o = _line_out(shape, 4, dtype)
                getattr(CPU, name)(x, 1, o, np.dtype(dtype))
                assert np.array_equal(bits(o), ref)
                z = x.copy()
                getattr(CPU, name)(z, 1, z, np.dtype(dtype))
                assert np.array_equal(bits(z), ref)
                assert np.array_equal(bits(getattr(CPU, bwd)(d, y, 1, None, np.dtype(dtype))), ref_b)
                o = _line_out(shape, 4, dtype)
                getattr(CPU, bwd)(d, y, 1, o, np.dtype(dtype))
                assert np.array_equal(bits(o), ref_b)
                assert {c.split(" ")[0] for c in calls} == {"forward_few", "backward_few"}, (name, t, calls)
            finally:
                numba.set_num_threads(threads)
