"""Graph API (API.md section 5): object model, partitions, and every
validation error at the stage that raises it (add_op, finalize, compile),
with messages that name the op, the port and the problem."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import logsoftmax
from logsoftmax import graph as g

ENG = g.Engine(g.EngineKind.cpu)
KINDS = {
    g.OpKind.LogSoftmax: (("src",), ("dst",)),
    g.OpKind.SoftMax: (("src",), ("dst",)),
    g.OpKind.LogSoftmaxBackward: (("diff_dst", "dst"), ("diff_src",)),
    g.OpKind.SoftMaxBackward: (("diff_dst", "dst"), ("diff_src",)),
}


def lt(tid, shape=(8, 1000), dt=g.DataType.f32, *args, **kw):
    dims = shape if isinstance(shape, int) else list(shape)
    return g.LogicalTensor(tid, dt, dims, *args, **kw)


def bwd_op(dy, y, dx, name="lsm_bwd", oid=0, kind=g.OpKind.LogSoftmaxBackward):
    op = g.Op(oid, kind, name)
    op.add_input(dy).add_input(y).add_output(dx)
    return op


def one_partition(op):
    gr = g.Graph(g.EngineKind.cpu)
    gr.add_op(op)
    gr.finalize()
    (p,) = gr.get_partitions()
    return p


# -- enums and the object model ----------------------------------------------------
def test_enums_follow_onednn():
    assert {"f32", "bf16", "f16", "undef"} <= set(g.DataType.__members__)
    assert g.DataType.bf16.numpy_dtype == np.dtype(ml_dtypes.bfloat16)
    assert g.DataType.f16.numpy_dtype == np.dtype(np.float16)
    assert g.DataType.undef.numpy_dtype is None
    assert g.DataType.from_numpy(np.float32) is g.DataType.f32
    with pytest.raises(ValueError, match="float64"):
        g.DataType.from_numpy(np.float64)
    for name in ("MatMul", "Add", "ReLU", "Wildcard", "LogSoftmax",
                 "LogSoftmaxBackward", "SoftMax", "SoftMaxBackward", "Convolution"):
        assert g.OpKind[name].value == name
    assert g.OpAttr.axis.type is g.AttrType.s64
    assert g.OpAttr.mode.type is g.AttrType.string
    assert g.OpAttr.alpha.type is g.AttrType.f32
    assert set(g.LayoutType.__members__) == {"undef", "any", "strided", "opaque"}
    assert {"undef", "variable", "constant"} <= set(g.PropertyType.__members__)


def test_engine_and_stream():
    eng = g.Engine(g.EngineKind.cpu)
    assert eng.get_kind() is g.EngineKind.cpu
    s = g.Stream(eng)
    assert s.get_engine() is eng and s.wait() is None
    with pytest.raises(g.GraphError, match="gpu.*cpu only"):
        g.Engine(g.EngineKind.gpu)
    with pytest.raises(g.GraphError, match="index 1"):
        g.Engine(g.EngineKind.cpu, 1)
    with pytest.raises(g.GraphError, match="engine must be an Engine"):
        g.Stream("cpu")


def test_logical_tensor_overloads():
    a = g.LogicalTensor(0, g.DataType.bf16, [8, 1000], g.LayoutType.strided)
    assert a.get_strides() == [1000, 1] and a.get_dims() == [8, 1000]
    assert a.get_mem_size() == 8 * 1000 * 2
    b = g.LogicalTensor(1, g.DataType.f32, [8, 384, 1024], [393216, 1, 384])
    c = g.LogicalTensor(1, g.DataType.f32, [8, 384, 1024], strides=[393216, 1, 384])
    assert b == c and b.is_equal(c) and hash(b) == hash(c)
    assert b.get_layout_type() is g.LayoutType.strided
    assert b.get_mem_size() == 8 * 384 * 1024 * 4
    # padded rows: the span, not the element count
    d = g.LogicalTensor(2, "f16", [4, 1000], strides=[1024, 1])
    assert d.get_mem_size() == (3 * 1024 + 1000) * 2
    u = g.LogicalTensor(3, g.DataType.f32, -1, g.LayoutType.strided)
    assert u.shape is None and not u.is_complete()
    with pytest.raises(g.GraphError, match="rank is unknown"):
        u.get_dims()
    v = g.LogicalTensor(4, g.DataType.f32, [-1, 1000])
    assert v.get_strides() == [-1, -1] and not v.is_complete()
    w = g.LogicalTensor(5, g.DataType.f32, 3, g.LayoutType.any)
    assert w.get_dims() == [-1, -1, -1]
    with pytest.raises(g.GraphError, match="layout is any"):
        w.get_strides()
    assert g.LogicalTensor(6, np.float16, [2]).get_data_type() is g.DataType.f16
    z = g.LogicalTensor(7, g.DataType.f32, [0, 5])
    assert z.get_mem_size() == 0


@pytest.mark.parametrize(
    "args, kw, match",
    [
        ((-1, g.DataType.f32, [2]), {}, "id -1 is negative"),
        ((True, g.DataType.f32, [2]), {}, "not an integer"),
        ((0, "f99", [2]), {}, "data type 'f99'"),
        ((0, g.DataType.f32, [2, -5]), {}, "dim -5 is negative"),
        ((0, g.DataType.f32, [2, 2.5]), {}, "dim 2.5 is not an integer"),
        ((0, g.DataType.f32, [2, 3], [1]), {}, "1 strides for 2 dims"),
        ((0, g.DataType.f32, [2, 3], g.LayoutType.any), {"strides": [3, 1]},
         "explicit strides need LayoutType.strided"),
        ((0, g.DataType.f32, [2, 3], [3, -2]), {}, "stride -2 is negative"),
        ((0, g.DataType.f32, -2), {}, "ndims -2"),
    ],
)
def test_logical_tensor_errors(args, kw, match):
    with pytest.raises(g.InvalidArgumentError, match=match):
        g.LogicalTensor(*args, **kw)


def test_strides_from_tag():
    assert g.strides_from_tag([8, 384, 1024], "acb") == (393216, 1, 384)
    assert g.strides_from_tag([2, 3, 4, 5], "acdb") == (60, 1, 15, 3)
    assert g.strides_from_tag([2, 3], "ab") == g.dense_strides([2, 3]) == (3, 1)
    with pytest.raises(g.InvalidArgumentError, match="'abd'"):
        g.strides_from_tag([2, 3, 4], "abd")


def test_op_overloads_and_attrs():
    dy, y, dx = lt(0), lt(1), lt(2)
    op = g.Op(3, g.OpKind.LogSoftmaxBackward, [dy, y], [dx], "bwd")
    assert op.get_id() == 3 and op.get_name() == "bwd"
    assert op.get_input_logical_tensors() == [dy, y]
    assert op.get_output_logical_tensors() == [dx]
    assert op.set_attr(g.OpAttr.axis, np.int64(1)) is op
    assert op.get_attr("axis") == 1 and type(op.get_attr("axis")) is int
    assert g.Op(0, "ReLU").get_kind() is g.OpKind.ReLU
    with pytest.raises(g.InvalidArgumentError, match="kind 'Relu'"):
        g.Op(0, "Relu")
    with pytest.raises(g.InvalidArgumentError, match="expected a LogicalTensor"):
        g.Op(0, g.OpKind.LogSoftmax).add_input(np.zeros(3))


# -- add_op ----------------------------------------------------------------------------
def _add(op):
    gr = g.Graph(g.EngineKind.cpu)
    gr.add_op(op)
    return gr


def _build_error(op):
    with pytest.raises(g.GraphBuildError) as info:
        _add(op)
    msg = str(info.value)
    assert msg.startswith(f"could not add op {op.get_name()!r} (id {op.get_id()}, ")
    return info.value, msg


@pytest.mark.parametrize("kind", list(KINDS))
def test_add_op_port_counts(kind):
    ins, outs = KINDS[kind]
    op = g.Op(0, kind, "x")
    op.add_inputs([lt(i) for i in range(len(ins) + 1)]).add_output(lt(9))
    _, msg = _build_error(op)
    want = f"expected {len(ins)} ({', '.join(ins)})"
    assert f"it has {len(ins) + 1} input(s), {want}" in msg
    op = g.Op(0, kind, "x").add_inputs([lt(i) for i in range(len(ins))])
    _, msg = _build_error(op)
    assert f"it has 0 output(s), expected 1 ({outs[0]})" in msg


def test_add_op_mixed_data_types():
    bf, f16 = g.DataType.bf16, g.DataType.f16
    err, msg = _build_error(bwd_op(lt(0, dt=bf), lt(1, dt=f16), lt(2, dt=bf)))
    assert "input 1 (dst) (logical tensor 1) is f16, expected bf16" in msg
    assert (err.op_id, err.op_name, err.op_kind) == (0, "lsm_bwd", "LogSoftmaxBackward")
    assert (err.port, err.role) == ("input 1", "dst")
    _, msg = _build_error(bwd_op(lt(0, dt=bf), lt(1, dt=bf), lt(2, dt=f16)))
    assert "output 0 (diff_src) (logical tensor 2) is f16, expected bf16" in msg


@pytest.mark.parametrize("dt", [g.DataType.s8, g.DataType.undef, g.DataType.s32])
def test_add_op_unsupported_data_type(dt):
    op = g.Op(5, g.OpKind.LogSoftmax, "lsm")
    op.add_input(lt(0, dt=dt)).add_output(lt(1, dt=dt))
    err, msg = _build_error(op)
    assert f"input 0 (src) (logical tensor 0) has unsupported data type {dt.name}" \
        in msg
    assert "expected f32, bf16 or f16" in msg and err.role == "src"


@pytest.mark.parametrize("value", [1.5, True, "1", None, [1]])
def test_add_op_axis_must_be_integer(value):
    op = bwd_op(lt(0), lt(1), lt(2)).set_attr(g.OpAttr.axis, value)
    _, msg = _build_error(op)
    assert f"attribute axis is {value!r}" in msg and "expected an integer (s64)" in msg


@pytest.mark.parametrize("attr", [g.OpAttr.alpha, "foo", g.OpAttr.mode])
def test_add_op_unknown_attribute(attr):
    op = bwd_op(lt(0), lt(1), lt(2)).set_attr(attr, 1)
    name = attr if isinstance(attr, str) else attr.name
    _, msg = _build_error(op)
    assert f"unknown attribute {name!r}; LogSoftmaxBackward takes axis" in msg


def test_softmax_mode_attribute():
    op = g.Op(0, g.OpKind.SoftMax, "sm").add_input(lt(0)).add_output(lt(1))
    _, msg = _build_error(op.set_attr(g.OpAttr.mode, "fast"))
    assert "attribute mode is 'fast'; expected one of 'none', 'inf_as_zero'" in msg
    # inf_as_zero is valid oneDNN but not implemented: an unsupported partition
    op.set_attr(g.OpAttr.mode, "inf_as_zero")
    assert not one_partition(op).is_supported()
    op.set_attr(g.OpAttr.mode, "none")
    assert one_partition(op).is_supported()


def test_add_op_duplicate_id_is_an_error():
    gr = _add(g.Op(7, g.OpKind.LogSoftmax, "a").add_input(lt(0)).add_output(lt(1)))
    op = g.Op(7, g.OpKind.ReLU, "b").add_input(lt(1)).add_output(lt(2))
    with pytest.raises(g.GraphBuildError, match="already has an op with id 7 "
                       r"\(op 'a' \(id 7, LogSoftmax\)\).*oneDNN silently"):
        gr.add_op(op)


def test_add_op_after_finalize():
    gr = _add(g.Op(0, g.OpKind.LogSoftmax, "a").add_input(lt(0)).add_output(lt(1)))
    gr.finalize()
    assert gr.is_finalized()
    with pytest.raises(g.InvalidGraphError, match="could not add op 'b' .*finalized"):
        gr.add_op(g.Op(1, g.OpKind.LogSoftmax, "b").add_input(lt(1)).add_output(lt(2)))


def test_add_op_graph_consistency():
    _, msg = _build_error(bwd_op(lt(0), lt(1), lt(0)))
    assert "output 0 (diff_src) has id 0, the same as input 0 (diff_dst)" in msg
    gr = _add(g.Op(0, g.OpKind.LogSoftmax, "a").add_input(lt(0)).add_output(lt(1)))
    clash = g.Op(1, g.OpKind.LogSoftmax, "b").add_input(lt(1, dt=g.DataType.bf16))
    with pytest.raises(g.GraphBuildError, match="input 0 .src. is logical tensor 1 "
                       "with data type bf16 vs f32 in op 'a'"):
        gr.add_op(clash.add_output(lt(2, dt=g.DataType.bf16)))
    with pytest.raises(g.GraphBuildError, match="already produced by op 'a'"):
        gr.add_op(g.Op(2, g.OpKind.SoftMax, "c").add_input(lt(5)).add_output(lt(1)))
    with pytest.raises(g.InvalidArgumentError, match="expected an Op"):
        gr.add_op("op")


def test_finalize_rejects_cycles_and_partitions_need_finalize():
    gr = g.Graph(g.EngineKind.cpu)
    gr.add_op(g.Op(0, g.OpKind.LogSoftmax, "a").add_input(lt(0)).add_output(lt(1)))
    gr.add_op(g.Op(1, g.OpKind.SoftMax, "b").add_input(lt(1)).add_output(lt(0)))
    with pytest.raises(g.InvalidGraphError, match="not finalized"):
        gr.get_partitions()
    with pytest.raises(g.InvalidGraphError, match="cycle.*op 'a'.*op 'b'"):
        gr.finalize()


def test_graph_arguments():
    with pytest.raises(g.InvalidArgumentError, match="fpmath_mode 'fast'"):
        g.Graph(g.EngineKind.cpu, "fast")
    with pytest.raises(g.InvalidArgumentError, match="engine kind"):
        g.Graph(g.EngineKind.any)


# -- partitions ------------------------------------------------------------------------
def test_partitions_unsupported_and_mixed():
    gr = g.Graph(g.EngineKind.cpu)
    # added out of order: partitions come back in topological order
    gr.add_op(bwd_op(lt(3), lt(1), lt(4), "bwd", oid=2))
    gr.add_op(g.Op(1, g.OpKind.ReLU, "relu").add_input(lt(1)).add_output(lt(3)))
    gr.add_op(g.Op(0, g.OpKind.LogSoftmax, "fwd").add_input(lt(0)).add_output(lt(1)))
    mm = g.Op(5, g.OpKind.MatMul, "mm").add_inputs([lt(4), lt(6)]).add_output(lt(7))
    gr.add_op(mm.set_attr(g.OpAttr.transpose_b, True))
    gr.add_op(g.Op(6, g.OpKind.Wildcard, "w").add_input(lt(7)).add_output(lt(8)))
    gr.finalize()
    parts = gr.get_partitions()
    assert [p.get_ops() for p in parts] == [[0], [1], [2], [5], [6]]
    assert [p.is_supported() for p in parts] == [True, False, True, False, False]
    assert [p.get_id() for p in parts] == [0, 1, 2, 3, 4]
    assert all(p.get_ops_num() == 1 for p in parts)
    assert [x.get_id() for x in parts[2].get_input_ports()] == [3, 1]
    assert [x.get_id() for x in parts[3].get_input_ports()] == [4, 6]
    assert [x.get_id() for x in parts[2].get_output_ports()] == [4]
    assert gr.get_input_ids() == [0, 6] and gr.get_output_ids() == [8]
    assert gr.get_partitions(g.PartitionPolicy.debug)[1].get_ops() == [1]
    with pytest.raises(g.CompileError, match=r"could not compile partition 3: it is "
                       r"not supported \(op 'mm' \(id 5, MatMul\)"):
        parts[3].compile([lt(4), lt(6)], [lt(7)], ENG)


def test_gpu_graph_partitions_are_unsupported():
    gr = g.Graph(g.EngineKind.gpu)
    gr.add_op(g.Op(0, g.OpKind.LogSoftmax, "a").add_input(lt(0)).add_output(lt(1)))
    gr.finalize()
    (p,) = gr.get_partitions()
    assert not p.is_supported() and p.get_engine_kind() is g.EngineKind.gpu


# -- compile ---------------------------------------------------------------------------
def _compile_error(p, ins, outs):
    with pytest.raises(g.CompileError) as info:
        p.compile(ins, outs, ENG)
    return info.value, str(info.value)


def test_compile_style_message():
    bf, f16 = g.DataType.bf16, g.DataType.f16
    dy, y, dx = lt(0, dt=bf), lt(1, dt=bf), lt(2, dt=bf)
    p = one_partition(bwd_op(dy, y, dx))
    err, msg = _compile_error(p, [dy, lt(1, dt=f16)], [dx])
    assert msg == ("could not compile partition 0: op 'lsm_bwd' (id 0, "
                   "LogSoftmaxBackward) input 1 (dst) is f16, expected bf16")
    assert (err.port, err.role, err.op_id) == ("input 1", "dst", 0)


def test_compile_checks_dst_shape_against_diff_dst():
    # oneDNN forgets this check; the graph leaves dims unknown until compile
    dy, y, dx = lt(0, [-1, 1000]), lt(1, -1), lt(2, -1)
    p = one_partition(bwd_op(dy, y, dx))
    err, msg = _compile_error(p, [lt(0, [8, 1000]), lt(1, [8, 999])], [dx])
    assert "input 1 (dst) has shape [8, 999], expected [8, 1000] (the shape of " \
           "input 0 (diff_dst))" in msg
    _, msg = _compile_error(p, [lt(0, [8, 1000]), lt(1, [8, 1000, 1])], [dx])
    assert "input 1 (dst) has shape [8, 1000, 1], expected [8, 1000]" in msg
    # dims known in the graph must not change at compile time
    _, msg = _compile_error(p, [lt(0, [8, 999]), lt(1, [8, 999])], [dx])
    assert "input 0 (diff_dst) has shape [8, 999], but the graph declared [-1, 1000]" \
        in msg


@pytest.mark.parametrize("axis", [2, -3, 7])
@pytest.mark.parametrize("kind", list(KINDS))
def test_compile_axis_out_of_range(kind, axis):
    n_in = len(KINDS[kind][0])
    ins = [lt(i, [4, 5]) for i in range(n_in)]
    op = g.Op(0, kind, "op").add_inputs(ins).add_output(lt(9, [4, 5]))
    p = one_partition(op.set_attr(g.OpAttr.axis, axis))
    _, msg = _compile_error(p, ins, [lt(9, [4, 5])])
    role = KINDS[kind][0][0]
    assert f"input 0 ({role}) has rank 2, but attribute axis={axis} is out of range; " \
           "expected an integer in [-2, 2)" in msg


def test_compile_input_requirements():
    dy, y, dx = lt(0, -1), lt(1, -1), lt(2, -1)
    p = one_partition(bwd_op(dy, y, dx))
    _, msg = _compile_error(p, [lt(0, [8, -1]), lt(1, [8, 4])], [dx])
    assert "input 0 (diff_dst) has unknown dims or strides" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4], g.DataType.f32, g.LayoutType.any),
                                lt(1, [8, 4])], [dx])
    assert "input 0 (diff_dst) has layout any; inputs need LayoutType.strided" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4]), lt(3, [8, 4])], [dx])
    assert "got input logical tensors with ids [0, 3], expected ids [0, 1] " \
           "(input 0 (diff_dst), input 1 (dst))" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4]), lt(1, [8, 4])], [])
    assert "got output logical tensors with ids [], expected ids [2]" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4]), lt(0, [8, 4])], [dx])
    assert "got logical tensor 0 twice among inputs" in msg
    with pytest.raises(g.CompileError, match="expected an Engine"):
        p.compile([lt(0, [8, 4]), lt(1, [8, 4])], [dx], "cpu")


def test_compile_output_requirements():
    src, dst = lt(0, -1), lt(1, -1)
    op = g.Op(0, g.OpKind.LogSoftmax, "lsm").add_input(src).add_output(dst)
    p = one_partition(op)
    _, msg = _compile_error(p, [lt(0, [8, 4])], [lt(1, [8, 5])])
    assert "output 0 (dst) has shape [8, 5], expected [8, 4] (the shape of input 0 " \
           "(src))" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4])], [lt(1, [8, 4], g.DataType.f32, [1, 1])])
    assert "output 0 (dst) has strides [1, 1] under which distinct elements" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4])], [lt(1, [8, 4], g.DataType.f32,
                                                     g.LayoutType.opaque)])
    assert "output 0 (dst) has layout opaque" in msg
    _, msg = _compile_error(p, [lt(0, [8, 4])], [lt(1, [8, 4], g.DataType.bf16)])
    assert "output 0 (dst) is bf16, expected f32" in msg


def test_compile_infers_outputs():
    dy, y, dx = lt(0, -1), lt(1, -1), lt(2, -1)
    p = one_partition(bwd_op(dy, y, dx))
    acb = [393216, 1, 384]
    ins = [lt(0, [8, 384, 1024], g.DataType.f32, acb),
           lt(1, [8, 384, 1024], g.DataType.f32, acb)]
    for out in (dx, lt(2, [-1, 384, -1]), lt(2, 3, g.DataType.f32, g.LayoutType.any),
                lt(2, [8, 384, 1024], g.DataType.f32, g.LayoutType.any)):
        cp = p.compile(ins, [out], ENG)
        q = cp.query_logical_tensor(2)
        assert q.get_dims() == [8, 384, 1024]
        assert q.get_strides() == acb, out  # dense input layout is kept
        assert q.get_layout_type() is g.LayoutType.strided
        assert cp.get_inplace_ports() == [(0, 2)]
        assert cp.query_logical_tensor(0) == ins[0]
    # a padded (non-compact) input gives a dense row-major output
    ins = [lt(0, [4, 1000], g.DataType.f32, [1024, 1]),
           lt(1, [4, 1000], g.DataType.f32, [1024, 1])]
    cp = p.compile(ins, [dx], ENG)
    assert cp.query_logical_tensor(2).get_strides() == [1000, 1]
    assert cp.get_inplace_ports() == []  # layouts differ: no in-place pair
    with pytest.raises(g.InvalidArgumentError, match="not a port of compiled "
                       r"partition 0 \(ports: \[0, 1, 2\]\)"):
        cp.query_logical_tensor(5)


@pytest.mark.parametrize("kind, default", [
    (g.OpKind.LogSoftmax, 2), (g.OpKind.LogSoftmaxBackward, 2),
    (g.OpKind.SoftMax, 1), (g.OpKind.SoftMaxBackward, 1),
])
def test_default_axis(kind, default):
    # oneDNN's defaults: -1 for the LogSoftmax pair, 1 for the SoftMax pair
    ins = [lt(i, [2, 3, 4]) for i in range(len(KINDS[kind][0]))]
    op = g.Op(0, kind, "op").add_inputs(ins).add_output(lt(9, [2, 3, 4]))
    cp = one_partition(op).compile(ins, [lt(9, [2, 3, 4])], ENG)
    assert cp.axis == default
    assert cp.get_inplace_ports() == [(0, 9)]


def test_compile_cache():
    g.compile_cache_clear()
    dy, y, dx = lt(0, [8, 16]), lt(1, [8, 16]), lt(2, [8, 16])
    p = one_partition(bwd_op(dy, y, dx))
    cp = p.compile([dy, y], [dx], ENG)
    assert g.compile_cache_info()["misses"] == 1
    assert p.compile([y, dy], [dx], ENG) is cp  # order of ports does not matter
    p2 = one_partition(bwd_op(dy, y, dx))  # same op in another graph
    assert p2.compile([dy, y], [dx], ENG) is cp
    info = g.compile_cache_info()
    assert info["hits"] == 2 and info["size"] == 1
    t = [16, 1]
    other = p.compile([lt(0, [8, 16], g.DataType.f32, [1, 8]),
                       lt(1, [8, 16], g.DataType.f32, [1, 8])], [dx], ENG)
    assert other is not cp and other.query_logical_tensor(0).get_strides() == [1, 8]
    assert p.compile([lt(0, [8, 16], g.DataType.f32, t), y], [dx], ENG) is cp
    p3 = one_partition(bwd_op(dy, y, dx).set_attr(g.OpAttr.axis, 0))
    assert p3.compile([dy, y], [dx], ENG).axis == 0
    g.compile_cache_clear()
    assert g.compile_cache_info()["size"] == 0
    assert p.compile([dy, y], [dx], ENG) is not cp


def test_graph_is_lazy_in_logsoftmax_namespace():
    assert logsoftmax.graph is g
    assert "graph" in logsoftmax.__all__
