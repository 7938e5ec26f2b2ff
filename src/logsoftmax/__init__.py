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
from .backends import backends, set_backend, use_backend
from .dtypes import bfloat16, float16, float32, float64

__version__ = "0.1.0"

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
    # backend selection
    "backends",
    "set_backend",
    "use_backend",
]
