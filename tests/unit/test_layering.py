"""The package's import graph, read with `ast`: no cycles, no stage importing a later one, small modules.

Every import counts, also those inside functions and under `if TYPE_CHECKING:`: a cycle that only
a lazy import hides is still two modules that cannot be understood (or moved) one without the other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_inferscope"
ROOT = PACKAGE.name

#: The pipeline's stages in import order: a stage may import those before it, never one after it.
#: The order is the pipeline's (collectors -> buffer -> merger -> analyzer -> checks -> reporters)
#: but for the buffer, which is the collectors' sink: collectors write into it, so it sits below them.
STAGES = ("buffer", "collectors", "merger", "analyzer", "checks", "reporters")
#: Modules of a stage besides the one named after it.
STAGE_OF = {"marker": "checks"}
#: Shared data types and settings, imported by every stage: they import no stage themselves.
FOUNDATION = (
    "events",
    "rounds",
    "results",
    "options",
    "stats",
    "warning",
    "environment",
    "stackbase",
    "caching",
    "units",
)

MAX_LINES = 500
MAX_FUNCTION_LINES = 80
#: Over the limits (none today). A listed one that shrinks must leave the list: the test says so.
KNOWN_LONG_MODULES: set[str] = set()
KNOWN_LONG_FUNCTIONS: set[str] = set()


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package; a C extension by its stub (`_cupti.pyi`)."""
    out = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyi")]):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imported(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The package's modules an import statement names (`from . import x` names module x when x is one)."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    for target in targets:
        # `import pytest_inferscope.x.y` names its parents too; the deepest one of ours is what it needs
        while target and target not in MODULES:
            target = target.rpartition(".")[0]
        if target and target != module:
            yield target


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[module] = {
            t
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for t in _imported(module, path, node)
        }
    return graph


GRAPH = import_graph()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def stage(module: str) -> str | None:
    top = module.split(".")[1] if "." in module else ""
    top = STAGE_OF.get(top, top)
    return top if top in STAGES else None


def test_the_cycle_finder_finds_a_cycle_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_relative_lazy_and_type_only_imports() -> None:
    assert f"{ROOT}.merger" in GRAPH[f"{ROOT}.analyzer"]  # from ..merger import Timeline
    assert f"{ROOT}.options" in GRAPH[f"{ROOT}.reporters.terminal"]  # only under if TYPE_CHECKING
    assert f"{ROOT}.cli.compare" in GRAPH[f"{ROOT}.cli"]  # inside build_parser()


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_no_stage_imports_a_later_one() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(GRAPH.items())
        if (s := stage(module)) is not None
        for target in sorted(targets)
        if (t := stage(target)) is not None and STAGES.index(t) > STAGES.index(s)
    ]
    assert wrong == []


def test_shared_types_import_no_stage() -> None:
    wrong = [
        f"{module} imports {target}"
        for name in FOUNDATION
        for module in [f"{ROOT}.{name}"]
        for target in sorted(GRAPH[module])
        if stage(target) is not None
    ]
    assert wrong == []


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_no_module_over_500_lines() -> None:
    long = {_rel(p): n for p in MODULES.values() if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert set(long) - KNOWN_LONG_MODULES == set(), long
    assert KNOWN_LONG_MODULES - set(long) == set(), "shrunk under the limit: take it off KNOWN_LONG_MODULES"


def test_no_function_over_80_lines() -> None:
    long = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{_rel(path)}:{node.name}"] = length
    assert set(long) - KNOWN_LONG_FUNCTIONS == set(), long
    assert KNOWN_LONG_FUNCTIONS - set(long) == set(), "shrunk under the limit: take it off KNOWN_LONG_FUNCTIONS"
