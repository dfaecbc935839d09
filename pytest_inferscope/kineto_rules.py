"""The rules `inferscope analyze` adds for an imported torch.profiler (Kineto) trace, and the rule list it runs.

A Kineto trace has no per-round CPU counters, so the built-in CPU rules skip themselves. `kineto_limits` says what
is missing. In a trace without GPU work there is no round graph for the what-if table to replay, so two rules read
the main thread's spans in the steps instead: `kineto_host` (the share of the steps in torch ops, which names the
class: CPU-bound) and `kineto_dataloader` (the steps' time in the DataLoader's `__next__`: loading in the main
thread with num_workers=0, or waiting for the workers).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .analyzer import DEFAULT_RULES, Context, Rule
from .analyzer.base import union_ns
from .events import CallFlag, Kind
from .results import Finding, Suggestion

__all__ = ["MISSING", "RULES", "kineto_dataloader", "kineto_host", "kineto_limits"]

#: What a Kineto trace lacks, in one sentence (report, collectors table, CLI).
MISSING = (
    "a torch.profiler (Kineto) trace records no per-round CPU time, page faults, context switches or RSS, "
    "so the rules that need them (CPU-bound, off-CPU, memory, contention, launch overhead, GPU waits for host) "
    "skip themselves; the verdict comes from the what-if table, whose host side is the trace's CPU ops and CUDA "
    "runtime calls, or, in a trace without GPU work, from the share of the steps spent in torch ops"
)
#: The annotation torch.profiler records around each `next()` of a DataLoader's iterator.
LOADER = "enumerate(DataLoader)#"
#: Time in ops is wall time, not CPU time: an op that blocks (on a lock, on I/O) counts as work. Hence not 1.
OPS_CONFIDENCE = 0.8
#: The iterator classes torch names in that annotation (`enumerate(DataLoader)#<class>.__next__`): num_workers=0
#: (the main thread loads each batch) and num_workers > 0 (it waits for the worker processes' batches).
SINGLE, MULTI = "_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"
#: The share of the steps in the DataLoader's `__next__` worth a finding.
LOADER_MIN = 0.1


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


class _Words(NamedTuple):
    """How a finding names its rounds: the ProfilerSteps, or the whole trace when it has none (then one round)."""

    they: str  # "the steps"
    their: str  # "their"
    each: str  # "each step", before its time in parentheses
    per: str  # after "ms": "/step"
    per_long: str  # after "<x> ms": " per step"
    rounds: tuple[str, object]  # the evidence's row for the rounds


def _words(ctx: Context) -> _Words:
    if ctx.timeline.meta["kineto"].get("steps", 1):
        return _Words("the steps", "their", "each step", "/step", " per step", ("steps", ctx.rounds.n_rounds))
    return _Words("the trace", "its", "the whole trace", "", " of the trace",
                  ("ProfilerStep spans", "none: the whole trace is one round"))  # fmt: skip


def _in_rounds_ns(ctx: Context, idx: np.ndarray) -> int:
    """The union of the spans at `idx` (which start in the measured rounds), each cut at the end of its round."""
    ev, rounds = ctx.timeline.events, ctx.rounds.round_idx
    r0, r1 = ev["start"][rounds], ev["end"][rounds]
    order = r0.argsort()
    k = r0[order].searchsorted(ev["start"][idx], side="right") - 1
    return union_ns(ev["start"][idx], np.minimum(ev["end"][idx], r1[order][np.maximum(k, 0)]))


def _main_thread(ctx: Context) -> np.ndarray | None:
    """Mask of the main thread's events in the measured rounds of a Kineto trace without GPU work (else None)."""
    ev = ctx.timeline.events
    if not isinstance(ctx.timeline.meta.get("kineto"), dict) or ctx.gpu.collected or not len(ctx.rounds.round_idx):
        return None
    return (ev["tid"] == ev["tid"][ctx.rounds.round_idx[0]]) & ctx.rounds.in_rounds


def kineto_host(ctx: Context) -> list[Finding]:
    """No GPU work in the trace: the steps ran on the CPU; the share of them in torch ops is CPU-bound time (unless
    the trace shows a device whose work it did not record: the ops may have waited for it)."""
    on = _main_thread(ctx)
    if on is None:
        return []
    tl, r = ctx.timeline, ctx.rounds
    ev = tl.events
    ops = (on & (ev["kind"] == int(Kind.CALL)) & ((ev["flags"] & int(CallFlag.OP)) != 0)).nonzero()[0]
    if not len(ops):
        return []
    wall = max(1, r.wall_ns)
    share = _in_rounds_ns(ctx, ops) / wall
    round_ms = r.per_round_ms(wall)
    names = {tl.strings[i] for i in np.unique(ev["name"][ops]).tolist()}
    spots = [(h.function, h.self_ms) for h in ctx.cpu.hotspots if h.function in names and h.self_ms > 0][:3]
    w = _words(ctx)
    evidence: dict[str, object] = {
        w.rounds[0]: w.rounds[1],
        ("step time (ms, mean)" if w.per else "trace time (ms)"): round(round_ms, 3),
        "in torch ops on the main thread": f"{round_ms * share:.3f} ms{w.per} ({_pct(share)})",
        "elsewhere (Python between the ops, waits, the profiler's own work)": _pct(1 - share),
    }
    for i, (fn, ms) in enumerate(spots, 1):
        evidence[f"op {i}"] = f"{fn}: {ms:.3f} ms{w.per} self ({_pct(ms / round_ms if round_ms else 0.0)})"
    top = f"; the most in {spots[0][0]} ({spots[0][1]:.3f} ms{w.per} self)" if spots else ""
    in_ops = f"{w.each} ({round_ms:.3f} ms) spent {_pct(share)} of its time in torch ops on the main thread{top}"
    title = f"{w.they.capitalize()} ran on the CPU alone: {_pct(share)} of {w.their} time in torch ops"
    summary = (f"No GPU work in the trace: {in_ops}. The trace has no CPU time, so this is wall time in the ops: an "
               "op that blocked would count too.")  # fmt: skip
    device = ctx.timeline.meta["kineto"].get("unrecorded_device")
    if device:
        title = f"{_pct(share)} of {w.they} in torch ops, and a device whose work the trace did not record"
        summary = (f"The trace records no GPU work, but it shows a device ({device}): {in_ops}. Those ops may wait "
                   "for the device's work (a copy to the host, a synchronisation), so this does not say CPU-bound. "
                   "Record with ProfilerActivity.CUDA (or the device's activity) as well to see it.")  # fmt: skip
    return [
        Finding(
            rule="kineto_host",
            title=title,
            summary=summary,
            cause=None if device else "cpu_bound",
            share=min(1.0, share),
            share_measured=True,
            confidence=OPS_CONFIDENCE,
            evidence=evidence,
            events=ctx.refs(ops, 3),
            suggestions=[
                Suggestion(
                    action=f"Speed up or take off the critical path: {fn}",
                    rationale=f"{ms:.3f} ms{w.per_long} ({_pct(ms / round_ms if round_ms else 0.0)}) is spent in "
                    "this op itself",
                    saving_ms=ms,
                    rule="kineto_host",
                )
                for fn, ms in ([] if device else spots[:2])  # (with a device, an op's time may be a wait)
            ],
        )
    ]


def kineto_dataloader(ctx: Context) -> list[Finding]:
    """No GPU work in the trace, and the steps spend much of their time in the DataLoader's `__next__`: loading the
    batches in the main thread (num_workers=0) or waiting for the workers', as the annotation's iterator class says."""
    on = _main_thread(ctx)
    if on is None:
        return []
    tl, r = ctx.timeline, ctx.rounds
    ev = tl.events
    scopes = (on & (ev["kind"] == int(Kind.SCOPE))).nonzero()[0]
    waits = np.array([i for i in scopes.tolist() if tl.name(i).startswith(LOADER)], dtype=np.int64)
    wall = max(1, r.wall_ns)
    share = _in_rounds_ns(ctx, waits) / wall if len(waits) else 0.0
    if share < LOADER_MIN:
        return []
    wait_ms = r.per_round_ms(wall) * share
    w = _words(ctx)
    iters = {tl.name(i).removeprefix(LOADER).partition(".")[0] for i in waits.tolist()}
    each = f"{w.each.capitalize()} spent {wait_ms:.3f} ms ({_pct(share)}) in the DataLoader's __next__"
    if iters == {SINGLE}:  # num_workers=0: the main thread loads the batch; the time is that work
        title = f"Loading the batches in the main thread: {_pct(share)} of {w.they}"
        summary = (f"{each} loading the batch in this thread (num_workers=0, {SINGLE}): the loading's own "
                   "work (__getitem__, collate), not a wait; the torch ops it runs count in the CPU finding "
                   "too.")  # fmt: skip
        action = ("Load the batches in worker processes while the step runs (DataLoader num_workers > 0, "
                  "persistent_workers=True) or make __getitem__ and collate cheaper")  # fmt: skip
        why = "loading the batch in this thread"
        loading = "in the main thread (num_workers=0)"
    elif iters == {MULTI}:
        title = f"Waiting for the DataLoader's workers: {_pct(share)} of {w.they}"
        summary = (f"{each} waiting for a batch from its worker processes ({MULTI}): the workers do not keep up "
                   f"with {w.they}.")  # fmt: skip
        action = ("Have the batches ready when the step asks: more worker processes (DataLoader num_workers), a "
                  "larger prefetch_factor, persistent_workers=True, or a cheaper __getitem__ and collate")  # fmt: skip
        why = "waiting for the workers' batches"
        loading = "in worker processes"
    else:  # another iterator class (a DataLoader subclass's), or several loaders: the annotation does not tell
        title = f"Waiting for the DataLoader: {_pct(share)} of {w.they}"
        summary = f"{each}: waiting for its worker processes, or loading the batch in this thread (num_workers=0)."
        action = ("Have the batches ready when the step asks: load in worker processes (DataLoader num_workers, "
                  "prefetch_factor, persistent_workers=True) or make __getitem__ and collate cheaper")  # fmt: skip
        why = "in the DataLoader's __next__"
        loading = "not told by the annotation"
    return [
        Finding(
            rule="kineto_dataloader",
            title=title,
            summary=summary,
            cause=None,
            share=share,
            share_measured=True,
            confidence=1.0,
            evidence={
                f"in the DataLoader's __next__ (ms{w.per})": round(wait_ms, 3),
                "annotation": tl.name(int(waits[0])),
                "batches loaded": loading,
                w.rounds[0]: w.rounds[1],
            },
            events=ctx.refs(waits, 3),
            suggestions=[
                Suggestion(
                    action=action,
                    rationale=f"{wait_ms:.3f} ms{w.per_long} is spent {why}",
                    saving_ms=wait_ms,
                    rule="kineto_dataloader",
                )
            ],
        )
    ]


def kineto_limits(ctx: Context) -> list[Finding]:
    """Say what an imported torch.profiler trace cannot tell, so a missing number is never read as zero."""
    info = ctx.timeline.meta.get("kineto")
    if not isinstance(info, dict):
        return []
    counts = info.get("counts", {})
    evidence: dict[str, object] = {"source": info.get("source", "?"), "ProfilerStep rounds": info.get("steps", 0)}
    evidence.update({f"{k} records": v for k, v in sorted(counts.items()) if k != "ignored"})
    evidence["other events ignored"] = counts.get("ignored", 0)
    return [
        Finding(
            rule="kineto_import",
            title="Imported from a torch.profiler trace: no CPU or memory counters",
            summary=f"Not measured: {MISSING}. The GPU rules use the trace's kernel, copy and memset records."
            + "".join(f" Rounds: {note}." for note in info.get("notes", [])),
            cause=None,
            share=0.0,
            share_measured=False,  # what the trace cannot tell, no time of the rounds
            confidence=1.0,
            evidence=evidence,
        )
    ]


#: The built-in rules (those that need CPU counters skip themselves), the trace's own, and the one that says what is
#: missing.
RULES: list[Rule] = [*DEFAULT_RULES, kineto_host, kineto_dataloader, kineto_limits]
