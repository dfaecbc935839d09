"""Tests named by node id on the command line, in the twin: their files collected whole, the tests kept by name.

Given `test_x.py::test_new` and a ref whose `test_x.py` lacks `test_new`, the twin's pytest stops with "not found"
before any test runs. So the twin is given the file instead, and keeps, of its tests, those a node id named (as
pytest would: the test, its parametrizations, a class's methods); a test the ref lacks is then simply not collected
there, and reads `new` on this side, as a test of a file only here does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: A test named by node id: its file (resolved) and the rest of the id ("TestA::test_b[1]").
Spec = tuple[Path, str]


def files_for_ids(args: Sequence[str], here: Path) -> tuple[list[str], list[Spec]]:
    """`args` (pytest's positional arguments, relative to `here` or absolute) with each node id replaced by its
    file (once), and the node ids as specs."""
    out: list[str] = []
    specs: list[Spec] = []
    for arg in args:
        path, sep, rest = arg.partition("::")
        if sep:
            specs.append(((here / path).resolve(), rest))
            arg = path
        if arg not in out:
            out.append(arg)
    return out, specs


def named(path: Path, nodeid: str, specs: Sequence[Spec], whole: Sequence[Path]) -> bool:
    """Whether a test (its file `path`, its `nodeid`) is one the command line asked for: its file or a folder above it
    named whole (`whole`, resolved), or a node id naming it, or naming its function or class."""
    path = path.resolve()
    if not any(p == path for p, _ in specs) or any(w == path or w in path.parents for w in whole):
        return True
    rest = nodeid.partition("::")[2]
    return any(p == path and (rest == r or rest.startswith(f"{r}::") or rest.startswith(f"{r}[")) for p, r in specs)
