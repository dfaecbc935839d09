from __future__ import annotations

import sys
import threading
import time

import pytest

from pytest_inferscope.buffer import TraceBuffer
from pytest_inferscope.collectors import (
    RAISED_FLAG,
    Collection,
    CollectionOptions,
    SamplerThread,
    active,
    mark_event,
    scope,
)
from pytest_inferscope.collectors.cpu import Sampler
from pytest_inferscope.events import Kind, host_clock_ns
from pytest_inferscope.rounds import RoundKind, kinds_of


def busy_python(n: int = 200_000) -> int:
    total = 0
    for i in range(n):
        total += i % 7
    return total


def run(body, rounds: int = 3, warmup: int = 1, **opts):
    coll = Collection(CollectionOptions(**opts))
    coll.start()
    try:
        coll.run_rounds(body, rounds, warmup)
    finally:
        raw = coll.stop()
    return coll, raw


def test_rounds_scopes_and_marks_are_recorded() -> None:
    def body() -> None:
        with scope("tokenize"):
            busy_python(10_000)
        mark_event("batch_ready", size=32)

    _, raw = run(body, rounds=3, warmup=1)
    ev = raw.events
    rounds = ev[ev["kind"] == Kind.ROUND]
    assert list(kinds_of(rounds["flags"])) == [RoundKind.WARMUP] + [RoundKind.MEASURED] * 3
    assert (ev["kind"] == Kind.SCOPE).sum() == 4 and (ev["kind"] == Kind.TEST).sum() == 1
    marks = ev[ev["kind"] == Kind.MARK]
    assert raw.attrs[marks["value"][0]] == {"size": 32}
    assert len(raw.meta["rounds"]) == 4 and raw.meta["rounds"][1]["thread_cpu_ns"] > 0
    assert active() is None


def test_sampler_attributes_time_to_the_busy_function() -> None:
    def for_100_ms() -> None:  # by time, not by count: a loaded machine must still give enough samples
        end = time.perf_counter() + 0.1
        while time.perf_counter() < end:
            busy_python(20_000)

    coll, raw = run(for_100_ms, rounds=3, warmup=0, sample_interval_ms=1.0)
    ev = raw.events
    samples = ev[ev["kind"] == Kind.SAMPLE]
    assert len(samples) >= 5
    stacks = [raw.strings[n] for n in samples["name"]]
    assert sum("busy_python" in s for s in stacks) >= len(stacks) // 2
    assert not any("/_pytest/" in s or "pluggy" in s for s in stacks)
    info = coll.collectors_info()[0]
    assert info.active and "sampling" in info.mode and 0 <= info.overhead < 0.5


def test_trace_mode_records_calls_and_estimates_overhead() -> None:
    coll, raw = run(lambda: [busy_python(10) for _ in range(50)], rounds=1, warmup=0, cpu="trace")
    calls = raw.events[raw.events["kind"] == Kind.CALL]
    names = {raw.strings[n] for n in calls["name"]}
    assert any("busy_python" in n for n in names) and len(calls) >= 50
    assert coll.collectors_info()[0].overhead > 0


def test_trace_mode_gives_the_hotspots_of_the_traced_calls() -> None:
    # A traced collection takes no samples: its report read "No CPU samples" beside every call of the rounds.
    from pytest_inferscope.analyzer import analyze
    from pytest_inferscope.merger import merge

    def quick() -> int:
        return busy_python(2_000)

    def slow() -> int:
        return sum(i % 7 for i in range(100_000)) + quick()

    _, raw = run(lambda: [slow(), quick()], rounds=2, warmup=0, cpu="trace")
    spots = {h.function.split(" (")[0]: h for h in analyze(merge(raw)).hotspots}
    slow_spot = spots["test_collectors:test_trace_mode_gives_the_hotspots_of_the_traced_calls.<locals>.slow"]
    genexpr = next(h for f, h in spots.items() if f.endswith("slow.<locals>.<genexpr>"))
    assert genexpr.self_ms > spots["test_collectors:busy_python"].self_ms  # 100,000 items against 2 x 2,000
    assert slow_spot.total_ms >= genexpr.self_ms + slow_spot.self_ms


def test_trace_mode_traces_the_rounds_alone_without_the_plugins_frames() -> None:
    # Traced from the collection's start, the harness between rounds and the plugin's own frames were in the trace,
    # and a scope's __enter__ (which records the scope's start inside it) crossed the scope's span.
    def body() -> None:
        with scope("outer"):
            busy_python(10)

    _, raw = run(body, rounds=2, warmup=1, cpu="trace")
    ev = raw.events
    calls, rounds, scopes = (ev[ev["kind"] == k] for k in (Kind.CALL, Kind.ROUND, Kind.SCOPE))
    names = [raw.strings[n] for n in calls["name"]]
    assert sum("busy_python" in n for n in names) == 3 and not any("pytest_inferscope" in n for n in names)
    for c in calls:  # every call inside a round
        assert any(r["start"] <= c["start"] and c["end"] <= r["end"] for r in rounds), raw.strings[c["name"]]
    spans = sorted([*calls, *scopes], key=lambda e: (e["start"], -e["end"]))
    open_ends: list[int] = []
    for e in spans:  # properly nested: each span inside the spans still open where it starts
        open_ends = [end for end in open_ends if end > e["start"]]
        assert all(e["end"] <= end for end in open_ends)
        open_ends.append(e["end"])


def test_a_raising_scope_is_recorded_and_flagged() -> None:
    def body() -> None:
        with scope("explodes"):
            raise ValueError("boom")

    coll = Collection(CollectionOptions())
    coll.start()
    with pytest.raises(ValueError, match="boom"):
        coll.run_rounds(body, 2, 0)
    raw = coll.stop()
    ev = raw.events
    assert ev[ev["kind"] == Kind.SCOPE]["flags"][0] & RAISED_FLAG
    assert ev[ev["kind"] == Kind.ROUND]["flags"][0] & RAISED_FLAG
    assert active() is None


def test_no_sampler_thread_survives_stop() -> None:
    run(lambda: time.sleep(0.01), rounds=2)
    assert not [t for t in threading.enumerate() if t.name == "inferscope-sampler"]


def test_a_parked_sampler_thread_samples_one_collection_after_another_and_ends_on_close() -> None:
    host = SamplerThread()
    threads = []

    def body() -> None:
        threads.extend(t for t in threading.enumerate() if t.name == "inferscope-sampler")
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            busy_python(20_000)

    for _ in range(3):
        coll = Collection(CollectionOptions(sample_interval_ms=1.0), sampler_thread=host)
        coll.start()
        coll.run_rounds(body, 1, 0)
        raw = coll.stop()
        # Every collection is sampled (at least once: a loaded machine may delay the sampler's wake-ups).
        assert (raw.events["kind"] == Kind.SAMPLE).sum() >= 1
        assert raw.meta["sampler"]["samples"] >= 1 and raw.meta["sampler"]["cost_ns"] > 0
    assert len(threads) == 3 and threads[0] is threads[1] is threads[2]  # one thread, parked between them
    host.close()
    assert not [t for t in threading.enumerate() if t.name == "inferscope-sampler"]


def test_a_ticking_sampler_thread_takes_up_samplers_unwoken_and_gives_back_those_it_never_ran() -> None:
    """Waking the parked thread and waiting for it cost ~1.2 ms a collection on the 2-core VM. While collections
    follow one another the thread ticks instead: a collection shorter than a tick never runs its sampler (and
    its stop waits for nothing); a longer one is sampled, its first sample an interval after its start."""
    host = SamplerThread()

    def collect(interval_ms: float, body_s: float) -> tuple[Collection, object]:
        coll = Collection(CollectionOptions(sample_interval_ms=interval_ms), sampler_thread=host)
        coll.start()
        coll.run_rounds(lambda: time.sleep(body_s), 1, 0)
        return coll, coll.stop()

    def soon(parked: bool) -> bool:  # the thread's state within a second (a loaded machine runs it late)
        end = time.monotonic() + 1.0
        while host._parked is not parked and time.monotonic() < end:
            time.sleep(0.002)
        return host._parked is parked

    try:
        collect(2000.0, 0.0)  # the thread starts (woken), runs it, then ticks every 2 s
        assert soon(parked=False)
        never_ran = 0
        for _ in range(3):  # each a few ms, between ticks 2 s apart: given back unrun (a tick inside one: run)
            _, raw = collect(2000.0, 0.0)
            never_ran += raw.meta["sampler"]["cost_ns"] == 0
        assert never_ran >= 2
        interval_ms = 40.0
        _, raw = collect(interval_ms, 0.2)  # five intervals long: taken up and sampled
        samples = raw.events[raw.events["kind"] == Kind.SAMPLE]
        assert len(samples) >= 2 and raw.meta["sampler"]["cost_ns"] > 0
        assert int((samples["end"] - samples["start"]).min()) >= 0.8 * interval_ms * 1e6  # none much under an interval
        host.quiet()  # a collection that samples nothing: the thread parks at its next tick
        assert soon(parked=True)
        collect(interval_ms, 0.0)  # woken again, then ticking until TICKING_S after the last collection
        assert soon(parked=False) and soon(parked=True)
    finally:
        host.close()
    assert not [t for t in threading.enumerate() if t.name == "inferscope-sampler"]


def test_measure_calls_share_one_parked_sampler_thread_that_never_ticks_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A thread started and joined per measure() cost 0.42 ms a call on the 2-core VM; the process keeps one, parked
    # without a timeout between calls, since the caller's own code runs there (it must not be woken every 10 ms).
    from pytest_inferscope import api, measure

    monkeypatch.setenv("INFERSCOPE_SAMPLER", "thread")  # auto's choice before CPython 3.13; from 3.13 it is the signal

    seen: list[threading.Thread] = []

    def body() -> None:
        seen.extend(t for t in threading.enumerate() if t.name == "inferscope-sampler-measure")
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            busy_python(20_000)

    results = [measure(body, rounds=1, warmup=0) for _ in range(2)]
    assert all(r.analysis.metrics["cpu.samples"] >= 1 for r in results)
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0].daemon
    host = api._SAMPLER
    end = time.monotonic() + 1.0
    while not host._parked and time.monotonic() < end:
        time.sleep(0.002)
    assert host._parked and host._waiting_s == 0.0  # waiting without a timeout: no wake-ups until the next call


def test_collections_do_not_nest() -> None:
    outer = Collection(CollectionOptions(cpu="off"))
    outer.start()
    try:
        with pytest.raises(RuntimeError, match=r"'test' cannot be profiled inside 'test'.*profiles do not nest"):
            Collection(CollectionOptions(cpu="off")).start()
    finally:
        outer.stop()


def test_scope_outside_a_collection_is_a_no_op() -> None:
    with scope("nothing"):
        mark_event("nothing", x=1)
    assert active() is None


def test_gpu_reason_is_reported_when_no_backend_runs() -> None:
    coll, _ = run(lambda: None, rounds=1)
    gpu = coll.collectors_info()[1]
    assert not gpu.active and gpu.reason


def test_proc_files_read_what_a_fresh_open_reads_and_nothing_once_closed() -> None:
    from pytest_inferscope.collectors.memory import Counters, ProcFiles, read_rss, read_schedstat

    proc = ProcFiles()
    try:
        rss, fresh = proc.rss(), read_rss()
        assert rss > 0 and abs(rss - fresh) < 64 << 20  # the same counter, read a moment apart
        before = proc.runqueue_ns()
        assert before <= read_schedstat()[1] <= proc.runqueue_ns() + 1  # monotonic, same thread's counter
        counters = Counters.now(proc)
        assert counters.rss > 0 and counters.runqueue_ns >= before
    finally:
        proc.close()
    assert proc.rss() == 0 and proc.runqueue_ns() == 0
    proc.close()  # twice is harmless


def test_the_peak_rss_is_reset_at_the_start_and_read_as_procfs_has_it() -> None:
    from pytest_inferscope.collectors.memory import MemoryCollector, _read_hwm, read_rss, reset_peak

    with open("/proc/self/status") as f:  # the kernel's own line, read the plain way
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    assert abs((_read_hwm() or 0) - hwm) < 64 << 20
    if not reset_peak():
        pytest.skip("this kernel does not let /proc/self/clear_refs reset the peak RSS")
    grown = bytearray(256 << 20)  # a peak 256 MB above what the process holds after
    grown[::4096] = b"x" * len(grown[::4096])  # touched: resident
    del grown
    assert (_read_hwm() or 0) >= read_rss() + (200 << 20)
    memory = MemoryCollector()
    memory.start()
    out = memory.stop(0)
    assert memory.hwm_reset and out["rss_peak_source"] == "kernel VmHWM (reset at start)"
    assert out["rss_peak"] < out["rss_end"] + (64 << 20)  # the earlier peak is gone


def test_the_allocator_peaks_come_from_one_read_of_torchs_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.cuda.max_memory_allocated and max_memory_reserved each flatten every allocator statistic (0.5 ms a call on
    # the H200 host); the collection's stop reads the two peaks from one nested copy, and the device's memory once.
    import sys
    from types import SimpleNamespace

    from pytest_inferscope.collectors.memory import MemoryCollector

    asked: list[str] = []
    stats = {"allocated_bytes": {"all": {"peak": 3 << 20, "current": 1}}, "reserved_bytes": {"all": {"peak": 8 << 20}}}

    def nested(device: int) -> dict[str, object]:
        asked.append(f"stats {device}")
        return stats

    def properties(device: int) -> SimpleNamespace:
        asked.append(f"properties {device}")
        return SimpleNamespace(total_memory=80 << 30)

    cuda = SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, current_device=lambda: 1,
        reset_peak_memory_stats=lambda: asked.append("reset"), memory_stats_as_nested_dict=nested,
        get_device_properties=properties,
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.setattr("pytest_inferscope.collectors.memory._TOTAL_MEMORY", {})
    memory = MemoryCollector()
    for _ in range(2):
        memory.start()
        out = memory.stop(0)
        assert (out["gpu_allocated_peak"], out["gpu_reserved_peak"], out["gpu_total"]) == (3 << 20, 8 << 20, 80 << 30)
    assert asked == ["reset", "stats 1", "properties 1", "reset", "stats 1"]
    stats.clear()  # no allocation since the reset: torch gives no statistics, and the peaks read 0
    memory.start()
    out = memory.stop(0)
    assert (out["gpu_allocated_peak"], out["gpu_reserved_peak"]) == (0, 0)


def test_the_sampler_reads_the_rss_from_one_open_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each system call on the sampler's thread hands the GIL to the test thread and back: the RSS it reads every
    # ~10 ms comes from one pread() of a file opened once, not from an open, a read and a close each time.
    import os

    from pytest_inferscope.collectors import memory
    from pytest_inferscope.events import Kind

    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, *args: int) -> int:
        opened.append(path)
        return real_open(path, *args)

    monkeypatch.setattr(memory.os, "open", counting_open)
    monkeypatch.setattr("pytest_inferscope.collectors.cpu.MEMORY_SAMPLE_NS", 1_000_000)  # an RSS reading a sample

    def body() -> None:
        deadline = time.perf_counter() + 0.1
        while time.perf_counter() < deadline:
            pass

    coll = Collection(CollectionOptions(sample_interval_ms=2.0))
    coll.start()
    coll.run_rounds(body, 1, 0)
    raw = coll.stop()
    readings = int((raw.events["kind"] == Kind.MEMORY).sum())
    # (a loaded machine lets the sampler take the GIL less often: a few readings are enough to tell)
    assert raw.meta["sampler"]["samples"] >= 3 and readings >= 3, (raw.meta["sampler"], readings)
    # the memory collector's start and stop, the rounds' ProcFiles and the sampler's file: four, however many samples
    assert opened.count("/proc/self/statm") == 4, opened


def test_samples_keep_the_line_the_leaf_frame_was_on() -> None:
    import inspect

    def body() -> None:
        deadline = time.perf_counter() + 0.1
        while time.perf_counter() < deadline:  # the sampled line
            pass

    src, first = inspect.getsourcelines(body)
    line = first + next(i for i, text in enumerate(src) if "the sampled line" in text)
    coll = Collection(CollectionOptions(sample_interval_ms=1.0))
    coll.start()
    coll.run_rounds(body, 2, 0)
    raw = coll.stop()
    samples = raw.events[raw.events["kind"] == Kind.SAMPLE]
    in_body = [int(v) for n, v in zip(samples["name"], samples["value"], strict=True) if "body" in raw.strings[n]]
    assert len(in_body) >= 5  # the sampler gets the GIL about every switch interval (5 ms)
    assert sum(v in (line, line + 1) for v in in_body) >= 0.8 * len(in_body)  # the loop's two lines


def test_back_to_back_rounds_share_one_counter_reading_and_a_pause_reads_afresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_inferscope.collectors.memory import Counters

    reads = []
    real = Counters.now.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Counters], proc: object = None) -> Counters:
        reads.append(time.perf_counter())
        return real(cls, proc)

    monkeypatch.setattr(Counters, "now", classmethod(counting))
    coll = Collection(CollectionOptions(cpu="off"))
    coll.start()
    coll.run_rounds(lambda: None, 3, 0)
    assert len(reads) == 1 + 3  # the first round's start, then each round's end (the next round's start)
    time.sleep(0.005)  # user code between rounds (the fixture's API): not charged to the next round
    with coll.round(3, RoundKind.MEASURED):
        pass
    assert len(reads) == 4 + 2
    coll.stop()
    assert [r["index"] for r in coll.rounds] == [0, 1, 2, 3]


def test_an_unchained_round_reads_its_counters_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under A/B the other side's round runs between two of this side's, well within the chaining window when it is
    short: chained, this side's row spanned it (a 0.3 ms spinning body read 49% busy and 25% waiting for a core, a
    cpu_contention finding of the A/B's own making). `unchain` makes the next round read its own start."""
    import pytest_inferscope.collectors as collectors

    monkeypatch.setattr(collectors, "CHAIN_COUNTERS_NS", 10**10)  # whatever the gap, the rounds would chain
    gap_s = 0.1  # the other side's round: long, so that no preemption of the round's own reading comes near it

    coll = Collection(CollectionOptions(cpu="off"))
    coll.start()
    try:
        for index in range(4):
            with coll.round(index, RoundKind.MEASURED):
                busy_python(1_000)
            time.sleep(gap_s)
            if index == 2:
                coll.unchain()
    finally:
        coll.stop()
    gaps = [(r["span_ns"] - r["wall_ns"]) / 1e9 for r in coll.rounds]
    assert gaps[1] >= gap_s and gaps[2] >= gap_s, gaps  # chained: the row reaches back over the gap
    assert gaps[3] < gap_s, gaps  # round 3 alone came after an unchain


def test_a_sub_millisecond_body_is_never_more_than_all_cpu() -> None:
    # The counters are read before and after each round, so they span more than the round: read as shares of
    # the round they gave 284% busy for a `pass` body on the 2-core VM. Now a share of their own span.
    from pytest_inferscope.analyzer import analyze
    from pytest_inferscope.analyzer.context import Context
    from pytest_inferscope.merger import merge

    _, raw = run(lambda: None, rounds=20, warmup=0, cpu="off")
    rows = raw.meta["rounds"]
    assert all(r["span_ns"] >= r["wall_ns"] > 0 for r in rows)
    assert sum(r["thread_cpu_ns"] for r in rows) > sum(r["wall_ns"] for r in rows)  # what the old reading divided
    timeline = merge(raw)
    ctx = Context(timeline)
    metrics = analyze(timeline, ctx=ctx).metrics
    # A `pass` body and its harness: on CPU throughout, and never more (a round whose two clocks, read µs apart,
    # give more CPU time than its span reads as all of it: 1.038 before that, in one CI run of 2026-11-29). On a
    # crowded machine part of it is runnable and waiting for a core instead: 0.20 busy once in the suite at -n 2 on
    # the 2-core VM (2026-11-30); three spinners beside it read 0.928 busy and 0.062 waiting in one run of eight.
    busy = metrics["cpu.test_thread_busy"]
    assert busy <= 1.0 + 1e-12
    assert busy + metrics["cpu.test_thread_runqueue"] > 0.5
    cpu_part = ctx.cpu.thread_parts()[0]  # a round this short is not split in the breakdown at all
    assert cpu_part.share is None and not cpu_part.collected and "too short" in cpu_part.reason


def test_the_rounds_write_nothing_into_the_buffer_until_the_stop_writes_their_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_inferscope.buffer import TraceBuffer
    from pytest_inferscope.events import MemoryFlag

    writes: list[int] = []
    real = TraceBuffer.record

    def counting(self: TraceBuffer, kind: int, *args: object, **kwargs: object) -> bool:
        writes.append(kind)
        return real(self, kind, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(TraceBuffer, "record", counting)
    coll = Collection(CollectionOptions(cpu="off"))
    coll.start()
    coll.run_rounds(lambda: None, 3, 1)
    assert writes == []  # the gaps between rounds are the test's time: nothing but the counters runs there
    raw = coll.stop()
    ev = raw.events
    rounds = ev[ev["kind"] == Kind.ROUND]
    assert list(rounds["value"]) == [0, 1, 2, 3]
    assert list(kinds_of(rounds["flags"])) == [RoundKind.WARMUP] + [RoundKind.MEASURED] * 3
    assert [raw.strings[n] for n in rounds["name"]] == [f"round {i}" for i in range(4)]
    ends = ev[(ev["kind"] == Kind.MEMORY) & (ev["flags"] == MemoryFlag.BOUNDARY)]
    assert list(ends["start"]) == list(rounds["end"])  # each round's RSS at its end
    assert list(ends["value"]) == [r["rss_end"] for r in coll.rounds]
    assert coll.stop().events.shape == raw.events.shape  # a second stop writes them no more


def test_a_tick_that_timed_out_as_the_stop_came_takes_no_sample() -> None:
    # The sampler's thread needs the GIL to return from its tick's wait; at a round's end the test thread holds it
    # until it waits in the sampler's stop, so the tick returns "timed out" with the stop already set. A sample then
    # would be of the stop's wait (a GPU test's what-if named "threading's host work" after one).
    sampler = Sampler(TraceBuffer(size_mb=1), 10.0, threading.get_ident(), 1)
    sampler._last = host_clock_ns()
    taken: list[object] = []
    frames = {threading.get_ident(): sys._getframe()}
    sampler._loop(lambda _s: False, lambda: True, lambda: frames, lambda *a, **k: taken.append(a) or True, lambda: 0)
    assert taken == [] and sampler.samples == 0


def test_without_the_kernels_peak_or_a_sampler_the_peak_says_it_was_read_at_the_ends_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --inferscope-cpu=off where VmHWM cannot be reset (2-core VM, reset_peak patched off, 2026-11-30): a 100 MB spike
    # in every round read "peak RSS 58.3 MB, 0.2 MB above" the start, labelled "sampled (every 10 ms at most)" though
    # nothing sampled it.
    from pytest_inferscope.collectors import memory as mem

    monkeypatch.setattr(mem, "reset_peak", lambda: False)
    collector = mem.MemoryCollector()
    collector.start()
    assert collector.stop(None)["rss_peak_source"] == "start and end only"
    collector.start()
    out = collector.stop(collector.rss_start + (100 << 20))
    assert out["rss_peak_source"] == "sampled" and out["rss_peak"] >= collector.rss_start + (100 << 20)
