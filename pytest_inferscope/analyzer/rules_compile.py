"""The torch.compile rules: a measured round that compiled timed the compiler, and graph breaks split the model.

(Read from torch._dynamo's own records of what it compiled during the test: collectors/compiles.py,
analyzer/compiles.py.) Both findings are information (no class): what the other rules say of a round that
compiled is about the compiler, and the compile finding, holding that round's time, is listed first when it explains
the most.
"""

from __future__ import annotations

from typing import Any

from ..results import Finding, Suggestion
from ..rounds import RoundKind
from .compiles import Compile, Compiles, compiles
from .context import Context

#: Compilations named one by one in a finding's evidence, and rounds in its summary; the rest are counted.
LISTED = 6
ROUNDS_SAID = 3
#: A recompile for a tensor's size (dynamo's guard text), answered by marking the dimension dynamic.
_SIZE_GUARD = "size mismatch"
#: How collectors/compiles.py names the function dynamo resumes in after a graph break.
_AFTER = " after the graph break at "


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _compile_line(c: Compile) -> str:
    why = f"gave up: {c.failed}" if c.failed else f"recompiled: {c.reason}" if c.reason else "first compile"
    return f"{c.frame}, {c.ms:.1f} ms ({why})"


def _in_rounds(view: Compiles, these: list[Compile]) -> str:
    """'round 0: 2 compilations, 1870 ms of its 1923 ms; round 2: ...' for the rounds of `these` compilations (a
    measured round whose body raised said to be: 'round 3, which raised: ...')."""
    parts = []
    rounds = sorted({c.round for c in these if c.round is not None})
    for r in rounds[:ROUNDS_SAID]:
        cs = [c for c in view.compiles if c.round == r]
        ms = sum(c.ms for c in cs)
        which = ", which raised" if r in view.raised else ""
        parts.append(
            f"round {r}{which}: {_plural(len(cs), 'compilation')}, {ms:.1f} ms of its {view.round_ms[r]:.1f} ms"
        )
    if len(rounds) > ROUNDS_SAID:
        parts.append(f"and {len(rounds) - ROUNDS_SAID} more")
    return "; ".join(parts)


def _suggestions(view: Compiles) -> list[Suggestion]:
    """More warm-up when the compilations stopped before the last measured round (not because dynamo gave up: the
    rounds after it ran uncompiled); shapes made dynamic (or fixed) when a tensor's size made it recompile; the
    guard's reason otherwise, when the compilations went on to the last round."""
    rounds = view.measured_rounds
    per_round = view.measured_ms / max(1, len(view.measured))
    measured = view.in_measured
    out = []
    last = view.measured.index(rounds[-1])
    gave_up = any(c.failed for c in view.compiles)
    if last < len(view.measured) - 1 and not gave_up:
        out.append(
            Suggestion(
                action=f"Run at least {_plural(view.warmup + last + 1, 'warm-up round')} (the marker's warmup=, or "
                "--inferscope-warmup), so that torch.compile compiles before the measured rounds",
                rationale=f"the compilations ended in measured round {rounds[-1]}; the "
                f"{_plural(len(view.measured) - last - 1, 'measured round')} after it compiled nothing",
                saving_ms=per_round,
                rule="torch_compile",
            )
        )
    if any(_SIZE_GUARD in c.reason for c in measured):
        out.append(
            Suggestion(
                action="Mark the dimension that changes dynamic (torch.compile(..., dynamic=True), or "
                "torch._dynamo.mark_dynamic(x, dim) on the input), or pad the inputs to a few fixed shapes "
                "compiled in the warm-up",
                rationale="a new input size recompiled: " + next(c.reason for c in measured if _SIZE_GUARD in c.reason),
                saving_ms=per_round,
                rule="torch_compile",
            )
        )
    elif any(c.reason for c in measured) and last == len(view.measured) - 1:
        out.append(
            Suggestion(
                action="Find what the failing guard depends on and keep it constant between calls (run with "
                "TORCH_LOGS=recompiles to see every recompile's reason)",
                rationale="the compiled code was specialised on something that changed: "
                + next(c.reason for c in measured if c.reason),
                saving_ms=per_round,
                rule="torch_compile",
            )
        )
    return out


def torch_compile(ctx: Context) -> list[Finding]:
    """torch.compile compiled during the rounds: in the measured ones (their latency is the compiler's), or only
    in the warm-up (said, so that a user knows the warm-up did its job and what the compilation cost)."""
    view = compiles(ctx.timeline)
    if not view.compiles:
        return []
    warm, measured, raised = view.in_kind(RoundKind.WARMUP), view.in_measured, view.in_raised
    evidence: dict[str, object] = {
        "compilations in the warm-up": f"{len(warm)}, {sum(c.ms for c in warm):.1f} ms",
        "compilations in the measured rounds": f"{len(measured)}, {view.measured_ms:.1f} ms",
    }
    if raised:  # no latency sample (the body raised there), so not one of the measured rounds that compiled
        evidence["compilations in the round that raised"] = f"{len(raised)} ({_in_rounds(view, raised)})"
    if view.lost:
        evidence["not listed"] = "torch keeps records of its last 64 compilations only: earlier ones are missing"
    for c in (measured or view.compiles)[:LISTED]:
        where = f"round {c.round}" if c.round is not None else "outside the rounds"
        evidence[f"compile {c.id}"] = f"{where}: {_compile_line(c)}"
    failed = next((c for c in view.compiles if c.failed), None)
    gave_up = (
        f" Dynamo gave up on {failed.frame} in round {failed.round} ({failed.failed}): from then on, a call its "
        "compiled code does not fit runs uncompiled."
        if failed
        else ""
    )
    if not measured:  # (a measured round whose body raised is no latency sample: said apart, as where it compiled)
        done = " that completed" if raised else ""
        where = "; ".join(filter(None, [_in_rounds(view, warm), _in_rounds(view, raised)])) or "between the rounds"
        return [
            Finding(
                rule="torch_compile",
                title=f"torch.compile compiled outside the measured rounds{done}"
                if raised
                else "torch.compile compiled in the warm-up only",
                summary=f"torch.compile compiled {_plural(len(view.compiles), 'frame')} "
                f"({sum(c.ms for c in view.compiles):.1f} ms) outside the measured rounds{done} ({where}); the "
                f"measured rounds{done} compiled nothing.{gave_up}",
                cause=None,
                share=0.0,
                confidence=1.0,
                evidence=evidence,
                share_measured=True,  # the measured rounds' compile time was measured, and is none
            )
        ]
    rounds = view.measured_rounds
    wall_ms = sum(view.round_ms.get(r, 0.0) for r in view.measured)
    share = min(1.0, view.measured_ms / wall_ms) if wall_ms > 0 else 0.0
    left = len(ctx.rounds.compiled_idx)
    if left:  # (base.Rounds.round_idx: where some measured round compiled nothing)
        n = len(ctx.rounds.round_idx)
        gave_up += (
            f" {'They are' if left > 1 else 'It is'} left out of the breakdown, the other findings and the class, which"
            f" are from the {_plural(n, 'measured round')} that compiled nothing; the latency keeps "
            f"{'them' if left > 1 else 'it'}."
        )
    return [
        Finding(
            rule="torch_compile",
            title="torch.compile compiled during measured rounds: their latency is compilation",
            summary=f"{_plural(len(rounds), 'measured round')} of {len(view.measured)} compiled "
            f"({_in_rounds(view, measured)}): {view.measured_ms:.1f} ms of the {wall_ms:.1f} ms "
            f"measured is torch.compile compiling, not the model running.{gave_up}",
            cause=None,
            share=share,
            share_measured=True,
            confidence=1.0,
            evidence=evidence,
            events=ctx.refs([view.round_event[r] for r in rounds], 3),
            suggestions=_suggestions(view),
        )
    ]


def _break_line(b: dict[str, Any]) -> str:
    explanation = f": {b['explanation']}" if b.get("explanation") else ""
    return f"{b['reason']}{explanation} (met {_plural(int(b['count']), 'time')})"


def torch_compile_graph_breaks(ctx: Context) -> list[Finding]:
    """Dynamo broke the compiled model's graph while compiling in this test: each break leaves Python (and a guard
    check) between two compiled graphs on every call, and each resumed frame compiles and may recompile apart."""
    view = compiles(ctx.timeline)
    if not view.graph_breaks:
        return []
    n = sum(int(b["count"]) for b in view.graph_breaks)
    resumed = sorted({c.frame.split(_AFTER)[1] for c in view.compiles if _AFTER in c.frame})
    where = f" (the compiled code resumes at {', '.join(resumed)})" if resumed else ""
    evidence: dict[str, object] = {
        f"graph break {i}": _break_line(b) for i, b in enumerate(view.graph_breaks[:LISTED], 1)
    }
    if resumed:
        evidence["resumed at"] = ", ".join(resumed)
    top = view.graph_breaks[0]
    hint = f" ({top['hint']})" if top.get("hint") else ""
    return [
        Finding(
            rule="torch_compile_graph_breaks",
            title="torch.compile graph breaks: the model runs as several graphs with Python between them",
            summary=f"Dynamo met {_plural(n, 'graph break')} compiling in this test{where}: {_break_line(top)}.",
            cause=None,
            share=0.0,  # what a break costs a call is not measured: the code between the graphs runs uncompiled
            share_measured=False,
            confidence=1.0,
            evidence=evidence,
            suggestions=[
                Suggestion(
                    action=f"Remove the graph break: {top['reason']}{hint}; torch.compile(..., fullgraph=True) "
                    "makes every break an error that names its line",
                    rationale=f"{_plural(n, 'graph break')} met: the code between the graphs runs eagerly on every "
                    "call, and each graph is guarded and may recompile on its own",
                    saving_ms=0.0,
                    rule="torch_compile_graph_breaks",
                )
            ],
        )
    ]
