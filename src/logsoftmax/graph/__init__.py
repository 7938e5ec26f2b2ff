"""The oneDNN-Graph-style API: describe log-softmax ops as a graph, compile
partitions for concrete shapes and layouts, execute them on numpy buffers.

One module per oneDNN concept, with the names of ``dnnl_graph.hpp``:
:class:`Engine`/:class:`Stream` (engine.py), :class:`LogicalTensor`
(logical_tensor.py), :class:`Op` (op.py), :class:`Graph` (graph.py),
:class:`Partition`/:class:`CompiledPartition` (partition.py),
:class:`Tensor` (tensor.py), the enums (types.py), the errors (errors.py) and
oneDNN's JSON graph format (json_format.py).

Execution calls the functional front door (``logsoftmax.log_softmax`` and
friends) on strided numpy views of the user's buffers: no copies, no second
implementation. See docs/graph.md.

>>> import numpy as np
>>> from logsoftmax import graph as g
>>> eng = g.Engine(g.EngineKind.cpu)
>>> src = g.LogicalTensor(0, g.DataType.f32, [2, 3])
>>> dst = g.LogicalTensor(1, g.DataType.f32, [2, 3])
>>> gr = g.Graph(g.EngineKind.cpu)
>>> gr.add_op(g.Op(0, g.OpKind.LogSoftmax, "lsm").add_input(src).add_output(dst))
>>> gr.finalize()
>>> (p,) = gr.get_partitions()
>>> cp = p.compile([src], [dst], eng)
>>> x = np.zeros((2, 3), np.float32); y = np.empty_like(x)
>>> cp.execute(g.Stream(eng), [g.Tensor(src, eng, x)], [g.Tensor(dst, eng, y)])
>>> bool(np.allclose(y, -np.log(3)))
True
"""

from .engine import Engine, Stream
from .errors import (
    CompileError,
    ExecuteError,
    GraphBuildError,
    GraphError,
    InvalidArgumentError,
    InvalidGraphError,
    JsonFormatError,
)
from .graph import FPMATH_MODES, Graph
from .json_format import case_names, case_path, from_json, load_json, to_json
from .logical_tensor import LogicalTensor, dense_strides, strides_from_tag
from .op import SUPPORTED_OPS, Op
from .partition import (
    CompiledPartition,
    Partition,
    compile_cache_clear,
    compile_cache_info,
)
from .tensor import Tensor
from .types import (
    UNKNOWN_DIM,
    UNKNOWN_NDIMS,
    AttrType,
    DataType,
    EngineKind,
    LayoutType,
    OpAttr,
    OpKind,
    PartitionPolicy,
    PropertyType,
)

__all__ = [
    # enums and sentinels
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
    "FPMATH_MODES",
    # object model
    "Engine",
    "Stream",
    "LogicalTensor",
    "Op",
    "Graph",
    "Partition",
    "CompiledPartition",
    "Tensor",
    "SUPPORTED_OPS",
    # layouts
    "dense_strides",
    "strides_from_tag",
    # compile cache
    "compile_cache_info",
    "compile_cache_clear",
    # JSON format and bundled cases
    "from_json",
    "to_json",
    "load_json",
    "case_names",
    "case_path",
    # errors
    "GraphError",
    "InvalidArgumentError",
    "GraphBuildError",
    "InvalidGraphError",
    "CompileError",
    "ExecuteError",
    "JsonFormatError",
]
