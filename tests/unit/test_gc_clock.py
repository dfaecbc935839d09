"""Python's garbage collector in the rounds' counters (collectors/pygc.py) and the rule that reads them."""

from __future__ import annotations

import gc

import pytest
from test_analyzer import build
from test_collectors import run

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.collectors import pygc
from pytest_inferscope.merger import merge


class _Node:
    def __init__(self, nxt: object) -> None:
        self.nxt = nxt
        self.me = self  # a cycle: only the collector frees it


def _cycles(n: int = 30_000, chain: int = 100) -> None:
    """`n` self-referencing nodes in chains of `chain`, each chain garbage as the next begins. In chains of 100 the
    young collections within the round free them, whatever garbage the process held before (one chain of all `n`,
    alive to the round's end, had its first round collect nothing in a fresh CI worker: what earlier tests left)."""
    for _ in range(n // chain):
        head = None
        for _ in range(chain):
            head = _Node(head)


def test_the_rounds_count_the_test_threads_garbage_collections() -> None:
    coll, raw = run(_cycles, rounds=3, warmup=1, cpu="off")
    rows = raw.meta["rounds"]
    assert all(r["gc_collections"] > 0 and r["gc_ns"] > 0 and r["gc_collected"] > 0 for r in rows), rows
    assert all(r["gc_ns"] < r["wall_ns"] for r in rows)
    assert all(0 < r["gc_freeing_ns"] <= r["gc_ns"] and 0 <= r["gc_full_ns"] <= r["gc_ns"] for r in rows), rows
    assert coll.gc is not None and coll.gc not in gc.callbacks  # taken out at the stop
    _, quiet = run(lambda: sum(range(1000)), rounds=2, warmup=0, cpu="off")
    assert all(r["gc_collections"] == 0 and r["gc_ns"] == 0 for r in quiet.meta["rounds"])


def test_a_nested_clock_stopped_leaves_the_outer_ones_totals_read() -> None:
    outer = pygc.start()
    try:
        gc.collect()
        inner = pygc.start()
        gc.collect()
        assert pygc.totals()[1] == 1  # the inner clock's: one collection since it started
        pygc.stop(inner)
        assert pygc.totals()[1] == 2 and inner not in gc.callbacks
    finally:
        pygc.stop(outer)
    assert pygc.totals() == (0, 0, 0, 0, 0, 0) and outer not in gc.callbacks


def test_the_clock_times_apart_the_collections_that_freed_objects_and_the_full_ones(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    now = iter([1000, 1010, 1100, 1130, 1200, 2200, 3000, 3500])  # four collections: 10, 30, 1000 and 500 ns
    monkeypatch.setattr(pygc.time, "perf_counter_ns", lambda: next(now))
    clock = pygc.GcClock()
    for generation, collected in ((0, 0), (1, 7), (2, 0), (2, 40)):
        info = {"generation": generation, "collected": collected, "uncollectable": 0}
        clock("start", info)
        clock("stop", info)
    assert (clock.ns, clock.collections, clock.full, clock.collected) == (1540, 4, 2, 47)
    assert clock.freeing_ns == 30 + 500 and clock.full_ns == 1000 + 500


def _with_gc(raw, share: float, collections: int = 40, full: int = 2, collected: int = 50_000, split=None):  # type: ignore[no-untyped-def]
    """`split`: the shares of the round in collections that freed objects and in full ones (None: a round recorded
    before the clock timed them apart)."""
    for row in raw.meta["rounds"]:
        row.update(gc_ns=int(row["wall_ns"] * share), gc_collections=collections, gc_full=full, gc_collected=collected)
        if split is not None:
            row.update(gc_freeing_ns=int(row["wall_ns"] * split[0]), gc_full_ns=int(row["wall_ns"] * split[1]))
    return raw


def test_a_body_whose_time_is_the_garbage_collectors_is_told_so_not_to_speed_up_the_allocating_call() -> None:
    # 200,000 small objects with cycles a round (the 2-core VM, 2026-11-29): cpu_bound, "Speed up or take off the
    # critical path: test_work:Node.__init__" (392 ms/round) first, the collector's 415 ms of the 448 not named.
    raw = _with_gc(build(cpu_busy=0.98, samples=[("t:Node.__init__ (t.py:3)", 0.7), ("t:test_gc (t.py:9)", 0.28)]), 0.8)
    a = analyze(merge(raw))
    assert a.bottleneck == "cpu_bound"
    (f,) = [f for f in a.findings if f.rule == "python_gc"]
    assert f.share == pytest.approx(0.8, rel=0.01)
    assert "garbage collector" in f.summary and "8.00 ms" in f.summary, f.summary
    assert f.evidence["collections per round"] == 40 and f.evidence["full (generation 2) collections per round"] == 2
    first = a.suggestions[0]
    assert first.rule == "python_gc" and first.saving_ms == pytest.approx(8.0, rel=0.01), first
    assert "gc.disable()" in first.action and "outside the timed call" in first.action, first.action
    # Recorded before the clock timed the collections apart: breaking the cycles and freezing are bounded by it all.
    others = [s for s in f.suggestions[1:]]
    assert [s.saving_ms for s in others] == [0.0, 0.0] and all(
        "between nothing and 8.00 ms" in s.rationale for s in others
    )
    # A few young collections (5% of the round) are no finding; nor a trace recorded before the counters.
    assert not any(f.rule == "python_gc" for f in analyze(merge(_with_gc(build(cpu_busy=0.98), 0.05))).findings)
    assert not any(f.rule == "python_gc" for f in analyze(merge(build(cpu_busy=0.98))).findings)


def test_breaking_the_cycles_and_freezing_claim_no_more_than_the_collections_they_take_away() -> None:
    # A call building 60,000 objects with cycles, kept to its end (benchmarks/bench_gc_savings.py, the 2-core VM,
    # 2026-11-30, medians of four): 46.4 ms of collector a round (79%), 33.3 in the collections that freed objects,
    # 39.4 in the full ones. The collector's whole time had been the saving of "gc.freeze(), no cycles, or
    # gc.disable()": breaking the cycles saved 15.2 ms (their freeing went to reference counting, the walks of the live
    # objects stayed), gc.freeze() 22.1.
    raw = _with_gc(build(cpu_busy=0.98), 0.79, collections=171, full=1, collected=120_000, split=(0.57, 0.67))
    (f,) = [f for f in analyze(merge(raw)).findings if f.rule == "python_gc"]
    gc_ms = f.evidence["collector time per round (ms)"]
    freeing = f.evidence["in collections that freed objects, per round (ms)"]
    full = f.evidence["in full collections, per round (ms)"]
    assert freeing == pytest.approx(gc_ms * 0.57 / 0.79, rel=0.01) and full == pytest.approx(
        gc_ms * 0.67 / 0.79, rel=0.01
    )
    disable, cycles, freeze = f.suggestions
    assert "gc.disable()" in disable.action and disable.saving_ms == pytest.approx(gc_ms)
    assert "cycles" in cycles.action and cycles.saving_ms == 0.0, cycles  # not estimated: bounded, not claimed
    assert f"between nothing and {freeing:.2f} ms" in cycles.rationale and "reference counting" in cycles.rationale
    assert "gc.freeze()" in freeze.action and freeze.saving_ms == 0.0
    assert f"between nothing and {full:.2f} ms" in freeze.rationale and "1 full collections" in freeze.rationale
    # No cycle freed and no full collection (live objects walked by young collections): neither is suggested.
    raw = _with_gc(build(cpu_busy=0.98), 0.3, collections=150, full=0, collected=0, split=(0.0, 0.0))
    (f,) = [f for f in analyze(merge(raw)).findings if f.rule == "python_gc"]
    assert len(f.suggestions) == 1 and "gc.disable()" in f.suggestions[0].action


@pytest.mark.parametrize("sampler", ["thread", "signal"])
def test_samples_taken_in_the_collectors_timing_are_the_collectors_under_the_allocating_call(sampler: str) -> None:
    # The GC-heavy body of the 2-core VM (2026-11-29) once timed: 38 ms of its 444 ms rounds left in the hotspots, the
    # rest sampled inside the timing callback, a frame of the plugin's, so "<harness>" and left out.
    from pytest_inferscope.collectors.cpu_tick import SignalSampler
    from pytest_inferscope.events import Kind

    if sampler == "signal" and SignalSampler.unavailable():
        pytest.skip(SignalSampler.unavailable())
    _, raw = run(lambda: _cycles(200_000, chain=200_000), rounds=2, warmup=0, sampler=sampler, sample_interval_ms=1.0)
    ev = raw.events
    names = [raw.strings[i] for i in ev["name"][ev["kind"] == Kind.SAMPLE]]
    collector = [n for n in names if n.endswith(";gc:collect (Python's garbage collector)")]
    assert collector and all("test_gc_clock:_cycles" in n for n in collector), names


def test_the_collectors_samples_are_not_offered_as_a_function_to_speed_up() -> None:
    from pytest_inferscope.events import GC_FRAME

    body = "t:test_gc (t.py:9);t:Node.__init__ (t.py:3)"
    raw = _with_gc(build(cpu_busy=0.98, samples=[(f"{body};{GC_FRAME}", 0.8), (body, 0.18)]), 0.8)
    a = analyze(merge(raw))
    assert a.hotspots[0].function == GC_FRAME  # shown where the time went
    assert not any("gc:collect" in s.action for s in a.suggestions), [s.action for s in a.suggestions]
    assert a.suggestions[0].rule == "python_gc"
