"""Each CPU sample says how long the test thread was on a CPU over the time it stands for (events.sample_flags)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_collectors import run

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.collectors.cpu_tick import SignalSampler
from pytest_inferscope.events import Kind, sample_at_work, sample_on_cpu_ns
from pytest_inferscope.merger import merge

#: The loops' CPU and wall ns, by the test thread's own clocks.
LOOPS = [0, 0]


def _sleep_then_spin() -> None:
    time.sleep(0.03)
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    end = time.perf_counter() + 0.03
    while time.perf_counter() < end:
        pass
    LOOPS[0] += time.thread_time_ns() - cpu
    LOOPS[1] += time.perf_counter_ns() - wall


@pytest.mark.parametrize("sampler", ["thread", "pending", "signal"])
def test_samples_in_a_sleep_are_off_cpu_and_in_a_loop_on_it(sampler: str) -> None:
    if sampler != "thread" and SignalSampler.unavailable(sampler):
        pytest.skip(SignalSampler.unavailable(sampler))
    LOOPS[:] = [0, 0]
    _, raw = run(_sleep_then_spin, rounds=3, warmup=0, sampler=sampler, sample_interval_ms=2.0)
    ev = raw.events[raw.events["kind"] == Kind.SAMPLE]
    known, on_cpu = sample_on_cpu_ns(ev["flags"])
    assert len(ev) >= 10 and known.all(), (len(ev), known)
    share = on_cpu / np.maximum(1, ev["end"] - ev["start"])
    # At most the span: the clocks are read one after the other, and a thread descheduled between the reads of one
    # sample read more CPU time than wall time over the next (over 1.2 once in CI; under load 4 runs in 12 over 1.0)
    assert (share <= 1.0).all(), share
    # The sleep's samples (taken on its line) are off CPU, the loop's on it; the signal sampler samples the sleep when
    # it returns.
    sleep_line = _sleep_then_spin.__code__.co_firstlineno + 1
    asleep = ev["value"] == sleep_line
    assert asleep.any() and (~asleep).any(), ev["value"]
    dur = (ev["end"] - ev["start"]).astype(float)
    slept, spun = on_cpu[asleep].sum() / dur[asleep].sum(), on_cpu[~asleep].sum() / dur[~asleep].sum()
    # The loop was on a CPU as much as the machine let it: alone on a core ~1.0, beside the suite's other worker and
    # other sessions on the 2 cores 0.07-0.8 by the thread's own clocks (`spun > slept + 0.2` failed there, at 0.21).
    # Its samples read that share (0.70-1.00 of it in 24 runs, the sleep's tail in the first sample after it).
    loop_share = LOOPS[0] / LOOPS[1]
    assert slept < 0.2 and 0.5 * loop_share <= spun, (slept, spun, loop_share)


def _spin_for(seconds: float) -> None:
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    LOOPS[0] += time.thread_time_ns() - cpu
    LOOPS[1] += time.perf_counter_ns() - wall


#: The calls of `_sleep_then_work`, warm-up included.
CALLS = [0]


def _sleep_then_work() -> None:
    # 23 ms, not a multiple of the 10 ms interval: the samples' instants drift over sleep and loop. Asleep 39% of the
    # round: off_cpu_wait needs 30% off a CPU other than waiting for a core.
    CALLS[0] += 1
    for _ in range(3):
        time.sleep(0.009)
        _spin_for(0.014)


@pytest.mark.parametrize("sampler", ["thread", "pending", "signal"])
def test_a_sample_says_whether_the_thread_was_at_work_and_the_wait_is_not_put_where_it_worked(sampler: str) -> None:
    # `inferscope run` of a script sleeping 3 x 10 ms between bursts of work (the 2-core VM, 2026-11-30): "where it
    # waited: script:f", though `f` never waits: a sample taken in `f` stood for the sleep before it too. So each
    # sample says whether the thread was at work at its instant (events.SAMPLE_AT_WORK), and the analysis puts its
    # time off a CPU where the thread was seen waiting. Before the change the loop was named in 6 of 6 such runs.
    if sampler != "thread" and SignalSampler.unavailable(sampler):
        pytest.skip(SignalSampler.unavailable(sampler))
    LOOPS[:], CALLS[:] = [0, 0], [0]
    _, raw = run(_sleep_then_work, rounds=4, warmup=1, sampler=sampler)
    ev = raw.events[raw.events["kind"] == Kind.SAMPLE]
    in_loop = ev["value"] == _spin_for.__code__.co_firstlineno + 3
    working = sample_at_work(ev["flags"])
    # In the loop, the thread at work at most instants the machine let it work (the thread sampler tells it by the GIL
    # it waited for, the signal sampler's clock by the thread's CPU clock or its state; beside two spinning processes
    # on the 2 cores, 0.36-0.44 of them). In the sleep, a sample is at work where its tick came in the loop and the
    # sample as the sleep began (the time off a CPU before the tick is not that stack's either). Always at work, the
    # wait would be nowhere (below); never, the loop fails here.
    assert in_loop.any() and (~in_loop).any(), ev["value"]
    assert working[in_loop].mean() >= 0.5 * LOOPS[0] / LOOPS[1], (working[in_loop], LOOPS)
    (wait,) = [f for f in analyze(merge(raw)).findings if f.rule == "off_cpu_wait"]
    sites = {v.split(" (")[0]: float(v.rsplit(": ", 1)[1].split(" ms")[0]) for k, v in wait.evidence.items()
             if k.startswith("where it waited")}  # fmt: skip
    assert "test_sample_cpu:_sleep_then_work" in sites, wait.evidence
    # The loop is named at most for the time it was off a CPU itself. That is mostly waiting for a core (the rounds'
    # run-queue wait), but not only: on a crowded machine the loop, made to hand the GIL to the sampler thread, waits
    # off a CPU and not runnable while that thread waits for a core (the loop's own schedstat beside 3 spinners on the
    # 2-core VM: 1.3-4.1 ms a round blocked so, 2026-11-30; a CI run named the loop 8.88 ms a round against a run-queue
    # wait of 3.96). The sleep's time put on the loop (before the change, ~27 ms a round) stays far over either.
    queued = np.mean([r["runqueue_ns"] for r in raw.meta["rounds"] if r["kind"] == "MEASURED"]) / 1e6
    loop_off_cpu = (LOOPS[1] - LOOPS[0]) / CALLS[0] / 1e6
    named = sites.get("test_sample_cpu:_spin_for", 0.0)
    assert named <= max(queued, loop_off_cpu) + 1.0, (wait.evidence, queued, loop_off_cpu)
