"""The analyzer: rules turn a timeline into findings; the classification comes from the findings.

`BottleneckAnalyzer(timeline).analyze()` (the seeds' interface) and `analyze(timeline)`
return an `Analysis`. The analyzer never prints and never writes files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..merger import Timeline
from ..results import UNCLASSIFIED, Analysis, Finding, Suggestion
from ..rounds import RoundKind, kinds_of
from .context import LAUNCH_GAP_NS, Context
from .extension import run_rules
from .idle import CAUSES, IdleGaps, attribute_idle
from .metrics import compute_metrics
from .rules import Rule, cpu_contention, cpu_saturation, off_cpu_wait
from .rules_autograd import autograd_recording
from .rules_comm import communication, peer_wait, peer_wait_note
from .rules_compile import torch_compile, torch_compile_graph_breaks
from .rules_gpu import gpu_idle_host, gpu_saturation, launch_overhead, sync_stall
from .rules_memory import is_leak, memory_pressure
from .rules_python import dataloader_workers, dropout_active, python_gc
from .rules_rounds import cold_first_round
from .rules_transfer import gpu_memory_pressure, transfers
from .whatif import WhatIf, WhatIfTable, diagnose
from .whatif_memory import memory_whatifs

#: The built-in rules, in the order their findings are listed on equal shares.
DEFAULT_RULES: list[Rule] = [
    cpu_saturation,
    off_cpu_wait,
    memory_pressure,
    python_gc,
    dropout_active,
    autograd_recording,
    dataloader_workers,
    cold_first_round,
    gpu_saturation,
    communication,
    peer_wait,
    gpu_idle_host,
    transfers,
    sync_stall,
    launch_overhead,
    gpu_memory_pressure,
    cpu_contention,
    torch_compile,
    torch_compile_graph_breaks,
]

__all__ = [
    "CAUSES", "DEFAULT_RULES", "Analysis", "BottleneckAnalyzer", "Context", "IdleGaps", "Rule",
    "WhatIf", "analyze", "attribute_idle", "classify", "idle_gaps", "unclassified_reason",
]  # fmt: skip

#: The what-if table decides the class only when the unchanged replay is this close to the measured rounds.
MAX_REPLAY_ERROR = 0.1
#: A class needs a finding explaining at least this share of the time to be named.
MIN_SHARE = 0.3


def classify(findings: Iterable[Finding]) -> tuple[str, float]:
    """The bottleneck class with the largest explained share, and a confidence in [0, 1].

    Confidence is the winning finding's own confidence, reduced when another class
    explains nearly as much of the time (a close call is not a confident verdict).
    """
    best: dict[str, Finding] = {}
    for f in findings:
        if f.cause is not None and (f.cause not in best or f.share > best[f.cause].share):
            best[f.cause] = f
    ranked = sorted(best.values(), key=lambda f: (f.share, f.confidence), reverse=True)
    if not ranked or ranked[0].share < MIN_SHARE:
        top = ranked[0].share if ranked else 0.0
        return UNCLASSIFIED, round(max(0.0, 1.0 - top), 3)
    win = ranked[0]
    runner = ranked[1].share if len(ranked) > 1 else 0.0
    margin = (win.share - runner) / win.share if win.share else 0.0
    return win.cause or UNCLASSIFIED, round(max(0.0, min(1.0, win.confidence * (0.5 + 0.5 * margin))), 3)


def unclassified_reason(findings: Iterable[Finding]) -> str:
    """Why `classify` named no class: no finding points to one, or none explains MIN_SHARE of the time (the largest
    named). A finding that points to a class without measuring its time apart (`share_measured` false: a custom rule
    without `share:`, say) is no "0%": the reason names its rule as such."""
    pointing = [f for f in findings if f.cause is not None]
    best = max((f for f in pointing if f.share_measured), key=lambda f: f.share, default=None)
    unmeasured = sorted({f"{f.rule} ({f.cause})" for f in pointing if not f.share_measured})
    if not unmeasured:
        if best is None:
            return "no finding points to a class"
        return f"no class explains {MIN_SHARE:.0%} of the measured time (the most: {best.cause}, {best.share:.0%})"
    why = (
        f"no class explains {MIN_SHARE:.0%} of the measured time (the most: {best.cause}, {best.share:.0%})"
        if best is not None
        else "no finding that measures its time points to a class"
    )
    return f"{why}; {', '.join(unmeasured)} point{'s' * (len(unmeasured) == 1)} to a class without measuring its time"


def no_measured_round(ctx: Context) -> str:
    """Why no class is named where rounds ran but no measured round completed (the body raised in the first, or in the
    warm-up): the rounds analysed instead are not what the class would be about. "" where one completed."""
    r = ctx.rounds
    if not len(r.round_idx) or r.latency.samples_ms:
        return ""
    kinds = kinds_of(ctx.timeline.events["flags"][r.round_idx])
    n = len(kinds)
    if (kinds == RoundKind.MEASURED).all():
        raised, rounds = "in its first measured round", "that round, cut short"
    elif (kinds == RoundKind.WARMUP).all():
        raised = "during the warm-up"
        rounds = f"the {n} warm-up rounds, the one that raised included" if n > 1 else "that warm-up round, cut short"
    else:
        return "no measured round completed, so no class is named"
    return (
        f"no measured round completed (the body raised {raised}), so no class is named; the breakdown and findings "
        f"below are from {rounds}"
    )


def raised_round_note(ctx: Context) -> str:
    """What a partial report says of the measured rounds whose body raised while others completed: they are left out
    of everything measured (base.Rounds.round_idx). "" where none did, or none completed (`no_measured_round`)."""
    r = ctx.rounds
    if not len(r.raised_idx):
        return ""
    start = ctx.timeline.events["start"]
    measured = [*r.round_idx.tolist(), *r.raised_idx.tolist(), *r.compiled_idx.tolist()]
    starts = sorted(start[measured].tolist())  # the measured rounds, in time
    nth = ", ".join(str(starts.index(t) + 1) for t in sorted(start[r.raised_idx].tolist()))
    n = len(r.round_idx)
    rounds = f"measured round{'s' if len(r.raised_idx) > 1 else ''} {nth}"
    return (
        f"the body raised in {rounds}, cut short: {'they are' if len(r.raised_idx) > 1 else 'it is'} left out of the "
        f"latency, the breakdown and the findings, which are from the {n} measured round{'s' if n != 1 else ''} that "
        "completed"
    )


def _rank(ctx: Context) -> Callable[[Finding], tuple[bool, bool, float]]:
    """The findings' order: by share; torch.compile's first where its rounds were left out of the rest (base.Rounds:
    the others' shares are of the rounds analysed, its own of every measured round), and a cold first round's, which
    the others' per-round figures average over; then a leak's (host memory growing every round), which explains no
    share of the time (its kernel time may be none) and sorted last by it until 2026-11-30, below findings of 1%."""
    left_out = len(ctx.rounds.compiled_idx) > 0
    return lambda f: ((left_out and f.rule == "torch_compile") or f.rule == "cold_first_round", is_leak(f), f.share)


def rank_suggestions(findings: Iterable[Finding]) -> list[Suggestion]:
    """All suggestions, largest estimated saving first, without duplicates."""
    seen: set[str] = set()
    out = []
    for s in sorted((s for f in findings for s in f.suggestions), key=lambda s: s.saving_ms, reverse=True):
        if s.action not in seen:
            seen.add(s.action)
            out.append(s)
    return out


def with_simulated(table: WhatIfTable, suggestions: list[Suggestion]) -> list[Suggestion]:
    """The simulated fixes first, then the rules' suggestions; a fix simulated stands for the rules' own estimate
    of it (the same action), whether it saved anything or not."""
    simulated = {r.action for r in table.rows}
    return table.suggestions() + [s for s in suggestions if s.action not in simulated]


def analyze(
    timeline: Timeline,
    rules: Iterable[Rule] = DEFAULT_RULES,
    gpu_reason: str = "",
    ctx: Context | None = None,
    *,
    launch_gap_ns: int = LAUNCH_GAP_NS,
    whatifs: Iterable[WhatIf] = (),
) -> Analysis:
    """Run every rule over the timeline, simulate the fixes, and derive the verdict.

    The class is the simulated fix that saves the most (`whatif.py`), when the rounds' graphs can be
    built; otherwise it comes from the findings (`classify`), and `Analysis.whatif_replay` says why.
    `whatifs` are simulated after the built-in ones (the `pytest_inferscope_whatifs` hook); one that fails loses its
    own row only, said in `extension_errors` as a failed added rule is.
    `ctx` lets a caller that needs the context too (for the latency statistics, or `ctx.gpu.idle` for
    a timeline view) build it once; `launch_gap_ns` is used when the context is built here.
    """
    if ctx is None:
        ctx = Context(timeline, launch_gap_ns=launch_gap_ns)
    ctx.gpu_reason = gpu_reason or "no GPU data was collected"
    ctx.metrics = compute_metrics(ctx)  # metrics.py owns the computation; the context only holds the result
    findings, errors = run_rules(rules, DEFAULT_RULES, ctx)
    findings.sort(key=_rank(ctx), reverse=True)
    bottleneck, confidence = classify(findings)
    suggestions = rank_suggestions(findings)
    table, why = diagnose(ctx, memory_whatifs(ctx), whatifs)
    replayed: dict[str, Any] = {"decided_by": "rules", "fallback": why, "rule_class": bottleneck}
    if table is not None:
        cls, conf, verdict = table.classify()
        replayed = {
            "decided_by": "whatif",
            "measured_ms": table.measured_ms,
            "replay_ms": table.replay_ms,
            "replay_error": round(table.replay_error, 5),
            "rounds": table.rounds,
            "verdict": verdict,
            "rule_class": bottleneck,
        }
        if abs(table.replay_error) > MAX_REPLAY_ERROR:
            # The graph does not explain the rounds (work another thread waited for, cross-stream events): its
            # savings are shown, but not trusted with the verdict.
            replayed["decided_by"] = "rules"
            replayed["fallback"] = (
                f"the unchanged replay misses the measured rounds by {table.replay_error:+.0%} (more than "
                f"{MAX_REPLAY_ERROR:.0%}): the graph lacks dependencies it cannot see, so the rules' finding decides"
            )
        elif cls == UNCLASSIFIED and bottleneck != UNCLASSIFIED:
            # No GPU-side fix saves enough; a class the rules found on what the graph does not model (memory
            # growth, CPU contention) stands, and the table says what the fixes would save.
            replayed["decided_by"] = "rules"
            replayed["fallback"] = f"{verdict}; the rules' finding decides"
        else:
            bottleneck, confidence = cls, conf
        suggestions = with_simulated(table, suggestions)
    why = ""
    if none := no_measured_round(ctx):  # what the rules or the what-ifs made of those rounds stays in whatif_replay
        bottleneck, confidence, why = UNCLASSIFIED, 0.0, none
    elif bottleneck == UNCLASSIFIED:  # no class, so no confidence in one: the reports say why instead
        why = replayed["verdict"] if replayed["decided_by"] == "whatif" else unclassified_reason(findings)
    if note := peer_wait_note(ctx):  # more than one GPU, one waiting for another: the diagnosis names both
        replayed["peer_wait"] = note
    return Analysis(
        bottleneck=bottleneck,
        confidence=confidence,
        findings=findings,
        suggestions=suggestions,
        breakdown=ctx.breakdown(),
        hotspots=ctx.cpu.hotspots[:20],
        no_samples_reason=ctx.cpu.no_samples_reason,
        unclassified_reason=why,
        raised_round_note=raised_round_note(ctx),
        scopes=ctx.cpu.scopes,
        metrics=ctx.metrics,
        gpu=ctx.gpu.summary(ctx.metrics.get("gpu.memory_peak_mb")),
        whatif=table.rows if table is not None else [],
        whatif_replay=replayed,
        extension_errors=errors + (table.errors if table is not None else []),  # the rules', then the what-ifs'
    )


def idle_gaps(timeline: Timeline, launch_gap_ns: int = LAUNCH_GAP_NS) -> IdleGaps:
    """Every GPU idle interval of the measured rounds with its cause, for a timeline view.

    `gaps.rows()` gives (start_ns, end_ns, cause) on the timeline's clock, cause one of `CAUSES`
    (host_wait, launch_gap, sync_stall, round_end, other, peer_wait); see `idle.py` for the definitions.
    Empty without GPU data.
    """
    return Context(timeline, launch_gap_ns=launch_gap_ns).gpu.idle


class BottleneckAnalyzer:
    """The seeds' interface: `BottleneckAnalyzer(timeline).analyze() -> Analysis`."""

    def __init__(self, timeline: Timeline, rules: Iterable[Rule] = DEFAULT_RULES, gpu_reason: str = "") -> None:
        self.timeline = timeline
        self.rules = list(rules)
        self.gpu_reason = gpu_reason

    def analyze(self) -> Analysis:
        return analyze(self.timeline, self.rules, self.gpu_reason)
