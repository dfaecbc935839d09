"""Trace rounds as a user sees them: the option and the marker key, validated; extra calls only with GPU collection."""

from __future__ import annotations

import json

import pytest

BODY = """
import pytest

CALLS = []

@pytest.mark.inferscope(rounds=3, warmup=1, cpu="off"{marker})
def test_body():
    CALLS.append(1)

def test_after():
    # warm-up + measured rounds, and the trace rounds when the GPU was collected
    assert len(CALLS) == {expected}, CALLS
"""

#: A GPU backend that collects nothing but can switch its launch-call records (collectors/gpu.py's protocol).
FAKE_GPU = """
import numpy as np, pytest
from pytest_inferscope.collectors.gpu import Choice
from pytest_inferscope.events import EVENT_DTYPE

class FakeGpu:
    name = "fake"
    bus_ids = []
    def start(self): pass
    def set_api_records(self, on): SWITCHED.append(on)
    def stop(self): pass
    def drain(self): return np.zeros(0, dtype=EVENT_DTYPE), []
    def dropped(self): return 0
    def timestamp(self): return 0
    def synchronize(self): return True
    def version(self): return "fake 1"

SWITCHED = []

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.pluginmanager.get_plugin("inferscope-session")._gpu = Choice(FakeGpu())
"""


def _report(pytester: pytest.Pytester) -> dict:
    (path,) = (pytester.path / "out").glob("*test_body*/report.json")
    return json.loads(path.read_text())


def test_without_gpu_collection_no_trace_round_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_t=BODY.format(marker="", expected=4))
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-gpu=off", "--inferscope-report=out")
    result.assert_outcomes(passed=2)
    lat = _report(pytester)["latency"]
    assert len(lat["samples_ms"]) == 3 and len(lat["warmup_ms"]) == 1 and lat["trace_ms"] == []


@pytest.mark.parametrize(
    ("args", "marker", "expected", "trace"),
    [
        ((), "", 5, 1),  # the default: one trace round
        (("--inferscope-trace-rounds=2",), "", 6, 2),
        (("--inferscope-trace-rounds=2",), ", trace_rounds=1", 5, 1),  # the marker wins
        (("--inferscope-trace-rounds=3",), ", trace_rounds='all'", 4, 0),  # launch calls in every round
    ],
)
def test_trace_rounds_follow_the_measured_rounds_with_gpu_collection(
    pytester: pytest.Pytester, args: tuple[str, ...], marker: str, expected: int, trace: int
) -> None:
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(test_t=BODY.format(marker=marker, expected=expected))
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-report=out", *args)
    result.assert_outcomes(passed=2)
    report = _report(pytester)
    lat = report["latency"]
    assert len(lat["samples_ms"]) == 3 and len(lat["warmup_ms"]) == 1 and len(lat["trace_ms"]) == trace
    gpu = next(c for c in report["collectors"] if c["name"] == "gpu")
    (md_path,) = (pytester.path / "out").glob("*test_body*/report.md")
    md = md_path.read_text()
    if trace:
        assert f"launch calls recorded only in the {trace} trace round" in gpu["mode"]
        assert "Trace rounds (ms, not counted" in md and f"only in {trace} trace round" in md
    else:
        assert "launch calls recorded in every round" in gpu["mode"] and "Trace rounds" not in md


def test_trace_rounds_in_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_GPU)
    pytester.makeini("[pytest]\ninferscope_trace_rounds = all\n")
    pytester.makepyfile(test_t=BODY.format(marker="", expected=4))
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


@pytest.mark.parametrize("value", ["0", "some", "1001", "1.5"])
def test_a_bad_trace_rounds_option_is_a_clear_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_t=BODY.format(marker="", expected=4))
    result = pytester.runpytest(f"--inferscope-trace-rounds={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--inferscope-trace-rounds=*{value}* give a number of trace rounds from 1 to 1000, or all*"]
    )


def test_a_bad_trace_rounds_marker_key_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_t=BODY.format(marker=", trace_rounds=0", expected=4))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_body*trace_rounds=...*0 is out of range: give an integer >= 1*or 'all'*"])


# --- GPU activity only in the trace rounds (--inferscope-gpu-rounds) -------------------------------------

#: The fake backend, counting its starts and stops: with gpu_rounds=trace it starts only for the trace rounds.
COUNTING_GPU = (
    FAKE_GPU.replace("    def start(self): pass\n", "    def start(self): EVENTS.append(('start', len(CALLS())))\n")
    .replace("    def stop(self): pass\n", "    def stop(self): EVENTS.append(('stop', len(CALLS())))\n")
    .replace(
        "SWITCHED = []\n", "SWITCHED = []\nEVENTS = []\n\ndef CALLS():\n    import test_t\n    return test_t.CALLS\n"
    )
)


#: BODY whose 6th call (the first profile round, after a warm-up, 3 measured and the settling round) runs 30 ms
#: against the others' 10 ms: a profile round out of step with the measured rounds (rounds.in_step); later calls
#: take no time.
SLOW_FIRST_PROFILE = BODY.replace(
    "    CALLS.append(1)\n",
    "    import time\n    CALLS.append(1)\n"
    "    time.sleep(0.03 if len(CALLS) == 6 else 0.01 if len(CALLS) < 6 else 0)\n",
)


@pytest.mark.parametrize(
    ("args", "marker", "expected", "profile", "trace"),
    [
        # warm-up + 3 measured rounds, then CUPTI starts: a settling round, the profile rounds (GPU activity
        # without the launch calls) and the trace rounds (the launch calls). Unless told how many, the profile
        # rounds end at the first in step with the measured rounds: here the second.
        (("--inferscope-gpu-rounds=trace",), "", 8, 2, 1),
        (("--inferscope-gpu-rounds=trace", "--inferscope-trace-rounds=2"), "", 9, 2, 2),  # told: 2, whatever ran
        ((), ", gpu_rounds='trace'", 8, 2, 1),  # the marker key
    ],
)
def test_gpu_rounds_trace_starts_the_gpu_collection_only_after_the_measured_rounds(
    pytester: pytest.Pytester, args: tuple[str, ...], marker: str, expected: int, profile: int, trace: int
) -> None:
    pytester.makeconftest(COUNTING_GPU)
    pytester.makepyfile(
        test_t=SLOW_FIRST_PROFILE.format(marker=marker, expected=expected)
        + "\ndef test_events(request):\n    import conftest\n    assert conftest.EVENTS == [('start', 4), ('stop', "
        + f"{expected})], conftest.EVENTS\n"
        + "    assert conftest.SWITCHED == [False, True, False], conftest.SWITCHED\n"
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-report=out", *args)
    result.assert_outcomes(passed=3)
    report = _report(pytester)
    assert len(report["latency"]["samples_ms"]) == 3 and len(report["latency"]["trace_ms"]) == profile + trace
    assert len(report["latency"]["warmup_ms"]) == 1  # the settling round is no warm-up round either
    gpu = next(c for c in report["collectors"] if c["name"] == "gpu")
    told = f"{profile} profile rounds" if "--inferscope-trace-rounds=2" in args else "the profile rounds (up to 3, "
    assert f"GPU activity recorded only after the measured rounds, in {told}" in gpu["mode"]


@pytest.mark.parametrize(
    ("args", "events"),
    [
        # auto, the default: this backend records nothing and cannot flush, so it is stopped after the warm-up
        # to count its records, and started again for the measured rounds (none recorded: measured)
        ((), [("start", 0), ("stop", 1), ("start", 1), ("stop", 5)]),
        (("--inferscope-gpu-rounds=measured",), [("start", 0), ("stop", 5)]),
    ],
)
def test_gpu_rounds_auto_is_the_default_and_measured_starts_the_gpu_collection_first(
    pytester: pytest.Pytester, args: tuple[str, ...], events: list[tuple[str, int]]
) -> None:
    pytester.makeconftest(COUNTING_GPU)
    pytester.makepyfile(
        test_t=BODY.format(marker="", expected=5)
        + f"\ndef test_events(request):\n    import conftest\n    assert conftest.EVENTS == {events!r}"
        + ", conftest.EVENTS\n"
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-report=out", *args)
    result.assert_outcomes(passed=3)
    gpu = next(c for c in _report(pytester)["collectors"] if c["name"] == "gpu")
    assert ("GPU activity recorded in the measured rounds" in gpu["mode"]) == (not args)


def test_a_bad_gpu_rounds_option_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_t=BODY.format(marker="", expected=4))
    result = pytester.runpytest("--inferscope-gpu-rounds=lean")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--inferscope-gpu-rounds*lean*measured*trace*auto*"])


def test_gpu_rounds_trace_with_all_trace_rounds_is_one_error_naming_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_t=BODY.format(marker="", expected=4))
    result = pytester.runpytest("--inferscope-gpu-rounds=trace", "--inferscope-trace-rounds=all")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--inferscope-trace-rounds*--inferscope-gpu-rounds*runs none*Give trace_rounds a*"])
    pytester.makepyfile(test_t=BODY.format(marker=", gpu_rounds='trace', trace_rounds='all'", expected=4))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_body*gpu_rounds*trace_rounds*"])
