"""LogicalTensor: the metadata of a tensor (id, data type, dims, layout).

Also the graph's face of the stride helpers (:mod:`logsoftmax.formats`):
dense strides in a given dimension order, and oneDNN's format tags (``abc``,
``acb``...), whose errors are :class:`InvalidArgumentError` here.
"""

from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from .. import formats
from ..formats import dense_strides
from .errors import InvalidArgumentError
from .types import (
    JSON_UNKNOWN_DIM,
    UNKNOWN_DIM,
    UNKNOWN_NDIMS,
    DataType,
    LayoutType,
    PropertyType,
)

__all__ = ["LogicalTensor", "dense_strides", "strides_from_tag"]


def strides_from_tag(shape: Sequence[int], tag: str) -> tuple:
    """Strides (in elements) of oneDNN's plain format tag ``tag`` for ``shape``.

    A tag names the dims by letter (``a`` is dim 0) from outermost to
    innermost in memory: ``abc`` is row-major, ``acb`` makes dim 1 the
    unit-stride dim (for ``[8, 384, 1024]``: strides ``[393216, 1, 384]``);
    see :mod:`logsoftmax.formats`, which parses every tag in the package.

    Raises:
      InvalidArgumentError: ``tag`` is not a plain tag of ``len(shape)`` dims.
    """
    try:
        return formats.strides_from_tag(shape, tag)
    except (ValueError, NotImplementedError) as e:
        raise InvalidArgumentError(
            f"could not lay out shape {list(shape)} as format tag {tag!r}: {e}"
        ) from None


def _dim(value, what: str, lt_id) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(
            f"could not create logical tensor {lt_id}: {what} {value!r} is not "
            "an integer"
        )
    if v == JSON_UNKNOWN_DIM:
        return UNKNOWN_DIM
    if v < UNKNOWN_DIM:
        raise InvalidArgumentError(
            f"could not create logical tensor {lt_id}: {what} {v} is negative; "
            f"expected >= 0, or {UNKNOWN_DIM} for unknown"
        )
    return v


def _data_type(dtype, lt_id) -> DataType:
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str):
        try:
            return DataType[dtype]
        except KeyError:
            pass
    try:
        return DataType.from_numpy(dtype)
    except (TypeError, ValueError):
        pass
    raise InvalidArgumentError(
        f"could not create logical tensor {lt_id}: data type {dtype!r} is not a "
        "DataType; expected one of " + ", ".join(m.name for m in DataType)
    )


class LogicalTensor:
    """The metadata of a tensor (``dnnl::graph::logical_tensor``).

    A logical tensor describes one edge of a graph: its id (ops are connected
    by sharing ids), element data type, dims and memory layout. It holds no
    data and is immutable; build-time logical tensors may leave dims unknown
    (-1, or the whole rank unknown with ``shape=-1``), and compilation fills
    them in (query the compiled partition for the result).

    Read it with oneDNN's getters (``get_id``, ``get_data_type``,
    ``get_dims``, ``get_strides``, ``get_layout_type``, ``get_property_type``,
    ``get_mem_size``); ``.shape`` is the one Pythonic alias, for ``get_dims()``.

    Overloads, as in oneDNN's C++ constructors::

        LogicalTensor(id, dtype, ndims, layout_type)       # dims unknown
        LogicalTensor(id, dtype, dims, layout_type)        # strided: row-major
        LogicalTensor(id, dtype, dims, strides)            # explicit strides
        LogicalTensor(id, dtype, dims, strides=strides)    # same, by keyword

    Args:
      id: non-negative integer, unique per tensor in a graph.
      dtype: :class:`DataType` (or its name, or a numpy dtype).
      shape: list of dims (each >= 0, or -1 for unknown), or an integer rank
        (-1: unknown rank; n >= 0: n unknown dims).
      layout_type: :class:`LayoutType` (default ``strided``), or a list of
        strides, which means ``strided`` with those strides.
      property_type: :class:`PropertyType` (default ``undef``).
      strides: explicit strides in elements (each >= 0, or -1 for unknown);
        implies ``strided``. Without them a ``strided`` tensor with known dims
        is row-major (dense, last dim unit-stride).

    Raises:
      InvalidArgumentError: a negative id, a non-integer or negative dim or
        stride, strides of the wrong length, strides with a non-strided
        layout, an unknown data type.
    """

    __slots__ = ("_id", "_dtype", "_dims", "_strides", "_layout", "_property")

    def __init__(
        self,
        id: int,
        dtype: DataType | str,
        shape: Sequence[int] | int = UNKNOWN_NDIMS,
        layout_type: LayoutType | Sequence[int] = LayoutType.strided,
        property_type: PropertyType = PropertyType.undef,
        *,
        strides: Sequence[int] | None = None,
    ) -> None:
        if isinstance(id, (bool, np.bool_)) or not hasattr(id, "__index__"):
            raise InvalidArgumentError(
                f"could not create logical tensor: id {id!r} is not an integer"
            )
        id = operator.index(id)
        if id < 0:
            raise InvalidArgumentError(
                f"could not create logical tensor: id {id} is negative; expected "
                "a non-negative integer"
            )
        self._id = id
        self._dtype = _data_type(dtype, id)
        if not isinstance(layout_type, LayoutType):
            if strides is not None:
                raise InvalidArgumentError(
                    f"could not create logical tensor {id}: strides given twice "
                    "(as the layout argument and as strides=)"
                )
            strides, layout_type = layout_type, LayoutType.strided
        if strides is not None and layout_type is not LayoutType.strided:
            raise InvalidArgumentError(
                f"could not create logical tensor {id}: strides given with layout "
                f"{layout_type.name}; explicit strides need LayoutType.strided"
            )
        if not isinstance(property_type, PropertyType):
            raise InvalidArgumentError(
                f"could not create logical tensor {id}: property_type "
                f"{property_type!r} is not a PropertyType"
            )
        self._layout = layout_type
        self._property = property_type

        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            ndims = int(shape)
            if ndims < UNKNOWN_NDIMS:
                raise InvalidArgumentError(
                    f"could not create logical tensor {id}: ndims {ndims} is "
                    f"negative; expected >= 0, or {UNKNOWN_NDIMS} for unknown"
                )
            dims = None if ndims == UNKNOWN_NDIMS else (UNKNOWN_DIM,) * ndims
        else:
            try:
                dims = tuple(_dim(d, "dim", id) for d in shape)
            except TypeError:
                raise InvalidArgumentError(
                    f"could not create logical tensor {id}: shape {shape!r} is "
                    "neither a list of dims nor a rank"
                ) from None
        self._dims = dims

        if strides is not None:
            st = tuple(_dim(s, "stride", id) for s in strides)
            if dims is None or len(st) != len(dims):
                raise InvalidArgumentError(
                    f"could not create logical tensor {id}: {len(st)} strides "
                    f"for {'unknown' if dims is None else len(dims)} dims; "
                    "expected one stride per dim"
                )
        elif layout_type is LayoutType.strided and dims is not None:
            if UNKNOWN_DIM in dims:
                st = (UNKNOWN_DIM,) * len(dims)
            else:
                st = dense_strides(dims)
        else:
            st = None
        self._strides = st

    # -- oneDNN-style getters ---------------------------------------------
    def get_id(self) -> int:
        """The tensor's id."""
        return self._id

    def get_data_type(self) -> DataType:
        """The element data type."""
        return self._dtype

    def get_dims(self) -> list[int]:
        """The dims (-1 where unknown).

        Raises:
          InvalidArgumentError: the rank is unknown (``ndims == -1``).
        """
        if self._dims is None:
            raise InvalidArgumentError(
                f"could not get dims of logical tensor {self._id}: its rank is "
                "unknown (ndims -1)"
            )
        return list(self._dims)

    def get_strides(self) -> list[int]:
        """The strides in elements (-1 where unknown).

        Raises:
          InvalidArgumentError: the layout is not ``strided`` or the rank is
            unknown.
        """
        if self._strides is None:
            raise InvalidArgumentError(
                f"could not get strides of logical tensor {self._id}: layout is "
                f"{self._layout.name}"
                + (" with unknown rank" if self._dims is None else "")
                + "; only strided tensors of known rank have strides"
            )
        return list(self._strides)

    def get_layout_type(self) -> LayoutType:
        """The layout type."""
        return self._layout

    def get_property_type(self) -> PropertyType:
        """The property type."""
        return self._property

    def get_mem_size(self) -> int:
        """Bytes spanned by the tensor's layout (0 if a dim is 0).

        Raises:
          InvalidArgumentError: dims or strides are unknown, or the data type
            is ``undef``.
        """
        self._check_complete("compute the memory size of")
        if self._dtype is DataType.undef:
            raise InvalidArgumentError(
                f"could not compute the memory size of logical tensor {self._id}: "
                "its data type is undef"
            )
        if 0 in self._dims:
            return 0
        span = 1 + sum((d - 1) * s for d, s in zip(self._dims, self._strides))
        return span * self._dtype.numpy_dtype.itemsize

    def is_equal(self, other: "LogicalTensor") -> bool:
        """Whether ``other`` has the same id, type, dims, layout and property."""
        return self == other

    # -- the one Pythonic alias -------------------------------------------
    @property
    def shape(self) -> tuple[int, ...] | None:
        """The dims as a tuple (-1 where unknown), or None if the rank is
        unknown: :meth:`get_dims` as numpy spells it (which raises instead of
        returning None). The other attributes are read with oneDNN's getters."""
        return self._dims

    # -- helpers ----------------------------------------------------------
    def is_complete(self) -> bool:
        """Whether dims and strides are all known (the tensor can back data)."""
        return (
            self._dims is not None
            and UNKNOWN_DIM not in self._dims
            and self._strides is not None
            and UNKNOWN_DIM not in self._strides
        )

    def _check_complete(self, verb: str) -> None:
        if not self.is_complete():
            raise InvalidArgumentError(
                f"could not {verb} logical tensor {self._id}: dims "
                f"{None if self._dims is None else list(self._dims)} / strides "
                f"{None if self._strides is None else list(self._strides)} are "
                "not all known"
            )

    def byte_strides(self) -> tuple[int, ...]:
        """Strides in bytes (numpy's convention); needs known strides."""
        self._check_complete("compute byte strides of")
        item = self._dtype.numpy_dtype.itemsize
        return tuple(s * item for s in self._strides)

    def _with(
        self,
        *,
        dtype: DataType | None = None,
        shape: Sequence[int] | int | None = None,
        strides: Sequence[int] | None = None,
        layout_type: LayoutType | None = None,
    ) -> "LogicalTensor":
        """A copy with some fields replaced (strides are kept only if given
        or if neither ``shape`` nor ``layout_type`` changes)."""
        keep = shape is None and layout_type is None
        layout = self._layout if layout_type is None else layout_type
        if strides is None and keep and self._strides is not None:
            strides = self._strides
        return LogicalTensor(
            self._id,
            self._dtype if dtype is None else dtype,
            (self._dims if self._dims is not None else UNKNOWN_NDIMS)
            if shape is None
            else shape,
            layout,
            self._property,
            strides=strides if layout is LayoutType.strided else None,
        )

    def describe(self) -> str:
        """``f32 [8, 1000] strides [1000, 1]``: for messages."""
        dims = "[?]" if self._dims is None else str(list(self._dims))
        lay = (
            f"strides {list(self._strides)}"
            if self._strides is not None
            else f"layout {self._layout.name}"
        )
        return f"{self._dtype.name} {dims} {lay}"

    def _key(self):
        return (
            self._id,
            self._dtype,
            self._dims,
            self._strides,
            self._layout,
            self._property,
        )

    def __eq__(self, other) -> bool:
        if not isinstance(other, LogicalTensor):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        dims = -1 if self._dims is None else list(self._dims)
        extra = (
            f", strides={list(self._strides)}" if self._strides is not None else ""
        )
        prop = (
            ""
            if self._property is PropertyType.undef
            else f", {self._property}"
        )
        return (
            f"LogicalTensor({self._id}, {self._dtype}, {dims}, {self._layout}"
            f"{prop}{extra})"
        )
