"""`inferscope analyze` and `compare` given a report root that holds test folders its index.json no longer lists.

A pytest session's index.json lists the session's tests; the folders of earlier runs stay in the root (nothing in
it is removed). The commands say which tests the index lists and which folders are older, with when each was written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from pytest_inferscope.cli import main
from pytest_inferscope.reporters import load_report, write_index

JOB = "sum(range(20000))\n"
#: When the first run wrote its folders, and when the last run wrote its index (set on the files: mtimes).
EARLIER, LAST = time.mktime((2026, 11, 28, 9, 15, 0, 0, 0, -1)), time.mktime((2026, 11, 29, 14, 5, 0, 0, 0, -1))


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def root_with_older_folders(work: Path, name: str = "DIR") -> Path:
    """A root as three runs and then a pytest session of one test leave it: 4 test folders, 1 in index.json."""
    for job in ("a", "b", "c", "d"):
        (work / f"job_{job}.py").write_text(JOB)
        assert main(["run", f"job_{job}.py", "--report", name]) == 0
    root = work / name
    for job in ("a", "b", "c"):
        for f in (root / f"job_{job}.py").iterdir():
            os.utime(f, (EARLIER, EARLIER))
    write_index([load_report(root / "job_d.py" / "report.json")], root, {})  # as the session of job_d.py writes it
    os.utime(root / "index.json", (LAST, LAST))
    return root


@pytest.mark.parametrize("given", ["DIR", "DIR/index.json", "DIR/index.md"])
def test_analyze_of_a_root_says_which_tests_its_index_lists_and_which_folders_are_older(
    work: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    # It said "DIR is a report folder with 4 tests" while index.json and index.md listed 1.
    root_with_older_folders(work)
    capsys.readouterr()
    assert main(["analyze", given, "--report", "out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"the folder's index.json (written {stamp(LAST)}) lists 1 test: job_d.py (DIR/job_d.py); " in err, err
    assert (
        f"3 older test folders it does not list, left by earlier runs (written {stamp(EARLIER)}): job_a.py "
        "(DIR/job_a.py), job_b.py (DIR/job_b.py), job_c.py (DIR/job_c.py)."
    ) in err, err
    assert "analyze re-runs one test's trace: give its folder, e.g. DIR/job_d.py" in err, err


def test_analyze_of_a_root_without_an_index_lists_its_folders(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = root_with_older_folders(work)
    for page in ("index.json", "index.md", "index.html"):
        (root / page).unlink()
    capsys.readouterr()
    assert main(["analyze", "DIR", "--report", "out"]) == 2
    err = capsys.readouterr().err
    assert "DIR is a report folder of 4 tests and no index.json: job_a.py (DIR/job_a.py), job_b.py" in err, err


def test_compare_says_which_folders_of_a_root_its_index_left_out(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # job_a..c showed as "only in A" with no word that B holds older folders of them, which compare skipped.
    root_with_older_folders(work, "B")
    for job in ("a", "b", "c", "d"):
        assert main(["run", f"job_{job}.py", "--report", "A"]) == 0
    capsys.readouterr()
    assert main(["compare", "A", "B"]) == 0
    out = capsys.readouterr().out
    assert "job_a.py  only in A" in out
    assert (
        f"  B (B): its index.json (written {stamp(LAST)}) lists 1 test; 3 older test folders it does not list, left "
        f"by earlier runs (written {stamp(EARLIER)}), were not compared: job_a.py, job_b.py, job_c.py."
    ) in out, out
    assert "A (A)" not in out
    index = json.loads((work / "B" / "index.json").read_text())
    assert [t["nodeid"] for t in index["tests"]] == ["job_d.py"]  # compare wrote nothing


def test_the_index_pages_say_how_many_older_test_folders_they_do_not_list(work: Path) -> None:
    # index.md listed the last session's test and said nothing of the 3 older folders beside it.
    root = root_with_older_folders(work)
    (root / "notes").mkdir()  # a folder that is no test's (no report.json) is not counted, nor is assets/
    line = "3 older test folders from earlier runs are in this folder (not listed)"
    assert line in (root / "index.md").read_text() and line in (root / "index.html").read_text()
    (work / "job_e.py").write_text(JOB)
    assert main(["run", "job_e.py", "--report", "DIR"]) == 0  # run keeps the listed test and adds its own
    assert "3 older test folders" in (root / "index.md").read_text()
    write_index([load_report(root / f"job_{j}.py" / "report.json") for j in "abcd"], root, {})
    line = "1 older test folder from an earlier run is in this folder (not listed)"
    assert line in (root / "index.md").read_text() and line in (root / "index.html").read_text()
    write_index([load_report(root / f"job_{j}.py" / "report.json") for j in "abcde"], root, {})
    assert "older test folder" not in (root / "index.md").read_text() + (root / "index.html").read_text()


def test_compare_given_the_name_of_a_saved_baseline_says_where_its_file_is(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `pytest --inferscope-save-baseline=main` then `inferscope compare main new`: "A (main) does not exist."
    from pytest_inferscope.baseline import BaselineStore

    (work / "job.py").write_text(JOB)
    assert main(["run", "job.py", "--report", "new"]) == 0
    BaselineStore(work / ".inferscope" / "baselines").save(
        "main", [load_report(work / "new" / "job.py" / "report.json")], {}
    )
    capsys.readouterr()
    assert main(["compare", "main", "new"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "inferscope compare: A (main) does not exist; a baseline named 'main' is saved in "
        ".inferscope/baselines/main.json: give that file, e.g. `inferscope compare .inferscope/baselines/main.json "
        "new`.\n"
    )
    assert main(["compare", ".inferscope/baselines/main.json", "new"]) == 0
    assert main(["compare", "new", "nothing"]) == 2
    assert capsys.readouterr().err.endswith(
        "B (nothing) does not exist; give a report folder, a report.json, an index.json or a baseline file "
        "(.inferscope/baselines/NAME.json).\n"
    )


def test_index_lists_the_tests_a_killed_session_completed(pytester: pytest.Pytester) -> None:
    """A session killed before its end (pytest-timeout's thread method calls os._exit, as does this test's body) left
    the report folders of the tests it completed and the index of the run before, which listed none of them; no
    command wrote an index of them."""
    pytester.makepyfile(test_k="def test_a():\n    pass\n\ndef test_old():\n    pass\n")
    args = ("-p", "no:randomly", "-p", "no:benchmark", "--inferscope-all", "--inferscope-report=out")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=2)
    out = pytester.path / "out"
    # (the writer puts a test's files on disk while the next is set up, and holds them while its rounds run: the
    # fixture's second lets test_b's be written before test_c_killed dies, as a slower test's setup would)
    pytester.makepyfile(
        test_k="""
        import os, time
        import pytest

        @pytest.fixture
        def settle():
            time.sleep(1.0)

        def test_a():
            pass

        def test_b():
            pass

        def test_c_killed(settle):
            os._exit(1)

        def test_d():
            pass
        """
    )
    pytester.runpytest_subprocess(*args)
    listed = [t["nodeid"] for t in json.loads((out / "index.json").read_text())["tests"]]
    assert listed == ["test_k.py::test_a", "test_k.py::test_old"]  # the run before's
    assert main(["index", str(out)]) == 0
    listed = [t["nodeid"] for t in json.loads((out / "index.json").read_text())["tests"]]
    assert listed == ["test_k.py::test_a", "test_k.py::test_b"]
    assert (
        "test_k.py::test_b" in (out / "index.md").read_text()
        and "test_k.py::test_b" in (out / "index.html").read_text()
    )
    assert main(["index", str(out), "--all"]) == 0
    listed = [t["nodeid"] for t in json.loads((out / "index.json").read_text())["tests"]]
    assert listed == ["test_k.py::test_a", "test_k.py::test_b", "test_k.py::test_old"]
