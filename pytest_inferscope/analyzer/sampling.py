"""The host's own work as the CPU sampler saw it: which Python module each sample was in, and how much of a
stretch of host time (a segment of graph.py's round graph) each module was sampled in."""

from __future__ import annotations

import bisect
import re

import numpy as np

from ..events import Kind
from ..merger import Timeline
from .context import FRAMEWORK_MARKERS

#: The kinds of span a segment without samples is named after (`segment_names`), as a mask over the kinds.
_NAMED = np.zeros(max(int(k) for k in Kind) + 1, dtype=bool)
_NAMED[[int(Kind.CALL), int(Kind.MODULE), int(Kind.SCOPE)]] = True
#: Kineto names that are Python frames: "path/to/file.py(123): function".
_PYFRAME = re.compile(r"^(?P<file>[^()]*?)(?:\.py)?\((?P<line>\d+)\): (?P<fn>.+)$")


def module_of(frame: str) -> str:
    """The module of a sampled frame ("pkg.mod:fn (file:line)") or a Kineto frame ("dir/mod.py(12): fn")."""
    head = frame.split(" (")[0]
    m = _PYFRAME.match(frame)
    if m:
        return m["file"].replace("\\", "/").rsplit("/", 1)[-1]
    if ":" in head and not head.startswith("aten::"):
        return head.rsplit(":", 1)[0]
    return head


Samples = tuple[list[int], list[int], list[int], list[str]]


def samples_in(tl: Timeline, r0: int, r1: int, tid: int, framework: set[str]) -> Samples:
    """The test thread's CPU samples taken in the round, by start: (start, end, the latest end so far, module of
    the innermost frame); the modules that are the framework's are added to `framework`.

    A sample is taken at its end and stands for the time since the one before: one taken after the round ended
    (the sampler's thread waits for the GIL, which the round's end may hold to the plugin's next wait) shows the
    plugin's code, not the round's, however much of its time lies in the round (base.Rounds.in_rounds alike)."""
    ev = tl.events
    sel = (ev["kind"] == int(Kind.SAMPLE)).nonzero()[0]  # the few samples first, then those of the round
    sel = sel[(ev["end"][sel] > r0) & (ev["end"][sel] <= r1) & (ev["tid"][sel] == tid)]
    sel = sel[ev["start"][sel].argsort(kind="stable")]
    mods = []
    for i in sel.tolist():
        leaf = tl.name(i).rsplit(";", 1)[-1]
        mods.append(module_of(leaf))
        if leaf == "<harness>" or any(m in leaf for m in FRAMEWORK_MARKERS):
            framework.add(mods[-1])
    ends = (ev["end"][sel] - r0).astype(np.int64)
    run_end = np.maximum.accumulate(ends) if len(ends) else ends
    return (ev["start"][sel] - r0).astype(np.int64).tolist(), ends.tolist(), run_end.tolist(), mods


def segment_names(tl: Timeline, calls: np.ndarray) -> dict[int, str]:
    """Without samples (an imported trace, or a trace round no sample was taken in): a segment is named after the
    innermost CPU op, Python frame, scope or module span around the call that ends it.

    Found for all the calls at once, a level of the tree at a time: walked call by call (the kinds compared as
    enums), it took 7 ms of a lean ResNet-50 test's 9 ms analysis on the 2-core dev VM (2026-11-29)."""
    if not len(calls):
        return {}
    kind, parent = tl.events["kind"], tl.parent
    up = parent[calls].astype(np.int64)
    while (step := (up >= 0) & ~_NAMED[kind[np.maximum(up, 0)]]).any():
        up[step] = parent[up[step]]
    found = up >= 0
    names: dict[int, str] = {}  # module_of per name id: a round's calls share a few spans
    out: dict[int, str] = {}
    for i, p in zip(calls[found].tolist(), up[found].tolist(), strict=True):
        n = int(tl.events["name"][p])
        if n not in names:
            names[n] = module_of(tl.name(p))
        out[i] = names[n]
    return out


#: Up to this many (segment, sample) pairs that can overlap, `sampled_modules` counts them one by one: its array
#: operations cost more than that (a trace round of ViT-B/16 holds ~300 segments and 2 samples).
FEW_PAIRS = 48


#: Per (segment, module): the segment, the module (an index into the names) and its sampled ns, by segment and then
#: in the order the module was first sampled there; and the names.
Entries = tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]


def sampled_modules(a: np.ndarray, b: np.ndarray, samples: Samples) -> list[dict[str, int]]:
    """For each segment [a, b): the ns each module was sampled in it, as `modules_in` counts them."""
    seg, module, ns, names = sampled_entries(a, b, samples)
    out: list[dict[str, int]] = [{} for _ in range(len(a))]
    for i, k, v in zip(seg.tolist(), module.tolist(), ns.tolist(), strict=True):
        out[i][names[k]] = v
    return out


def entries_of(dicts: list[tuple[int, dict[str, int]]]) -> Entries:
    """The entries of a few segments' modules (segment index, its `modules_in`)."""
    names: dict[str, int] = {}
    rows = [(i, names.setdefault(m, len(names)), ns) for i, d in dicts for m, ns in d.items()]
    seg, module, ns = (np.array([r[k] for r in rows], dtype=np.int64) for k in range(3))
    return seg, module, ns, list(names)


def sampled_entries(a: np.ndarray, b: np.ndarray, samples: Samples) -> Entries:
    """For each segment [a, b): the ns each module was sampled in it, as `modules_in` counts them, as entries."""
    s, e, run_end = (np.asarray(x, dtype=np.int64) for x in samples[:3])
    k0, k1 = run_end.searchsorted(a, side="right"), s.searchsorted(b, side="left")
    count = np.maximum(0, k1 - k0)  # the samples that can overlap each (see modules_in)
    if int(count.sum()) <= FEW_PAIRS:
        return entries_of([(i, modules_in(int(a[i]), int(b[i]), samples, "")) for i in count.nonzero()[0].tolist()])
    if len(s) == 1:  # one sample over many segments (a trace round of a few ms): its overlap with each, by segment
        over = np.minimum(e[0], b) - np.maximum(s[0], a)
        seg = (over > 0).nonzero()[0]
        return seg, np.zeros(len(seg), dtype=np.int64), over[seg], [samples[3][0]]
    seg = np.arange(len(a)).repeat(count)
    k = np.arange(int(count.sum())) - np.repeat(count.cumsum() - count - k0, count)
    over = np.minimum(e[k], b[seg]) - np.maximum(s[k], a[seg])
    seg, k, over = seg[over > 0], k[over > 0], over[over > 0]
    index: dict[str, int] = {}  # each module's number, as first sampled (np.unique of strings sorts them: dearer)
    module = np.array([index.setdefault(m, len(index)) for m in samples[3]], dtype=np.int64)
    names = list(index)
    # Per (segment, module) key: its first entry and the sum of its ns, by a stable sort (np.unique's return_index and
    # return_inverse with np.add.at, whose wrappers cost ~50 µs a round, 2-core dev VM, 2026-11-28).
    key = seg * len(names) + module[k]
    order = key.argsort(kind="stable")
    sorted_key = key[order]
    new = np.ones(len(key), dtype=bool)
    new[1:] = sorted_key[1:] != sorted_key[:-1]
    at = new.nonzero()[0]
    first = order[at]
    total = np.add.reduceat(over[order], at) if len(at) else np.zeros(0, dtype=np.int64)
    by_first = first.argsort()  # by segment, then as first sampled: the order modules_in adds them in
    keys = sorted_key[at][by_first]
    return keys // len(names), keys % len(names), total[by_first], names


def modules_in(a: int, b: int, samples: Samples, name: str) -> dict[str, int]:
    """The ns each module was sampled in [a, b) (without samples: all of it in `name`, if any)."""
    s, e, run_end, mods = samples
    modules: dict[str, int] = {}
    if s:
        # Only the samples that can overlap [a, b): from the first whose running end passes a to the last before b.
        for k in range(bisect.bisect_right(run_end, a), bisect.bisect_left(s, b)):
            over = min(e[k], b) - max(s[k], a)
            if over > 0:
                modules[mods[k]] = modules.get(mods[k], 0) + over
    elif name:
        modules[name] = b - a
    return modules
