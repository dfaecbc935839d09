"""A/B runs that cannot compare: a usage error (exit status 4) naming the input and what is wrong, with xdist as
without it, leaving nothing behind; or, for one test, an inconclusive verdict that says why (docs/ab.md)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from gitrepo import git

BODY = """
import time, pytest

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_one():
    time.sleep(0.001)
"""


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


def ab_of_the_test(pytester: pytest.Pytester, **outcomes: int) -> dict[str, Any]:
    """`--inferscope-ab=HEAD~1` with reports, the outcomes asserted: the one test's A/B verdict (its report.json)."""
    out = pytester.path / "out"
    result = pytester.runpytest(
        "-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", f"--inferscope-report={out}"
    )  # fmt: skip
    result.assert_outcomes(**outcomes)
    (report,) = out.rglob("report.json")
    return dict(json.loads(report.read_text())["ab"])


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
    ab = ab_of_the_test(pytester, passed=1)
    assert ab["verdict"] == "inconclusive"
    assert ab["reason"].startswith("the test was skipped at HEAD~1 (") and "(not yet)" in ab["reason"], ab["reason"]


SPIN = """
import time, pytest

def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass

@pytest.mark.inferscope(rounds=10, warmup=1{threshold})
def test_one():
    spin({ms})
"""


def test_a_threshold_the_ref_crosses_does_not_void_the_comparison(pytester: pytest.Pytester) -> None:
    """The ref's test crossed its own latency threshold after its rounds; here the threshold is gone and the body is
    3x slower. The pairs were all there, yet the verdict read `inconclusive` ("the twin stopped") and the test passed:
    a ref failing any threshold let every regression through."""
    first = SPIN.format(threshold=", max_latency_ms=1", ms=2)
    make_repo(pytester.path, {"test_x.py": first}, {"test_x.py": SPIN.format(threshold="", ms=6)})
    ab = ab_of_the_test(pytester, failed=1)
    assert ab["verdict"] == "regressed" and ab["pairs"] >= 10, ab
    assert "max_latency_ms" in ab["twin_error"], ab["twin_error"]
    assert ab["notes"][-1].startswith("the test failed at HEAD~1 (") and "the pairs are compared" in ab["notes"][-1]


def test_a_file_named_on_the_command_line_only_here(pytester: pytest.Pytester) -> None:
    """`pytest test_new.py test_x.py --inferscope-ab=HEAD` with test_new.py new (untracked): the twin stopped with
    "file or directory not found" after saying it had collected nothing, and every test read `new`, test_x.py's too,
    though it is at HEAD. The file only here is left out of the twin's command line, and said to be."""
    make_repo(pytester.path, {"test_x.py": BODY}, {"test_old.py": BODY})
    (pytester.path / "test_old.py").unlink()  # deleted here, still at HEAD
    (pytester.path / "test_new.py").write_text(BODY)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD",
                                "test_new.py", "test_x.py")  # fmt: skip
    result.assert_outcomes(passed=2)
    rows = {line.split()[0]: line for line in result.outlines if line.startswith("test_")}
    assert "new" in rows["test_new.py::test_one"].split(), rows
    assert "unchanged" in rows["test_x.py::test_one"] or "inconclusive" in rows["test_x.py::test_one"], rows
    out = " ".join(result.stdout.str().split())
    assert "inferscope A/B: test_new.py: not at HEAD (" in out and "their tests are new" in out, out
    # test_old.py was not asked for: not listed as removed
    assert "profiled test only at" not in out and "profiled tests only at" not in out
    assert "with changes to 1 tracked file and 1 untracked file (test_old.py, test_new.py)" in out  # (uncommitted)


def test_only_files_named_that_are_only_here(pytester: pytest.Pytester) -> None:
    """Every file named is only here: no twin starts (given no path, it would collect the whole suite at the ref), and
    the tests are `new`."""
    make_repo(pytester.path, {"test_x.py": BODY}, {"test_y.py": BODY})
    (pytester.path / "test_new.py").write_text(BODY)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD", "test_new.py")
    result.assert_outcomes(passed=1)
    row = next(line for line in result.outlines if line.startswith("test_new.py::test_one"))
    assert "new" in row.split(), row
    assert "removed" not in result.stdout.str()


@pytest.mark.parametrize("xdist", [False, True])
def test_a_test_named_on_the_command_line_only_here(pytester: pytest.Pytester, xdist: bool) -> None:
    """`pytest test_x.py::test_two test_x.py::test_one --inferscope-ab=HEAD~1`, test_two added since: the twin stopped
    with "not found" and the run was a usage error. The twin collects the file and keeps the tests named: test_two is
    `new`, test_one compared, and the file's third test, not named, runs on neither side."""
    args = ["-n", "1"] if xdist else []
    if xdist:
        pytest.importorskip("xdist")
    third = BODY.replace("test_one", "test_three")
    make_repo(pytester.path, {"test_x.py": BODY + third},
              {"test_x.py": BODY + BODY.replace("test_one", "test_two") + third})  # fmt: skip
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1",
                                "test_x.py::test_two", "test_x.py::test_one", *args)  # fmt: skip
    result.assert_outcomes(passed=2)
    rows = {line.split()[0]: line for line in result.outlines if line.startswith("test_x.py::")}
    assert "new" in rows["test_x.py::test_two"].split(), rows
    assert "unchanged" in rows["test_x.py::test_one"] or "inconclusive" in rows["test_x.py::test_one"], rows
    assert "test_x.py::test_three" not in rows, rows
    assert "removed" not in result.stdout.str()  # the ref's test_three was not asked for


def test_a_class_named_by_node_id_keeps_its_methods_and_a_file_named_whole_all_its_tests(tmp_path: Path) -> None:
    """The twin's filter as pytest selects: a class's id its methods, a function's id its parametrizations (not
    a longer name), and a file named whole as well as by id: all of its tests."""
    from pytest_inferscope.ab.nodeids import files_for_ids, named

    (tmp_path / "t").mkdir()
    args, specs = files_for_ids(["t/test_a.py::TestA", "t/test_a.py::test_f", "t/test_b.py::test_g"], tmp_path)
    assert args == ["t/test_a.py", "t/test_b.py"]
    a, b = tmp_path / "t" / "test_a.py", tmp_path / "t" / "test_b.py"
    assert named(a, "t/test_a.py::TestA::test_m", specs, [])
    assert named(a, "t/test_a.py::test_f[1-x]", specs, [])
    assert not named(a, "t/test_a.py::test_fg", specs, [])
    assert not named(a, "t/test_a.py::TestAB::test_m", specs, [])
    assert named(tmp_path / "t" / "test_c.py", "t/test_c.py::test_h", specs, [])  # no id names its file
    assert not named(b, "t/test_b.py::test_h", specs, [])
    assert named(b, "t/test_b.py::test_h", specs, [tmp_path / "t"])  # its folder named whole too


@pytest.mark.parametrize("xdist", [False, True])
def test_the_twins_inferscope_warnings_are_said_here_once_each(pytester: pytest.Pytester, xdist: bool) -> None:
    """A rule and a machine_info hook broken at the ref only: the twin warns (its log, removed with the session, was
    the only place that said so) and this side's summary says what it warned, each warning once (under xdist each
    worker's twin warns about the machine info: one line)."""
    if xdist:
        pytest.importorskip("xdist")
    broken = (
        "def broken_rule(ctx):\n    return 1 / 0\n\n"
        "def pytest_inferscope_rules(config):\n    return [broken_rule]\n\n"
        "def pytest_inferscope_machine_info(config):\n    return ['rack']\n"
    )
    two = BODY + BODY.replace("test_one", "test_two")
    make_repo(pytester.path, {"test_x.py": two, "conftest.py": broken}, {"conftest.py": ""})
    args = ["-n", "2"] if xdist else []
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    result.assert_outcomes(passed=2)  # the ref's warnings are not this side's failures
    lines = result.stdout.str().splitlines()
    said = [line for line in lines if line.startswith("inferscope A/B: the twin at HEAD~1 (")]
    for test in ("test_one", "test_two"):
        rule = [s for s in said if "warned: the rule 'broken_rule' (conftest.py:1) raised ZeroDivisionError" in s
                and f"test_x.py::{test}'s analysis" in s]  # fmt: skip
        assert len(rule) == 1, said
    machine = [s for s in said if "the pytest_inferscope_machine_info hook returned ['rack']" in s]
    assert len(machine) == 1 and len(said) == 3, said
    assert not any("broken_rule" in line for line in lines if not line.startswith("inferscope A/B: the twin"))


@pytest.mark.parametrize("xdist", [False, True])
def test_no_test_paired_because_the_folder_is_not_at_the_ref(pytester: pytest.Pytester, xdist: bool) -> None:
    """From pkg/ with `testpaths = tests` and a ref before pkg/tests/, every test read `new`, with no word why: the
    user could take the run for a gate that ran."""
    args = ["-n", "1"] if xdist else []
    if xdist:
        pytest.importorskip("xdist")
    ini = "[pytest]\ntestpaths = tests\n"
    make_repo(pytester.path, {"pkg/pytest.ini": ini, "pkg/README": "x\n"}, {"pkg/tests/test_x.py": BODY})
    pytester._monkeypatch.chdir(pytester.path / "pkg")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    result.assert_outcomes(passed=1)
    out = " ".join(result.stdout.str().split())
    assert "the 1 profiled test here has no counterpart at HEAD~1 (" in out, out
    assert "the A/B gate did not run: tests/ does not exist at HEAD~1 (" in out, out
    assert out.count("has no counterpart at") == 1, out  # once, also with xdist's workers


def test_no_test_paired_though_the_files_are_at_the_ref(pytester: pytest.Pytester) -> None:
    """The file is at the ref, its test not profiled there: said too, and none of it when one test is paired."""
    plain = BODY.replace("@pytest.mark.inferscope(rounds=3, warmup=0)\n", "")
    make_repo(pytester.path, {"test_x.py": plain}, {"test_x.py": BODY})
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1")
    result.assert_outcomes(passed=1)
    out = " ".join(result.stdout.str().split())
    assert "Their test files exist there, but none of their tests is profiled (or collected) there" in out, out
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD")
    assert "no counterpart" not in result.stdout.str()


@pytest.mark.parametrize("xdist", [False, True])
def test_the_twins_warnings_at_its_session_end_are_said_here(pytester: pytest.Pytester, xdist: bool) -> None:
    """An InferscopeWarning the twin raised after its last result (its session's end: a sessionfinish hook) went only
    to its log, removed with the session; the twin now says it at the end, and this side's summary says it once."""
    if xdist:
        pytest.importorskip("xdist")
    late = (
        "import warnings\nfrom pytest_inferscope.warning import InferscopeWarning\n\n"
        "def pytest_sessionfinish(session):\n    warnings.warn(InferscopeWarning('inferscope: the end at the ref'))\n"
    )
    make_repo(pytester.path, {"test_x.py": BODY, "conftest.py": late}, {"conftest.py": ""})
    args = ["-n", "1"] if xdist else []
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    result.assert_outcomes(passed=1)
    said = [line for line in result.outlines if line.startswith("inferscope A/B: the twin at HEAD~1 (")]
    assert len(said) == 1 and said[0].endswith(") warned: the end at the ref"), said
