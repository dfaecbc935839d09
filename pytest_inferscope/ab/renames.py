"""Test files renamed or moved since the ref: their tests are compared with theirs at the ref, under the name git finds.

The two sides pair a test by its node id, whose first part is its file's path. A file moved since the ref (`git mv
tests/test_x.py tests/unit/test_x.py`, committed or staged) gave each of its tests another id than at the ref: they read
`new` and passed whatever they measured, the ref's were listed as removed, and a regression made in the same change
as the move went ungated. git's rename detection (`git diff -M REF`: the ref's tree against this checkout's tracked
files) names the file each came from. A file moved and not added (a plain `mv`: untracked) is not seen, as git has no
record of it. Only read: no index refresh is written back.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .worktree import _git

if TYPE_CHECKING:
    from .worktree import Worktree


@dataclass
class Renames:
    """This checkout's files that git finds renamed or moved since the ref, as paths from the repository's top: each
    (here) to its name at the ref."""

    top: Path
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def find(cls, tree: Worktree) -> Renames:
        cmd = ("--no-optional-locks", f"--work-tree={tree.top}", "diff", "-M", "--name-status", "-z", tree.commit, "--")
        out = _git(tree.git_dir, *cmd)
        files: dict[str, str] = {}
        fields = iter(out.stdout.split("\0") if out.returncode == 0 else [])
        for status in fields:
            if status.startswith(("R", "C")):  # (a rename's or copy's source, then its name here)
                old, new = next(fields, ""), next(fields, "")
                if status.startswith("R") and old and new:
                    files[new] = old
            elif status:
                next(fields, None)
        return cls(tree.top, files)

    def _from_top(self, path: Path) -> str | None:
        try:
            return path.resolve().relative_to(self.top).as_posix()
        except ValueError:
            return None

    def twin_args(self, positional: Sequence[str], cwd: Path) -> list[str]:
        """What the twin is given besides the paths named on the command line (`positional`, relative to `cwd` or
        absolute) that the ref has: for a file moved since, or a node id in one, its name at the ref; for a folder, the
        files moved into it from outside it, by their names at the ref (relative to `cwd`, where the twin runs too)."""
        out: list[str] = []
        for arg in positional:
            path, sep, rest = arg.partition("::")
            here = self._from_top(cwd / path)
            if here is None:
                continue
            if here in self.files:
                olds, tail = [self.files[here]], sep + rest
            else:  # (a folder: "" or "." for the top)
                top = here in ("", ".")
                moved_in = [old for new, old in self.files.items() if top or new.startswith(f"{here}/")]
                olds, tail = [old for old in moved_in if not (top or old.startswith(f"{here}/"))], ""
            out += [os.path.relpath(self.top / old, cwd) + tail for old in olds]
        return list(dict.fromkeys(out))

    def ref_id(self, nodeid: str, rootdir: Path, twin_ids: Collection[str]) -> str | None:
        """The node id (relative to `rootdir`, on both sides) of this test at the ref: its own, or its file's old name's
        when git finds the file moved; None when the ref has no such test."""
        if nodeid in twin_ids:
            return nodeid
        path, sep, rest = nodeid.partition("::")
        old = self.files.get(self._from_top(rootdir / path) or "")
        if old is None:
            return None
        moved = PurePosixPath(os.path.relpath(self.top / old, rootdir)).as_posix() + sep + rest
        return moved if moved in twin_ids else None

    def said(self, nodeids: Collection[str], rootdir: Path, label: str) -> list[str]:
        """The summary's lines for the moved files whose tests (`nodeids`, this side's, relative to `rootdir`) are
        compared with their old selves."""
        paths = {self._from_top(rootdir / nodeid.partition("::")[0]) for nodeid in nodeids}
        return [
            f"inferscope A/B: {new} is {old} at {label} (renamed or moved since, as git finds it): its tests are "
            "compared with theirs there"
            for new, old in sorted(self.files.items())
            if new in paths
        ]
