"""Hotspots without CPU samples: from the calls a collection recorded whole (an imported torch.profiler trace's ops
and Python frames, `--inferscope-cpu=trace`'s calls), by self and total time, as torch.profiler's key_averages()
counts them."""

from __future__ import annotations

import itertools

import numpy as np

from ..events import Kind
from ..results import Hotspot
from .base import _MS, Rounds

#: The spans on the test thread that take time from the calls they lie in (rounds and the test lie around them).
_INNER = (Kind.CALL, Kind.SCOPE, Kind.MODULE, Kind.WAIT)


def call_hotspots(rounds: Rounds) -> list[Hotspot]:
    """The test thread's calls in the measured rounds, by self time per round (`innermost_ns`) and total time (the
    outermost calls of each function: a recursive call is already in its caller's)."""
    tl = rounds.timeline
    ev = tl.events
    if not len(rounds.round_idx):
        return []
    on_thread = tl.mask(*_INNER) & (ev["tid"] == ev["tid"][rounds.round_idx[0]]) & rounds.in_rounds
    spans = on_thread.nonzero()[0]
    is_call = ev["kind"][spans] == int(Kind.CALL)
    if not is_call.any():
        return []
    round_idx = rounds.round_idx[ev["start"][rounds.round_idx].argsort()]
    r0, r1 = ev["start"][round_idx], ev["end"][round_idx]
    own = innermost_ns(ev["start"][spans], ev["end"][spans], r0, r1)[is_call]
    calls = spans[is_call]
    names, starts = ev["name"][calls], ev["start"][calls]
    ends = np.minimum(ev["end"][calls], r1[np.maximum(0, r0.searchsorted(starts, side="right") - 1)])  # in its round
    order = np.lexsort((starts, names))
    outermost = np.ones(len(calls), dtype=bool)
    cuts = [0, *((np.diff(names[order]) != 0).nonzero()[0] + 1).tolist(), len(order)]
    for a, b in itertools.pairwise(cuts):
        if b - a > 1:  # (in start order: a call that starts before the latest end so far lies in an earlier one)
            k = order[a:b]
            outermost[k[1:]] = starts[k[1:]] >= np.maximum.accumulate(ends[k])[:-1]
    size = int(names.max()) + 1
    self_by = np.bincount(names, weights=own, minlength=size)
    total_by = np.bincount(names[outermost], weights=(ends - starts)[outermost].astype(float), minlength=size)
    n, wall = rounds.n_rounds, max(1, rounds.wall_ns)
    spots = [
        Hotspot(tl.strings[i], float(self_by[i]) / _MS / n, float(total_by[i]) / _MS / n, float(self_by[i]) / wall)
        for i in np.unique(names).tolist()
    ]
    spots.sort(key=lambda h: (-h.self_ms, -h.total_ms, h.function))  # ties by name: the same order every run
    return spots


def innermost_ns(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Per span of one thread, the ns it was the innermost open span, the latest started of those open, inside the
    windows [w0, w1) (the measured rounds: sorted, disjoint).

    Not the span less its children: spans can cross. Kineto's record_function annotation starts inside the Python
    frame of its `__enter__` and ends inside that of its `__exit__`, and a `ProfilerStep` ends inside the
    `prof.step()` that starts the next; the time is the annotation's while it is open and nothing opened since is.
    """
    n, m = len(starts), len(w0)
    times = np.concatenate([ends, starts, w1, w0])
    # At the same time: span ends, span starts, window ends, window starts (a zero-length interval either way).
    what = np.repeat(np.array([0, 1, 2, 3], dtype=np.int8), [n, n, m, m])
    which = np.concatenate([np.arange(n), np.arange(n), np.zeros(2 * m, dtype=np.int64)])
    order = np.lexsort((what, times))
    own = [0] * n
    closed = [False] * n
    stack: list[int] = []  # the open spans in start order (and closed ones below the top, taken off when they surface)
    prev, inside = 0, False
    for t, kind, i in zip(times[order].tolist(), what[order].tolist(), which[order].tolist(), strict=True):
        if stack and inside:
            own[stack[-1]] += t - prev
        prev = t
        if kind == 1:
            if not closed[i]:  # (a span of no time has ended as it starts)
                stack.append(i)
        elif kind == 0:
            closed[i] = True
            while stack and closed[stack[-1]]:
                stack.pop()
        else:
            inside = kind == 3
    return np.asarray(own, dtype=float)
