"""The A/B turn-taking of one test (ab/lockstep.py) over a fake twin and collection: both drivers, the sync one and
the one an `async def` test awaits, take the same turns, and a body that raises here ends the twin's test first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_inferscope.ab.lockstep import lockstep, lockstep_async
from pytest_inferscope.rounds import RoundKind


class FakeTwin:
    """Answers each round with 10 ms; `log` holds both sides' turns in order."""

    def __init__(self, log: list[str], fail_at: int | None = None) -> None:
        self.log = log
        self.sent: list[dict[str, Any]] = []
        self._answers: list[dict[str, Any]] = []
        self.fail_at = fail_at

    def send(self, **msg: Any) -> None:
        self.sent.append(msg)
        if msg["cmd"] == "round":
            self.log.append(f"B{msg['index']}")
            if self.fail_at is not None and msg["index"] == self.fail_at:  # its test then ends, and says so
                self._answers.append({"type": "error", "error": "AssertionError: at the ref"})
                self._answers.append({"type": "result", "metrics": {}, "foreign": [], "error": "call failed"})
            else:
                self._answers.append({"ms": 10.0})
        elif msg["cmd"] == "end":
            self._answers.append({"type": "result", "metrics": {"m": 1.0}, "foreign": [], "error": ""})

    def recv(self) -> dict[str, Any]:
        return self._answers.pop(0)


class FakeCollection:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.rounds: list[dict[str, Any]] = []
        self.last_round: dict[str, Any] | None = None
        self.running = True
        self.proc = None  # no procfs files kept open: twin.core_clocks reads schedstat afresh
        self.unchained: list[int] = []

    @contextlib.contextmanager
    def round(self, index: int, kind: RoundKind) -> Iterator[None]:
        self.log.append(f"A{index}")
        yield
        self.last_round = {"wall_ns": 12_000_000, "kind": kind.name}
        self.rounds.append(self.last_round)

    def after_warmup(self) -> None:
        self.log.append("after_warmup")

    def unchain(self) -> None:
        self.unchained.append(len(self.log))  # where in the turns: right after the twin's round

    def run_trace_rounds(self, body: Any, first_index: int) -> None:
        return None

    async def run_trace_rounds_async(self, body: Any, first_index: int) -> None:
        return None


def _plan(rounds: int = 3, warmup: int = 1) -> Any:
    return SimpleNamespace(rounds=rounds, warmup=warmup, round_cap=1.0)


def _data() -> dict[str, Any]:
    return {"state": "paired", "new_ms": [], "ref_ms": [], "look": None, "metrics": {}}


def _run(driver: str, twin: FakeTwin, coll: FakeCollection, body: Any, data: dict[str, Any], here_first: bool) -> Any:
    if driver == "sync":
        return lockstep(twin, coll, body, _plan(), data, 0.1, 0.05, here_first)  # type: ignore[arg-type]

    async def run() -> Any:
        async def awaited() -> Any:
            return body()

        return await lockstep_async(twin, coll, awaited, _plan(), data, 0.1, 0.05, here_first)  # type: ignore[arg-type]

    return asyncio.run(run())


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("here_first", [True, False])
def test_both_drivers_take_the_same_turns(driver: str, here_first: bool) -> None:
    log: list[str] = []
    twin, coll, data = FakeTwin(log), FakeCollection(log), _data()
    calls = iter(range(100))
    assert _run(driver, twin, coll, lambda: next(calls), data, here_first) == 3  # the last of 1 + 3 calls
    pairs = [("A0", "B0"), ("A1", "B1"), ("A2", "B2"), ("A3", "B3")]
    order = [x for a, b in pairs for x in ((a, b) if here_first else (b, a))]
    assert log == [*order[:2], "after_warmup", *order[2:]]
    assert data["new_ms"] == [12.0] * 3 and data["ref_ms"] == [10.0] * 3 and data["looks"] == 1
    assert data["look"] is not None and data["metrics"] == {"m": 1.0}  # the twin's end of the test was read
    assert [m["cmd"] for m in twin.sent][-1] == "end"
    # each twin round is followed at once by this side's counters let go: its next round does not span the twin's
    assert coll.unchained == [i + 1 for i, turn in enumerate(log) if turn.startswith("B")]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_body_raising_here_ends_the_twins_test_and_raises(driver: str) -> None:
    log: list[str] = []
    twin, coll, data = FakeTwin(log), FakeCollection(log), _data()
    calls = iter(range(100))

    def body() -> int:
        n = next(calls)
        if n == 2:
            raise ValueError("broken here")
        return n

    with pytest.raises(ValueError, match="broken here"):
        _run(driver, twin, coll, body, data, True)
    assert log == ["A0", "B0", "after_warmup", "A1", "B1", "A2"]
    assert twin.sent[-1] == {"cmd": "end", "after": False}  # nothing is compared: no rounds after the measured ones
    assert [m["cmd"] for m in twin.sent][-1] == "end" and data["metrics"] == {"m": 1.0}
    assert data["state"] == "here_failed" and data["look"] is None  # before the first look (after 3 pairs)


@pytest.mark.parametrize("pairs", [1, 4])
def test_a_test_failing_here_is_inconclusive_before_or_after_the_first_look(pairs: int) -> None:
    """The controller's verdict on a test that failed here: it crashed reading the look the test never reached."""
    from pytest_inferscope.ab.controller import ABController
    from pytest_inferscope.ab.paired import judge

    config = SimpleNamespace(getoption=lambda *a: None)
    settings = SimpleNamespace(ab="HEAD~1", ab_python=None, compare=None)
    ab = ABController(config, settings, {})  # type: ignore[arg-type]
    data = {**_data(), "state": "here_failed", "new_ms": [12.0] * pairs, "ref_ms": [10.0] * pairs, "looks": 1}
    if pairs > 3:
        data["look"] = judge(data["new_ms"], data["ref_ms"], max_regression=0.1, alpha=0.05, n_looks=1, last=False)
    ab.pending["t"] = data
    verdict = ab.finish("t", SimpleNamespace(analysis=SimpleNamespace(metrics={})))  # type: ignore[arg-type]
    assert verdict is not None and verdict["verdict"] == "inconclusive"
    assert verdict["reason"].startswith(f"the test failed here after {pairs}")


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_round_failing_on_the_twin_leaves_this_sides_rounds_to_finish(driver: str) -> None:
    log: list[str] = []
    twin, coll, data = FakeTwin(log, fail_at=2), FakeCollection(log), _data()
    calls = iter(range(100))
    assert _run(driver, twin, coll, lambda: next(calls), data, True) == 3
    assert data["state"] == "twin_failed" and "at the ref" in data["error"]
    assert log == ["A0", "B0", "after_warmup", "A1", "B1", "A2", "B2", "A3"]  # this side's 3 measured rounds done
    assert data["new_ms"] == [12.0] and data["ref_ms"] == [10.0]


def test_a_stop_iteration_the_body_raises_here_is_its_own_and_ends_the_twins_test() -> None:
    # (through the steps' generator it would come out as PEP 479's RuntimeError)
    log: list[str] = []
    twin, coll, data = FakeTwin(log), FakeCollection(log), _data()
    calls = iter(range(2))
    with pytest.raises(StopIteration):
        _run("sync", twin, coll, lambda: next(calls), data, True)
    assert log == ["A0", "B0", "after_warmup", "A1", "B1", "A2"]
    assert [m["cmd"] for m in twin.sent][-1] == "end" and data["metrics"] == {"m": 1.0}


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_body_that_stops_the_collection_ends_the_turns_and_the_twins_test(driver: str) -> None:
    """A body whose own profile() took over (the plugin's collection stopped: api._take_over): no more rounds here, the
    twin's test ended and its end read, so the next test's conversation starts clean."""
    log: list[str] = []
    twin, coll, data = FakeTwin(log), FakeCollection(log), _data()

    def body() -> None:
        coll.running = False

    _run(driver, twin, coll, body, data, True)
    assert log == ["A0"] and [m["cmd"] for m in twin.sent] == ["end"]
    assert data["metrics"] == {"m": 1.0} and twin._answers == []  # its result read: nothing left on the pipe


def test_the_twin_lets_its_counters_go_before_each_round_the_parent_asks_for() -> None:
    """The twin's side of the same: the parent's round ran between any two of its rounds."""
    from pytest_inferscope.ab.twin import TwinServer

    asked = [{"cmd": "round", "index": 0, "warmup": True}, {"cmd": "round", "index": 1, "first": True},
             {"cmd": "round", "index": 2}, {"cmd": "end"}]  # fmt: skip
    sent: list[dict[str, Any]] = []
    channel = SimpleNamespace(recv=lambda: asked.pop(0), send=lambda **msg: sent.append(msg))
    server = TwinServer.__new__(TwinServer)  # (its __init__ ignores SIGINT, as the twin process does)
    server.channel = channel  # type: ignore[assignment]
    log: list[str] = []
    coll = FakeCollection(log)
    turns = [(index, kind) for index, kind in server._rounds_asked(coll)]  # type: ignore[arg-type]
    assert turns == [(0, RoundKind.WARMUP), (1, RoundKind.MEASURED), (2, RoundKind.MEASURED)]
    assert len(coll.unchained) == 3 and log == ["after_warmup"] and sent == [{"type": "started"}]


@pytest.mark.parametrize("ending", [{"cmd": "end"}, {"cmd": "finish"}, {"cmd": "end", "after": False}])
def test_the_twin_runs_the_rounds_after_the_measured_ones_as_the_parent_ends_the_pairs(ending: dict[str, Any]) -> None:
    """As the parent does after its lockstep: a lean GPU test's figures and deterministic metrics are read from those
    rounds, and without them the twin read 0 kernel launches a round against the parent's N (every such test failed
    on an H200). Not when the parent is finishing the session, nor when its test ended first (`after`: False)."""
    from pytest_inferscope.ab.twin import TwinServer

    asked = [{"cmd": "round", "index": 0, "warmup": True}, {"cmd": "round", "index": 1, "first": True},
             {"cmd": "round", "index": 2}, ending]  # fmt: skip
    channel = SimpleNamespace(recv=lambda: asked.pop(0), send=lambda **msg: None)
    server = TwinServer.__new__(TwinServer)  # (its __init__ ignores SIGINT, as the twin process does)
    server.channel, server.core, server.finishing = channel, None, False  # type: ignore[assignment]
    log: list[str] = []
    coll = FakeCollection(log)
    after: list[int] = []
    coll.run_trace_rounds = lambda body, first_index: after.append(first_index) or ("traced",)  # type: ignore[method-assign]
    calls = iter(range(100))
    result = server.run_test("t", coll, lambda: next(calls), None)  # type: ignore[arg-type]
    assert log == ["A0", "after_warmup", "A1", "A2"]
    assert (after, result) == (([3], "traced") if ending == {"cmd": "end"} else ([], 2))
