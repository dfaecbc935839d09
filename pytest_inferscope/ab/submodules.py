"""The ref's submodules in the worktree, at the commits the ref records (`git worktree add` leaves their folders empty).

Each comes from the clone of it in the user's checkout (`git clone --shared`: its objects are borrowed, nothing is
fetched, so no network and no credentials), and is checked out detached at the recorded commit; nested submodules
likewise, from the nested clones. The clones live inside the worktree's folder and go with it. A submodule this
checkout has not initialised stays empty at the ref too, as it is here. The user's clones are only read.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def check_out(
    source: Path, tree: Path, git_dir: Path, commit: str, ref: str, env: dict[str, str], prefix: str = ""
) -> None:
    """Check out in `tree` (a checkout of `commit` from the repository at `git_dir`) each submodule `commit` records,
    from its clone under `source` (the user's checkout of the same project), git running in `env` (without the
    variables that point it at a repository); one not initialised under `source` is left empty. ValueError, one
    paragraph, when a clone here lacks the recorded commit (`prefix`: where `source` is in the user's checkout)."""
    listing = _run(["--git-dir", str(git_dir), "ls-tree", "-r", "-z", "--full-tree", commit], env)
    for item in listing.stdout.split("\0") if listing.returncode == 0 else []:
        meta, _, path = item.partition("\t")
        shown = prefix + path
        mode, _, rest = meta.partition(" ")
        if mode != "160000":
            continue
        sha = rest.split()[-1]
        here = source / path
        clone = _own_git_dir(here, env)
        if clone is None:
            continue
        dest = tree / path
        steps = (
            ("git clone --shared", ["clone", "--quiet", "--shared", "--no-checkout", str(clone), str(dest)]),
            (f"git checkout {sha[:12]}", ["-C", str(dest), "-c", "advice.detachedHead=false", "checkout", "-q", sha]),
        )
        for name, step in steps:
            out = _run(step, env)
            if out.returncode != 0:
                said = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
                raise ValueError(
                    f"--inferscope-ab={ref}: the submodule {shown} is at commit {sha[:12]} at {ref}, and its clone in "
                    f"this checkout ({here}) cannot give it (`{name}`: {said}). Fetch that commit into the clone "
                    f"before pytest (`git -C {shown} fetch origin {sha}`; a CI checkout with `submodules: true` "
                    "fetches only the commits this side records)."
                )
        check_out(here, dest, dest / ".git", sha, ref, env, f"{shown}/")


def _own_git_dir(path: Path, env: dict[str, str]) -> Path | None:
    """The git folder of the checkout whose top is `path` (a submodule's clone), or None when `path` is no such
    checkout (an empty folder: not initialised, inside the superproject's)."""
    if not path.is_dir():
        return None
    out = _run(["-C", str(path), "rev-parse", "--show-toplevel", "--absolute-git-dir"], env)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != path.resolve():
        return None
    return Path(lines[1])


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """git with `args`, the user's hooks off (as for the worktree: ab/worktree.py)."""
    cmd = ["git", "-c", f"core.hooksPath={os.devnull}", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def left_empty(tree: Path, git_dir: Path, commit: str, env: dict[str, str]) -> list[str]:
    """The submodules `commit` records (their paths, from the top; nested ones aside) whose folder in `tree`, its
    checkout, is empty: not initialised in the user's checkout, so `check_out` had no clone to take them from."""
    listing = _run(["--git-dir", str(git_dir), "ls-tree", "-r", "-z", "--full-tree", commit], env)
    out = []
    for item in listing.stdout.split("\0") if listing.returncode == 0 else []:
        meta, _, path = item.partition("\t")
        if meta.partition(" ")[0] == "160000" and not any((tree / path).iterdir() if (tree / path).is_dir() else ()):
            out.append(path)
    return out


def empty_at_ref(empty: list[str], top: Path, label: str, env: dict[str, str]) -> str:
    """The sentences for a usage error whose tests miss a module, when the ref's submodules `empty` were left empty:
    how to initialise those that are submodules here too (`top`: the user's checkout); that the others are not."""
    here = {p for p in empty if _run(["-C", str(top), "ls-files", "-s", "--", p], env).stdout.startswith("160000 ")}
    said = []
    if init := [p for p in empty if p in here]:
        one = len(init) == 1
        said.append(
            f"The submodule{'' if one else 's'} {', '.join(init)} {'is' if one else 'are'} not initialised in this "
            f"checkout, so {'its folder is' if one else 'their folders are'} empty at {label} too (the ref's "
            "submodules are checked out from this checkout's clones of them; nothing is fetched): if the tests import "
            f"from {'it' if one else 'them'}, run `git submodule update --init {' '.join(init)}` before pytest (a CI "
            "checkout: with `submodules: true`)."
        )
    if gone := [p for p in empty if p not in here]:
        one = len(gone) == 1
        it, folders = ("it", "its folder is") if one else ("them", "their folders are")
        said.append(
            f"{', '.join(gone)} {'is a submodule' if one else 'are submodules'} at {label} and not here, and this "
            f"checkout has no clone of {it} to check out there, so {folders} empty at the ref: if the tests import "
            f"from {it}, compare against a ref after the change, or run from a checkout that has {it} initialised."
        )
    return " ".join(said)
