"""logsoftmax: the log-softmax operator family, forward and backward, exact,
in every precision, on every device.

Faces (see docs/): the functional API below (arrays in, arrays out), autograd
(:mod:`logsoftmax.autograd`, :mod:`logsoftmax.nn`), the oneDNN-Graph-style API
(:mod:`logsoftmax.graph`) and the command line (``logsoftmax --help``).

``import logsoftmax`` compiles nothing and imports no optional dependency;
kernels compile on first use and are cached on disk.
"""

from ._api import (
    log_softmax,
    log_softmax_backward,
    logsumexp,
    softmax,
    softmax_backward,
)
from ._losses import cross_entropy, linear_cross_entropy, nll_loss
from .backends import backends, set_backend, use_backend
from .dtypes import bfloat16, float16, float32, float64

__version__ = "0.1.0"

# Faces beyond the functional API load on first access, so that
# `import logsoftmax` stays light (numpy, ml_dtypes; numba on first kernel).
_LAZY = {
    "Tensor": ("logsoftmax.autograd", "Tensor"),
    "tensor": ("logsoftmax.autograd", "tensor"),
    "no_grad": ("logsoftmax.autograd", "no_grad"),
    "AmpPolicy": ("logsoftmax.schema", "AmpPolicy"),
    "OpSchema": ("logsoftmax.schema", "OpSchema"),
    # through autograd: importing it registers every op's schema
    "registry": ("logsoftmax.autograd", "registry"),
}
_SUBMODULES = ("amp", "autograd", "graph", "nn", "schema", "cli", "backends", "dtypes")


def __getattr__(name):
    import importlib

    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"logsoftmax.{name}")
    raise AttributeError(f"module 'logsoftmax' has no attribute {name!r}")

__all__ = [
    # data types
    "float32",
    "bfloat16",
    "float16",
    "float64",
    # functional API
    "log_softmax",
    "log_softmax_backward",
    "softmax",
    "softmax_backward",
    "logsumexp",
    # losses (API.md section 7)
    "nll_loss",
    "cross_entropy",
    "linear_cross_entropy",
    # backend selection
    "backends",
    "set_backend",
    "use_backend",
    # op schema, AMP and autograd (API.md sections 3-4)
    "AmpPolicy",
    "OpSchema",
    "registry",
    "amp",
    "Tensor",
    "tensor",
    "no_grad",
    "nn",
    "autograd",
    # oneDNN-Graph-style API (API.md section 5)
    "graph",
]
