"""Engine and Stream: where a compiled partition runs, and in which order.

An :class:`Engine` names a device; a :class:`Stream` is an execution queue on
an engine. Both mirror ``dnnl::engine`` / ``dnnl::stream``.
"""

from __future__ import annotations

from .errors import InvalidArgumentError
from .types import EngineKind

__all__ = ["Engine", "Stream"]


class Engine:
    """A device that compiled partitions run on (``dnnl::engine``).

    An engine is created once and shared by every partition compiled for it
    and every tensor allocated on it. This package executes on the host CPU
    only, through the same functional front door as ``logsoftmax.log_softmax``
    (which picks the CPU backend for numpy arrays); CUDA arrays go through the
    functional API, not the graph API.

    Args:
      kind: :class:`EngineKind` (or its name); only ``cpu`` is supported.
      index: device index; only 0 exists for the CPU.

    Raises:
      InvalidArgumentError: ``kind`` is not ``cpu`` or ``index`` is not 0.
    """

    def __init__(self, kind: EngineKind | str = EngineKind.cpu, index: int = 0):
        if isinstance(kind, str):
            try:
                kind = EngineKind[kind]
            except KeyError:
                kind = None
        if kind is not EngineKind.cpu:
            raise InvalidArgumentError(
                f"could not create engine: kind {getattr(kind, 'name', kind)!r} "
                "is not supported; logsoftmax.graph executes on EngineKind.cpu "
                "only (use the functional API with CUDA arrays for GPUs)"
            )
        if index != 0:
            raise InvalidArgumentError(
                f"could not create engine: index {index!r} does not exist; the "
                "cpu engine has index 0 only"
            )
        self._kind = kind
        self._index = 0

    def get_kind(self) -> EngineKind:
        """The engine's kind.

        @returns EngineKind.cpu.
        """
        return self._kind

    @property
    def kind(self) -> EngineKind:
        """The engine's kind (same as :meth:`get_kind`)."""
        return self._kind

    def __repr__(self) -> str:
        return f"Engine({self._kind}, {self._index})"


class Stream:
    """An execution queue on an engine (``dnnl::stream``).

    Execution here is synchronous: ``CompiledPartition.execute`` returns when
    the outputs are written, so :meth:`wait` has nothing to wait for; it
    exists so that oneDNN code ports line for line.

    Args:
      engine: the :class:`Engine` the stream runs on.

    Raises:
      InvalidArgumentError: ``engine`` is not an :class:`Engine`.
    """

    def __init__(self, engine: Engine):
        if not isinstance(engine, Engine):
            raise InvalidArgumentError(
                f"could not create stream: engine must be an Engine, got "
                f"{type(engine).__name__}"
            )
        self._engine = engine

    def get_engine(self) -> Engine:
        """The engine the stream runs on."""
        return self._engine

    def wait(self) -> None:
        """Block until every execution submitted to the stream has finished.

        Returns immediately: executions are synchronous.
        """

    def __repr__(self) -> str:
        return f"Stream({self._engine!r})"
