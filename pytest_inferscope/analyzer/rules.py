"""The CPU and memory rules: each a small pure function from a `Context` to findings with evidence.

(The GPU rules are in `rules_gpu.py`; the package's DEFAULT_RULES lists both.)

A rule returns the findings it can support with numbers, or none. `share` is the fraction
of the measured wall time the finding explains; `confidence` says how sure the rule is
that the share is right (how much data backs it). Suggestions carry the time they are
expected to save per round, computed from the evidence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..results import Finding, Suggestion
from .context import Context

Rule = Callable[[Context], list[Finding]]

#: The test thread must be on CPU at least this share of the time to call it CPU-bound.
CPU_BUSY_MIN = 0.5
#: Samples needed for full confidence in sampled attributions.
SAMPLES_FOR_CONFIDENCE = 30
#: RSS growth per measured round that counts as memory pressure.
RSS_GROWTH_MB_PER_ROUND = 1.0
#: Share of the round the test thread waits for a core before contention is reported.
CONTENTION_MIN = 0.1
_MB = 1024 * 1024


def _sample_confidence(ctx: Context, floor: float = 0.6) -> float:
    """How much to trust a sampled attribution: grows with the number of samples behind it."""
    n = ctx.metrics.get("cpu.samples") or 0.0
    return floor + (1.0 - floor) * min(1.0, n / SAMPLES_FOR_CONFIDENCE)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def cpu_saturation(ctx: Context) -> list[Finding]:
    """The test thread was on CPU, in user mode, most of the time: the body is CPU-bound; the hotspots say where.

    The share and confidence rest on the thread's CPU-time counters, which are exact;
    the sampled hotspots only say where the time went, so they weigh in lightly.
    Kernel time (page faults, syscalls) is left to the memory and wait rules.
    """
    busy = ctx.metrics.get("cpu.test_thread_working") or 0.0
    user_busy = ctx.metrics.get("cpu.test_thread_user_busy") or 0.0
    if user_busy < CPU_BUSY_MIN or ctx.launch_dominated:
        return []  # (a host busy launching tiny kernels is the launch rule's finding)
    if ctx.has_gpu and (ctx.metrics.get("gpu.compute_fraction") or 0.0) >= busy:
        return []  # the GPU, not the CPU, is the longer pole
    spots = [h for h in ctx.hotspots if h.self_ms > 0][:5]
    round_ms = ctx.per_round_ms(ctx.wall_ns)
    evidence: dict[str, object] = {
        "test thread CPU per round (ms)": round(ctx.per_round_ms(ctx.counters.get("thread_cpu_ns", 0.0)), 3),
        "wall per round (ms)": round(round_ms, 3),
        "test thread on CPU or waiting for a core, outside device waits": _pct(busy),
        "waiting for a core (CPU contention)": _pct(ctx.metrics.get("cpu.test_thread_runqueue") or 0.0),
        "of it in user mode": _pct(user_busy),
        "process CPU / wall": f"{ctx.metrics.get('cpu.process_utilisation') or 0.0:.2f}",
    }
    for i, h in enumerate(spots[:3], 1):
        evidence[f"hotspot {i}"] = f"{h.function}: {h.self_ms:.2f} ms/round self ({_pct(h.share)})"
    suggestions = [
        Suggestion(
            action=f"Speed up or take off the critical path: {h.function.split(' (')[0]}",
            rationale=f"{h.self_ms:.2f} ms per round ({_pct(h.share)} of the round) is spent in this function itself",
            saving_ms=h.self_ms,
            rule="cpu_saturation",
        )
        for h in spots[:2]
    ]
    if ctx.has_gpu:
        suggestions.append(
            Suggestion(
                action="Overlap host work with the GPU: prepare the next batch in a DataLoader worker or a thread",
                rationale=f"the test thread is busy {_pct(busy)} of the round while GPU work waits for it",
                saving_ms=round_ms * busy * 0.5,
                rule="cpu_saturation",
            )
        )
    else:
        suggestions.append(
            Suggestion(
                action="Batch or vectorise the per-item Python work (tensor ops instead of Python loops)",
                rationale=f"the test thread is on CPU {_pct(busy)} of every round running Python and native code",
                saving_ms=sum(h.self_ms for h in spots[:3]) * 0.5,
                rule="cpu_saturation",
            )
        )
    top = f"; hottest: {spots[0].function.split(' (')[0]} ({spots[0].self_ms:.2f} ms/round)" if spots else ""
    rounds = ctx.round_idx
    return [
        Finding(
            rule="cpu_saturation",
            title="CPU-bound: the test thread is busy on the CPU",
            summary=f"The test thread was on CPU for {_pct(busy)} of the measured time ({round_ms:.2f} ms/round){top}.",
            cause="cpu_bound",
            share=min(1.0, user_busy),
            confidence=min(1.0, user_busy / 0.8) * _sample_confidence(ctx, floor=0.85),
            evidence=evidence,
            events=ctx.refs(rounds, 3),
            suggestions=suggestions,
        )
    ]


def off_cpu_wait(ctx: Context) -> list[Finding]:
    """The test thread spent much of the round off CPU (sleeping, I/O, locks, waiting on other threads)."""
    if ctx.metrics.get("cpu.test_thread_working") is None:
        return []  # no CPU counters: nothing to say about waiting
    busy = ctx.metrics.get("cpu.test_thread_working") or 0.0
    waiting = 1.0 - busy
    if waiting < 0.3 or ctx.has_gpu:
        return []  # with a GPU, waiting is the sync and idle rules' business
    spots = [h for h in ctx.hotspots if h.self_ms > 0][:3]
    wait_ms = ctx.per_round_ms(ctx.wall_ns) * waiting
    return [
        Finding(
            rule="off_cpu_wait",
            title="The test thread waits off CPU",
            summary=(
                f"The test thread was off CPU for {_pct(waiting)} of the measured time ({wait_ms:.2f} ms per "
                "round): sleeping, blocked on I/O or a lock, or waiting for worker threads."
            ),
            cause=None,
            share=waiting,
            confidence=_sample_confidence(ctx),
            evidence={
                "off CPU per round (ms)": round(wait_ms, 3),
                **{f"where it waited {i}": f"{h.function}: {h.self_ms:.2f} ms/round" for i, h in enumerate(spots, 1)},
            },
            suggestions=[
                Suggestion(
                    action=f"Remove or overlap the wait in {spots[0].function.split(' (')[0]}"
                    if spots
                    else "Find what the thread waits on (I/O, locks, sleeps) and overlap or remove it",
                    rationale=f"{wait_ms:.2f} ms per round is spent waiting rather than computing",
                    saving_ms=spots[0].self_ms if spots else wait_ms * 0.5,
                    rule="off_cpu_wait",
                )
            ],
        )
    ]


def memory_pressure(ctx: Context) -> list[Finding]:
    """Host memory grows round over round, or the kernel spends the time faulting pages in."""
    c = ctx.counters
    rss = ctx.rss_per_round
    n = len(rss)
    growth_per_round = float(np.polyfit(np.arange(n), rss, 1)[0]) / _MB if n >= 3 else 0.0
    wall = max(1, ctx.wall_ns)
    sys_share = c.get("sys_ns", 0.0) / wall
    faults = ctx.metrics.get("mem.minor_faults_per_round") or 0.0
    major = c.get("majflt", 0.0)
    r2 = 0.0
    if n >= 3:
        fit = np.polyfit(np.arange(n), rss, 1)
        ss = float(np.sum((rss - rss.mean()) ** 2))
        r2 = 1.0 - float(np.sum((rss - np.polyval(fit, np.arange(n))) ** 2)) / ss if ss > 0 else 0.0
    # Growth counts only when it is steady (a line fits the per-round RSS), not one noisy jump.
    growing = growth_per_round >= RSS_GROWTH_MB_PER_ROUND and r2 >= 0.6
    faulting = (sys_share >= 0.1 and faults >= 100) or major > 0
    if not (growing or faulting):
        return []
    # What the pressure costs in time is the kernel's share: faulting pages in, zeroing them.
    share = min(1.0, sys_share)
    confidence = min(1.0, 0.5 + 0.25 * growing + 0.25 * (sys_share >= 0.3) + 0.1 * (major > 0))
    evidence = {
        "RSS growth per round (MB)": round(growth_per_round, 2),
        "RSS growth over measured rounds (MB)": round(ctx.metrics.get("mem.rss_growth_mb") or 0.0, 2),
        "minor page faults per round": round(faults),
        "major page faults": int(major),
        "kernel (system) CPU time / wall": _pct(sys_share),
    }
    round_ms = ctx.per_round_ms(wall)
    suggestions = []
    if growing:
        suggestions.append(
            Suggestion(
                action="Stop the growth: release per-call results, bound caches, avoid appending to long-lived lists",
                rationale=f"RSS grows {growth_per_round:.1f} MB every round (fit R² {r2:.2f}); the new pages cost "
                f"kernel time now and memory later",
                saving_ms=round_ms * sys_share,
                rule="memory_pressure",
            )
        )
    suggestions.append(
        Suggestion(
            action="Reuse buffers instead of allocating per call (preallocate tensors, use out=, keep allocators warm)",
            rationale=f"{round(faults)} page faults per round; the kernel spends {_pct(sys_share)} of the wall time",
            saving_ms=round_ms * sys_share * 0.8,
            rule="memory_pressure",
        )
    )
    return [
        Finding(
            rule="memory_pressure",
            title="Memory pressure: host memory grows and pages fault in",
            summary=(
                f"RSS grew {growth_per_round:.1f} MB per round with {round(faults)} page faults per round; the kernel "
                f"took {_pct(sys_share)} of the wall time."
            ),
            cause="memory_bound",
            share=share,
            confidence=confidence,
            evidence=evidence,
            suggestions=suggestions,
            events=ctx.refs(ctx.round_idx, 3),
        )
    ]


def cpu_contention(ctx: Context) -> list[Finding]:
    """The test thread was runnable but waited for a CPU core: the machine is oversubscribed."""
    runq = ctx.metrics.get("cpu.test_thread_runqueue") or 0.0
    if runq < CONTENTION_MIN:
        return []
    cores = int(ctx.metrics.get("cpu.cores") or 1)
    threads = ctx.metrics.get("cpu.torch_threads")
    proc = ctx.metrics.get("cpu.process_utilisation") or 0.0
    wait_ms = ctx.per_round_ms(ctx.wall_ns) * runq
    evidence: dict[str, object] = {
        "waiting for a core per round (ms)": round(wait_ms, 3),
        "share of the round": _pct(runq),
        "involuntary context switches per round": round(ctx.metrics.get("cpu.involuntary_switches_per_round") or 0),
        "cores": cores,
        "process CPU / wall": f"{proc:.2f}",
    }
    suggestions = [
        Suggestion(
            "Measure on a machine (or CPU set) this test has to itself: other processes took the cores it was "
            "ready to use, so its latency here includes their load",
            f"the test thread waited {wait_ms:.2f} ms per round for a core",
            wait_ms,
            "cpu_contention",
        )
    ]
    if threads is not None:
        evidence["torch intra-op threads"] = int(threads)
        if threads >= cores:
            suggestions.append(
                Suggestion(
                    f"Use fewer torch threads than cores (torch.set_num_threads({max(1, cores - 1)})), so torch's "
                    "own workers don't crowd out the thread that feeds them",
                    f"{int(threads)} intra-op threads on {cores} cores",
                    wait_ms * 0.5,
                    "cpu_contention",
                )
            )
    return [
        Finding(
            rule="cpu_contention",
            title="CPU contention: the test thread waits for a core",
            summary=f"The test thread was ready to run but waited for a CPU core {_pct(runq)} of the measured time "
            f"({wait_ms:.2f} ms per round).",
            cause=None,
            share=runq,
            confidence=0.9,
            evidence=evidence,
            suggestions=suggestions,
        )
    ]
