"""The A/B verdict with a busy pinned core (ab/paired.py: busy_share, judge's CPU-time check): on synthetic pairs
shaped as measured next to processes spinning on the core (docs/ab.md, "A busy pinned core")."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from pytest_inferscope.ab.lockstep import lockstep
from pytest_inferscope.ab.paired import BUSY_MIN, busy_share, judge, verdict_from

KW: dict[str, Any] = {"max_regression": 0.05, "alpha": 0.01, "n_looks": 1, "last": True}


def _busy_pairs(cpu_ratio: float, hit_ref: float, hit_new: float, n: int = 20, seed: int = 0) -> dict[str, list[float]]:
    """Pairs of a 2 ms body on a core shared with a spinner: each round's CPU time, and in a share of each side's
    rounds (`hit_new`, `hit_ref`) a preemption inside the round (the neighbour's slice, 4-12 ms, in the wall time and
    the wait); every round waits for the core after it too (the wait read around the round, twin.core_clocks)."""
    rng = np.random.default_rng(seed)
    cpu_ref = rng.normal(2.0, 0.02, size=n)
    cpu_new = cpu_ref * cpu_ratio * np.exp(rng.normal(0, 0.01, size=n))
    out: dict[str, list[float]] = {}
    for side, cpu, hit in (("new", cpu_new, hit_new), ("ref", cpu_ref, hit_ref)):
        inside = np.where(rng.random(n) < hit, rng.uniform(4, 12, size=n), 0.0)
        out[f"{side}_ms"] = (cpu + inside).tolist()
        out[f"{side}_cpu_ms"] = cpu.tolist()
        out[f"{side}_wait_ms"] = (inside + rng.uniform(2, 6, size=n)).tolist()
    return out


def _clocks(p: dict[str, list[float]]) -> dict[str, list[float]]:
    return {k: v for k, v in p.items() if k.endswith(("_wait_ms", "_cpu_ms"))}


def test_unchanged_code_on_a_busy_core_is_not_called_improved() -> None:
    """The session-38 case: the same 2 ms body, the twin's rounds preempted in 14 of 20 pairs, read -56.7% improved."""
    p = _busy_pairs(1.0, hit_ref=0.7, hit_new=0.1, seed=1)
    assert judge(p["new_ms"], p["ref_ms"], **KW).verdict == "improved"  # the wall times alone, as before
    look = judge(p["new_ms"], p["ref_ms"], clocks=_clocks(p), **KW)
    assert look.busy >= BUSY_MIN and look.final
    assert look.verdict == "inconclusive", look.reason
    assert "pinned CPU core was busy" in look.reason and "CPU time says unchanged" in look.reason, look.reason
    assert "taskset" in look.reason


def test_the_other_way_it_is_not_called_regressed() -> None:
    p = _busy_pairs(1.0, hit_ref=0.1, hit_new=0.7, seed=2)
    assert judge(p["new_ms"], p["ref_ms"], **KW).verdict == "regressed"
    assert judge(p["new_ms"], p["ref_ms"], clocks=_clocks(p), **KW).verdict == "inconclusive"


def test_a_real_slowdown_on_a_busy_core_is_still_caught() -> None:
    """20% more work on both clocks, preemptions falling on both sides alike: regressed, and the reason says why it
    holds though the core was busy."""
    p = _busy_pairs(1.2, hit_ref=0.3, hit_new=0.3, n=60, seed=3)
    look = judge(p["new_ms"], p["ref_ms"], clocks=_clocks(p), **KW)
    assert look.busy >= BUSY_MIN
    assert look.verdict == "regressed", look.reason
    assert "the rounds' CPU time gives the same verdict" in look.reason


def test_a_quiet_core_judges_the_wall_times_alone() -> None:
    """No waits: a body whose wall time rose and CPU time did not (a longer GPU wait) is regressed, as before."""
    n = 20
    rng = np.random.default_rng(4)
    ref = rng.normal(3.0, 0.03, size=n)
    new = ref * 1.3
    clocks = {"new_wait_ms": [0.0] * n, "ref_wait_ms": [0.01] * n, "new_cpu_ms": [1.0] * n, "ref_cpu_ms": [1.0] * n}
    look = judge(new.tolist(), ref.tolist(), clocks=clocks, **KW)
    assert look.busy < BUSY_MIN and look.verdict == "regressed" and "busy" not in look.reason


def test_a_twin_that_does_not_say_its_waits_is_judged_as_before() -> None:
    """A twin of an earlier version sends no waits (NaN here): the wall times decide, as they did."""
    p = _busy_pairs(1.0, hit_ref=0.7, hit_new=0.1, seed=1)
    clocks = {**_clocks(p), "ref_wait_ms": [math.nan] * 20}
    look = judge(p["new_ms"], p["ref_ms"], clocks=clocks, **KW)
    assert math.isnan(look.busy) and look.verdict == "improved"


def test_busy_share_is_the_waits_over_the_rounds_time() -> None:
    clocks = {"new_wait_ms": [1.0, 3.0], "ref_wait_ms": [0.0, 4.0]}
    assert busy_share([2.0, 2.0], [2.0, 2.0], clocks) == 1.0
    assert math.isnan(busy_share([2.0], [2.0], {}))
    assert math.isnan(busy_share([], [], clocks))


def test_an_unclear_look_on_a_busy_core_takes_more_pairs() -> None:
    """The wall times clear at the first look, the CPU times not yet: not final, so the sequential rule goes on."""
    p = _busy_pairs(1.0, hit_ref=0.7, hit_new=0.1, n=6, seed=5)
    look = judge(p["new_ms"], p["ref_ms"], clocks=_clocks(p), **{**KW, "last": False})
    assert look.busy >= BUSY_MIN
    assert not look.final and look.verdict == "inconclusive"


def test_the_verdict_keeps_the_clocks_as_json() -> None:
    """report.json carries each pair's waits and CPU times, and the share; a NaN (not said) is null."""
    p = _busy_pairs(1.0, hit_ref=0.7, hit_new=0.1, seed=1)
    clocks = {**_clocks(p), "ref_cpu_ms": [math.nan] * 20}
    look = judge(p["new_ms"], p["ref_ms"], clocks=clocks, **KW)
    d = verdict_from("t", "HEAD (abc)", p["new_ms"], p["ref_ms"], look, 1, []).to_dict()
    back = json.loads(json.dumps(d, allow_nan=False))
    assert look.verdict == "inconclusive" and "did not say its rounds' CPU time" in look.reason
    assert back["clocks"]["ref_cpu_ms"] == [None] * 20 and len(back["clocks"]["new_wait_ms"]) == 20
    assert back["busy"] == look.busy >= BUSY_MIN


class _Twin:
    """Answers each round with its ms, its wait and its CPU time, as the twin does (twin.TwinServer._round_done)."""

    def __init__(self) -> None:
        self._answers: list[dict[str, Any]] = []

    def send(self, **msg: Any) -> None:
        if msg["cmd"] == "round":
            self._answers.append({"ms": 10.0, "wait_ms": 7.0, "cpu_ms": 3.0})
        elif msg["cmd"] == "end":
            self._answers.append({"type": "result", "metrics": {}, "foreign": [], "error": ""})

    def recv(self) -> dict[str, Any]:
        return self._answers.pop(0)


def test_the_lockstep_keeps_both_sides_clocks_per_pair() -> None:
    from test_ab_lockstep import FakeCollection, _data, _plan

    data = _data()
    lockstep(_Twin(), FakeCollection([]), lambda: sum(range(1000)), _plan(), data, 0.1, 0.05)  # type: ignore[arg-type]
    clocks = data["look"].clocks
    assert clocks["ref_wait_ms"] == [7.0] * 3 and clocks["ref_cpu_ms"] == [3.0] * 3
    assert len(clocks["new_cpu_ms"]) == 3 and all(x >= 0 for x in clocks["new_cpu_ms"] + clocks["new_wait_ms"])


def test_core_clocks_read_the_collections_open_schedstat() -> None:
    """The wait is read from the collection's kept-open schedstat where it has one (no file opened before a body)."""
    from types import SimpleNamespace

    from pytest_inferscope.ab.twin import core_clocks

    proc = SimpleNamespace(runqueue_ns=lambda: 42)
    wait, cpu = core_clocks(SimpleNamespace(proc=proc))  # type: ignore[arg-type]
    assert wait == 42 and cpu > 0
    wait, _ = core_clocks(SimpleNamespace(proc=None))  # type: ignore[arg-type]
    assert wait >= 0  # read afresh from procfs
