"""``Tensor`` and ``Function``: arrays that record ops, and the ops' base class.

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

Every op is a :class:`Function` subclass (:mod:`.nodes`, :mod:`.losses`)
with an :class:`~logsoftmax.schema.OpSchema`, and every call, forward or
backward, public or internal, goes through :func:`dispatch`, the one place
an op runs (as tinygrad keeps ``Function.apply`` next to its Tensor):

1. inputs become Tensors (arrays as constants; a Python scalar as a 0-d array
   of the first Tensor input's dtype, a "weak" scalar as in PyTorch);
2. the AMP rule: :func:`logsoftmax.amp.cast_dtypes` with the schema's policy
   gives each input's compute dtype; the op may add its own promotion
   (``promote``, e.g. bf16 + f32 -> f32). Casts go through the recorded
   ``cast`` op, so gradients flow back to each input in its own dtype;
3. ``node.prepare(*tensors, **attrs)`` validates (axis, shapes, targets) the
   inputs as ``compute`` will see them and stores the op's attributes;
4. ``node.compute(*arrays)`` runs the math through the front door / fused
   kernels and saves what the gradient needs;
5. if grad mode is on and an input requires grad, the node is wired in:
   ``next_functions``, ``input_meta``, and the output's ``grad_fn``.

Tensor methods and operators are thin: each calls one op class. This module
and the op modules import each other (the one import cycle of the package,
as in tinygrad); the ops are imported at the bottom.
"""

from __future__ import annotations

import warnings
import weakref
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .. import amp, dtypes
from ..backends import is_torch_tensor
from . import _array
from .engine import Node, run_backward
from .grad_mode import is_grad_enabled, no_grad

if TYPE_CHECKING:
    from ..schema import OpSchema

__all__ = ["Tensor", "tensor", "as_tensor", "Function", "dispatch", "cast"]


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
                 "_fresh", "__weakref__")
    # ndarray (op) Tensor must defer to the Tensor's reflected operator.
    __array_ufunc__ = None

    def __init__(self, data, requires_grad: bool = False, dtype=None) -> None:
        self.data = _to_array(data, dtype)
        self._grad = None
        self._grad_fn = None
        self._retains_grad = False
        self._requires_grad = False
        self._fresh = False
        self.requires_grad = requires_grad

    @classmethod
    def _make(cls, data, grad_fn=None, fresh: bool = False) -> "Tensor":
        """Wrap an op result without validation (the dispatcher's constructor).

        ``fresh``: ``data`` was just allocated by an op and nothing else holds
        it, so the engine may adopt it as a leaf's ``.grad`` without a copy.
        """
        t = cls.__new__(cls)
        t.data = data
        t._grad = None
        t._grad_fn = grad_fn
        t._retains_grad = False
        t._requires_grad = grad_fn is not None
        t._fresh = fresh
        return t

    # -- metadata ------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the elements."""
        dt = self.data.dtype
        return dt if isinstance(dt, np.dtype) else _array.dtype_of(self.data)

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
        if is_torch_tensor(data):
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
        return cast(self, np.dtype(dtype))

    astype = to

    def __add__(self, other):
        return _nodes.Add.forward(self, other)

    def __radd__(self, other):
        return _nodes.Add.forward(other, self)

    def __sub__(self, other):
        return _nodes.Sub.forward(self, other)

    def __rsub__(self, other):
        return _nodes.Sub.forward(other, self)

    def __mul__(self, other):
        return _nodes.Mul.forward(self, other)

    def __rmul__(self, other):
        return _nodes.Mul.forward(other, self)

    def __truediv__(self, other):
        return _nodes.Div.forward(self, other)

    def __rtruediv__(self, other):
        return _nodes.Div.forward(other, self)

    def __matmul__(self, other):
        return _nodes.MatMul.forward(self, other)

    def __rmatmul__(self, other):
        return _nodes.MatMul.forward(other, self)

    def __neg__(self):
        return _nodes.Neg.forward(self)

    def __pos__(self):
        return self

    def sum(self, axis=None, keepdims: bool = False) -> "Tensor":
        """Sum over ``axis`` (int, tuple or None = all); FORCE_FP32 under AMP."""
        return _nodes.Sum.forward(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> "Tensor":
        """Mean over ``axis`` (int, tuple or None = all); FORCE_FP32 under AMP."""
        return _nodes.Mean.forward(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape) -> "Tensor":
        """Same data in a new shape (``-1`` infers one dimension)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _nodes.Reshape.forward(self, shape=shape)

    def exp(self) -> "Tensor":
        return _nodes.Exp.forward(self)

    def relu(self) -> "Tensor":
        return _nodes.Relu.forward(self)

    def transpose(self) -> "Tensor":
        """Swap the last two axes."""
        return _nodes.Transpose.forward(self)

    @property
    def T(self) -> "Tensor":  # noqa: N802
        """Swap the last two axes (the transpose of a matrix)."""
        return _nodes.Transpose.forward(self)


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
            g = Tensor._make(_array.ones_like(t.data), fresh=True)
        else:
            g = as_tensor(g)
            if g._fresh:  # the caller holds it: the engine must not adopt it
                g = Tensor._make(g.data)
            if g.shape != t.shape:
                raise ValueError(
                    f"{fn}: grad has shape {g.shape}, expected the output's shape "
                    f"{t.shape}"
                )
            if g.dtype != t.dtype:
                g = g.to(t.dtype)
        out.append(g)
    return list(roots), out


# ===========================================================================
# ops: the base class and the one dispatcher
# ===========================================================================
class Function(Node):
    """The base of every op: a :class:`~.engine.Node` that knows its forward.

    A subclass carries an ``OpSchema`` (``schema``, set by
    :func:`logsoftmax.schema.register`) and implements:

    - ``prepare(*inputs, **attrs)``: validate the (cast) input Tensors and
      store the op's attributes;
    - ``promote(dtypes)``: per-input dtypes the op itself needs (a common
      dtype, integers to float32), or None;
    - ``compute(*arrays)``: the forward on backend arrays, saving what the
      gradient needs in the fields named by ``saved_fields``;
    - ``backward(grad)``: the gradient rule, written with Tensor ops, so it
      runs eagerly or recorded (double backward).
    """

    schema: ClassVar["OpSchema"]
    #: keep the (cast) input Tensors in ``self.inputs`` for ``backward``
    keep_inputs: ClassVar[bool] = False
    #: ``compute`` returns a new array that aliases no input (False for views:
    #: reshape, transpose, broadcast); see :meth:`Tensor._make`
    fresh: ClassVar[bool] = True
    inputs: list["Tensor | None"] | None = None

    def prepare(self, *inputs: "Tensor | None") -> None:
        """Validate the inputs and store the op's attributes (keyword args)."""

    def promote(self, dts: list) -> list | None:
        """Per-input dtypes the op itself needs (e.g. a common dtype), or None
        when every input already has the dtype the op computes in."""
        return None

    def compute(self, *arrays):  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def forward(cls, *inputs, **attrs) -> "Tensor":
        """Validate, apply the schema's AMP policy, compute, and record."""
        return dispatch(cls, inputs, attrs)

    def apply(self, grad_out) -> list:
        """Eager backward: ``grad_out`` (Tensor or array) -> one array (or
        ``None``) per input, computed by the op's fused backward kernel."""
        self._check_alive()
        token = amp._disabled()
        try:
            with no_grad():
                grads = self.backward(as_tensor(grad_out))
        finally:
            amp._restore(token)
        return [None if g is None else g.data for g in grads]


def _coerce(x, ref_dtype) -> Tensor | None:
    if x is None or isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float)) and ref_dtype is not None:
        return Tensor._make(_array.scalar_like(x, ref_dtype))
    return Tensor(x)


def _tensors(inputs: tuple) -> list:
    """The inputs as Tensors (or None): arrays become constants, Python
    scalars 0-d arrays of the first Tensor input's dtype. Inputs that are
    all Tensors already (every call a gradient rule makes) pass untouched."""
    for x in inputs:
        if x is not None and not isinstance(x, Tensor):
            break
    else:
        return list(inputs)
    ref = next((x.dtype for x in inputs if isinstance(x, Tensor)), None)
    return [_coerce(x, ref) for x in inputs]


def cast(t: Tensor, dtype) -> Tensor:
    """``t`` as ``dtype`` through the recorded ``cast`` op (identity if equal)."""
    if t.dtype == dtype:
        return t
    return dispatch(_nodes.Cast, (t,), {"dtype": dtype})


def dispatch(cls: type[Function], inputs: tuple, attrs: dict[str, Any]) -> Tensor:
    """Run op ``cls`` on ``inputs`` with keyword ``attrs``; see module docstring.

    Every op call, forward or inside a gradient rule, comes through here, so
    the path is kept short (measured in docs/performance.md, "Autograd per
    step"): the AMP rule is only consulted while an autocast is active, an
    op's ``promote`` returns None when no input needs a cast, and the edges
    are built in one loop only when the result is recorded.
    """
    tensors = _tensors(inputs)
    node = cls()
    dts = [None if t is None else t.dtype for t in tensors]
    casts = node.promote(dts)
    if amp.get_autocast_dtype() is not None:  # the AMP rule, for every op
        want = amp.cast_dtypes(cls.schema.amp_policy, dts)
        casts = [w or (casts[i] if casts else None) for i, w in enumerate(want)]
    if casts is not None:
        for i, dt in enumerate(casts):
            if dt is not None and dt != dts[i]:
                tensors[i] = cast(tensors[i], dt)
                dts[i] = dt
    node.prepare(*tensors, **attrs)
    node.inputs = tensors
    out = node.compute(*[None if t is None else t.data for t in tensors])
    if isinstance(out, np.generic):  # numpy reductions return scalars, not 0-d arrays
        out = np.asarray(out)
    if not is_grad_enabled():
        return Tensor._make(out, fresh=cls.fresh)
    edges, record = [], False
    for t in tensors:
        if t is None or not t._requires_grad:
            edges.append(None)
        else:
            edges.append(t._grad_fn or t)
            record = True
    if not record:
        return Tensor._make(out, fresh=cls.fresh)
    node.next_functions = tuple(edges)
    node.input_meta = tuple(
        None if t is None else (t.data.shape, dt) for t, dt in zip(tensors, dts)
    )
    if not node.keep_inputs:
        node.inputs = None
    return Tensor._make(out, grad_fn=node)


from . import nodes as _nodes  # noqa: E402  (the ops need Tensor and Function)
