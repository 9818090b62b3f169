"""The package's import structure: no module imports another module's private names, and the
live markets, the exchange and the platform they run on import one another without a circle.

Both read the source with ``ast`` (every import counts: at module level, inside a function, or
under ``TYPE_CHECKING``), so nothing is imported to check it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import marketsched

ROOT = Path(marketsched.__file__).parent
LAYERS = ("marketsched.live", "marketsched.exchange", "marketsched.platform")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def is_module(name: str) -> bool:
    """``name`` is a module or package of marketsched (a Python file, a folder, or a compiled kernel)."""
    parts = name.split(".")
    if parts[0] != "marketsched":
        return False
    base = ROOT.joinpath(*parts[1:])
    return base.with_suffix(".py").exists() or base.is_dir() or any(base.parent.glob(base.name + ".*.so"))


def imports(name: str, path: Path):
    """``(imported module, names taken from it, line)`` for every import in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, [a.name for a in node.names], node.lineno


def private_imports(table: dict[str, Path]) -> list[str]:
    found = []
    for name, path in table.items():
        for target, names, line in imports(name, path):
            for n in names:
                if n.startswith("_") and not n.startswith("__") and not is_module(f"{target}.{n}"):
                    found.append(f"{name}:{line}: from {target} import {n}")
    return found


def import_graph(table: dict[str, Path], within=LAYERS) -> dict[str, set[str]]:
    """Module -> the modules it imports, among the modules under ``within`` (``from P import M``
    with M a module is an import of P.M)."""
    inside = {m for m in table if m.startswith(within)}
    graph: dict[str, set[str]] = {m: set() for m in inside}
    for name in inside:
        for target, names, _ in imports(name, table[name]):
            for t in [f"{target}.{n}" if is_module(f"{target}.{n}") else target for n in names] or [target]:
                if t in inside and t != name and t not in within:  # a package's one-line __init__ is no edge
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated at the end), or
    None: a depth-first search that meets a module still on its path has found a circle."""
    on_path: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: finished (no circle through it)

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        on_path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return on_path[on_path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        on_path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_module_imports_another_modules_private_names():
    assert private_imports(modules()) == []


def test_no_import_circle_among_the_markets_and_the_platform():
    assert find_cycle(import_graph(modules())) is None


def test_the_platform_imports_no_market():
    graph = import_graph(modules())
    reaching = {m: sorted(t for t in ts if not t.startswith("marketsched.platform"))
                for m, ts in graph.items() if m.startswith("marketsched.platform")}
    assert {m: ts for m, ts in reaching.items() if ts} == {}


def test_the_checks_find_what_they_look_for(tmp_path):
    """The checks themselves, on a made-up package: a private import and a circle are found."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None
    assert find_cycle({"a": {"a2"}, "a2": {"a2x"}, "a2x": {"a2"}}) == ["a2", "a2x", "a2"]
    fake = tmp_path / "x.py"
    fake.write_text("def f():\n    from marketsched.live.broker import _hidden, Broker\n")
    assert private_imports({"marketsched.x": fake}) == ["marketsched.x:2: from marketsched.live.broker import _hidden"]
    fake.write_text("from marketsched.mechanisms.online import _dlgm_kernel\n")  # a private module, not a name
    assert private_imports({"marketsched.x": fake}) == []
    cyclic = {"marketsched.live.a": tmp_path / "a.py", "marketsched.live.b": tmp_path / "b.py"}
    cyclic["marketsched.live.a"].write_text("from marketsched.live.b import g\n")
    cyclic["marketsched.live.b"].write_text("def g():\n    from marketsched.live.a import f\n")
    graph = import_graph(cyclic)
    assert graph == {"marketsched.live.a": {"marketsched.live.b"}, "marketsched.live.b": {"marketsched.live.a"}}
    assert find_cycle(graph) == ["marketsched.live.a", "marketsched.live.b", "marketsched.live.a"]
