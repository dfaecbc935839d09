"""The GPU rules: busy, idle while the host works, transfers, blocking syncs, launch overhead.

Each a small pure function from a `Context` to findings with evidence, like those in `rules.py`.
"""

from __future__ import annotations

import numpy as np

from ..events import Kind
from ..results import EventRef, Finding, Suggestion
from .context import Context
from .idle import CAUSES
from .rules import _pct

#: Suggestions the what-if table (whatif.py) makes too: the same text, so the two are one suggestion.
LOWER_PRECISION = "Use lower precision (bf16/fp16 autocast) or TF32 for matrix work"
CUDA_GRAPH = "Capture the step in a CUDA graph (torch.cuda.CUDAGraph, or torch.compile(mode='reduce-overhead'))"
#: One action for the rule's estimate and the simulated fix (whatif.py), so the fix is listed once, simulated.
REMOVE_SYNCS = (
    "Remove per-step synchronisations: keep values on the GPU instead of .item() / .cpu() / printing CUDA tensors, "
    "and read results once at the end"
)
#: GPU kernels must cover at least this share of the round to call it GPU-bound.
GPU_BUSY_MIN = 0.6
#: Share of the round host and GPU must take turns around syncs (or the host block in them) to report it.
SYNC_MIN = 0.15
#: Share of the round the GPU must wait for the host (host-wait idle) to call it CPU-bound.
HOST_WAIT_MIN = 0.3


def gpu_saturation(ctx: Context) -> list[Finding]:
    """GPU kernels ran most of the round: the body is GPU-bound (copies are the transfers rule's)."""
    if not ctx.gpu.collected:
        return []
    compute = ctx.metrics.get("gpu.compute_fraction") or 0.0
    # Compute the host sat blocked through, just before a sync stall, would have overlapped the
    # host's own work had the host not stopped to wait: while they take turns, that part of the
    # GPU's time does not bound the round (see idle.py, `turn_taking_ns`).
    hidden = (ctx.gpu.turn_taking_ns() - ctx.gpu.idle_ns("sync_stall")) / max(1, ctx.rounds.gpu_wall_ns)
    busy = max(0.0, compute - hidden)
    if busy < GPU_BUSY_MIN:
        return []
    k = ctx.gpu.records.compress(ctx.gpu.records["kind"] == int(Kind.KERNEL))  # (not indexing: see GpuView.records)
    kernels_per_round = len(k) / ctx.rounds.n_gpu_rounds
    names = k["name"]
    dur = (k["end"] - k["start"]).astype(float)
    weights = np.bincount(names, weights=dur) if len(k) else np.zeros(0)
    top: list[int] = [int(i) for i in (-weights).argsort()[:3] if weights[i] > 0]
    total = float(dur.sum()) or 1.0
    evidence: dict[str, object] = {
        "GPU computing": _pct(compute),
        "of it while the host waited in syncs it then paid for (turn-taking)": _pct(compute - busy),
        "kernels per round": round(kernels_per_round),
        **_idle_evidence(ctx),
    }
    for i, n in enumerate(top, 1):
        t = float(dur[names == n].sum())
        evidence[f"kernel {i}"] = (
            f"{ctx.timeline.strings[int(n)]}: {ctx.rounds.per_gpu_round_ms(t):.3f} ms/round ({_pct(t / total)})"
        )
    round_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    kernel_ms = ctx.rounds.per_gpu_round_ms(total)
    return [
        Finding(
            rule="gpu_saturation",
            title="GPU-bound: the GPU is busy most of the round",
            summary=f"GPU kernels covered {_pct(compute)} of the measured time; they took {kernel_ms:.2f} ms per "
            "round.",
            cause="gpu_bound",
            share=busy,
            share_measured=True,
            confidence=min(1.0, 0.7 + 0.3 * busy),
            evidence=evidence,
            events=ctx.refs((ctx.timeline.mask(Kind.KERNEL) & ctx.rounds.in_gpu_rounds).nonzero()[0], 5),
            suggestions=[
                Suggestion(
                    LOWER_PRECISION,
                    f"kernels take {kernel_ms:.2f} ms per round; tensor-core paths are typically ~2x faster",
                    kernel_ms * 0.4,
                    "gpu_saturation",
                ),
                Suggestion(
                    "Compile the model (torch.compile) to fuse elementwise kernels",
                    f"{kernels_per_round:.0f} kernels per round; fusion cuts memory traffic between them",
                    kernel_ms * 0.15,
                    "gpu_saturation",
                ),
            ]
            if round_ms
            else [],
        )
    ]


def gpu_idle_host(ctx: Context) -> list[Finding]:
    """The GPU sat idle waiting for the host to launch its next work (host-wait idle): the CPU is the bottleneck.

    The share is the host-wait idle time (idle.py): gaps where the next launch came after the GPU
    had drained and the host was not blocked in a synchronisation. The functions named are those
    sampled during those gaps.
    """
    if not ctx.gpu.collected or ctx.gpu.launch_dominated:
        return []  # (a host busy launching tiny kernels is the launch rule's finding)
    share = ctx.gpu.host_wait_fraction()
    if share < HOST_WAIT_MIN:
        return []
    gaps = ctx.gpu.idle.mask("host_wait")
    in_gaps = ctx.cpu.samples_inside(ctx.gpu.idle.start_ns[gaps], ctx.gpu.idle.end_ns[gaps], api=True)
    spots = in_gaps[:3] or [(h.function, h.self_ms) for h in ctx.cpu.hotspots if h.self_ms > 0][:3]
    per_round_ms = ctx.rounds.per_gpu_round_ms
    wait_ms = per_round_ms(ctx.gpu.idle_ns("host_wait"))
    suggestions = [_off_critical_path(module, fns, wait_ms) for module, fns in _by_module(in_gaps or spots)[:2]]
    suggestions.append(
        Suggestion(
            action="Prepare the next batch while the GPU runs this one (DataLoader workers with pin_memory, "
            "or a producer thread), so GPU work is always queued ahead",
            rationale=f"the GPU waited {wait_ms:.2f} ms per round for the host to launch work",
            # Overlapping hides at most the shorter of the two: the host's wait or the GPU's work.
            saving_ms=min(wait_ms, per_round_ms(ctx.gpu.transfer["compute_ns"])),
            rule="gpu_idle_host",
        )
    )
    if len(spots) < 2:
        suggestions.append(
            Suggestion(
                action="Give the GPU more work per launch (larger batches), so each host step keeps it busy longer",
                rationale=f"{per_round_ms(ctx.rounds.gpu_wall_ns):.2f} ms rounds, {_pct(share)} of them with the GPU "
                "idle "
                "waiting for the host",
                saving_ms=wait_ms * 0.3,
                rule="gpu_idle_host",
            )
        )
    where = f"; the host was in {spots[0][0].split(' (')[0]}." if spots else "."
    return [
        Finding(
            rule="gpu_idle_host",
            title="The GPU waits for the host",
            summary=f"The GPU was idle waiting for the host to launch work {_pct(share)} of the measured time "
            f"({wait_ms:.2f} ms per round){where}",
            cause="cpu_bound",
            share=share,
            share_measured=True,
            confidence=0.6 + 0.4 * min(1.0, share / 0.6),
            evidence={
                **_idle_evidence(ctx),
                "test thread on CPU": _pct(ctx.metrics.get("cpu.test_thread_working") or 0.0),
                **{f"while the GPU waited {i}": f"{w}: {ms:.2f} ms/round" for i, (w, ms) in enumerate(spots, 1)},
            },
            events=_gap_refs(ctx, gaps),
            suggestions=suggestions,
        )
    ]


def _by_module(spots: list[tuple[str, float]]) -> list[tuple[str, list[tuple[str, float]]]]:
    """Sampled functions ('module:function (file:line)', ms) grouped by module, the most time first."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for where, ms in spots:
        module, _, function = where.split(" (")[0].rpartition(":")
        groups.setdefault(module or function, []).append((function, ms))
    return sorted(groups.items(), key=lambda g: -sum(ms for _, ms in g[1]))


def _off_critical_path(module: str, fns: list[tuple[str, float]], wait_ms: float) -> Suggestion:
    """Take a module's work (one function, or several sampled in the same module) off the critical path."""
    ms = sum(t for _, t in fns)
    if len(fns) == 1:
        action = f"Move {module}:{fns[0][0]} off the critical path or make it cheaper"
    else:
        names = ", ".join(f for f, _ in fns[:3]) + (f" and {len(fns) - 3} more" if len(fns) > 3 else "")
        action = (
            f"Take {module}'s work ({names}) off the critical path: cache or precompute its results, "
            "or run it ahead in a worker"
        )
    return Suggestion(
        action=action,
        rationale=f"{ms:.2f} ms per round of host time sampled in {module} while the GPU waited for the host",
        saving_ms=min(ms, wait_ms),
        rule="gpu_idle_host",
    )


def _sync_evidence(
    ctx: Context, calls: np.ndarray, lines: list[tuple[str, float]], blocked_frac: float, turn_ns: float, stalls: float
) -> dict[str, object]:
    """sync_stall's evidence: time blocked, calls per round by name, and where they were issued."""
    tl = ctx.timeline
    n_api = ctx.rounds.n_api_rounds  # the calls were read from the API rounds (base.py)
    evidence: dict[str, object] = {
        "blocked in syncs per round (ms)": round(ctx.rounds.per_round_ms(ctx.gpu.wait_ns["user"]), 3),
        "blocked share of the round": _pct(blocked_frac),
        "sync calls per round": round(len(calls) / n_api, 1),
        "GPU idle gaps after a sync or blocking copy, per round": round(stalls, 1),
        "turn-taking per round (ms)": round(ctx.rounds.per_gpu_round_ms(turn_ns), 3),
        **_idle_evidence(ctx),
    }
    by_name: dict[str, list[float]] = {}
    dur = (calls["end"] - calls["start"]).astype(float)
    for n, d in zip(calls["name"].tolist(), dur.tolist(), strict=True):
        by_name.setdefault(tl.strings[n], []).append(d)
    for name, ds in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:3]:
        evidence[name] = f"{len(ds) / n_api:.1f} per round, {ctx.rounds.per_api_round_ms(sum(ds)):.3f} ms per round"
    for i, (where, ms) in enumerate(lines[:3], 1):
        evidence[f"issued from {i}"] = f"{where} ({ms:.2f} ms/round sampled)"
    return evidence


def sync_stall(ctx: Context) -> list[Finding]:
    """Host and GPU take turns around synchronisations the test asked for (`.item()`, `.cpu()`, blocking copies).

    The share is the turn-taking time (idle.py): each sync-stall gap (the GPU drained while the
    host was blocked, then waited for the host's next launch) plus as much of the host's blocked
    time before it as the gap lasted. Syncs after which the GPU never waits (one `.cpu()` at the
    end of the call) cost nothing here; they are reported as information.
    """
    if not ctx.gpu.collected or not len(ctx.gpu.sync_calls):
        return []
    blocked_frac = ctx.metrics.get("host.sync_fraction") or 0.0
    turn_ns = ctx.gpu.turn_taking_ns()
    frac = turn_ns / max(1, ctx.rounds.gpu_wall_ns)
    if frac < SYNC_MIN and blocked_frac < SYNC_MIN:
        return []
    calls = ctx.timeline.events.take(ctx.gpu.sync_calls)
    # Where in the user's code the syncs were issued: the stacks sampled while the thread was blocked in them.
    lines = ctx.cpu.samples_inside(calls["start"], calls["end"], lines=True, api=True)
    stalls = ctx.gpu.idle_per_round("sync_stall")
    evidence = _sync_evidence(ctx, calls, lines, blocked_frac, turn_ns, stalls)
    sync_ms = ctx.rounds.per_round_ms(ctx.gpu.wait_ns["user"])
    turn_ms = ctx.rounds.per_gpu_round_ms(turn_ns)
    first = lines[0][0].split(" (")[0] if lines else "the test body"
    per_round = len(calls) / ctx.rounds.n_api_rounds
    if frac < SYNC_MIN:
        return [
            Finding(
                rule="sync_stall",
                title="The host blocks in synchronisations, but the GPU stays fed",
                summary=f"The test thread was blocked in {per_round:.0f} synchronisations per round ({sync_ms:.2f} ms, "
                f"{_pct(blocked_frac)} of the round), but the GPU waited for the host after them only "
                f"{turn_ms:.2f} ms per round: it was waiting for queued work, not a bottleneck.",
                cause=None,
                share=frac,
                share_measured=True,
                confidence=0.8,
                evidence=evidence,
                events=ctx.refs(ctx.gpu.sync_calls, 5),
            )
        ]
    return [
        Finding(
            rule="sync_stall",
            title="Sync-bound: the host and the GPU take turns around synchronisations",
            summary=f"The test thread was blocked in {per_round:.0f} synchronisations per round ({sync_ms:.2f} ms), "
            f"most from {lines[0][0] if lines else first}; after {stalls:.0f} of them the GPU sat idle until the "
            "next launch: "
            f"{turn_ms:.2f} ms per round ({_pct(frac)}) of turn-taking.",
            cause="sync_bound",
            share=frac,
            share_measured=True,
            confidence=min(1.0, 0.7 + frac),
            evidence=evidence,
            events=ctx.refs(ctx.gpu.sync_calls, 5),
            suggestions=[
                Suggestion(
                    REMOVE_SYNCS,
                    f"{per_round:.0f} blocking calls per round, most from {first}; host and GPU take turns for "
                    f"{turn_ms:.2f} ms per round",
                    turn_ms * 0.8,
                    "sync_stall",
                ),
                Suggestion(
                    "Copy results with non_blocking=True into pinned memory and wait on a CUDA event only "
                    "where the value is needed (torch.cuda.set_sync_debug_mode('warn') finds the hidden syncs)",
                    f"the GPU sat idle after {stalls:.0f} synchronisations per round",
                    turn_ms * 0.5,
                    "sync_stall",
                ),
            ],
        )
    ]


def launch_overhead(ctx: Context) -> list[Finding]:
    """Many tiny kernels, each cheaper on the GPU than its launch on the host: the body is launch-bound."""
    if not ctx.gpu.launch_dominated:
        return []
    lz = ctx.gpu.launches
    compute = ctx.metrics.get("gpu.compute_fraction") or 0.0
    share = max(0.0, 1.0 - compute)
    host_us, kernel_us = lz["host_ns_per_launch"] / 1e3, lz["mean_kernel_ns"] / 1e3
    wall_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    return [
        Finding(
            rule="launch_overhead",
            title="Launch-bound: the host spends longer launching kernels than the GPU spends running them",
            summary=f"{lz['per_round']:.0f} kernels per round averaging {kernel_us:.1f} µs on the GPU, while the "
            f"host spends {host_us:.1f} µs of CPU per launch; the GPU computes only {_pct(compute)} of the round.",
            cause="launch_bound",
            share=share,
            share_measured=True,
            confidence=min(1.0, 0.6 + 0.4 * min(1.0, host_us / max(kernel_us, 1e-3) / 3)),
            evidence={
                "kernels per round": round(lz["per_round"]),
                "mean kernel duration (µs)": round(kernel_us, 2),
                "host CPU per launch (µs)": round(host_us, 2),
                "GPU computing": _pct(compute),
            },
            events=ctx.refs((ctx.timeline.mask(Kind.KERNEL) & ctx.rounds.in_gpu_rounds).nonzero()[0], 5),
            suggestions=[
                Suggestion(
                    CUDA_GRAPH,
                    f"replaying {lz['per_round']:.0f} launches as one graph removes most of the {host_us:.0f} µs "
                    "host cost of each",
                    wall_ms * share * 0.7,
                    "launch_overhead",
                ),
                Suggestion(
                    "Fuse the small kernels (torch.compile) or batch more work per kernel (larger batch, fewer steps)",
                    f"each kernel runs {kernel_us:.1f} µs: fusing several into one amortises the launch",
                    wall_ms * share * 0.5,
                    "launch_overhead",
                ),
            ],
        )
    ]


def _idle_evidence(ctx: Context) -> dict[str, object]:
    """GPU idle time per round by cause (idle.py), for a finding's evidence."""
    return {
        f"GPU idle: {cause.replace('_', ' ')} (ms/round)": round(ctx.rounds.per_gpu_round_ms(ns), 3)
        for cause, ns in ctx.gpu.idle_totals().items()
        if ns
    }


def _gap_refs(ctx: Context, sel: np.ndarray, limit: int = 5) -> list[EventRef]:
    """The longest selected idle gaps, as report references."""
    idle = ctx.gpu.idle
    idx = sel.nonzero()[0]
    if not len(idx):
        return []
    top = idx[(-(idle.end_ns[idx] - idle.start_ns[idx])).argsort(kind="stable")[:limit]]
    return [
        EventRef(
            kind="gpu_idle",
            name=CAUSES[int(idle.cause[i])],
            start_ms=float(idle.start_ns[i]) / 1e6,
            duration_ms=float(idle.end_ns[i] - idle.start_ns[i]) / 1e6,
        )
        for i in top.tolist()
    ]
