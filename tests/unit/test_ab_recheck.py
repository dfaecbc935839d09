"""A regressed A/B latency checked by a fresh pair of processes (ab/recheck.py): the pair's turns over fake twins, what
stands after the check, and how the verdict says it."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_inferscope.ab.paired import ABVerdict, PairedLook, ab_message, judge, verdict_of
from pytest_inferscope.ab.recheck import FreshPair, Recheck, combine
from pytest_inferscope.ab.twin_process import TwinDied


class FakeTwin:
    """A twin of the fresh pair: answers each round with `ms`; `log` holds both processes' turns in order."""

    def __init__(self, name: str, log: list[str], ms: float, nodeids: list[str], *, fail_at: int | None = None,
                 skip: bool = False, dies: bool = False) -> None:  # fmt: skip
        self.label, self.log, self.ms = name, log, ms
        self.sent: list[dict[str, Any]] = []
        self._answers: list[dict[str, Any]] = [{"type": "ready", "nodeids": nodeids, "errors": [], "usage": ""}]
        self.fail_at, self.skip, self.dies = fail_at, skip, dies
        self.closed = False

    def send(self, **msg: Any) -> None:
        self.sent.append(msg)
        cmd = msg["cmd"]
        if cmd == "run":
            self.log.append(f"{self.label}:run {msg['nodeid']} next {msg['next']} core {msg['core']}")
            self._answers.append({"type": "result", "skipped": "no GPU"} if self.skip else {"type": "started"})
        elif cmd == "round":
            self.log.append(f"{self.label}{msg['index']}{'w' if msg['warmup'] else ''}{'f' if msg['first'] else ''}")
            if self.dies:
                raise TwinDied(f"the twin pytest process at {self.label} exited with status 1")
            if msg["index"] == self.fail_at:
                self._answers += [{"type": "error", "error": "AssertionError: boom"}, {"type": "result", "error": "x"}]
            else:
                self._answers.append({"type": "round", "ms": self.ms, "wait_ms": 0.0, "cpu_ms": self.ms})
        elif cmd == "end":
            assert msg["after"] is False  # nothing of the fresh pair's is reported: no rounds after the measured ones
            self.log.append(f"{self.label}:end")
            self._answers.append({"type": "result", "metrics": {}, "error": ""})

    def recv(self, timeout: float = 0.0) -> dict[str, Any]:
        return self._answers.pop(0)

    def finish(self) -> list[str]:
        return [f"{self.label} warned"]

    def ask_exit(self) -> None:
        self.log.append(f"{self.label}:asked")

    def close(self, deadline: float | None = None) -> None:
        self.log.append(f"{self.label}:closed")
        self.closed, self.deadline = True, deadline


class _NoFile(list[str]):
    """The turns' log, standing for each fake's log file too (FreshPair.close unlinks it)."""

    def unlink(self, missing_ok: bool = False) -> None:
        pass


def _plan(rounds: int = 4, warmup: int = 1, round_cap: float = 2.0) -> Any:
    return SimpleNamespace(rounds=rounds, warmup=warmup, round_cap=round_cap)


def _pair(here_ms: float, there_ms: float, **kw: Any) -> tuple[FreshPair, list[str], list[FakeTwin]]:
    log = _NoFile()
    started: list[FakeTwin] = []
    here_kw = {k.removeprefix("here_"): v for k, v in kw.items() if k.startswith("here_")}
    there_kw = {k.removeprefix("there_"): v for k, v in kw.items() if k.startswith("there_")}

    def start(side: str) -> Any:
        ms, extra = (here_ms, here_kw) if side == "here" else (there_ms, there_kw)
        twin = FakeTwin(side, log, ms, ["t.py::test", "old.py::test"], **extra)
        started.append(twin)
        return twin

    return FreshPair(start), log, started


RUN = {"max_regression": 0.05, "alpha": 0.01}


def test_the_pair_takes_turns_as_the_first_pairs_did_and_ends_the_test_in_both() -> None:
    pair, log, twins = _pair(10.0, 10.0)
    check = pair.run(["t.py::test", "old.py::test"], ["t.py::next", None], 3, _plan(), here_first=False, **RUN)
    assert [t.label for t in twins] == ["here", "there"]
    assert log[:2] == ["here:run t.py::test next t.py::next core 3", "there:run old.py::test next None core 3"]
    # the other side first, strictly alternating; the first measured round says so (the twin's after_warmup)
    assert log[2:8] == ["there0w", "here0w", "there1f", "here1f", "there2", "here2"]
    assert log[-2:] == ["here:end", "there:end"]
    assert check.error == "" and check.look is not None and check.look.verdict == "unchanged"
    assert check.new_ms == check.ref_ms == [10.0] * check.look.pairs and check.look.pairs == 4  # one look at 4 pairs
    assert all(not t._answers for t in twins)  # every answer read: both ready for the next test


def test_a_slower_side_keeps_taking_looks_up_to_the_cap_and_reads_regressed() -> None:
    pair, log, _ = _pair(13.0, 10.0)
    check = pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(rounds=5, round_cap=2.0),
                     here_first=True, **RUN)  # fmt: skip
    assert check.look is not None and check.look.verdict == "regressed" and check.look.pairs == 10
    assert log[2:4] == ["here0w", "there0w"]


def test_started_once_for_the_session_and_closed() -> None:
    pair, _, twins = _pair(10.0, 10.0)
    for _ in range(2):
        pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert len(twins) == 2  # not started again for the second test
    assert pair.finish() == ["here warned", "there warned"]
    pair.close()
    assert all(t.closed for t in twins) and pair.twins == []
    # both asked to exit before either is waited for, and waited for up to one deadline: a Ctrl-C during a re-check
    # took 7.9 s to end the run with a wait of 3 s each, 3.9 s with one (the 2-core VM, 2026-11-30)
    assert twins[0].log[-4:] == ["here:asked", "there:asked", "here:closed", "there:closed"]
    assert twins[0].deadline is not None and twins[0].deadline == twins[1].deadline


def test_a_round_raising_in_one_ends_the_others_test_and_says_so() -> None:
    pair, log, twins = _pair(10.0, 13.0, there_fail_at=7)  # after the first look (4 pairs), not final: not clear yet
    check = pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert check.look is None
    assert check.error == "the test raised in the fresh process at there: AssertionError: boom"
    assert log[-1] == "here:end" and "there:end" not in log  # the one that raised ended its test itself
    assert all(not t._answers for t in twins)


def test_a_test_that_does_not_start_there_is_not_checked() -> None:
    pair, log, twins = _pair(10.0, 10.0, there_skip=True)
    check = pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert check.error == "the test did not start in the fresh pair of processes (no GPU)"
    assert log[-1] == "here:end" and all(not t._answers for t in twins)


def test_a_test_one_of_them_lacks_is_not_checked() -> None:
    pair, _, _ = _pair(10.0, 10.0)
    check = pair.run(["t.py::new", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert check.error == "the fresh process at here has no profiled test t.py::new"


def test_a_pair_that_died_is_not_started_again() -> None:
    pair, _, twins = _pair(10.0, 10.0, here_dies=True)
    first = pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert first.error.startswith("a process of the fresh pair died: the twin pytest process at here exited")
    assert all(t.closed for t in twins)
    again = pair.run(["t.py::test", "old.py::test"], [None, None], None, _plan(), here_first=True, **RUN)
    assert again.error == first.error and len(twins) == 2


def test_a_pair_that_cannot_start_says_why_for_every_test() -> None:
    calls = []

    def start(side: str) -> Any:
        calls.append(side)
        raise OSError("no such interpreter")

    pair = FreshPair(start)
    for _ in range(2):
        check = pair.run(["a", "b"], [None, None], None, _plan(), here_first=True, **RUN)
        assert check.error == "the fresh pair of processes did not start (no such interpreter)"
    assert calls == ["here"]


def _look(new: list[float], ref: list[float]) -> PairedLook:
    return judge(new, ref, max_regression=0.05, alpha=0.01, n_looks=1, last=True)


#: The first pairs: +21.1% by the median, every pair slower (the exact signed-rank p of 10 pairs: 0.00098).
FIRST_NEW, FIRST_REF = [12.0, 12.1, 12.2, 12.05, 12.15, 12.3, 12.02, 12.25, 12.12, 12.08], [10.0] * 10


def test_a_fresh_pair_that_reads_it_regressed_confirms_the_first() -> None:
    first = _look(FIRST_NEW, FIRST_REF)
    fresh_new = [x + 0.1 for x in FIRST_NEW]
    look, new, ref, record = combine(first, FIRST_NEW, FIRST_REF, Recheck(_look(fresh_new, FIRST_REF), fresh_new,
                                                                          FIRST_REF))  # fmt: skip
    assert look.verdict == "regressed" and look.ratio == first.ratio and new == FIRST_NEW and ref == FIRST_REF
    assert look.reason.startswith(
        first.reason
    ) and "A fresh pair of processes, started alike, read it too: +22.1% over 10 pairs" in (look.reason)
    assert record["outcome"] == "confirmed" and record["fresh"]["verdict"] == "regressed"
    assert record["first"]["new_ms"] == FIRST_NEW and json.dumps(record, allow_nan=False)


def test_a_fresh_pair_that_reads_it_unchanged_overrules_the_first() -> None:
    first = _look(FIRST_NEW, FIRST_REF)
    same = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01, 9.99, 10.0]
    look, new, ref, record = combine(first, FIRST_NEW, FIRST_REF, Recheck(_look(same, FIRST_REF), same, FIRST_REF))
    assert look.verdict == "unchanged" and new == same and ref == FIRST_REF
    assert look.reason.startswith("A fresh pair of processes, started alike, read +0.0% over 10 pairs")
    assert (
        "This pytest process and its twin read +21.1% over 10 pairs (signed-rank p=0.00098), regressed" in look.reason
    )
    assert record["outcome"] == "not confirmed" and record["first"]["verdict"] == "regressed"


@pytest.mark.parametrize("fresh_new", [[8.0] * 10, [13.0, 7.0, 13.5, 7.5, 12.8, 12.9, 7.2, 13.1, 12.7, 9.0]])
def test_a_fresh_pair_that_disagrees_otherwise_leaves_it_inconclusive(fresh_new: list[float]) -> None:
    first = _look(FIRST_NEW, FIRST_REF)
    fresh = _look(fresh_new, FIRST_REF)
    assert fresh.verdict in ("improved", "inconclusive")
    look, new, _, record = combine(first, FIRST_NEW, FIRST_REF, Recheck(fresh, fresh_new, FIRST_REF))
    assert look.verdict == "inconclusive" and new == fresh_new and record["outcome"] == "not confirmed"
    assert f", {fresh.verdict} (" in look.reason and "The two pairs disagree, so neither is taken" in look.reason


def test_a_check_that_did_not_run_leaves_the_first_look_standing() -> None:
    first = _look(FIRST_NEW, FIRST_REF)
    look, new, _, record = combine(first, FIRST_NEW, FIRST_REF, Recheck(error="the fresh pair of processes did not "
                                                                              "start (boom)"))  # fmt: skip
    assert look.verdict == "regressed" and new == FIRST_NEW
    assert look.reason == f"{first.reason} A fresh pair of processes could not check it: the fresh pair of processes " \
        "did not start (boom)."  # fmt: skip
    assert record == {"first": record["first"], "outcome": "not run", "error": "the fresh pair of processes did not "
                      "start (boom)"}  # fmt: skip


def _verdict(check: Recheck) -> dict[str, Any]:
    first = _look(FIRST_NEW, FIRST_REF)
    look, new, ref, record = combine(first, FIRST_NEW, FIRST_REF, check)
    data = {"state": "paired", "look": look, "new_ms": new, "ref_ms": ref, "looks": 1, "metrics": {}, "recheck": record}
    return verdict_of("t.py::test", "HEAD~1 (abc)", data, {}).to_dict()


def test_the_verdict_keeps_the_recheck_and_its_message_gives_the_other_pairs() -> None:
    same = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01, 9.99, 10.0]
    overruled = _verdict(Recheck(_look(same, FIRST_REF), same, FIRST_REF))
    assert overruled["verdict"] == "unchanged" and overruled["new_ms"] == same
    assert overruled["recheck"]["outcome"] == "not confirmed" and json.dumps(overruled, allow_nan=False)
    text = ab_message(overruled)
    assert text.startswith("No significant change against HEAD~1 (abc): A fresh pair of processes")
    assert (
        "\n  first pairs (this pytest process and its twin): median pair ratio 1.211, CI 1.203-1.222; signed-rank "
        "p=0.00098" in text
    )
    assert text.endswith("10 pairs, regressed.")
    slower = [x + 0.1 for x in FIRST_NEW]
    confirmed = ab_message(_verdict(Recheck(_look(slower, FIRST_REF), slower, FIRST_REF)))
    assert "\n  fresh pairs (two more processes, started alike): median pair ratio 1.221, CI 1.213-1.232" in confirmed
    assert confirmed.startswith("Performance regression against HEAD~1 (abc): +21.1% slower over 10 pairs")
    unchecked = ab_message(_verdict(Recheck(error="boom")))
    assert "could not check it: boom." in unchecked and "fresh pairs (" not in unchecked


def test_no_recheck_line_without_one() -> None:
    verdict = ABVerdict("t", "regressed", "r", "HEAD~1", ratio=1.2, pairs=3, recheck=None)
    assert "pairs (" not in verdict.message() and verdict.to_dict()["recheck"] is None
    assert ab_message(verdict.to_dict()) == verdict.message()  # as report.json keeps it (recheck: null)
    assert math.isnan(ABVerdict("t", "new", "r", "HEAD~1").ratio)


def test_an_improved_latency_is_confirmed_or_overruled_the_same_way() -> None:
    faster = [8.0, 8.1, 8.05, 8.2, 8.15, 8.02, 8.12, 8.08, 8.18, 8.25]
    first = _look(faster, FIRST_REF)
    assert first.verdict == "improved"
    again = [x - 0.1 for x in faster]
    look, _, _, record = combine(first, faster, FIRST_REF, Recheck(_look(again, FIRST_REF), again, FIRST_REF))
    assert look.verdict == "improved" and record["outcome"] == "confirmed" and look.ratio == first.ratio
    same = [10.0, 10.01, 9.99, 10.0, 10.02, 9.98, 10.0, 10.01, 9.99, 10.0]
    look, _, _, record = combine(first, faster, FIRST_REF, Recheck(_look(same, FIRST_REF), same, FIRST_REF))
    assert look.verdict == "unchanged" and record["outcome"] == "not confirmed"
    assert "This pytest process and its twin read -18.9% over 10 pairs (signed-rank p=0.00098), improved: an " in (
        look.reason
    )
    look, _, _, _ = combine(first, faster, FIRST_REF, Recheck(_look(FIRST_NEW, FIRST_REF), FIRST_NEW, FIRST_REF))
    assert look.verdict == "inconclusive" and ", regressed (" in look.reason


@pytest.mark.parametrize(
    ("value", "verdicts"), [("changed", ("regressed", "improved")), ("regressed", ("regressed",)), ("off", ())]
)
def test_which_first_verdicts_are_rechecked(value: str, verdicts: tuple[str, ...]) -> None:
    from pytest_inferscope.ab.recheck import RECHECKED
    from pytest_inferscope.options import OPTIONS_BY_NAME

    assert RECHECKED[value] == verdicts
    assert set(RECHECKED) == set(OPTIONS_BY_NAME["ab_recheck"].choices or ())
    assert OPTIONS_BY_NAME["ab_recheck"].default == "changed"


def test_the_summary_line_counts_each_outcome_and_names_the_overruled() -> None:
    from pytest_inferscope.ab.notes import recheck_notes

    def result(nodeid: str, outcome: str | None) -> Any:
        return SimpleNamespace(nodeid=nodeid, ab={"verdict": "x", "recheck": {"outcome": outcome} if outcome else None})

    assert recheck_notes([result("a", None), SimpleNamespace(nodeid="b", ab=None)]) == []
    results = [result(f"t.py::o{i}", "not confirmed") for i in range(7)]
    results += [result("t.py::c", "confirmed"), result("t.py::n", "not run"), result("t.py::u", None)]
    assert recheck_notes(results) == [
        "inferscope A/B: 9 tests that read regressed or improved re-checked by a fresh pair of processes, started "
        "alike: 1 confirmed, 7 not confirmed, 1 not run (the fresh pair's verdict stands for t.py::o0, t.py::o1, "
        "t.py::o2, t.py::o3, t.py::o4 and 2 more; docs/ab.md)"
    ]
    assert recheck_notes([result("t.py::c", "confirmed")]) == [
        "inferscope A/B: 1 test that read regressed or improved re-checked by a fresh pair of processes, started "
        "alike: 1 confirmed"
    ]
