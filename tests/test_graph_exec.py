"""Graph execution: every op kind and data type against the functional API
(bit-identical: same front door) and the float64 oracle; in-place; strided
layouts over flat buffers (no copies); buffer forms; every execute-time error;
a compiled partition shared by a thread pool."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

import logsoftmax
from conftest import (
    TOL_EPS,
    assert_bitwise_equal,
    assert_close_eps,
    ref_log_softmax,
    ref_log_softmax_backward,
    ref_softmax,
    ref_softmax_backward,
)
from logsoftmax import graph as g

ENG = g.Engine(g.EngineKind.cpu)
STRM = g.Stream(ENG)
DTYPES = [g.DataType.f32, g.DataType.bf16, g.DataType.f16]
FWD = {g.OpKind.LogSoftmax: ("log_softmax", ref_log_softmax),
       g.OpKind.SoftMax: ("softmax", ref_softmax)}
BWD = {g.OpKind.LogSoftmaxBackward: ("log_softmax_backward", ref_log_softmax_backward),
       g.OpKind.SoftMaxBackward: ("softmax_backward", ref_softmax_backward)}


def compiled(kind, shape, dt, strides=None, axis=None, out_strides=None):
    """Compile a one-op graph; returns (cp, input lts, output lt)."""
    n_in = 2 if kind in BWD else 1
    ins = [g.LogicalTensor(i, dt, shape, strides=strides) for i in range(n_in)]
    out = g.LogicalTensor(9, dt, shape, strides=out_strides) if out_strides else \
        g.LogicalTensor(9, dt, -1, g.LayoutType.any)
    op = g.Op(0, kind, "op").add_inputs(ins).add_output(
        g.LogicalTensor(9, dt, len(shape), g.LayoutType.any))
    if axis is not None:
        op.set_attr(g.OpAttr.axis, axis)
    gr = g.Graph(g.EngineKind.cpu)
    gr.add_op(op)
    gr.finalize()
    (p,) = gr.get_partitions()
    cp = p.compile(ins, [out], ENG)
    return cp, ins, cp.query_logical_tensor(9)


def inputs_for(kind, shape, npdt, axis, rng):
    """Logical-shape float64 inputs (rounded to npdt): src, or (diff_dst, dst)."""
    x = rng.uniform(-5, 5, shape).astype(npdt)
    if kind in FWD:
        return [x]
    dst = (ref_log_softmax if kind is g.OpKind.LogSoftmaxBackward else ref_softmax)(
        x, axis).astype(npdt)
    return [rng.uniform(-1, 1, shape).astype(npdt), dst]


def functional(kind, arrays, axis):
    name = (FWD | BWD)[kind][0]
    return getattr(logsoftmax, name)(*arrays, axis)


def oracle(kind, arrays, axis):
    return (FWD | BWD)[kind][1](*arrays, axis)


def strided_buffer(lt, values):
    """A flat buffer holding ``values`` in ``lt``'s layout (padding = 7)."""
    npdt = lt.get_data_type().numpy_dtype
    buf = np.full(lt.get_mem_size() // npdt.itemsize, 7, npdt)
    np.ndarray(lt.shape, npdt, buffer=buf, strides=lt.byte_strides())[...] = values
    return buf


def test_api_md_example(rng):
    """API.md section 5, verbatim apart from the buffers."""
    eng = g.Engine(g.EngineKind.cpu); strm = g.Stream(eng)  # noqa: E702
    dy = g.LogicalTensor(0, g.DataType.bf16, [8, 1000], g.LayoutType.strided)
    y = g.LogicalTensor(1, g.DataType.bf16, [8, 1000], g.LayoutType.strided)
    dx = g.LogicalTensor(2, g.DataType.bf16, [8, 1000], g.LayoutType.strided)
    op = g.Op(0, g.OpKind.LogSoftmaxBackward, "lsm_bwd")
    op.set_attr(g.OpAttr.axis, -1)
    op.add_input(dy); op.add_input(y); op.add_output(dx)  # noqa: E702
    gr = g.Graph(g.EngineKind.cpu); gr.add_op(op); gr.finalize()  # noqa: E702
    (p,) = gr.get_partitions()
    cp = p.compile([dy, y], [dx], eng)
    assert cp.get_inplace_ports() == [(0, 2)]
    buf_dy, buf_y = inputs_for(g.OpKind.LogSoftmaxBackward, (8, 1000), "bfloat16", -1,
                               rng)
    expected = logsoftmax.log_softmax_backward(buf_dy, buf_y, -1)
    original = buf_dy.copy()
    cp.execute(strm, [g.Tensor(dy, eng, buf_dy), g.Tensor(y, eng, buf_y)],
               [g.Tensor(dx, eng, buf_dy)])
    strm.wait()
    assert_bitwise_equal(buf_dy, expected)
    assert_close_eps(buf_dy, ref_log_softmax_backward(original, buf_y, -1),
                     buf_dy.dtype, TOL_EPS["log_softmax_backward"])


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("kind", list(FWD) + list(BWD), ids=lambda k: k.value)
def test_every_kind_and_dtype(kind, dt, rng):
    shape, axis = (6, 37, 5), 1
    cp, ins, out = compiled(kind, shape, dt, axis=axis)
    arrays = inputs_for(kind, shape, dt.numpy_dtype, axis, rng)
    res = np.full(shape, np.nan, dt.numpy_dtype)
    cp.execute(STRM, [g.Tensor(lt, ENG, a) for lt, a in zip(ins, arrays)],
               [g.Tensor(out, ENG, res)])
    STRM.wait()
    assert_bitwise_equal(res, functional(kind, arrays, axis))
    assert_close_eps(res, oracle(kind, arrays, axis), dt.numpy_dtype,
                     TOL_EPS[(FWD | BWD)[kind][0]])


@pytest.mark.parametrize("buffer_kind", ["ndarray", "flat", "bytearray"])
@pytest.mark.parametrize("kind", list(FWD) + list(BWD), ids=lambda k: k.value)
def test_in_place(kind, buffer_kind, rng):
    shape, axis, dt = (8, 1000), -1, g.DataType.bf16
    cp, ins, out = compiled(kind, shape, dt, axis=axis)
    (pair,) = cp.get_inplace_ports()
    assert pair == (0, 9)
    arrays = inputs_for(kind, shape, dt.numpy_dtype, axis, rng)
    expected = functional(kind, arrays, axis)
    if buffer_kind == "ndarray":
        bufs = [a.copy() for a in arrays]
    elif buffer_kind == "flat":
        bufs = [a.reshape(-1).copy() for a in arrays]
    else:
        bufs = [bytearray(a.tobytes()) for a in arrays]
    tensors = [g.Tensor(lt, ENG, b) for lt, b in zip(ins, bufs)]
    before = [t.numpy().copy() for t in tensors]
    cp.execute(STRM, tensors, [g.Tensor(out, ENG, bufs[0])])  # diff_src over diff_dst
    assert_bitwise_equal(tensors[0].numpy(), expected)  # diff_dst was overwritten
    assert not np.array_equal(tensors[0].numpy(), before[0])
    for t, b in zip(tensors[1:], before[1:]):
        assert_bitwise_equal(t.numpy(), b)  # dst untouched


LAYOUTS = [  # (shape, format tag, axis): the axis is often the unit-stride dim
    ((8, 384, 64), "acb", 1),
    ((8, 384, 64), "acb", 2),
    ((4, 16, 5, 7), "acdb", 1),  # NHWC, softmax over channels
    ((4, 16, 5, 7), "dcba", 0),
    ((6, 33), "ba", 1),
    ((6, 33), "ba", 0),
]


@pytest.mark.parametrize("shape, tag, axis", LAYOUTS)
@pytest.mark.parametrize("kind", list(FWD) + list(BWD), ids=lambda k: k.value)
def test_strided_layouts(kind, shape, tag, axis, rng):
    dt = g.DataType.f32
    strides = g.strides_from_tag(shape, tag)
    cp, ins, out = compiled(kind, shape, dt, strides=strides, axis=axis)
    assert out.get_strides() == list(strides)  # "any" output follows the input
    arrays = inputs_for(kind, shape, np.float32, axis, rng)
    bufs = [strided_buffer(lt, a) for lt, a in zip(ins, arrays)]
    res = np.zeros(out.get_mem_size() // 4, np.float32)
    cp.execute(STRM, [g.Tensor(lt, ENG, b) for lt, b in zip(ins, bufs)],
               [g.Tensor(out, ENG, res)])
    view = np.ndarray(shape, np.float32, buffer=res, strides=out.byte_strides())
    dense = [np.ascontiguousarray(a) for a in arrays]
    assert_bitwise_equal(view, functional(kind, dense, axis))
    # in place over the strided buffer
    cp.execute(STRM, [g.Tensor(lt, ENG, b) for lt, b in zip(ins, bufs)],
               [g.Tensor(out, ENG, bufs[0])])
    assert_bitwise_equal(np.ndarray(shape, np.float32, buffer=bufs[0],
                                    strides=out.byte_strides()), view)


def test_padded_layout_writes_only_the_tensor(rng):
    shape, strides = (4, 1000), (1024, 1)
    ins = [g.LogicalTensor(i, g.DataType.f16, shape, strides) for i in range(2)]
    out = g.LogicalTensor(2, g.DataType.f16, shape, strides)
    op = g.Op(0, g.OpKind.LogSoftmaxBackward, "b").add_inputs(ins).add_output(out)
    gr = g.Graph()
    gr.add_op(op)
    gr.finalize()
    cp = gr.get_partitions()[0].compile(ins, [out], ENG)
    arrays = inputs_for(g.OpKind.LogSoftmaxBackward, shape, np.float16, 1, rng)
    bufs = [strided_buffer(lt, a) for lt, a in zip(ins, arrays)]
    res = np.full(out.get_mem_size() // 2, 7, np.float16)
    cp.execute(STRM, [g.Tensor(lt, ENG, b) for lt, b in zip(ins, bufs)],
               [g.Tensor(out, ENG, res)])
    pad = np.ones(res.size, bool)
    pad[np.arange(4)[:, None] * 1024 + np.arange(1000)] = False
    assert np.all(res[pad] == 7)  # padding untouched
    assert_bitwise_equal(res[~pad].reshape(shape),
                         logsoftmax.log_softmax_backward(*arrays, 1))


def test_tensor_buffers_and_views(rng):
    lt = g.LogicalTensor(0, g.DataType.bf16, [4, 6], strides=[1, 4])
    t = g.Tensor(lt, ENG)  # allocated
    assert t.numpy().shape == (4, 6) and t.numpy().strides == (2, 8)
    assert t.get_engine() is ENG and t.get_logical_tensor() is lt
    raw = np.zeros(48, np.uint8)
    t = g.Tensor(lt, ENG, raw)
    t.numpy()[...] = 1
    assert np.shares_memory(t.numpy(), raw) and raw.view(np.uint16).all()
    # the logical shape, with the same strides
    arr = np.zeros((6, 4), lt.get_data_type().numpy_dtype).T
    assert g.Tensor(lt, ENG, arr).numpy() is arr
    t.set_data_handle(bytearray(48))
    assert t.numpy().flags.writeable
    with pytest.raises(g.InvalidArgumentError, match="holds 40 bytes, expected at "
                       "least 48"):
        t.set_data_handle(bytearray(40))
    assert len(t.get_data_handle()) == 48  # unchanged after a failed rebind


@pytest.mark.parametrize("buffer, match", [
    (np.zeros((4, 6), np.float32), "buffer has dtype float32, expected bfloat16"),
    (np.zeros((4, 6), "bfloat16"),
     r"buffer has byte strides \[12, 2\], expected \[2, 8\]"),
    (np.zeros(23, "bfloat16"), "buffer holds 46 bytes, expected at least 48"),
    (np.zeros(30, np.float16), "buffer is a float16 array of shape \\[30\\]"),
    (np.zeros(60, "bfloat16")[::2], r"buffer of shape \[30\] and strides \[4\] is "
     "not contiguous"),
    (object(), "buffer of type object is neither an ndarray nor a bytes-like"),
])
def test_tensor_rejects_bad_buffers(buffer, match):
    lt = g.LogicalTensor(3, g.DataType.bf16, [4, 6], strides=[1, 4])
    with pytest.raises(g.InvalidArgumentError,
                       match="could not create tensor for logical tensor 3: " + match):
        g.Tensor(lt, ENG, buffer)


# API.md section 5, last paragraph: which buffers back an [8, 100] f32 tensor
_LT = g.LogicalTensor(4, g.DataType.f32, [8, 100])
_ACCEPTED = {
    "logical shape": lambda: np.zeros((8, 100), np.float32),
    "flat 1-D, exact": lambda: np.zeros(800, np.float32),
    "flat 1-D, larger": lambda: np.zeros(801, np.float32),
    "bytearray": lambda: bytearray(3200),
    "bytes-like, larger": lambda: memoryview(bytearray(4000)),
    "raw uint8": lambda: np.zeros(3200, np.uint8),
    "raw int8, 2-D": lambda: np.zeros((32, 100), np.int8),
}
_REJECTED = {
    "transposed shape": (lambda: np.zeros((100, 8), np.float32),
                         r"buffer is a float32 array of shape \[100, 8\]"),
    "larger 2-D": (lambda: np.zeros((8, 101), np.float32),
                   r"buffer is a float32 array of shape \[8, 101\]"),
    "extra unit dim": (lambda: np.zeros((8, 100, 1), np.float32),
                       r"buffer is a float32 array of shape \[8, 100, 1\]"),
    "flat 2-D of the dtype": (lambda: np.zeros((1, 800), np.float32),
                              r"buffer is a float32 array of shape \[1, 800\]"),
    "flat, too small": (lambda: np.zeros(799, np.float32),
                        "buffer holds 3196 bytes, expected at least 3200"),
    "raw, too small": (lambda: np.zeros(3199, np.uint8),
                       "buffer holds 3199 bytes, expected at least 3200"),
    "bytes, too small": (lambda: bytearray(100),
                         "buffer holds 100 bytes, expected at least 3200"),
}


@pytest.mark.parametrize("make", _ACCEPTED.values(), ids=list(_ACCEPTED))
def test_buffer_contract_accepts(make):
    buf = make()
    view = g.Tensor(_LT, ENG, buf).numpy()
    assert view.shape == (8, 100) and view.dtype == np.float32
    view[...] = 1.5  # the caller's memory, no copy
    raw = np.frombuffer(buf, np.uint8) if not isinstance(buf, np.ndarray) else buf
    assert np.shares_memory(view, raw)


@pytest.mark.parametrize("make, match", _REJECTED.values(), ids=list(_REJECTED))
def test_buffer_contract_rejects(make, match):
    with pytest.raises(g.InvalidArgumentError,
                       match="could not create tensor for logical tensor 4: " + match):
        g.Tensor(_LT, ENG, make())


@pytest.mark.parametrize("shape", [(16, 8), (8, 17), (8, 16, 1)])
def test_execute_never_reinterprets_another_shape(shape):
    """A tensor of unknown dims is matched at execute: an ndarray of another
    shape is an error naming op, port and problem, never raw memory."""
    cp, ins, out, (tdy, ty) = _bwd(shape=(8, 16), dt=g.DataType.f32)
    loose = g.LogicalTensor(9, g.DataType.f32, -1, g.LayoutType.any)
    buf = np.full(shape, 7.0, np.float32)
    _, msg = _exec_error(cp, [tdy, ty], [g.Tensor(loose, ENG, buf)])
    what = f"buffer is a float32 array of shape {list(shape)}"
    assert f"output 0 (diff_src) {what}" in msg
    assert "never reinterpreted" in msg
    assert (buf == 7.0).all()  # nothing written
    loose_in = g.LogicalTensor(0, g.DataType.f32, -1, g.LayoutType.any)
    tdx = g.Tensor(out, ENG)
    _, msg = _exec_error(cp, [g.Tensor(loose_in, ENG, buf), ty], [tdx])
    assert f"input 0 (diff_dst) {what}" in msg


def _bwd(shape=(8, 16), dt=g.DataType.bf16):
    cp, ins, out = compiled(g.OpKind.LogSoftmaxBackward, shape, dt, axis=-1)
    npdt = dt.numpy_dtype
    tensors = [g.Tensor(lt, ENG, np.zeros(shape, npdt)) for lt in ins]
    return cp, ins, out, tensors


def _exec_error(cp, ins, outs):
    with pytest.raises(g.ExecuteError) as info:
        cp.execute(STRM, ins, outs)
    msg = str(info.value)
    assert msg.startswith("could not execute compiled partition 0: op 'op' (id 0, "
                          "LogSoftmaxBackward)")
    return info.value, msg


def test_execute_errors():
    cp, ins, out, (tdy, ty) = _bwd()
    tdx = g.Tensor(out, ENG, np.zeros((8, 16), "bfloat16"))
    _, msg = _exec_error(cp, [tdy], [tdx])
    assert "got 1 input tensor(s), expected 2 (input 0 (diff_dst) id 0, " \
           "input 1 (dst) id 1)" in msg
    _, msg = _exec_error(cp, [tdy, ty], [])
    assert "got 0 output tensor(s), expected 1 (output 0 (diff_src) id 9)" in msg
    f16 = g.Tensor(g.LogicalTensor(1, g.DataType.f16, [8, 16]), ENG,
                   np.zeros((8, 16), np.float16))
    err, msg = _exec_error(cp, [tdy, f16], [tdx])
    assert msg.endswith("input 1 (dst) tensor is f16, expected bf16")
    assert (err.port, err.role) == ("input 1", "dst")
    wrong = g.Tensor(g.LogicalTensor(1, g.DataType.bf16, [8, 15]), ENG,
                     np.zeros((8, 15), "bfloat16"))
    _, msg = _exec_error(cp, [tdy, wrong], [tdx])
    assert "input 1 (dst) tensor has shape [8, 15], expected [8, 16]" in msg
    tr = g.Tensor(g.LogicalTensor(0, g.DataType.bf16, [8, 16], [1, 8]), ENG)
    _, msg = _exec_error(cp, [tr, ty], [tdx])
    assert "input 0 (diff_dst) tensor has strides [1, 8], expected [16, 1]" in msg
    other = g.Tensor(g.LogicalTensor(5, g.DataType.bf16, [8, 16]), ENG)
    _, msg = _exec_error(cp, [tdy, other], [tdx])
    assert "got input tensors for logical tensors [0, 5], expected [0, 1]" in msg
    _, msg = _exec_error(cp, [tdy, ty], [g.Tensor(out, ENG, bytes(256))])
    assert "output 0 (diff_src) tensor's buffer is read-only" in msg
    _, msg = _exec_error(cp, [tdy, ty], ["dx"])
    assert "got output 'dx'; expected a Tensor" in msg
    # an output over part of an input: the front door's overlap check
    buf = np.zeros(8 * 16 + 1, "bfloat16")
    a = g.Tensor(ins[0], ENG, buf[:-1])
    b = g.Tensor(out, ENG, buf[1:])
    _, msg = _exec_error(cp, [a, ty], [b])
    assert "rejected by the front door" in msg and "partially overlaps diff_dst" in msg
    with pytest.raises(g.ExecuteError, match="expected a Stream"):
        cp.execute(None, [tdy, ty], [tdx])


def test_tensors_with_unknown_dims_are_checked_at_execute(rng):
    cp, ins, out, (tdy, ty) = _bwd(shape=(8, 16))
    loose = g.LogicalTensor(9, g.DataType.bf16, -1, g.LayoutType.any)
    ok = g.Tensor(loose, ENG, np.zeros((8, 16), "bfloat16"))
    cp.execute(STRM, [tdy, ty], [ok])  # buffer matched against compiled output
    small = g.Tensor(loose, ENG, np.zeros(100, "bfloat16"))
    _, msg = _exec_error(cp, [tdy, ty], [small])
    assert "output 0 (diff_src) buffer holds 200 bytes, expected at least 256" in msg
    wrong = g.Tensor(loose, ENG, np.zeros((8, 16), np.float32))
    _, msg = _exec_error(cp, [tdy, ty], [wrong])
    assert "output 0 (diff_src) buffer has dtype float32, expected bfloat16" in msg


def test_thread_pool_execution(rng):
    shape, axis = (64, 333), 1
    cp, ins, out = compiled(g.OpKind.LogSoftmaxBackward, shape, g.DataType.f32,
                            axis=axis)
    jobs = [inputs_for(g.OpKind.LogSoftmaxBackward, shape, np.float32, axis, rng)
            for _ in range(16)]

    def run(arrays):
        res = np.empty(shape, np.float32)
        for _ in range(5):
            cp.execute(STRM, [g.Tensor(lt, ENG, a) for lt, a in zip(ins, arrays)],
                       [g.Tensor(out, ENG, res)])
        return res

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, jobs))
    for arrays, res in zip(jobs, results):
        assert_bitwise_equal(res, logsoftmax.log_softmax_backward(*arrays, axis))


def test_execution_follows_the_selected_backend(rng):
    shape = (4, 50)
    cp, ins, out = compiled(g.OpKind.LogSoftmax, shape, g.DataType.f32, axis=-1)
    (x,) = inputs_for(g.OpKind.LogSoftmax, shape, np.float32, -1, rng)
    res = np.empty(shape, np.float32)
    with logsoftmax.use_backend("reference"):
        cp.execute(STRM, [g.Tensor(ins[0], ENG, x)], [g.Tensor(out, ENG, res)])
        assert_bitwise_equal(res, logsoftmax.log_softmax(x))
