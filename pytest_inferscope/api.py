"""The public API, inside pytest and out: `scope`, `mark_event`, `profile`, `measure`, and the fixture's handle."""

from __future__ import annotations

import inspect
import os
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from .arguments import (
    MEASURE_ROUNDS,
    MEASURE_WARMUP,
    NOT_TIMED,
    binding_error,
    callable_name,
    check_argument,
    check_callable,
    check_name,
    check_passed_on,
    check_report_dir_argument,
    check_rounds,
    check_thresholds,
    not_timed,
    profile_arguments,
    round_options,
)
from .collectors import Collection, CollectionOptions, SamplerThread, active, busy, mark_event, scope
from .collectors.gpu import Choice, select_backend
from .config import Settings, file_stats, resolve
from .environment import collect_environment
from .merger import Timeline
from .options import OPTIONS
from .postprocess import Plan, process
from .reporters.files import ReportDirError, check_report_dir
from .results import TestResult
from .rounds import RoundKind

__all__ = ["InferscopeFixture", "Profile", "mark_event", "measure", "profile", "scope"]


#: The last `standalone_settings`: what they came from (the working directory, its INFERSCOPE_* variables, its config
#: files' stats), and the Settings. measure() asks for them at every call: resolving took 0.27-0.33 ms a call on the
#: H200 host, seeing that nothing they came from changed 0.16-0.21 ms there and 0.06 ms on the 2-core VM (2026-11-28,
#: benchmarks/bench_outside_rounds.py).
_STANDALONE: tuple[tuple[Any, ...], Settings] | None = None
_ENV_NAMES = tuple(spec.env for spec in OPTIONS)
#: The stack sampler's thread of `measure()` and `profile()`, parked between their calls and never ticking there
#: (collectors/cpu.py, `SamplerThread`): a thread started and joined per call cost 0.42 ms of it on the 2-core VM.
_SAMPLER = SamplerThread(ticking_s=0.0, name="inferscope-sampler-measure")


def standalone_settings() -> Settings:
    """Settings outside pytest: environment variables and the config file of the working directory; resolved again
    when the working directory, an INFERSCOPE_* variable or a config file there changed (a resolve that raised is not
    kept: it raises again)."""
    global _STANDALONE
    cwd = Path.cwd()
    key = (cwd, tuple(os.environ.get(name) for name in _ENV_NAMES), file_stats(cwd))
    if _STANDALONE is not None and _STANDALONE[0] == key:
        return _STANDALONE[1]
    settings = resolve(cli={}, ini={}, env=os.environ, rootdir=cwd)
    _STANDALONE = (key, settings)
    return settings


def _gpu_choice(gpu: str, trace_size_mb: float | None = None) -> Choice:
    return _cached_choice(gpu, os.environ.get("INFERSCOPE_COLLECTOR") or None, trace_size_mb)


@cache
def _cached_choice(gpu: str, forced: str | None, trace_size_mb: float | None) -> Choice:
    """One backend choice per (mode, forced backend, record cap) per process: choosing loads libraries."""
    return select_backend(gpu, forced=forced, trace_size_mb=trace_size_mb)


class Profile:
    """What `profile()` yields: the result is filled in when the block exits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.result: TestResult | None = None
        self.timeline: Timeline | None = None

    def __repr__(self) -> str:
        return f"<Profile {self.name!r}: {'running' if self.result is None else repr(self.result)}>"


def collection_options(
    settings: Settings,
    cpu: str | None,
    trace_rounds: int | str = "all",
    gpu_rounds: str = "measured",
    profile_rounds: int | str | None = None,
    until_in_step: bool = False,
    modules: int | None = None,
) -> CollectionOptions:
    """What a collection does, from the settings and what a call (`measure()`) or a test's plan asked for."""
    lean = profile_rounds if profile_rounds is not None else trace_rounds
    return CollectionOptions(
        trace_rounds=None if trace_rounds == "all" else int(trace_rounds),
        gpu_rounds=gpu_rounds,
        lean_trace_rounds=None if lean == "all" else int(lean),
        until_in_step=until_in_step,
        cpu=cpu or settings.cpu,
        sample_interval_ms=settings.sample_interval_ms,
        sampler=settings.sampler,
        trace_size_mb=settings.trace_size_mb,
        trace_spill=str(settings.trace_spill) if settings.trace_spill else None,
        gpu_required=settings.gpu == "required",
        modules=settings.modules if modules is None else modules,
    )


#: While the plugin profiles a test that no marker asked for (`--inferscope-all`, or its `inferscope` fixture): how
#: to stop that, so that a `profile()`, `measure()` or `measure_async()` in its body takes over (the session sets it).
_TAKE_OVER: Callable[[], None] | None = None


def taken_over_by_the_body(release: Callable[[], None] | None) -> None:
    """Set (or clear, None) what stops the plugin's profiling of the running test when its body profiles a block."""
    global _TAKE_OVER
    _TAKE_OVER = release


def _take_over(name: str) -> None:
    """Before a collection of this API starts inside a running one: the plugin's profiling of a test that no marker
    asked for stops (the test leaves no report of its own: the block's result is its measurement); any other is a
    RuntimeError naming both."""
    global _TAKE_OVER
    running = active()
    if running is None:
        return
    if _TAKE_OVER is not None and running.thread == threading.get_ident():
        release, _TAKE_OVER = _TAKE_OVER, None
        release()
        if active() is None:
            return
    raise RuntimeError(busy(name, running))


def report_folder(caller: str, report_dir: str | os.PathLike[str] | None, settings: Settings) -> Path | None:
    """The folder a call writes its report to (`report_dir`, else the settings' report; None: none), made and checked
    writable (`check_report_dir`): a ReportDirError as the API takes it, starting with the call (`caller`) if given."""
    out = Path(report_dir).expanduser() if report_dir is not None else settings.report  # as the setting's is
    if out is None:
        return None
    try:
        check_report_dir(Path(out), index=False)  # a test folder only: no index is written
    except ReportDirError as e:  # said as the API takes it, not as pytest's option
        given = (
            "pass another folder as report_dir="
            if report_dir is not None
            else "set INFERSCOPE_REPORT (or the config file's report:) to another folder"
        )
        said = str(e).replace("pass another folder with --inferscope-report=DIR", given)
        if caller:
            head = (
                f"{caller}(report_dir={str(report_dir)!r})"
                if report_dir is not None
                else f"{caller}() with report {str(out)!r} (from {settings.sources.get('report', 'default')})"
            )
            said = said.replace("The inferscope report directory ", f"{head}: the report folder ", 1)
        raise ReportDirError(said) from None
    return Path(out)


@contextmanager
def collecting(
    name: str,
    sink: Profile,
    *,
    rounds: int,
    warmup: int,
    report_dir: str | os.PathLike[str] | None,
    thresholds: dict[str, Any] | None,
    cpu: str | None,
    trace_rounds: int | str | None = "all",
    gpu_rounds: str = "measured",
    profile_rounds: int | None = None,
    until_in_step: bool = False,
    settings: Settings | None = None,
    caller: str = "",
) -> Iterator[Collection]:
    """Run a collection around the block, then fill `sink` with the analysed (maybe partial) result.

    The building block of `profile`, `measure` and `inferscope run`. `trace_rounds`: "all" (launch
    calls recorded throughout: the block drives its own rounds), N (the block runs the trace rounds,
    `Collection.run_rounds` does), or None (the settings' `trace_rounds`). `gpu_rounds`: which rounds
    record GPU activity (collectors/gpu_rounds.py); when lean, `profile_rounds` rounds record it after
    the measured ones (default: as many as `trace_rounds`; with `until_in_step`, up to that many, ending at
    the first in step with the measured rounds: rounds.in_step), then the trace rounds the launch calls.
    `settings`: the caller's, when it resolved them (else resolved here). `caller`: the API's call ("measure"), which
    an unusable report folder's error starts with, as its argument errors do.
    """
    _take_over(name)
    settings = settings or standalone_settings()
    out = report_folder(caller, report_dir, settings)
    traced = settings.trace_rounds if trace_rounds is None else trace_rounds
    options = collection_options(settings, cpu, traced, gpu_rounds, profile_rounds, until_in_step)
    coll = Collection(options, _gpu_choice(settings.gpu, settings.trace_size_mb), name=name, sampler_thread=_SAMPLER)
    coll.start()
    partial = ""
    try:
        yield coll
    except BaseException as exc:
        partial = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise
    finally:
        raw = coll.stop()
        plan = Plan(
            nodeid=name,
            rounds=rounds,
            warmup=warmup,
            thresholds=dict(thresholds or {}),
            latency_stat=settings.latency_stat,
        )
        sink.result, sink.timeline = process(
            raw,
            plan,
            coll.collectors_info(),
            outcome="failed" if partial else "passed",
            partial_reason=partial,
            gpu_required=settings.gpu == "required",
            report_dir=out,
            environment=collect_environment(),
            trace_format=settings.trace_format,
        )
        sink.result.raw, sink.result.report_dir = raw, out  # for write_report() after the call


@profile_arguments
@contextmanager
def profile(
    name: str | None = "profile",
    *,
    report_dir: str | os.PathLike[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    cpu: str | None = None,
) -> Iterator[Profile]:
    """Profile a block as one round; `.result` (a TestResult) is set when the block exits.

    Reports are written to `report_dir` (or INFERSCOPE_REPORT) when given. An exception in
    the block still produces a (partial) result, then propagates.
    """
    check_name("profile", name)
    name = "profile" if name is None else name  # as measure(name=None) goes by its default
    check_report_dir_argument("profile", report_dir)
    if cpu is not None:
        check_argument("profile", "cpu", cpu)
    typed = check_thresholds("profile", thresholds)
    sink = Profile(name)
    block = collecting(
        name, sink, rounds=1, warmup=0, report_dir=report_dir, thresholds=typed, cpu=cpu, caller="profile"
    )
    with block as coll, coll.round(0, RoundKind.MEASURED):
        yield sink


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


def requested_too_late(nodeid: str) -> str:
    """Why a test that asked for the fixture with `request.getfixturevalue("inferscope")` fails: a test is profiled
    for the fixtures it names (its signature, `usefixtures`, a fixture's arguments), which pytest knows at collection;
    one requested while the test runs comes after the plugin chose which tests to profile."""
    return (
        f"request.getfixturevalue('inferscope') in {nodeid}, which is not profiled: a test is profiled for the "
        "fixtures it names when collected, so the fixture's scopes, marks and result would do nothing here. Name the "
        "fixture as an argument (def test_x(inferscope): ...) or with @pytest.mark.usefixtures('inferscope'), or "
        "mark the test @pytest.mark.inferscope; to profile a block of "
        "this test, call pytest_inferscope.profile() or measure()."
    )


class InferscopeFixture:
    """The `inferscope` fixture: scopes and events inside the body, and the result after it."""

    def __init__(self, nodeid: str, profiled: bool) -> None:
        self.nodeid = nodeid
        self.profiled = profiled  # the plugin profiles this test's body
        self.result: TestResult | None = None  # set after the call phase of a profiled test

    def scope(self, name: str) -> AbstractContextManager[Any]:
        """A named scope; shows in the report with its time."""
        return scope(name)

    def mark_event(self, name: str, **attrs: Any) -> None:
        """An instant event with attributes; shows in the report's Marks."""
        mark_event(name, **attrs)

    def profile(self, name: str | None = None, **kwargs: Any) -> AbstractContextManager[Profile]:
        """Profile a block inside a test that is not marked, to assert on its result yourself.

        The test's own profiling (it asked for the fixture, or `--inferscope-all`) stops here and leaves no report:
        the block's result is the measurement the test asked for. Inside a marked test it is an error (`_take_over`).
        """
        return profile(name or self.nodeid, **kwargs)
