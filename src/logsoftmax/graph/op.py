"""Op: one operation of a graph (kind, attributes, input and output ports),
and the table of op kinds this package implements.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .errors import GraphBuildError, InvalidArgumentError
from .logical_tensor import LogicalTensor
from .types import AttrType, DataType, OpAttr, OpKind

__all__ = ["Op", "OpDef", "SUPPORTED_OPS", "COMPUTE_TYPES"]

#: data types the supported ops compute in (all ports share one)
COMPUTE_TYPES = (DataType.f32, DataType.bf16, DataType.f16)


@dataclass(frozen=True)
class OpDef:
    """What this package knows about an op kind it implements.

    Attributes:
      inputs, outputs: port roles in index order.
      attrs: attribute name -> (value type, default).
      function: name of the functional front-door function that executes it.
      inplace: (input index, output index) that may share memory.
      mode_values: accepted values of the ``mode`` attribute; values listed in
        ``unsupported_modes`` are valid but not implemented (unsupported
        partition).
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, tuple[AttrType, Any]]
    function: str
    inplace: tuple[int, int] = (0, 0)
    mode_values: tuple[str, ...] = ()
    unsupported_modes: tuple[str, ...] = field(default=())


# oneDNN's defaults: axis -1 for the LogSoftmax pair, 1 for the SoftMax pair.
SUPPORTED_OPS: dict[OpKind, OpDef] = {
    OpKind.LogSoftmax: OpDef(
        ("src",), ("dst",), {"axis": (AttrType.s64, -1)}, "log_softmax"
    ),
    OpKind.LogSoftmaxBackward: OpDef(
        ("diff_dst", "dst"),
        ("diff_src",),
        {"axis": (AttrType.s64, -1)},
        "log_softmax_backward",
    ),
    OpKind.SoftMax: OpDef(
        ("src",),
        ("dst",),
        {"axis": (AttrType.s64, 1), "mode": (AttrType.string, "none")},
        "softmax",
        mode_values=("none", "inf_as_zero"),
        # inf_as_zero (all -inf rows give 0, not NaN) has no functional
        # counterpart, so an op using it forms an unsupported partition.
        unsupported_modes=("inf_as_zero",),
    ),
    OpKind.SoftMaxBackward: OpDef(
        ("diff_dst", "dst"),
        ("diff_src",),
        {"axis": (AttrType.s64, 1)},
        "softmax_backward",
    ),
}


def _kind(kind) -> OpKind:
    if isinstance(kind, OpKind):
        return kind
    if isinstance(kind, str):
        try:
            return OpKind[kind]
        except KeyError:
            pass
    raise InvalidArgumentError(
        f"could not create op: kind {kind!r} is not an OpKind; expected e.g. "
        "OpKind.LogSoftmaxBackward (see OpKind for oneDNN's kinds)"
    )


def _attr_name(attr) -> str:
    if isinstance(attr, OpAttr):
        return attr.name
    if isinstance(attr, str):
        return attr
    raise InvalidArgumentError(
        f"could not set attribute: {attr!r} is neither an OpAttr nor a name"
    )


class Op:
    """One operation of a graph (``dnnl::graph::op``).

    An op has an id (unique in its graph), a kind, a name used in messages,
    attributes, and input and output ports: logical tensors in index order.
    Ops are connected by logical-tensor ids: an output of one op feeds every
    op that has an input with the same id. ``Graph.add_op`` copies the op, so
    later changes to it do not affect the graph.

    Overloads, as in oneDNN::

        Op(id, kind, name="")
        Op(id, kind, inputs, outputs, name="")

    Ports for this package's kinds (index order): ``LogSoftmax`` and
    ``SoftMax``: in ``src``, out ``dst``; ``LogSoftmaxBackward`` and
    ``SoftMaxBackward``: in ``diff_dst``, ``dst``, out ``diff_src``.

    Args:
      id: non-negative integer.
      kind: :class:`OpKind` (or its name).
      name: a name for messages and JSON dumps.
      inputs, outputs: lists of :class:`LogicalTensor`.

    Raises:
      InvalidArgumentError: a bad id or kind, a port that is not a
        LogicalTensor.
    """

    def __init__(
        self,
        id: int,
        kind: OpKind | str,
        name: str | Sequence[LogicalTensor] = "",
        inputs: Sequence[LogicalTensor] | str | None = None,
        outputs: Sequence[LogicalTensor] | None = None,
    ) -> None:
        # the (id, kind, inputs, outputs, name) overload
        if not isinstance(name, str):
            inputs, outputs, name = name, inputs, outputs or ""
            if isinstance(outputs, str):
                raise InvalidArgumentError(
                    "could not create op: Op(id, kind, inputs, outputs, name) "
                    "needs a list of output logical tensors"
                )
        if isinstance(id, (bool, np.bool_)) or not hasattr(id, "__index__"):
            raise InvalidArgumentError(
                f"could not create op: id {id!r} is not an integer"
            )
        id = operator.index(id)
        if id < 0:
            raise InvalidArgumentError(f"could not create op: id {id} is negative")
        self._id = id
        self._kind = _kind(kind)
        self._name = str(name)
        self._attrs: dict[str, Any] = {}
        self._inputs: list[LogicalTensor] = []
        self._outputs: list[LogicalTensor] = []
        self.add_inputs(inputs or ())
        self.add_outputs(outputs or ())

    # -- building ---------------------------------------------------------
    def set_attr(self, attr: OpAttr | str, value: Any) -> "Op":
        """Set attribute ``attr`` to ``value``; returns the op.

        Values are checked against the op kind when the op is added to a
        graph (``Graph.add_op``), not here.
        """
        if isinstance(value, np.generic):
            value = value.item()
        self._attrs[_attr_name(attr)] = value
        return self

    def add_input(self, lt: LogicalTensor) -> "Op":
        """Append an input port (index order matters: see the class doc)."""
        self._inputs.append(self._port(lt, "input"))
        return self

    def add_inputs(self, lts: Sequence[LogicalTensor]) -> "Op":
        """Append several input ports."""
        for lt in lts:
            self.add_input(lt)
        return self

    def add_output(self, lt: LogicalTensor) -> "Op":
        """Append an output port."""
        self._outputs.append(self._port(lt, "output"))
        return self

    def add_outputs(self, lts: Sequence[LogicalTensor]) -> "Op":
        """Append several output ports."""
        for lt in lts:
            self.add_output(lt)
        return self

    def _port(self, lt, what: str) -> LogicalTensor:
        if not isinstance(lt, LogicalTensor):
            raise InvalidArgumentError(
                f"could not add {what} to {self.describe()}: expected a "
                f"LogicalTensor, got {type(lt).__name__}"
            )
        return lt

    # -- queries ----------------------------------------------------------
    def get_id(self) -> int:
        """The op's id."""
        return self._id

    def get_kind(self) -> OpKind:
        """The op's kind."""
        return self._kind

    def get_name(self) -> str:
        """The op's name."""
        return self._name

    def get_attr(self, attr: OpAttr | str, default: Any = None) -> Any:
        """The attribute's value, or ``default`` if it is not set."""
        return self._attrs.get(_attr_name(attr), default)

    def get_attrs(self) -> dict[str, Any]:
        """A copy of the attributes, by name, in the order they were set."""
        return dict(self._attrs)

    def get_input_logical_tensors(self) -> list[LogicalTensor]:
        """The input ports, in index order."""
        return list(self._inputs)

    def get_output_logical_tensors(self) -> list[LogicalTensor]:
        """The output ports, in index order."""
        return list(self._outputs)

    @property
    def id(self) -> int:
        """The op's id."""
        return self._id

    @property
    def kind(self) -> OpKind:
        """The op's kind."""
        return self._kind

    @property
    def name(self) -> str:
        """The op's name."""
        return self._name

    @property
    def inputs(self) -> tuple[LogicalTensor, ...]:
        """The input ports, in index order."""
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[LogicalTensor, ...]:
        """The output ports, in index order."""
        return tuple(self._outputs)

    def describe(self) -> str:
        """``op 'lsm_bwd' (id 0, LogSoftmaxBackward)``: for messages."""
        return f"op {self._name!r} (id {self._id}, {self._kind.value})"

    def port_role(self, is_output: bool, index: int) -> tuple[str, str | None]:
        """``("input 1", "dst")``: a port's index and its role (None if the
        kind is not one this package implements)."""
        d = SUPPORTED_OPS.get(self._kind)
        roles = () if d is None else (d.outputs if is_output else d.inputs)
        what = "output" if is_output else "input"
        return f"{what} {index}", roles[index] if index < len(roles) else None

    def role(self, is_output: bool, index: int) -> str:
        """``input 1 (dst)``: a port's index and role, for messages."""
        port, role = self.port_role(is_output, index)
        return port if role is None else f"{port} ({role})"

    def _copy(self) -> "Op":
        op = Op(self._id, self._kind, self._name, self._inputs, self._outputs)
        op._attrs = dict(self._attrs)
        return op

    # -- validation (called by Graph.add_op) ----------------------------------
    def _error(self, problem: str, **kw) -> GraphBuildError:
        return GraphBuildError(
            f"could not add {self.describe()} to the graph: {problem}",
            op_id=self._id,
            op_name=self._name,
            op_kind=self._kind.value,
            **kw,
        )

    def _port_kw(self, is_out: bool, i: int) -> dict:
        port, role = self.port_role(is_out, i)
        return {"port": port, "role": role}

    def _validate(self) -> None:
        """Check ports, data types and attributes of a supported op kind.

        Raises:
          GraphBuildError: naming the op, the port and the problem.
        """
        d = SUPPORTED_OPS.get(self._kind)
        if d is None:
            return  # unknown schema: the op forms an unsupported partition
        for is_out, ports, roles in (
            (False, self._inputs, d.inputs),
            (True, self._outputs, d.outputs),
        ):
            what = "output" if is_out else "input"
            if len(ports) != len(roles):
                raise self._error(
                    f"it has {len(ports)} {what}(s), expected {len(roles)} "
                    f"({', '.join(roles)})"
                )
        first = self._inputs[0].get_data_type()
        ports = [(False, i, lt) for i, lt in enumerate(self._inputs)]
        ports += [(True, i, lt) for i, lt in enumerate(self._outputs)]
        for is_out, i, lt in ports:
            role = self.role(is_out, i)
            if lt.get_data_type() not in COMPUTE_TYPES:
                raise self._error(
                    f"{role} (logical tensor {lt.get_id()}) has unsupported data type "
                    f"{lt.get_data_type().name}; expected f32, bf16 or f16",
                    **self._port_kw(is_out, i),
                )
            if lt.get_data_type() is not first:
                raise self._error(
                    f"{role} (logical tensor {lt.get_id()}) is "
                    f"{lt.get_data_type().name}, expected {first.name} (the data type of {self.role(False, 0)}; all "
                    "ports must share one data type)",
                    **self._port_kw(is_out, i),
                )
        in_ids = {lt.get_id(): i for i, lt in enumerate(self._inputs)}
        for j, lt in enumerate(self._outputs):
            if lt.get_id() in in_ids:
                raise self._error(
                    f"{self.role(True, j)} has id {lt.get_id()}, the same as "
                    f"{self.role(False, in_ids[lt.get_id()])}; an op cannot read and "
                    "write one logical tensor (for in-place execution pass the "
                    "same buffer to both at execute time)"
                )
        for name, value in self._attrs.items():
            if name not in d.attrs:
                raise self._error(
                    f"unknown attribute {name!r}; {self._kind.value} takes "
                    f"{', '.join(d.attrs)}"
                )
            atype = d.attrs[name][0]
            if atype is AttrType.s64 and (
                isinstance(value, bool) or not isinstance(value, int)
            ):
                raise self._error(
                    f"attribute {name} is {value!r} ({type(value).__name__}); "
                    "expected an integer (s64)"
                )
            if atype is AttrType.string:
                if not isinstance(value, str) or value not in d.mode_values:
                    raise self._error(
                        f"attribute {name} is {value!r}; expected one of "
                        f"{', '.join(repr(v) for v in d.mode_values)}"
                    )

    def _is_implemented(self) -> bool:
        d = SUPPORTED_OPS.get(self._kind)
        if d is None:
            return False
        mode = self._attrs.get("mode", d.attrs.get("mode", (None, None))[1])
        return mode not in d.unsupported_modes

    def _axis(self) -> int:
        d = SUPPORTED_OPS[self._kind]
        return self._attrs.get("axis", d.attrs["axis"][1])

    def __repr__(self) -> str:
        return (
            f"Op({self._id}, {self._kind}, {self._name!r}, inputs="
            f"{[lt.get_id() for lt in self._inputs]}, outputs="
            f"{[lt.get_id() for lt in self._outputs]}, attrs={self._attrs})"
        )
