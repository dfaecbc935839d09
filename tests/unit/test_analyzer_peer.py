"""Analyzer: two GPUs, one waiting for the other through peer copies (idle.py's `peer_wait`)."""

from __future__ import annotations

import numpy as np
import pytest
from test_analyzer import MS
from test_analyzer_gpu import one_round

from pytest_inferscope.analyzer import Context, analyze, idle_gaps
from pytest_inferscope.analyzer.idle import idle_total_ns
from pytest_inferscope.events import EVENT_DTYPE, CopyKind, Domain, Kind, MemoryKind, RawTrace, copy_flags
from pytest_inferscope.merger import merge

MB = 1 << 20
LAUNCH = "cudaLaunchKernel"


def with_rows(raw: RawTrace, rows: list[tuple[str, Kind, float, float, int, int, int, int]]) -> RawTrace:
    """Add (name, kind, start ms, end ms, corr, device, value, flags) to a one-round trace; GPU work on stream
    7 + device, runtime calls on the test thread, the plugin's end-of-round wait as a WAIT span."""
    out = []
    for name, kind, s, e, corr, device, value, flags in rows:
        if name not in raw.strings:
            raw.strings.append(name)
        gpu = kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
        domain = Domain.DEVICE if gpu or kind == Kind.RUNTIME else Domain.HOST
        stream, dev = (7 + device, device) if gpu else (-1, -1)
        name_id = raw.strings.index(name)
        out.append((int(s * MS), int(e * MS), value, corr, name_id, 1, stream, dev, kind, domain, flags))
    raw.events = np.concatenate((raw.events, np.array(out, dtype=EVENT_DTYPE)))
    return raw


def split_model(src: int = 0, dst: int = 1) -> RawTrace:
    """A model split across two GPUs, as torch runs it: the first half on device 0, a peer copy 0→1 on device 0's
    stream, the second half on device 1 (queued from the start, waiting on the copy's event), and an 8 MB copy back
    1→0 run on device 0 that waits for device 1. `src`/`dst` -1: the copies' devices not recorded."""
    there = copy_flags(CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE, src, dst)
    back = copy_flags(CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE, dst, src)
    return with_rows(
        one_round(cpu_busy=0.1),
        [
            (LAUNCH, Kind.RUNTIME, 0.10, 0.11, 101, -1, 0, 0),
            ("first_half", Kind.KERNEL, 0.50, 4.50, 101, 0, 0, 0),
            ("cudaMemcpyAsync", Kind.RUNTIME, 0.20, 0.21, 102, -1, 0, 0),
            ("Memcpy PtoP", Kind.MEMCPY, 4.50, 5.00, 102, 0, 8 * MB, there),
            (LAUNCH, Kind.RUNTIME, 0.30, 0.31, 103, -1, 0, 0),
            ("second_half", Kind.KERNEL, 5.01, 9.00, 103, 1, 0, 0),  # 10 µs after the copy arrived
            ("cudaMemcpyAsync", Kind.RUNTIME, 0.40, 0.41, 104, -1, 0, 0),
            ("Memcpy PtoP", Kind.MEMCPY, 9.01, 9.20, 104, 0, 8 * MB, back),  # on device 0, waiting for device 1
            ("device synchronize (end of round)", Kind.WAIT, 0.50, 10.0, 0, -1, 0, 0),
        ],
    )


def test_a_gpu_waiting_for_a_peer_copy_from_the_other_is_a_peer_wait_naming_it() -> None:
    gaps = idle_gaps(merge(split_model()))
    rows = [(int(d), c, int(p)) for (_, _, c), d, p in zip(gaps.rows(), gaps.device, gaps.peer, strict=True)]
    # Device 0: idle from the copy's end until the copy back (which waited for device 1), then the round's end.
    # Device 1: its second half was launched at 0.3 ms but started only when the copy from device 0 arrived.
    assert rows == [
        (0, "host_wait", -1),  # the round's lead-in: nothing launched yet
        (0, "peer_wait", 1),
        (0, "round_end", -1),
        (1, "peer_wait", 0),
        (1, "round_end", -1),
    ]
    assert gaps.peer_waits() == {(0, 1): int(4.01 * MS), (1, 0): int(5.01 * MS)}


def test_without_the_copies_devices_the_gaps_keep_todays_causes() -> None:
    """A trace whose copies do not say their devices (recorded before peer copies) is attributed as before."""
    gaps = idle_gaps(merge(split_model(-1, -1)))
    assert [c for _, _, c in gaps.rows()] == ["host_wait", "other", "round_end", "host_wait", "round_end"]
    assert not gaps.mask("peer_wait").any() and (gaps.peer == -1).all()


def test_a_copy_arriving_long_before_the_work_started_is_not_what_it_waited_for() -> None:
    raw = split_model()
    ev = raw.events
    late = ev["name"] == raw.strings.index("second_half")
    ev["start"][late] += int(1 * MS)  # 1 ms after the copy arrived: something else held it
    gaps = idle_gaps(merge(raw))
    dev1 = [c for (_, _, c), d in zip(gaps.rows(), gaps.device, strict=True) if d == 1]
    assert dev1 == ["host_wait", "round_end"]


def test_the_analysis_names_the_idle_gpu_and_the_one_it_waited_for() -> None:
    a = analyze(merge(split_model()))
    found = [f for f in a.findings if f.rule == "peer_wait"]
    assert len(found) == 1
    f = found[0]
    assert f.cause is None and f.share == pytest.approx(0.501)
    assert "Device 1 sat idle 5.01 ms per round" in f.summary and "waiting for device 0" in f.summary
    assert f.evidence["device 0"] == "idle 4.01 ms/round waiting for device 1"
    assert f.evidence["device 1"] == "idle 5.01 ms/round waiting for device 0"
    assert f.evidence["PtoP 0→1"] == "1 copies/round, 8.0 MB/round"
    assert f.evidence["PtoP 1→0"] == "1 copies/round, 8.0 MB/round"
    assert {e.name for e in f.events} == {"peer_wait"}
    assert a.metrics["gpu.idle_peer_wait_fraction"] == pytest.approx(0.451)  # averaged over the two devices
    assert a.gpu is not None and a.gpu["idle_gaps"]["by_cause_ms_per_round"]["peer_wait"] == pytest.approx(9.02)
    note = a.whatif_replay["peer_wait"]
    assert note == (
        "device 1 sat idle 5.01 ms per round waiting for device 0; "
        "device 0 sat idle 4.01 ms per round waiting for device 1"
    )


def test_one_gpu_has_no_peer_wait_finding_nor_note() -> None:
    a = analyze(merge(split_model(-1, -1)))
    assert not [f for f in a.findings if f.rule == "peer_wait"]
    assert "peer_wait" not in a.whatif_replay and a.metrics["gpu.idle_peer_wait_fraction"] == 0.0


def test_idle_gaps_between_gpu_work_are_counted_per_device() -> None:
    """With both GPUs' busy time merged, device 0's 4.01 ms wait while device 1 works would read as two 10 µs gaps."""
    gaps = analyze(merge(split_model())).gpu["idle_gaps"]
    assert gaps["gaps_per_round"] == 1
    assert gaps["longest_ms"] == pytest.approx(4.01)
    assert gaps["total_ms_per_round"] == pytest.approx(4.01)


@pytest.mark.parametrize("devices", [(0, 1), (-1, -1)])
def test_the_idle_total_without_causes_is_the_attributions_total(devices: tuple[int, int]) -> None:
    """`idle_total_ns` (GpuView.idle_scale's, which skips the causes) sums the same intervals as `attribute_idle`,
    over both devices; nothing without rounds."""
    tl = merge(split_model(*devices))
    ctx = Context(tl)
    r = ctx.rounds
    total = idle_total_ns(tl.events, r.in_api_rounds, r.api_round_idx)
    assert total == ctx.gpu.idle.total_ns() == sum(ctx.gpu.idle.totals_ns().values())
    assert total == int((ctx.gpu.idle.end_ns - ctx.gpu.idle.start_ns).sum()) > 0
    assert idle_total_ns(tl.events, r.in_api_rounds, r.api_round_idx[:0]) == 0
