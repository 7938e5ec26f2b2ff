"""oneDNN's JSON graph format: read (``from_json``) and write (``to_json``).

oneDNN dumps graphs (``ONEDNN_GRAPH_DUMP=graph``) and benchdnn's graph
driver reads them in this format::

    {"version": "3.7.0", "engine_kind": "cpu", "fpmath_mode": "strict",
     "input_ports": [0, 1], "output_ports": [2],          # 3.7+ only
     "graph": [{"id": 0, "name": "SOFTMAX_0", "kind": "SoftMaxBackward",
                "attrs": {"axis": {"type": "s64", "value": 1}},
                "inputs": [{"id": 0, "dtype": "f32", "shape": [8, 384, 1024],
                            "stride": [393216, 1, 384], "layout_type": "strided",
                            "property_type": "undef"}, ...],
                "outputs": [...]}]}

Strides are in elements; an unknown dim is written as ``INT64_MIN``
(-9223372036854775808), as oneDNN does, and read back as -1. An unknown rank
is written, as in oneDNN, as ``"shape": []``, which reads back as 0-d: the
format cannot tell them apart (no op here accepts either at compile time).
``"stride": []`` on a strided tensor of known dims means row-major. Reading then
writing a file gives the same JSON document (top-level fields are kept; the
port lists are recomputed from the ops).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import InvalidArgumentError, JsonFormatError
from .graph import Graph
from .logical_tensor import LogicalTensor
from .op import Op
from .types import (
    JSON_UNKNOWN_DIM,
    UNKNOWN_DIM,
    AttrType,
    DataType,
    EngineKind,
    LayoutType,
    OpAttr,
    OpKind,
    PropertyType,
)

__all__ = [
    "from_json",
    "to_json",
    "load_json",
    "case_names",
    "case_path",
    "JSON_VERSION",
]

#: the format version written for graphs not read from JSON
JSON_VERSION = "3.7.0"


# -- bundled cases ------------------------------------------------------------
def _cases_dir():
    return resources.files("logsoftmax").joinpath("data", "onednn-graph")


def case_names() -> list[str]:
    """Names of the bundled oneDNN cases (``logsoftmax_bwd``, ...)."""
    return sorted(
        p.name[: -len(".json")]
        for p in _cases_dir().iterdir()
        if p.name.endswith(".json")
    )


def case_path(name: str) -> Path:
    """Path of bundled case ``name`` (with or without ``.json``).

    Raises:
      InvalidArgumentError: no bundled case has that name.
    """
    stem = name[:-5] if name.endswith(".json") else name
    if stem not in case_names():
        raise InvalidArgumentError(
            f"unknown bundled case {name!r}; available: {', '.join(case_names())}"
        )
    return Path(str(_cases_dir().joinpath(stem + ".json")))


# -- reading --------------------------------------------------------------------
def load_json(source) -> dict:
    """The parsed JSON document of ``source`` (as accepted by :func:`from_json`).

    Raises:
      JsonFormatError: unreadable file, invalid JSON, or not a JSON object.
    """
    if isinstance(source, dict):
        return source
    if hasattr(source, "read"):
        text = source.read()
    elif isinstance(source, str) and source.lstrip().startswith("{"):
        text = source
    elif isinstance(source, (str, os.PathLike)):
        try:
            text = Path(source).read_text()
        except OSError as e:
            raise JsonFormatError(
                f"could not read JSON graph {str(source)!r}: {e}"
            ) from e
    else:
        raise JsonFormatError(
            f"could not read JSON graph from {type(source).__name__}; expected a "
            "path, JSON text, a file object or a dict"
        )
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonFormatError(f"could not parse JSON graph: {e}") from e
    if not isinstance(doc, dict):
        raise JsonFormatError(
            f"could not read JSON graph: top level is a {type(doc).__name__}, "
            "expected an object with a 'graph' list"
        )
    return doc


def _field(d: dict, key: str, where: str, types, default=...):
    if key not in d:
        if default is not ...:
            return default
        raise JsonFormatError(f"could not read JSON graph: {where} has no {key!r}")
    v = d[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
        raise JsonFormatError(
            f"could not read JSON graph: {where} field {key!r} is {v!r}, expected "
            + " or ".join(t.__name__ for t in _tuple(types))
        )
    return v


def _tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _enum(enum_cls, name, where: str, field: str):
    try:
        return enum_cls[name]
    except (KeyError, TypeError):
        raise JsonFormatError(
            f"could not read JSON graph: {where} has {field} {name!r}; expected one "
            f"of {', '.join(m.name for m in enum_cls)}"
        ) from None


def _dims(values, where: str, field: str) -> list[int]:
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise JsonFormatError(
            f"could not read JSON graph: {where} {field} {values!r} is not a list "
            "of integers"
        )
    return [UNKNOWN_DIM if v == JSON_UNKNOWN_DIM else v for v in values]


def _logical_tensor(d: Any, where: str) -> LogicalTensor:
    if not isinstance(d, dict):
        raise JsonFormatError(f"could not read JSON graph: {where} is not an object")
    tid = _field(d, "id", where, int)
    where = f"{where} (logical tensor {tid})"
    dtype = _enum(DataType, _field(d, "dtype", where, str), where, "dtype")
    shape = _dims(_field(d, "shape", where, list), where, "shape")
    stride = _dims(_field(d, "stride", where, list, []), where, "stride")
    layout = _enum(
        LayoutType,
        _field(d, "layout_type", where, str, "strided"),
        where,
        "layout_type",
    )
    prop = _enum(
        PropertyType,
        _field(d, "property_type", where, str, "undef"),
        where,
        "property_type",
    )
    strides = stride if layout is LayoutType.strided and stride else None
    return LogicalTensor(tid, dtype, shape, layout, prop, strides=strides)


def _attr_value(name: str, spec: Any, where: str):
    if not isinstance(spec, dict) or "type" not in spec or "value" not in spec:
        raise JsonFormatError(
            f"could not read JSON graph: {where} attribute {name!r} is {spec!r}; "
            "expected {'type': ..., 'value': ...}"
        )
    t, v = spec["type"], spec["value"]
    try:
        atype = AttrType(t)
    except ValueError:
        raise JsonFormatError(
            f"could not read JSON graph: {where} attribute {name!r} has type {t!r}; "
            f"expected one of {', '.join(a.value for a in AttrType)}"
        ) from None
    scalar = {
        AttrType.s64: int,
        AttrType.f32: (int, float),
        AttrType.bool: (bool, int),
        AttrType.string: str,
        AttrType.s64s: int,
        AttrType.f32s: (int, float),
    }[atype]
    items = v if atype in (AttrType.s64s, AttrType.f32s) else [v]
    ok = isinstance(items, list) and all(
        isinstance(x, scalar)
        and (atype is AttrType.bool or not isinstance(x, bool))
        for x in items
    )
    if not ok:
        raise JsonFormatError(
            f"could not read JSON graph: {where} attribute {name!r} of type {t} has "
            f"value {v!r}"
        )
    if atype is AttrType.f32:
        return float(v)
    if atype is AttrType.f32s:
        return [float(x) for x in v]
    if atype is AttrType.bool:
        return bool(v)
    return v


def from_json(source) -> Graph:
    """Build a graph from oneDNN's JSON graph format.

    Args:
      source: a path (str or PathLike), JSON text (a str starting with
        ``{``), a file object, or the parsed document (a dict).

    Returns:
      A finalized :class:`Graph` (ops added in file order).

    Raises:
      JsonFormatError: unreadable or malformed JSON; an unknown op kind, data
        type, layout, property or attribute type.
      GraphBuildError: an op fails the checks of ``Graph.add_op``.
    """
    doc = load_json(source)
    ops = _field(doc, "graph", "the document", list)
    graph = Graph(
        _enum(
            EngineKind,
            _field(doc, "engine_kind", "the document", str, "cpu"),
            "the document",
            "engine_kind",
        ),
        _field(doc, "fpmath_mode", "the document", str, "strict"),
    )
    for k, d in enumerate(ops):
        where = f"op #{k}"
        if not isinstance(d, dict):
            raise JsonFormatError(
                f"could not read JSON graph: {where} is not an object"
            )
        oid = _field(d, "id", where, int)
        where = f"op {oid}"
        kind_name = _field(d, "kind", where, str)
        try:
            kind = OpKind(kind_name)
        except ValueError:
            raise JsonFormatError(
                f"could not read JSON graph: {where} has unknown kind {kind_name!r}; "
                "expected one of oneDNN's op kinds (see OpKind)"
            ) from None
        op = Op(oid, kind, _field(d, "name", where, str, ""))
        attrs = _field(d, "attrs", where, dict, {})
        for name, spec in attrs.items():
            op.set_attr(name, _attr_value(name, spec, where))
        for i, lt in enumerate(_field(d, "inputs", where, list, [])):
            op.add_input(_logical_tensor(lt, f"{where} input {i}"))
        for i, lt in enumerate(_field(d, "outputs", where, list, [])):
            op.add_output(_logical_tensor(lt, f"{where} output {i}"))
        graph.add_op(op)
    graph.finalize()
    graph._json_header = {k: v for k, v in doc.items() if k != "graph"}
    return graph


# -- writing --------------------------------------------------------------------
def _dims_out(values) -> list[int]:
    return [JSON_UNKNOWN_DIM if v == UNKNOWN_DIM else int(v) for v in values]


def _lt_dict(lt: LogicalTensor) -> dict:
    return {
        "id": lt.get_id(),
        "dtype": lt.get_data_type().name,
        "shape": [] if lt.shape is None else _dims_out(lt.shape),
        "stride": [] if lt._strides is None else _dims_out(lt._strides),
        "layout_type": lt.get_layout_type().name,
        "property_type": lt.get_property_type().name,
    }


def _attr_type(name: str, value) -> AttrType:
    if name in OpAttr.__members__ and OpAttr[name].type is not None:
        return OpAttr[name].type
    if isinstance(value, bool):
        return AttrType.bool
    if isinstance(value, int):
        return AttrType.s64
    if isinstance(value, float):
        return AttrType.f32
    if isinstance(value, str):
        return AttrType.string
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return AttrType.s64s
        return AttrType.f32s
    raise JsonFormatError(
        f"could not write JSON graph: attribute {name!r} has value {value!r} of "
        f"type {type(value).__name__}, which has no JSON attribute type"
    )


def _op_dict(op: Op) -> dict:
    attrs = {}
    for name, value in op.get_attrs().items():
        t = _attr_type(name, value)
        if isinstance(value, tuple):
            value = list(value)
        attrs[name] = {"type": t.value, "value": value}
    return {
        "id": op.id,
        "name": op.name,
        "kind": op.kind.value,
        "attrs": attrs,
        "inputs": [_lt_dict(lt) for lt in op.inputs],
        "outputs": [_lt_dict(lt) for lt in op.outputs],
    }


def to_json(graph: Graph, *, indent: int | None = 2) -> str:
    """``graph`` in oneDNN's JSON graph format.

    A graph read with :func:`from_json` keeps its top-level fields (version,
    and ``input_ports``/``output_ports`` if the file had them, recomputed
    from the ops); other graphs get version :data:`JSON_VERSION` and the port
    lists. ``json.loads(to_json(from_json(f)))`` equals ``json.load(f)`` for
    oneDNN's dumps.

    Args:
      graph: a :class:`Graph` (finalized or not).
      indent: passed to ``json.dumps``.

    Returns:
      The JSON text.
    """
    header = graph._json_header
    if header is None:
        header = {
            "version": JSON_VERSION,
            "engine_kind": None,
            "fpmath_mode": None,
            "input_ports": None,
            "output_ports": None,
        }
    doc: dict[str, Any] = {}
    for key, value in header.items():
        if key == "engine_kind":
            value = graph.get_engine_kind().name
        elif key == "fpmath_mode":
            value = graph.get_fpmath_mode()
        elif key == "input_ports":
            value = graph.get_input_ids()
        elif key == "output_ports":
            value = graph.get_output_ids()
        doc[key] = value
    doc["graph"] = [_op_dict(op) for op in graph.get_ops()]
    return json.dumps(doc, indent=indent)
