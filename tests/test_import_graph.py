"""No import circle inside the package: the graph of every module's imports of the package's own modules (read
from the source with ast, imports inside functions included, those under `if TYPE_CHECKING:` left out) has no
cycle. A cycle made "safe" by a local import is still one."""

from __future__ import annotations

import ast
from pathlib import Path

import evokernel_mcp

ROOT = Path(evokernel_mcp.__file__).resolve().parent
PKG = ROOT.name


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = [PKG, *p.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports anywhere in its body: `from a.b import c` is a.b.c when that is a
    module, else a.b; relative imports resolved against the module's package."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    todo: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while todo:
        node = todo.pop()
        if _type_checking_only(node):
            continue
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names)
    return {m for m in out if m in mods and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    mods = _modules()
    assert f"{PKG}.runtime.runner" in mods and len(mods) > 100
    graph = {name: _imports(name, path, mods) for name, path in mods.items()}
    assert f"{PKG}.runtime.ops" in graph[f"{PKG}.runtime.runner"]  # the walk sees the package's own imports
    assert _cycles(graph) == []
