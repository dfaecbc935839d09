"""The communication rules: collectives (NCCL) the GPU's compute did not hide bound the step; a GPU waited for
another (peer copies between them).

A pure function from a `Context` to findings, like the rules in `rules.py`; the measurement is in
`comm.py`.
"""

from __future__ import annotations

import numpy as np

from ..events import Kind, copy_devices
from ..results import Finding, Suggestion
from .comm import comm_mask
from .context import Context
from .rules import _pct
from .rules_gpu import _gap_refs

#: Exposed communication must take at least this share of the round to report it.
COMM_MIN = 0.05


def communication(ctx: Context) -> list[Finding]:
    """Collective kernels ran while the device had no compute to overlap them: communication-bound."""
    if not ctx.gpu.collected:
        return []
    strings = ctx.timeline.strings
    devices = ctx.gpu.comm_devices
    if not devices:
        return []
    wall = max(1, ctx.rounds.gpu_wall_ns)
    worst = max(devices, key=lambda d: d.exposed_ns)
    share = worst.exposed_ns / wall
    if share < COMM_MIN:
        return []
    comm = ctx.gpu.comm
    k = ctx.gpu.records[comm]
    dur = (k["end"] - k["start"]).astype(float)
    weights = np.bincount(k["name"], weights=dur)
    top = [int(i) for i in (-weights).argsort()[:3] if weights[i] > 0]
    per_round_ms = ctx.rounds.per_gpu_round_ms
    evidence: dict[str, object] = {}
    for d in devices:
        overlap = d.overlap_fraction
        evidence[f"device {d.device}"] = (
            f"communication {per_round_ms(d.comm_ns):.2f} ms/round ({d.kernels} collective kernels), "
            f"{_pct(overlap or 0.0)} of it overlapped by compute, exposed {per_round_ms(d.exposed_ns):.2f} "
            f"ms/round ({_pct(d.exposed_ns / wall)} of the round)"
        )
    for i, n in enumerate(top, 1):
        evidence[f"collective {i}"] = f"{strings[n][:120]}: {per_round_ms(float(weights[n])):.2f} ms/round"
    exposed_ms = per_round_ms(worst.exposed_ns)
    comm_ms = per_round_ms(worst.comm_ns)
    idx = (ctx.timeline.mask(Kind.KERNEL) & ctx.rounds.in_gpu_rounds).nonzero()[0]
    chosen = idx[comm_mask(ctx.timeline.events[idx], strings)] if len(idx) else idx
    return [
        Finding(
            rule="communication",
            title="Communication-bound: collectives the compute did not hide",
            summary=(
                f"Collective kernels took {comm_ms:.2f} ms per round on device {worst.device}, "
                f"{exposed_ms:.2f} ms of it with no compute beside them ({_pct(share)} of the round)."
            ),
            cause="communication_bound",
            share=share,
            share_measured=True,
            confidence=min(1.0, 0.6 + share),
            evidence=evidence,
            events=ctx.refs(chosen, 5),
            suggestions=[
                Suggestion(
                    "Overlap the collectives with compute (async collectives on their own stream, the next "
                    "layer's work issued before waiting)",
                    f"{exposed_ms:.2f} ms per round of communication runs with nothing beside it",
                    exposed_ms,
                    "communication",
                ),
                Suggestion(
                    "Move less data between GPUs (lower-precision activations, fewer or fused collectives, a "
                    "parallel layout that keeps more work local)",
                    f"collectives take {comm_ms:.2f} ms per round; halving the bytes roughly halves them",
                    comm_ms * 0.5 * (worst.exposed_ns / max(1, worst.comm_ns)),
                    "communication",
                ),
            ],
        )
    ]


def peer_wait(ctx: Context) -> list[Finding]:
    """A GPU sat idle waiting for another GPU (idle.py's `peer_wait`): information, with the two devices named."""
    if not ctx.gpu.collected:
        return []
    waits = ctx.gpu.idle.peer_waits()
    if not waits:
        return []
    scale = ctx.gpu.idle_scale if ctx.rounds.has_trace_rounds else 1.0
    wall = max(1, ctx.rounds.gpu_wall_ns)
    ms = {pair: ctx.rounds.per_gpu_round_ms(ns * scale) for pair, ns in waits.items()}
    (idle_dev, other), worst_ms = max(ms.items(), key=lambda kv: kv[1])
    share = max(waits.values()) * scale / wall
    cp = ctx.gpu.copies["all"]
    src, dst = copy_devices(cp["flags"])
    evidence: dict[str, object] = {}
    for (d, p), wait_ms in sorted(ms.items()):
        evidence[f"device {d}"] = f"idle {wait_ms:.2f} ms/round waiting for device {p}"
    for s, t in sorted({(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a >= 0 and b >= 0 and a != b}):
        sel = (src == s) & (dst == t)
        n = ctx.rounds.n_gpu_rounds
        evidence[f"PtoP {s}\u2192{t}"] = (
            f"{np.count_nonzero(sel) / n:g} copies/round, {float(np.sum(cp['value'][sel])) / 2**20 / n:.1f} MB/round"
        )
    return [
        Finding(
            rule="peer_wait",
            title="Waiting for the other GPU",
            summary=(
                f"Device {idle_dev} sat idle {worst_ms:.2f} ms per round ({_pct(share)} of the round) waiting for "
                f"device {other}: its next work started only when a peer copy from device {other} arrived."
            ),
            cause=None,  # the GPUs take turns: which fix pays (overlap, balance) is the what-ifs' and the user's call
            share=share,
            share_measured=True,
            confidence=0.8,
            evidence=evidence,
            events=_gap_refs(ctx, ctx.gpu.idle.mask("peer_wait")),
            suggestions=[
                Suggestion(
                    f"Overlap the GPUs' work: split the batch into micro-batches so device {idle_dev} works on one "
                    f"while device {other} computes the next (pipeline parallelism), or balance the split",
                    f"device {idle_dev} waits {worst_ms:.2f} ms per round for device {other}; two micro-batches "
                    "would hide about half of it",
                    worst_ms * 0.5,
                    "peer_wait",
                )
            ],
        )
    ]


def peer_wait_note(ctx: Context) -> str:
    """The diagnosis's line on GPUs waiting for each other ("" when none did): each idle device and the one it
    waited for. The what-ifs replay each device's work as recorded; they do not move one device's work earlier
    for another's sake."""
    if not ctx.gpu.collected:
        return ""
    waits = ctx.gpu.idle.peer_waits()
    scale = ctx.gpu.idle_scale if ctx.rounds.has_trace_rounds else 1.0
    return "; ".join(
        f"device {d} sat idle {ctx.rounds.per_gpu_round_ms(ns * scale):.2f} ms per round waiting for device {p}"
        for (d, p), ns in sorted(waits.items(), key=lambda kv: -kv[1])
    )
