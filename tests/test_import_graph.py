"""Imports run downhill (docs/design.md, "Imports run downhill").

The import graph of ``src/logsoftmax`` has one node per module (a package is
its ``__init__``) and an edge ``a -> b`` for every import of ``b`` written in
``a``, at module level or inside a function (lazy imports count: they run
the same code, only later). Imports under ``if TYPE_CHECKING:`` never run and
do not count; nor does the implicit import of a module's parent packages, nor
``importlib`` calls by dotted string (the backend registry's).

The graph must be a DAG except for the cycles listed in ``ALLOWED_CYCLES``:
then every module has a layer, and no import runs back up. Run this file as
a script to print the layers and the edges.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "logsoftmax"

#: strongly connected components of more than one module that may exist
ALLOWED_CYCLES = {
    # Tensor <-> its ops (as tinygrad): Tensor's operators call the op classes,
    # and the op classes build Tensors.
    frozenset({"logsoftmax.autograd.tensor", "logsoftmax.autograd.nodes"}),
}

#: ground-floor modules: they import nothing from the faces above them
GROUND = ("logsoftmax.dtypes", "logsoftmax.schema", "logsoftmax.amp")
FACES = ("logsoftmax.autograd", "logsoftmax.nn", "logsoftmax.graph", "logsoftmax.cli")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, skipping ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, known) -> str | None:
    """The longest known module that ``name`` (a dotted path) lies in."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (see module docstring)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import name`: the submodule pkg.name if there is one,
                # else pkg itself (name is an attribute of its __init__).
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                dep = _resolve(target, mods)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan,
    iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.add(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


def layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """Each module's layer: 0 for modules that import nothing of the package,
    else one above the highest module it imports (members of an allowed cycle
    share a layer)."""
    comp_of = {m: c for c in cycles(graph) for m in c}
    layer: dict[str, int] = {}

    def deps(m):
        members = comp_of.get(m, {m})
        return {d for x in members for d in graph[x]} - set(members)

    pending = list(graph)
    while pending:
        rest = []
        for m in pending:
            ds = deps(m)
            if all(d in layer for d in ds):
                layer[m] = 1 + max((layer[d] for d in ds), default=-1)
            else:
                rest.append(m)
        if len(rest) == len(pending):  # only possible with an unlisted cycle
            raise AssertionError(f"no layering for {sorted(rest)}")
        pending = rest
    return layer


# ---------------------------------------------------------------------------
def test_imports_counts_lazy_ones_and_skips_type_checking():
    tree = ast.parse(
        "import a\n"
        "if TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
        "if typing.TYPE_CHECKING:\n    import d\n"
        "def f():\n    from e import g\n"
    )
    found = sorted(n.names[0].name if isinstance(n, ast.Import) else n.module
                   for n in _imports(tree))
    assert found == ["a", "c", "e"]


def test_graph_resolves_relative_and_lazy_imports():
    graph = import_graph()
    # a function-level import is an edge (the lazy dask import in _array)
    assert "logsoftmax.backends.dask" in graph["logsoftmax.autograd._array"]
    # `from .. import dtypes` is the module; `from ..backends import x` the package
    assert {"logsoftmax.dtypes", "logsoftmax.backends"} <= graph[
        "logsoftmax.autograd._array"
    ]
    # the top-level package's names resolve to their modules
    assert "logsoftmax._api" in graph["logsoftmax"]


def test_no_cycles_but_tensor_and_its_ops():
    found = set(cycles(import_graph()))
    unexpected = found - ALLOWED_CYCLES
    assert not unexpected, "import cycles: " + "; ".join(
        " <-> ".join(sorted(c)) for c in unexpected
    )


def test_ground_floor_imports_no_face():
    graph = import_graph()
    for mod in GROUND:
        up = sorted(d for d in graph[mod] if d.startswith(FACES))
        assert not up, f"{mod} imports {up}, which sit above it"


def test_autograd_engine_imports_nothing_above_it():
    graph = import_graph()
    engine = graph["logsoftmax.autograd.engine"]
    assert not engine & {
        "logsoftmax.autograd.tensor",
        "logsoftmax.autograd.nodes",
        "logsoftmax.autograd.losses",
        "logsoftmax.autograd",
    }, sorted(engine)


if __name__ == "__main__":  # python tests/test_import_graph.py: print the layers
    g = import_graph()
    lay = layers(g)
    for n in range(max(lay.values()) + 1):
        print(f"layer {n}:")
        for m in sorted(k for k, v in lay.items() if v == n):
            deps = ", ".join(sorted(d.removeprefix("logsoftmax.") for d in g[m]))
            print(f"  {m.removeprefix('logsoftmax.') or 'logsoftmax'}  <- {deps}")
    for c in cycles(g):
        print("cycle:", " <-> ".join(sorted(c)), file=sys.stderr)
