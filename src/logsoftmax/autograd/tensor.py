"""``Tensor``: a backend array plus the autograd bookkeeping.

A Tensor wraps ``.data``, the backend array (numpy, dask, or a torch CUDA
tensor), and records the op that produced it (``.grad_fn``) when grad mode
is on and an input requires grad. Leaf/non-leaf rules follow PyTorch:

- a Tensor the user creates is a *leaf*; so is every op result computed
  under ``no_grad()`` or from inputs that do not require grad;
- ``.grad`` of a leaf that requires grad is a Tensor, accumulated across
  ``backward()`` calls until reset with ``t.grad = None``;
- ``.grad`` of a non-leaf is ``None`` (with a warning) unless
  ``t.retain_grad()`` was called;
- only floating Tensors (float32, bfloat16, float16, float64) can require
  grad; ``requires_grad`` can only be changed on leaves.

Tensor methods and operators are thin: each calls one op class from
:mod:`.nodes` through :func:`~.dispatch.dispatch`.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np

from .. import dtypes
from . import _array
from .engine import run_backward

__all__ = ["Tensor", "tensor", "as_tensor"]


def _to_array(data, dtype):
    if isinstance(data, Tensor):
        data = data.data
    if _array.is_array(data):
        arr = data
    else:
        arr = np.asarray(data)
        # Python floats become float32, as in PyTorch (numpy arrays keep theirs).
        if dtype is None and arr.dtype == np.float64 and not isinstance(
            data, (np.generic, np.ndarray)
        ):
            arr = arr.astype(np.float32)
    if dtype is not None:
        arr = _array.astype(arr, np.dtype(dtype))
    dt = _array.dtype_of(arr)
    if dt.kind not in "biuf" and dt not in dtypes.SUPPORTED:
        raise TypeError(
            f"tensor: data has dtype {dt}, expected a real floating, integer or "
            "bool dtype"
        )
    return arr


class Tensor:
    """An array that records the ops applied to it (see module docstring).

    Args:
      data: array-like; numpy, dask and torch arrays are kept as they are
        (not copied), other array-likes go through ``np.asarray`` (Python
        floats give float32).
      requires_grad: record ops on this Tensor and accumulate its ``.grad``.
      dtype: optional dtype to cast ``data`` to.

    Raises:
      RuntimeError: ``requires_grad=True`` for a non-floating dtype.
      TypeError: complex, object or string data.
    """

    __slots__ = ("data", "_requires_grad", "_grad", "_grad_fn", "_retains_grad",
                 "__weakref__")
    # ndarray (op) Tensor must defer to the Tensor's reflected operator.
    __array_ufunc__ = None

    def __init__(self, data, requires_grad: bool = False, dtype=None) -> None:
        self.data = _to_array(data, dtype)
        self._grad = None
        self._grad_fn = None
        self._retains_grad = False
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _make(cls, data, grad_fn=None) -> "Tensor":
        """Wrap an op result without validation (the dispatcher's constructor)."""
        t = cls.__new__(cls)
        t.data = data
        t._grad = None
        t._grad_fn = grad_fn
        t._retains_grad = False
        t._requires_grad = grad_fn is not None
        return t

    # -- metadata ------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the elements."""
        return _array.dtype_of(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Tensor")
        return self.shape[0]

    # -- autograd state ------------------------------------------------------
    @property
    def grad_fn(self):
        """The node that produced this Tensor (``None`` for leaves)."""
        return self._grad_fn

    @property
    def is_leaf(self) -> bool:
        return self._grad_fn is None

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = bool(value)
        if self._grad_fn is not None:
            raise RuntimeError(
                "requires_grad: can only be changed on leaf Tensors; this Tensor "
                f"was produced by {self._grad_fn.name()} (use .detach())"
            )
        if value and self.dtype not in dtypes.SUPPORTED:
            raise RuntimeError(
                f"requires_grad: only Tensors of floating dtype can require "
                f"gradients, got dtype {self.dtype}"
            )
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self) -> "Tensor | None":
        """The accumulated gradient (a Tensor of this Tensor's shape and dtype)."""
        if self._grad_fn is not None and not self._retains_grad:
            warnings.warn(
                "Tensor.grad of a non-leaf Tensor is None unless retain_grad() "
                "is called before backward()",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            value = as_tensor(value)
            if value.shape != self.shape:
                raise ValueError(
                    f"grad: assigned a gradient of shape {value.shape}, expected "
                    f"this Tensor's shape {self.shape}"
                )
        self._grad = value

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf Tensor (no-op on a leaf)."""
        if self._grad_fn is None or self._retains_grad:
            return
        if not self._requires_grad:
            raise RuntimeError("retain_grad: this Tensor does not require grad")
        node = self._grad_fn
        node._retained = (node._retained or []) + [weakref.ref(self)]
        self._retains_grad = True

    def detach(self) -> "Tensor":
        """A leaf sharing ``data``, cut from the graph."""
        return Tensor._make(self.data)

    def backward(
        self, grad=None, create_graph: bool = False, retain_graph=None
    ) -> None:
        """Accumulate d(self)/d(leaf) * grad into every reachable leaf's ``.grad``.

        Args:
          grad: the gradient of some scalar with respect to this Tensor (a
            Tensor or array of this Tensor's shape); may be omitted for a
            one-element Tensor (taken as 1).
          create_graph: record the backward pass, so the gradients can be
            differentiated again (Hessian-vector products).
          retain_graph: keep the saved arrays for another backward; defaults
            to ``create_graph``.

        Raises:
          RuntimeError: this Tensor does not require grad; ``grad`` omitted
            for a Tensor of more than one element; the graph was already
            freed by an earlier backward.
          ValueError: ``grad`` has the wrong shape.
        """
        roots, grads = _check_roots([self], [grad], "backward")
        retain = create_graph if retain_graph is None else bool(retain_graph)
        run_backward(roots, grads, retain, bool(create_graph))

    # -- conversion ----------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        data = self.data
        if not isinstance(data, np.ndarray):
            data = self.numpy()
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        return data.copy() if copy else data

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (``self.data`` itself for numpy data)."""
        data = self.data
        if isinstance(data, np.ndarray):
            return data
        if hasattr(data, "compute"):  # dask
            return np.asarray(data.compute())
        if _array._is_torch(data):
            if self.dtype == dtypes.bfloat16:
                return data.detach().float().cpu().numpy().astype(dtypes.bfloat16)
            return data.detach().cpu().numpy()
        return np.asarray(data)

    def item(self) -> float | int | bool:
        if self.size != 1:
            raise ValueError(f"item: Tensor has {self.size} elements, expected 1")
        return self.numpy().reshape(()).item()

    def __float__(self) -> float:
        return float(self.item())

    def __repr__(self) -> str:
        extra = ""
        if self._grad_fn is not None:
            extra = f", grad_fn=<{self._grad_fn.name()}>"
        elif self._requires_grad:
            extra = ", requires_grad=True"
        return f"Tensor({self.data!r}{extra})"

    # -- ops (one op class each; see nodes.py) -------------------------------
    def to(self, dtype) -> "Tensor":
        """A copy cast to ``dtype`` (differentiable; identity if equal)."""
        from .dispatch import cast

        return cast(self, np.dtype(dtype))

    astype = to

    def __add__(self, other):
        return _nodes.AddBackward.forward(self, other)

    def __radd__(self, other):
        return _nodes.AddBackward.forward(other, self)

    def __sub__(self, other):
        return _nodes.SubBackward.forward(self, other)

    def __rsub__(self, other):
        return _nodes.SubBackward.forward(other, self)

    def __mul__(self, other):
        return _nodes.MulBackward.forward(self, other)

    def __rmul__(self, other):
        return _nodes.MulBackward.forward(other, self)

    def __truediv__(self, other):
        return _nodes.DivBackward.forward(self, other)

    def __rtruediv__(self, other):
        return _nodes.DivBackward.forward(other, self)

    def __matmul__(self, other):
        return _nodes.MatMulBackward.forward(self, other)

    def __rmatmul__(self, other):
        return _nodes.MatMulBackward.forward(other, self)

    def __neg__(self):
        return _nodes.NegBackward.forward(self)

    def __pos__(self):
        return self

    def sum(self, axis=None, keepdims: bool = False) -> "Tensor":
        """Sum over ``axis`` (int, tuple or None = all); FORCE_FP32 under AMP."""
        return _nodes.SumBackward.forward(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> "Tensor":
        """Mean over ``axis`` (int, tuple or None = all); FORCE_FP32 under AMP."""
        return _nodes.MeanBackward.forward(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape) -> "Tensor":
        """Same data in a new shape (``-1`` infers one dimension)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _nodes.ReshapeBackward.forward(self, shape=shape)

    def exp(self) -> "Tensor":
        return _nodes.ExpBackward.forward(self)

    def relu(self) -> "Tensor":
        return _nodes.ReluBackward.forward(self)

    def transpose(self) -> "Tensor":
        """Swap the last two axes."""
        return _nodes.TransposeBackward.forward(self)

    @property
    def T(self) -> "Tensor":  # noqa: N802
        """Swap the last two axes (the transpose of a matrix)."""
        return _nodes.TransposeBackward.forward(self)


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """Create a leaf :class:`Tensor` (see :class:`Tensor` for the arguments).

    >>> import logsoftmax as ls
    >>> ls.tensor([1.0, 2.0], requires_grad=True)
    Tensor(array([1., 2.], dtype=float32), requires_grad=True)
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def as_tensor(x) -> Tensor:
    """``x`` if it is a Tensor, else a constant leaf wrapping it."""
    return x if isinstance(x, Tensor) else Tensor(x)


def _check_roots(roots, grads, fn: str):
    """Validate ``backward``'s outputs and gradients; make the gradients Tensors."""
    out = []
    for i, (t, g) in enumerate(zip(roots, grads)):
        if not t.requires_grad:
            raise RuntimeError(
                f"{fn}: element {i} of the outputs does not require grad and has "
                "no grad_fn (was it computed under no_grad(), or from Tensors "
                "without requires_grad=True?)"
            )
        if g is None:
            if t.size != 1:
                raise RuntimeError(
                    f"{fn}: grad can be omitted only for a one-element output; this "
                    f"output has shape {t.shape}, so pass grad= an array of that shape"
                )
            g = Tensor._make(_array.ones_like(t.data))
        else:
            g = as_tensor(g)
            if g.shape != t.shape:
                raise ValueError(
                    f"{fn}: grad has shape {g.shape}, expected the output's shape "
                    f"{t.shape}"
                )
            if g.dtype != t.dtype:
                g = g.to(t.dtype)
        out.append(g)
    return list(roots), out


from . import nodes as _nodes  # noqa: E402  (the ops need Tensor defined first)
