"""`measure` of a generator function: its calls make generators and run none of its body, so it is refused."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pytest_inferscope import measure


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


def stream(ran: list[int], n: int) -> Iterator[int]:
    for i in range(n):
        ran.append(i)
        yield i


@pytest.mark.parametrize("partial", [False, True])
def test_measure_refuses_a_generator_function_before_any_call(partial: bool, tmp_path: Path) -> None:
    # It passed with rounds of ~1 µs, the time to make a generator: the body, never iterated, ran in no round.
    ran: list[int] = []
    fn = functools.partial(stream, ran) if partial else stream
    args = (3,) if partial else (ran, 3)
    with pytest.raises(TypeError) as info:
        measure(fn, *args, rounds=2, warmup=0, report_dir=tmp_path)
    assert str(info.value) == (
        "measure('stream'): a generator function, whose calls only make generators and run none of its body: the "
        "rounds would time nothing. Measure what consumes it, e.g. measure(lambda: list(stream(...)))."
    )
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_a_function_that_returns_a_generator_is_measured() -> None:
    # Its call may do the work and hand back a lazy view of it: not refused (only a generator function's calls run
    # none of its body).
    data = list(range(10_000))

    def rows() -> Iterator[int]:
        total = sum(data)
        return (x + total for x in data)

    assert measure(rows, rounds=2, warmup=0, cpu="off").verdict == "pass"


async def astream(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


def test_measure_refuses_an_async_generator_function_too() -> None:
    # It passed, timing the making of async generators.
    with pytest.raises(TypeError) as info:
        measure(astream, 3, rounds=2, warmup=0)
    assert str(info.value).startswith(
        "measure('astream'): an async generator function, whose calls only make async generators and run none of its "
        "body: the rounds would time nothing. Measure what consumes it, e.g. "
    )
