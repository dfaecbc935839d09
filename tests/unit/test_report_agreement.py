"""What a test's report says agrees with itself and with the session's other outputs (terminal, index, JUnit)."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

from test_reporters import gpu_result

from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.jsonreport import load_report, to_json
from pytest_inferscope.reporters.junit import junit_properties
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import CheckResult, LatencyStats, TestResult


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


def test_a_suggestion_without_an_estimated_saving_says_so_not_that_it_saves_nothing() -> None:
    # autograd_recording's (its time is native code, not measured apart) and a custom rule's without saving_ms: both 0,
    # which read "saves ~0 ms per round" everywhere.
    from pytest_inferscope.results import Suggestion

    r = gpu_result()
    unknown = Suggestion("Call the model under torch.inference_mode()", "autograd saved 12 tensors", 0.0, "autograd")
    r.analysis.findings[0].suggestions.append(unknown)
    r.analysis.suggestions = [unknown, *r.analysis.suggestions]
    md = render_report(r)
    assert "(saving not estimated). autograd saved 12 tensors" in md  # the finding's
    assert "1. **Call the model under torch.inference_mode()** — saving not estimated (`autograd`)" in md
    assert "saves ~0 ms" not in md and "~0 ms" not in _html(r) and "not estimated" in _html(r)
    assert repr(r.analysis).endswith("(saving not estimated)>") and unknown.saves == "saving not estimated"
    assert r.analysis.suggestions[1].saves == "saves ~9.20 ms per round"


def test_a_finding_whose_time_is_not_measured_apart_says_so_not_that_it_explains_none_of_it() -> None:
    # autograd_recording's share is 0 because its time (native code) is not measured apart; the reports read
    # "explains 0.0% of the measured time", as if autograd cost nothing.
    from pytest_inferscope.results import Finding

    r = gpu_result()
    info = Finding("autograd_recording", "Autograd records the inference", "12 nodes a call.", None, 0.0, 0.9,
                   share_measured=False)  # fmt: skip
    r.analysis.findings.append(info)
    md, page = render_report(r), _html(r)
    assert "Supports: information only · time not measured apart · confidence 90% · rule `autograd_recording`" in md
    assert "Supports: information only · time not measured apart · confidence 90%" in page
    assert "explains 0.0%" not in md and "explains 0.0%" not in page
    assert "explains 21.0% of the measured time" in md  # a finding that measured its share still says it
    assert repr(info).endswith("(time not measured apart)>") and info.explains == "time not measured apart"
    assert load_report_text(to_json(r)).analysis.findings[-1].share_measured is False


def test_a_report_json_written_before_share_measured_is_read(tmp_path: Path) -> None:
    """A report.json written before 2026-11-30 has no share_measured in its findings: it loads, a finding with a share
    reads as measured, one with none as not measured apart (what a rule with no time to say wrote), and one whose
    share was NaN (written null) too, rather than failing the findings' order."""
    from pytest_inferscope.results import Finding

    r = gpu_result()
    r.analysis.findings.append(Finding("my_rule", "Said without time", "s", "memory_bound", 0.0, 0.9))
    data = json.loads(to_json(r))
    for f in data["analysis"]["findings"]:
        del f["share_measured"]
    data["analysis"]["findings"].append({**data["analysis"]["findings"][-1], "rule": "nan_rule", "share": None})
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    loaded = {f.rule: f for f in load_report(path).analysis.findings}
    assert loaded["my_rule"].share_measured is False and loaded["my_rule"].explains == "time not measured apart"
    assert (loaded["nan_rule"].share, loaded["nan_rule"].share_measured) == (0.0, False)
    measured = [f for f in loaded.values() if f.share > 0]
    assert measured and all(f.share_measured is True for f in measured)


def load_report_text(text: str) -> TestResult:
    from pytest_inferscope.reporters.jsonreport import result_from_dict

    return result_from_dict(json.loads(text), "report.json")


def test_every_index_says_the_comparison_with_the_baseline(tmp_path: Path) -> None:
    from pytest_inferscope.comparison import Comparison
    from pytest_inferscope.reporters import write_index
    from pytest_inferscope.results import RegressionVerdict

    compared, alone = gpu_result("t.py::test_compared"), gpu_result("t.py::test_alone")
    c = Comparison("regressed", 1.283, 1.2, 1.4, 0.001, "", 1.069, 1.372, 12, 12)
    compared.regression = RegressionVerdict(compared.nodeid, "regressed", "", c, baseline_name="main")
    compared.added = {"extra_rounds": 0.0, "added_ms": 1.5}  # as a result read back by an older version holds it
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


def test_a_failed_checks_milliseconds_read_as_the_summary_and_the_report_write_them(tmp_path: Path) -> None:
    """The message pytest shows for a crossed threshold said `median latency 12.092 ms exceeds limit 1.000 ms`
    beside the summary's and report.md's 12.1 (the 2-core dev VM, 2026-11-30): one formatter now (`fmt_ms`)."""
    from test_checks import _analysis

    from pytest_inferscope.checks import evaluate
    from pytest_inferscope.reporters.fmt import fmt_ms
    from pytest_inferscope.results import LatencyStats

    lat = LatencyStats.from_samples([12.092, 12.098, 12.099, 12.071, 12.085])
    (check,) = evaluate({"max_latency_ms": 1}, _analysis(), lat, gpu_collected=False)
    assert fmt_ms(lat.median) == "12.1"
    assert f"median latency {fmt_ms(lat.median)} ms exceeds limit 1.00 ms" in check.message, check.message
    assert f"median {fmt_ms(lat.median)} ms, p90 {fmt_ms(lat.p90)} ms, max {fmt_ms(lat.max)} ms" in check.message
    r = gpu_result()
    r.latency, r.checks = lat, [check]
    assert f"End-to-end latency: {fmt_ms(lat.median)} ms" in render_report(r)


def test_a_value_beside_its_limit_keeps_the_digits_that_tell_them_apart() -> None:
    """Three significant digits would write 12.34 against a limit of 12.3 as "12.3 ms exceeds limit 12.3 ms"."""
    from test_checks import _analysis

    from pytest_inferscope.checks import evaluate
    from pytest_inferscope.reporters.fmt import fmt_ms

    lat = LatencyStats.from_samples([12.34, 12.34, 12.35])
    (check,) = evaluate({"max_latency_ms": 12.3}, _analysis(), lat, gpu_collected=False)
    assert "median latency 12.34 ms exceeds limit 12.30 ms" in check.message, check.message
    assert (fmt_ms(1.055, beside=1.0549), fmt_ms(1.0549, beside=1.055)) == ("1.0550", "1.0549")
    assert fmt_ms(12.1, beside=50.0) == "12.1"  # apart already: as alone


def test_a_regressions_medians_read_as_the_report_writes_them() -> None:
    """The regression message wrote four significant digits (`median 1.055 → 0.748 ms`), report.md's table three."""
    from pytest_inferscope.comparison import Comparison
    from pytest_inferscope.reporters.fmt import fmt_ms
    from pytest_inferscope.results import RegressionVerdict
    from pytest_inferscope.stats import compare_samples

    c = compare_samples(
        [1.055 + i * 1e-4 for i in range(12)], [1.372 + i * 1e-4 for i in range(12)], max_regression=0.05
    )
    before, after = fmt_ms(c.base_median), fmt_ms(c.new_median)
    assert (before, after) == ("1.06", "1.37") and f"median {before} → {after} ms" in c.reason, c.reason
    r = gpu_result()
    r.regression = RegressionVerdict(r.nodeid, "regressed", c.reason, c, baseline_name="main")
    msg = r.regression.message()
    assert f"median {before} ms (12 rounds) → {after} ms (12 rounds)" in msg, msg
    md = render_report(r)
    assert f"| median latency | {before} ms (12 rounds) | {after} ms (12 rounds) |" in md
    assert isinstance(c, Comparison)


def test_a_part_not_collected_has_one_parenthesis() -> None:
    import inspect

    import pytest_inferscope.analyzer.context_cpu as context_cpu  # the CPU view, whose parts say why not collected

    # The reason is shown inside the breakdown's "not collected (...)"
    assert "no CPU stack samples: sampling off or rounds too short" in inspect.getsource(context_cpu)
    assert "(sampling off" not in inspect.getsource(context_cpu)


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


def test_report_md_and_html_give_the_host_memory_peak_and_what_was_there_before_the_rounds() -> None:
    # The 2-core VM, 2026-11-30: report.md of a body keeping 10 MB every call said its growth only in the memory
    # finding, and its peak RSS nowhere (report.json's metrics only), nor of a body within its memory.
    r = gpu_result()
    r.analysis.metrics.update(
        {
            "mem.rss_peak_mb": 443.8,
            "mem.rss_start_mb": 340.5,
            "mem.rss_peak_sampled": 0.0,
            "mem.rss_growth_mb": 80.0,
            "mem.minor_faults_per_round": 2561.0,
        }
    )
    said = (
        "Host memory: peak RSS 443.8 MB (whole process; kernel's exact peak) = 340.5 MB before the rounds + 103.3 MB; "
        "grew 80.0 MB over the measured rounds; 2,561 page faults a round."
    )
    assert said in render_report(r) and said in html.unescape(_html(r))
    r.analysis.metrics["mem.rss_peak_sampled"] = 1.0
    assert (
        "peak RSS 443.8 MB (whole process; sampled every 10 ms at most: a shorter spike may be missed)"
        in render_report(r)
    )
    r.analysis.metrics["mem.rss_peak_sampled"] = 2.0  # no sampler (--inferscope-cpu=off) and no VmHWM
    assert (
        "443.8 MB (whole process; read at the rounds' start and end only: a peak inside them is missed)"
        in render_report(r)
    )
    quiet = {
        "mem.rss_peak_mb": 62.1,
        "mem.rss_start_mb": 61.9,
        "mem.rss_growth_mb": 0.0,
        "mem.minor_faults_per_round": 3,
    }
    r.analysis.metrics.update(quiet)  # a trivial test's: the rounds took no memory to speak of, and its files are small
    assert "Host memory" not in render_report(r) and "Host memory" not in _html(r)
    r.analysis.metrics = {k: v for k, v in r.analysis.metrics.items() if not k.startswith("mem.")}
    assert "Host memory" not in render_report(r) and "Host memory" not in _html(r)


def test_the_checks_table_writes_each_value_as_the_failure_message_does() -> None:
    """report.md's and report.html's Checks table wrote Measured and Limit to 4 significant digits (`12.09`, and
    `0.3` for a GPU idle limit of 30%) beside the message's `12.1 ms exceeds limit 10.0 ms`: one formatter per unit
    now (units.fmt_threshold), the unit in the cell."""
    from test_checks import _analysis

    from pytest_inferscope.checks import evaluate

    lat = LatencyStats.from_samples([12.092, 12.098, 12.099, 12.071, 12.085])
    metrics = {"gpu.idle_fraction": 0.4213, "mem.rss_peak_mb": 447.23, "gpu.kernel_launches_per_round": 1204.0}
    limits = {"max_latency_ms": 10, "max_gpu_idle": 0.3, "max_host_memory_mb": 200, "max_kernel_launches": 1000}
    checks = evaluate(limits, _analysis(**metrics), lat, gpu_collected=True)
    r = gpu_result()
    r.latency, r.checks = lat, checks
    buf = io.BytesIO()
    write_html_report(r, None, buf)
    md, page = render_report(r), html.unescape(buf.getvalue().decode())
    for key, limit, measured, said in [
        ("max_latency_ms", "10.0 ms", "12.1 ms", "12.1 ms exceeds limit 10.0 ms"),
        ("max_gpu_idle", "30.0%", "42.1%", "42.1% exceeds limit 30.0%"),
        ("max_host_memory_mb", "200.0 MB", "447.2 MB", "447.2 MB exceeds limit 200.0 MB"),
        ("max_kernel_launches", "1,000", "1,204", "1,204 exceeds limit 1,000"),
    ]:
        assert said in next(c.message for c in checks if c.key == key)
        assert f"| {key} | {limit} | {measured} | **FAILED** |" in md, md.split("## Checks")[-1][:600]
        assert f"<td>{key}</td><td>{limit}</td><td>{measured}</td><td>FAILED</td>" in page
    # a regression's ratio as the median's change its limit allows (it read 1.98 against 0.1)
    r.checks = [CheckResult("max_regression", "failed", 0.1, 1.98, "max_regression: Performance regression ...")]
    assert "| max_regression | 10.0% | +98.0% | **FAILED** |" in render_report(r)
