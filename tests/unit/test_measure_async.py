"""`measure_async`: an async function measured in the event loop that awaits it; `measure` refuses one."""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path

import pytest

from pytest_inferscope import measure, measure_async


async def serve(delay: float, spin: float) -> str:
    await asyncio.sleep(delay)
    t = time.perf_counter()
    while time.perf_counter() - t < spin:
        pass
    return "ok"


def test_each_call_is_awaited_in_the_rounds_in_the_callers_loop(tmp_path: Path) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def call() -> str:
        loops.append(asyncio.get_running_loop())
        return await serve(0.002, 0.003)

    async def main() -> tuple[object, asyncio.AbstractEventLoop]:
        return await measure_async(call, rounds=4, warmup=1, report_dir=tmp_path / "out"), asyncio.get_running_loop()

    result, loop = asyncio.run(main())
    assert len(loops) == 5 and all(x is loop for x in loops)  # 1 + 4 calls, each in the caller's loop
    assert len(result.latency.samples_ms) == 4 and min(result.latency.samples_ms) >= 4.5  # the await and the spin
    assert result.verdict == "pass" and result.nodeid.endswith("call")
    assert any((tmp_path / "out").glob("*/report.md"))


def test_a_call_that_raises_gives_a_partial_result_and_raises() -> None:
    calls = []

    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("third call")
        await asyncio.sleep(0.001)

    with pytest.raises(ValueError, match="third call"):
        asyncio.run(measure_async(flaky, rounds=4, warmup=1))
    assert len(calls) == 3


def test_measure_refuses_an_async_function_and_names_measure_async() -> None:
    with pytest.raises(TypeError, match=r"an async function.*await pytest_inferscope.measure_async\(fn, ...\)"):
        measure(serve, 0.001, 0.0, rounds=2, warmup=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_rounds": "lean"}, r"measure_async\(gpu_rounds='lean'\): 'lean' is not one of 'measured', 'trace'"),
        ({"trace_rounds": 0}, r"measure_async\(trace_rounds=0\): 0 is out of range: give an integer >= 1 and <= 1000"),
        ({"gpu_rounds": "trace", "trace_rounds": "all"}, r"measure_async\(gpu_rounds='trace', trace_rounds='all'\)"),
    ],
)
def test_measure_async_checks_its_round_options_as_measure_does_naming_itself(
    kwargs: dict[str, object], message: str
) -> None:
    async def call() -> None:
        return None

    with pytest.raises(ValueError, match=message):
        asyncio.run(measure_async(call, rounds=2, warmup=0, **kwargs))  # type: ignore[arg-type]


def test_measure_async_of_a_plain_function_says_to_pass_an_async_one_or_use_measure() -> None:
    with pytest.raises(
        TypeError,
        match=r"^measure_async\('sleep'\): its call returned NoneType, not something to await: "
        r"measure_async takes an async function .* pytest_inferscope.measure\(fn, ...\)",
    ) as info:
        asyncio.run(measure_async(time.sleep, 0.001, rounds=2, warmup=0))
    assert info.value.__context__ is None


def test_measure_of_a_function_returning_a_coroutine_closes_it_and_names_measure_async() -> None:
    made = []

    def call() -> object:
        made.append(serve(0.001, 0.0))
        return made[-1]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        with pytest.raises(TypeError, match=r"returned a coroutine.*await pytest_inferscope.measure_async\(fn, ...\)"):
            measure(call, rounds=2, warmup=1)
    assert len(made) == 1 and made[0].cr_frame is None  # closed
