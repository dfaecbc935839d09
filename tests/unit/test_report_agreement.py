"""What a test's report says agrees with itself and with the session's other outputs (terminal, index, JUnit)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from test_reporters import gpu_result

from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.jsonreport import load_report, to_json
from pytest_inferscope.reporters.junit import junit_properties
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import TestResult


def _html(r: TestResult) -> str:
    buf = io.BytesIO()
    write_html_report(r, None, buf)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", buf.getvalue().decode()))


def _probed() -> TestResult:
    """20 rounds asked for, warm-up 3; the speed probe measured 27 (a busy machine)."""
    r = gpu_result()
    r.rounds = 20
    r.latency.samples_ms = [87.0 + i % 5 for i in range(27)]
    return r


def test_the_header_says_the_rounds_measured_and_those_asked_for(tmp_path: Path) -> None:
    r = _probed()
    md = render_report(r)
    assert "27 rounds measured (20 asked for, warm-up 3)" in md.splitlines()[2]
    assert "median of 27 rounds" in md and "20 rounds (warm-up" not in md
    assert "27 rounds measured (20 asked for, warm-up 3)" in _html(r)
    data = json.loads(to_json(r))
    assert (data["rounds"], data["measured_rounds"]) == (20, 27)
    assert dict(junit_properties(r, None))["inferscope.rounds"] == "27"
    (tmp_path / "report.json").write_text(to_json(r))
    assert load_report(tmp_path / "report.json").rounds == 20  # the derived key is not read back


def test_the_header_is_unchanged_when_the_rounds_asked_for_ran() -> None:
    r = gpu_result()
    assert r.rounds == len(r.latency.samples_ms) == 10
    assert "· 10 rounds (warm-up 3)" in render_report(r)
    assert "10 rounds (warm-up 3)" in _html(r)
    assert json.loads(to_json(r))["measured_rounds"] == 10


def test_per_round_figures_say_they_are_means_beside_the_median_latency() -> None:
    r = gpu_result()
    r.latency.samples_ms = [1.0] * 9 + [70.0]  # one round far slower: the mean is 7.9 ms, the median 1.0
    r.latency.median, r.latency.mean = 1.0, 7.9
    md = render_report(r)
    said = "Per round: the mean over the measured rounds (mean round 7.90 ms, against the median 1.00 ms above)"
    assert said in md and "saves ~9.20 ms per round (mean)" in md
    assert "ms per round, mean)" in md  # a finding's suggestion
    html = _html(r)
    assert said in html and "Saves per round (mean)" in html


def test_every_index_says_the_comparison_with_the_baseline(tmp_path: Path) -> None:
    from pytest_inferscope.comparison import Comparison
    from pytest_inferscope.reporters import write_index
    from pytest_inferscope.results import RegressionVerdict

    compared, alone = gpu_result("t.py::test_compared"), gpu_result("t.py::test_alone")
    c = Comparison("regressed", 1.283, 1.2, 1.4, 0.001, "", 1.069, 1.372, 12, 12)
    compared.regression = RegressionVerdict(compared.nodeid, "regressed", "", c, baseline_name="main")
    compared.added = {"extra_rounds": 0.0, "added_ms": 1.5}  # as an xdist worker's result holds it
    write_index([compared, alone], tmp_path, {})
    md = (tmp_path / "index.md").read_text()
    assert "| vs baseline |" in md and "| +28.3% regressed |" in md and "| — |" in md
    html = (tmp_path / "index.html").read_text()
    assert "+28.3% regressed" in html and "`added`" not in html
    tests = {t["nodeid"]: t for t in json.loads((tmp_path / "index.json").read_text())["tests"]}
    assert tests["t.py::test_alone"]["vs_baseline"] is None
    vs = tests["t.py::test_compared"]["vs_baseline"]
    assert vs["verdict"] == "regressed" and vs["baseline"] == "main" and round(vs["median_change"], 3) == 0.283
    assert (vs["baseline_median_ms"], vs["median_ms"]) == (1.069, 1.372)
    extra = tests["t.py::test_compared"]["added"]["extra_rounds"]
    assert extra == 0 and type(extra) is int  # as a serial run writes it


def test_two_medians_are_written_to_the_same_decimals() -> None:
    from pytest_inferscope.comparison import ms_pair
    from pytest_inferscope.stats import compare_samples

    assert ms_pair(1.055, 0.7478) == ("1.055", "0.748")  # was 1.055 → 0.7478 (improved) beside 1.069 → 1.372
    assert ms_pair(1.069, 1.372) == ("1.069", "1.372") and ms_pair(87.36, 120.0) == ("87.4", "120.0")
    c = compare_samples(
        [1.055 + i * 1e-4 for i in range(12)], [0.7478 + i * 1e-4 for i in range(12)], max_regression=0.05
    )
    assert "median 1.056 → 0.748 ms" in c.reason


def test_a_part_not_collected_has_one_parenthesis() -> None:
    import inspect

    import pytest_inferscope.analyzer.context as context

    # The reason is shown inside the breakdown's "not collected (...)"
    assert "no CPU stack samples: sampling off or rounds too short" in inspect.getsource(context)
    assert "(sampling off" not in inspect.getsource(context)


def test_report_html_lists_the_suggestions_in_report_mds_order() -> None:
    """The simulated fixes come first, by their simulated saving, then the findings' own by their estimate: report.md,
    report.json and `inferscope run` put a simulated 5.81 ms first; report.html sorted every suggestion by its saving,
    so the rules' estimate for the same synchronisations (7.66 ms, against the 5.46 simulated) led it (the recorded
    sync_bound scenario, 2026-11-29)."""
    from pytest_inferscope.results import Suggestion

    r = gpu_result()
    r.analysis.suggestions = [
        Suggestion("Use lower precision", "simulated: GPU work 2x faster", 5.81, "whatif"),
        Suggestion("Remove per-step synchronisations", "simulated: stream synchronize removed", 5.46, "whatif"),
        Suggestion("Remove the synchronisations in sync_slow", "200 blocking calls per round", 7.66, "sync_stall"),
    ]
    md = render_report(r).split("## Suggestions", 1)[1]
    buf = io.BytesIO()
    write_html_report(r, None, buf)
    html = buf.getvalue().decode().split('<section id="suggestions">', 1)[1].split("</section>", 1)[0]
    order = [s.action for s in r.analysis.suggestions]
    assert sorted(order, key=md.index) == order
    assert sorted(order, key=html.index) == order
