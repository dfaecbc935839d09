"""The other side's code: a git ref checked out in a temporary `git worktree`, and the interpreter check.

Nothing of the user's repository changes but git's worktree list, and only while the run lasts:
`git worktree add --detach` leaves the working tree, index, stashes and branches alone, and
`remove()` takes the entry out again (also after Ctrl-C: the session calls it at unconfigure).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


class ABInputError(Exception):
    """A bad --inferscope-ab / --inferscope-ab-python: one paragraph naming the input (a usage error)."""


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def git_toplevel(where: Path, ref: str) -> Path:
    """The top of the git repository `where` is in; an ABInputError when it is not in one."""
    if shutil.which("git") is None:
        raise ABInputError(f"--inferscope-ab={ref}: git is not installed (not on PATH), so no ref can be checked out.")
    out = _git(where, "rev-parse", "--show-toplevel")
    if out.returncode != 0:
        raise ABInputError(
            f"--inferscope-ab={ref}: {where} is not inside a git repository ({out.stderr.strip()}). Run pytest in "
            "the project's git checkout, or compare environments with --inferscope-ab-python alone."
        )
    return Path(out.stdout.strip()).resolve()


def resolve_commit(top: Path, ref: str) -> str:
    """The full commit hash `ref` names in the repository at `top`; an ABInputError naming it otherwise."""
    out = _git(top, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if out.returncode != 0 or not out.stdout.strip():
        raise ABInputError(
            f"--inferscope-ab={ref}: git does not know the revision {ref!r} in {top}. Give a branch, tag or commit "
            "that exists here (`git log --oneline -5`); in CI, fetch the history first (actions/checkout with "
            "fetch-depth: 0, or `git fetch origin main`)."
        )
    return out.stdout.strip()


@dataclass
class Worktree:
    """A detached checkout of `commit` in a temporary folder, for the length of the run."""

    top: Path  # the user's repository
    ref: str
    commit: str
    path: Path  # the checkout
    holder: Path  # the temporary folder around it

    @classmethod
    def create(cls, where: Path, ref: str) -> Worktree:
        top = git_toplevel(where, ref)
        commit = resolve_commit(top, ref)
        holder = Path(tempfile.mkdtemp(prefix="inferscope-ab-"))
        path = holder / top.name
        out = _git(top, "worktree", "add", "--detach", str(path), commit)
        if out.returncode != 0:
            shutil.rmtree(holder, ignore_errors=True)
            raise ABInputError(
                f"--inferscope-ab={ref}: `git worktree add --detach {path} {commit[:12]}` failed: "
                f"{out.stderr.strip()}. Check that the repository is not locked by another git command."
            )
        return cls(top, ref, commit, path, holder)

    def label(self) -> str:
        return f"{self.ref} ({self.commit[:10]})"

    def map_path(self, p: Path) -> Path:
        """A path in the user's checkout, as the same path in the worktree (others unchanged)."""
        try:
            return self.path / p.resolve().relative_to(self.top)
        except ValueError:
            return p

    def remove(self) -> None:
        """Take the worktree out of git's list and delete it; safe to call twice."""
        if self.holder.exists():
            _git(self.top, "worktree", "remove", "--force", str(self.path))
            shutil.rmtree(self.holder, ignore_errors=True)
        _git(self.top, "worktree", "prune")


def import_paths(tree: Path) -> list[str]:
    """What goes first on the twin's PYTHONPATH: the worktree, and its src/ for a src layout."""
    paths = [str(tree)]
    if (tree / "src").is_dir():
        paths.append(str(tree / "src"))
    return paths


def own_packages(tree: Path) -> list[str]:
    """Top-level packages and modules the checkout holds (at its top or in src/): what the twin must import from it."""
    names: list[str] = []
    for base in (tree, tree / "src"):
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if entry.name.startswith((".", "_")) or entry.name in ("tests", "test", "docs", "setup.py", "conftest.py"):
                continue
            if entry.is_dir() and (entry / "__init__.py").is_file():
                names.append(entry.name)
    return names


def check_python(python: Path, env: dict[str, str], cwd: Path) -> str:
    """The version line of an interpreter that can run pytest with this plugin; an ABInputError otherwise."""
    flag = f"--inferscope-ab-python={python}"
    exe = shutil.which(str(python)) if os.sep not in str(python) else str(python)
    if exe is None or not Path(exe).is_file():
        raise ABInputError(f"{flag}: no such interpreter (the file does not exist). Give the path of a python binary.")
    probe = "import sys, pytest, pytest_inferscope; print(sys.version.split()[0], pytest.__version__)"
    try:
        out = subprocess.run([exe, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ABInputError(f"{flag}: the interpreter does not run ({exc}). Give the path of a working python.") from exc
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ABInputError(
            f"{flag}: this interpreter cannot run pytest with pytest-inferscope ({last}). Install both in its "
            "environment (`PATH -m pip install pytest pytest-inferscope`) or give another interpreter."
        )
    return out.stdout.strip()
