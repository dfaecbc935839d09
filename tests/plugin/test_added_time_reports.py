"""What the plugin added to each test's time: report.json, report.md, report.html, index.json, JUnit, the summary."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

BODY = """
import pytest

@pytest.mark.inferscope(rounds=4, warmup=2)
def test_work():
    sum(i * i for i in range(20000))
"""


def test_each_report_says_what_the_plugin_added_and_the_summary_sums_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BODY)
    result = pytester.runpytest("--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["inferscope: the plugin added * to the 1 profiled test (* the * of the calls asked for): outside the rounds "
         "*, analysis *, writing reports * (per test: `added` in index.json)"]
    )  # fmt: skip
    out = pytester.path / "out"
    (entry,) = json.loads((out / "index.json").read_text())["tests"]
    folder = out / entry["slug"]
    report = json.loads((folder / "report.json").read_text())
    added, lat = report["added"], report["latency"]
    # the calls asked for are the 2 warm-up and 4 measured rounds the report times
    assert added["asked_ms"] == pytest.approx(sum(lat["samples_ms"]) + sum(lat["warmup_ms"]), abs=0.01)
    assert added["extra_rounds"] == 0 and added["extra_rounds_ms"] == 0
    assert added["outside_rounds_ms"] > 0 and added["analysis_ms"] > 0 and "reports_ms" not in added
    assert added["added_ms"] == pytest.approx(added["outside_rounds_ms"] + added["analysis_ms"], abs=0.002)
    # writing the report files comes after report.json: index.json has it
    later = entry["added"]
    assert later["reports_ms"] > 0
    assert later["added_ms"] == pytest.approx(added["added_ms"] + later["reports_ms"], abs=0.002)
    assert "- Added by the plugin: " in (folder / "report.md").read_text()
    assert '<li id="added">Added by the plugin: ' in (folder / "report.html").read_text()
    assert "the plugin added: " in (out / "index.md").read_text()
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").getroot().iter("property")}
    assert float(props["inferscope.added_ms"]) == pytest.approx(later["added_ms"], abs=0.002)


def test_xdist_workers_results_carry_what_was_added_to_the_controllers_summary(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(3))
        @pytest.mark.inferscope(rounds=2, warmup=1)
        def test_param(n):
            sum(range(10000 * (n + 1)))
        """
    )
    result = pytester.runpytest("-n", "2", "--inferscope-report=out")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["inferscope: the plugin added * to the 3 profiled tests (*"])
    tests = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert len(tests) == 3 and all(t["added"]["analysis_ms"] > 0 and t["added"]["reports_ms"] > 0 for t in tests)
