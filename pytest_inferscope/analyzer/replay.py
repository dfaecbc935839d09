"""Replay a round's dependency graph (graph.py): recompute when each GPU op and the round end.

The host walks its nodes in order: a segment advances its clock by its length; a call issues its
GPU ops at the call's start and advances the clock by the call's own time; a blocking call first
waits until every op it waited for has finished. An op starts when it is ready (its call's start
plus its launch-to-start time; external ops at their measured start) and the op before it on its
stream has finished (plus the gap it kept behind that op; streams the trace shows running ops
side by side are not one queue). The round ends when the host is done and
every op that ended inside the measured round has ended.

With the graph unchanged this reproduces the measured round up to what the graph leaves out
(dependencies between streams, work released by other threads): `replay_error` says how far.
Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import BLOCKING, EXTERNAL, SEGMENT, RoundGraph


@dataclass
class Replay:
    """The replayed round: its length, when the host finished, each op's start and end (ns from the round's start)."""

    round_ns: int
    host_ns: int
    op_start: list[int]
    op_end: list[int]


def replay(graph: RoundGraph) -> Replay:
    """Recompute the round from its graph (see the module docstring)."""
    ops = graph.ops
    n = len(ops)
    start, end = [0] * n, [0] * n
    placed = [False] * n

    def place(j: int, ready: int) -> None:
        op = ops[j]
        s = max(ready, op.floor)
        if op.after >= 0 and placed[op.after]:
            s = max(s, end[op.after] + op.gap)
        start[j], end[j] = s, s + op.dur
        placed[j] = True

    h = 0
    for node in graph.nodes:
        if node.kind == SEGMENT:
            h += node.dur
            continue
        if node.kind == EXTERNAL:
            for j in node.ops:
                place(j, ops[j].start)
            continue
        for j in node.ops:
            place(j, h + ops[j].lat)
        if node.kind == BLOCKING:
            h = max([h, *(end[j] for j in node.waits if placed[j])]) + node.dur
        else:
            h += node.dur
    for j in range(n):  # an op no node issued (not expected): at its measured time
        if not placed[j]:
            place(j, ops[j].start)
    last = max((end[j] for j in graph.counted), default=0)
    return Replay(round_ns=max(h, last), host_ns=h, op_start=start, op_end=end)


def replay_error(graphs: list[RoundGraph]) -> float:
    """(replayed - measured) / measured over the given rounds, unchanged: how well the graph explains them."""
    measured = sum(g.measured_ns for g in graphs)
    replayed = sum(replay(g).round_ns for g in graphs)
    return (replayed - measured) / measured if measured else 0.0
