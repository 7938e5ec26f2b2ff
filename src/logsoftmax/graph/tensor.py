"""Tensor: a logical tensor bound to an engine and a memory buffer."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .engine import Engine
from .errors import GraphError, InvalidArgumentError
from .logical_tensor import LogicalTensor

__all__ = ["Tensor", "make_view"]

# uint8/int8 arrays are taken as raw bytes, whatever the logical data type
_RAW = (np.dtype(np.uint8), np.dtype(np.int8))


def make_view(
    buffer: Any, lt: LogicalTensor, fail: Callable[[str], GraphError]
) -> np.ndarray:
    """A numpy view of ``buffer`` with ``lt``'s dtype, shape and strides.

    No data is copied: the view aliases the buffer, so writes through it land
    in the caller's memory (and an input and an output built over one buffer
    with one layout are the *same* memory, which is what in-place execution
    needs).

    Args:
      buffer: an ndarray of ``lt``'s shape and dtype whose strides agree with
        ``lt``'s (strides of length-1 dims are ignored); or oneDNN's raw
        handle: a flat (1-D) C-contiguous ndarray of ``lt``'s dtype, a
        C-contiguous uint8/int8 (raw bytes) ndarray, or any contiguous
        bytes-like object, holding at least ``lt.get_mem_size()`` bytes (the
        layout starts at its first byte).
      lt: a complete logical tensor (known dims and strides).
      fail: builds the exception to raise from a problem description.

    Returns:
      An ndarray of ``lt.shape`` and ``lt``'s dtype.

    Raises:
      What ``fail`` builds, for anything else: in particular an ndarray of
      ``lt``'s dtype and another shape, which is never reinterpreted (a
      ``(100, 8)`` array for ``[8, 100]``, a larger ``(8, 101)`` output, a
      ``(8, 100, 1)``: each is almost always a bug, API.md section 5).
    """
    dt = lt.get_data_type().numpy_dtype
    shape = lt.shape
    bstrides = lt.byte_strides()
    if isinstance(buffer, np.ndarray):
        if buffer.shape == shape:
            if buffer.dtype != dt:
                raise fail(
                    f"buffer has dtype {buffer.dtype}, expected {dt} "
                    f"({lt.get_data_type().name})"
                )
            if buffer.size > 1 and any(
                n > 1 and s != b for n, s, b in zip(shape, buffer.strides, bstrides)
            ):
                raise fail(
                    f"buffer has byte strides {list(buffer.strides)}, expected "
                    f"{list(bstrides)} (element strides {list(lt._strides)}); pass "
                    "an array with the logical tensor's layout or a flat buffer"
                )
            return buffer
        raw = buffer.dtype in _RAW
        if not raw and (buffer.dtype != dt or buffer.ndim != 1):
            raise fail(
                f"buffer is a {buffer.dtype} array of shape {list(buffer.shape)}, "
                f"but the logical tensor is {lt.describe()}; expected an array of "
                f"that shape and dtype, or a flat 1-D {dt} or raw-bytes "
                "(uint8/int8) buffer (an array of another shape is never "
                "reinterpreted)"
            )
        if not buffer.flags.c_contiguous:
            raise fail(
                f"buffer of shape {list(buffer.shape)} and strides "
                f"{list(buffer.strides)} is not contiguous; a flat buffer must be "
                "C-contiguous (the logical tensor's strides address into it)"
            )
        nbytes = buffer.nbytes
    else:
        try:
            mv = memoryview(buffer)
        except TypeError:
            raise fail(
                f"buffer of type {type(buffer).__name__} is neither an ndarray nor "
                "a bytes-like object"
            ) from None
        if not mv.contiguous:
            raise fail("buffer is a non-contiguous memoryview; expected contiguous")
        nbytes = mv.nbytes
    need = lt.get_mem_size()
    if nbytes < need:
        raise fail(
            f"buffer holds {nbytes} bytes, expected at least {need} for "
            f"{lt.describe()}"
        )
    if need == 0:
        return np.zeros(shape, dt)
    return np.ndarray(shape, dt, buffer=buffer, strides=bstrides)


class Tensor:
    """A logical tensor bound to an engine and a buffer (``dnnl::graph::tensor``).

    Tensors are what ``CompiledPartition.execute`` reads and writes. The
    buffer is owned by the caller (numpy keeps it alive while the tensor
    exists); the tensor only describes it. Create tensors from the logical
    tensors the partition was compiled with (or queried from it).

    Args:
      logical_tensor: the :class:`LogicalTensor` describing the data.
      engine: the :class:`Engine` the data lives on.
      buffer: an ndarray of the logical shape and dtype (strides must agree
        with the logical tensor's); or a raw handle big enough for the
        strided layout (``logical_tensor.get_mem_size()`` bytes): a flat 1-D
        C-contiguous ndarray of the logical dtype, a C-contiguous uint8/int8
        ndarray, or any bytes-like object; or None to allocate a zeroed
        buffer. An ndarray of another shape is an error, never reinterpreted.

    Raises:
      InvalidArgumentError: a bad argument, or a buffer that cannot back the
        logical tensor (wrong dtype, shape, strides, too small). When the logical
        tensor has unknown dims, the buffer is checked at execute time against
        the compiled logical tensor instead.
    """

    __slots__ = ("_lt", "_engine", "_buffer", "_view")

    def __init__(
        self, logical_tensor: LogicalTensor, engine: Engine, buffer: Any = None
    ) -> None:
        if not isinstance(logical_tensor, LogicalTensor):
            raise InvalidArgumentError(
                "could not create tensor: logical_tensor must be a LogicalTensor, "
                f"got {type(logical_tensor).__name__}"
            )
        if not isinstance(engine, Engine):
            raise InvalidArgumentError(
                "could not create tensor for logical tensor "
                f"{logical_tensor.get_id()}: engine must be an Engine, got {type(engine).__name__}"
            )
        self._lt = logical_tensor
        self._engine = engine
        self._view = None
        if buffer is None:
            if not logical_tensor.is_complete():
                raise InvalidArgumentError(
                    f"could not allocate tensor for logical tensor "
                    f"{logical_tensor.get_id()}: its dims or strides are unknown "
                    f"({logical_tensor.describe()})"
                )
            item = logical_tensor.get_data_type().numpy_dtype.itemsize
            buffer = np.zeros(logical_tensor.get_mem_size() // item,
                              logical_tensor.get_data_type().numpy_dtype)
        self._buffer = buffer
        self._bind()

    def _bind(self) -> None:
        lt = self._lt
        self._view = None
        if lt.is_complete() and lt.get_data_type().numpy_dtype is not None:
            self._view = make_view(
                self._buffer,
                lt,
                lambda msg: InvalidArgumentError(
                    f"could not create tensor for logical tensor {lt.get_id()}: {msg}"
                ),
            )

    def get_logical_tensor(self) -> LogicalTensor:
        """The logical tensor the tensor was created with."""
        return self._lt

    def get_engine(self) -> Engine:
        """The engine the tensor's data lives on."""
        return self._engine

    def get_data_handle(self) -> Any:
        """The buffer (as given, or the one allocated)."""
        return self._buffer

    def set_data_handle(self, buffer: Any) -> None:
        """Rebind the tensor to another buffer (checked as in the constructor)."""
        old = self._buffer
        self._buffer = buffer
        try:
            self._bind()
        except GraphError:
            self._buffer = old
            self._bind()
            raise

    def numpy(self) -> np.ndarray:
        """The data as an ndarray of the logical shape (a view, no copy).

        Raises:
          InvalidArgumentError: the logical tensor has unknown dims.
        """
        if self._view is None:
            raise InvalidArgumentError(
                f"could not view tensor {self._lt.get_id()}: its logical tensor has "
                f"unknown dims or strides ({self._lt.describe()})"
            )
        return self._view

    def _view_for(self, lt: LogicalTensor, fail) -> np.ndarray:
        """The view for compiled logical tensor ``lt`` (already matched)."""
        if self._view is not None:
            return self._view
        return make_view(self._buffer, lt, fail)

    def __repr__(self) -> str:
        return f"Tensor({self._lt!r}, {self._engine!r})"
