"""Errors of the graph API: one base class, one subclass per stage.

oneDNN reports failures as status codes (or ``dnnl::error`` in C++); here
every failure raises a :class:`GraphError` subclass at the earliest stage
that has the information, with a message of the form "could not <verb>
<object>: <op>, <port>, <problem>", e.g.::

    could not compile partition 0: op 'lsm_bwd' (id 0, LogSoftmaxBackward)
    input 1 (dst) is f16, expected bf16

The structured parts are also attributes (``op_id``, ``op_name``,
``op_kind``, ``port``, ``role``) so that callers need not parse messages.
"""

from __future__ import annotations

__all__ = [
    "GraphError",
    "InvalidArgumentError",
    "GraphBuildError",
    "InvalidGraphError",
    "CompileError",
    "ExecuteError",
    "JsonFormatError",
]


class GraphError(Exception):
    """Base class of every error raised by :mod:`logsoftmax.graph`.

    Attributes:
      op_id, op_name, op_kind: the op the error is about, or None.
      port: ``"input 1"`` / ``"output 0"``, or None.
      role: the port's role (``diff_dst``, ``dst``, ``diff_src``, ``src``),
        or None.
    """

    def __init__(
        self,
        message: str,
        *,
        op_id: int | None = None,
        op_name: str | None = None,
        op_kind: str | None = None,
        port: str | None = None,
        role: str | None = None,
    ) -> None:
        super().__init__(message)
        self.op_id = op_id
        self.op_name = op_name
        self.op_kind = op_kind
        self.port = port
        self.role = role


class InvalidArgumentError(GraphError, ValueError):
    """A constructor or query got a bad argument (a bad dims list, an unknown
    enum name, a buffer that cannot back a tensor, an unknown port id)."""


class GraphBuildError(GraphError):
    """``Op.set_attr``/``Graph.add_op`` rejected an op: wrong port count,
    mixed or unsupported data types, a bad or unknown attribute, a duplicate
    op id, an op added after ``finalize``."""


class InvalidGraphError(GraphBuildError):
    """The graph as a whole is invalid (a cycle, a tensor produced twice, a
    query before ``finalize``)."""


class CompileError(GraphError):
    """``Partition.compile`` rejected the logical tensors: unknown shapes,
    a shape mismatch, an axis out of range, an unsupported partition."""


class ExecuteError(GraphError):
    """``CompiledPartition.execute`` rejected the tensors: wrong count, or a
    buffer whose dtype, shape, strides or size disagree with the compiled
    logical tensor."""


class JsonFormatError(GraphError, ValueError):
    """A JSON graph is malformed or uses names this package does not know."""
