"""Grad mode: whether ops are recorded for autograd (per thread, nestable).

``no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(mode)`` are context
managers and decorators, as in PyTorch. The state is a :mod:`contextvars`
variable, so each thread (and asyncio task) has its own.
"""

from __future__ import annotations

import contextvars
import functools

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]

_GRAD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "logsoftmax_grad_enabled", default=True
)


def is_grad_enabled() -> bool:
    """Whether ops are recorded for autograd in this thread."""
    return _GRAD.get()


class set_grad_enabled:  # noqa: N801 - torch's name
    """Context manager (and decorator) setting grad mode to ``mode``."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = bool(mode)
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> None:
        self._tokens.append(_GRAD.set(self.mode))

    def __exit__(self, *exc) -> None:
        _GRAD.reset(self._tokens.pop())

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)(self.mode):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(set_grad_enabled):  # noqa: N801
    """Disable graph recording inside the block (results have no grad_fn)."""

    def __init__(self) -> None:
        super().__init__(False)

    def __call__(self, fn):
        return set_grad_enabled(False)(fn)


class enable_grad(set_grad_enabled):  # noqa: N801
    """Re-enable graph recording inside a ``no_grad`` block."""

    def __init__(self) -> None:
        super().__init__(True)

    def __call__(self, fn):
        return set_grad_enabled(True)(fn)
