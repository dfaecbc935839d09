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
         "*, analysis *, writing reports *, loading the plugin * (once a process) (per test: \"added\" in index.json)"]
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
    assert added["load_ms"] > 0  # the session's first profiled test: choosing the backend, reading the machine
    parts = added["outside_rounds_ms"] + added["analysis_ms"] + added["load_ms"]
    assert added["added_ms"] == pytest.approx(parts, abs=0.003)
    # writing the report files comes after report.json: index.json has it
    later = entry["added"]
    assert later["reports_ms"] > 0
    assert later["added_ms"] == pytest.approx(added["added_ms"] + later["reports_ms"], abs=0.002)
    assert "- Added by the plugin: " in (folder / "report.md").read_text()
    assert '<li id="added">Added by the plugin: ' in (folder / "report.html").read_text()
    assert "the plugin added: " in (out / "index.md").read_text()
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").getroot().iter("property")}
    assert float(props["inferscope.added_ms"]) == pytest.approx(later["added_ms"], abs=0.002)
    # JUnit's added_ms is neither report.json's (before the files) nor, where the writer was waited for, index.json's:
    # the part that writing the report files took is said beside it, so the three can be told apart there.
    said = float(props["inferscope.added_reports_ms"])
    assert 0 < said <= later["reports_ms"]
    assert float(props["inferscope.added_ms"]) - said == pytest.approx(added["added_ms"], abs=0.003)


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
    assert 1 <= sum("load_ms" in t["added"] for t in tests) <= 2  # each worker's first test


def test_the_plugin_is_loaded_before_the_first_test_is_measured_and_charged_to_it(pytester: pytest.Pytester) -> None:
    # In a fresh process the plugin's pipeline is loaded before the first profiled test's collection starts (not
    # in its rounds, not unaccounted for in its post-processing), and only that test says what loading took.
    pytester.makepyfile(
        """
        import sys
        import pytest

        LOADED = ("pytest_inferscope.collectors", "pytest_inferscope.postprocess", "pytest_inferscope.reporters.folder")

        @pytest.mark.parametrize("n", range(2))
        @pytest.mark.inferscope(rounds=1, warmup=0)
        def test_loaded(n):
            assert all(m in sys.modules for m in LOADED), [m for m in LOADED if m not in sys.modules]
        """
    )
    result = pytester.runpytest_subprocess("--inferscope-report=out", "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    first, second = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert first["added"]["load_ms"] > 0 and "load_ms" not in second["added"]
    assert first["added"]["load_ms"] > first["added"]["analysis_ms"]  # imports, the backend, the machine's facts


def test_the_plugin_is_loaded_before_the_first_test_starts_outside_its_time(pytester: pytest.Pytester) -> None:
    # Loaded as the test loop starts, not in the first profiled test's call: pytest-timeout's window and the test's
    # duration are its own (a 0.6 s timeout on a 0.4 s test failed the first test only, as loading took 0.2-0.4 s).
    pytester.makepyfile(
        """
        import sys
        import pytest

        @pytest.fixture
        def loaded_at_setup():
            return {"pytest_inferscope.postprocess", "pytest_inferscope.reporters.folder"} <= set(sys.modules)

        def test_unprofiled_first(loaded_at_setup):
            assert loaded_at_setup

        @pytest.mark.inferscope(rounds=1, warmup=0)
        def test_profiled(loaded_at_setup):
            assert loaded_at_setup
        """
    )
    result = pytester.runpytest_subprocess("--inferscope-report=out", "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    (entry,) = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert entry["added"]["load_ms"] > 0  # still charged to the first profiled test


def test_the_machine_is_read_after_the_first_tests_body_as_before(pytester: pytest.Pytester) -> None:
    # Loading the plugin comes before the first test's collection; reading the environment still comes after its
    # body (what the body imported, torch's CUDA state, is the test's): a machine-info hook sees the body's doing.
    pytester.makeconftest(
        """
        SEEN = {"ran": False}

        def pytest_inferscope_machine_info(config):
            return {"body_ran_first": SEEN["ran"]}
        """
    )
    pytester.makepyfile(
        """
        import conftest
        import pytest

        @pytest.mark.inferscope(rounds=1, warmup=0)
        def test_first():
            conftest.SEEN["ran"] = True
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    (entry,) = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    report = json.loads((pytester.path / "out" / entry["slug"] / "report.json").read_text())
    assert report["environment"]["body_ran_first"] is True
    assert report["added"]["load_ms"] > 0  # the first reading of the machine is in it


def test_a_failure_to_load_ahead_of_the_first_test_leaves_the_test_to_run_and_be_reported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_inferscope import postprocess

    def fail(reports: bool) -> None:
        raise ImportError("no module named 'jinja2' (simulated)")

    monkeypatch.setattr(postprocess, "preload", fail)
    pytester.makepyfile(BODY)
    result = pytester.runpytest("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    (entry,) = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert entry["added"]["analysis_ms"] > 0 and {"json", "md", "html"} <= set(entry["files"])
    assert (pytester.path / "out" / entry["files"]["html"]).is_file()  # the templates loaded where they are used
