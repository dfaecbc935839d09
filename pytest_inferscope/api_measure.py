"""`measure(fn, ...)` and `await measure_async(fn, ...)`: a function called in rounds under collection, its
arguments checked before any call, and the analysed result returned (the rest of the public API is in api.py)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .api import Profile, collecting, standalone_settings
from .arguments import (
    MEASURE_ROUNDS,
    MEASURE_WARMUP,
    NOT_TIMED,
    binding_error,
    callable_name,
    check_callable,
    check_name,
    check_passed_on,
    check_report_dir_argument,
    check_rounds,
    check_thresholds,
    not_timed,
    round_options,
)
from .collectors import Collection
from .results import TestResult
from .rounds import RoundKind

__all__ = ["measure", "measure_async"]


def measure(
    fn: Callable[..., Any],
    *args: Any,
    rounds: int = MEASURE_ROUNDS,
    warmup: int = MEASURE_WARMUP,
    name: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    cpu: str | None = None,
    trace_rounds: int | str | None = None,
    gpu_rounds: str | None = None,
    **kwargs: Any,
) -> TestResult:
    """Call `fn(*args, **kwargs)` warmup + rounds times under collection and return the analysed result.

    `name`: what the result and its report folder go by (left out: fn's qualified name, a functools.partial's
    function's, a callable object's class, `Linear`); `report_dir`: where the reports go (left out: INFERSCOPE_REPORT
    or the config file's report:, else none). An exception in fn goes on to the caller, with a note naming the call
    that raised and the partial report. `compare(before, after)` judges two results.

    With GPU collection, `trace_rounds` more calls follow with the launch calls recorded (the measured
    ones are timed without them): N, "all" (recorded in every call, no extra call), or None for the
    setting (INFERSCOPE_TRACE_ROUNDS or the config file; default 1). `gpu_rounds` ("measured", "trace",
    "auto"; None: the setting) says which rounds record GPU activity, as `--inferscope-gpu-rounds` does:
    with "trace" the measured calls run without CUPTI; then CUPTI starts (the GPU primed, or one settling
    call where it cannot be), the profile calls (GPU activity without the launch calls: up to 3, ending at
    the first that runs as the measured calls did, or `trace_rounds` of them when given) run, and the
    `trace_rounds` calls with the launch calls. Under "auto" with `trace_rounds` unset, the warm-up calls record the
    launch calls too, and one that ran as the measured calls did stands for the trace call (and, gone "trace", for
    the profile call), which then does not run; gone "trace" with a warm-up that stood for neither, the trace call
    runs first and stands for the profile call when it ran as one would.
    """
    check_callable("measure", fn)
    if inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"measure({callable_name(fn)!r}): an async function, whose calls would only make "
            "coroutines and time nothing. Inside its event loop, `await pytest_inferscope.measure_async(fn, ...)` "
            "awaits each call in the rounds."
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        short = callable_name(fn).rpartition(".")[2]
        kind, consume = (
            ("a generator", f"measure(lambda: list({short}(...)))")
            if inspect.isgeneratorfunction(fn)
            else ("an async generator", f"`async def run(): return [x async for x in {short}(...)]`, then "
                  "`await pytest_inferscope.measure_async(run)`")
        )  # fmt: skip
        raise TypeError(
            f"measure({callable_name(fn)!r}): {kind} function, whose calls only make {kind.split(' ', 1)[1]}s and run "
            f"none of its body: the rounds would time nothing. Measure what consumes it, e.g. {consume}."
        )
    with _measuring(
        "measure", fn, kwargs, rounds, warmup, name, report_dir, thresholds, cpu, trace_rounds, gpu_rounds
    ) as (coll, sink):
        coll.run_rounds(_first_checked(fn, args, kwargs), rounds, warmup)
    assert sink.result is not None
    return sink.result


async def measure_async(
    fn: Callable[..., Awaitable[Any]],
    *args: Any,
    rounds: int = MEASURE_ROUNDS,
    warmup: int = MEASURE_WARMUP,
    name: str | None = None,
    report_dir: str | os.PathLike[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    cpu: str | None = None,
    trace_rounds: int | str | None = None,
    gpu_rounds: str | None = None,
    **kwargs: Any,
) -> TestResult:
    """`measure` for an async function: awaits `fn(*args, **kwargs)` in the same calls (the trace and profile calls
    included) under collection, in the event loop that awaits this, and returns the analysed result
    (`await measure_async(client.predict, batch)`)."""
    check_callable("measure_async", fn)
    with _measuring(
        "measure_async", fn, kwargs, rounds, warmup, name, report_dir, thresholds, cpu, trace_rounds, gpu_rounds
    ) as (coll, sink):
        await coll.run_rounds_async(_first_awaitable(fn, args, kwargs), rounds, warmup)
    assert sink.result is not None
    return sink.result


@contextmanager
def _measuring(
    caller: str,
    fn: Callable[..., Any],
    kwargs: dict[str, Any],
    rounds: int,
    warmup: int,
    name: str | None,
    report_dir: str | os.PathLike[str] | None,
    thresholds: dict[str, Any] | None,
    cpu: str | None,
    trace_rounds: int | str | None,
    gpu_rounds: str | None,
) -> Iterator[tuple[Collection, Profile]]:
    """What `measure` and `measure_async` share: their arguments checked before any call, the collection around the
    rounds the caller runs in it, and a note on an exception that names the call that raised."""
    check_rounds(caller, rounds, warmup, cpu)
    check_name(caller, name)
    check_report_dir_argument(caller, report_dir)
    check_passed_on(caller, fn, kwargs)
    typed = check_thresholds(caller, thresholds)
    settings = standalone_settings()
    sink = Profile(name or callable_name(fn))
    ran: list[dict[str, Any]] = []  # the rounds' rows (`Collection.rounds`): which call raised
    try:
        with collecting(
            sink.name, sink, rounds=rounds, warmup=warmup, report_dir=report_dir, thresholds=typed, cpu=cpu,
            settings=settings, caller=caller, **round_options(settings, caller, trace_rounds, gpu_rounds),
        ) as coll:  # fmt: skip
            ran = coll.rounds
            yield coll, sink
    except Exception as exc:
        _say_where_it_raised(exc, caller, sink, ran, report_dir or settings.report)
        raise


def _say_where_it_raised(
    exc: Exception, caller: str, sink: Profile, ran: list[dict[str, Any]], report_dir: str | os.PathLike[str] | None
) -> None:
    """A note on what `fn` raised, which goes on to the caller: the call that raised (from the rounds' rows) and the
    partial report (the partial result is in it; none is returned)."""
    result = sink.result
    if result is None or not ran or not ran[-1]["raised"] or getattr(exc, NOT_TIMED, False):
        return  # not raised by fn in a call (the report folder, another profile running), or said by its message
    kinds = [row["kind"] for row in ran]
    last = kinds[-1]
    if last == RoundKind.WARMUP.name:
        where = f"warm-up call {kinds.count(last)} of {max(result.warmup, kinds.count(last))}"
    elif last == RoundKind.MEASURED.name:
        warmed = kinds.count(RoundKind.WARMUP.name)
        after = f" (after the {warmed} warm-up call{'s' if warmed != 1 else ''})" if warmed else ""
        where = f"measured call {kinds.count(last)} of {result.rounds}{after}"
    else:
        where = "a call after the measured ones (one recording GPU activity or the launch calls)"
    report = (
        f"its partial report is {Path(report_dir) / result.files['md']}"
        if report_dir is not None and "md" in result.files
        else "no report was written (give report_dir=, or set INFERSCOPE_REPORT, for a partial one)"
    )
    exc.add_note(f"inferscope: {caller}({result.nodeid!r}) stopped: fn raised in {where}; {report}.")


def _first_checked(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    """`measure`'s call of `fn`; the first one's result is looked at: a coroutine (`lambda: predict(x)` of an async
    `predict`) is closed and a TypeError, since the rounds would time making coroutines and never run them."""

    def first() -> Any:
        try:
            result = fn(*args, **kwargs)
        except TypeError:
            if why := binding_error("measure", fn, args, kwargs):
                raise not_timed(why) from None
            raise
        if inspect.iscoroutine(result):
            result.close()
            raise not_timed(
                f"measure({callable_name(fn)!r}): its call returned a coroutine, which measure() makes "
                "but never runs: the rounds would time nothing. Inside its event loop, "
                "`await pytest_inferscope.measure_async(fn, ...)` awaits each call in the rounds."
            )
        call[0] = lambda: fn(*args, **kwargs)
        return result

    call: list[Callable[[], Any]] = [first]
    return lambda: call[0]()


def _first_awaitable(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Callable[[], Awaitable[Any]]:
    """`measure_async`'s call of `fn`; a first call that returns something that cannot be awaited (a plain function
    passed) is a TypeError saying so, not Python's "object NoneType can't be used in 'await' expression"."""

    async def first() -> Any:
        try:
            result = fn(*args, **kwargs)
        except TypeError:
            if why := binding_error("measure_async", fn, args, kwargs):
                raise not_timed(why) from None
            raise
        if not inspect.isawaitable(result):
            raise not_timed(
                f"measure_async({callable_name(fn)!r}): its call returned {type(result).__name__}, not "
                "something to await: measure_async takes an async function (async def, or one returning a coroutine). "
                "Measure a plain function with pytest_inferscope.measure(fn, ...)."
            )
        call[0] = lambda: fn(*args, **kwargs)
        return await result

    call: list[Callable[[], Awaitable[Any]]] = [first]
    return lambda: call[0]()
