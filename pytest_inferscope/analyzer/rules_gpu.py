"""The GPU rules: busy, idle while the host works, transfers, blocking syncs, launch overhead.

Each a small pure function from a `Context` to findings with evidence, like those in `rules.py`.
"""

from __future__ import annotations

import numpy as np

from ..events import Kind
from ..results import Finding, Suggestion
from .context import Context, union_ns
from .rules import _MB, _pct

#: GPU kernels must cover at least this share of the round to call it GPU-bound.
GPU_BUSY_MIN = 0.6
#: Share of the round the host spends blocked in syncs it asked for, to call it sync-bound.
SYNC_MIN = 0.15
#: Share of the round host/device copies must cover to call it transfer-bound.
TRANSFER_MIN = 0.2


def gpu_saturation(ctx: Context) -> list[Finding]:
    """GPU kernels ran most of the round: the body is GPU-bound (copies are the transfers rule's)."""
    if not ctx.has_gpu:
        return []
    busy = ctx.metrics.get("gpu.compute_fraction") or 0.0
    if busy < GPU_BUSY_MIN:
        return []
    k = ctx.gpu[ctx.gpu["kind"] == Kind.KERNEL]
    names = k["name"]
    dur = (k["end"] - k["start"]).astype(float)
    weights = np.bincount(names, weights=dur) if len(k) else np.zeros(0)
    top: list[int] = [int(i) for i in np.argsort(-weights)[:3] if weights[i] > 0]
    total = float(dur.sum()) or 1.0
    evidence: dict[str, object] = {"GPU computing": _pct(busy), "kernels per round": round(len(k) / ctx.n_rounds)}
    for i, n in enumerate(top, 1):
        t = float(dur[names == n].sum())
        evidence[f"kernel {i}"] = (
            f"{ctx.timeline.strings[int(n)]}: {ctx.per_round_ms(t):.3f} ms/round ({_pct(t / total)})"
        )
    round_ms = ctx.per_round_ms(ctx.wall_ns)
    kernel_ms = ctx.per_round_ms(total)
    return [
        Finding(
            rule="gpu_saturation",
            title="GPU-bound: the GPU is busy most of the round",
            summary=f"GPU kernels covered {_pct(busy)} of the measured time; they took {kernel_ms:.2f} ms per round.",
            cause="gpu_bound",
            share=busy,
            confidence=min(1.0, 0.7 + 0.3 * busy),
            evidence=evidence,
            events=ctx.refs(np.flatnonzero(ctx.timeline.mask(Kind.KERNEL) & ctx.in_rounds), 5),
            suggestions=[
                Suggestion(
                    "Use lower precision (bf16/fp16 autocast) or TF32 for matrix work",
                    f"kernels take {kernel_ms:.2f} ms per round; tensor-core paths are typically ~2x faster",
                    kernel_ms * 0.4,
                    "gpu_saturation",
                ),
                Suggestion(
                    "Compile the model (torch.compile) to fuse elementwise kernels",
                    f"{len(k) / ctx.n_rounds:.0f} kernels per round; fusion cuts memory traffic between them",
                    kernel_ms * 0.15,
                    "gpu_saturation",
                ),
            ]
            if round_ms
            else [],
        )
    ]


def gpu_idle_host(ctx: Context) -> list[Finding]:
    """The GPU sat idle while the test thread was busy on the CPU: the host is the bottleneck."""
    if not ctx.has_gpu:
        return []
    idle = ctx.metrics.get("gpu.idle_fraction") or 0.0
    busy = ctx.metrics.get("cpu.test_thread_working") or 0.0
    if idle < 0.3 or busy < 0.5 or ctx.launch_dominated:
        return []
    share = min(idle, busy)
    spots = [h for h in ctx.hotspots if h.self_ms > 0][:3]
    return [
        Finding(
            rule="gpu_idle_host",
            title="The GPU waits for the host",
            summary=f"The GPU was idle {_pct(idle)} of the measured time; the test thread was on CPU {_pct(busy)}.",
            cause="cpu_bound",
            share=share,
            confidence=0.6 + 0.4 * min(1.0, share / 0.6),
            evidence={
                "GPU idle": _pct(idle),
                "test thread on CPU": _pct(busy),
                **{f"hotspot {i}": f"{h.function}: {h.self_ms:.2f} ms/round" for i, h in enumerate(spots, 1)},
            },
            suggestions=[
                Suggestion(
                    action=f"Move {h.function.split(' (')[0]} off the critical path or make it cheaper",
                    rationale=f"{h.self_ms:.2f} ms per round of host time while the GPU is idle",
                    saving_ms=h.self_ms,
                    rule="gpu_idle_host",
                )
                for h in spots[:2]
            ],
        )
    ]


def transfers(ctx: Context) -> list[Finding]:
    """Host/device copies take a large share of the round."""
    if not ctx.has_gpu:
        return []
    cp = ctx.copies
    frac = ctx.metrics.get("gpu.transfer_fraction") or 0.0
    if frac < TRANSFER_MIN or not len(cp["all"]):
        return []
    copy_ns = union_ns(cp["all"]["start"], cp["all"]["end"])
    pageable = cp["pageable"]
    pg_ns = float(np.sum(pageable["end"] - pageable["start"]))
    total_bytes = float(np.sum(cp["all"]["value"]))
    bw = total_bytes / max(1.0, float(np.sum(cp["all"]["end"] - cp["all"]["start"])))  # bytes per ns = GB/s
    suggestions = []
    if len(pageable):
        suggestions.append(
            Suggestion(
                "Pin host memory (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy with non_blocking=True",
                f"{len(pageable)} copies from pageable memory took {ctx.per_round_ms(pg_ns):.2f} ms per round; pinned "
                "copies run at full link speed and can overlap compute",
                ctx.per_round_ms(pg_ns) * 0.5,
                "transfers",
            )
        )
    suggestions.append(
        Suggestion(
            "Copy less: keep tensors on the device between calls, or send compact dtypes and convert on the GPU",
            f"{total_bytes / ctx.n_rounds / _MB:.1f} MB copied per round",
            ctx.per_round_ms(copy_ns) * 0.5,
            "transfers",
        )
    )
    return [
        Finding(
            rule="transfers",
            title="Transfer-bound: host/device copies dominate",
            summary=f"Copies covered {_pct(frac)} of the measured time ({total_bytes / ctx.n_rounds / _MB:.1f} MB per "
            f"round at {bw:.1f} GB/s).",
            cause="transfer_bound",
            share=frac,
            confidence=min(1.0, 0.7 + frac),
            evidence={
                "copy time per round (ms)": round(ctx.per_round_ms(copy_ns), 3),
                "bytes per round": int(total_bytes / ctx.n_rounds),
                "achieved bandwidth (GB/s)": round(bw, 2),
                "pageable copies": len(pageable),
            },
            events=ctx.refs(np.flatnonzero(ctx.timeline.mask(Kind.MEMCPY) & ctx.in_rounds), 5),
            suggestions=suggestions,
        )
    ]


def sync_stall(ctx: Context) -> list[Finding]:
    """The test thread blocked in synchronisations it asked for (`.item()`, `.cpu()`, blocking copies)."""
    if not ctx.has_gpu or not len(ctx.sync_calls):
        return []
    frac = ctx.metrics.get("host.sync_fraction") or 0.0
    if frac < SYNC_MIN:
        return []
    tl, ev = ctx.timeline, ctx.timeline.events
    calls = ev[ctx.sync_calls]
    dur = (calls["end"] - calls["start"]).astype(float)
    by_name: dict[str, list[float]] = {}
    for n, d in zip(calls["name"].tolist(), dur.tolist(), strict=True):
        by_name.setdefault(tl.strings[n], []).append(d)
    # Where in the user's code the syncs were issued: the stacks sampled while the thread was blocked in them.
    lines = _samples_inside(ctx, calls["start"], calls["end"])
    evidence: dict[str, object] = {
        "blocked in syncs per round (ms)": round(ctx.per_round_ms(ctx.wait_ns["user"]), 3),
        "share of the round": _pct(frac),
        "sync calls per round": round(len(calls) / ctx.n_rounds, 1),
    }
    for name, ds in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:3]:
        evidence[name] = f"{len(ds) / ctx.n_rounds:.1f} per round, {ctx.per_round_ms(sum(ds)):.3f} ms per round"
    for i, (where, ms) in enumerate(lines[:3], 1):
        evidence[f"issued from {i}"] = f"{where} ({ms:.2f} ms/round sampled)"
    sync_ms = ctx.per_round_ms(ctx.wait_ns["user"])
    first = lines[0][0].split(" (")[0] if lines else "the test body"
    return [
        Finding(
            rule="sync_stall",
            title="Sync-bound: the host blocks waiting for the GPU",
            summary=f"The test thread was blocked in {len(calls) / ctx.n_rounds:.0f} synchronisations per round "
            f"({sync_ms:.2f} ms, {_pct(frac)} of the round), most from {first}.",
            cause="sync_bound",
            share=frac,
            confidence=min(1.0, 0.7 + frac),
            evidence=evidence,
            events=ctx.refs(ctx.sync_calls, 5),
            suggestions=[
                Suggestion(
                    f"Remove per-step synchronisations in {first}: keep values on the GPU instead of "
                    ".item() / .cpu() / printing CUDA tensors, and read results once at the end",
                    f"{len(calls) / ctx.n_rounds:.0f} blocking calls per round hold the host for {sync_ms:.2f} ms",
                    sync_ms * 0.8,
                    "sync_stall",
                ),
                Suggestion(
                    "Copy results with non_blocking=True into pinned memory and wait on a CUDA event only "
                    "where the value is needed (torch.cuda.set_sync_debug_mode('warn') finds the hidden syncs)",
                    "a blocking copy waits for every kernel queued before it",
                    sync_ms * 0.5,
                    "sync_stall",
                ),
            ],
        )
    ]


def launch_overhead(ctx: Context) -> list[Finding]:
    """Many tiny kernels, each cheaper on the GPU than its launch on the host: the body is launch-bound."""
    if not ctx.launch_dominated:
        return []
    lz = ctx.launches
    compute = ctx.metrics.get("gpu.compute_fraction") or 0.0
    share = max(0.0, 1.0 - compute)
    host_us, kernel_us = lz["host_ns_per_launch"] / 1e3, lz["mean_kernel_ns"] / 1e3
    wall_ms = ctx.per_round_ms(ctx.wall_ns)
    return [
        Finding(
            rule="launch_overhead",
            title="Launch-bound: the host spends longer launching kernels than the GPU spends running them",
            summary=f"{lz['per_round']:.0f} kernels per round averaging {kernel_us:.1f} µs on the GPU, while the "
            f"host spends {host_us:.1f} µs of CPU per launch; the GPU computes only {_pct(compute)} of the round.",
            cause="launch_bound",
            share=share,
            confidence=min(1.0, 0.6 + 0.4 * min(1.0, host_us / max(kernel_us, 1e-3) / 3)),
            evidence={
                "kernels per round": round(lz["per_round"]),
                "mean kernel duration (µs)": round(kernel_us, 2),
                "host CPU per launch (µs)": round(host_us, 2),
                "GPU computing": _pct(compute),
            },
            events=ctx.refs(np.flatnonzero(ctx.timeline.mask(Kind.KERNEL) & ctx.in_rounds), 5),
            suggestions=[
                Suggestion(
                    "Capture the step in a CUDA graph (torch.cuda.CUDAGraph, or torch.compile(mode='reduce-overhead'))",
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


def _samples_inside(ctx: Context, starts: np.ndarray, ends: np.ndarray) -> list[tuple[str, float]]:
    """User frames (innermost) of the samples taken inside the given intervals, by sampled ms per round."""
    ev = ctx.timeline.events
    sel = np.flatnonzero((ev["kind"] == Kind.SAMPLE) & ctx.in_rounds)
    if not len(sel) or not len(starts):
        return []
    order = np.argsort(starts)
    s, e = starts[order], ends[order]
    at = ev["end"][sel] - 1
    k = np.searchsorted(s, at, side="right") - 1
    inside = (k >= 0) & (at < e[np.maximum(k, 0)])
    tally: dict[str, float] = {}
    for i in sel[inside].tolist():
        leaf = ctx.timeline.name(i).rsplit(";", 1)[-1]
        tally[leaf] = tally.get(leaf, 0.0) + float(ev["end"][i] - ev["start"][i])
    return sorted(((k_, ctx.per_round_ms(v)) for k_, v in tally.items()), key=lambda kv: -kv[1])
