"""The turn-taking of one test: warm-up on both sides, then pairs of rounds in alternating order (AB, BA,
AB, ...), with a look at the pairs after every `rounds` of them, up to the round cap."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..rounds import RoundKind, row_kind
from .paired import judge, looks
from .twin import Twin, TwinDied

if TYPE_CHECKING:
    from ..checks import Plan
    from ..collectors import Collection


class _TwinFailed(Exception):
    pass


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
    result: Any = None
    index = 0

    def here(warmup: bool) -> float:
        nonlocal result, index
        result = None  # let go before the call, as schedule.run does
        with coll.round(index, RoundKind.WARMUP if warmup else RoundKind.MEASURED):
            result = body()
        index += 1
        last = coll.last_round
        return float(last["wall_ns"]) / 1e6 if last else math.nan

    def there(i: int, warmup: bool, first: bool = False) -> float:
        twin.send(cmd="round", index=i, warmup=warmup, first=first)
        msg = twin.recv()
        if msg.get("type") == "error":
            raise _TwinFailed(str(msg.get("error")))
        return float(msg["ms"])

    points = looks(plan.rounds, max(plan.rounds, math.ceil(plan.rounds * plan.round_cap - 1e-9)))
    data["looks"] = len(points)
    new, ref = data["new_ms"], data["ref_ms"]
    in_test = True
    try:
        for w in range(plan.warmup):
            _pair(here_first, partial(here, True), partial(there, w, True))
        coll.after_warmup()
        k = 0
        for j, point in enumerate(points):
            while k < point:
                a, b = _pair(here_first, partial(here, False), partial(there, plan.warmup + k, False, first=k == 0))
                new.append(a)
                ref.append(b)
                k += 1
            look = judge(new, ref, max_regression=max_regression, alpha=alpha, n_looks=len(points),
                         last=j == len(points) - 1)  # fmt: skip
            data["look"] = look
            if look.final:
                break
        twin.send(cmd="end")
    except _TwinFailed as exc:
        data["state"], data["error"] = "twin_failed", str(exc)
    except TwinDied as exc:
        data["state"], data["reason"] = "dead", str(exc)
        in_test = False
    except (KeyboardInterrupt, SystemExit):
        raise  # the session stops: the twin is ended at unconfigure (ABController.cleanup), not waited for
    except BaseException:
        _abandon(twin, data)  # this side's body raised: the twin's test ends too, and pytest goes on
        raise
    if data["look"] is None and new:
        data["look"] = judge(new, ref, max_regression=max_regression, alpha=alpha, n_looks=len(points), last=True)
    # The current side's result stands: its requested rounds are completed here alone.
    measured = sum(1 for r in coll.rounds if row_kind(r) is RoundKind.MEASURED)
    for _ in range(plan.rounds - measured):
        here(False)
    if in_test:
        _read_result(twin, data)
    traced = coll.run_trace_rounds(body, index)
    return result if traced is None else traced[0]


def _pair(here_first: bool, here: Callable[[], float], there: Callable[[], float]) -> tuple[float, float]:
    """One round on each side, in the given order: (this side's ms, the twin's ms)."""
    if here_first:
        a = here()
        return a, there()
    b = there()
    return here(), b


def _read_result(twin: Twin, data: dict[str, Any]) -> None:
    """The twin's end of the test: its error, if any, and its deterministic metrics."""
    try:
        while (msg := twin.recv()).get("type") != "result":
            pass
    except TwinDied as exc:
        if data["state"] == "paired":
            data["state"], data["reason"] = "dead", str(exc)
        return
    data["metrics"] = msg.get("metrics") or {}
    data["foreign"] = msg.get("foreign") or []
    if msg.get("error") and data["state"] == "paired":
        data["state"], data["error"] = "twin_failed", msg["error"]


def _abandon(twin: Twin, data: dict[str, Any]) -> None:
    try:
        twin.send(cmd="end")
        _read_result(twin, data)
    except TwinDied:
        pass
