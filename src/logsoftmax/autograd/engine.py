"""The autograd engine: the graph's vertex, :class:`Node`, and ``backward``.

A graph is made of :class:`Node` objects, one per recorded op output. A node
knows, per input, where that input's gradient goes (``next_functions``: the
producing node, the leaf Tensor itself, or ``None``) and the input's shape
and dtype (``input_meta``). ``backward`` sorts the nodes reachable from the
roots once (iterative depth-first search, no recursion limit), then sweeps
them in topological order, summing the gradients that fan in to each node
before calling its ``backward``.

Gradients are Tensors all the way: with ``create_graph=True`` the sweep runs
with grad mode on, so every op a backward rule calls is itself recorded and
can be differentiated again; otherwise it runs under ``no_grad`` and the ops
are plain (fused) kernel calls. Autocast is always off during the sweep.

This module sits below ``Tensor``: it never imports it (a gradient's own
type builds the Tensors it needs). How an op runs forward, and ``apply``,
live with ``Tensor`` in :mod:`.tensor` (:class:`~.tensor.Function`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from .. import amp
from . import _array
from .grad_mode import _GRAD, no_grad

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["Node", "run_backward"]


class Node:
    """One recorded op output: its gradient rule plus the edges to its inputs.

    Subclasses implement ``backward`` (the output's gradient Tensor in, one
    gradient Tensor or ``None`` per input) and list the attributes that hold
    saved arrays in ``saved_fields`` (freed by :meth:`release`). Ops derive
    from :class:`~.tensor.Function`, which adds the forward.

    The edges are class-level defaults (no ``__init__``), written per
    instance only when the node is recorded: creating a node costs nothing.
    """

    #: PyTorch-style display name (``y.grad_fn``, errors): by default the
    #: class name + ``"Backward"``, set for each subclass
    display_name: ClassVar[str] = "Node"
    #: attributes dropped by :meth:`release` after a backward pass
    saved_fields: ClassVar[tuple[str, ...]] = ()
    #: per input: the producing Node, the leaf Tensor, or None (no gradient)
    next_functions: tuple[Any, ...] = ()
    #: per input: ``(shape, dtype)``, or None for an absent input
    input_meta: tuple[Any, ...] = ()
    _freed = False
    _retained: list[weakref.ref] | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "display_name" not in cls.__dict__:
            cls.display_name = cls.__name__ + "Backward"

    def backward(self, grad: "Tensor") -> Sequence["Tensor | None"]:  # pragma: no cover
        """The gradient rule: one Tensor (or None) per input."""
        raise NotImplementedError

    def release(self) -> None:
        """Free the saved arrays (after a backward without ``retain_graph``)."""
        for name in self.saved_fields:
            setattr(self, name, None)
        self._freed = bool(self.saved_fields)

    def _check_alive(self) -> None:
        if self._freed:
            raise RuntimeError(
                f"{self.display_name}: trying to backward through the graph a "
                "second time (or to use saved tensors after they were freed); "
                "the saved arrays are released after .backward(). Pass "
                "retain_graph=True to the first backward to keep them."
            )

    def name(self) -> str:
        """The display name, as PyTorch's ``grad_fn.name()``."""
        return self.display_name

    def __repr__(self) -> str:
        schema = getattr(self, "schema", None)
        if schema is None:
            return f"<{self.display_name}>"
        return f"<{self.display_name} {schema.name} v{schema.version}>"


def _toposort(starts: Sequence[Node]) -> list[Node]:
    """Nodes reachable from ``starts``, each after every node that feeds it a
    gradient (reverse DFS post-order, with an explicit stack)."""
    order: list[Node] = []
    seen: set[int] = set()
    for start in starts:
        if id(start) in seen:
            continue
        seen.add(id(start))
        stack = [(start, iter(start.next_functions))]
        while stack:
            node, children = stack[-1]
            for child in children:
                if isinstance(child, Node) and id(child) not in seen:
                    seen.add(id(child))
                    stack.append((child, iter(child.next_functions)))
                    break
            else:
                stack.pop()
                order.append(node)
    order.reverse()
    return order


def _accumulate(t: "Tensor", g: "Tensor", create_graph: bool, adopted: set) -> None:
    """``t.grad += g``, out of place (so an earlier ``.grad`` is never mutated).

    A first gradient is adopted without a copy when an op has just allocated
    it (``g._fresh``) and no other leaf took the same array in this pass
    (``adopted``: ids of adopted arrays), as PyTorch's AccumulateGrad steals
    an unshared gradient; anything else (a caller's array, a view) is copied,
    so ``.grad`` never aliases memory someone else holds. The copy was the
    largest engine cost at 784-512-10 (a 1.6 MB weight gradient per step).
    """
    if create_graph:
        t._grad = g if t._grad is None else t._grad + g
    elif t._grad is None:
        data = g.data
        if g._fresh and id(data) not in adopted:
            adopted.add(id(data))
        else:
            data = _array.copy(data)
        t._grad = type(g)._make(data)
    else:
        with no_grad():
            t._grad = type(g)._make((t._grad + g).data)


def _conform(node: Node, i: int, g: "Tensor", meta) -> "Tensor":
    """Check a rule's gradient against the input's shape (a bug guard: one
    tuple comparison); cast it to the input's dtype if needed."""
    shape, dtype = meta
    data = g.data
    if data.shape != shape:
        raise RuntimeError(
            f"{node.name()}: gradient for input {i} has shape {tuple(data.shape)}, "
            f"expected {tuple(shape)} (a bug in the op's backward rule)"
        )
    return g if data.dtype is dtype or g.dtype == dtype else g.to(dtype)


def run_backward(
    roots: Sequence["Tensor"],
    grads: Sequence["Tensor"],
    retain_graph: bool,
    create_graph: bool,
    inputs: Sequence["Tensor"] | None = None,
) -> list["Tensor | None"] | None:
    """Backpropagate ``grads`` from ``roots``.

    Accumulates into the ``.grad`` of every reachable leaf (and of non-leaves
    that ``retain_grad()``), or, when ``inputs`` is given, returns the
    gradient for each of ``inputs`` and touches no ``.grad``.
    """
    want = None if inputs is None else {id(t): None for t in inputs}
    want_nodes = {} if inputs is None else {
        id(t.grad_fn): id(t) for t in inputs if t.grad_fn is not None
    }
    pending: dict[int, "Tensor"] = {}
    starts: list[Node] = []
    adopted: set[int] = set()

    def send(edge, g: "Tensor") -> None:
        if isinstance(edge, Node):
            old = pending.get(id(edge))
            pending[id(edge)] = g if old is None else old + g
        elif want is None:
            _accumulate(edge, g, create_graph, adopted)
        elif id(edge) in want:
            old = want[id(edge)]
            want[id(edge)] = g if old is None else old + g

    grad_token = _GRAD.set(create_graph)
    amp_token = amp._disabled()
    try:
        for root, g in zip(roots, grads):
            edge = root.grad_fn if root.grad_fn is not None else root
            send(edge, g)
            if isinstance(edge, Node):
                starts.append(edge)
        for node in _toposort(starts):
            g = pending.pop(id(node), None)
            if g is None:
                continue
            if want_nodes and id(node) in want_nodes:
                want[want_nodes[id(node)]] = g
            if node._retained:
                for ref in node._retained:
                    t = ref()
                    if t is not None and want is None:
                        _accumulate(t, g, create_graph, adopted)
            if node._freed:
                node._check_alive()
            in_grads = node.backward(g)
            if not retain_graph:
                node.release()
            i = 0
            for edge, meta, gi in zip(node.next_functions, node.input_meta, in_grads):
                if edge is not None and gi is not None:
                    send(edge, _conform(node, i, gi, meta))
                i += 1
    finally:
        amp._restore(amp_token)
        _GRAD.reset(grad_token)
    return None if want is None else [want[id(t)] for t in inputs]
