"""The public API, inside pytest and out: `scope`, `mark_event`, `profile`, and the fixture's handle (`measure` and
`measure_async` are in api_measure.py, `compare` in api_compare.py, `write_report` in api_report.py)."""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from .arguments import (
    check_argument,
    check_name,
    check_report_dir_argument,
    check_thresholds,
    profile_arguments,
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

__all__ = ["InferscopeFixture", "Profile", "mark_event", "profile", "scope"]


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
