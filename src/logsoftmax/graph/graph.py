"""Graph: ops connected by logical-tensor ids, finalized and partitioned."""

from __future__ import annotations

import heapq
from typing import Any

from .errors import InvalidArgumentError, InvalidGraphError
from .logical_tensor import LogicalTensor
from .op import Op
from .partition import Partition
from .types import UNKNOWN_DIM, EngineKind, PartitionPolicy

__all__ = ["Graph", "FPMATH_MODES"]

#: oneDNN's fpmath modes. Every mode allows strict float32 math, which is what
#: the kernels do, so the mode is recorded (and written to JSON) but changes
#: nothing.
FPMATH_MODES = ("strict", "bf16", "f16", "tf32", "any")


def _conflict(a: LogicalTensor, b: LogicalTensor) -> str | None:
    if a.get_data_type() is not b.get_data_type():
        return f"data type {b.get_data_type().name} vs {a.get_data_type().name}"
    if a.shape is not None and b.shape is not None:
        if len(a.shape) != len(b.shape) or any(
            x != y for x, y in zip(a.shape, b.shape) if UNKNOWN_DIM not in (x, y)
        ):
            return f"shape {list(b.shape)} vs {list(a.shape)}"
    return None


class Graph:
    """A computation graph of ops (``dnnl::graph::graph``).

    Lifecycle: create, ``add_op`` each op (checked on entry: ports, data
    types, attributes), ``finalize`` (no more ops; checks the graph has no
    cycle), then ``get_partitions``. Ops are connected by logical-tensor ids.
    The graph keeps copies of the ops; it owns nothing else.

    Args:
      engine_kind: :class:`EngineKind` of the partitions (default cpu; a gpu
        graph can be built and inspected, but its partitions are unsupported).
      fpmath_mode: one of :data:`FPMATH_MODES` (recorded, see there).

    Raises:
      InvalidArgumentError: a bad engine kind or fpmath mode.
    """

    def __init__(
        self,
        engine_kind: EngineKind | str = EngineKind.cpu,
        fpmath_mode: str = "strict",
    ) -> None:
        if isinstance(engine_kind, str) and engine_kind in EngineKind.__members__:
            engine_kind = EngineKind[engine_kind]
        if not isinstance(engine_kind, EngineKind) or engine_kind is EngineKind.any:
            raise InvalidArgumentError(
                f"could not create graph: engine kind {engine_kind!r} is not "
                "EngineKind.cpu or EngineKind.gpu"
            )
        if fpmath_mode not in FPMATH_MODES:
            raise InvalidArgumentError(
                f"could not create graph: fpmath_mode {fpmath_mode!r} is not one of "
                f"{', '.join(FPMATH_MODES)}"
            )
        self._engine_kind = engine_kind
        self._fpmath_mode = fpmath_mode
        self._ops: dict[int, Op] = {}
        self._tensors: dict[int, tuple[LogicalTensor, Op]] = {}
        self._producer: dict[int, Op] = {}
        self._finalized = False
        self._order: list[Op] | None = None
        # top-level JSON fields to write back (see json_format)
        self._json_header: dict[str, Any] | None = None

    # -- building -----------------------------------------------------------
    def add_op(self, op: Op) -> None:
        """Add (a copy of) ``op`` after checking it.

        Raises:
          GraphBuildError: wrong port count, unsupported or mixed data types,
            a bad or unknown attribute, an op id already in the graph
            (oneDNN silently keeps the first op; we refuse), a logical-tensor
            id used with another data type or shape, a tensor produced twice.
          InvalidGraphError: the graph is finalized.
          InvalidArgumentError: ``op`` is not an :class:`Op`.
        """
        if not isinstance(op, Op):
            raise InvalidArgumentError(
                f"could not add op: expected an Op, got {type(op).__name__}"
            )
        if self._finalized:
            raise InvalidGraphError(
                f"could not add {op.describe()} to the graph: the graph is "
                "finalized; add every op before finalize()",
                op_id=op.id,
                op_name=op.name,
                op_kind=op.kind.value,
            )
        if op.id in self._ops:
            old = self._ops[op.id]
            raise op._error(
                f"the graph already has an op with id {op.id} ({old.describe()}); "
                "op ids must be unique (oneDNN silently ignores the second op)"
            )
        op._validate()
        ports = [(False, i, lt) for i, lt in enumerate(op.inputs)]
        ports += [(True, i, lt) for i, lt in enumerate(op.outputs)]
        for is_out, i, lt in ports:
            seen = self._tensors.get(lt.get_id())
            if seen is not None:
                why = _conflict(seen[0], lt)
                if why is not None:
                    raise op._error(
                        f"{op.role(is_out, i)} is logical tensor {lt.get_id()} with "
                        f"{why} in {seen[1].describe()}; one id must describe one "
                        "tensor",
                        **op._port_kw(is_out, i),
                    )
            if is_out and lt.get_id() in self._producer:
                raise op._error(
                    f"{op.role(is_out, i)} (logical tensor {lt.get_id()}) is "
                    f"already produced by {self._producer[lt.get_id()].describe()}; "
                    "a tensor has one producer",
                    **op._port_kw(is_out, i),
                )
        op = op._copy()
        self._ops[op.id] = op
        for is_out, i, lt in ports:
            self._tensors.setdefault(lt.get_id(), (lt, op))
            if is_out:
                self._producer[lt.get_id()] = op

    def finalize(self) -> None:
        """Finish building: no op can be added afterwards.

        Raises:
          InvalidGraphError: the ops form a cycle.
        """
        if self._finalized:
            return
        self._order = self._toposort()
        self._finalized = True

    def is_finalized(self) -> bool:
        """Whether :meth:`finalize` was called."""
        return self._finalized

    def _toposort(self) -> list[Op]:
        ops = list(self._ops.values())
        index = {op.id: k for k, op in enumerate(ops)}
        deps = {op.id: set() for op in ops}
        users: dict[int, list[int]] = {op.id: [] for op in ops}
        for op in ops:
            for lt in op.inputs:
                prod = self._producer.get(lt.get_id())
                if prod is not None and op.id not in users[prod.id]:
                    deps[op.id].add(prod.id)
                    users[prod.id].append(op.id)
        heap = [index[i] for i, d in deps.items() if not d]
        heapq.heapify(heap)
        order = []
        while heap:
            op = ops[heapq.heappop(heap)]
            order.append(op)
            for u in users[op.id]:
                deps[u].discard(op.id)
                if not deps[u]:
                    heapq.heappush(heap, index[u])
        if len(order) != len(ops):
            left = sorted(index[i] for i, d in deps.items() if d)
            stuck = [ops[k].describe() for k in left]
            raise InvalidGraphError(
                "could not finalize the graph: these ops form a cycle through "
                f"their logical tensors: {', '.join(stuck)}"
            )
        return order

    # -- queries ------------------------------------------------------------
    def get_partitions(
        self, policy: PartitionPolicy = PartitionPolicy.fusion
    ) -> list[Partition]:
        """The graph's partitions, in topological order.

        Each op of a kind this package implements is one supported partition;
        each other op is one unsupported partition (``is_supported()`` False).
        ``policy`` is accepted for oneDNN compatibility; the supported ops do
        not fuse, so both policies give one op per partition.

        Raises:
          InvalidGraphError: the graph is not finalized.
        """
        if not isinstance(policy, PartitionPolicy):
            raise InvalidArgumentError(
                f"could not get partitions: policy {policy!r} is not a PartitionPolicy"
            )
        if not self._finalized:
            raise InvalidGraphError(
                "could not get partitions: the graph is not finalized; call "
                "finalize() first"
            )
        cpu = self._engine_kind is EngineKind.cpu
        return [
            Partition(k, op, self._engine_kind, cpu and op._is_implemented())
            for k, op in enumerate(self._order)
        ]

    def get_ops(self) -> list[Op]:
        """The ops, in the order they were added (the graph's copies)."""
        return list(self._ops.values())

    def get_engine_kind(self) -> EngineKind:
        """The engine kind the graph was created for."""
        return self._engine_kind

    def get_fpmath_mode(self) -> str:
        """The fpmath mode (recorded; see :data:`FPMATH_MODES`)."""
        return self._fpmath_mode

    def get_input_ids(self) -> list[int]:
        """Ids of the graph's inputs: tensors consumed but produced by no op."""
        ids = []
        for op in self._ops.values():
            for lt in op.inputs:
                if lt.get_id() not in self._producer and lt.get_id() not in ids:
                    ids.append(lt.get_id())
        return ids

    def get_output_ids(self) -> list[int]:
        """Ids of the graph's outputs: tensors produced but consumed by no op."""
        consumed = {lt.get_id() for op in self._ops.values() for lt in op.inputs}
        return [
            lt.get_id()
            for op in self._ops.values()
            for lt in op.outputs
            if lt.get_id() not in consumed
        ]

    def get_logical_tensor(self, tid: int) -> LogicalTensor:
        """The logical tensor with id ``tid`` as first declared by an op.

        Raises:
          InvalidArgumentError: no op uses ``tid``.
        """
        try:
            return self._tensors[tid][0]
        except KeyError:
            raise InvalidArgumentError(
                f"could not find logical tensor {tid!r} in the graph (ids: "
                f"{sorted(self._tensors)})"
            ) from None

    def __repr__(self) -> str:
        return (
            f"Graph({self._engine_kind}, ops={len(self._ops)}, "
            f"finalized={self._finalized})"
        )
