"""Analyzer: GPU idle attribution, transfers, CPU threading contention, GPU memory, suggestions per class."""

from __future__ import annotations

import numpy as np
import pytest
from test_analyzer import MS, build

from pytest_inferscope.analyzer import CAUSES, Context, analyze, attribute_idle, idle_gaps
from pytest_inferscope.analyzer.base import LAUNCH_GAP_NS
from pytest_inferscope.events import EVENT_DTYPE, Domain, Kind, MemoryKind, RawTrace, copy_flags
from pytest_inferscope.merger import merge

US = 1_000
GB = 1024**3
_MB = 1024 * 1024


def add(raw: RawTrace, rows: list[tuple[str, Kind, float, float, int, int, int]]) -> RawTrace:
    """Add events (name, kind, start ms, end ms, corr, value, flags) to a one-round trace from `build`."""
    out = []
    for name, kind, s, e, corr, value, flags in rows:
        if name not in raw.strings:
            raw.strings.append(name)
        gpu = kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
        domain = Domain.DEVICE if gpu or kind == Kind.RUNTIME else Domain.HOST
        out.append(
            (int(s * MS), int(e * MS), value, corr, raw.strings.index(name), 1, 7 if gpu else -1, 0 if gpu else -1,
             kind, domain, flags)
        )  # fmt: skip
    raw.events = np.concatenate((raw.events, np.array(out, dtype=EVENT_DTYPE)))
    return raw


def one_round(cpu_busy: float = 0.5, **kw: object) -> RawTrace:
    return build(n_rounds=1, warmup=0, cpu_busy=cpu_busy, **kw)  # type: ignore[arg-type]


def test_every_idle_gap_gets_its_cause() -> None:
    raw = add(
        one_round(),
        [
            ("cudaLaunchKernel", Kind.RUNTIME, 0.50, 0.51, 101, 0, 0),
            ("k1", Kind.KERNEL, 1.00, 2.00, 101, 0, 0),
            ("cudaLaunchKernel", Kind.RUNTIME, 1.50, 1.51, 102, 0, 0),  # queued: launched before k1 ended
            ("k2", Kind.KERNEL, 2.01, 3.00, 102, 0, 0),  # 10 us later: a launch gap
            ("cudaLaunchKernel", Kind.RUNTIME, 2.50, 2.51, 103, 0, 0),  # queued too
            ("k3", Kind.KERNEL, 3.10, 4.00, 103, 0, 0),  # 100 us later: other
            ("cudaLaunchKernel", Kind.RUNTIME, 4.90, 4.91, 104, 0, 0),  # launched after the GPU drained
            ("k4", Kind.KERNEL, 5.00, 6.00, 104, 0, 0),  # host wait before it
            ("cudaStreamSynchronize", Kind.RUNTIME, 5.50, 6.05, 0, 0, 0),  # blocked when k4 ended
            ("cudaLaunchKernel", Kind.RUNTIME, 6.40, 6.41, 105, 0, 0),
            ("k5", Kind.KERNEL, 6.50, 7.00, 105, 0, 0),  # sync stall before it
            ("device synchronize (end of round)", Kind.WAIT, 6.95, 7.01, 0, 0, 0),  # the plugin's own
        ],
    )
    tl = merge(raw)
    gaps = idle_gaps(tl)
    rows = gaps.rows()
    assert [c for _, _, c in rows] == ["host_wait", "launch_gap", "other", "host_wait", "sync_stall", "round_end"]
    assert rows[0][:2] == (0, 1 * MS) and rows[-1][:2] == (7 * MS, 10 * MS)
    # attribute_idle takes events in any order (it sorts a device's records only when they are out of order)
    ctx = Context(tl)
    shuffled = np.random.default_rng(1).permutation(len(tl.events))
    back = np.argsort(shuffled)  # where each event went
    again = attribute_idle(
        tl.events[shuffled],
        ctx.rounds.in_api_rounds[shuffled],
        back[ctx.rounds.api_round_idx],
        back[ctx.gpu.sync_calls],
        LAUNCH_GAP_NS,
    )
    assert again.rows() == rows
    totals = gaps.totals_ns()
    expected = {
        "host_wait": 2 * MS,
        "launch_gap": 10 * US,
        "other": 100 * US,
        "sync_stall": MS // 2,
        "round_end": 3 * MS,
        "peer_wait": 0,  # one GPU: waits for no other
    }
    assert totals == pytest.approx(expected, abs=2)  # (ms written as floats: a ns of rounding)
    assert gaps.turn_taking_ns() == MS  # the 0.5 ms stall + 0.5 ms of the host's blocked time before it
    a = analyze(tl)
    for cause in CAUSES:
        assert a.metrics[f"gpu.idle_{cause}_fraction"] == pytest.approx(expected[cause] / (10 * MS), abs=1e-6)
    assert a.gpu["idle_gaps"]["by_cause_ms_per_round"]["round_end"] == pytest.approx(3.0)
    # A longer launch-gap threshold turns the 100 us queued gap into a launch gap.
    assert idle_gaps(tl, launch_gap_ns=200 * US).totals_ns()["launch_gap"] == pytest.approx(110 * US, abs=2)


def test_no_gpu_data_no_gaps() -> None:
    assert len(idle_gaps(merge(build(cpu_busy=0.9)))) == 0
    assert analyze(merge(build(cpu_busy=0.9))).metrics["gpu.idle_sync_stall_fraction"] is None


def test_a_round_end_wait_is_never_blamed_on_the_user() -> None:
    # A GPU-bound round: the host spins in the plugin's end-of-round synchronize.
    raw = build(
        cpu_busy=0.98, gpu=[(Kind.KERNEL, 0.05, 0.9, 0, 0)], host=[(Kind.WAIT, "device synchronize (end of round)",
                                                                     0.08, 0.92)]
    )  # fmt: skip
    a = analyze(merge(raw))
    assert a.metrics["gpu.idle_sync_stall_fraction"] == 0.0 and a.metrics["gpu.idle_round_end_fraction"] > 0.04
    assert a.bottleneck == "gpu_bound"


def test_the_gpu_waiting_for_the_host_is_cpu_bound_and_names_what_the_host_did() -> None:
    # Tokenise for 70% of the round, then a short forward: the GPU waits for the host.
    raw = build(
        cpu_busy=0.95,
        gpu=[(Kind.KERNEL, 0.75, 0.15, 0, 0)],
        samples=[("t:body (t.py:1);tok:encode (tok.py:10)", 0.6)],
    )
    a = analyze(merge(raw))
    assert a.bottleneck == "cpu_bound" and a.confidence >= 0.8, [(f.rule, f.share) for f in a.findings]
    f = next(f for f in a.findings if f.rule == "gpu_idle_host")
    assert f.share == pytest.approx(0.75 + 0.1, abs=0.01)  # lead-in and tail
    assert "tok:encode" in f.evidence["while the GPU waited 1"]
    assert f.events and f.events[0].kind == "gpu_idle" and f.events[0].name == "host_wait"
    assert len(f.suggestions) >= 2 and "tok:encode" in f.suggestions[0].action


def _pageable_upload(blocking: bool) -> RawTrace:
    flags = copy_flags(1, MemoryKind.PAGEABLE, MemoryKind.DEVICE)
    call_end = 7.05 if blocking else 1.0
    return add(
        one_round(cpu_busy=0.95),
        [
            ("cudaMemcpyAsync", Kind.RUNTIME, 0.9, call_end, 201, 0, 0),
            ("Memcpy HtoD", Kind.MEMCPY, 1.0, 7.0, 201, 64 * _MB, flags),  # 64 MiB in 6 ms: 11.2 GB/s
            ("cudaLaunchKernel", Kind.RUNTIME, 7.1, 7.11, 202, 0, 0),
            ("reduce", Kind.KERNEL, 7.2, 9.8, 202, 0, 0),
        ],
    )


def test_pageable_blocking_copies_are_transfer_bound_with_bandwidth_against_the_link() -> None:
    a = analyze(merge(_pageable_upload(blocking=True)))
    assert a.bottleneck == "transfer_bound" and a.confidence >= 0.8, [(f.rule, f.share) for f in a.findings]
    m = a.metrics
    assert m["gpu.transfer_gb_per_s"] == pytest.approx(64 * _MB / (6 * MS))
    assert m["gpu.link_gb_per_s"] == 64.0 and m["gpu.link_utilisation"] == pytest.approx(64 * _MB / (6 * MS) / 64)
    assert m["gpu.pageable_copy_bytes_fraction"] == 1.0 and m["gpu.blocking_copies_per_round"] == 1.0
    assert m["gpu.copy_overlap_fraction"] == 0.0
    f = next(f for f in a.findings if f.rule == "transfers")
    assert f.evidence["link peak from"] == "nominal PCIe 5.0 x16"
    actions = [s.action for s in f.suggestions]
    assert "pin_memory" in actions[0]
    # Pinned at 80% of 64 GB/s the 64 MiB take 1.31 ms instead of 6 ms.
    assert f.suggestions[0].saving_ms == pytest.approx(6.0 - 64 * _MB / (64 * 0.8) / 1e6, abs=1e-3)
    assert any("non_blocking=True" in s and "asynchronous" in s for s in actions)
    assert any("side stream" in s for s in actions)
    assert a.suggestions[0].action == actions[0]


def test_an_asynchronous_copy_is_not_blocking() -> None:
    a = analyze(merge(_pageable_upload(blocking=False)))
    assert a.metrics["gpu.blocking_copies_per_round"] == 0.0


def test_the_link_peak_follows_a_faster_measured_copy() -> None:
    flags = copy_flags(1, MemoryKind.PINNED, MemoryKind.DEVICE)
    raw = add(one_round(), [("Memcpy HtoD", Kind.MEMCPY, 1.0, 1.1, 0, 40 * _MB, flags)])  # 419 GB/s: C2C
    m = analyze(merge(raw)).metrics
    assert m["gpu.link_gb_per_s"] == pytest.approx(40 * _MB / (0.1 * MS))
    assert m["gpu.link_utilisation"] == pytest.approx(1.0)


def test_copies_overlapping_compute_are_counted() -> None:
    flags = copy_flags(1, MemoryKind.PINNED, MemoryKind.DEVICE)
    raw = add(
        one_round(),
        [("Memcpy HtoD", Kind.MEMCPY, 1.0, 3.0, 0, 8 * _MB, flags), ("k", Kind.KERNEL, 2.0, 6.0, 0, 0, 0)],
    )
    m = analyze(merge(raw)).metrics
    assert m["gpu.copy_overlap_fraction"] == pytest.approx(0.5) and m["gpu.pageable_copy_bytes_fraction"] == 0.0


def test_more_torch_threads_than_available_cores_is_contention() -> None:
    raw = build(cpu_busy=0.6, runqueue=0.05, nivcsw=200, meta={"torch_threads": 8, "cpu_affinity": 2})
    a = analyze(merge(raw))
    f = next(f for f in a.findings if f.rule == "cpu_contention")
    assert f.cause is None and "8 intra-op threads on 2 available cores" in f.summary
    assert f.evidence["torch intra-op threads"] == 8 and f.evidence["involuntary context switches per round"] == 200
    assert any("torch.set_num_threads(1)" in s.action for s in f.suggestions)
    assert a.metrics["cpu.threads_per_core"] == 4.0 and a.metrics["cpu.available_cores"] == 2.0
    calm = analyze(merge(build(cpu_busy=0.6, meta={"torch_threads": 2, "cpu_affinity": 4})))
    assert not any(f.rule == "cpu_contention" for f in calm.findings)


def _gpu_memory(alloc: bool, reserved: int, allocated: int, total: int = 141 * GB) -> RawTrace:
    """Three kernels; with `alloc`, the host spends 40% of the round in cudaFree/cudaMalloc between them."""
    memory = {"rss_peak": 1, "gpu_allocated_peak": allocated, "gpu_reserved_peak": reserved, "gpu_total": total}
    calls = [(Kind.RUNTIME, "cudaFree", 0.2, 0.2), (Kind.RUNTIME, "cudaMalloc", 0.6, 0.2)]
    return build(
        cpu_busy=0.6,
        gpu=[(Kind.KERNEL, 0.02, 0.18, 0, 0), (Kind.KERNEL, 0.42, 0.18, 0, 0), (Kind.KERNEL, 0.82, 0.16, 0, 0)],
        host=calls if alloc else [],
        meta={"memory": memory},
    )


def test_allocator_churn_near_capacity_is_memory_bound() -> None:
    a = analyze(merge(_gpu_memory(alloc=True, reserved=135 * GB, allocated=80 * GB)))
    # The rules' class: the round graph does not model the allocator (docs/architecture.md, what-ifs).
    assert a.whatif_replay["rule_class"] == "memory_bound", [(f.rule, f.share) for f in a.findings]
    f = next(f for f in a.findings if f.rule == "gpu_memory_pressure")
    assert f.share == pytest.approx(0.4) and "reserved 95.7% of the GPU's memory" in f.summary
    assert a.metrics["gpu.memory_used_fraction"] == pytest.approx(135 / 141)
    assert a.metrics["gpu.allocator_cached_fraction"] == pytest.approx(1 - 80 / 135)
    assert any("expandable_segments:True" in s.action and "empty_cache" in s.action for s in f.suggestions)
    assert len(f.suggestions) >= 2


def test_cached_allocator_memory_without_churn_is_information() -> None:
    a = analyze(merge(_gpu_memory(alloc=False, reserved=40 * GB, allocated=10 * GB)))
    f = next(f for f in a.findings if f.rule == "gpu_memory_pressure")
    assert f.cause is None and "75.0% of what it reserved was not allocated" in f.summary
    quiet = analyze(merge(_gpu_memory(alloc=False, reserved=11 * GB, allocated=10 * GB)))
    assert not any(f.rule == "gpu_memory_pressure" for f in quiet.findings)


CLASSES = {
    "cpu_bound": lambda: build(cpu_busy=0.97, meta={"cpu_affinity": 4}),
    "gpu_bound": lambda: build(cpu_busy=0.2, gpu=[(Kind.KERNEL, 0.05, 0.9, 0, 0)]),
    "transfer_bound": lambda: _pageable_upload(blocking=True),
    "launch_bound": lambda: build(cpu_busy=0.95, gpu=[(Kind.KERNEL, 0.0, 0.0003, 0, 0)], repeat_gpu=200),
    "sync_bound": lambda: build(
        cpu_busy=0.95,
        gpu=[(Kind.KERNEL, 0.01, 0.03, 0, 0)],
        repeat_gpu=20,
        host=[(Kind.RUNTIME, "cudaStreamSynchronize", 0.012, 0.0285)],
        repeat_host=20,
    ),
    "memory_bound": lambda: build(cpu_busy=0.9, sys_share=0.6, faults=10_000),
    "memory_bound (GPU allocator)": lambda: _gpu_memory(alloc=True, reserved=135 * GB, allocated=80 * GB),
}


@pytest.mark.parametrize("cls", sorted(CLASSES))
def test_every_class_has_two_suggestions_ranked_by_time_saved(cls: str) -> None:
    a = analyze(merge(CLASSES[cls]()))
    cls = cls.split(" ")[0]
    # The rules' class on these synthetic hosts (the simulated verdicts are tested in test_whatif.py).
    assert a.whatif_replay["rule_class"] == cls, [(f.rule, f.cause, f.share) for f in a.findings]
    own = [s for f in a.findings if f.cause == cls for s in f.suggestions]
    assert len(own) >= 2 and all(s.saving_ms >= 0 and s.rationale for s in own), own
    # At least one with its saving estimated; one not estimated ("batch or vectorise": nothing tells tiny ops from a
    # large native op) says in its rationale between what its saving lies.
    assert any(s.saving_ms > 0 for s in own), own
    assert all(" ms a round" in s.rationale for s in own if not s.saving_ms), own
    # Simulated savings first, largest first; then the rules' estimates, largest first.
    simulated = [s for s in a.suggestions if s.rule == "whatif"]
    estimated = [s for s in a.suggestions if s.rule != "whatif"]
    assert a.suggestions == simulated + estimated
    for part in (simulated, estimated):
        assert part == sorted(part, key=lambda s: s.saving_ms, reverse=True)


def test_host_wait_suggestions_group_the_sampled_functions_by_module() -> None:
    from pytest_inferscope.analyzer.rules_gpu import _by_module, _off_critical_path

    spots = [("tok:split (a.py:1)", 3.0), ("batch:pad (b.py:2)", 4.0), ("tok:norm (a.py:9)", 2.0)]
    groups = _by_module(spots)
    assert [g[0] for g in groups] == ["tok", "batch"]  # 5 ms in tok beats 4 ms in batch
    merged, single = (_off_critical_path(m, fns, wait_ms=4.5) for m, fns in groups)
    assert "tok's work (split, norm)" in merged.action and merged.saving_ms == 4.5  # capped by the GPU's wait
    assert single.action.startswith("Move batch:pad off") and single.saving_ms == 4.0
