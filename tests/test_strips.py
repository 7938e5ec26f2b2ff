"""The strip kernel (:mod:`logsoftmax.backends.cpu.strips`): short float32
columns 16 at a time, three strips' passes in one loop. It must give the
bits of the row kernel on the same values (a transposed copy), as every
column kernel does, for any split of its strips between threads, with or
without streaming stores, with special values and partial strips."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from logsoftmax.backends import Op, get_backend
from logsoftmax.backends.cpu import columns, strips
from logsoftmax.backends.cpu.layout import layout

from cases import column_grad_inputs, line_out as _line_out, special_columns as _special  # noqa: E402

F32 = np.float32
CPU = get_backend("cpu")


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _same(a, b):
    """The same bits, except that a NaN may have either sign: which NaN an
    operation passes on depends on its operands' order in the instruction
    the compiler picked (the tiles and the rows already differ so)."""
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(bits(a)[~nan], bits(b)[~nan])


def _rows_reference(name, x):
    """The row kernel on the same values: axis 1 moved last, contiguous."""
    moved = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    return np.moveaxis(getattr(CPU, name)(moved, moved.ndim - 1, None, np.dtype(F32)), -1, 1)


@pytest.mark.parametrize("n", [2, 5, 16, 17, 64, 100, 256, 384, 512])
@pytest.mark.parametrize("ni", [64, 83, 160])
def test_strips_give_the_row_kernels_bits(n, ni):
    """Every split of the strips in two (as two threads take them, a plane
    cut mid-way too), ordinary stores (h = 0) and streaming ones from any
    line offset (h = 0, 4, 12 columns of head strip), log_softmax and
    softmax: the column tiles' bits, and the row kernel's values (the
    tiles and the rows differ in the sign of a NaN where a column is -inf
    but for a NaN; the strips take the tiles')."""
    rng = np.random.default_rng(n * 1000 + ni)
    x = _special((rng.standard_normal((3, n, ni)) * 4).astype(F32))
    for name, op in (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX))):
        tiles = np.empty_like(x)
        g = layout(x.shape, [x.strides, x.strides], [4, 4], 1).g
        columns.forward_tiles(x.reshape(-1), tiles.reshape(-1), g, op, np.bool_(True), 1024, 0, -1)
        assert np.array_equal(tiles, _rows_reference(name, x), equal_nan=True)
        ref = bits(tiles)
        for head in (0, 4, 12):
            o = _line_out(x.shape, head)
            lay = layout(x.shape, [x.strides, o.strides], [4, 4], 1)
            assert lay.inner
            g = lay.g
            for stream in sorted({False, ni % 16 == 0}):  # streams: rows on a line offset
                h = (16 - head) % 16 if stream else 0
                per = (1 if h else 0) + -(-(ni - h) // 16)
                total = 3 * per
                for cut in sorted({0, 1, per // 2, per + 1, total - 2, total}):
                    o[...] = np.nan
                    acc = np.empty(strips.SCRATCH)
                    strips.forward_strips(x.reshape(-1), o.reshape(-1), g, op, 0, cut, h, stream, acc)
                    strips.forward_strips(x.reshape(-1), o.reshape(-1), g, op, cut, total, h, stream, acc)
                    assert np.array_equal(bits(o), ref), (name, head, stream, cut)


def test_strip_plan_moves_strips_onto_lines():
    """A streamed output 16 bytes past a line (numpy's): a head strip of 12
    columns, then strips that start on lines; a strided output streams not."""
    x = np.zeros((128, 64, 64, 64), F32)  # 128 MiB out: streamed
    o = _line_out(x.shape, 4)
    g = layout(x.shape, [x.strides, o.strides], [4, 4], 1).g
    count, h, stream = strips.strip_plan(o.reshape(-1), g, 1)
    assert stream and h == 12 and count == 128 * (1 + -(-(4096 - 12) // 16))
    assert columns.rows_on_lines(g, 1, 4)
    padded = np.empty((128, 64, 4100), F32)[:, :, 2:4098]
    g2 = layout((128, 64, 4096), [(64 * 4096 * 4, 4096 * 4, 4), padded.strides], [4, 4], 1).g
    assert not columns.rows_on_lines(g2, 1, 4)


def test_which_columns_take_strips():
    """The rule (module doc): float32 accurate forwards of up to 512 rows
    spanning at most 2 MiB, streamed or small enough, on every CPU."""

    def takes(shape, itemsize=4, accurate=True):
        st = tuple(int(np.prod(shape[i + 1 :])) * itemsize for i in range(len(shape)))
        g = layout(shape, [st, st], [itemsize, itemsize], 1).g
        return bool(strips.takes_strips(g, itemsize, itemsize, np.bool_(accurate)))

    assert takes((64, 64, 56, 56))  # nchw56: 64 rows span 0.8 MB
    assert takes((64, 128, 56, 56))
    assert takes((64, 32, 112, 112))  # 1.6 MB
    assert not takes((64, 64, 112, 112))  # p00: 3.2 MB, the tiles
    assert takes((128, 384, 384))  # 384 rows, streamed
    assert takes((8, 64, 56, 56))  # 6.4 MB out: ordinary stores
    assert not takes((12, 300, 30, 30))  # ordinary stores, over 256 rows
    assert not takes((32, 64, 56, 56))  # 25.7 MB: neither streamed nor under 16 MiB
    assert not takes((64, 1024, 8, 8))  # over 512 rows
    assert not takes((64, 64, 56, 56), 2, False)  # the 16-bit fast path
    assert not takes((4096, 64, 7, 7))  # planes of 49 columns


def test_the_front_door_takes_strips(monkeypatch):
    """nchw56 (a streamed output) and 4x100x20x20 (not) through the public
    call (the strips, counted): allocating, ``out=`` 16 bytes
    past a line, in place, on 1 and 2 threads; the row kernel's bits."""
    # compiled before the counting wrappers replace the module's globals,
    # which forward_strips_parallel would otherwise try to compile against
    CPU.log_softmax(np.zeros((4, 100, 20, 20), F32), 1, None, np.dtype(F32))
    calls = []
    par, ser = strips.forward_strips_parallel, strips.forward_strips
    monkeypatch.setattr(strips, "forward_strips_parallel", lambda *a: (calls.append("p"), par(*a))[1])
    monkeypatch.setattr(strips, "forward_strips", lambda *a: (calls.append("s"), ser(*a))[1])
    rng = np.random.default_rng(5)
    threads = numba.get_num_threads()
    for shape, name in [((64, 64, 56, 56), "log_softmax"), ((64, 64, 56, 56), "softmax"),
                        ((4, 100, 20, 20), "log_softmax")]:  # the last: ordinary stores
        calls.clear()
        x = (rng.standard_normal(shape) * 3).astype(F32)
        x[0, :, 0, :7] = -np.inf
        x[1, 3, 2, 2] = np.nan
        ref = bits(_rows_reference(name, x))
        for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(t)
            try:
                assert np.array_equal(bits(getattr(CPU, name)(x, 1, None, np.dtype(F32))), ref)
                o = _line_out(x.shape, 4)
                getattr(CPU, name)(x, 1, o, np.dtype(F32))
                assert np.array_equal(bits(o), ref)
                z = x.copy()
                getattr(CPU, name)(z, 1, z, np.dtype(F32))
                assert np.array_equal(bits(z), ref)
            finally:
                numba.set_num_threads(threads)
        assert calls, shape


@pytest.mark.parametrize("n", [2, 17, 40, 64, 300])
@pytest.mark.parametrize("ni", [64, 83, 160])
def test_backward_strips_give_the_tiles_bits(n, ni):
    """The backward's strips (``strips.backward_strips``): the column
    tiles' bits (NaN of either sign: :func:`_same`) for every split of the strips in two, ordinary and
    streaming stores from any line offset, the accurate (up to
    ``SHORT_BACKWARD`` rows) and the fast path, log_softmax and softmax,
    with special values in ``diff_dst`` and ``dst``."""
    from logsoftmax.backends.cpu import segment

    x, d = column_grad_inputs(n * 7 + ni, (3, n, ni))
    accurate = np.bool_(n <= segment.SHORT_BACKWARD)
    for name, op in (("log_softmax", int(Op.LOG_SOFTMAX)), ("softmax", int(Op.SOFTMAX))):
        y = getattr(CPU, name)(x, 1, None, np.dtype(F32))
        y[0, :, 4] = -np.inf if name == "log_softmax" else 0.0
        tiles = np.empty_like(x)
        g = layout(x.shape, [d.strides, y.strides, tiles.strides], [4, 4, 4], 1).g
        columns.backward_tiles(d.reshape(-1), y.reshape(-1), tiles.reshape(-1), g, op, accurate, 1024, 0, -1)
        for head in (0, 4, 12):
            o = _line_out(x.shape, head)
            g = layout(x.shape, [d.strides, y.strides, o.strides], [4, 4, 4], 1).g
            for stream in sorted({False, ni % 16 == 0}):
                h = (16 - head) % 16 if stream else 0
                per = (1 if h else 0) + -(-(ni - h) // 16)
                total = 3 * per
                for cut in sorted({0, 1, per // 2, per + 1, total - 1, total}):
                    o[...] = np.nan
                    acc = np.empty(2 * strips.SCRATCH)
                    args = (d.reshape(-1), y.reshape(-1), o.reshape(-1), g, op, accurate)
                    strips.backward_strips(*args, 0, cut, h, stream, acc)
                    strips.backward_strips(*args, cut, total, h, stream, acc)
                    assert _same(o, tiles), (name, head, stream, cut)


def test_the_backward_front_door_takes_strips(monkeypatch):
    """nchw56's backward through the public call (the strips,
    counted): ``out=`` 16 bytes past a line and allocating, on 1 and 2
    threads; the row kernel's bits on the same values; a small output (6.4
    MB, not streamed) keeps the tiles."""
    small = np.zeros((8, 64, 56, 56), F32)
    big = np.zeros((64, 64, 56, 56), F32)
    threads = numba.get_num_threads()
    # both kernels compiled before the wrappers replace the module's globals
    # (backward_strips_parallel would otherwise compile against a lambda)
    CPU.log_softmax_backward(big, big, 1, None, np.dtype(F32))
    acc = np.empty(2 * strips.SCRATCH)
    g = layout(big.shape, [big.strides] * 3, [4, 4, 4], 1).g
    strips.backward_strips(*(big.reshape(-1),) * 3, g, int(Op.LOG_SOFTMAX), np.bool_(False), 0, 0, 0, False, acc)
    calls = []
    par, ser = strips.backward_strips_parallel, strips.backward_strips
    monkeypatch.setattr(strips, "backward_strips_parallel", lambda *a: (calls.append("p"), par(*a))[1])
    monkeypatch.setattr(strips, "backward_strips", lambda *a: (calls.append("s"), ser(*a))[1])
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((64, 64, 56, 56)) * 3).astype(F32)
    d = rng.standard_normal(x.shape).astype(F32)
    y = CPU.log_softmax(x, 1, None, np.dtype(F32))
    moved = [np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (d, y)]
    ref = bits(np.moveaxis(CPU.log_softmax_backward(*moved, 3, None, np.dtype(F32)), -1, 1))
    for t in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
        numba.set_num_threads(t)
        try:
            calls.clear()
            assert np.array_equal(bits(CPU.log_softmax_backward(d, y, 1, None, np.dtype(F32))), ref)
            o = _line_out(x.shape, 4)
            CPU.log_softmax_backward(d, y, 1, o, np.dtype(F32))
            assert np.array_equal(bits(o), ref)
            assert calls, t
        finally:
            numba.set_num_threads(threads)
    calls.clear()
    CPU.log_softmax_backward(small, small, 1, None, np.dtype(F32))
    assert not calls
