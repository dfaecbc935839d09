"""The turn-taking of one test: warm-up on both sides, then pairs of rounds in alternating order (AB, BA,
AB, ...), with a look at the pairs after every `rounds` of them, up to the round cap."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

from ..collectors.schedule import throw_into
from ..rounds import RoundKind, row_kind
from .paired import CLOCKS, judge, looks
from .twin import core_clocks
from .twin_process import Twin, TwinDied

if TYPE_CHECKING:
    from ..checks import Plan
    from ..collectors import Collection


class _TwinFailed(Exception):
    def __init__(self, error: str, skipped: str = "", twin: Twin | None = None, in_partner: bool = False) -> None:
        super().__init__(error)
        self.skipped = skipped  # the reason, when the test skipped itself there
        self.twin = twin  # the twin whose round raised
        self.in_partner = in_partner  # it is the partner (this checkout's twin)


def lockstep(
    twin: Twin,
    coll: Collection,
    body: Callable[[], Any],
    plan: Plan,
    data: dict[str, Any],
    max_regression: float,
    alpha: float,
    here_first: bool = True,
    partner: Twin | None = None,
) -> Any:
    """Run the test's rounds here and on the twin, one at a time; the pairs and the look go into `data`.

    The sides strictly alternate (ABAB..., or BABA... when not `here_first`): every round follows one of
    the other side's. ABBA order (AB, BA, AB, ...) runs each side twice in a row at every pair boundary,
    and the second of two back-to-back rounds measured slower (docs/ab.md): with ABBA, the first round of
    every pair was the slow one, and a side's pair ratios split into two groups. The caller alternates
    `here_first` from test to test, so neither side always goes first.

    With a `partner` (a twin of this checkout, --inferscope-ab-pairs=twins), the pairs are its rounds and the twin's,
    in that alternating order, and this side's round comes before each pair's, for this side's own report only.
    """
    here = _Here(coll)
    steps = _steps(twin, here, plan, data, max_regression, alpha, here_first, partner)
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
    partner: Twin | None = None,
) -> Any:
    """`lockstep` for an `async def` test, each round here awaited in the event loop that awaits the test (the twin's
    turns are waited for in it, blocking it: nothing else of the test runs between rounds)."""
    here = _Here(coll)
    steps = _steps(twin, here, plan, data, max_regression, alpha, here_first, partner)
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
    partner: Twin | None = None,
) -> Generator[bool, float | None, None]:
    """The turn-taking, for either driver: yields a round to run here (True: a warm-up one) and is sent its ms; the
    twin's rounds (and the partner's), the looks and the twins' end of the test happen in between. Thrown what a round
    here raised, it ends the twins' test and raises it again."""

    coll = here_side.coll
    waits = [math.nan] * 4  # the last rounds' ms waiting for the core, and on it: the new side, the ref (CLOCKS)
    twins = [t for t in (twin, partner) if t is not None]
    pair = functools.partial(_pair, twin, partner, here_side, waits, here_first)  # (warmup, index, first=)

    points = looks(plan.rounds, max(plan.rounds, math.ceil(plan.rounds * plan.round_cap - 1e-9)))
    data["looks"] = len(points)
    new, ref = data["new_ms"], data["ref_ms"]
    clocks: dict[str, list[float]] = {k: [] for k in CLOCKS}  # each pair's waits and CPU times
    in_test = list(twins)  # the twins whose end of the test is read below
    ended: list[Twin] = []  # those told to end it
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
        ended = [twin]
        if partner is not None:
            partner.send(cmd="end", after=False)  # (nothing of its own is reported)
    except _TwinFailed as exc:
        if exc.in_partner:
            data["state"], data["error"] = "partner_failed", exc.skipped or str(exc)
        else:
            data["state"], data["error"] = ("twin_skipped", exc.skipped) if exc.skipped else ("twin_failed", str(exc))
        _end_others(twins, exc.twin)
    except TwinDied as exc:
        died = [t for t in twins if getattr(t, "dead", "")] or twins  # (the one that died says so)
        data["state"], data["reason"] = "dead", str(exc)
        in_test = [t for t in twins if t not in died]
        _end_others([t for t in in_test if t not in ended], None)  # (one told to end already is not told again)
    except (KeyboardInterrupt, SystemExit):
        raise  # the session stops: the twins are ended at unconfigure (ABController.cleanup), not waited for
    except BaseException:
        _end_others(twins, None)  # this side's body raised: the twins' test ends too, and pytest goes on
        for side in twins:
            _read_result(side, data, side is partner)
        in_test = []
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
    finally:  # (also when the steps are closed: the twins' end of the test is read before their next one)
        for side in in_test:
            _read_result(side, data, side is partner)


def _pair(twin: Twin, partner: Twin | None, here_side: _Here, waits: list[float], here_first: bool, warmup: bool,
          i: int, first: bool = False) -> Generator[bool, float | None, tuple[float, float]]:  # fmt: skip
    """One round on each side, in the test's order: (the new side's ms, the twin's ms); their clocks in `waits`. With
    a partner, this side's round first (its own report's), then the partner's and the twin's."""
    coll = here_side.coll
    if partner is not None:
        yield warmup
        turns = ((partner, 0), (twin, 1)) if here_first else ((twin, 1), (partner, 0))
        ms = [math.nan, math.nan]
        for side, slot in turns:
            ms[slot] = _there(side, coll, waits, i, warmup, first, slot)
        return ms[0], ms[1]
    if here_first:
        a = yield warmup
        b = _there(twin, coll, waits, i, warmup, first)
    else:
        b = _there(twin, coll, waits, i, warmup, first)
        a = yield warmup
    waits[0], waits[2] = here_side.wait_ms, here_side.cpu_ms
    return float(a if a is not None else math.nan), b


def _there(twin: Twin, coll: Collection, waits: list[float], i: int, warmup: bool, first: bool, slot: int = 1) -> float:
    """A twin's round: its ms; its ms waiting for the core and on it into `waits` at `slot` (1: the ref's, 0: the new
    side's, the partner's) (NaN: a twin of an earlier version, which does not say them)."""
    twin.send(cmd="round", index=i, warmup=warmup, first=first)
    msg = twin.recv()
    coll.unchain()  # the twin's round ran since this side's last: this side's next one reads its counters afresh
    if msg.get("type") == "error":
        raise _TwinFailed(str(msg.get("error")), str(msg.get("skipped") or ""), twin, slot == 0)
    waits[slot], waits[slot + 2] = (float(msg.get(k, math.nan)) for k in ("wait_ms", "cpu_ms"))
    return float(msg["ms"])


def _read_result(twin: Twin, data: dict[str, Any], partner: bool = False) -> None:
    """A twin's end of the test: its error, if any, its deterministic metrics and its warnings; of the partner (this
    checkout's twin), its error alone."""
    try:
        while (msg := twin.recv()).get("type") != "result":
            pass
    except TwinDied as exc:
        if data["state"] == "paired":
            data["state"], data["reason"] = "dead", str(exc)
        return
    if partner:
        if msg.get("error") and data["state"] == "paired" and data["look"] is None:
            data["state"], data["error"] = "partner_failed", msg["error"]
        return
    data["metrics"] = msg.get("metrics") or {}
    data["foreign"] = msg.get("foreign") or []
    data["warned"] = msg.get("warned") or []
    if msg.get("error") and data["state"] == "paired":
        if data["look"] is not None:  # after its rounds (a threshold there, a fixture's teardown): the pairs stand
            data["after_error"] = msg["error"]
        else:
            data["state"], data["error"] = "twin_failed", msg["error"]


def _end_others(twins: list[Twin], failed: Twin | None) -> None:
    """The test ended before the pairs did (a round raised in `failed`, here, or a twin died): the other twins' test
    ends too, without its rounds after the measured ones (nothing is compared). A twin whose round raised ends its
    test itself."""
    for twin in twins:
        if twin is not failed:
            with contextlib.suppress(TwinDied):
                twin.send(cmd="end", after=False)
