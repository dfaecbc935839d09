from __future__ import annotations

import threading

import numpy as np
import pytest

from pytest_inferscope.buffer import TraceBuffer
from pytest_inferscope.events import EVENT_DTYPE, Kind, empty_events


def test_seeds_interface_round_trips_an_event() -> None:
    buf = TraceBuffer(size_mb=1)
    assert buf.enqueue({"type": "scope", "name": "tokenize", "start": 1000, "end": 31200})
    assert buf.enqueue({"type": "mark", "name": "ready", "start": 40000, "attrs": {"size": 32}})
    events = buf.read_all()
    assert [e["name"] for e in events] == ["tokenize", "ready"]
    assert events[0]["type"] == "scope" and events[0]["end"] - events[0]["start"] == 30200
    assert buf.attrs[events[1]["value"]] == {"size": 32}


def test_record_layout_is_48_bytes() -> None:
    assert EVENT_DTYPE.itemsize == 48


def test_overflow_wraps_keeps_newest_and_counts_dropped() -> None:
    buf = TraceBuffer(size_mb=0.001)  # 21 records
    cap = buf.capacity
    results = [buf.record(Kind.MARK, 0, i, i) for i in range(cap + 9)]
    assert all(results[:cap]) and not any(results[cap:])
    kept = buf.to_array()["start"]
    assert list(kept) == list(range(9, cap + 9))
    assert buf.dropped == 9 and len(buf) == cap


def test_extend_across_the_wrap_counts_what_it_overwrote() -> None:
    buf = TraceBuffer(size_mb=0.001)
    cap = buf.capacity
    recs = empty_events(cap + 5)
    recs["start"] = np.arange(cap + 5)
    lost = buf.extend(recs)
    assert lost == 5 and buf.dropped == 5
    assert sorted(buf.to_array()["start"]) == list(range(5, cap + 5))
    with pytest.raises(TypeError):
        buf.extend(np.zeros(3))


def test_rings_start_small_and_grow_to_the_buffers_size_before_they_wrap() -> None:
    # A ring made at the buffer's size (100 MB) at once cost the GPU drain's first extend ~0.37 ms a test on the H200
    # host: rings start under 4 MB (numpy's huge-page size) and double, losing nothing, up to the buffer's size.
    from pytest_inferscope.buffer import GPU_RING

    buf = TraceBuffer()
    buf.record(Kind.MARK, 0, 0, 0)
    buf.extend(empty_events(10), GPU_RING)
    assert all(r.data.nbytes < 4 << 20 for r in buf._rings)
    small = TraceBuffer(size_mb=2)  # 43,690 records: the rings grow twice, the second time to the buffer's size
    cap = small.capacity
    for i in range(cap):
        assert small.record(Kind.MARK, 0, i, i)
    recs = empty_events(cap + 3)
    recs["start"] = np.arange(cap + 3)
    assert small.extend(recs[:5], GPU_RING) == 0 and small.extend(recs[5:], GPU_RING) == 3  # one drain past the size
    assert small.record(Kind.MARK, 0, cap, cap) is False  # a full ring wraps as before
    events = small.to_array()
    marks = events[events["kind"] == Kind.MARK]["start"]
    assert list(marks) == [*range(1, cap), cap] and small.dropped == 1 + 3
    gpu = events[events["kind"] != Kind.MARK]["start"]
    assert sorted(gpu) == list(range(3, cap + 3))
    assert all(len(r.data) == cap for r in small._rings if r.label != "rounds")


def test_spill_to_disk_loses_nothing_and_clear_removes_spills(tmp_path) -> None:
    buf = TraceBuffer(size_mb=0.001, spill_dir=tmp_path)
    n = buf.capacity * 3 + 4
    for i in range(n):
        buf.record(Kind.MARK, 0, i, i)
    assert buf.dropped == 0
    assert list(buf.to_array()["start"]) == list(range(n))
    assert len(list(tmp_path.iterdir())) == 3
    buf.clear()
    assert list(tmp_path.iterdir()) == [] and len(buf) == 0


def test_threads_write_to_their_own_rings_without_loss() -> None:
    buf = TraceBuffer(size_mb=1)

    def work(tid: int) -> None:
        for i in range(2000):
            buf.record(Kind.MARK, 0, i, i, tid=tid)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    arr = buf.to_array()
    assert len(arr) == 8000 and buf.dropped == 0
    for tid in range(4):
        assert list(arr["start"][arr["tid"] == tid]) == list(range(2000))


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TraceBuffer(size_mb=0)


def test_round_spans_are_never_dropped_when_the_thread_ring_wraps() -> None:
    buf = TraceBuffer(size_mb=0.001)
    cap = buf.capacity
    for i in range(cap * 5):  # the latency samples must outlive any amount of other events
        if i % 7 == 0:
            assert buf.record(Kind.ROUND, 0, i, i + 1, value=i // 7)
        buf.record(Kind.MARK, 0, i, i)
    events = buf.to_array()
    rounds = events[events["kind"] == Kind.ROUND]
    assert list(rounds["value"]) == list(range((cap * 5 + 6) // 7))
    assert buf.dropped == cap * 4 and len(buf) == cap + len(rounds)
    buf.clear()
    assert len(buf) == 0


def test_a_gpu_drain_goes_to_its_own_ring_and_cannot_overwrite_the_callers_events() -> None:
    buf = TraceBuffer(size_mb=0.001)
    cap = buf.capacity
    for i in range(3):
        buf.record(Kind.SCOPE, 0, i, i + 1)
    recs = empty_events(cap + 4)
    recs["kind"] = Kind.KERNEL
    recs["start"] = np.arange(cap + 4) + 100
    assert buf.extend(recs, "gpu") == 4
    events = buf.to_array()
    assert list(events[events["kind"] == Kind.SCOPE]["start"]) == [0, 1, 2]
    assert len(events[events["kind"] == Kind.KERNEL]) == cap and buf.dropped == 4
