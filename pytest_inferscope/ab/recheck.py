"""A regressed A/B verdict checked by a fresh pair of processes before the test fails (--inferscope-ab-recheck; with
`changed`, an improved one too).

The pairs of one test cancel what changes with time, not what differs between the two processes for as long as they
live: where a process's code and data lie in memory can make the same Python code run a few per cent slower in one of
them, at times far more, for the whole session (docs/ab.md, "Each process's own speed"). And the two processes are not
alike: this one is pytest's own, holding the session's reports and results; the twin serves rounds. So a test whose
latency reads regressed has its pairs run again between two more twin processes started alike, one of this checkout (in
its own folder) and one of the other side, each with a layout of its own, kept for the rest of the session
(`FreshPair`). The test fails only where they read it regressed too (`combine`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .paired import CLOCKS, PairedLook, judge, looks
from .partner import collection_said, not_started
from .twin_process import READY_TIMEOUT_S, Twin, TwinDied

if TYPE_CHECKING:
    from ..checks import Plan

#: The sides of a fresh pair: this checkout's process and the other side's.
SIDES = ("here", "there")
#: The first pairs' verdicts re-checked, by --inferscope-ab-recheck's value.
RECHECKED: Mapping[str, tuple[str, ...]] = {
    "regressed": ("regressed",), "changed": ("regressed", "improved"), "off": (),
}  # fmt: skip


@dataclass
class Recheck:
    """What a fresh pair read of one test: its last look and its pairs, or why it could not run."""

    look: PairedLook | None = None
    new_ms: list[float] = field(default_factory=list)
    ref_ms: list[float] = field(default_factory=list)
    error: str = ""


class _Failed(Exception):
    """A round of the test raised in one of the fresh processes."""


class FreshPair:
    """Two twin processes, one of this checkout (`start("here")`) and one of the other side (`start("there")`),
    started at the first test that needs them and kept for the session; their fixtures kept for the next test as a
    twin's are."""

    def __init__(self, start: Callable[[str], Twin]) -> None:
        self._start = start
        self.twins: list[Twin] = []
        self.nodeids: list[set[str]] = []
        self.failed = ""  # why the pair cannot run (it did not start, collect, or it died): said for every later test

    def _ready(self) -> str:
        """Start the two processes and read their collections; why they cannot run tests, or ""."""
        if self.nodeids or self.failed:
            return self.failed
        try:
            for side in SIDES:
                self.twins.append(self._start(side))  # (one by one: the first is closed where the second fails)
            ready = [twin.recv(READY_TIMEOUT_S) for twin in self.twins]
        except (OSError, TwinDied) as exc:
            return self._fail(f"the fresh pair of processes did not start ({exc})")
        for twin, msg in zip(self.twins, ready, strict=True):
            if said := collection_said(msg):
                return self._fail(f"the fresh process at {twin.label} did not collect the tests ({said})")
        self.nodeids = [set(msg.get("nodeids") or ()) for msg in ready]
        return ""

    def _fail(self, why: str) -> str:
        self.failed = why
        self.close()
        return why

    def run(self, ids: Sequence[str], nexts: Sequence[str | None], core: int | None, plan: Plan, *,
            max_regression: float, alpha: float, here_first: bool) -> Recheck:  # fmt: skip
        """The test's pairs between the two, `ids` and `nexts` as each side names the test and the next one; warm-up,
        then looks as the first pairs had them, in alternating order, both pinned to `core`."""
        if why := self._ready():
            return Recheck(error=why)
        for twin, nodeid, names in zip(self.twins, ids, self.nodeids, strict=True):
            if nodeid not in names:
                return Recheck(error=f"the fresh process at {twin.label} has no profiled test {nodeid}")
        out = Recheck()
        try:
            for twin, nodeid, nxt in zip(self.twins, ids, nexts, strict=True):
                twin.send(cmd="run", nodeid=nodeid, core=core, next=nxt)
            answers = [twin.recv() for twin in self.twins]
            if why := next(filter(None, map(not_started, answers)), ""):
                self._end([not not_started(a) for a in answers])  # (those that started end it)
                return Recheck(error=f"the test did not start in the fresh pair of processes ({why})")
            self._pairs(out, plan, max_regression, alpha, here_first)
            self._end([True, True])
        except _Failed as exc:
            out.look, out.error = None, str(exc)  # (a look taken before it is no verdict: the pairs did not end)
        except TwinDied as exc:
            out.look, out.error = None, self._fail(f"a process of the fresh pair died: {exc}")
        return out

    def _pairs(self, out: Recheck, plan: Plan, max_regression: float, alpha: float, here_first: bool) -> None:
        """The warm-up pairs, then measured ones up to each look, into `out`, until a look is final."""
        order = self.twins if here_first else self.twins[::-1]
        clocks: dict[str, list[float]] = {k: [] for k in CLOCKS}

        def pair(index: int, warmup: bool, first: bool) -> list[dict[str, Any]]:
            got: dict[int, dict[str, Any]] = {}
            for twin in order:
                twin.send(cmd="round", index=index, warmup=warmup, first=first)
                msg = twin.recv()
                if msg.get("type") == "error":
                    self._end([t is not twin for t in self.twins], failed=twin)
                    raise _Failed(f"the test raised in the fresh process at {twin.label}: {msg.get('error')}")
                got[id(twin)] = msg
            return [got[id(twin)] for twin in self.twins]

        for w in range(plan.warmup):
            pair(w, True, False)
        points = looks(plan.rounds, max(plan.rounds, math.ceil(plan.rounds * plan.round_cap - 1e-9)))
        k = 0
        for j, point in enumerate(points):
            while k < point:
                here, there = pair(plan.warmup + k, False, k == 0)
                out.new_ms.append(float(here["ms"]))
                out.ref_ms.append(float(there["ms"]))
                said = (here.get("wait_ms"), there.get("wait_ms"), here.get("cpu_ms"), there.get("cpu_ms"))
                for key, value in zip(CLOCKS, said, strict=True):
                    clocks[key].append(float(value) if value is not None else math.nan)
                k += 1
            out.look = judge(out.new_ms, out.ref_ms, max_regression=max_regression, alpha=alpha, n_looks=len(points),
                             last=j == len(points) - 1, clocks=clocks)  # fmt: skip
            if out.look.final:
                return

    def _end(self, in_rounds: Sequence[bool], failed: Twin | None = None) -> None:
        """End the test in both: those still taking rounds are told (without the rounds after the measured ones: nothing
        of theirs is reported); then each one's result is read, so that both are ready for the next test."""
        for twin, asked in zip(self.twins, in_rounds, strict=True):
            if asked and twin is not failed:
                twin.send(cmd="end", after=False)
        for twin, asked in zip(self.twins, in_rounds, strict=True):
            if asked or twin is failed:
                while twin.recv().get("type") != "result":
                    pass

    def finish(self) -> list[str]:
        """End both sessions; the warnings they raised at their ends."""
        return [w for twin in self.twins for w in twin.finish()]

    def close(self, deadline: float | None = None) -> None:
        """End both, by one `deadline` (Twin.close)."""
        deadline = deadline if deadline is not None else time.monotonic() + 3.0
        for twin in self.twins:
            twin.ask_exit()
        for twin in self.twins:
            twin.close(deadline)
            twin.log.unlink(missing_ok=True)
        self.twins = []


def _said(look: PairedLook) -> str:
    """A look's change and its test, as a verdict's reason gives them: '+27.1% over 20 pairs (signed-rank p=0.0001)'."""
    return f"{100 * (look.ratio - 1):+.1f}% over {look.pairs} pairs (signed-rank p={look.p_value:.2g})"


def _summary(look: PairedLook, new_ms: Sequence[float], ref_ms: Sequence[float]) -> dict[str, Any]:
    """A pair's look as report.json keeps it under the verdict's `recheck` (no NaN: JSON has none)."""
    d = {k: getattr(look, k) for k in ("verdict", "reason", "ratio", "ci_low", "ci_high", "p_value", "pairs")}
    d.update(new_ms=[float(x) for x in new_ms], ref_ms=[float(x) for x in ref_ms])
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def combine(first: PairedLook, new_ms: list[float], ref_ms: list[float], check: Recheck, *,
            twins: bool = False) -> tuple[PairedLook, list[float], list[float], dict[str, Any]]:  # fmt: skip
    """The test's look after its re-check, the pairs it rests on, and what report.json keeps of the re-check.

    The fresh pair reads the same (regressed, or improved): the first pairs' look stands, confirmed. Unchanged: the
    fresh pair's look, and the first pairs' offset was their processes'. Else (the other way, or inconclusive):
    inconclusive, the two pairs disagreeing. Not run (the pair could not start, the test raised there): the first
    pairs' look stands, and the reason says why it is unchecked. `twins`: the first pairs were this checkout's twin's
    and the twin's (--inferscope-ab-pairs=twins), not this process's.
    """
    record: dict[str, Any] = {"first": _summary(first, new_ms, ref_ms)}
    if check.look is None:
        record.update(outcome="not run", error=check.error)
        reason = f"{first.reason} A fresh pair of processes could not check it: {check.error}."
        return dataclasses.replace(first, reason=reason), new_ms, ref_ms, record
    fresh = check.look
    record["fresh"] = _summary(fresh, check.new_ms, check.ref_ms)
    if fresh.verdict == first.verdict:
        record["outcome"] = "confirmed"
        reason = f"{first.reason} A fresh pair of processes, started alike, read it too: {_said(fresh)}."
        return dataclasses.replace(first, reason=reason), new_ms, ref_ms, record
    record["outcome"] = "not confirmed"
    who = "This checkout's twin and the twin" if twins else "This pytest process and its twin"
    before = f"{who} read {_said(first)}, {first.verdict}"
    if fresh.verdict == "unchanged":
        reason = (
            f"A fresh pair of processes, started alike, read {fresh.reason} {before}: an offset of those two "
            "processes' own, not the code's (docs/ab.md, \"Each process's own speed\")."
        )
        return dataclasses.replace(fresh, reason=reason), check.new_ms, check.ref_ms, record
    reason = (
        f"{before}; a fresh pair of processes, started alike, read {_said(fresh)}, {fresh.verdict} "
        f"({fresh.reason.rstrip('.')}). The two pairs disagree, so neither is taken: run the test again, or on a "
        "quieter machine."
    )
    return dataclasses.replace(fresh, verdict="inconclusive", reason=reason), check.new_ms, check.ref_ms, record
