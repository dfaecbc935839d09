"""A profiled test's outcome as pytest's own marks and exceptions make it: xfail and unittest's expectedFailure
beside crossed thresholds, a body raising SystemExit, the failure's line with --tb=line."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

XFAIL_THRESHOLDS = """
import unittest
import pytest

CROSSED = pytest.mark.inferscope(rounds=3, warmup=1, max_latency_ms=1e-9)

@pytest.mark.xfail(reason="known regression")
@CROSSED
def test_xfail_crossed():
    pass

@pytest.mark.xfail(strict=True, reason="known regression")
@CROSSED
def test_strict_crossed():
    pass

@pytest.mark.xfail(strict=True, reason="fixed yet?")
@pytest.mark.inferscope(rounds=3, warmup=1, max_latency_ms=60000)
def test_strict_within():
    pass

@pytest.mark.xfail(raises=ValueError)
@CROSSED
def test_xfail_raises_crossed():
    pass

class T(unittest.TestCase):
    @unittest.expectedFailure
    @CROSSED
    def test_expected_failure_crossed(self):
        pass
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_crossed_thresholds_in_an_xfail_marked_test_are_its_expected_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """A known performance regression is marked xfail: terminal, JUnit XML and the exit status agree that it is one."""
    monkeypatch.setenv("COLUMNS", "200")  # the short summary's reasons whole
    pytester.makepyfile(test_x=XFAIL_THRESHOLDS)
    result = pytester.runpytest(*xdist, "-rxXf", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(xfailed=3, failed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random(
        [
            "XFAIL *::test_xfail_crossed - known regression",
            "XFAIL *::test_strict_crossed - known regression",
            "XFAIL *::T::test_expected_failure_crossed - inferscope: max_latency_ms: median * ms > * ms",
            "FAILED *::test_strict_within*",  # the body passed, no threshold crossed: pytest's XPASS(strict)
            "FAILED *::test_xfail_raises_crossed - inferscope: max_latency_ms: median * ms > * ms",  # raises=ValueError
        ]
    )
    assert "[XPASS(strict)] fixed yet?" in result.stdout.str() and "Unexpected success" not in result.stdout.str()
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    for name in ("test_xfail_crossed", "test_strict_crossed", "test_expected_failure_crossed"):
        (skipped,) = cases[name].iter("skipped")
        assert skipped.get("type") == "pytest.xfail" and not list(cases[name].iter("failure"))
        props = {p.get("name"): p.get("value") for p in cases[name].iter("property")}
        assert props["inferscope.verdict"] == "fail"  # profiled, its thresholds crossed
    (failure,) = cases["test_xfail_raises_crossed"].iter("failure")
    assert failure.get("message", "").startswith("inferscope: max_latency_ms: median ")
    assert not list(cases["test_xfail_raises_crossed"].iter("skipped"))  # no "passes unexpectedly" beside it


def test_an_xfail_marked_test_whose_body_raises_gets_its_partial_report(pytester: pytest.Pytester) -> None:
    """pytest makes the report of an xfail that raised a skipped one (XFAIL): it was still profiled, and partial."""
    pytester.makepyfile(
        test_xf="""
        import pytest

        @pytest.mark.xfail(reason="known")
        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_xf_raises():
            assert 0
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*test_xf.py::test_xf_raises*partial*"])
    (case,) = ET.parse(pytester.path / "junit.xml").iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["inferscope.verdict"] == "partial" and list(case.iter("skipped"))
    assert [p.name for p in (pytester.path / "out").iterdir() if p.name.startswith("test_xf.py__")]


def test_a_body_raising_systemexit_fails_with_a_partial_report_and_pytest_exit_still_stops(
    pytester: pytest.Pytester,
) -> None:
    """pytest reports SystemExit (sys.exit(), argparse's error) as the test's failure and goes on: the test gets its
    partial result as for any exception. `pytest.exit()` stops the session: no report for the test that called it."""
    pytester.makepyfile(
        test_se="""
        import argparse
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_argparse_error():
            parser = argparse.ArgumentParser()
            parser.add_argument("--n", type=int, required=True)
            parser.parse_args([])

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_after():
            pass
        """
    )
    result = pytester.runpytest("test_se.py", "--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*test_se.py::test_argparse_error*none*partial*"])
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_argparse_error"].iter("property")}
    assert props["inferscope.verdict"] == "partial" and props["inferscope.report"]
    assert len([p for p in (pytester.path / "out").iterdir() if p.name.startswith("test_se.py__")]) == 2

    pytester.makepyfile(
        test_exit="""
        import pytest

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_exit():
            pytest.exit("bye", returncode=7)

        def test_never():
            pass
        """
    )
    stopped = pytester.runpytest("test_exit.py", "-p", "no:randomly")
    assert stopped.ret == 7 and "test_never" not in stopped.stdout.str()


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_tb_line_gives_a_threshold_failure_one_line_at_the_test(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """--tb=line reads a failure's `reprcrash` (of a text longrepr, its first 50 characters, cut mid-message)."""
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1, max_latency_ms=1e-9)
        def test_crossed():
            pass
        """
    )
    result = pytester.runpytest(*xdist, "--tb=line", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    lines = result.stdout.lines
    said = "test_x.py:3: inferscope: max_latency_ms: median "  # the test (its decorator) line
    assert any(x.startswith(said) and x.endswith(" ms") for x in lines), lines
    assert "max_latency_ms:" not in lines


def test_a_body_that_raises_after_its_first_call_is_told_it_ran_in_rounds_on_the_same_fixtures(
    pytester: pytest.Pytester,
) -> None:
    """A test that passes alone can fail from its second call once marked (a file it wrote in `tmp_path` is there,
    `monkeypatch`'s change is made): pytest's failure showed the assertion alone, so the user saw a test that passes
    without the marker fail with nothing saying the body had run before. Now the failure says which round and call
    raised, that the calls before completed, and why a body can fail there. A body that raises in its first call is
    told nothing more: the rounds are not what broke it."""
    pytester.makepyfile(
        test_st="""
        import unittest
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_writes(tmp_path):
            target = tmp_path / "out.txt"
            assert not target.exists()
            target.write_text("x")

        CALLS = []

        @pytest.mark.inferscope(rounds=4, warmup=2)
        def test_third_measured(monkeypatch):
            CALLS.append(1)
            assert len(CALLS) != 5

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_first_call():
            assert 0, "at once"

        class TestCase(unittest.TestCase):
            def setUp(self):
                self.items = []

            @pytest.mark.inferscope(rounds=3, warmup=0)
            def test_fills(self):
                self.items.append(1)
                self.assertEqual(len(self.items), 1)
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*_ test_writes _*",
            "*- inferscope rounds -*",
            "*test_st.py::test_writes raised in measured round 1 of 3, the body's call 2 (1 warm-up call before the "
            "measured rounds); the call before it completed.*same fixture values*tmp_path*monkeypatch*rounds=1, "
            "warmup=0*",
            "*_ test_third_measured _*",
            "*- inferscope rounds -*",
            "*test_st.py::test_third_measured raised in measured round 3 of 4, the body's call 5 (2 warm-up calls "
            "before the measured rounds); the 4 calls before it completed.*",
            "*_ TestCase.test_fills _*",
            "*- inferscope rounds -*",
            "*test_st.py::TestCase::test_fills raised in measured round 2 of 3, the body's call 2; the call before it "
            "completed.*(setup_method and a TestCase's setUp too)*",
        ]
    )
    first = out[out.index("_ test_first_call _") : out.index("_ TestCase.test_fills _")]
    assert "inferscope rounds" not in first and "at once" in first


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_rounds_section_reaches_junit_xml_with_the_failure(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """The `inferscope rounds` section was a report section, which JUnit XML does not write (nor the terminal under
    --show-capture=no): a CI user reading the failure in Jenkins or GitLab saw the assertion of a test that passes
    unmarked, and nothing of the rounds; nor the thresholds a test that failed on its own crossed too. They are now
    sections of the failure's own text, wherever that goes."""
    pytester.makepyfile(
        test_st="""
        import time
        import unittest
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_writes(tmp_path):
            target = tmp_path / "out.txt"
            assert not target.exists()
            target.write_text("x")

        CALLS = []

        @pytest.mark.inferscope(rounds=3, warmup=0, max_latency_ms=1)
        def test_slow_then_raises():
            CALLS.append(1)
            time.sleep(0.005)
            assert len(CALLS) < 3

        class TestCase(unittest.TestCase):
            def setUp(self):
                self.items = []

            @pytest.mark.inferscope(rounds=3, warmup=0)
            def test_fills(self):
                self.items.append(1)
                self.assertEqual(len(self.items), 1)
        """
    )
    result = pytester.runpytest(*xdist, "--junitxml=junit.xml", "--show-capture=no", "-p", "no:randomly")
    result.assert_outcomes(failed=3)
    assert result.stdout.str().count("- inferscope rounds -") == 3, result.stdout.str()
    failures = {c.get("name"): c.find("failure") for c in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    for name, said in [
        ("test_writes", "test_st.py::test_writes raised in measured round 1 of 3, the body's call 2"),
        ("test_fills", "test_st.py::TestCase::test_fills raised in measured round 2 of 3, the body's call 2"),
    ]:
        text = failures[name].text or ""  # type: ignore[union-attr]
        assert "inferscope rounds" in text and said in text and "same fixture values" in text, text
        assert text.index("Error") < text.index("inferscope rounds")  # after pytest's own failure
        assert "inferscope" not in failures[name].get("message", "")  # type: ignore[union-attr]  # the test's own
    text = failures["test_slow_then_raises"].text or ""  # type: ignore[union-attr]
    assert "- inferscope thresholds -" in text and "max_latency_ms: median latency" in text, text


def test_an_xfail_marker_without_a_reason_gives_the_crossed_threshold_as_the_xfails_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`@pytest.mark.xfail(strict=True)` with no reason around a crossed threshold read `XFAIL test_x.py::test_slow` in
    the short summary and an empty message in JUnit: nothing said the thresholds were the expected failure (the
    section saying so is not shown for an XFAIL). The reason is now the failure's first line, as for a unittest
    expectedFailure method; a marker's own reason stays."""
    monkeypatch.setenv("COLUMNS", "200")
    pytester.makepyfile(
        test_x="""
        import pytest

        @pytest.mark.xfail(strict=True)
        @pytest.mark.inferscope(rounds=3, warmup=1, max_latency_ms=1e-9)
        def test_slow():
            pass
        """
    )
    result = pytester.runpytest("-rxX", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["XFAIL test_x.py::test_slow - inferscope: max_latency_ms: median * ms > * ms"])
    (skipped,) = ET.parse(pytester.path / "junit.xml").iter("skipped")
    assert "inferscope: max_latency_ms: median " in skipped.get("message", "")
