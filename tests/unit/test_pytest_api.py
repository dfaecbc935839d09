"""The plugin uses only pytest's and pluggy's public API: private names break on minor releases.

Two plugins broke on pytest 9.2 by touching private attributes (STYLE.md). These checks read the
package's source, so a private import or attribute shows up here rather than on a user's upgrade.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_inferscope

PACKAGE = Path(pytest_inferscope.__file__).parent
#: Names the plugin's code gives pytest's and pluggy's objects (the hooks' own argument names).
PYTEST_OBJECTS = {
    "config", "item", "pyfuncitem", "session", "request", "node", "parser", "pluginmanager", "terminalreporter",
    "rep", "report", "call", "metafunc", "group", "pytester",
}  # fmt: skip


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_private_pytest_or_pluggy_imports() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] in ("_pytest", "_pluggy")]
            found += [f"{path.name}:{node.lineno}: {n}" for n in names if n.startswith("pluggy._")]
    assert not found, "private pytest/pluggy modules imported:\n" + "\n".join(found)


def test_no_private_attributes_of_pytest_objects() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name | ast.Attribute)
                and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) in PYTEST_OBJECTS
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: .{node.attr}")
    assert not found, "private attributes of pytest objects used:\n" + "\n".join(found)
