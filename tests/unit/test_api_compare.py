"""`pytest_inferscope.compare(before, after)`: two results of `measure()` judged as `inferscope compare` judges two
reports, without writing them."""

from __future__ import annotations

import dataclasses
import pickle
import time

import pytest

import pytest_inferscope
from pytest_inferscope import compare, measure
from pytest_inferscope.results import LatencyStats, RegressionVerdict


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


@pytest.fixture(scope="module")
def fast_and_slow() -> tuple[object, object]:
    """A result of measure(), and the same with rounds three times as long (set, not slept: a loaded machine's
    sleeps would blur the two)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFERSCOPE_GPU", "off")
        fast = measure(sleeper, 0.001, rounds=8, warmup=1, cpu="off", name="predict")
    rounds = [2.0 + 0.01 * i for i in range(8)]
    fast = dataclasses.replace(fast, latency=LatencyStats.from_samples(rounds, fast.latency.warmup_ms))
    slow = dataclasses.replace(fast, latency=LatencyStats.from_samples([3 * x for x in rounds]))
    return fast, slow


def test_a_slower_result_is_a_regression_with_the_evidence(fast_and_slow: tuple[object, object]) -> None:
    # There was no way to compare two results but to write both as reports and run `inferscope compare A B`.
    fast, slow = fast_and_slow
    verdict = compare(fast, slow)
    assert isinstance(verdict, RegressionVerdict) and verdict.failed
    assert verdict.verdict == "regressed" and verdict.latency.ratio > 2
    assert verdict.message().startswith("Performance regression against baseline 'predict': ")
    assert repr(verdict).startswith("<RegressionVerdict 'predict': regressed, median ")
    assert compare(slow, fast).verdict == "improved"
    assert compare(fast, fast).verdict == "unchanged"


def test_compare_is_a_name_of_the_package_and_its_result_pickles(fast_and_slow: tuple[object, object]) -> None:
    assert pytest_inferscope.compare is compare and "compare" in pytest_inferscope.__all__
    again = pickle.loads(pickle.dumps(compare(*fast_and_slow)))
    assert again.verdict == "regressed"


def test_a_partial_result_is_not_compared(fast_and_slow: tuple[object, object]) -> None:
    fast, _ = fast_and_slow
    partial = pickle.loads(pickle.dumps(fast))
    partial.partial_reason = "ValueError: boom"
    verdict = compare(fast, partial)
    assert verdict.verdict == "inconclusive" and not verdict.failed
    assert verdict.reason == (
        "not compared: after raised (ValueError: boom), so its rounds are partial; a partial run is neither saved as a "
        "baseline nor compared."
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((1, 2), {}, TypeError, "compare(before=1): 1 is an int, not a result: give two results of measure(), "),
        (("r", "r"), {"max_regression": "x"}, TypeError, "compare(max_regression='x'): 'x' is not "),
        (("r", "r"), {"max_regression": -1}, ValueError, "compare(max_regression=-1): -1 is out of range"),
        (("r", "r"), {"alpha": 0.9}, ValueError, "compare(alpha=0.9): 0.9 is out of range"),
        (("r", "r"), {"alpha": "0.01"}, TypeError, "compare(alpha='0.01'): '0.01' is a string, not a number"),
    ],
)
def test_a_bad_argument_is_named(
    fast_and_slow: tuple[object, object], args: tuple[object, object], kwargs: dict[str, object], error: type,
    message: str
) -> None:  # fmt: skip
    given = tuple(fast_and_slow[0] if a == "r" else a for a in args)
    with pytest.raises(error) as info:
        compare(*given, **kwargs)
    assert str(info.value).startswith(message), str(info.value)
