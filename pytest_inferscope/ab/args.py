"""The twin's command line: this run's, less what only this side should do (write JUnit XML, reports or
baselines, spread over xdist workers, start another twin, share pytest's temporary folder)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .worktree import Worktree

#: Options dropped with their value ("--x v", "--x=v"; short ones also "-n2").
WITH_VALUE = frozenset({
    "-n", "--numprocesses", "--dist", "--maxprocesses", "--tx", "--rsyncdir", "--junitxml", "--junit-xml",
    "--basetemp", "--inferscope-ab", "--inferscope-ab-python", "--inferscope-report", "--inferscope-save-baseline",
    "--inferscope-compare", "--inferscope-gpus", "--html", "--json-report-file",
})  # fmt: skip
FLAGS = frozenset({"--looponfail", "-f", "--lf", "--last-failed", "--ff", "--failed-first", "--sw", "--stepwise"})


def twin_args(args: Sequence[str], tree: Worktree | None) -> list[str]:
    """`args` without the options above; paths into the user's checkout pointed at the worktree."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if arg in FLAGS:
            continue
        if name in WITH_VALUE:
            skip = "=" not in arg
            continue
        if arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2:  # -n2, -nauto
            continue
        if tree is not None and arg.startswith("/") and Path(arg.split("::")[0]).exists():
            path, sep, rest = arg.partition("::")
            arg = str(tree.map_path(Path(path))) + sep + rest
        out.append(arg)
    return out
