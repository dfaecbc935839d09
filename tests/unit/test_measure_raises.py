"""`measure` and `measure_async` of a function that raises: the exception goes on to the caller, saying which call
raised and where the partial report is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_inferscope import measure, measure_async


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")
    monkeypatch.delenv("INFERSCOPE_REPORT", raising=False)


def flaky(at: int) -> object:
    calls: list[int] = []

    def predict() -> None:
        calls.append(1)
        if len(calls) == at:
            raise ValueError(f"call {at}")

    return predict


@pytest.mark.parametrize(
    ("at", "where"),
    [(1, "warm-up call 1 of 2"), (2, "warm-up call 2 of 2"), (5, "measured call 3 of 4 (after the 2 warm-up calls)")],
)
def test_the_exception_says_which_call_raised_and_where_the_partial_report_is(
    at: int, where: str, tmp_path: Path
) -> None:
    # It was the bare ValueError: nothing said that a partial report had been written, nor which call raised.
    with pytest.raises(ValueError, match=f"call {at}") as info:
        measure(flaky(at), rounds=4, warmup=2, cpu="off", name="predict", report_dir=tmp_path)
    (report,) = tmp_path.glob("*/report.md")
    assert info.value.__notes__ == [
        f"inferscope: measure('predict') stopped: fn raised in {where}; its partial report is {report}."
    ]


def test_without_a_report_folder_the_note_says_none_was_written() -> None:
    with pytest.raises(ValueError) as info:
        measure(flaky(1), rounds=2, warmup=0, cpu="off", name="predict")
    assert info.value.__notes__ == [
        "inferscope: measure('predict') stopped: fn raised in measured call 1 of 2; no report was written (give "
        "report_dir=, or set INFERSCOPE_REPORT, for a partial one)."
    ]


def test_measure_async_says_the_same() -> None:
    calls: list[int] = []

    async def predict() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("third call")

    with pytest.raises(ValueError, match="third call") as info:
        asyncio.run(measure_async(predict, rounds=4, warmup=1, cpu="off", name="predict"))
    assert info.value.__notes__[0].startswith(
        "inferscope: measure_async('predict') stopped: fn raised in measured call 2 of 4 (after the 1 warm-up call); "
    )


def test_a_keyboard_interrupt_goes_on_without_a_note_and_the_next_call_runs() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        measure(interrupted, rounds=2, warmup=0, cpu="off")
    assert not hasattr(info.value, "__notes__")
    assert measure(lambda: None, rounds=2, warmup=0).verdict == "pass"
