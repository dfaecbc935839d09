"""What the A/B tests that make git repositories share: git, the child pytest's command line and environment, the
worktrees a repository lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def git(where: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True, env=env).stdout


def two_commits(root: Path, first: str, second: str) -> Path:
    """A git repository at `root`: test_x.py as `first` committed, then as `second` (an empty commit when the same)."""
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "test_x.py").write_text(first)
    git(root, "add", "test_x.py")
    git(root, "commit", "-qm", "first")
    (root / "test_x.py").write_text(second)
    git(root, "commit", "-qam", "second", "--allow-empty")
    return root


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a pytest child process: this checkout's package importable, no git variables of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "PYTEST_ADDOPTS"}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]


def worktrees(root: Path) -> list[str]:
    return [line for line in git(root, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def ab_reports(root: Path, out: Path) -> dict[str, dict]:
    """Each test's report.json in `out`, by the test's name, after an A/B run in the repository `root`, which it
    checks left no worktree and no twin's log behind."""
    reports = {}
    for path in out.glob("*/report.json"):
        report = json.loads(path.read_text())
        reports[report["nodeid"].rpartition("::")[2]] = report
    assert len(git(root, "worktree", "list").strip().splitlines()) == 1  # the worktree is gone
    assert not list(Path(root.parent).glob("**/twin-*.log"))  # and every twin's log with it
    return reports
