"""``logsoftmax graph run``: execute oneDNN JSON graph cases and check them.

A thin driver in the spirit of benchdnn's graph driver::

    logsoftmax graph run CASE.json [--dt bf16] [--in-shapes 0:8x384x1024*acb]
                                   [--op-attrs 0:axis:2] [--inplace]
    logsoftmax graph run --case logsoftmax_bwd      # a bundled case
    logsoftmax graph list                           # the bundled cases

It rewrites the case as asked (``--dt``: every data type; ``--in-shapes
ID:SHAPE[*TAG]``: an input's dims, with oneDNN's plain format tag for its
strides, propagated to the op's other same-shaped inputs and to its outputs;
``--op-attrs OPID:ATTR:VALUE``), builds the graph through
:func:`logsoftmax.graph.from_json`, compiles every partition, fills the
inputs (``dst`` of a backward op is a true forward output), executes, checks
every output against the float64 reference backend in units of the data
type's eps, and prints the median time and GB/s. Exit status 1 on any failure
(a check, an unsupported partition, a bad case), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

import numpy as np

__all__ = ["main", "rewrite"]

# Accuracy limits in eps of the data type. bf16/f16 results are the float32
# result rounded once (API.md), i.e. <= 0.5 eps plus float32 noise; float32 is
# held to the documented bounds (4 eps forward, 8 backward, where
# ``diff_dst - exp(dst) * sum`` cancels).
DATA_TYPES = ("f32", "bf16", "f16")
LIMITS = {
    "f32": {"log_softmax": 4.0, "softmax": 4.0,
            "log_softmax_backward": 8.0, "softmax_backward": 8.0},
    "bf16": 1.0,
    "f16": 1.0,
}


def limit(dtname: str, function: str) -> float:
    """The accuracy limit (eps) for ``function`` computed in ``dtname``."""
    lim = LIMITS[dtname]
    return lim[function] if isinstance(lim, dict) else lim


# -- rewriting the JSON document (benchdnn's knobs) ------------------------------
def _parse_shape(text: str, spec: str) -> list[int]:
    try:
        dims = [int(d) for d in text.split("x")]
    except ValueError:
        dims = []
    if not dims or any(d < 0 for d in dims):
        raise ValueError(
            f"--in-shapes {spec!r}: shape {text!r} is not like 8x384x1024 "
            "(non-negative dims joined by 'x')"
        )
    return dims


def _lts(doc):
    for op in doc["graph"]:
        for lt in op.get("inputs", []) + op.get("outputs", []):
            yield op, lt


def _items(values) -> list[str]:
    """Command-line items, ``+`` joining several in one argument."""
    return [s for v in values for s in v.split("+") if s]


def _follow(lt: dict, shape: list[int], tag: str | None) -> tuple[list, list]:
    """New (dims, strides) for JSON logical tensor ``lt`` reshaped to ``shape``:
    laid out as format ``tag`` if given, else in ``lt``'s own memory order
    (when its strides say one), else row-major."""
    from logsoftmax import formats
    from logsoftmax.graph import strides_from_tag

    if tag:
        return shape, list(strides_from_tag(shape, tag))
    if len(lt["stride"]) == len(shape) == len(lt["shape"]):
        order = formats.memory_order(lt["stride"])
        return shape, list(formats.dense_strides(shape, order))
    return shape, list(formats.dense_strides(shape))


def _new_shapes(doc: dict, in_shapes) -> dict[int, tuple[list, list]]:
    """id -> (dims, strides) for every ``--in-shapes`` item and the tensors
    that follow it (see :func:`rewrite`)."""
    new: dict[int, tuple[list, list]] = {}
    tags: dict[int, str] = {}
    for spec in _items(in_shapes):
        tid, sep, rest = spec.partition(":")
        if not sep or not tid.strip().isdigit():
            raise ValueError(f"--in-shapes {spec!r}: expected ID:SHAPE[*TAG]")
        shape_text, _, tag = rest.partition("*")
        shape = _parse_shape(shape_text, spec)
        tid = int(tid)
        old = [lt for _, lt in _lts(doc) if lt["id"] == tid]
        if not old:
            raise ValueError(f"--in-shapes {spec!r}: no logical tensor has id {tid}")
        new[tid] = _follow(old[0], shape, tag)
        if tag:
            tags[tid] = tag
    for op in doc["graph"]:  # file order is oneDNN's topological order
        ins = op.get("inputs", [])
        changed = [lt for lt in ins if lt["id"] in new]
        if not changed:
            continue
        first = changed[0]
        shape, tag = new[first["id"]][0], tags.get(first["id"])
        for lt in ins + op.get("outputs", []):
            if lt["id"] not in new and lt["shape"] == first["shape"]:
                new[lt["id"]] = _follow(lt, shape, tag)
                if tag:
                    tags[lt["id"]] = tag
    return new


#: --op-attrs value parsers, by oneDNN attribute type
_ATTR_PARSERS = {
    "s64": int,
    "s64[]": lambda t: [int(v) for v in t.split("x")],
    "f32": float,
    "f32[]": lambda t: [float(v) for v in t.split("x")],
    "bool": lambda t: {"true": True, "false": False, "1": True, "0": False}[t.lower()],
    "string": str,
}


def _set_attr(doc: dict, spec: str) -> None:
    """Apply one ``OPID:ATTR:VALUE`` item to ``doc``."""
    from logsoftmax.graph import OpAttr

    parts = spec.split(":", 2)
    if len(parts) != 3 or not parts[0].strip().isdigit():
        raise ValueError(f"--op-attrs {spec!r}: expected OPID:ATTR:VALUE")
    oid, name, text = int(parts[0]), parts[1], parts[2]
    ops = [op for op in doc["graph"] if op.get("id") == oid]
    if not ops:
        raise ValueError(f"--op-attrs {spec!r}: no op has id {oid}")
    if name not in OpAttr.__members__ or OpAttr[name].type is None:
        raise ValueError(f"--op-attrs {spec!r}: unknown attribute {name!r}")
    atype = OpAttr[name].type.value
    try:
        value: Any = _ATTR_PARSERS[atype](text)
    except (ValueError, KeyError):
        raise ValueError(
            f"--op-attrs {spec!r}: value {text!r} is not a valid {atype}"
        ) from None
    for op in ops:
        op.setdefault("attrs", {})[name] = {"type": atype, "value": value}


def rewrite(
    doc: dict,
    dt: str | None = None,
    in_shapes: list[str] = (),
    op_attrs: list[str] = (),
) -> dict:
    """A copy of JSON document ``doc`` with benchdnn-style rewrites applied.

    Args:
      doc: a parsed oneDNN JSON graph.
      dt: data type name for every logical tensor (``f32``, ``bf16``, ``f16``).
      in_shapes: ``ID:SHAPE[*TAG]`` items (``+`` joins several in one item):
        new dims for logical tensor ID, strides from format tag TAG (else the
        tensor's previous memory order, else row-major). The op's other
        inputs that had the same shape, and its outputs, follow: with TAG's
        layout if one was given, else in their own memory order; and so do
        the ops downstream.
      op_attrs: ``OPID:ATTR:VALUE`` items (``+`` joins several): set an
        attribute, typed as oneDNN types it (s64 ``2``, s64[] ``1x2``, f32,
        bool ``true``/``false``, string).

    Returns:
      The rewritten document (``doc`` is not modified).

    Raises:
      ValueError: a malformed item, or an id no op uses.
    """
    from logsoftmax.graph import DataType

    doc = copy.deepcopy(doc)
    if dt is not None:
        DataType.from_name(dt)
        for _, lt in _lts(doc):
            lt["dtype"] = dt
    new = _new_shapes(doc, in_shapes)
    for _, lt in _lts(doc):
        if lt["id"] in new:
            lt["shape"], lt["stride"] = (list(v) for v in new[lt["id"]])
    for spec in _items(op_attrs):
        _set_attr(doc, spec)
    return doc


# -- running ----------------------------------------------------------------------
def _fill(role: str, kind: str, lt, axis: int, rng) -> np.ndarray:
    """Float64 input data for a port; ``dst`` of a backward op is a true
    forward output (log-probabilities or probabilities) of random logits."""
    import logsoftmax

    shape = lt.shape
    if role == "diff_dst":
        return rng.uniform(-1.0, 1.0, shape)
    x = rng.uniform(-5.0, 5.0, shape)
    if role == "dst":
        with logsoftmax.use_backend("reference"):
            log = kind.startswith("Log")
            fn = logsoftmax.log_softmax if log else logsoftmax.softmax
            return fn(x, axis)
    return x


def _run(args) -> int:
    from logsoftmax import graph as g

    path = g.case_path(args.case) if args.case else args.path
    doc = rewrite(g.load_json(path), args.dt, args.in_shapes or (), args.op_attrs or ())
    graph = g.from_json(doc)
    eng = g.Engine(g.EngineKind.cpu)
    strm = g.Stream(eng)
    rng = np.random.default_rng(args.seed)
    parts = graph.get_partitions()
    ops = {op.id: op for op in graph.get_ops()}
    print(f"case: {path}  partitions: {len(parts)}")
    failed = False
    buffers: dict[int, Any] = {}  # logical-tensor id -> g.Tensor, shared downstream
    for p in parts:
        op = ops[p.get_ops()[0]]
        if not p.is_supported():
            print(f"{p.get_id()}: UNSUPPORTED {op.describe()}")
            failed = True
            continue
        cp = p.compile(p.get_input_ports(), p.get_output_ports(), eng)
        ins = _inputs(p, cp, op, buffers, eng, rng)
        originals = [t.numpy().copy() for t in ins]
        inplace = dict(cp.get_inplace_ports()) if args.inplace else {}
        outs = _outputs(p, cp, inplace, buffers, eng)
        cp.execute(strm, ins, outs)
        strm.wait()
        clt = outs[0].get_logical_tensor()
        print(
            f"{p.get_id()}: {op.kind.value} {op.name!r} axis={cp.axis} "
            f"{clt.get_data_type().name} shape={list(clt.shape)} "
            f"strides={ins[0].get_logical_tensor().get_strides()}"
            f" in-place={'yes' if inplace else 'no'}"
        )
        failed |= not _check(op, cp, originals, outs[0])
        if args.repeats > 0:
            _time(cp, strm, ins, outs, args.repeats)
    print("FAILED" if failed else "PASSED")
    return 1 if failed else 0


def _inputs(p, cp, op, buffers: dict, eng, rng) -> list:
    """The partition's input tensors: an upstream output, or filled here."""
    from logsoftmax import graph as g

    ins = []
    for lt, role in zip(p.get_input_ports(), g.SUPPORTED_OPS[op.kind].inputs):
        tid = lt.get_id()
        if tid not in buffers:
            clt = cp.query_logical_tensor(tid)
            t = g.Tensor(clt, eng)
            t.numpy()[...] = _fill(role, op.kind.value, clt, cp.axis, rng)
            buffers[tid] = t
        ins.append(buffers[tid])
    return ins


def _outputs(p, cp, inplace: dict, buffers: dict, eng) -> list:
    """The partition's output tensors: over an input's buffer where running
    in place, else new ones filled with NaN (unwritten elements fail)."""
    from logsoftmax import graph as g

    outs = []
    for lt in p.get_output_ports():
        tid = lt.get_id()
        clt = cp.query_logical_tensor(tid)
        src = next((i for i, o in inplace.items() if o == tid), None)
        if src is not None:
            t = g.Tensor(clt, eng, buffers[src].get_data_handle())
        else:
            t = g.Tensor(clt, eng)
            t.numpy()[...] = np.nan
        buffers[tid] = t
        outs.append(t)
    return outs


def _check(op, cp, originals: list, out) -> bool:
    """Print and return whether ``out`` is within :func:`limit` of the float64
    reference backend, with every special value where the reference has it."""
    import logsoftmax
    from logsoftmax import graph as g
    from logsoftmax.accuracy import eps_errors

    function = g.SUPPORTED_OPS[op.kind].function
    dtname = out.get_logical_tensor().get_data_type().name
    with logsoftmax.use_backend("reference"):
        ref = getattr(logsoftmax, function)(*originals, cp.axis, dtype=np.float64)
    errs = eps_errors(out.numpy(), ref, dtname)
    err = float(errs.max()) if errs.size else 0.0
    bad = int(np.count_nonzero(np.isinf(errs)))  # special-value mismatches
    lim = limit(dtname, function)
    ok = err <= lim and bad == 0
    print(
        f"   accuracy: max err {err:.3g} eps (limit {lim:g})"
        + (f", {bad} special-value mismatches" if bad else "")
        + f"  {'PASSED' if ok else 'FAILED'}"
    )
    return ok


def _time(cp, strm, ins: list, outs: list, repeats: int) -> None:
    """Print the median and min time of ``repeats`` executions (the driver's
    timing, one warm-up excluded) and the GB/s of the bytes the tensors span."""
    from logsoftmax.driver.perf import measure

    def run():
        cp.execute(strm, ins, outs)
        strm.wait()

    timing = measure({"execute": run}, fix_times=repeats)["execute"]
    med = timing.median_ms * 1e-3
    nbytes = sum(t.get_logical_tensor().get_mem_size() for t in ins + outs)
    print(
        f"   perf: median {timing.median_ms:.3f} ms (min {timing.min_ms:.3f} ms, "
        f"{repeats} runs)  {nbytes / med / 1e9:.2f} GB/s"
    )


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="logsoftmax graph",
        description="Run oneDNN JSON graph cases (benchdnn graph-driver style).",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="execute a case and check it against the reference"
    )
    run.add_argument("path", nargs="?", help="a oneDNN JSON graph file")
    run.add_argument("--case", help="a bundled case instead of a path (see `list`)")
    run.add_argument("--dt", choices=DATA_TYPES, help="rewrite every data type")
    run.add_argument(
        "--in-shapes",
        action="append",
        metavar="ID:SHAPE[*TAG]",
        help="rewrite an input's dims (and strides via a format tag, e.g. *acb)",
    )
    run.add_argument(
        "--op-attrs",
        action="append",
        metavar="OPID:ATTR:VALUE",
        help="set an op attribute, e.g. 0:axis:2",
    )
    run.add_argument(
        "--inplace",
        action="store_true",
        help="write outputs over their in-place inputs",
    )
    run.add_argument("--repeats", type=int, default=10, help="timed runs (0: none)")
    run.add_argument("--seed", type=int, default=0, help="seed of the input data")
    run.add_argument(
        "--backend", help="force a backend for execution (default: by array type)"
    )
    sub.add_parser("list", help="list the bundled cases")
    return ap


def main(argv: list[str]) -> int:
    """Entry point of ``logsoftmax graph``; returns the exit status."""
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    from logsoftmax import graph as g

    if args.command == "list":
        for name in g.case_names():
            print(name)
        return 0
    if (args.path is None) == (args.case is None):
        print("logsoftmax graph run: give a CASE.json path or --case NAME (not both)",
              file=sys.stderr)
        return 2
    try:
        if args.backend:
            import logsoftmax

            with logsoftmax.use_backend(args.backend):
                return _run(args)
        return _run(args)
    except (g.GraphError, ValueError, OSError, KeyError) as e:
        print(f"logsoftmax graph run: error: {e}", file=sys.stderr)
        return 1
