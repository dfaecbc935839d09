"""--inferscope-ab-pairs=twins over fake twins (ab/lockstep.py with a partner, ab/partner.py): the pairs are the
partner's rounds and the twin's, this side's round before each pair; a round failing in either twin, a body raising
here, or a twin dying ends the test in every twin still in it, and its end is read, so the next test starts clean."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_ab_lockstep import FakeCollection, _data, _plan

from pytest_inferscope.ab.lockstep import lockstep, lockstep_async
from pytest_inferscope.ab.paired import judge, verdict_of
from pytest_inferscope.ab.partner import Partner
from pytest_inferscope.ab.twin_process import TwinDied


class Twin:
    """A fake twin named `name` in the turns' log, answering each round with `ms`; its round `fail_at` raises, its
    answer `die_at` (counted over its answers) finds it dead, as does the command `die_on` sent to it."""

    def __init__(self, name: str, log: list[str], ms: float, fail_at: int | None = None, die_at: int | None = None,
                 die_on: str = ""):  # fmt: skip
        self.name, self.log, self.ms, self.fail_at, self.die_at, self.die_on = name, log, ms, fail_at, die_at, die_on
        self.sent: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.dead = ""
        self.received = 0

    def send(self, **msg: Any) -> None:
        if msg["cmd"] == self.die_on:  # (it died before the command reached it)
            self.dead = f"the twin pytest process at {self.name} is gone"
        if self.dead:
            raise TwinDied(self.dead)
        self.sent.append(msg)
        if msg["cmd"] == "round":
            self.log.append(f"{self.name}{msg['index']}")
            if msg["index"] == self.fail_at:  # its test then ends, and says so
                self.answers += [{"type": "error", "error": f"AssertionError: in {self.name}"},
                                 {"type": "result", "metrics": {}, "error": "call failed"}]  # fmt: skip
            else:
                self.answers.append({"ms": self.ms, "wait_ms": 0.0, "cpu_ms": self.ms})
        elif msg["cmd"] == "end":
            self.answers.append({"type": "result", "metrics": {"twin": self.name}, "foreign": [], "error": ""})

    def recv(self, timeout: float = 0.0) -> dict[str, Any]:
        self.received += 1
        if self.received == self.die_at:
            self.dead = f"the twin pytest process at {self.name} exited with status -9"
            raise TwinDied(self.dead)
        return self.answers.pop(0)


def _run(driver: str, twin: Twin, partner: Twin, coll: FakeCollection, body: Any, data: dict[str, Any],
         here_first: bool = True) -> Any:  # fmt: skip
    kw = {"here_first": here_first, "partner": partner}
    if driver == "sync":
        return lockstep(twin, coll, body, _plan(), data, 0.1, 0.05, **kw)  # type: ignore[arg-type]

    async def awaited() -> Any:
        return body()

    return asyncio.run(lockstep_async(twin, coll, awaited, _plan(), data, 0.1, 0.05, **kw))  # type: ignore[arg-type]


def _sides(log: list[str], **kw: Any) -> tuple[Twin, Twin, FakeCollection, dict[str, Any]]:
    return Twin("B", log, 10.0, **kw.get("twin", {})), Twin("P", log, 11.0, **kw.get("partner", {})), \
        FakeCollection(log), _data()  # fmt: skip


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("here_first", [True, False])
def test_the_pairs_are_the_partners_rounds_and_the_twins(driver: str, here_first: bool) -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log)
    calls = iter(range(100))
    assert _run(driver, twin, partner, coll, lambda: next(calls), data, here_first) == 3  # this side's last call
    turns = [(f"A{i}", *((f"P{i}", f"B{i}") if here_first else (f"B{i}", f"P{i}"))) for i in range(4)]
    assert log == [*turns[0], "after_warmup", *(t for turn in turns[1:] for t in turn)]
    # the pairs: the partner's 11 ms against the twin's 10, not this side's 12 (FakeCollection's rounds)
    assert data["new_ms"] == [11.0] * 3 and data["ref_ms"] == [10.0] * 3 and data["state"] == "paired"
    assert data["look"] is not None and data["look"].ratio == pytest.approx(1.1)
    assert data["metrics"] == {"twin": "B"}  # the twin's deterministic metrics, never the partner's
    assert twin.sent[-1] == {"cmd": "end"} and partner.sent[-1] == {"cmd": "end", "after": False}
    assert twin.answers == [] and partner.answers == []  # both ends read
    assert len(coll.rounds) == 4  # this side's rounds, for its own report: 1 warm-up + 3


@pytest.mark.parametrize("failing", ["partner", "twin"])
def test_a_round_failing_in_one_twin_ends_the_test_in_the_other(failing: str) -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log, **{failing: {"fail_at": 2}})
    calls = iter(range(100))
    assert _run("sync", twin, partner, coll, lambda: next(calls), data) == 3
    if failing == "partner":
        assert data["state"] == "partner_failed" and data["error"] == "AssertionError: in P"
        assert log == ["A0", "P0", "B0", "after_warmup", "A1", "P1", "B1", "A2", "P2", "A3"]
        assert twin.sent[-1] == {"cmd": "end", "after": False}
    else:
        assert data["state"] == "twin_failed" and data["error"] == "AssertionError: in B"
        assert log == ["A0", "P0", "B0", "after_warmup", "A1", "P1", "B1", "A2", "P2", "B2", "A3"]
        assert partner.sent[-1] == {"cmd": "end", "after": False}
    assert twin.answers == [] and partner.answers == []  # the failed one's end, and the other's, read
    assert data["new_ms"] == [11.0] and data["ref_ms"] == [10.0]  # the pairs before it
    verdict = verdict_of("t", "HEAD~1", {**data, "looks": 1}, {})
    assert verdict.verdict == "inconclusive"
    if failing == "partner":
        assert verdict.reason == "the test failed in this checkout's twin after 1 pairs: AssertionError: in P"


def test_a_partner_failing_in_the_warm_up_leaves_nothing_to_compare() -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log, partner={"fail_at": 0})
    calls = iter(range(100))
    assert _run("sync", twin, partner, coll, lambda: next(calls), data) == 3
    assert log == ["A0", "P0", "A1", "A2", "A3"] and twin.sent == [{"cmd": "end", "after": False}]
    verdict = verdict_of("t", "HEAD~1", {**data, "looks": 1}, {})
    assert verdict.verdict == "inconclusive" and verdict.between == "twins"
    assert verdict.reason == (
        "the test failed in this checkout's twin (AssertionError: in P), so there is nothing to compare; this pytest "
        "process's result stands"
    )


def test_a_body_raising_here_ends_the_test_in_both_twins() -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log)
    calls = iter(range(100))

    def body() -> int:
        if (n := next(calls)) == 2:
            raise ValueError("broken here")
        return n

    with pytest.raises(ValueError, match="broken here"):
        _run("sync", twin, partner, coll, body, data)
    assert log == ["A0", "P0", "B0", "after_warmup", "A1", "P1", "B1", "A2"]
    for side in (twin, partner):
        assert side.sent[-1] == {"cmd": "end", "after": False} and side.answers == []
    assert data["state"] == "here_failed" and data["metrics"] == {"twin": "B"}


def test_the_partner_dying_ends_the_twins_test_and_says_why() -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log, partner={"die_at": 3})  # its third round's answer
    calls = iter(range(100))
    assert _run("sync", twin, partner, coll, lambda: next(calls), data) == 3
    assert data["state"] == "dead" and data["reason"] == "the twin pytest process at P exited with status -9"
    assert twin.sent[-1] == {"cmd": "end", "after": False} and twin.answers == []
    assert len(coll.rounds) == 4  # this side's rounds are all run


def test_the_partner_dying_as_the_test_ends_leaves_the_twin_told_once() -> None:
    log: list[str] = []
    twin, partner, coll, data = _sides(log, partner={"die_on": "end"})
    calls = iter(range(100))
    assert _run("sync", twin, partner, coll, lambda: next(calls), data) == 3
    assert data["state"] == "dead" and data["reason"] == "the twin pytest process at P is gone"
    assert [m["cmd"] for m in twin.sent].count("end") == 1 and twin.answers == []  # its end read, once
    assert data["metrics"] == {"twin": "B"}


def test_the_partner_starts_a_test_it_collected_and_says_why_not() -> None:
    log: list[str] = []
    fake = Twin("P", log, 11.0)
    partner = Partner(fake)  # type: ignore[arg-type]
    fake.answers.append({"type": "ready", "nodeids": ["t.py::a", "t.py::b"]})
    assert partner.ready() == "" and partner.nodeids == {"t.py::a", "t.py::b"}
    assert partner.begin("t.py::c", None, 1) == "this checkout's twin has no profiled test t.py::c"
    fake.answers.append({"type": "started"})
    assert partner.begin("t.py::a", "t.py::b", 1) == ""
    assert fake.sent[-1] == {"cmd": "run", "nodeid": "t.py::a", "core": 1, "next": "t.py::b"}
    fake.answers.append({"type": "result", "skipped": "no GPU here"})
    assert partner.begin("t.py::b", None, 1) == "the test did not start in this checkout's twin (no GPU here)"
    fake.dead = "the twin pytest process at P exited with status 1"
    assert partner.begin("t.py::a", None, 1) == fake.dead


def test_a_partner_that_did_not_collect_is_a_usage_error_naming_what_it_said() -> None:
    fake = Twin("P", [], 11.0)
    fake.answers.append({"type": "ready", "usage": "file or directory not found: test_y.py"})
    assert Partner(fake).ready() == (  # type: ignore[arg-type]
        "--inferscope-ab-pairs=twins: this checkout's twin, a second pytest process of this checkout, did not collect "
        "the tests (file or directory not found: test_y.py). Run without --inferscope-ab-pairs=twins (this pytest "
        "process then takes the turns itself)."
    )


def test_the_message_says_which_processes_took_the_turns() -> None:
    new, ref = [11.0] * 10, [10.0] * 10
    look = judge(new, ref, max_regression=0.05, alpha=0.01, n_looks=1, last=True)
    data = {**_data(), "new_ms": new, "ref_ms": ref, "look": look, "looks": 1}
    here = verdict_of("t", "HEAD~1", data, {})
    here.core = 1
    twins = verdict_of("t", "HEAD~1", {**data, "between": "twins"}, {})
    twins.core = 1
    assert here.between == "here" and twins.between == "twins" and twins.to_dict()["between"] == "twins"
    assert "10 pairs in alternating order, both pinned to CPU core 1." in here.message()
    assert "10 pairs in alternating order between this checkout's twin and the twin, pinned to CPU core 1." in (
        twins.message()
    )


def test_the_pairs_are_this_process_s_unless_asked() -> None:
    from pytest_inferscope.options import OPTIONS_BY_NAME

    spec = OPTIONS_BY_NAME["ab_pairs"]
    assert spec.default == "here" and tuple(spec.choices or ()) == ("here", "twins")
