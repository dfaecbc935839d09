"""--inferscope-ab across a test file renamed or moved since the ref: its tests are compared with theirs there, by the
name git finds them under at the ref (docs/ab.md, "What the twin sees")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gitrepo import child_env, git, pytest_cmd, worktrees

#: A test whose body spins DELAY s on the CPU: 2 ms at the ref, 20 ms here, against an allowed change of 100%. On the
#: CPU, not asleep: on a busy pinned core a verdict must hold on the rounds' CPU time too (docs/ab.md, "A busy pinned
#: core"), which a sleep does not show; and on a loaded VM the 5 ms sleep once read +66.7% over the 1 ms one
#: (2026-11-30).
BODY = """import time, pytest

@pytest.mark.inferscope(rounds=5, warmup=0, max_regression=1)
def test_one():
    t = time.perf_counter()
    while time.perf_counter() - t < {delay}:
        pass
"""


def moved_repo(root: Path) -> Path:
    """A project in pkg/ (its own pytest.ini) whose test file pkg/tests/test_old.py became pkg/tests/unit/test_new.py
    (git mv, committed), its test ten times slower."""
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "pkg" / "tests").mkdir(parents=True)
    (root / "pkg" / "pytest.ini").write_text("[pytest]\n")
    (root / "pkg" / "tests" / "test_old.py").write_text(BODY.format(delay=0.002))
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "pkg" / "tests" / "unit").mkdir()
    git(root, "mv", "pkg/tests/test_old.py", "pkg/tests/unit/test_new.py")
    (root / "pkg" / "tests" / "unit" / "test_new.py").write_text(BODY.format(delay=0.02))
    git(root, "commit", "-qam", "moved, and slower")
    return root


@pytest.mark.parametrize(("where", "args"), [("pkg", []), (".", ["pkg/tests/unit/test_new.py"])])
def test_a_test_file_moved_since_the_ref_is_compared_with_its_old_self(
    tmp_path: Path, where: str, args: list[str]
) -> None:
    """Before, every test of a moved file read `new` and passed: a regression made in the same change as the move
    went ungated (and, with the new path named on the command line, the twin was given no test at all)."""
    root = moved_repo(tmp_path / "project")
    status = git(root, "status", "--porcelain")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", *args), cwd=root / where, env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    out = proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("test_new.py::test_one"))
    assert "regressed" in row.split(), out
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out
    flat = " ".join(out.split())
    assert "pkg/tests/unit/test_new.py is pkg/tests/test_old.py at HEAD~1 (" in flat, out
    assert "only at HEAD~1" not in flat, out  # the ref's test_old.py::test_one is not listed as removed
    assert git(root, "status", "--porcelain") == status
    assert len(worktrees(root)) == 1


def test_a_module_git_ignores_that_the_refs_tests_import_is_named(tmp_path: Path) -> None:
    """A generated module git ignores (setuptools-scm's `_version.py`) is in this checkout and in no ref's: the ref's
    tests did not collect, and the usage error said to "fix the collection errors there", in code that has none."""
    root = tmp_path / "project"
    (root / "lib").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / ".gitignore").write_text("_version.py\n")
    (root / "lib" / "__init__.py").write_text("from ._version import V\n")
    (root / "lib" / "_version.py").write_text("V = 1\n")
    (root / "test_x.py").write_text("import lib\n" + BODY.format(delay=0.002))
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD"), cwd=root, env=child_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    err = " ".join(proc.stderr.split())
    assert "lib/_version.py is in this checkout, but git ignores it (.gitignore:1: _version.py)" in err, err
    assert "Fix the collection errors there" not in err, err
    assert len(worktrees(root)) == 1
