"""The sampler's clock in C (native/_tick.c), its pending calls driven directly.

On CPython 3.13+ they wake the main thread's eval loop; before, they run when the main thread takes the GIL back, so
the body here sleeps in short steps: the calls are the same either way.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import pytest

tick = pytest.importorskip("pytest_inferscope._tick", reason="the sampler clock in C is not built here")


def sleep_in_steps(seconds: float, step: float = 0.001) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(step)


def sleep_until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    """Short sleeps until `done()` (a loaded machine runs fewer of them a second), at most `timeout`."""
    end = time.perf_counter() + timeout
    while not done() and time.perf_counter() < end:
        time.sleep(0.001)


def test_pending_calls_come_in_the_main_thread_with_its_frame_and_none_after_the_stop() -> None:
    frames: list[str] = []
    tick.start(1_000_000, lambda frame: frames.append(frame.f_code.co_name if frame else "?"), 0, 0)
    try:
        sleep_until(lambda: len(frames) >= 20)
    finally:
        ticks = tick.stop()
    taken = len(frames)
    sleep_in_steps(0.01)
    assert 20 <= taken <= ticks and len(frames) == taken  # none after the stop
    # The frame the call interrupted: the loop's, or the predicate's it calls (CPython 3.13 runs a call in the lambda
    # too: caught once in 63 runs of these three files under the VM's 3.13.0, 2026-12-01, with one more failure there
    # not kept); never '?' (no frame) or another's
    assert "sleep_until" in frames and set(frames) <= {"sleep_until", "<lambda>"}, set(frames)


def test_one_call_at_most_waits_while_the_main_thread_is_in_c() -> None:
    calls: list[float] = []
    tick.start(1_000_000, lambda frame: calls.append(time.perf_counter()), 0, 0)
    try:
        # One C call: ~200 ticks, and no bytecode to run a call at. (Of 50 ms a loaded machine ran 25 ticks: the
        # clock's thread waits for a core too. 30 of 200 holds while it gets one in seven of its turns.)
        time.sleep(0.2)
        read = time.perf_counter()
        after_sleep = list(calls)
        sleep_in_steps(0.002)
    finally:
        ticks = tick.stop()
    # No burst of queued calls when it returns: one for the C call, then one a tick (1 ms apart) since that call ran
    # (2 once under load: the thread, descheduled after the first, found a later tick's call on its return).
    since = read - (after_sleep[0] if after_sleep else read)
    assert ticks >= 30 and 1 <= len(after_sleep) <= 2 + int(since / 0.001), (ticks, after_sleep, read)


def test_a_call_queued_for_a_stopped_callback_does_not_reach_the_next_one() -> None:
    phase = ["before"]
    old: list[str] = []
    new: list[FrameType | None] = []
    ticks_before: list[int] = []
    gate = threading.Lock()
    gate.acquire()

    def switch() -> None:  # while the main thread waits in one C call, where a call queued for `old` waits too
        time.sleep(0.05)  # ~50 ticks; 5 of them hold while the clock's thread gets one in ten of its turns
        ticks_before.append(tick.stop())
        phase[0] = "after"
        tick.start(10_000_000_000, new.append, 0, 0)  # the next tick is 10 s away
        gate.release()

    tick.start(1_000_000, lambda frame: old.append(phase[0]), 0, 0)
    switcher = threading.Thread(target=switch)
    switcher.start()
    try:
        gate.acquire()  # returns with the queued call: it finds another callback's start, and calls none
        sleep_in_steps(0.01)
    finally:
        switcher.join()
        tick.stop()
    assert ticks_before[0] >= 5 and "after" not in old and new == []


#: A call that outlasts the clock's interval and lets the GIL go at its end, in a thread with a profile function (as
#: under coverage or a debugger), while the main thread sleeps in short steps: how many calls ran, and how many steps.
OUTLASTING_CALL = """
import os, sys, time
from pytest_inferscope import _tick as tick

calls = []
def inner():
    return 1
def call(frame):
    calls.append(1)
    t = time.perf_counter()
    while time.perf_counter() - t < 0.012:  # longer than the 10 ms interval: the next tick comes meanwhile
        pass
    time.sleep(0)  # the GIL let go and taken back: 3.11 recomputes the eval breaker here
    inner()  # a Python function's entry, which 3.11 looped on under a profile function
sys.setprofile(lambda *args: None)
tick.start(10_000_000, call, 0, 0)
t0, steps = time.perf_counter(), 0
while time.perf_counter() - t0 < 0.5:
    time.sleep(0.0002)
    steps += 1
tick.stop()
sys.setprofile(None)
print(len(calls), steps)
"""


def test_no_call_is_queued_while_one_runs_so_a_long_call_neither_hangs_nor_starves_the_thread() -> None:
    # Until 2026-12-01 the clock queued the next call as soon as one began: under CPython 3.11 with a profile function
    # a call longer than the interval hung the thread (a plugin test hung so in this suite, 2026-12-01), and on every
    # version the calls ran back to back (3.12: 192 calls against 26 steps of the thread's own; 3.13: 32 against 3).
    import subprocess

    run = subprocess.run([sys.executable, "-c", OUTLASTING_CALL], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    calls, steps = map(int, run.stdout.split())
    assert 5 <= calls <= 0.5 / 0.012 + 2, (calls, steps)  # one a tick at most, and none while one runs
    assert steps >= calls, (calls, steps)  # the thread runs on between two calls


def test_an_exception_in_the_callback_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))

    def bad(frame: FrameType | None) -> None:
        raise RuntimeError("the sampler failed")

    tick.start(1_000_000, bad, 0, 0)
    try:
        sleep_until(lambda: len(reported) >= 5)  # no exception here
    finally:
        tick.stop()
    assert len(reported) >= 5 and all(isinstance(e, RuntimeError) for e in reported)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="interval_ns"):
        tick.start(5, print, 0, 0)
    with pytest.raises(ValueError, match="signum"):
        tick.start(1_000_000, print, 0, 1)
    with pytest.raises(TypeError):
        tick.start(1_000_000, print)


def test_each_call_can_ask_whether_the_watched_thread_was_at_work_at_its_tick() -> None:
    # A thread of its own watched: first waiting on an event (off a CPU), then hashing in C with the GIL let go (on
    # one). A call asks `at_work()`: -1 for a tick that found it waiting, else its CPU clock there.
    phase, seen = ["waiting"], []
    go, done = threading.Event(), threading.Event()

    def watched() -> None:
        go.wait()
        data = b"x" * (1 << 20)
        while not done.is_set():
            hashlib.sha256(data).digest()  # ~1 ms of C a call, the GIL let go

    thread = threading.Thread(target=watched)
    thread.start()
    time.sleep(0.01)  # in its wait
    tick.start(1_000_000, lambda frame: seen.append((phase[0], tick.at_work())), 0, 0, thread.ident, thread.native_id)
    try:
        sleep_until(lambda: len(seen) >= 20)
        phase[0] = "hashing"
        go.set()
        count = len(seen)
        sleep_until(lambda: len(seen) >= count + 20)
    finally:
        tick.stop()
        done.set()
        go.set()
        thread.join()
    waiting = [v for p, v in seen if p == "waiting"]
    hashing = [v for p, v in seen[count + 1 :] if p == "hashing"]  # (the first may be a tick before the switch)
    assert len(waiting) >= 20 and set(waiting) == {-1}, waiting
    # At work at most ticks (the clock's thread may take the watched thread's core on a 2-core machine: runnable then,
    # still at work), its CPU clock growing.
    at_work = [v for v in hashing if v >= 0]
    assert len(at_work) >= 0.8 * len(hashing) and at_work == sorted(at_work) and at_work[-1] > at_work[0], hashing
    # Not watched (no ids): -1 always.
    tick.start(1_000_000, lambda frame: seen.append(("unwatched", tick.at_work())), 0, 0)
    try:
        sleep_until(lambda: sum(p == "unwatched" for p, _ in seen) >= 5)
    finally:
        tick.stop()
    assert {v for p, v in seen if p == "unwatched"} == {-1}


def spin_for(seconds: float) -> None:
    """Pure Python: the GIL kept (a call from the clock waits for a switch of it before CPython 3.13)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def yield_for(seconds: float) -> None:
    """A body that lets the GIL go all the time, as torch ops and CUDA launches do."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(0)


def test_a_call_held_back_by_pure_python_is_nudged_and_one_let_through_is_not() -> None:
    # Before 3.13 a pending call queued from the clock's thread waits for the main thread's next GIL switch: at once
    # where the body lets the GIL go, never in pure Python. With nudge_ns the clock takes the GIL and gives it back
    # where the call waited that long and the thread was at work, and the call runs then; where the body lets the GIL
    # go it never has to. From 3.13 the eval loop runs the calls anyway: nothing to nudge.
    main = threading.main_thread()
    told: dict[str, list[bool]] = {}

    def collect(body: Callable[[float], None], nudge_ns: int) -> tuple[int, int]:
        name = f"{body.__name__}/{nudge_ns}"
        told[name] = []

        def call(frame: FrameType | None) -> None:
            clock = tick.at_work()  # the thread's CPU clock at the tick, or at the nudged call: within 0.5 ms of now
            told[name].append(clock >= 0 and time.thread_time_ns() - clock <= 500_000)

        tick.start(10_000_000, call, 0, 0, main.ident, main.native_id, nudge_ns)
        try:
            body(0.3)
        finally:
            ticks = tick.stop()
        return ticks, tick.nudges()

    nudge = 1_250_000
    old = sys.version_info < (3, 13)
    ticks, nudges = collect(spin_for, nudge)
    calls = told[f"spin_for/{nudge}"]
    assert len(calls) >= 0.6 * ticks and ticks >= 10, (len(calls), ticks)
    assert (nudges >= 0.3 * len(calls)) if old else nudges <= 0.3 * len(calls), (nudges, len(calls))
    # The thread computed from the nudge to the call: at work there by its own clock (the nudge's state, not a tick's)
    assert sum(calls) >= 0.8 * len(calls), calls
    ticks, nudges = collect(yield_for, nudge)
    calls = told[f"yield_for/{nudge}"]
    assert len(calls) >= 0.6 * ticks and nudges <= 0.3 * ticks, (len(calls), ticks, nudges)
    if old:  # without the nudge pure Python holds every call back
        ticks, nudges = collect(spin_for, 0)
        assert told["spin_for/0"] == [] and nudges == 0 and ticks >= 10, (told["spin_for/0"], ticks)


def test_a_thread_waiting_is_not_nudged_and_its_call_says_so() -> None:
    # Asleep at the nudge's time: the call runs as the sleep ends, and the state it reads is the tick's (waiting: -1).
    main = threading.main_thread()
    seen: list[int] = []
    tick.start(10_000_000, lambda frame: seen.append(tick.at_work()), 0, 0, main.ident, main.native_id, 1_250_000)
    try:
        for _ in range(10):
            time.sleep(0.025)
    finally:
        tick.stop()
    nudges = tick.nudges()
    assert len(seen) >= 5 and nudges <= len(seen) // 4, (seen, nudges)
    assert sum(v == -1 for v in seen) >= 0.7 * len(seen), seen


def test_a_nudge_is_refused_with_a_signal_and_below_zero() -> None:
    with pytest.raises(ValueError, match="nudge_ns"):
        tick.start(1_000_000, print, 10, 1, 0, 0, 1_000)
    with pytest.raises(ValueError, match="nudge_ns"):
        tick.start(1_000_000, print, 0, 0, 0, 0, -1)
