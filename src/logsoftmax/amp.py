"""Automatic mixed precision: the ``autocast`` context and the casting rule.

Inside ``with autocast(bfloat16):`` each op casts its floating inputs as its
schema's :class:`~logsoftmax.schema.AmpPolicy` says (API.md section 3):

============  =====================================  =======================
policy        ops                                    inputs become
============  =====================================  =======================
PROMOTE       matmul, linear                         the autocast dtype
                                                     (float64 left alone)
FORCE_FP32    softmax, log_softmax, nll_loss,        float32 (float64 left
              cross_entropy, sum, mean               alone: never downcast)
KEEP_INPUT    + - * /, neg, relu, reshape, ...       unchanged
============  =====================================  =======================

The state is per thread (a :mod:`contextvars` variable, so also per asyncio
task) and nests: the innermost ``autocast`` wins, ``enabled=False`` switches
it off inside an outer one, and leaving a block restores the outer state.
Casts are recorded by autograd, so gradients reach every leaf in the leaf's
own dtype. The backward pass always runs with autocast off.

>>> import numpy as np, logsoftmax as ls
>>> from logsoftmax.nn import functional as F
>>> x = ls.tensor(np.zeros((2, 3), ls.bfloat16))
>>> with ls.amp.autocast(ls.bfloat16):
...     F.log_softmax(x, axis=1).dtype
dtype('float32')
"""

from __future__ import annotations

import contextvars
import functools
from typing import Iterable

import numpy as np

from . import dtypes
from .schema import AmpPolicy

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "cast_dtypes"]

#: dtypes autocast accepts as its target
AUTOCAST_DTYPES = (dtypes.bfloat16, dtypes.float16)
#: floating dtypes autocast may cast (float64 is never touched)
_CASTABLE = (dtypes.float32, dtypes.bfloat16, dtypes.float16)

# None = off; otherwise the active autocast dtype.
_STATE: contextvars.ContextVar[np.dtype | None] = contextvars.ContextVar(
    "logsoftmax_autocast", default=None
)


class autocast:  # noqa: N801 - named like torch.autocast, used as a function
    """Context manager (and decorator) enabling mixed precision in this thread.

    Args:
      dtype: the low-precision dtype PROMOTE ops compute in:
        ``logsoftmax.bfloat16`` (default) or ``logsoftmax.float16``.
      enabled: ``False`` turns autocast off inside the block (useful nested in
        an enabled one).

    Raises:
      TypeError: ``dtype`` is not bfloat16 or float16; ``enabled`` not a bool.
    """

    def __init__(self, dtype=dtypes.bfloat16, enabled: bool = True) -> None:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt not in AUTOCAST_DTYPES:
            raise TypeError(
                f"autocast: dtype={dtype!r} is not supported; expected "
                "logsoftmax.bfloat16 or logsoftmax.float16"
            )
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"autocast: enabled must be a bool, got {enabled!r}")
        self.dtype: np.dtype = dt
        self.enabled = bool(enabled)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> "autocast":
        # A stack of tokens makes one instance re-entrant (nested `with a:`).
        self._tokens.append(_STATE.set(self.dtype if self.enabled else None))
        return self

    def __exit__(self, *exc) -> None:
        _STATE.reset(self._tokens.pop())

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"autocast(dtype={dtypes.name_of(self.dtype)}, enabled={self.enabled})"


def is_autocast_enabled() -> bool:
    """Whether an autocast is active in this thread."""
    return _STATE.get() is not None


def get_autocast_dtype() -> np.dtype | None:
    """The active autocast dtype in this thread, or ``None`` when off."""
    return _STATE.get()


def _disabled() -> contextvars.Token:
    """Switch autocast off (the engine's backward); undo with ``_restore``."""
    return _STATE.set(None)


def _restore(token: contextvars.Token) -> None:
    _STATE.reset(token)


def cast_dtypes(
    policy: AmpPolicy, in_dtypes: Iterable[np.dtype | None]
) -> list[np.dtype | None]:
    """The dtype each input is cast to under the current autocast state.

    Args:
      policy: the op's AMP policy.
      in_dtypes: each input's numpy dtype (``None`` for an absent input).

    Returns:
      One entry per input: the dtype to cast to, or ``None`` for "leave it".
      Only float32/bfloat16/float16 inputs are ever cast; float64, integer
      (e.g. class targets) and absent inputs are left alone.
    """
    target = _STATE.get()
    in_dtypes = list(in_dtypes)
    if target is None or policy is AmpPolicy.KEEP_INPUT:
        return [None] * len(in_dtypes)
    want = dtypes.float32 if policy is AmpPolicy.FORCE_FP32 else target
    return [
        want if dt is not None and dt in _CASTABLE and dt != want else None
        for dt in in_dtypes
    ]
