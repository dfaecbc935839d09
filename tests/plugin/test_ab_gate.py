"""What gates an A/B run: the A/B comparison with the ref, which judges `max_regression`, and not the baseline; and
nothing, said so, when profiling is switched off (docs/ab.md)."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_ab import BODY, SLOWER, git, make_repo, run


def properties(junit: Path) -> dict[tuple[str | None, str | None], str | None]:
    return {
        (case.get("name"), p.get("name")): p.get("value")
        for case in ET.parse(junit).iter("testcase")
        for p in case.iter("property")
    }


def checks(report_dir: Path, test: str) -> dict[str, dict[str, object]]:
    (folder,) = report_dir.glob(f"test_x.py__{test}-*")
    return {c["key"]: c for c in json.loads((folder / "report.json").read_text())["checks"]}


def test_the_markers_max_regression_is_judged_by_the_ab_comparison(pytester: pytest.Pytester) -> None:
    """The A/B gate judged the marker's max_regression, yet the test's max_regression check said "not evaluated: no
    baseline to compare against in this run (use --inferscope-compare=NAME)": JUnit's inferscope.check.max_regression
    read not_evaluated on a test the A/B failed, and the report sent the user to an option beside the point."""
    root = make_repo(pytester, BODY.format(changed=0.002), BODY.format(changed=SLOWER))
    out = root.parent / "out"
    result = run(pytester, "--inferscope-ab=HEAD~1", "--junitxml=junit.xml", f"--inferscope-report={out}")
    result.assert_outcomes(passed=1, failed=1)
    props = properties(root / "junit.xml")
    assert props[("test_changed", "inferscope.ab.verdict")] == "regressed"
    assert props[("test_changed", "inferscope.check.max_regression")] == "failed"
    changed = checks(out, "test_changed")["max_regression"]
    assert changed["status"] == "failed" and changed["measured"] == pytest.approx(
        float(props[("test_changed", "inferscope.ab.ratio")] or "nan"), rel=1e-3
    )
    assert str(changed["message"]).startswith("max_regression: regressed against HEAD~1 (")
    same_ab = props[("test_same", "inferscope.ab.verdict")]
    same = checks(out, "test_same")["max_regression"]
    assert same["status"] == {"unchanged": "passed", "improved": "passed", "inconclusive": "not_evaluated"}[same_ab]
    for check in (changed, same):
        assert "--inferscope-compare" not in str(check["message"]) and "HEAD~1" in str(check["message"])
    row = next(line for line in result.outlines if line.startswith("test_x.py::test_changed"))
    assert row.endswith("FAIL (max_regression)")
    # The failure says the A/B evidence once: not again as a crossed threshold. (Outside the short summary's line,
    # which repeats the failure's first line: whole on CI, where pytest does not cut it to the terminal's width.)
    text = "\n".join(line for line in result.outlines if not line.startswith("FAILED "))
    assert text.count("slower over") == 1, text
    assert "inferscope: max_regression" not in text


@pytest.mark.parametrize("given", ["cli", "ini", "ini, no such baseline"])
def test_an_ab_run_does_not_compare_with_the_baseline(pytester: pytest.Pytester, given: str) -> None:
    """`--inferscope-compare=main --inferscope-ab=HEAD~1` compared this side's rounds, paced by the twin's on one
    core, with a plain run's baseline ("+50.0% regressed" in `vs baseline` beside "-0.0% unchanged" in `vs HEAD~1`).
    Not compared now, and every surface that showed the comparison says so; a team's config file setting
    `inferscope_compare` does not stop its A/B runs, even where that baseline is not at hand."""
    root = pytester.path
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "test_x.py").write_text(BODY.format(changed=0.002))
    (root / "pytest.ini").write_text("[pytest]\n")
    git(root, "add", "test_x.py", "pytest.ini")
    git(root, "commit", "-qm", "first")
    run(pytester, "--inferscope-save-baseline=main").assert_outcomes(passed=2)  # a plain run's: 2 ms
    (root / "test_x.py").write_text(BODY.format(changed=0.003))
    git(root, "commit", "-qam", "slower")
    (root / "test_x.py").write_text(BODY.format(changed=0.003) + "# a comment\n")
    git(root, "commit", "-qam", "the same")  # HEAD and HEAD~1 both 3 ms: 50% slower than the baseline, not the ref
    name = "nightly" if "no such" in given else "main"
    args = [f"--inferscope-compare={name}"] if given == "cli" else []
    if given.startswith("ini"):
        (root / "pytest.ini").write_text(f"[pytest]\ninferscope_compare = {name}\n")
    summary, out = root.parent / "step_summary.md", root.parent / "out"
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(pytester, "--inferscope-ab=HEAD~1", "--junitxml=junit.xml", f"--inferscope-report={out}", *args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()  # unchanged (or inconclusive) against HEAD~1
    text = " ".join(result.stdout.str().split())
    where = f"--inferscope-compare={name}" if given == "cli" else "set by ini inferscope_compare"
    line = (
        f"not compared with baseline {name!r} ({where}): an A/B run's rounds are paced, "
        "each taking its turn with the twin's on one CPU core, so they are not what a plain run measures; the A/B "
        "comparison with HEAD~1 ("
    )
    assert f"inferscope A/B: {line}" in text and "is the gate" in text
    header = next(x for x in result.outlines if x.startswith("test ") and "verdict" in x)
    assert "vs baseline" not in header and "vs HEAD~1" in header
    props = properties(root / "junit.xml")
    for test in ("test_changed", "test_same"):
        assert (test, "inferscope.regression.verdict") not in props
        assert (props[(test, "inferscope.regression.not_compared")] or "").startswith(line)
        assert props[(test, "inferscope.check.max_regression")] in ("passed", "not_evaluated")  # the A/B's
        (folder,) = out.glob(f"test_x.py__{test}-*")
        report = json.loads((folder / "report.json").read_text())
        assert report["regression"] is None and report["ab"]["not_compared"].startswith(line)
        assert line in " ".join((folder / "report.md").read_text().split())
        assert line.replace("'", "&#39;") in " ".join((folder / "report.html").read_text().split())
    index = json.loads((out / "index.json").read_text())
    assert index["session"]["vs baseline"].startswith(line)
    assert [t["vs_baseline"] for t in index["tests"]] == [None, None]
    assert line in " ".join((out / "index.md").read_text().split())
    assert line in " ".join(summary.read_text().split())
    assert len(list((root / ".inferscope" / "baselines").iterdir())) == 1  # main.json, as it was


@pytest.mark.parametrize("how", ["cli", "env"])
def test_switched_off_the_ab_run_says_it_gated_nothing(pytester: pytest.Pytester, how: str) -> None:
    """With --inferscope-disable (or INFERSCOPE_ENABLE=0, set for a while in a CI's variables, say), a run given
    --inferscope-ab passed with not a word: no twin, no verdict, and a gate the job's log never said was not there."""
    root = make_repo(pytester, BODY.format(changed=0.002), BODY.format(changed=0.003))
    if how == "env":
        pytester._monkeypatch.setenv("INFERSCOPE_ENABLE", "0")
    off = ["--inferscope-disable"] if how == "cli" else []
    result = run(pytester, "--inferscope-ab=HEAD~1", *off)
    result.assert_outcomes(passed=2)  # the switch is obeyed: each test ran once, unprofiled
    where = "--inferscope-disable" if how == "cli" else "set by env INFERSCOPE_ENABLE"
    result.stdout.fnmatch_lines([
        "*= inferscope =*",
        f"inferscope: profiling is switched off ({where}): --inferscope-ab=HEAD~1 did nothing; no test was "
        "profiled, compared or gated",
    ])  # fmt: skip
    out = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert len(out.strip().splitlines()) == 1  # no worktree was made


def test_the_index_shows_the_ab_verdicts(pytester: pytest.Pytester) -> None:
    """With --inferscope-report, index.md, index.html and index.json of an A/B run had no word of the A/B: the page a
    CI uploads showed `vs baseline —` beside a test the A/B failed, while the terminal had a `vs HEAD~1` column."""
    make_repo(pytester, BODY.format(changed=0.002), BODY.format(changed=SLOWER))
    out = pytester.path.parent / "out"
    result = run(pytester, "--inferscope-ab=HEAD~1", f"--inferscope-report={out}")
    result.assert_outcomes(passed=1, failed=1)
    index = {t["nodeid"]: t for t in json.loads((out / "index.json").read_text())["tests"]}
    changed = index["test_x.py::test_changed"]["vs_ref"]
    assert changed["ref"].startswith("HEAD~1 (") and changed["verdict"] == "regressed"
    assert changed["median_change"] > 0.3 and changed["pairs"] >= 10 and changed["p_value"] < 0.01
    assert index["test_x.py::test_same"]["vs_ref"]["verdict"] in ("unchanged", "inconclusive")
    md = (out / "index.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| Test "))
    assert "| vs HEAD~1 (" in head
    row = next(line for line in md.splitlines() if line.startswith("| ") and "test_changed" in line)  # (its table row)
    assert "% regressed |" in row
    html = (out / "index.html").read_text()
    assert "<th>vs HEAD~1 (" in html and "% regressed</td>" in html
