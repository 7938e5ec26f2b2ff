"""Partition and CompiledPartition: the unit of compilation and execution.

Compilation checks shapes, layouts and the axis once and fixes every port's
logical tensor; execution then only matches buffers against them, builds
strided numpy views (no copies) and calls the functional front door
(``logsoftmax.log_softmax_backward(diff_dst, dst, axis, out=diff_src)``...),
so the graph API has no kernels or numerics of its own.
"""

from __future__ import annotations

import collections
import threading
from typing import Sequence

import numpy as np

from .. import _api
from .engine import Engine, Stream
from .errors import CompileError, ExecuteError, InvalidArgumentError
from .logical_tensor import LogicalTensor, dense_strides
from .op import SUPPORTED_OPS, Op
from .tensor import Tensor
from .types import UNKNOWN_DIM, EngineKind, LayoutType

__all__ = [
    "Partition",
    "CompiledPartition",
    "compile_cache_info",
    "compile_cache_clear",
]

# -- compile cache ------------------------------------------------------------
# Compiled partitions are immutable, so identical compilations share one
# object. Keyed by everything that determines the result: partition id,
# engine kind, the op (id, kind, name, attributes) and every port's logical
# tensor (id, dtype, dims, strides, layout, property).
_CACHE_SIZE = 256
_cache: "collections.OrderedDict[tuple, CompiledPartition]" = collections.OrderedDict()
_cache_lock = threading.Lock()
_cache_stats = {"hits": 0, "misses": 0}


def compile_cache_info() -> dict[str, int]:
    """Compile-cache statistics: ``hits``, ``misses``, ``size``, ``capacity``."""
    with _cache_lock:
        return {**_cache_stats, "size": len(_cache), "capacity": _CACHE_SIZE}


def compile_cache_clear() -> None:
    """Empty the compile cache and reset its statistics."""
    with _cache_lock:
        _cache.clear()
        _cache_stats.update(hits=0, misses=0)


def _is_compact(shape, strides) -> bool:
    """Whether a layout covers exactly ``prod(shape)`` elements, once each."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    acc = 1
    for s, n in dims:
        if s != acc:
            return False
        acc *= n
    return True


def _self_overlaps(shape, strides) -> bool:
    """Conservative test: True if two indices may map to one element."""
    if 0 in shape:
        return False
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    extent = 1  # elements spanned by the dims seen so far
    for s, n in dims:
        if s < extent:
            return True
        extent = s * (n - 1) + extent
    return False



def _op_error(cls, action: str, op, problem: str, is_out: bool | None, i: int):
    """``cls("could not <action>: <op> [<port role>] <problem>")`` naming op and port."""
    kw = {}
    where = op.describe()
    if is_out is not None:
        port, role = op.port_role(is_out, i)
        kw = {"port": port, "role": role}
        where += f" {op.role(is_out, i)}"
    return cls(
        f"could not {action}: {where} {problem}",
        op_id=op.id,
        op_name=op.name,
        op_kind=op.kind.value,
        **kw,
    )

class Partition:
    """A group of ops the library compiles and executes as one unit
    (``dnnl::graph::partition``).

    ``Graph.get_partitions`` returns partitions in topological order. Each op
    of a kind this package implements forms its own partition (the supported
    ops do not fuse with each other); each op of any other kind forms an
    unsupported partition, which can be inspected but not compiled. The input
    and output ports are the logical tensors of the op as added to the graph
    (dims may be unknown until compilation).
    """

    def __init__(
        self,
        pid: int,
        op: Op,
        engine_kind: EngineKind,
        supported: bool,
    ) -> None:
        self._id = pid
        self._op = op
        self._engine_kind = engine_kind
        self._supported = supported

    def get_id(self) -> int:
        """The partition's id (its index in ``get_partitions()``)."""
        return self._id

    def is_supported(self) -> bool:
        """Whether this package can compile and execute the partition."""
        return self._supported

    def get_ops(self) -> list[int]:
        """Ids of the ops in the partition."""
        return [self._op.id]

    def get_ops_num(self) -> int:
        """Number of ops in the partition."""
        return 1

    def get_input_ports(self) -> list[LogicalTensor]:
        """The partition's inputs, in the op's port order."""
        return list(self._op.inputs)

    def get_output_ports(self) -> list[LogicalTensor]:
        """The partition's outputs, in the op's port order."""
        return list(self._op.outputs)

    def get_engine_kind(self) -> EngineKind:
        """The engine kind the partition was created for."""
        return self._engine_kind

    # -- compile ------------------------------------------------------------
    def _error(self, problem: str, is_out: bool | None = None, i: int = 0):
        return _op_error(
            CompileError, f"compile partition {self._id}", self._op, problem, is_out, i
        )

    def _match(self, given, ports, is_out: bool) -> list[LogicalTensor]:
        """Order ``given`` like ``ports`` (matched by id)."""
        what = "output" if is_out else "input"
        if not isinstance(given, (list, tuple)) or not all(
            isinstance(lt, LogicalTensor) for lt in given
        ):
            raise self._error(
                f"got {what}s {given!r}; expected a list of LogicalTensor"
            )
        by_id: dict[int, LogicalTensor] = {}
        for lt in given:
            if lt.get_id() in by_id:
                raise self._error(
                    f"got logical tensor {lt.get_id()} twice among {what}s"
                )
            by_id[lt.get_id()] = lt
        want = [p.get_id() for p in ports]
        if sorted(by_id) != sorted(want):
            raise self._error(
                f"got {what} logical tensors with ids {sorted(by_id)}, expected "
                f"ids {want} ("
                + ", ".join(self._op.role(is_out, i) for i in range(len(want)))
                + ")"
            )
        return [by_id[i] for i in want]

    def compile(
        self,
        inputs: Sequence[LogicalTensor],
        outputs: Sequence[LogicalTensor],
        engine: Engine,
    ) -> "CompiledPartition":
        """Compile the partition for concrete input (and output) logical tensors.

        Inputs need known dims and strided layouts with known strides. Output
        dims and strides may be unknown (-1, unknown rank, or layout ``any``):
        they are inferred from input 0 (its dims; its strides when they are
        compact, else row-major). Query the result with
        ``CompiledPartition.query_logical_tensor``.

        Args:
          inputs: logical tensors with the ids of :meth:`get_input_ports`, in
            any order.
          outputs: logical tensors with the ids of :meth:`get_output_ports`.
          engine: the :class:`Engine` to run on (its kind must match).

        Returns:
          A :class:`CompiledPartition`; identical compilations return the same
          cached object.

        Raises:
          CompileError: the partition is unsupported; ids, data types,
            layouts or shapes disagree with the ports or with each other
            (``dst`` must have ``diff_dst``'s shape); the axis is out of range
            for the rank.
        """
        op = self._op
        if not isinstance(engine, Engine):
            raise self._error(f"got engine {engine!r}; expected an Engine")
        if engine.get_kind() is not self._engine_kind:
            raise self._error(
                f"got a {engine.get_kind().name} engine, but the graph was built "
                f"for {self._engine_kind.name}"
            )
        if not self._supported:
            raise CompileError(
                f"could not compile partition {self._id}: it is not supported "
                f"({op.describe()}: logsoftmax.graph implements "
                + ", ".join(k.value for k in SUPPORTED_OPS)
                + (
                    ""
                    if op.kind not in SUPPORTED_OPS
                    else f" on cpu, without mode={op.get_attr('mode')!r}"
                )
                + "); check Partition.is_supported() and run it elsewhere",
                op_id=op.id,
                op_name=op.name,
                op_kind=op.kind.value,
            )
        ins = self._match(inputs, op.inputs, False)
        outs = self._match(outputs, op.outputs, True)
        key = (self._id, self._engine_kind, op.id, op.kind, op.name,
               tuple(op.get_attrs().items()), tuple(ins), tuple(outs))
        with _cache_lock:
            cp = _cache.get(key)
            if cp is not None:
                _cache.move_to_end(key)
                _cache_stats["hits"] += 1
                return cp
        cp = self._compile(ins, outs)
        with _cache_lock:
            _cache_stats["misses"] += 1
            _cache[key] = cp
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
        return cp

    def _compile(self, ins, outs) -> "CompiledPartition":
        self._check_declared(ins, outs)
        shape = self._check_inputs(ins)
        axis = self._canonical_axis(len(shape))
        compiled_outs = self._infer_outputs(outs, shape, ins[0]._strides)
        i_in, i_out = SUPPORTED_OPS[self._op.kind].inplace
        a, b = ins[i_in], compiled_outs[i_out]
        inplace = []
        same_type = a.get_data_type() is b.get_data_type()
        if a.shape == b.shape and a._strides == b._strides and same_type:
            inplace.append((a.get_id(), b.get_id()))
        return CompiledPartition(self._id, self._op, axis, tuple(ins),
                                 tuple(compiled_outs), inplace)

    def _check_declared(self, ins, outs) -> None:
        """Each port's data type, and its dims where both the graph and the
        given logical tensor know them, agree with the graph's."""
        op = self._op
        for is_out, given, ports in ((False, ins, op.inputs), (True, outs, op.outputs)):
            for i, (lt, port) in enumerate(zip(given, ports)):
                if lt.get_data_type() is not port.get_data_type():
                    raise self._error(
                        f"is {lt.get_data_type().name}, expected "
                        f"{port.get_data_type().name}",
                        is_out,
                        i,
                    )
                if lt.shape is not None and port.shape is not None:
                    if len(lt.shape) != len(port.shape) or any(
                        a != b
                        for a, b in zip(lt.shape, port.shape)
                        if UNKNOWN_DIM not in (a, b)
                    ):
                        raise self._error(
                            f"has shape {list(lt.shape)}, but the graph declared "
                            f"{list(port.shape)}",
                            is_out,
                            i,
                        )

    def _check_inputs(self, ins) -> tuple[int, ...]:
        """Inputs are strided with known dims and strides, all of one shape,
        which is returned."""
        for i, lt in enumerate(ins):
            if lt.get_layout_type() is not LayoutType.strided:
                raise self._error(
                    f"has layout {lt.get_layout_type().name}; inputs need "
                    "LayoutType.strided with known strides",
                    False,
                    i,
                )
            if not lt.is_complete():
                raise self._error(
                    f"has unknown dims or strides ({lt.describe()}); inputs need "
                    "known dims and strides at compile time",
                    False,
                    i,
                )
        shape = ins[0].shape
        for i in range(1, len(ins)):
            if ins[i].shape != shape:
                raise self._error(
                    f"has shape {list(ins[i].shape)}, expected {list(shape)} (the "
                    f"shape of {self._op.role(False, 0)})",
                    False,
                    i,
                )
        return shape

    def _canonical_axis(self, rank: int) -> int:
        """The op's axis attribute in ``[0, rank)`` (the front door's rule)."""
        axis = self._op._axis()
        try:
            return _api.canonical_axis(axis, rank)
        except IndexError:
            raise self._error(
                f"has rank {rank}, but attribute axis={axis} is out of range; "
                f"expected an integer in [{-rank}, {rank})",
                False,
                0,
            ) from None

    def _infer_outputs(self, outs, shape, src_strides) -> list[LogicalTensor]:
        """Outputs with dims and strides filled in: input 0's shape; given
        strides (which must not overlap), else input 0's when compact, else
        row-major."""
        compiled = []
        for j, lt in enumerate(outs):
            if lt.get_layout_type() is LayoutType.opaque:
                raise self._error(
                    "has layout opaque; logsoftmax.graph produces strided layouts "
                    "only (use strided or any)",
                    True,
                    j,
                )
            if lt.shape is not None and (
                len(lt.shape) != len(shape)
                or any(a != b for a, b in zip(lt.shape, shape) if a != UNKNOWN_DIM)
            ):
                raise self._error(
                    f"has shape {list(lt.shape)}, expected {list(shape)} (the shape "
                    f"of {self._op.role(False, 0)})",
                    True,
                    j,
                )
            strides = lt._strides
            if strides is None or UNKNOWN_DIM in strides:
                compact = _is_compact(shape, src_strides)
                strides = src_strides if compact else dense_strides(shape)
            elif _self_overlaps(shape, strides):
                raise self._error(
                    f"has strides {list(strides)} under which distinct elements of "
                    f"shape {list(shape)} may share memory; outputs need a "
                    "non-overlapping layout",
                    True,
                    j,
                )
            compiled.append(
                lt._with(shape=shape, strides=strides, layout_type=LayoutType.strided)
            )
        return compiled

    def __repr__(self) -> str:
        return (
            f"Partition(id={self._id}, supported={self._supported}, "
            f"ops=[{self._op.describe()}])"
        )


class CompiledPartition:
    """A partition compiled for concrete logical tensors
    (``dnnl::graph::compiled_partition``).

    Immutable, reusable and thread-safe: ``execute`` keeps no state, so one
    compiled partition may run from several threads at once on different
    buffers. Execution calls the functional front door on strided numpy views
    of the tensors' buffers (no copies), on the backend the front door picks
    for numpy arrays (``logsoftmax.use_backend`` applies).
    """

    def __init__(self, pid, op: Op, axis: int, inputs, outputs, inplace) -> None:
        import logsoftmax

        self._pid = pid
        self._op = op
        self._axis = axis
        self._inputs: tuple[LogicalTensor, ...] = inputs
        self._outputs: tuple[LogicalTensor, ...] = outputs
        self._inplace = list(inplace)
        self._fn = getattr(logsoftmax, SUPPORTED_OPS[op.kind].function)
        self._by_id = {lt.get_id(): lt for lt in inputs + outputs}

    def query_logical_tensor(self, tid: int) -> LogicalTensor:
        """The compiled logical tensor of port ``tid`` (dims, strides filled in).

        Raises:
          InvalidArgumentError: ``tid`` is not a port of the partition.
        """
        try:
            return self._by_id[tid]
        except (KeyError, TypeError):
            raise InvalidArgumentError(
                f"could not query logical tensor {tid!r}: not a port of compiled "
                f"partition {self._pid} (ports: {sorted(self._by_id)})"
            ) from None

    def get_inplace_ports(self) -> list[tuple[int, int]]:
        """Pairs ``(input id, output id)`` that may share one buffer.

        ``(src, dst)`` for the forward ops, ``(diff_dst, diff_src)`` for the
        backward ops, when the two compiled logical tensors have the same
        layout; empty otherwise. Passing the input's buffer as the output then
        overwrites the input.
        """
        return list(self._inplace)

    @property
    def axis(self) -> int:
        """The canonical (non-negative) axis the partition runs along."""
        return self._axis

    def _error(self, problem: str, is_out: bool | None = None, i: int = 0):
        return _op_error(
            ExecuteError,
            f"execute compiled partition {self._pid}",
            self._op,
            problem,
            is_out,
            i,
        )

    def _views(self, tensors, ports, is_out: bool) -> list[np.ndarray]:
        what = "output" if is_out else "input"
        if not isinstance(tensors, (list, tuple)):
            raise self._error(f"got {what}s {tensors!r}; expected a list of Tensor")
        if len(tensors) != len(ports):
            raise self._error(
                f"got {len(tensors)} {what} tensor(s), expected {len(ports)} ("
                + ", ".join(
                    f"{self._op.role(is_out, i)} id {p.get_id()}"
                    for i, p in enumerate(ports)
                )
                + ")"
            )
        if all(
            isinstance(t, Tensor) and t._lt.get_id() == p.get_id()
            for t, p in zip(tensors, ports)
        ):
            ordered = list(tensors)
        else:
            by_id = {}
            for t in tensors:
                if not isinstance(t, Tensor):
                    raise self._error(
                        f"got {what} {t!r}; expected a Tensor"
                    )
                by_id.setdefault(t._lt.get_id(), t)
            missing = [p.get_id() for p in ports if p.get_id() not in by_id]
            if missing or len(by_id) != len(ports):
                raise self._error(
                    f"got {what} tensors for logical tensors "
                    f"{[t._lt.get_id() for t in tensors]}, expected "
                    f"{[p.get_id() for p in ports]}"
                )
            ordered = [by_id[p.get_id()] for p in ports]
        views = []
        for i, (t, lt) in enumerate(zip(ordered, ports)):
            tlt = t._lt
            if tlt.get_data_type() is not lt.get_data_type():
                raise self._error(
                    f"tensor is {tlt.get_data_type().name}, expected "
                    f"{lt.get_data_type().name}",
                    is_out,
                    i,
                )
            if tlt.shape is not None and (
                len(tlt.shape) != len(lt.shape)
                or any(a != b for a, b in zip(tlt.shape, lt.shape) if a != UNKNOWN_DIM)
            ):
                raise self._error(
                    f"tensor has shape {list(tlt.shape)}, expected {list(lt.shape)}",
                    is_out,
                    i,
                )
            if tlt._strides is not None and any(
                a != b
                for a, b, n in zip(tlt._strides, lt._strides, lt.shape)
                if a != UNKNOWN_DIM and n > 1
            ):
                raise self._error(
                    f"tensor has strides {list(tlt._strides)}, expected "
                    f"{list(lt._strides)}",
                    is_out,
                    i,
                )
            v = t._view_for(lt, lambda msg, i=i: self._error(msg, is_out, i))
            if is_out and not v.flags.writeable:
                raise self._error("tensor's buffer is read-only", is_out, i)
            views.append(v)
        return views

    def execute(
        self, stream: Stream, inputs: Sequence[Tensor], outputs: Sequence[Tensor]
    ) -> None:
        """Run the partition: read ``inputs``, write ``outputs``.

        Tensors are matched to ports by logical-tensor id. For in-place
        execution pass, as the output, a tensor over the same buffer (and
        layout) as the input named by :meth:`get_inplace_ports`.

        Args:
          stream: a :class:`Stream` on an engine of the partition's kind.
          inputs, outputs: :class:`Tensor` lists, one per port.

        Raises:
          ExecuteError: a wrong number of tensors; a tensor whose data type,
            shape, strides or buffer size disagree with the compiled logical
            tensor; a read-only output buffer; an output that partially
            overlaps an input.
        """
        if not isinstance(stream, Stream):
            raise self._error(f"got stream {stream!r}; expected a Stream")
        in_views = self._views(inputs, self._inputs, False)
        (out_view,) = self._views(outputs, self._outputs, True)
        try:
            self._fn(*in_views, self._axis, out=out_view)
        except (ValueError, TypeError, IndexError) as e:
            raise self._error(f"was rejected by the front door: {e}") from e

    def __repr__(self) -> str:
        return (
            f"CompiledPartition(id={self._pid}, {self._op.describe()}, axis="
            f"{self._axis}, inputs={list(self._inputs)}, outputs="
            f"{list(self._outputs)})"
        )
