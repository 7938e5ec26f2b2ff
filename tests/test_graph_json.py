"""oneDNN's JSON graph format (round trip, reading errors), the five bundled
oneDNN cases executed in every data type against the float64 oracle, the
benchdnn-style rewrites, and the ``logsoftmax graph run`` command."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

from conftest import TOL_EPS, assert_close_eps
from logsoftmax import graph as g
from logsoftmax.backends.reference import ReferenceBackend
from logsoftmax.cli import graph_run
from logsoftmax.cli import main as cli_main

CASES = ["logsoftmax", "logsoftmax_bwd", "softmax", "softmax_bwd", "softmax_bwd_d_3d"]
ENG = g.Engine(g.EngineKind.cpu)
STRM = g.Stream(ENG)
REFS = {
    "log_softmax": lambda x, a: _ref("log_softmax", x, axis=a),
    "softmax": lambda x, a: _ref("softmax", x, axis=a),
    "log_softmax_backward": lambda dy, y, a: _ref(
        "log_softmax_backward", dy, y, axis=a
    ),
    "softmax_backward": lambda dy, y, a: _ref("softmax_backward", dy, y, axis=a),
}


def _ref(name, *arrays, axis):
    import conftest

    return getattr(conftest, f"ref_{name}")(*arrays, axis)


def load(name):
    with open(g.case_path(name)) as f:
        return json.load(f)


def test_bundled_cases():
    assert g.case_names() == CASES
    assert g.case_path("softmax.json") == g.case_path("softmax")
    with pytest.raises(g.InvalidArgumentError, match="unknown bundled case 'nope'"):
        g.case_path("nope")


@pytest.mark.parametrize("name", CASES)
def test_round_trip_is_exact(name):
    doc = load(name)
    graph = g.from_json(g.case_path(name))
    assert graph.is_finalized()
    assert json.loads(g.to_json(graph)) == doc
    assert json.loads(g.to_json(g.from_json(json.dumps(doc)))) == doc  # from text
    with open(g.case_path(name)) as f:
        assert json.loads(g.to_json(g.from_json(f), indent=None)) == doc  # file object


def test_to_json_of_a_built_graph():
    dy = g.LogicalTensor(0, g.DataType.bf16, [-1, 1000])
    y = g.LogicalTensor(1, g.DataType.bf16, [-1, 1000])
    dx = g.LogicalTensor(2, g.DataType.bf16, 2, g.LayoutType.any)
    op = g.Op(0, g.OpKind.LogSoftmaxBackward, "lsm_bwd", [dy, y], [dx])
    gr = g.Graph(g.EngineKind.cpu, "bf16")
    gr.add_op(op.set_attr(g.OpAttr.axis, 1))
    doc = json.loads(g.to_json(gr))
    assert doc["version"] == "3.7.0" and doc["fpmath_mode"] == "bf16"
    assert doc["input_ports"] == [0, 1] and doc["output_ports"] == [2]
    (o,) = doc["graph"]
    assert o["kind"] == "LogSoftmaxBackward" and o["name"] == "lsm_bwd"
    assert o["attrs"] == {"axis": {"type": "s64", "value": 1}}
    unknown = -(2**63)  # oneDNN writes unknown dims as INT64_MIN
    assert o["inputs"][0]["shape"] == [unknown, 1000]
    assert o["outputs"][0] == {"id": 2, "dtype": "bf16", "shape": [unknown, unknown],
                               "stride": [], "layout_type": "any",
                               "property_type": "undef"}
    back = g.from_json(doc)
    assert back.get_ops()[0].inputs == (dy, y)
    assert back.get_ops()[0].outputs == (dx,)
    assert json.loads(g.to_json(back)) == doc


def _doc(**op_changes):
    doc = load("logsoftmax_bwd")
    doc["graph"][0].update(op_changes)
    return doc


@pytest.mark.parametrize("source, exc, match", [
    ("{not json", g.JsonFormatError, "could not parse JSON graph"),
    ("/no/such/file.json", g.JsonFormatError, "could not read JSON graph"),
    (io.StringIO("[1, 2]"), g.JsonFormatError, "top level is a list"),
    ({"graph": 3}, g.JsonFormatError, "field 'graph' is 3, expected list"),
    ({"version": "3.0.0"}, g.JsonFormatError, "the document has no 'graph'"),
    (_doc(kind="SoftMaxx"), g.JsonFormatError, "op 0 has unknown kind 'SoftMaxx'"),
    (_doc(attrs={"axis": {"type": "i64", "value": 1}}), g.JsonFormatError,
     "attribute 'axis' has type 'i64'"),
    (_doc(attrs={"axis": {"type": "s64", "value": "1"}}), g.JsonFormatError,
     "attribute 'axis' of type s64 has value '1'"),
    (_doc(attrs={"axis": 1}), g.JsonFormatError, "expected {'type': ..., 'value'"),
    (_doc(attrs={"axis": {"type": "f32", "value": 1.0}}), g.GraphBuildError,
     "attribute axis is 1.0 .float.; expected an integer"),
    (_doc(attrs={"beta": {"type": "f32", "value": 1.0}}), g.GraphBuildError,
     "unknown attribute 'beta'"),
    (_doc(inputs=[{"id": 0, "dtype": "f33", "shape": [2]}]), g.JsonFormatError,
     "op 0 input 0 .logical tensor 0. has dtype 'f33'"),
    (_doc(inputs=[{"id": 0, "dtype": "f32", "shape": [2, "x"]}]), g.JsonFormatError,
     "shape \\[2, 'x'\\] is not a list of integers"),
    (_doc(outputs=[{"dtype": "f32", "shape": [2]}]), g.JsonFormatError,
     "op 0 output 0 has no 'id'"),
    (_doc(inputs=[]), g.GraphBuildError, "it has 0 input.s., expected 2"),
    (42, g.JsonFormatError, "expected a path, JSON text"),
])
def test_from_json_errors(source, exc, match):
    with pytest.raises(exc, match=match):
        g.from_json(source)


def test_rewrite_knobs():
    doc = load("softmax_bwd")
    new = graph_run.rewrite(doc, "bf16", ["0:8x384x1024*acb"], ["0:axis:2"])
    assert doc["graph"][0]["inputs"][0]["dtype"] == "f32"  # input untouched
    (op,) = new["graph"]
    acb = [393216, 1, 384]
    for lt in op["inputs"] + op["outputs"]:  # dst and diff_src follow input 0
        assert lt["dtype"] == "bf16" and lt["shape"] == [8, 384, 1024]
    # the tag's layout is followed too
    assert op["inputs"][0]["stride"] == op["inputs"][1]["stride"] == acb
    assert op["outputs"][0]["stride"] == acb
    assert op["attrs"]["axis"] == {"type": "s64", "value": 2}
    # no tag: the tensor keeps its memory order
    new = graph_run.rewrite(load("softmax_bwd_d_3d"), None, ["0:2x3x4+1:2x3x4"])
    assert new["graph"][0]["inputs"][0]["stride"] == [12, 1, 3]
    assert new["graph"][0]["outputs"][0]["stride"] == [12, 1, 3]
    for bad, match in [(["9:2x3"], "no logical tensor has id 9"),
                       (["0:2xx3"], "is not like 8x384x1024"),
                       (["0-2x3"], "expected ID:SHAPE"),
                       (["0:2x3*abd"], "format tag 'abd'")]:
        with pytest.raises(ValueError, match=match):
            graph_run.rewrite(doc, in_shapes=bad)
    for bad, match in [(["0:axis"], "expected OPID:ATTR:VALUE"),
                       (["3:axis:1"], "no op has id 3"),
                       (["0:axes:1"], r"value|axes"),
                       (["0:axis:x"], "'x' is not a valid s64"),
                       (["0:foo:1"], "unknown attribute 'foo'")]:
        if bad == ["0:axes:1"]:
            attrs = graph_run.rewrite(doc, op_attrs=bad)["graph"][0]["attrs"]
            assert attrs["axes"] == {"type": "s64[]", "value": [1]}
            continue
        with pytest.raises(ValueError, match=match):
            graph_run.rewrite(doc, op_attrs=bad)


def run_case(doc, dt, inplace=False):
    """Compile and execute a (one-op) JSON case; check vs the float64 oracle."""
    graph = g.from_json(doc)
    (p,) = graph.get_partitions()
    op = graph.get_ops()[0]
    d = g.SUPPORTED_OPS[op.kind]
    cp = p.compile(p.get_input_ports(), p.get_output_ports(), ENG)
    rng = np.random.default_rng(0)
    npdt = g.DataType[dt].numpy_dtype
    ins, arrays = [], []
    for lt, role in zip(p.get_input_ports(), d.inputs):
        t = g.Tensor(cp.query_logical_tensor(lt.get_id()), ENG)
        x = rng.uniform(-5, 5, lt.shape)
        if role == "dst":
            fwd = "log_softmax" if op.kind.value.startswith("Log") else "softmax"
            x = REFS[fwd](x.astype(npdt), cp.axis)
        elif role == "diff_dst":
            x = rng.uniform(-1, 1, lt.shape)
        t.numpy()[...] = x.astype(npdt)
        ins.append(t)
        arrays.append(t.numpy().copy())
    (olt,) = p.get_output_ports()
    out_lt = cp.query_logical_tensor(olt.get_id())
    out = g.Tensor(out_lt, ENG, ins[0].get_data_handle() if inplace else None)
    cp.execute(STRM, ins, [out])
    STRM.wait()
    assert_close_eps(out.numpy(), REFS[d.function](*arrays, cp.axis), npdt,
                     TOL_EPS[d.function])
    return cp


SMALL = {  # the same cases at a size the default run can afford
    "softmax_bwd_d_3d": ["0:2x48x64*acb", "1:2x48x64*acb"],
}


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_bundled_cases_execute_small(name, dt):
    shapes = SMALL.get(name, ["0:4x16x5x7"])
    cp = run_case(graph_run.rewrite(load(name), dt, shapes), dt)
    assert cp.axis == 1
    if name == "softmax_bwd_d_3d":  # acb kept: the axis is the unit-stride dim
        assert cp.query_logical_tensor(2).get_strides() == [3072, 1, 48]


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_bundled_cases_execute_full(name, dt):
    run_case(graph_run.rewrite(load(name), dt), dt)
    run_case(graph_run.rewrite(load(name), dt), dt, inplace=True)


# -- the command line ----------------------------------------------------------------
def test_cli_run_path_bf16(capsys):
    path = str(g.case_path("softmax_bwd_d_3d"))
    assert cli_main(["graph", "run", path, "--dt", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "SoftMaxBackward 'SOFTMAX_0' axis=1 bf16 shape=[8, 384, 1024] " \
           "strides=[393216, 1, 384]" in out
    assert "PASSED" in out and "GB/s" in out


@pytest.mark.parametrize("name", CASES)
def test_cli_run_bundled_small(name, capsys):
    shapes = "+".join(SMALL.get(name, ["0:2x8x3x5*acdb"]))
    argv = ["graph", "run", "--case", name, "--in-shapes", shapes,
            "--op-attrs", "0:axis:2", "--inplace", "--repeats", "1"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "axis=2" in out and "in-place=yes" in out and out.rstrip().endswith("PASSED")


def test_cli_list_and_usage(capsys):
    assert cli_main(["graph", "list"]) == 0
    assert capsys.readouterr().out.split() == CASES
    assert cli_main(["graph", "--help"]) == 0
    assert cli_main(["graph", "run", "--dt", "f64", "x.json"]) == 2
    assert cli_main(["graph", "run"]) == 2
    assert cli_main(["graph"]) == 2


def test_cli_failures(tmp_path, capsys):
    assert cli_main(["graph", "run", str(tmp_path / "missing.json")]) == 1
    assert "could not read JSON graph" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli_main(["graph", "run", str(bad)]) == 1
    assert "could not parse JSON graph" in capsys.readouterr().err
    args = ["graph", "run", "--case", "logsoftmax", "--op-attrs", "0:axis:4"]
    assert cli_main(args) == 1
    assert "axis=4 is out of range" in capsys.readouterr().err
    # a graph with an unsupported op cannot be checked
    doc = load("logsoftmax")
    relu = json.loads(json.dumps(doc["graph"][0]))
    relu.update(id=1, name="relu", kind="ReLU", attrs={})
    relu["inputs"], relu["outputs"] = relu["outputs"], [dict(relu["outputs"][0], id=2)]
    doc["graph"].append(relu)
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(doc))
    argv = ["graph", "run", str(mixed), "--in-shapes", "0:2x3x4x5", "--repeats", "0"]
    assert cli_main(argv) == 1
    out = capsys.readouterr().out
    assert "0: LogSoftmax" in out and "1: UNSUPPORTED op 'relu' (id 1, ReLU)" in out


class BrokenBackend(ReferenceBackend):
    """The reference backend with log_softmax off by 1e-3 in one column."""

    name = "broken"

    def log_softmax(self, x, axis, out, dtype):
        res = super().log_softmax(x, axis, out, dtype)
        res[..., 0] += np.asarray(1e-3, res.dtype)
        return res


def test_cli_detects_wrong_results(monkeypatch, capsys):
    backends = sys.modules["logsoftmax.backends"]
    monkeypatch.setitem(backends._REGISTRY, "broken", "test_graph_json:BrokenBackend")
    argv = ["graph", "run", "--case", "logsoftmax", "--in-shapes", "0:2x8x3x5",
            "--repeats", "0"]
    assert cli_main(argv + ["--backend", "reference"]) == 0
    try:
        assert cli_main(argv + ["--backend", "broken"]) == 1
    finally:
        backends._INSTANCES.pop("broken", None)
    out = capsys.readouterr().out
    assert out.rstrip().endswith("FAILED") and "PASSED" in out  # reference run passed
