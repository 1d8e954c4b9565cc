"""The layering of DESIGN.md, checked on the source: no import cycle, no import of a layer above.

Every import statement of every module under src/flopsight counts, wherever it stands: at the
top, inside a function (a lazy import is still a runtime dependency) or under
``if TYPE_CHECKING:``.
"""

import ast
import functools
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

#: Layers, bottom up: a module may import modules of its own layer or of a layer below.
LAYERS = (
    ("flopsight._version", "flopsight._quiet", "flopsight._torch_private", "flopsight._checks", "flopsight._process",
     "flopsight._lazy", "flopsight._wrap", "flopsight._background"),
    ("flopsight.result",),
    ("flopsight.formulas", "flopsight.hardware", "flopsight.torch_support"),
    ("flopsight.capture",),
    ("flopsight.analysis",),
    ("flopsight.renderers",),
    ("flopsight.profiler", "flopsight.options", "flopsight.timing_plan"),
    ("flopsight.integrations", "flopsight.cli"),
    ("flopsight.deepspeed", "flopsight.__main__", "flopsight"),
)


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted((SRC / "flopsight").rglob("*.py"))}


def imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The flopsight modules ``name`` imports: ``from a.b import c`` is an import of
    ``a.b.c`` when that is a module, else of ``a.b``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {target})
    return {m for m in found if m in known and m != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer(name: str) -> int:
    """The layer of module ``name``: the one with the longest matching prefix."""
    best, rank = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{name} is in no layer: add it to LAYERS"
    return rank


def test_the_checker_sees_a_cycle_and_lazy_imports(tmp_path):
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from .x import y\nif False:\n    import p.q\n")
    assert imports("pkg.m", source, {"pkg.x", "pkg.x.y", "p.q"}) == {"pkg.x.y", "p.q"}


def test_no_import_cycle_in_src():
    assert cycles(graph()) == []


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_imports_a_layer_above_it(name):
    edges = graph()
    above = sorted(m for m in edges[name] if layer(m) > layer(name))
    assert above == [], f"{name} (layer {layer(name)}) imports a layer above it: {above}"
