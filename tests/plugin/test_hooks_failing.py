"""A third party's extension that fails (hooks.py, .inferscope_rules.yaml): the session goes on, the test's own
outcome stands, the reports are written, and one warning names the extension and what it did wrong."""

from __future__ import annotations

import json

import pytest

BODY = """
import pytest

@pytest.mark.inferscope(rounds=3, warmup=1{extra})
def test_body():
    sum(i * i for i in range(20000))
"""

ERROR = "error::pytest_inferscope.warning.InferscopeWarning"  # as -W error does (other plugins' warnings aside)

GOOD_RULE = """
from pytest_inferscope.results import Finding

def good_rule(ctx):
    return [Finding(rule="good", title="Good", summary="seen", cause=None, share=0.0, confidence=0.5)]
"""


def report(pytester: pytest.Pytester) -> dict[str, object]:
    (path,) = (pytester.path / "out").glob("*/report.json")
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("returns", "why"),
    [
        ("1 / 0", "raised ZeroDivisionError: division by zero"),
        ("'oops'", "returned 'oops' (a str), not a list of Finding"),
        ("[{'rule': 'x'}]", "returned [{'rule': 'x'}], whose item {'rule': 'x'} (a dict) is not a Finding"),
    ],
)
def test_a_hook_rule_that_fails_loses_only_its_findings_not_the_analysis_or_the_verdict(
    pytester: pytest.Pytester, returns: str, why: str
) -> None:
    pytester.makeconftest(
        GOOD_RULE
        + f"""
def broken_rule(ctx):
    return {returns}

def pytest_inferscope_rules(config):
    return [broken_rule, good_rule]
"""
    )
    # The threshold fails on any machine: the broken rule must not turn that failure into a pass.
    pytester.makepyfile(BODY.format(extra=", max_latency_ms=0.000001"))
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*max_latency_ms*"])
    text = result.stdout.str().replace("\n  ", " ")
    assert "inferscope: the rule 'broken_rule' (conftest.py:" in text and why in text, text
    assert "its findings are left out of test_a_hook_rule" in text
    r = report(pytester)
    assert "good" in [f["rule"] for f in r["analysis"]["findings"]]  # type: ignore[index]
    (error,) = r["analysis"]["extension_errors"]  # type: ignore[index]
    assert "broken_rule" in error and why in error


def test_a_collectors_hook_that_raises_is_a_warning_and_the_test_passes(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
class Energy:
    name = "energy"
    def start(self): pass
    def stop(self): return {"joules": 1.0}

def pytest_inferscope_collectors(config, item):
    raise RuntimeError("no power meter on this host")

def pytest_inferscope_result(config, result):
    config.stash_seen = getattr(config, "stash_seen", 0) + 1
"""
    )
    pytester.makepyfile(BODY.format(extra=""))
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(passed=1)
    text = result.stdout.str().replace("\n  ", " ")
    assert "inferscope: the pytest_inferscope_collectors hook (conftest.py:" in text, text
    assert "RuntimeError: no power meter on this host" in text
    assert report(pytester)["analysis"]  # analysed and written as usual


@pytest.mark.parametrize(
    ("returns", "why"),
    [
        ("open('/nonexistent/rack.txt').read()", "raised FileNotFoundError"),
        ("['rack']", "returned ['rack'] (a list), not a dict of facts"),
    ],
)
def test_a_machine_info_hook_that_fails_leaves_its_facts_out_and_every_test_analysed(
    pytester: pytest.Pytester, returns: str, why: str
) -> None:
    pytester.makeconftest(
        f"""
def pytest_inferscope_machine_info(config):
    return {returns}
"""
    )
    pytester.makepyfile(BODY.format(extra="") + BODY.format(extra="").replace("test_body", "test_other"))
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(passed=2)
    text = result.stdout.str().replace("\n  ", " ")
    assert "inferscope: the pytest_inferscope_machine_info hook" in text and why in text, text
    assert "raised" not in why or "hook (conftest.py:2) raised" in text  # where the implementation raised
    assert text.count("pytest_inferscope_machine_info hook") == 1  # said once, not per test
    assert len(list((pytester.path / "out").glob("*/report.json"))) == 2


def test_a_slow_collectors_time_is_said_apart_from_the_plugins_own(pytester: pytest.Pytester) -> None:
    """A collector that takes 0.3 s to start and to stop: its time is outside the measured rounds (the latency is the
    body's), and the plugin's added-time line says it apart, so the user looks at the collector, not the plugin."""
    pytester.makeconftest(
        """
import time

class Slow:
    name = "slow"
    def start(self): time.sleep(0.3)
    def stop(self):
        time.sleep(0.3)
        return {"n": 1}

def pytest_inferscope_collectors(config, item):
    return [Slow()]
"""
    )
    pytester.makepyfile(BODY.format(extra=""))
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(passed=1)
    r = report(pytester)
    added = r["added"]
    assert 600 <= added["collectors_ms"] <= added["outside_rounds_ms"], added  # type: ignore[index]
    assert max(r["latency"]["samples_ms"]) < 300  # type: ignore[index]
    result.stdout.fnmatch_lines(["*outside the rounds * (other plugins' collectors 6*)*"])


@pytest.mark.parametrize(
    ("conftest", "said"),
    [
        ("def broken(ctx):\n    return 1 / 0\n\ndef pytest_inferscope_rules(config):\n    return [broken]\n",
         "the rule 'broken' (conftest.py:1) raised ZeroDivisionError"),
        ("def pytest_inferscope_machine_info(config):\n    raise OSError('no rack file')\n",
         "the pytest_inferscope_machine_info hook (conftest.py:2) raised OSError: no rack file"),
        ("class C:\n    name = 'c'\n    def start(self):\n        raise OSError('no meter')\n    def stop(self):\n"
         "        return {}\n\ndef pytest_inferscope_collectors(config, item):\n    return [C()]\n",
         "the collector 'c' (from pytest_inferscope_collectors) failed to start"),
    ],
)  # fmt: skip
def test_under_w_error_a_broken_extension_fails_its_test_and_the_session_goes_on(
    pytester: pytest.Pytester, conftest: str, said: str
) -> None:
    """`-W error` (or `filterwarnings = error`) makes every warning an error; one said after the test's call (a
    rule's, the machine facts') raised into pytest's report hook and stopped the session with INTERNALERROR. Now the
    test fails on it, as on a warning its body raised, and the next test and the reports go on."""
    pytester.makeconftest(conftest)
    pytester.makepyfile(BODY.format(extra="") + BODY.format(extra="").replace("test_body", "test_other"))
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", ERROR)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    # The machine facts are read, and said, once a session: the first test fails on them.
    result.assert_outcomes(failed=1, passed=1) if "machine_info" in said else result.assert_outcomes(failed=2)
    assert said in result.stdout.str().replace("\n", " ")
    assert len(list((pytester.path / "out").glob("*/report.json"))) == 2


@pytest.mark.parametrize("hook", ["pytest_inferscope_rules", "pytest_inferscope_whatifs"])
def test_a_rules_or_whatifs_hook_that_raises_adds_nothing_and_the_analysis_goes_on(
    pytester: pytest.Pytester, hook: str
) -> None:
    pytester.makeconftest(f"def {hook}(config):\n    raise RuntimeError('no rules today')\n")
    pytester.makepyfile(BODY.format(extra=", max_latency_ms=0.000001"))  # fails on any machine
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*max_latency_ms*"])
    text = result.stdout.str().replace("\n  ", " ")
    assert f"inferscope: the {hook} hook (conftest.py:2) raised RuntimeError: no rules today" in text, text
    assert "could not analyse" not in text
    assert report(pytester)["analysis"]


def test_a_result_hook_that_raises_costs_neither_the_verdict_nor_the_index(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_inferscope_result(config, result):\n    raise RuntimeError('upload failed')\n")
    pytester.makepyfile(BODY.format(extra=", max_latency_ms=0.000001"))  # fails on any machine
    result = pytester.runpytest("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out", "-W", "default")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*max_latency_ms*"])
    text = result.stdout.str().replace("\n  ", " ")
    assert "inferscope: the pytest_inferscope_result hook (conftest.py:2) raised RuntimeError: upload failed" in text
    assert "could not analyse" not in text
    (entry,) = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert entry["nodeid"].endswith("::test_body")
