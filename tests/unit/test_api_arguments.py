"""`measure`, `measure_async` and `profile` check their arguments as the marker does, before a round runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pytest_inferscope import measure, measure_async, profile
from pytest_inferscope.reporters.files import ReportDirError


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


BAD = [
    ({"rounds": 0}, ValueError, r"\(rounds=0\): 0 is out of range: give an integer >= 1 \(measured calls"),
    ({"rounds": -1}, ValueError, r"\(rounds=-1\): -1 is out of range: give an integer >= 1"),
    ({"rounds": 1.5}, TypeError, r"\(rounds=1.5\): 1.5 is not an integer >= 1"),
    ({"rounds": "3"}, TypeError, r"\(rounds='3'\): '3' is a string, not a number: write rounds=3, without quotes"),
    ({"rounds": None}, TypeError, r"\(rounds=None\): None is not an integer >= 1; leave rounds out"),
    ({"warmup": -1}, ValueError, r"\(warmup=-1\): -1 is out of range: give an integer >= 0"),
    ({"cpu": "bogus"}, ValueError, r"\(cpu='bogus'\): 'bogus' is not one of 'sample', 'trace', 'off'"),
    ({"trace_rounds": 1.5}, TypeError, r"\(trace_rounds=1.5\): 1.5 is not an integer >= 1 and <= 1000 or 'all'"),
    ({"gpu_rounds": "lean"}, ValueError, r"\(gpu_rounds='lean'\): 'lean' is not one of 'measured', 'trace', 'auto'"),
    (
        {"thresholds": {"max_latency": 5}},
        ValueError,
        r"\(thresholds=\{'max_latency': ...\}\): unknown threshold 'max_latency'; did you mean 'max_latency_ms'\? "
        r"valid keys: max_latency_ms, ",
    ),
    ({"thresholds": {"max_latency_ms": -1}}, ValueError, r"\{'max_latency_ms': -1\}\): -1 is out of range: give a"),
    ({"thresholds": {"max_latency_ms": "5"}}, TypeError, r"'5' is a string, not a number: write max_latency_ms=5.0"),
    ({"thresholds": {"max_latency_ms": "5%"}}, TypeError, r"\{'max_latency_ms': '5%'\}\): '5%' is not a number > 0"),
    ({"thresholds": {"expect_bottleneck": "gpubound"}}, ValueError, r"'gpubound' is not one of 'cpu_bound', "),
    ({"thresholds": {"rounds": 3}}, ValueError, r"'rounds' is not a threshold: give it as \w+'s own argument"),
    ({"thresholds": {"modules": 1}}, ValueError, r"'modules' is not a threshold: it is a setting of the marker"),
    ({"thresholds": [("max_latency_ms", 5)]}, TypeError, r"\(thresholds=\[.*\]\): give a dict of threshold keys"),
]


def named(caller: str, message: str) -> str:
    """The pattern of `message` in an error of `caller`: it starts `caller(`."""
    return rf"^{caller}\(" + (message.removeprefix(r"\(") if message.startswith(r"\(") else ".*" + message)


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_measure_refuses_a_bad_argument_before_any_call(kwargs: dict[str, Any], error: type, message: str) -> None:
    calls: list[int] = []
    with pytest.raises(error, match=named("measure", message)) as info:
        measure(lambda: calls.append(1), **kwargs)
    assert calls == [] and info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_measure_async_refuses_a_bad_argument_before_any_call(
    kwargs: dict[str, Any], error: type, message: str
) -> None:
    calls: list[int] = []

    async def call() -> None:
        calls.append(1)

    with pytest.raises(error, match=named("measure_async", message)):
        asyncio.run(measure_async(call, **kwargs))
    assert calls == []


@pytest.mark.parametrize(("kwargs", "error", "message"), [b for b in BAD if set(b[0]) <= {"cpu", "thresholds"}])
def test_profile_refuses_a_bad_argument_before_the_block(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=named("profile", message.replace(r"\w+'s", "profile's"))), profile("p", **kwargs):
        pytest.fail("the block ran")


def test_thresholds_take_what_the_marker_takes_typed_as_it_types_them() -> None:
    result = measure(lambda: None, rounds=2, warmup=0, cpu="off",
                     thresholds={"max_overhead": "50%", "max_latency_ms": 1000, "latency_stat": "p99"})  # fmt: skip
    checks = {c.key: c for c in result.checks}
    assert checks["max_overhead"].limit == 0.5 and checks["max_latency_ms"].message.startswith("max_latency_ms: p99")
    assert result.rounds == 2 and len(result.latency.samples_ms) == 2 and result.verdict == "pass"


def test_a_report_folder_that_is_a_file_is_said_as_the_api_takes_it(tmp_path: Path) -> None:
    # It said "or pass another folder with --inferscope-report=DIR", pytest's option, to a caller of measure().
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ReportDirError, match="pass another folder as report_dir=") as err:
        measure(lambda: None, rounds=1, warmup=0, report_dir=afile)
    assert "--inferscope-report" not in str(err.value)


def test_max_regression_is_refused_by_a_call_that_has_nothing_to_compare_with() -> None:
    # It was accepted, then "not evaluated" with advice to use --inferscope-compare=NAME, pytest's option.
    called = []
    with pytest.raises(ValueError, match=r"measure\(thresholds=\{'max_regression': \.\.\.\}\): a regression is judged"):
        measure(lambda: called.append(1), rounds=1, warmup=0, thresholds={"max_regression": 0.05})
    assert not called


def test_each_mark_says_the_round_it_was_made_in() -> None:
    # A test's marks come from every round it ran: 14 marks for 12 measured rounds read as a miscount without it.
    from pytest_inferscope import mark_event

    r = measure(lambda: mark_event("step", k=1), rounds=2, warmup=1)
    assert [(m["name"], m["round"]) for m in r.marks] == [
        ("step", "warmup 0"),
        ("step", "measured 1"),
        ("step", "measured 2"),
    ]
