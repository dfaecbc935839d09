"""torch.compile's compilations placed in the rounds they ran in (the collection's meta "torch_compile",
collectors/compiles.py): what the compile rule (rules_compile.py) and the `compile.*` metrics read.

Pure functions of a `Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import Kind
from ..merger import Timeline
from ..rounds import RAISED_FLAG, RoundKind, kinds_of

_MS = 1e6


@dataclass(frozen=True)
class Compile:
    """One frame dynamo compiled: its compile id (`0/1`: frame 0's second compile), where, when, and why."""

    id: str
    frame: str  # "forward (model.py:15)"
    start_ns: int  # from the collection's start, as the timeline's events
    end_ns: int
    reason: str  # why it recompiled (the guard that failed); "" for a first compile
    failed: str  # why dynamo gave up on it ("" when it compiled)
    round: int | None  # the index of the round it ran in; None: outside the rounds
    kind: RoundKind | None  # that round's kind

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / _MS


@dataclass(frozen=True)
class Compiles:
    """The compilations of one collection, by round."""

    known: bool  # the collection recorded them (traces saved before it did, and other tools' traces, did not)
    compiles: list[Compile] = field(default_factory=list)
    #: The graph breaks dynamo met compiling: {reason, explanation, hint, count} (collectors/compiles.py).
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    lost: bool = False  # more compiled than torch keeps records of (its last 64): the first may be missing
    #: The measured rounds' indices, in order: those that are latency samples, not one whose body raised (`raised`).
    measured: list[int] = field(default_factory=list)
    raised: list[int] = field(default_factory=list)  # the measured rounds whose body raised: no latency sample
    round_ms: dict[int, float] = field(default_factory=dict)  # each round's wall time, by index
    round_event: dict[int, int] = field(default_factory=dict)  # each round's ROUND span in the timeline, by index
    warmup: int = 0  # warm-up rounds run

    def in_kind(self, kind: RoundKind) -> list[Compile]:
        return [c for c in self.compiles if c.kind is kind]

    @property
    def in_measured(self) -> list[Compile]:
        """The compilations in the measured rounds that are latency samples (a round whose body raised is not)."""
        return [c for c in self.in_kind(RoundKind.MEASURED) if c.round in self.measured]

    @property
    def in_raised(self) -> list[Compile]:
        """The compilations in a measured round whose body raised (a recompile that failed, say)."""
        return [c for c in self.in_kind(RoundKind.MEASURED) if c.round in self.raised]

    @property
    def measured_rounds(self) -> list[int]:
        """The measured rounds that compiled, in order (of those that are latency samples)."""
        return sorted({c.round for c in self.in_measured if c.round is not None})

    @property
    def measured_ms(self) -> float:
        """Compile time inside the measured rounds (that are latency samples), ms in all."""
        return sum(c.ms for c in self.in_measured)


def compiles(timeline: Timeline) -> Compiles:
    """The timeline's compilations placed in its rounds (the round each started in)."""
    data: Any = timeline.meta.get("torch_compile")
    if not isinstance(data, dict):
        return Compiles(known=False)
    ev = timeline.events
    at = (ev["kind"] == int(Kind.ROUND)).nonzero()[0]
    starts, ends = ev["start"][at].tolist(), ev["end"][at].tolist()
    indices, kinds = ev["value"][at].tolist(), kinds_of(ev["flags"][at]).tolist()
    out = []
    for c in data.get("compiles", []):
        start, end = int(c["start_ns"]), int(c["end_ns"])
        where = next((i for i, (s, e) in enumerate(zip(starts, ends, strict=True)) if s <= start < e), None)
        out.append(
            Compile(
                id=str(c.get("id", "")),
                frame=str(c.get("frame", "")),
                start_ns=start,
                # within its round: the wall clock its times come from is not the rounds' (collectors/compiles.py)
                end_ns=min(end, ends[where]) if where is not None else end,
                reason=str(c.get("reason", "")),
                failed=str(c.get("failed", "")),
                round=int(indices[where]) if where is not None else None,
                kind=RoundKind(kinds[where]) if where is not None else None,
            )
        )
    raised = ((ev["flags"][at] & RAISED_FLAG) != 0).tolist()
    measured = [(int(i), r) for i, k, r in zip(indices, kinds, raised, strict=True) if k == int(RoundKind.MEASURED)]
    return Compiles(
        known=True,
        compiles=out,
        graph_breaks=sorted(data.get("graph_breaks", []), key=lambda b: (-int(b["count"]), str(b["reason"]))),
        lost=bool(data.get("lost", False)),
        measured=[i for i, r in measured if not r],
        raised=[i for i, r in measured if r],
        round_ms={int(i): (e - s) / _MS for i, s, e in zip(indices, starts, ends, strict=True)},
        round_event={int(i): int(a) for i, a in zip(indices, at.tolist(), strict=True)},
        warmup=sum(k == int(RoundKind.WARMUP) for k in kinds),
    )


def compile_metrics(timeline: Timeline, n_rounds: int) -> dict[str, float | None]:
    """`compile.*` metrics: measured rounds that compiled, compile ms per measured round, graph breaks met (None
    where the trace did not record compilations). A measured round whose body raised is none of the measured rounds
    here, as it is no latency sample: a compilation in it is told by the torch_compile finding only."""
    c = compiles(timeline)
    if not c.known:
        return {"compile.measured_rounds": None, "compile.ms_per_round": None, "compile.graph_breaks": None}
    return {
        "compile.measured_rounds": float(len(c.measured_rounds)),
        "compile.ms_per_round": c.measured_ms / max(1, len(c.measured) or n_rounds),  # of every measured round
        "compile.graph_breaks": float(sum(int(b["count"]) for b in c.graph_breaks)),
    }
