"""The other side's code: a git ref checked out in a temporary `git worktree`, and the interpreter check.

Nothing of the user's repository changes but git's worktree list, and only while the run lasts:
`git worktree add --detach` leaves the working tree, index, stashes and branches alone, and
`remove()` takes our entry out again, and only ours (also after Ctrl-C, SIGTERM or SIGHUP: the
controller calls it). The entry is locked with a reason naming this process, so that the user's own
`git worktree prune` leaves it alone while the run lasts, and a later run can tell the entry of a
run that was killed outright (SIGKILL, a power cut) and remove it (`remove_stale`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..units import fmt_count

#: The temporary folders' prefix; a stale entry is only ever removed when its folder has it.
PREFIX = "inferscope-ab-"
#: Variables through which git finds a repository, its index and objects (`git rev-parse --local-env-vars`, less
#: the configuration ones, and a pre-receive hook's quarantine). A hook exports them for the command it runs in:
#: inherited by `git worktree add` in a pre-commit hook, GIT_INDEX_FILE filled the commit's index with the ref's
#: tree. Our git commands run without them, on the repository they name found first (`find_repo`), and so does
#: the twin.
GIT_REPO_VARS = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE", "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE", "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_QUARANTINE_PATH",
)  # fmt: skip
_LOCK_REASON = re.compile(r"pytest-inferscope A/B run \(pid (\d+) on (.+)\)")


class ABInputError(Exception):
    """A bad --inferscope-ab / --inferscope-ab-python: one paragraph naming the input (a usage error)."""


def without_git_repo_vars(env: dict[str, str]) -> dict[str, str]:
    """`env` less the variables that point git at a repository, index or object store (GIT_REPO_VARS)."""
    return {k: v for k, v in env.items() if k not in GIT_REPO_VARS}


def _git(git_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """git on the repository whose git folder is `git_dir`, whatever this process's environment points at; the
    user's hooks do not run (a post-checkout hook's npm install or LFS fetch is not for our temporary checkout)."""
    cmd = ["git", f"--git-dir={git_dir}", "-c", f"core.hooksPath={os.devnull}", *args]
    env = {**without_git_repo_vars(dict(os.environ)), **(env or {})}
    return subprocess.run(cmd, cwd=git_dir, env=env, capture_output=True, text=True, check=False)


def changes(top: Path, git_dir: Path) -> str:
    """This checkout's uncommitted changes, as the summary says them ("changes to 1 tracked file and 1 untracked file
    (a.py, b.py)": edited, deleted, renamed, staged or not; new), or "" when it has none; git's ignored files aside.
    Only read: no index refresh is written back."""
    out = _git(git_dir, "--no-optional-locks", f"--work-tree={top}", "status", "--porcelain=v1", "-z", "-unormal")
    if out.returncode != 0:
        return ""
    modified: list[str] = []
    untracked: list[str] = []
    entries = iter(out.stdout.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        (untracked if entry[:2] == "??" else modified).append(entry[3:])
        if entry[0] in "RC":
            next(entries, None)  # (a rename's or copy's source follows it)
    if not modified and not untracked:
        return ""
    names = [*modified, *untracked]
    more = f", and {len(names) - 5} more" if len(names) > 5 else ""
    counts = ((len(modified), "tracked file"), (len(untracked), "untracked file"))
    files = [fmt_count(n, kind) for n, kind in counts if n]
    return f"changes to {' and '.join(files)} ({', '.join(names[:5])}{more})"


#: How an LFS pointer file starts (the Git LFS specification).
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"


def lfs_pointers(top: Path, git_dir: Path) -> bool:
    """Whether this checkout's LFS files are pointers, not their content (actions/checkout's default, `lfs: false`):
    then the ref's are checked out as pointers too (GIT_LFS_SKIP_SMUDGE=1), rather than downloaded, which gave the
    twin other data than this side, or failed without the LFS server. A few files tell (a checkout is one or the
    other, but for `git lfs pull --include`, where one file with its content makes it the other)."""
    out = _git(git_dir, f"--work-tree={top}", "ls-files", "-z", "--full-name", ":(top,attr:filter=lfs)")
    seen = False
    for name in [n for n in out.stdout.split("\0") if n][:20] if out.returncode == 0 else []:
        try:
            with open(top / name, "rb") as f:
                head = f.read(len(LFS_POINTER))
        except OSError:
            continue
        if head != LFS_POINTER:
            return False
        seen = True
    return seen


def short_ref(ref: str) -> str:
    """`ref` as the summary shows it: a commit hash of more than 10 digits (`$(git merge-base HEAD origin/main)` gives
    40) as its first 10, else as given."""
    return ref[:10] if re.fullmatch(r"[0-9a-fA-F]{11,40}", ref) else ref


def _git_out(git_dir: Path, *args: str) -> str | None:
    """`_git`'s stdout, stripped; None when the command failed."""
    out = _git(git_dir, *args)
    return out.stdout.strip() if out.returncode == 0 else None


@dataclass(frozen=True)
class Repo:
    """The user's repository as found from where pytest runs (GIT_DIR / GIT_WORK_TREE honoured)."""

    top: Path  # the working tree's top
    git_dir: Path  # its git folder (.git, or .git/worktrees/NAME in a linked worktree)


def find_repo(where: Path, ref: str) -> Repo:
    """The git repository `where` is in, found as git finds it there; an ABInputError when it is not in one."""
    if shutil.which("git") is None:
        raise ABInputError(f"--inferscope-ab={ref}: git is not installed (not on PATH), so no ref can be checked out.")
    env = {k: v for k, v in os.environ.items() if k != "GIT_INDEX_FILE"}
    cmd = ["git", "rev-parse", "--show-toplevel", "--absolute-git-dir"]
    out = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, check=False)
    lines = out.stdout.strip().splitlines()
    if "dubious ownership" in out.stderr:  # (git 2.35.2 and later: safe.directory)
        named = re.search(r"dubious ownership in repository at '(.+?)'", out.stderr)
        top = named[1] if named else str(where)
        raise ABInputError(
            f"--inferscope-ab={ref}: git refuses the repository at {top} ('detected dubious ownership'): it belongs "
            "to another user than this process's, and git's safe.directory check does not trust it (a CI container "
            "job running as root in the checkout the runner's user made, say). Trust it before pytest: `git config "
            f"--global --add safe.directory {top}`."
        )
    if out.returncode != 0 or len(lines) != 2:
        raise ABInputError(
            f"--inferscope-ab={ref}: {where} is not inside a git repository with a working tree "
            f"({' '.join(out.stderr.split()) or 'no working tree'}). Run pytest in the project's git checkout, or "
            "compare environments with --inferscope-ab-python alone."
        )
    return Repo(Path(lines[0]).resolve(), Path(lines[1]).resolve())


def resolve_commit(repo: Repo, ref: str) -> str:
    """The full commit hash `ref` names in `repo`; an ABInputError naming it otherwise."""
    out = _git(repo.git_dir, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if out.returncode != 0 or not out.stdout.strip():
        kind = _git(repo.git_dir, "cat-file", "-t", ref).stdout.strip()  # a name git knows, of no commit?
        if kind in ("tree", "blob"):
            raise ABInputError(
                f"--inferscope-ab={ref}: {ref!r} names a {kind} (a folder or a file at a revision), not a commit; the "
                "other side runs a whole checkout. Give the commit (the part before ':', e.g. "
                f"--inferscope-ab={ref.partition(':')[0] or 'HEAD~1'}), and the tests to run as pytest's arguments."
            )
        from .refs import explain

        raise ABInputError(explain(lambda *a: _git_out(repo.git_dir, *a), repo.top, ref) + ".")
    return out.stdout.strip()


def _lock_reason() -> str:
    return f"pytest-inferscope A/B run (pid {os.getpid()} on {socket.gethostname()})"


@dataclass
class Worktree:
    """A detached checkout of `commit` in a temporary folder, for the length of the run."""

    top: Path  # the user's repository
    ref: str
    commit: str
    path: Path  # the checkout
    holder: Path  # the temporary folder around it (the twins' logs go there too)
    git_dir: Path  # the user's git folder, as `find_repo` found it
    uncommitted: str = ""  # this checkout's changes that this side runs and the twin does not (`changes`)

    @classmethod
    def create(cls, where: Path, ref: str) -> Worktree:
        repo = find_repo(where, ref)
        commit = resolve_commit(repo, ref)
        remove_stale(repo.git_dir)
        changed = changes(repo.top, repo.git_dir)
        holder = Path(tempfile.mkdtemp(prefix=PREFIX))
        tree = cls(repo.top, ref, commit, holder / repo.top.name, holder, repo.git_dir, uncommitted=changed)
        step = f"git worktree add --detach {tree.path} {commit[:12]}"
        skip = {"GIT_LFS_SKIP_SMUDGE": "1"} if lfs_pointers(repo.top, repo.git_dir) else {}
        out = _git(repo.git_dir, "worktree", "add", "--detach", str(tree.path), commit, env=skip)
        if out.returncode == 0:  # (not `add --lock --reason`, which git learned in 2.33 only: lock --reason is 2.10's)
            step = f"git worktree lock {tree.path}"
            out = _git(repo.git_dir, "worktree", "lock", "--reason", _lock_reason(), str(tree.path))
        if out.returncode == 0:
            from .submodules import check_out

            try:
                env = without_git_repo_vars(dict(os.environ))
                check_out(repo.top, tree.path, repo.git_dir, commit, ref, env)
            except ValueError as exc:
                tree.remove()
                raise ABInputError(str(exc)) from None
        if out.returncode != 0:
            tree.remove()  # git may have made the entry before it failed
            hint = " Check that the repository is not locked by another git command." if ".lock" in out.stderr else ""
            if "smudge filter lfs failed" in out.stderr:
                hint = (
                    f" The Git LFS files of {ref} are not here and could not be downloaded (this checkout has the "
                    f"content of its own): fetch them before pytest (`git lfs fetch origin {ref}`), or check out "
                    "this side with pointers as well (actions/checkout's `lfs: false`, GIT_LFS_SKIP_SMUDGE=1): then "
                    "the ref gets pointers too."
                )
            said = " ".join(out.stderr.split()).rstrip(".") or f"exit status {out.returncode}"  # (one paragraph)
            raise ABInputError(f"--inferscope-ab={ref}: `{step}` failed: {said}.{hint}")
        return tree

    def label(self) -> str:
        return f"{self.ref} ({self.commit[:10]})" if short_ref(self.ref) == self.ref else self.commit[:10]

    def map_path(self, p: Path) -> Path:
        """A path in the user's checkout, as the same path in the worktree (others unchanged)."""
        try:
            return self.path / p.resolve().relative_to(self.top)
        except ValueError:
            return p

    def remove(self) -> None:
        """Take our entry out of git's list (no other: a repo-wide `git worktree prune` would also drop the user's
        worktrees whose folder is missing for now, on an unmounted disk) and delete the folder; safe to call twice."""
        _remove_entry(self.git_dir, self.path)
        shutil.rmtree(self.holder, ignore_errors=True)


def not_in_git(tree: Worktree, errors: Sequence[str]) -> list[str]:
    """Why the ref's tests may not collect (`errors`: "file (last line of its error)"), when the module they miss is a
    file of this checkout that git does not record at the ref (a generated `_version.py` git ignores, an untracked
    module): one sentence each, or none; and, for a module missing, the ref's submodules this checkout has not
    initialised (empty there too). The error alone said to fix the collection errors at the ref, in code that has
    none. Only this process's imported modules are looked at, and git only read."""
    from .submodules import empty_at_ref, left_empty

    said = []
    imports = re.search(r"ModuleNotFoundError|ImportError|No module named", " ".join(errors))
    env = without_git_repo_vars(dict(os.environ))
    empty = left_empty(tree.path, tree.git_dir, tree.commit, env) if imports else []
    for name in dict.fromkeys(re.findall(r"No module named '([\w.]+)'", " ".join(errors))):
        file = getattr(sys.modules.get(name), "__file__", None)
        path = Path(file).resolve() if file else None
        if path is None or not path.is_relative_to(tree.top) or tree.map_path(path).exists():
            continue
        rel = path.relative_to(tree.top).as_posix()
        if any(rel.startswith(f"{sub}/") for sub in empty):
            continue  # tracked here, in a submodule's empty folder there (said below)
        out = _git(tree.git_dir, "-C", str(tree.top), f"--work-tree={tree.top}", "check-ignore", "-v", "--", rel)
        rule = out.stdout.partition("\t")[0].strip() if out.returncode == 0 else ""
        if rule:
            source, line, pattern = rule.split(":", 2) if rule.count(":") >= 2 else (rule, "", "")
            said.append(
                f"{rel} is in this checkout, but git ignores it ({source}:{line}: {pattern}), so the checkout of "
                f"{tree.label()} does not have it: a ref's checkout has only the files git records at it. Commit the "
                "file, or have the ref's code or tests make it (a generated file: its generator run from a conftest.py "
                "there), or compare environments with --inferscope-ab-python alone."
            )
        else:
            said.append(
                f"{rel} is in this checkout, but not in git (untracked), so the checkout of {tree.label()} does not "
                f"have it: add and commit it (`git add {rel}`), and compare against a commit that has it."
            )
    return [*said, empty_at_ref(empty, tree.top, tree.label(), env)] if empty else said


def _entries(git_dir: Path) -> list[dict[str, str]]:
    """`git worktree list --porcelain` as one dict a worktree ({"worktree": path, "locked": reason, ...})."""
    out = _git(git_dir, "worktree", "list", "--porcelain")
    entries: list[dict[str, str]] = []
    for block in out.stdout.split("\n\n") if out.returncode == 0 else []:
        entry = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            entry[key] = value
        if "worktree" in entry:
            entries.append(entry)
    return entries


def _remove_entry(git_dir: Path, path: Path) -> None:
    """Remove the worktree entry at `path` (locked or not, its folder there or not), and only it."""
    if not any(Path(e["worktree"]).resolve() == path.resolve() for e in _entries(git_dir)):
        return
    # Twice --force: a locked worktree, or one with changes, goes too; git removes the folder if it is there.
    _git(git_dir, "worktree", "remove", "--force", "--force", str(path))


def remove_stale(git_dir: Path) -> list[Path]:
    """Remove the worktrees of earlier A/B runs in this repository whose process is gone; the paths removed.

    Only ours: an entry whose lock reason names a pytest-inferscope A/B run on this host whose process no longer
    exists, in a folder named PREFIX*. Anything else, the user's worktrees above all, is left as it is.
    """
    removed = []
    for entry in _entries(git_dir):
        match = _LOCK_REASON.fullmatch(entry.get("locked", ""))
        path = Path(entry["worktree"])
        if match is None or match[2] != socket.gethostname() or not path.parent.name.startswith(PREFIX):
            continue
        if alive(int(match[1])):
            continue
        _remove_entry(git_dir, path)
        shutil.rmtree(path.parent, ignore_errors=True)
        removed.append(path)
    return removed


def alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (PermissionError: someone else's process, alive)
        return True
    return True


def import_paths(tree: Path, here: Sequence[str] = (), checkout: Worktree | None = None) -> list[str]:
    """What goes first on the twin's PYTHONPATH: the worktree, its src/ for a src layout, and the worktree's copy of
    each entry of this process's import path `here` inside the user's checkout (`checkout.top`): an editable
    install's .pth with a package-dir of its own (`lib/`), PYTHONPATH=$GITHUB_WORKSPACE/lib. Without them the twin
    found the project's code there, in this checkout, and the gate compared it with itself."""
    paths = [str(tree)]
    if (tree / "src").is_dir():
        paths.append(str(tree / "src"))
    for entry in here if checkout is not None else ():
        where = Path(entry or os.curdir).resolve()
        if checkout is None or not where.is_relative_to(checkout.top) or where.is_relative_to(checkout.holder):
            continue
        mapped = str(checkout.map_path(where))
        if mapped not in paths and Path(mapped).is_dir():
            paths.append(mapped)
    return paths


def own_packages(tree: Path, bases: Sequence[str] = ()) -> list[str]:
    """Top-level packages and modules the checkout holds (at its top, in src/, or in `bases`, folders of it on the
    twin's import path): what the twin must import from it."""
    names: list[str] = []
    for base in dict.fromkeys([tree, tree / "src", *map(Path, bases)]):
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
    if exe is not None and Path(exe).is_dir():
        raise ABInputError(f"{flag}: this is a folder, not an interpreter. Give the path of a python binary.")
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
    if len(out.stdout.split()) != 2:  # (/bin/true exits 0 too, and says nothing)
        said = f"it printed {out.stdout.strip()[:200]!r}" if out.stdout.strip() else "it printed nothing"
        raise ABInputError(
            f"{flag}: this program did not answer as a python interpreter does (asked to print its version and "
            f"pytest's, {said}). Give the path of a python binary."
        )
    return out.stdout.strip()
