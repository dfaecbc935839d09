"""The transfer and device-memory rules: host<->device copies against the link, and GPU memory pressure.

Each a small pure function from a `Context` to findings with evidence, like those in `rules.py`.
"""

from __future__ import annotations

from typing import Any

from ..events import Kind
from ..results import Finding, Suggestion
from .context import Context
from .rules import _MB, _pct

#: Share of the round host/device copies must cover to call it transfer-bound.
TRANSFER_MIN = 0.2
#: Pinned copies reach about this share of the link's peak (what a pinning suggestion expects).
PINNED_EFFICIENCY = 0.8
#: GPU memory reserved over the device's total above which it is "near capacity".
GPU_MEMORY_NEAR = 0.9
#: Share of the round in allocator calls (cudaMalloc/cudaFree) that makes it memory-bound.
ALLOC_MIN = 0.1
#: Reserved-but-unallocated share (at the peaks) reported as allocator caching/fragmentation,
#: when at least GPU_CACHED_MIN_MB is held that way.
GPU_CACHED_FRACTION = 0.3
GPU_CACHED_MIN_MB = 1024.0
#: Suggestions the what-if table (whatif.py) makes too: the same text, so the two are one suggestion.
PIN_MEMORY = (
    "Pin the host memory (tensor.pin_memory() once, or DataLoader(pin_memory=True)) and copy with non_blocking=True"
)
REUSE_BUFFERS = (
    "Reuse device buffers across calls (preallocate outputs, use out=, keep shapes static) so the "
    "allocator is not called inside the loop"
)


def _transfer_suggestions(ctx: Context, t: dict[str, Any], copy_ms: float, mb: float) -> list[Suggestion]:
    """transfers' suggestions: pin, make asynchronous, overlap, compact dtypes, keep on the device."""
    n, link = ctx.rounds.n_gpu_rounds, t["link_gb_s"]
    suggestions: list[Suggestion] = []
    if t["pageable_count"]:
        # Pinned, the same bytes would move at about PINNED_EFFICIENCY of the link.
        pinned_ms = t["pageable_bytes"] / (link * PINNED_EFFICIENCY) / 1e6 / n
        pg_ms = ctx.rounds.per_gpu_round_ms(t["pageable_ns"])
        suggestions.append(
            Suggestion(
                PIN_MEMORY,
                f"{t['pageable_count'] / n:.0f} copies per round from pageable memory took {pg_ms:.2f} ms at "
                f"{t['pageable_bytes'] / max(1.0, t['pageable_ns']):.1f} GB/s; pinned, they would take about "
                f"{pinned_ms:.2f} ms on a {link:.0f} GB/s link, and could overlap compute",
                max(0.0, pg_ms - pinned_ms),
                "transfers",
            )
        )
    if t["blocking_count"]:
        blocked_ms = ctx.rounds.per_gpu_round_ms(t["blocking_ns"])
        compute_ms = ctx.rounds.per_gpu_round_ms(t["compute_ns"])
        suggestions.append(
            Suggestion(
                "Make the copies asynchronous: .to(device, non_blocking=True) from pinned memory, and synchronise "
                "(or wait on an event) only where the data is needed",
                f"{t['blocking_count'] / n:.0f} copies per round held the host until they finished "
                f"({blocked_ms:.2f} ms per round): a blocking .to() is a copy followed by a stream synchronisation",
                min(blocked_ms, max(compute_ms, blocked_ms * 0.5)),
                "transfers",
            )
        )
    exposed_ms = ctx.rounds.per_gpu_round_ms(t["exposed_ns"])
    compute_ms = ctx.rounds.per_gpu_round_ms(t["compute_ns"])
    if exposed_ms > 0 and compute_ms > 0:
        suggestions.append(
            Suggestion(
                "Overlap copies with compute: copy the next batch on a side stream (torch.cuda.Stream) while this "
                "one computes, and make the compute stream wait on an event",
                f"{exposed_ms:.2f} ms of copies per round ran while no kernel did; the kernels took "
                f"{compute_ms:.2f} ms per round",
                min(exposed_ms, compute_ms),
                "transfers",
            )
        )
    suggestions.append(
        Suggestion(
            "Send compact dtypes (uint8, fp16/bf16 instead of fp32) and convert on the GPU",
            f"{mb:.1f} MB copied per round; half the bytes is half the copy time",
            copy_ms * 0.5,
            "transfers",
        )
    )
    suggestions.append(
        Suggestion(
            "Keep tensors on the device between calls: upload constant inputs, weights and lookup tables once",
            f"{mb:.1f} MB copied every round ({copy_ms:.2f} ms); what does not change need not travel again",
            copy_ms * 0.4,
            "transfers",
        )
    )
    return suggestions


def transfers(ctx: Context) -> list[Finding]:
    """Host<->device copies take a large share of the round: bytes, bandwidth against the link, pageable
    sources, blocking copies and copies that could overlap compute but don't."""
    if not ctx.gpu.collected:
        return []
    frac = ctx.metrics.get("gpu.transfer_fraction") or 0.0
    t = ctx.gpu.transfer
    if frac < TRANSFER_MIN or not t["count"]:
        return []
    n = ctx.rounds.n_gpu_rounds
    copy_ms = ctx.rounds.per_gpu_round_ms(t["union_ns"])
    link = t["link_gb_s"]
    util = t["gb_per_s"] / link if link else 0.0
    mb = t["bytes"] / n / _MB
    suggestions = _transfer_suggestions(ctx, t, copy_ms, mb)
    pg = t["pageable_count"]
    summary = (
        f"Copies covered {_pct(frac)} of the measured time: {mb:.1f} MB per round at {t['gb_per_s']:.1f} GB/s, "
        f"{_pct(util)} of a {link:.0f} GB/s link"
        + (f"; {pg / n:.0f} per round from pageable memory" if pg else "")
        + (f"; {t['blocking_count'] / n:.0f} per round blocked the host" if t["blocking_count"] else "")
        + "."
    )
    return [
        Finding(
            rule="transfers",
            title="Transfer-bound: host/device copies dominate",
            summary=summary,
            cause="transfer_bound",
            share=frac,
            share_measured=True,
            confidence=min(1.0, 0.7 + frac),
            evidence={
                "copy time per round (ms)": round(copy_ms, 3),
                "bytes per round": int(t["bytes"] / n),
                "host-to-device bytes per round": int(ctx.metrics.get("gpu.h2d_bytes_per_round") or 0),
                "achieved bandwidth (GB/s)": round(t["gb_per_s"], 2),
                "link peak (GB/s)": round(link, 1),
                "link peak from": "the fastest copy measured in this run"
                if t["link_source"]
                else "the collection's record"
                if ctx.timeline.meta.get("link_gb_s")
                else "nominal PCIe 5.0 x16",
                "pageable copies per round": round(pg / n, 1),
                "blocking copies per round": round(t["blocking_count"] / n, 1),
                "copy time overlapping kernels": _pct(t["overlap_ns"] / t["union_ns"] if t["union_ns"] else 0.0),
            },
            events=ctx.refs((ctx.timeline.mask(Kind.MEMCPY) & ctx.rounds.in_gpu_rounds).nonzero()[0], 5),
            suggestions=suggestions,
        )
    ]


def gpu_memory_pressure(ctx: Context) -> list[Finding]:
    """GPU memory near capacity, time in the allocator (cudaMalloc/cudaFree), or much memory held by
    torch's caching allocator but not allocated (cached or fragmented)."""
    m = ctx.metrics
    used = m.get("gpu.memory_used_fraction")
    cached = m.get("gpu.allocator_cached_fraction")
    reserved_mb = m.get("gpu.memory_reserved_peak_mb") or 0.0
    alloc_frac = m.get("gpu.alloc_call_fraction") or 0.0
    near = used is not None and used >= GPU_MEMORY_NEAR
    caching = cached is not None and cached >= GPU_CACHED_FRACTION and reserved_mb * cached >= GPU_CACHED_MIN_MB
    churn = alloc_frac >= ALLOC_MIN
    if not (near or caching or churn):
        return []
    alloc_ms = ctx.rounds.per_gpu_round_ms(alloc_frac * ctx.rounds.gpu_wall_ns)
    calls = len(ctx.gpu.alloc_calls) / ctx.rounds.n_api_rounds  # read in the API rounds
    evidence: dict[str, object] = {
        "allocated peak (MB)": round(m.get("gpu.memory_peak_mb") or 0.0, 1),
        "reserved peak (MB)": round(reserved_mb, 1),
        "device total (MB)": round(m.get("gpu.memory_total_mb") or 0.0, 1),
        "reserved / total": _pct(used or 0.0),
        "reserved but not allocated at the peak": _pct(cached or 0.0),
        "allocator calls per round (ms)": round(alloc_ms, 3),
        "allocator calls per round": round(calls, 1),
    }
    suggestions = [
        Suggestion(
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the caching allocator grows segments instead "
            "of holding many odd-sized blocks (torch.cuda.empty_cache() only returns cached blocks to the driver: "
            "it frees no tensor, and the next allocation pays cudaMalloc again)",
            f"{reserved_mb * (cached or 0.0):.0f} MB reserved but not allocated at the peak; "
            f"{alloc_ms:.2f} ms per round in allocator calls",
            alloc_ms * 0.5,
            "gpu_memory_pressure",
        ),
        Suggestion(
            REUSE_BUFFERS,
            f"{calls:.0f} allocator calls per round took {alloc_ms:.2f} ms",
            alloc_ms * 0.8,
            "gpu_memory_pressure",
        ),
    ]
    if near:
        suggestions.append(
            Suggestion(
                "Lower the peak: smaller batches or micro-batches, bf16/fp16 activations, torch.inference_mode(), "
                "and drop references to intermediate tensors early",
                f"torch reserved {_pct(used or 0.0)} of the device's memory; near capacity the caching allocator "
                "frees and retries (synchronising the device)",
                alloc_ms * 0.5,
                "gpu_memory_pressure",
            )
        )
    what = []
    if near:
        what.append(f"torch reserved {_pct(used or 0.0)} of the GPU's memory")
    if caching:
        what.append(f"{_pct(cached or 0.0)} of what it reserved was not allocated at the peak")
    if churn:
        what.append(f"allocator calls took {_pct(alloc_frac)} of the round")
    return [
        Finding(
            rule="gpu_memory_pressure",
            title="GPU memory pressure",
            summary="GPU memory: " + "; ".join(what) + ".",
            cause="memory_bound" if churn else None,
            share=alloc_frac,
            share_measured=True,
            confidence=0.9 if churn else 0.7,
            evidence=evidence,
            events=ctx.refs(ctx.gpu.alloc_calls, 5),
            # Without time in the allocator there is no time to save: information only.
            suggestions=suggestions if churn else [],
        )
    ]
