"""Counts in user-facing sentences say their noun in the singular or the plural (`units.fmt_count`), not "file(s)"."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_inferscope.ab.paired import ab_line, judge, verdict_from
from pytest_inferscope.ab.worktree import changes
from pytest_inferscope.stats import compare_metric


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_the_dirty_tree_line_counts_its_files_in_words(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    git_dir = tmp_path / ".git"
    assert changes(tmp_path, git_dir) == "changes to 2 untracked files (a.py, b.py)"
    _git(tmp_path, "add", "a.py")
    assert changes(tmp_path, git_dir) == "changes to 1 tracked file and 1 untracked file (a.py, b.py)"


def test_a_verdict_regressed_by_one_metric_says_metric_and_its_looks_in_words() -> None:
    new, ref = [10.0 + 0.01 * i for i in range(12)], [10.0 + 0.01 * i for i in range(12)]
    slower = judge([1.3 * x for x in new], ref, max_regression=0.05, alpha=0.01, n_looks=1, last=True)
    assert slower.verdict == "regressed" and "at alpha 0.01/1 look)" in slower.reason, slower.reason
    look = judge(new, ref, max_regression=0.05, alpha=0.01, n_looks=1, last=True)
    change = compare_metric("gpu.kernel_launches_per_round", 120, 240, 0.0)
    assert change is not None
    v = verdict_from("t.py::test_x", "HEAD~1", new, ref, look, 1, [change])
    assert v.verdict == "regressed" and v.reason.startswith("1 deterministic metric rose; latency: "), v.reason
    # the latency's change is not said where the metrics alone made it regressed, in the new words and the old ones
    # (a report.json written before 2026-11-30)
    for reason in (v.reason, v.reason.replace("metric rose", "metric(s) rose")):
        data = {**v.to_dict(), "reason": reason}
        assert ab_line(data) == "inferscope A/B: kernel_launches +100.0% vs HEAD~1", reason
