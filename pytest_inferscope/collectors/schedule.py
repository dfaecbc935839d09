"""The round schedule of one test and the one loop that runs it.

Warm-up rounds, then the measured rounds (the latency samples; with the speed probe on, made up for
while the machine was busy: drift.measure_steady), then, when GPU activity is collected, the rounds
after them: profile rounds in lean mode (a settling round first where the GPU could not be primed), and
the trace rounds that record the launch calls (collectors/gpu_rounds.py); under auto, whose warm-up may
stand for either, the trace rounds first when it stood for neither (`_trace_then_profile`). Every round is a
`Collection.round` of its `RoundKind`. The plugin, `measure()`, `inferscope run` and the A/B twin's own
side all come through `run`; the A/B pair loop (ab/lockstep.py) calls the same `Collection.round`,
`after_warmup` and `after_measured` between its turns, since the twin process decides when this side's
next round may start. An `async def` test, awaited by the plugin that runs it (anyio, ...), comes through
`run_async`: the same rounds and decisions, each call awaited (the rounds after the measured ones and the probe's are
steps, `_after_measured` and drift.steady_steps, which a driver of either kind runs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ..rounds import TRACE_ROUNDS_MAX, RoundKind, allowance, in_step
from .gpu_session import GpuSession

R = TypeVar("R")


class Collection(Protocol):
    """What the schedule drives of a `Collection` (a protocol: the package imports this module, not back)."""

    gpu_session: GpuSession
    probe_ms: list[float]
    rounds: list[dict[str, Any]]

    @property
    def options(self) -> Any: ...
    @property
    def running(self) -> bool: ...
    @property
    def last_round(self) -> dict[str, Any] | None: ...
    def round(self, index: int, kind: RoundKind = ...) -> AbstractContextManager[None]: ...
    def after_warmup(self, allow_more: bool = ...) -> bool: ...
    def trace_rounds_due(self) -> int: ...


@dataclass(frozen=True)
class Steadying:
    """Measured rounds made up for while the speed probe reads the machine as busy, up to `cap` rounds in all."""

    cap: int
    prior: Sequence[float] = field(default=())  # the usual speed: the baseline's and this session's readings


@dataclass(frozen=True)
class RoundSchedule:
    """How many rounds of each kind before the rounds after the measured ones (which the collection decides)."""

    rounds: int
    warmup: int
    steady: Steadying | None = None


def run(coll: Collection, body: Callable[[], R], schedule: RoundSchedule) -> R:
    """Call `body` in the schedule's rounds; returns the last call's result (a trace round's included; None
    when rounds after the measured ones were due and none could run).

    The previous call's result is let go before each call, as a plain loop that drops it does: kept
    alive, it changes the heap the call allocates from. An image pipeline's call ran 2.3x faster while
    the previous call's 2.4 MB output was alive (glibc could not give the freed top of its heap back to
    the system, so the next call page-faulted 1,181 times less), and so measured faster than plain
    (docs/performance.md, "The round machinery").
    """
    result: R | None = None
    for i in range(schedule.warmup):
        if i and not coll.running:
            break  # stopped inside the body: the rounds left would measure nothing
        result = None
        with coll.round(i, RoundKind.WARMUP):
            result = body()
    warmup = schedule.warmup
    # gpu_rounds auto: whether the measured rounds record GPU activity; one more warm-up round when one left it open
    while not coll.after_warmup(allow_more=True) and coll.running:
        result = None
        with coll.round(warmup, RoundKind.WARMUP):
            result = body()
        warmup += 1

    def measured(i: int) -> float:
        nonlocal result
        result = None
        with coll.round(warmup + i, RoundKind.MEASURED):
            result = body()
        last = coll.last_round
        return float(last["sync_ns"]) / 1e9 if last else 0.0  # the end-of-round device wait, in s

    if schedule.steady is None:
        for i in range(schedule.rounds):
            if (i or schedule.warmup) and not coll.running:
                break
            measured(i)
    elif coll.running:
        from ..drift import measure_steady

        # The probe runs between rounds, outside their spans: round i lies between readings i and i+1.
        done = measure_steady(measured, schedule.rounds, schedule.steady.cap, prior=schedule.steady.prior)
        coll.probe_ms.extend(done.probe_ms)
    if not rounds_after_due(coll):
        return result  # type: ignore[return-value]  # none due, or the warm-up stood for them
    result = None  # let go before the rounds after the measured ones too
    traced = _drive(_after_measured(coll, len(coll.rounds)), coll, body)
    return result if traced is None else traced[0]  # type: ignore[return-value]


async def run_async(coll: Collection, body: Callable[[], Awaitable[R]], schedule: RoundSchedule) -> R | None:
    """`run` for an `async def` body, awaited in the event loop of the plugin that awaits the test (anyio's, say): the
    same rounds, each call awaited (the speed probe's through drift.steady_steps, the rounds after the measured ones
    through `_after_measured`'s steps). Returns the last call's result."""
    result: R | None = None
    for i in range(schedule.warmup):
        if i and not coll.running:
            break
        result = None  # let go before the call (see `run`)
        with coll.round(i, RoundKind.WARMUP):
            result = await body()
    warmup = schedule.warmup
    while not coll.after_warmup(allow_more=True) and coll.running:
        result = None
        with coll.round(warmup, RoundKind.WARMUP):
            result = await body()
        warmup += 1

    async def measured(i: int) -> float:
        nonlocal result
        result = None
        with coll.round(warmup + i, RoundKind.MEASURED):
            result = await body()
        last = coll.last_round
        return float(last["sync_ns"]) / 1e9 if last else 0.0

    if schedule.steady is None:
        for i in range(schedule.rounds):
            if (i or schedule.warmup) and not coll.running:
                break
            await measured(i)
    elif coll.running:
        from ..drift import steady_steps

        steps = steady_steps(schedule.rounds, schedule.steady.cap, prior=schedule.steady.prior)
        try:
            i = next(steps)
            while True:
                waited = await measured(i)
                try:
                    i = steps.send(waited)
                except StopIteration as done:
                    coll.probe_ms.extend(done.value.probe_ms)
                    break
        finally:
            steps.close()
    if not rounds_after_due(coll):
        return result
    result = None  # let go before the rounds after the measured ones too
    traced = await _drive_async(_after_measured(coll, len(coll.rounds)), coll, body)
    return result if traced is None else traced[0]


def rounds_after_due(coll: Collection) -> bool:
    """Whether any round runs after the measured ones: trace rounds are due (`trace_rounds_due`) and the warm-up did
    not stand for all of them (`_warmups_stand_in`, decided here)."""
    if not coll.trace_rounds_due():
        return False
    gpu = coll.gpu_session
    _warmups_stand_in(coll)
    return not gpu.trace_warmups or (gpu.lean and not gpu.profile_warmups)


def after_measured(coll: Collection, body: Callable[[], R], first_index: int) -> tuple[R] | None:
    """After the measured rounds: the trace rounds, with the launch calls recorded (None: none ran).

    The measured rounds ran without the launch calls (CUPTI's RUNTIME/DRIVER records cost most
    of CUPTI's per-launch overhead); these rounds record them, so the analyzer can take launch
    linkage, sync and copy calls and idle causes from them (analyzer/base.py, `api_round_idx`).
    In lean mode CUPTI starts here: a settling round unless the backend primed the GPU (`GpuSession.primed`),
    then the profile rounds (by default up to `lean_trace_rounds`, ending at the first in step with the
    measured rounds), then the trace rounds (by default up to rounds.TRACE_ROUNDS_MAX, ending the same way).
    Auto's warm-up rounds in step with the measured rounds stand for the profile or trace rounds, which then do
    not run (`_warmups_stand_in`); when they stand for all of them, nothing runs here, and when for neither, the trace
    rounds run first and the profile rounds only where the last trace round could not stand for them
    (`_trace_then_profile`).
    """
    return _drive(_after_measured(coll, first_index), coll, body) if rounds_after_due(coll) else None


async def after_measured_async(coll: Collection, body: Callable[[], Awaitable[R]], first_index: int) -> tuple[R] | None:
    """`after_measured` for an `async def` body, each round awaited."""
    return await _drive_async(_after_measured(coll, first_index), coll, body) if rounds_after_due(coll) else None


#: The rounds after the measured ones as steps: each yield asks for one round (its index and kind) and is sent what
#: the body returned; the value returned is the last call's result (None: none ran). `_drive` and `_drive_async` run
#: the rounds, so a sync and an async body take the same decisions.
Steps = Generator[tuple[int, RoundKind], Any, "tuple[Any] | None"]


def _drive(steps: Steps, coll: Collection, body: Callable[[], R]) -> tuple[R] | None:
    result: Any = None
    while True:
        try:
            index, kind = steps.send(result)
        except StopIteration as done:
            return done.value
        result = None  # let go before the call (see `run`)
        try:
            with coll.round(index, kind):
                result = body()
        except BaseException as exc:
            throw_into(steps, exc)
            raise


async def _drive_async(steps: Steps, coll: Collection, body: Callable[[], Awaitable[R]]) -> tuple[R] | None:
    result: Any = None
    while True:
        try:
            index, kind = steps.send(result)
        except StopIteration as done:
            return done.value
        result = None
        try:
            with coll.round(index, kind):
                result = await body()
        except BaseException as exc:
            throw_into(steps, exc)
            raise


def throw_into(steps: Generator[Any, Any, Any], exc: BaseException) -> None:
    """What a round's body raised, thrown into the steps that asked for the round, for their own cleanup (the launch
    calls switched off, the A/B twin's test ended); the caller raises it again. A StopIteration the body raised comes
    back out of a generator as PEP 479's RuntimeError, which is not the body's error: that one is let go."""
    try:
        steps.throw(exc)
    except RuntimeError as err:
        if err.__cause__ is not exc:
            raise
    except BaseException as err:
        if err is not exc:
            raise
    finally:
        steps.close()  # (caught inside and a round asked for again: those steps end here)


def _after_measured(coll: Collection, first_index: int) -> Steps:
    """`after_measured`'s steps, once `rounds_after_due` said some round runs (and decided what the warm-up stands
    for)."""
    n = coll.trace_rounds_due()
    gpu = coll.gpu_session
    traced = bool(gpu.trace_warmups)  # the warm-up stood for the trace rounds: none runs
    gpu.synchronize()  # the measured rounds' GPU work finished before the switch
    if gpu.lean:  # lean: CUPTI starts here (launch calls off when it can) and records until stop()
        # no profile round (the warm-up stood for it), or the trace rounds first (`_trace_first`): launch calls stay on
        first = _trace_first(coll)
        stood_in = bool(gpu.profile_warmups)
        if not gpu.begin_profile(launch_calls=stood_in or first):
            return None
        # The first GPU operation after CUPTI starts is slow (the first round ran 14-18% slower on
        # ResNet-50 and ViT-B/16, H100; +190% against +60% for a first call without CUPTI, small forward
        # on the H200), which would skew every GPU figure read from it. begin_profile paid that with a
        # tiny operation (`primed`); when it could not, one settling round first (RoundKind.SETTLING),
        # which the analyzer reads nothing from.
        result: tuple[Any] | None = None  # the measured rounds' result is let go (see `run`)
        if not gpu.primed:
            yield first_index, RoundKind.SETTLING  # (its result let go before the next call: see `run`)
            first_index += 1
        if first:
            return (yield from _trace_then_profile(coll, first_index, n))
        if not stood_in:
            switched = not gpu.api_on  # else the profile rounds record the launch calls too
            ran, result = yield from _until_in_step(coll, first_index, n, RoundKind.PROFILE)
            if not switched or traced:
                return result
            gpu.synchronize()
            if not gpu.switch_launch_calls(True):
                return result
            first_index += ran
        n = coll.options.trace_rounds or 0
    else:
        if not gpu.switch_launch_calls(True):
            return None
        result = None
    if coll.options.until_in_step:
        n = max(n, TRACE_ROUNDS_MAX)
    if n:
        result = None  # let go before the next call (see `run`)
    try:
        result = (yield from _until_in_step(coll, first_index, n, RoundKind.TRACE))[1] or result
    finally:
        gpu.switch_launch_calls(False)
    return result


#: Lean, when the warm-up stood for neither round after the measured ones: the trace rounds run first, and one in step
#: within a profile round's allowance stands for the profile round too (`_trace_then_profile`).
TRACE_FIRST = True


def _trace_first(coll: Collection) -> bool:
    """Whether the rounds after the measured ones begin with the trace rounds: auto gone lean, the numbers of profile
    and trace rounds not given (`until_in_step`), the launch calls switchable, and the warm-up standing for neither.
    `--inferscope-gpu-rounds=trace` keeps its profile rounds first, as it says."""
    gpu = coll.gpu_session
    return (
        TRACE_FIRST
        and coll.options.gpu_rounds == "auto"
        and coll.options.until_in_step
        and coll.options.trace_rounds is not None
        and not gpu.api_note
        and not gpu.profile_warmups
        and not gpu.trace_warmups
    )


def _trace_then_profile(coll: Collection, first_index: int, n_profile: int) -> Steps:
    """The trace rounds (launch calls on since CUPTI started), until one is in step; when that one ran within a profile
    round's allowance too, the GPU figures are read from it, as from a warm-up standing for the profile round (the
    same records, the same bound: `_warmups_stand_in`), and no profile round runs (`GpuSession.profile_from_trace`;
    the analyzer, finding none, reads the trace rounds). Else the launch calls go off and the profile rounds run, until
    one is in step. A test whose warm-up ran out of step ran a profile round and a trace round here; now one round,
    where the trace round ran in step: 4 of 24 ViT-B/16 tests on a loaded H200 host ran both (docs/performance.md,
    "Session 27 on the H200 host")."""
    gpu = coll.gpu_session
    stands = False
    try:
        n_trace = max(coll.options.trace_rounds or 0, TRACE_ROUNDS_MAX)
        ran, result = yield from _until_in_step(coll, first_index, n_trace, RoundKind.TRACE)
        stands = not coll.running or _in_step(coll, RoundKind.TRACE, RoundKind.PROFILE)
        if not stands:
            result = None  # let go before the next call (see `run`)
            gpu.synchronize()
    finally:
        off = gpu.switch_launch_calls(False)
    if stands or not off:  # stood for the profile round; or the profile rounds would record the launch calls
        gpu.profile_from_trace = stands and coll.running
        return result
    return (yield from _until_in_step(coll, first_index + ran, n_profile, RoundKind.PROFILE))[1]


def _until_in_step(
    coll: Collection, first: int, n: int, kind: RoundKind
) -> Generator[tuple[int, RoundKind], Any, tuple[int, tuple[Any] | None]]:
    """Up to `n` rounds of `kind`; with `until_in_step`, ending at the first in step with the measured rounds.
    Returns how many ran and the last call's result."""
    ran, result = 0, None
    while ran < n:
        result = None  # let go before the call (see `run`)
        result = ((yield first + ran, kind),)
        ran += 1
        if coll.options.until_in_step and _in_step(coll, kind):
            break
    return ran, result


def _warmups_stand_in(coll: Collection) -> None:
    """Under auto: which warm-up rounds stand for the profile round (lean) and for the trace round, which then do not
    run (each a round fewer: 9% of a test of 1 + 10 calls). Sets `GpuSession.profile_warmups` and `trace_warmups`,
    which the analyzer reads as those rounds.

    Auto's warm-up recorded GPU activity, and the launch calls too (`GpuSession.warmup_launch_calls`): CUPTI started
    with the collection, primed outside the rounds (`GpuSession.start`). A warm-up round in step with the measured
    rounds (rounds.in_step) with the allowance of the round it stands for reads as that round would: for a profile
    round, what its GPU activity records cost, so that the launch calls' records did not slow it past what a profile
    round may run over (its GPU figures are read from it); for a trace round, the launch calls' records too. A cold
    model's warm-up (first call, autotuning, lazy initialisation) runs slower and stands for nothing. Only where the
    number of profile and trace rounds is not given (`until_in_step`).
    """
    gpu, options = coll.gpu_session, coll.options
    decision = gpu.decision
    gpu.profile_warmups, gpu.trace_warmups = [], []
    if not options.until_in_step or options.gpu_rounds != "auto" or options.trace_rounds is None or gpu.api_note:
        return
    if decision is None or not decision.records_per_round or decision.estimated_cost is None:
        return
    measured = [r["wall_ns"] for r in coll.rounds if r["kind"] == RoundKind.MEASURED.name]
    warm = [r for r in coll.rounds if r["kind"] == RoundKind.WARMUP.name and not r["raised"]]
    if not measured:
        return
    estimated = decision.estimated_cost

    def standing(kind: RoundKind) -> list[int]:
        cost = allowance(kind, gpu.lean, estimated)
        return [r["index"] for r in warm if in_step(r["wall_ns"], measured, cost)]

    if gpu.lean:
        gpu.profile_warmups = standing(RoundKind.PROFILE)
    if gpu.warmup_launch_calls:
        gpu.trace_warmups = standing(RoundKind.TRACE)


def _in_step(coll: Collection, kind: RoundKind, allowed: RoundKind | None = None) -> bool:
    """Whether the last round (of `kind`) ran as the measured rounds did, but for its records (rounds.in_step), with
    the allowance of its kind or of `allowed`'s."""
    last = coll.last_round
    if last is None or last["kind"] != kind.name:
        return True  # the collection stopped inside the body: no more rounds
    measured = [r["wall_ns"] for r in coll.rounds if r["kind"] == RoundKind.MEASURED.name]
    decision = coll.gpu_session.decision
    cost = decision.estimated_cost if decision is not None and decision.estimated_cost is not None else 0.0
    return in_step(last["wall_ns"], measured, allowance(allowed or kind, coll.gpu_session.lean, cost))
