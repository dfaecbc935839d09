"""The turn-taking of one test: warm-up on both sides, then pairs of rounds in alternating order (AB, BA,
AB, ...), with a look at the pairs after every `rounds` of them, up to the round cap."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

from ..collectors.schedule import throw_into
from ..rounds import RoundKind, row_kind
from .paired import CLOCKS, judge, looks
from .twin import Twin, TwinDied, core_clocks

if TYPE_CHECKING:
    from ..checks import Plan
    from ..collectors import Collection


class _TwinFailed(Exception):
    def __init__(self, error: str, skipped: str = "") -> None:
        super().__init__(error)
        self.skipped = skipped  # the reason, when the test skipped itself there


def lockstep(
    twin: Twin,
    coll: Collection,
    body: Callable[[], Any],
    plan: Plan,
    data: dict[str, Any],
    max_regression: float,
    alpha: float,
    here_first: bool = True,
) -> Any:
    """Run the test's rounds here and on the twin, one at a time; the pairs and the look go into `data`.

    The sides strictly alternate (ABAB..., or BABA... when not `here_first`): every round follows one of
    the other side's. ABBA order (AB, BA, AB, ...) runs each side twice in a row at every pair boundary,
    and the second of two back-to-back rounds measured slower (docs/ab.md): with ABBA, the first round of
    every pair was the slow one, and a side's pair ratios split into two groups. The caller alternates
    `here_first` from test to test, so neither side always goes first.
    """
    here = _Here(coll)
    steps = _steps(twin, here, plan, data, max_regression, alpha, here_first)
    ms: float | None = None
    while (warmup := _next(steps, ms)) is not None:
        try:
            ms = here.call(body, warmup)
        except BaseException as exc:
            throw_into(steps, exc)  # the steps end the twin's test
            raise
        if not coll.running:  # the body's own profile() took over (api._take_over): the twin's test ends too
            steps.close()
            break
    traced = coll.run_trace_rounds(body, here.index)
    return here.result if traced is None else traced[0]


async def lockstep_async(
    twin: Twin,
    coll: Collection,
    body: Callable[[], Awaitable[Any]],
    plan: Plan,
    data: dict[str, Any],
    max_regression: float,
    alpha: float,
    here_first: bool = True,
) -> Any:
    """`lockstep` for an `async def` test, each round here awaited in the event loop that awaits the test (the twin's
    turns are waited for in it, blocking it: nothing else of the test runs between rounds)."""
    here = _Here(coll)
    steps = _steps(twin, here, plan, data, max_regression, alpha, here_first)
    ms: float | None = None
    while (warmup := _next(steps, ms)) is not None:
        try:
            ms = await here.call_async(body, warmup)
        except BaseException as exc:
            throw_into(steps, exc)
            raise
        if not coll.running:  # the body's own profile() took over (api._take_over): the twin's test ends too
            steps.close()
            break
    traced = await coll.run_trace_rounds_async(body, here.index)
    return here.result if traced is None else traced[0]


class _Here:
    """This side's rounds: each in the collection's round, numbered in order, the last result kept."""

    def __init__(self, coll: Collection) -> None:
        self.coll = coll
        self.index = 0
        self.result: Any = None
        self.wait_ms = self.cpu_ms = math.nan

    def call(self, body: Callable[[], Any], warmup: bool) -> float:
        self.result = None  # let go before the call, as schedule.run does
        clocks = core_clocks(self.coll)
        with self.coll.round(self.index, RoundKind.WARMUP if warmup else RoundKind.MEASURED):
            self.result = body()
        return self._ms(clocks)

    async def call_async(self, body: Callable[[], Awaitable[Any]], warmup: bool) -> float:
        self.result = None
        clocks = core_clocks(self.coll)
        with self.coll.round(self.index, RoundKind.WARMUP if warmup else RoundKind.MEASURED):
            self.result = await body()
        return self._ms(clocks)

    def _ms(self, clocks: tuple[int, int]) -> float:
        """The round's ms; its ms waiting for the core and on it in `wait_ms`, `cpu_ms` (twin.core_clocks)."""
        self.wait_ms, self.cpu_ms = ((b - a) / 1e6 for a, b in zip(clocks, core_clocks(self.coll), strict=True))
        self.index += 1
        last = self.coll.last_round
        return float(last["wall_ns"]) / 1e6 if last else math.nan


def _next(steps: Generator[bool, float | None, None], ms: float | None) -> bool | None:
    """The steps' next round here (whether a warm-up one), given the last one's ms; None when they are done."""
    try:
        return steps.send(ms)
    except StopIteration:
        return None


def _steps(
    twin: Twin,
    here_side: _Here,
    plan: Plan,
    data: dict[str, Any],
    max_regression: float,
    alpha: float,
    here_first: bool,
) -> Generator[bool, float | None, None]:
    """The turn-taking, for either driver: yields a round to run here (True: a warm-up one) and is sent its ms; the
    twin's rounds, the looks and the twin's end of the test happen in between. Thrown what a round here raised, it
    ends the twin's test and raises it again."""

    coll = here_side.coll
    waits = [math.nan] * 4  # the last rounds' ms waiting for the core, and on it: here, the twin (paired.CLOCKS)

    def pair(warmup: bool, i: int, first: bool = False) -> Generator[bool, float | None, tuple[float, float]]:
        """One round on each side, in the test's order: (this side's ms, the twin's ms); their clocks in `waits`."""
        if here_first:
            a = yield warmup
            b = _there(twin, coll, waits, i, warmup, first)
        else:
            b = _there(twin, coll, waits, i, warmup, first)
            a = yield warmup
        waits[0], waits[2] = here_side.wait_ms, here_side.cpu_ms
        return float(a if a is not None else math.nan), b

    points = looks(plan.rounds, max(plan.rounds, math.ceil(plan.rounds * plan.round_cap - 1e-9)))
    data["looks"] = len(points)
    new, ref = data["new_ms"], data["ref_ms"]
    clocks: dict[str, list[float]] = {k: [] for k in CLOCKS}  # each pair's waits and CPU times
    in_test = True
    try:
        for w in range(plan.warmup):
            yield from pair(True, w)
        coll.after_warmup()
        k = 0
        for j, point in enumerate(points):
            while k < point:
                a, b = yield from pair(False, plan.warmup + k, first=k == 0)
                new.append(a)
                ref.append(b)
                for key, value in zip(CLOCKS, waits, strict=True):
                    clocks[key].append(value)
                k += 1
            look = judge(new, ref, max_regression=max_regression, alpha=alpha, n_looks=len(points),
                         last=j == len(points) - 1, clocks=clocks)  # fmt: skip
            data["look"] = look
            if look.final:
                break
        twin.send(cmd="end")
    except _TwinFailed as exc:
        data["state"], data["error"] = ("twin_skipped", exc.skipped) if exc.skipped else ("twin_failed", str(exc))
    except TwinDied as exc:
        data["state"], data["reason"] = "dead", str(exc)
        in_test = False
    except (KeyboardInterrupt, SystemExit):
        raise  # the session stops: the twin is ended at unconfigure (ABController.cleanup), not waited for
    except BaseException:
        _abandon(twin, data)  # this side's body raised: the twin's test ends too, and pytest goes on
        if data["state"] == "paired":
            data["state"] = "here_failed"
        raise
    if data["look"] is None and new:
        data["look"] = judge(new, ref, max_regression=max_regression, alpha=alpha, n_looks=len(points), last=True,
                             clocks=clocks)  # fmt: skip
    # The current side's result stands: its requested rounds are completed here alone.
    measured = sum(1 for r in coll.rounds if row_kind(r) is RoundKind.MEASURED)
    try:
        for _ in range(plan.rounds - measured):
            yield False
    finally:  # (also when the steps are closed: the twin's end of the test is read before its next one)
        if in_test:
            _read_result(twin, data)


def _there(twin: Twin, coll: Collection, waits: list[float], i: int, warmup: bool, first: bool) -> float:
    """The twin's round: its ms; its ms waiting for the core and on it into `waits` (NaN: a twin of an earlier
    version, which does not say them)."""
    twin.send(cmd="round", index=i, warmup=warmup, first=first)
    msg = twin.recv()
    coll.unchain()  # the twin's round ran since this side's last: this side's next one reads its counters afresh
    if msg.get("type") == "error":
        raise _TwinFailed(str(msg.get("error")), str(msg.get("skipped") or ""))
    waits[1], waits[3] = (float(msg.get(k, math.nan)) for k in ("wait_ms", "cpu_ms"))
    return float(msg["ms"])


def _read_result(twin: Twin, data: dict[str, Any]) -> None:
    """The twin's end of the test: its error, if any, its deterministic metrics and its warnings."""
    try:
        while (msg := twin.recv()).get("type") != "result":
            pass
    except TwinDied as exc:
        if data["state"] == "paired":
            data["state"], data["reason"] = "dead", str(exc)
        return
    data["metrics"] = msg.get("metrics") or {}
    data["foreign"] = msg.get("foreign") or []
    data["warned"] = msg.get("warned") or []
    if msg.get("error") and data["state"] == "paired":
        if data["look"] is not None:  # after its rounds (a threshold there, a fixture's teardown): the pairs stand
            data["after_error"] = msg["error"]
        else:
            data["state"], data["error"] = "twin_failed", msg["error"]


def _abandon(twin: Twin, data: dict[str, Any]) -> None:
    """This side's test ended before the pairs did: the twin's ends too, without its rounds after the measured ones
    (nothing is compared)."""
    try:
        twin.send(cmd="end", after=False)
        _read_result(twin, data)
    except TwinDied:
        pass
