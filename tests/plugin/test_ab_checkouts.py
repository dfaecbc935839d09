"""--inferscope-ab on the checkouts CI makes and projects have: submodules, tests in a subfolder with their own ini
(docs/ab.md).

What these tests judge is which code and data each side ran, not the gate: their bodies sleep (a file write alone
is ~0.2 ms, whose pairs read +19% in CI on a loaded machine once) and allow a regression of 100%."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from gitrepo import child_env, git, pytest_cmd, worktrees

#: A body that sleeps: what its pairs read is the sleep's, steady on a loaded machine.
SLEEPS = """import time, pytest

@pytest.mark.inferscope(rounds=3, warmup=0, max_regression=1)
def test_one():
    time.sleep(0.001)
"""
USES_LIB = """
import os, time, pytest
from helper import VALUE

@pytest.mark.inferscope(rounds=3, warmup=0, max_regression=1)
def test_one():
    with open(os.environ["WHERE_LOG"], "a") as log:  # the submodule's commit each side has: {value} recorded
        log.write(f"{{'twin' if os.environ.get('INFERSCOPE_AB_TWIN') else 'here'}} {{VALUE}}\\n")
    time.sleep(0.001)
"""


def repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    return root


def with_submodule(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose HEAD~1 records vendor/lib at a commit with VALUE = 1, HEAD at one with VALUE = 2."""
    lib = repo(tmp_path / "lib")
    (lib / "helper").mkdir()
    (lib / "helper" / "__init__.py").write_text("VALUE = 1\n")
    git(lib, "add", ".")
    git(lib, "commit", "-qm", "one")
    root = repo(tmp_path / "project")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")
    here = "os.path.dirname(__file__)"
    (root / "conftest.py").write_text(f"import os, sys\nsys.path.insert(0, os.path.join({here}, 'vendor', 'lib'))\n")
    (root / "test_x.py").write_text(USES_LIB.format(value=1))
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (lib / "helper" / "__init__.py").write_text("VALUE = 2\n")
    git(lib, "commit", "-qam", "two")
    git(root / "vendor" / "lib", "pull", "-q", "origin", "main")
    (root / "test_x.py").write_text(USES_LIB.format(value=2))
    git(root, "commit", "-qam", "second")
    return root, lib


def test_the_ref_runs_with_its_own_submodule_commits(tmp_path: Path) -> None:
    """`git worktree add` leaves a submodule's folder empty: the twin's tests stopped with "No module named 'helper'"
    (a usage error). The ref's submodules are checked out at the commits the ref records, from the clones of them
    in this checkout (no network), and go with the worktree."""
    root, _ = with_submodule(tmp_path)
    status = git(root, "status", "--porcelain")
    log = tmp_path / "where.log"
    env = child_env(WHERE_LOG=str(log))
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dict(line.split() for line in log.read_text().splitlines()) == {"here": "2", "twin": "1"}
    assert "vs HEAD~1" in proc.stdout
    assert git(root, "status", "--porcelain") == status
    assert len(worktrees(root)) == 1
    assert len(worktrees(root / "vendor" / "lib")) == 1


def test_a_submodule_commit_the_clone_here_lacks_is_a_usage_error_saying_what_to_fetch(tmp_path: Path) -> None:
    root, lib = with_submodule(tmp_path)
    (lib / "helper" / "__init__.py").write_text("VALUE = 3\n")
    git(lib, "commit", "-qam", "three")  # recorded in the project, never fetched into its clone
    sha = git(lib, "rev-parse", "HEAD").strip()
    git(root, "update-index", "--cacheinfo", f"160000,{sha},vendor/lib")
    git(root, "commit", "-qm", "third")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD", "test_x.py"), cwd=root, env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"the submodule vendor/lib is at commit {sha[:12]} at HEAD" in proc.stderr
    assert f"`git -C vendor/lib fetch origin {sha}`" in proc.stderr
    assert len(worktrees(root)) == 1


def test_tests_in_a_subfolder_with_their_own_ini_given_by_absolute_paths(tmp_path: Path) -> None:
    """CI scripts spell paths out (`--rootdir=$GITHUB_WORKSPACE/pkg`): given to the twin as they were, an `--opt=/abs`
    pointed it at this checkout's folder, so its node ids (relative to that rootdir) named none of this side's, and
    the test read `new` with a line saying it was `only at HEAD~1`. The twin's are the worktree's."""
    root = repo(tmp_path / "project")
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "pkg" / "pytest.ini").write_text("[pytest]\n")
    body = SLEEPS
    (root / "pkg" / "tests" / "test_s.py").write_text(body)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "pkg" / "tests" / "test_s.py").write_text(body + "# second\n")
    git(root, "commit", "-qam", "second")
    pkg = root / "pkg"
    for args in ([f"--rootdir={pkg}", f"--config-file={pkg / 'pytest.ini'}"], [f"--rootdir={pkg}"]):
        proc = subprocess.run(pytest_cmd(*args, "--inferscope-ab=HEAD~1", str(pkg / "tests")), cwd=root,
                              env=child_env(), capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        row = next(line for line in proc.stdout.splitlines() if "test_s.py::test_one " in line)
        assert " new " not in row and "only at HEAD~1" not in proc.stdout, proc.stdout


WHERE_FROM = """
import os, time, pytest, mypkg

@pytest.mark.inferscope(rounds=3, warmup=0, max_regression=1)
def test_one():
    with open(os.environ["WHERE_LOG"], "a") as log:  # which side imported which copy
        log.write(f"{'twin' if os.environ.get('INFERSCOPE_AB_TWIN') else 'here'} {mypkg.__file__}\\n")
    time.sleep(0.001)
"""


def test_the_projects_code_on_a_path_of_its_own_comes_from_the_worktree(tmp_path: Path) -> None:
    """The package in `lib/`, found through a sys.path entry in the checkout (an editable install's .pth with
    package-dir lib, or PYTHONPATH=$GITHUB_WORKSPACE/lib): the twin's PYTHONPATH had the worktree and its src/ first,
    neither holding it, so the twin imported this checkout's code and the gate compared it with itself, saying
    nothing. The entry's copy in the worktree comes first."""
    root = repo(tmp_path / "project")
    (root / "lib" / "mypkg").mkdir(parents=True)
    (root / "lib" / "mypkg" / "__init__.py").write_text("")
    (root / "test_x.py").write_text(WHERE_FROM)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "test_x.py").write_text(WHERE_FROM + "# second\n")
    git(root, "commit", "-qam", "second")
    log = tmp_path / "where.log"
    env = child_env(WHERE_LOG=str(log))
    env["PYTHONPATH"] += os.pathsep + str(root / "lib")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1"), cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sides = dict(line.split(" ", 1) for line in log.read_text().splitlines())
    assert sides["here"] == str(root / "lib" / "mypkg" / "__init__.py")
    assert "inferscope-ab-" in sides["twin"] and sides["twin"].endswith("/project/lib/mypkg/__init__.py"), sides


POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 1000\n"
READS_LFS = """
import os, pathlib, time, pytest

@pytest.mark.inferscope(rounds=3, warmup=0, max_regression=1)
def test_one():
    head = (pathlib.Path(__file__).parent / "w.bin").read_text()[:7]
    with open(os.environ["WHERE_LOG"], "a") as log:
        log.write(f"{'twin' if os.environ.get('INFERSCOPE_AB_TWIN') else 'here'} {head}\\n")
    time.sleep(0.001)
"""


def test_lfs_pointers_here_are_pointers_at_the_ref(tmp_path: Path) -> None:
    """actions/checkout's default (lfs: false) leaves LFS files as pointers, and git-lfs's filter is configured on the
    runner: `git worktree add` ran the smudge filter, which downloads the ref's files (then the twin read other data
    than this side) or, without the LFS server, failed ("smudge filter lfs failed", a usage error). A checkout whose
    LFS files are pointers gets pointers at the ref too (GIT_LFS_SKIP_SMUDGE=1). The filter here stands in for
    git-lfs with no server: it fails unless told to skip, as git-lfs then does."""
    root = repo(tmp_path / "project")
    git(root, "config", "filter.lfs.clean", "cat")
    (root / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    (root / "w.bin").write_text(POINTER.format(oid="1" * 64))
    (root / "test_x.py").write_text(READS_LFS)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "w.bin").write_text(POINTER.format(oid="2" * 64))
    git(root, "commit", "-qam", "second")
    smudge = "sh -c 'test -n \"$GIT_LFS_SKIP_SMUDGE\" && exec cat; echo no LFS server >&2; exit 1'"
    config = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "filter.lfs.smudge", "GIT_CONFIG_VALUE_0": smudge,
              "GIT_CONFIG_KEY_1": "filter.lfs.required", "GIT_CONFIG_VALUE_1": "true"}  # fmt: skip
    log = tmp_path / "where.log"
    env = child_env(WHERE_LOG=str(log), **config)
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dict(line.split() for line in log.read_text().splitlines()) == {"here": "version", "twin": "version"}
    assert len(worktrees(root)) == 1
    (root / "w.bin").write_text("content\n")  # this side has the files' content: so should the ref
    git(root, "commit", "-qam", "third")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR: "))
    assert "smudge filter lfs failed" in error and "`git lfs fetch origin HEAD~1`" in error, proc.stderr
    assert len(worktrees(root)) == 1


def test_uncommitted_changes_are_this_sides_and_said_to_be(tmp_path: Path) -> None:
    """A test edited and a test file added, neither committed: this side runs them, the twin the ref as committed;
    the summary says so, naming the files, and the working tree, stashes and worktrees are as they were."""
    root = repo(tmp_path / "project")
    body = SLEEPS
    (root / "test_x.py").write_text(body)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "test_x.py").write_text(body + "# edited\n")
    (root / "test_new.py").write_text(body)
    before = (git(root, "status", "--porcelain"), git(root, "stash", "list"), worktrees(root))
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD"), cwd=root, env=child_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = "this side runs this checkout as it is, with changes to 1 tracked file and 1 untracked file (test_x.py, "
    said += "test_new.py)"
    assert said in proc.stdout and "the twin HEAD" in proc.stdout, proc.stdout
    assert (git(root, "status", "--porcelain"), git(root, "stash", "list"), worktrees(root)) == before


def test_a_full_commit_hash_is_shown_short(tmp_path: Path) -> None:
    """`--inferscope-ab=$(git merge-base HEAD origin/main)` gives 40 hex digits: the column's title took them all, and
    the summary read `against 0eeadb1efc82...4b (0eeadb1efc)`. A hash is shown as its first 10 digits."""
    root = repo(tmp_path / "project")
    body = SLEEPS
    (root / "test_x.py").write_text(body)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    sha = git(root, "rev-parse", "HEAD").strip()
    proc = subprocess.run(pytest_cmd(f"--inferscope-ab={sha}"), cwd=root, env=child_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sha not in proc.stdout, proc.stdout
    assert f"vs {sha[:10]} " in proc.stdout and f"this checkout against {sha[:10]}," in proc.stdout, proc.stdout


@pytest.mark.parametrize("here", ["a submodule", "vendored"])
def test_a_submodule_not_initialised_here_is_named_when_the_ref_does_not_collect(tmp_path: Path, here: str) -> None:
    """A fresh clone without `git submodule update --init`: the ref's submodule stays empty there too, and its tests
    that import from it do not collect. The usage error said the module's file here was untracked (`git add` it);
    it names the submodule and how to initialise it (or, where it is no submodule here, that there is no clone)."""
    root, _ = with_submodule(tmp_path)
    if here == "vendored":  # HEAD holds the submodule's files as its own
        git(root, "rm", "-q", "--cached", "vendor/lib")
        git(root, "rm", "-q", ".gitmodules")
        (root / "vendor" / "lib" / ".git").unlink()
        git(root, "add", "vendor/lib")
    else:  # HEAD's test no longer imports from it
        (root / "test_x.py").write_text(SLEEPS)
        git(root, "add", "test_x.py")
    git(root, "commit", "-qm", "third")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))  # no submodule initialised
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=clone,
                          env=child_env(WHERE_LOG=str(tmp_path / "where.log")), capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "No module named 'helper'" in err and "untracked" not in err, err
    if here == "vendored":
        assert "vendor/lib is a submodule at HEAD~1 (" in err and "no clone of it" in err, err
    else:
        assert "The submodule vendor/lib is not initialised in this checkout" in err, err
        assert "run `git submodule update --init vendor/lib` before pytest" in err, err
    assert len(worktrees(clone)) == 1
