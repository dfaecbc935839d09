"""Array helpers the analyzer shares: medians, membership, distinct values, unions and overlaps of spans.

Pure functions of numpy arrays; nothing here prints or writes.
"""

from __future__ import annotations

import numpy as np

from ..events import unique

# Array methods (x.nonzero()[0], a.searchsorted(v), x.argsort(), x.cumsum(), x.sum()) rather than numpy's functions
# (np.flatnonzero, np.searchsorted, ...) throughout the analyzer: on a round's few hundred records the functions'
# Python wrappers cost more than the work (np.flatnonzero 2.0 against 0.8 µs, np.searchsorted 3.0 against 0.9,
# np.argsort 4.5 against 2.2, np.cumsum 3.4 against 1.6; numpy 2.4 on the 2-core dev VM, 2026-11-28).


def median(a: np.ndarray) -> float:
    """`np.median(a)` of a non-empty 1-d array, to the bit, by a sort: numpy's own call costs ~50 us in wrappers."""
    s = np.sort(a, axis=None)
    k = len(s) // 2
    return float(s[k]) if len(s) % 2 else (float(s[k - 1]) + float(s[k])) / 2


def member(a: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`np.isin(a, values)` for integer arrays, by a binary search in the sorted values (np.isin's wrappers cost more
    than the search on a round's few hundred records)."""
    s = np.sort(values, axis=None)
    if not len(s):
        return np.zeros(len(a), dtype=bool)
    at = np.minimum(s.searchsorted(a), len(s) - 1)
    return s[at] == a


def distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted: `np.unique(a)`, counted with bincount where the values
    are small non-negative ones (devices, interned names), several times faster on a long array (events.unique
    otherwise); one value (one device, one stream: most tests) is found by one comparison."""
    small = 4 * len(a) + 1024
    if _one_value(a):
        return a[:1].astype(np.intp) if 0 <= a[0] <= small else a[:1].copy()  # the dtype either way gives
    if len(a) and a.min() >= 0 and int(a.max()) <= small:
        return np.bincount(a).nonzero()[0]
    return unique(a)


def _one_value(a: np.ndarray) -> bool:
    """Whether a non-empty array holds one value throughout (its ends tell most arrays that do not at once)."""
    return bool(len(a)) and bool(a[0] == a[-1]) and not (a != a[0]).any()


def distinct_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(a, return_inverse=True)` of a 1-d integer array: its distinct values, sorted, and where each of `a`
    is among them. np.unique's wrappers cost ~35 µs a call on a round's few hundred records, this ~8."""
    keys = unique(a)
    return keys, keys.searchsorted(a)


def first_seen(a: np.ndarray) -> list[int]:
    """The distinct values of a 1-d integer array in the order they first occur (`np.unique`'s keys ordered by its
    `return_index`, ~40 µs a call in wrappers); one value (one stream: most tests) by one comparison."""
    if _one_value(a):
        return [a[0].item()]
    return list(dict.fromkeys(a.tolist()))


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of [start, end) intervals."""
    if len(starts) == 0:
        return 0
    order = starts.argsort(kind="stable")
    s, run_end = starts[order], np.maximum.accumulate(ends[order])
    # From the first start to the last end, less the gaps: where a start lies past everything before it (integers,
    # so the same as summing the runs, in fewer array operations).
    gaps = s[1:] - run_end[:-1]
    return int(run_end[-1] - s[0]) - int(gaps[gaps > 0].sum())


def overlap_ns(a: np.ndarray, b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [a, b): how many of its ns lie in the union of the intervals [starts, ends).

    A CPU sample stands for the time since the one before it, which may reach back over the harness between rounds
    and over earlier rounds: counted whole, a 2 ms round's sample of a 10 ms interval made a hotspot 160% of the
    round. So a sample is weighed by the part of its span inside the rounds (or gaps) it is read for.
    """
    out = np.zeros(len(a), dtype=float)
    if not len(a) or not len(starts):
        return out
    order = starts.argsort(kind="stable")
    s, run_end = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]  # a run of overlapping intervals starts where a start lies past all before it
    last = np.append(new[1:], True)
    s, e = s[new], run_end[last]  # the union: disjoint, in order
    before = np.concatenate(([0], np.cumsum(e - s)))  # ns of the union before each interval

    def covered(t: np.ndarray) -> np.ndarray:  # ns of the union before t
        k = s.searchsorted(t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, before[kk] + np.minimum(t - s[kk], e[kk] - s[kk]), 0)

    return (covered(b) - covered(a)).astype(float)


def wait_places(starts: np.ndarray, ends: np.ndarray, at_work: np.ndarray) -> np.ndarray:
    """For each of a thread's CPU samples (each standing for [start, end)), the sample whose stack its time off a CPU
    is put at: itself where the thread waited at its instant; where it was at work there (events.SAMPLE_AT_WORK), the
    time lies before, so the sample just before (the one ending where it starts) if the thread waited at that one's
    instant, else none (-1)."""
    order = starts.argsort(kind="stable")
    s, e, working = starts[order], ends[order], at_work[order]
    prev = np.full(len(order), -1)
    prev[1:] = np.where((e[:-1] == s[1:]) & ~working[:-1], order[:-1], -1)
    place = np.arange(len(order))
    place[order[working]] = prev[working]
    return place
