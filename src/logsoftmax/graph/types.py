"""Enumerations of the graph API, named and numbered as in oneDNN's
``dnnl_graph.hpp`` / ``dnnl_graph_types.h``.

Each enum member's value is oneDNN's C enum value (``DataType``,
``LayoutType``, ``PropertyType``, ``EngineKind``, ``OpAttr``) or, for
``OpKind``, the kind's name as it appears in oneDNN's JSON graph dumps. Enum
members are named exactly as in the C++ header, so oneDNN code reads the same
here (``dnnl::graph::op::kind::LogSoftmaxBackward`` ->
``OpKind.LogSoftmaxBackward``).
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

__all__ = [
    "DataType",
    "LayoutType",
    "PropertyType",
    "EngineKind",
    "PartitionPolicy",
    "OpKind",
    "OpAttr",
    "AttrType",
    "UNKNOWN_DIM",
    "UNKNOWN_NDIMS",
    "JSON_UNKNOWN_DIM",
]

#: A dimension (or stride) not known when the graph is built. oneDNN's C API
#: uses ``INT64_MIN`` (``DNNL_GRAPH_UNKNOWN_DIM``); its Python-facing code and
#: this package use -1, and accept ``INT64_MIN`` from JSON files too.
UNKNOWN_DIM = -1
#: A rank not known when the graph is built (``DNNL_GRAPH_UNKNOWN_NDIMS``).
UNKNOWN_NDIMS = -1
#: How oneDNN's JSON dumps spell an unknown dimension (``INT64_MIN``).
JSON_UNKNOWN_DIM = -(2**63)


class DataType(enum.Enum):
    """Element data type of a logical tensor (``logical_tensor::data_type``).

    The library computes in ``f32``, ``bf16`` and ``f16``; the other members
    exist so that graphs from oneDNN that use them can be described (their
    ops form unsupported partitions or fail validation with a clear message).
    """

    #: Undefined data type (not usable at execution).
    undef = 0
    #: 16-bit IEEE half precision (``numpy.float16``).
    f16 = 1
    #: 16-bit brain floating point (``ml_dtypes.bfloat16``).
    bf16 = 2
    #: 32-bit IEEE single precision (``numpy.float32``).
    f32 = 3
    #: 32-bit signed integer.
    s32 = 4
    #: 8-bit signed integer.
    s8 = 5
    #: 8-bit unsigned integer.
    u8 = 6
    #: Boolean (one byte).
    boolean = 8
    #: 8-bit float with 5 exponent and 2 mantissa bits.
    f8_e5m2 = 9
    #: 8-bit float with 4 exponent and 3 mantissa bits.
    f8_e4m3 = 10
    #: 4-bit signed integer.
    s4 = 11
    #: 4-bit unsigned integer.
    u4 = 12

    @property
    def numpy_dtype(self) -> np.dtype | None:
        """The numpy dtype of the elements, or ``None`` for ``undef``."""
        return _NUMPY.get(self)

    @classmethod
    def from_numpy(cls, dtype) -> "DataType":
        """The member whose :attr:`numpy_dtype` is ``dtype``.

        Raises:
          ValueError: no member corresponds to ``dtype`` (e.g. float64, which
            oneDNN Graph does not have).
        """
        dt = np.dtype(dtype)
        for member, npdt in _NUMPY.items():
            if npdt == dt:
                return member
        raise ValueError(
            f"numpy dtype {dt} has no graph DataType; expected one of "
            + ", ".join(f"{m.name} ({d})" for m, d in _NUMPY.items())
        )

    @classmethod
    def from_name(cls, name: str) -> "DataType":
        """The member named ``name`` (``"f32"``, ``"bf16"``...).

        Raises:
          ValueError: ``name`` is not a member's name.
        """
        try:
            return cls[name]
        except KeyError:
            raise ValueError(
                f"unknown data type {name!r}; expected one of "
                + ", ".join(m.name for m in cls)
            ) from None


_NUMPY = {
    DataType.f16: np.dtype(np.float16),
    DataType.bf16: np.dtype(ml_dtypes.bfloat16),
    DataType.f32: np.dtype(np.float32),
    DataType.s32: np.dtype(np.int32),
    DataType.s8: np.dtype(np.int8),
    DataType.u8: np.dtype(np.uint8),
    DataType.boolean: np.dtype(np.bool_),
    DataType.f8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    DataType.f8_e4m3: np.dtype(ml_dtypes.float8_e4m3fn),
    DataType.s4: np.dtype(ml_dtypes.int4),
    DataType.u4: np.dtype(ml_dtypes.uint4),
}


class LayoutType(enum.Enum):
    """How a logical tensor's elements are laid out in memory."""

    #: Undefined layout (not usable at compile time).
    undef = 0
    #: Let the library pick the layout at compile time; query the compiled
    #: partition for the one it picked.
    any = 1
    #: The layout is given by the logical tensor's strides (in elements).
    strided = 2
    #: A library-specific layout; this library never produces one, and
    #: rejects it at compile time.
    opaque = 3


class PropertyType(enum.Enum):
    """A logical tensor's property: a hint about how its data changes."""

    #: No property given.
    undef = 0
    #: The data may change between executions.
    variable = 1
    #: The data stays the same between executions (e.g. inference weights).
    constant = 2
    #: A 0-d scalar on the host.
    host_scalar = 3


class EngineKind(enum.Enum):
    """The kind of device an engine (and a graph) targets."""

    #: Any device (only meaningful when querying).
    any = 0
    #: The host CPU; the only kind this package executes on.
    cpu = 1
    #: A GPU; CUDA arrays go through the functional API instead.
    gpu = 2


class PartitionPolicy(enum.Enum):
    """How :meth:`Graph.get_partitions` groups ops (``partition::policy``)."""

    #: Fuse ops into larger partitions where the library can (here: none of
    #: the supported ops fuse, so this equals ``debug``).
    fusion = 1
    #: One op per partition.
    debug = 2


class AttrType(enum.Enum):
    """Value type of an op attribute, spelled as in oneDNN's JSON dumps."""

    #: One float32 number.
    f32 = "f32"
    #: A list of float32 numbers.
    f32s = "f32[]"
    #: One int64 number.
    s64 = "s64"
    #: A list of int64 numbers.
    s64s = "s64[]"
    #: A bool.
    bool = "bool"
    #: A string.
    string = "string"


class OpAttr(enum.Enum):
    """Op attributes (``op::attr``), grouped by value type as in oneDNN.

    The value is oneDNN's C enum value; :attr:`type` is the value type.
    """

    undef = 0
    # float32 attributes
    alpha = 0x1
    beta = 0x2
    epsilon = 0x3
    max = 0x4
    min = 0x5
    momentum = 0x6
    # float32 vector attributes
    scales = 0x20
    # int64 attributes
    axis = 0x30
    begin_norm_axis = 0x31
    groups = 0x32
    # int64 vector attributes
    axes = 0x40
    dilations = 0x41
    dst_shape = 0x42
    kernel = 0x43
    order = 0x44
    output_padding = 0x45
    pads_begin = 0x46
    pads_end = 0x47
    shape = 0x48
    sizes = 0x49
    src_shape = 0x4A
    strides = 0x4B
    weights_shape = 0x4C
    zps = 0x4D
    group_shape = 0x4E
    # bool attributes
    exclude_pad = 0x60
    keep_dims = 0x61
    keep_stats = 0x62
    per_channel_broadcast = 0x63
    special_zero = 0x64
    transpose_a = 0x65
    transpose_b = 0x66
    use_affine = 0x67
    use_dst = 0x68
    # string attributes
    auto_broadcast = 0x80
    auto_pad = 0x81
    coordinate_transformation_mode = 0x82
    data_format = 0x83
    mode = 0x84
    qtype = 0x85
    rounding_type = 0x86
    weights_format = 0x87
    accumulation_mode = 0x88

    @property
    def type(self) -> AttrType | None:
        """The attribute's value type (``None`` for ``undef``)."""
        v = self.value
        if v == 0:
            return None
        if v < 0x20:
            return AttrType.f32
        if v < 0x30:
            return AttrType.f32s
        if v < 0x40:
            return AttrType.s64
        if v < 0x60:
            return AttrType.s64s
        if v < 0x80:
            return AttrType.bool
        return AttrType.string


class OpKind(enum.Enum):
    """Op kinds (``op::kind``); the value is the name used in JSON dumps.

    This package implements ``LogSoftmax``, ``LogSoftmaxBackward``,
    ``SoftMax`` and ``SoftMaxBackward``; an op of any other kind forms an
    unsupported partition (``Partition.is_supported()`` is False).
    """

    Abs = "Abs"
    AbsBackward = "AbsBackward"
    Add = "Add"
    AvgPool = "AvgPool"
    AvgPoolBackward = "AvgPoolBackward"
    BatchNormTrainingBackward = "BatchNormTrainingBackward"
    BatchNormForwardTraining = "BatchNormForwardTraining"
    BatchNormInference = "BatchNormInference"
    BiasAdd = "BiasAdd"
    BiasAddBackward = "BiasAddBackward"
    Clamp = "Clamp"
    ClampBackward = "ClampBackward"
    Concat = "Concat"
    Convolution = "Convolution"
    ConvolutionBackwardData = "ConvolutionBackwardData"
    ConvolutionBackwardWeights = "ConvolutionBackwardWeights"
    ConvTranspose = "ConvTranspose"
    ConvTransposeBackwardData = "ConvTransposeBackwardData"
    ConvTransposeBackwardWeights = "ConvTransposeBackwardWeights"
    Dequantize = "Dequantize"
    Divide = "Divide"
    DynamicDequantize = "DynamicDequantize"
    DynamicQuantize = "DynamicQuantize"
    Elu = "Elu"
    EluBackward = "EluBackward"
    End = "End"
    Exp = "Exp"
    GELU = "GELU"
    GELUBackward = "GELUBackward"
    GenIndex = "GenIndex"
    GreaterEqual = "GreaterEqual"
    GroupNorm = "GroupNorm"
    HardSigmoid = "HardSigmoid"
    HardSigmoidBackward = "HardSigmoidBackward"
    HardSwish = "HardSwish"
    HardSwishBackward = "HardSwishBackward"
    Interpolate = "Interpolate"
    InterpolateBackward = "InterpolateBackward"
    LayerNorm = "LayerNorm"
    LayerNormBackward = "LayerNormBackward"
    LeakyReLU = "LeakyReLU"
    Log = "Log"
    LogSoftmax = "LogSoftmax"
    LogSoftmaxBackward = "LogSoftmaxBackward"
    MatMul = "MatMul"
    Maximum = "Maximum"
    MaxPool = "MaxPool"
    MaxPoolBackward = "MaxPoolBackward"
    Minimum = "Minimum"
    Mish = "Mish"
    MishBackward = "MishBackward"
    Multiply = "Multiply"
    Pow = "Pow"
    PReLU = "PReLU"
    PReLUBackward = "PReLUBackward"
    Quantize = "Quantize"
    Reciprocal = "Reciprocal"
    ReduceL1 = "ReduceL1"
    ReduceL2 = "ReduceL2"
    ReduceMax = "ReduceMax"
    ReduceMean = "ReduceMean"
    ReduceMin = "ReduceMin"
    ReduceProd = "ReduceProd"
    ReduceSum = "ReduceSum"
    ReLU = "ReLU"
    ReLUBackward = "ReLUBackward"
    Reorder = "Reorder"
    RMSNorm = "RMSNorm"
    Round = "Round"
    Select = "Select"
    Sigmoid = "Sigmoid"
    SigmoidBackward = "SigmoidBackward"
    SoftMax = "SoftMax"
    SoftMaxBackward = "SoftMaxBackward"
    SoftPlus = "SoftPlus"
    SoftPlusBackward = "SoftPlusBackward"
    Sqrt = "Sqrt"
    SqrtBackward = "SqrtBackward"
    Square = "Square"
    SquaredDifference = "SquaredDifference"
    StaticReshape = "StaticReshape"
    StaticTranspose = "StaticTranspose"
    Subtract = "Subtract"
    Tanh = "Tanh"
    TanhBackward = "TanhBackward"
    TypeCast = "TypeCast"
    Wildcard = "Wildcard"
