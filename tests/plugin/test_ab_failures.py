"""A/B runs that cannot compare: a usage error (exit status 4) naming the input and what is wrong, with xdist as
without it, leaving nothing behind; or, for one test, an inconclusive verdict that says why (docs/ab.md)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

BODY = """
import time, pytest

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_one():
    time.sleep(0.001)
"""


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, first: dict[str, str], second: dict[str, str]) -> Path:
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    for files in (first, second):
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        git(root, "add", "-A")
        git(root, "commit", "-qm", "a commit")
    return root


def worktrees(root: Path) -> int:
    return len(git(root, "worktree", "list").strip().splitlines())


@pytest.mark.parametrize("xdist", [False, True])
def test_the_tests_not_collecting_at_the_ref(pytester: pytest.Pytester, xdist: bool) -> None:
    """Under xdist the workers' usage error reached the controller as `INTERNALERROR ... no active workers`."""
    args = ["-n", "1"] if xdist else []
    if xdist:
        pytest.importorskip("xdist")
    root = make_repo(pytester.path, {"test_x.py": BODY, "test_bad.py": "def broken(:\n"}, {"test_bad.py": ""})
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--inferscope-ab: the tests do not collect at HEAD~1 (" in err and "INTERNALERROR" not in result.stdout.str()
    assert worktrees(root) == 1


@pytest.mark.parametrize("xdist", [False, True])
def test_running_in_a_folder_the_ref_does_not_have(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, xdist: bool
) -> None:
    """It was an INTERNALERROR (FileNotFoundError starting the twin there), and the twin's log stayed behind."""
    args = ["-n", "1"] if xdist else []
    if xdist:
        pytest.importorskip("xdist")
    root = make_repo(pytester.path, {"test_x.py": BODY}, {"new/test_y.py": BODY})
    tmp = tmp_path_factory.mktemp("tmpdir")
    pytester._monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # TMPDIR, for this process's tempfile
    pytester._monkeypatch.chdir(root / "new")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"pytest runs in {root / 'new'}, and that folder (new) does not exist at HEAD~1 (" in err, err
    assert worktrees(root) == 1 and list(tmp.iterdir()) == []


def test_tmpdir_inside_the_project(pytester: pytest.Pytester) -> None:
    """This side collected the temporary checkout too ("import file mismatch") when TMPDIR was inside the project."""
    root = make_repo(pytester.path, {"test_x.py": BODY, ".gitignore": "tmp/\n"}, {"test_x.py": BODY + "# second\n"})
    (root / "tmp").mkdir()
    pytester._monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))  # TMPDIR, for this process's tempfile
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1")
    result.assert_outcomes(passed=1)
    row = next(line for line in result.outlines if line.startswith("test_x.py::test_one"))
    assert "unchanged" in row or "inconclusive" in row
    assert worktrees(root) == 1 and list((root / "tmp").iterdir()) == []


@pytest.mark.parametrize("how", ["marker", "in the body"])
def test_a_test_skipped_at_the_ref_is_said_to_be(pytester: pytest.Pytester, how: str) -> None:
    """It was reported as "the test failed at" the ref."""
    skipped = (
        BODY.replace("@pytest.mark.inferscope", "@pytest.mark.skip(reason='not yet')\n@pytest.mark.inferscope")
        if how == "marker"
        else BODY.replace("    time.sleep(0.001)", "    pytest.skip('not yet')")
    )
    make_repo(pytester.path, {"test_x.py": skipped}, {"test_x.py": BODY})
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", f"--inferscope-report={out}"
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    (report,) = out.rglob("report.json")
    ab = json.loads(report.read_text())["ab"]
    assert ab["verdict"] == "inconclusive"
    assert ab["reason"].startswith("the test was skipped at HEAD~1 (") and "(not yet)" in ab["reason"], ab["reason"]
