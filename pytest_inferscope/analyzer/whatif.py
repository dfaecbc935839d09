"""What-ifs: each a transformation of the round graphs (graph.py), replayed (replay.py): what a fix would save.

Built in, each standing for one bottleneck class:

- *a CUDA graph* (launch_bound): each stretch between synchronisations captured from its first
  launch call to its last: the host costs nothing there but the first launch (the other calls, the
  dispatch and the model's Python between them), and the ops issued there run `GRAPH_GAP_NS` apart;
- *a kind of synchronisation removed* (sync_bound): those blocking calls stop waiting; what they
  read (`graph.reads`) is read at the round's end, where the end-of-round wait catches it;
- *GPU work 2x faster* (gpu_bound): kernels and memsets take half as long (collectives excepted);
- *collectives fully overlapped*, *collectives 2x faster* (communication_bound): collective kernels
  (NCCL and the like, `comm.py`) cost nothing, or half;
- *copies pinned and overlapped* (transfer_bound): host<->device copies run at
  `PINNED_EFFICIENCY` of the link, their calls stop blocking, uploads are prefetched on a copy
  stream from the round's start;
- *the host's own work off the critical path* (cpu_bound): host segments longer than
  `DISPATCH_NS` cost nothing (precomputed, cached, run ahead in a worker); named after the
  user's module sampled most in them;
- *a module's host work removed* (cpu_bound): the segments lose the time sampled in that module
  (the user's top `MAX_MODULES`; the framework's modules are not candidates);
- *GPU allocator calls removed* (memory_bound): cudaMalloc/cudaFree and the driver's allocation calls
  cost nothing; *host memory growth removed* (memory_bound, `whatif_memory.py`, where host memory grew;
  *host page faults removed* where pages faulted in and memory did not grow): the rounds' system CPU
  time taken off the host segments.

More come through the `pytest_inferscope_whatifs` hook (hooks.py): a `WhatIf` whose `transform`
returns the changed graph (or None where it does not apply); one that raises loses its own row only
(`simulate`). The class is the what-if that saves the most (`WhatIfTable.classify`). Pure functions; nothing
here prints or writes.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..results import UNCLASSIFIED, Suggestion, WhatIfRow
from .build import round_graphs
from .columns import K_SEGMENT
from .context import Context
from .edits import (
    DISPATCH_NS,
    GRAPH_GAP_NS,
    ArrayTransform,
    allocator_free,
    comm_kernels,
    compute,
    cuda_graph_arrays,
    faster,
    host_work_arrays,
    module_removed,
    syncs_removed,
)
from .extension import describe_whatif
from .flat import flat_of
from .graph import GpuOp, RoundGraph, sync_kinds
from .replay import Replayer
from .rules_gpu import CUDA_GRAPH, LOWER_PRECISION, REMOVE_SYNCS
from .rules_transfer import PIN_MEMORY, REUSE_BUFFERS
from .whatif_copies import PINNED_EFFICIENCY, pinned_copies

#: Python modules whose removal is simulated, by sampled time.
MAX_MODULES = 3
#: A class needs a what-if saving at least this share of the round.
MIN_SAVING = 0.1
#: Two what-ifs of different classes whose savings differ by less than this share of the larger are both named.
CLOSE_MARGIN = 0.25

Transform = Callable[[RoundGraph], "RoundGraph | None"]


@dataclass(frozen=True)
class WhatIf:
    """A change to simulate: `transform` returns the changed graph, or None where the change does not apply."""

    change: str  # what changes, as the table says it ("a CUDA graph")
    bottleneck: str  # the class it stands for
    action: str  # the suggestion that applies it
    transform: Transform
    #: What must be done first for the fix to be possible (empty: nothing), given the graphs.
    prerequisite: Callable[[list[RoundGraph]], str] | None = None


#: Each stretch between synchronisations replayed from a CUDA graph: from its first launch call to its last the
#: host costs nothing (the other launch calls, the dispatch and the model's Python between them), and the ops
#: issued there run GRAPH_GAP_NS apart (edits.cuda_graph_arrays).
cuda_graph = ArrayTransform(cuda_graph_arrays)


def graph_prerequisite(graphs: list[RoundGraph]) -> str:
    syncs = len(sync_kinds(graphs)) / max(1, len(graphs))
    if syncs < 1:
        return ""
    return (
        f"a CUDA graph cannot hold a synchronisation: the {syncs:.0f} per round must be removed first "
        "(simulated here with them kept, one graph per stretch between them)"
    )


def remove_syncs(kind: str) -> Transform:
    """The blocking calls of one kind stop waiting; what they read is read at the round's end.

    The reads they waited for (`edits._reads`: `.item()` is a small copy, then a sync) go too: one copy
    at the end reads every value at once.
    """
    return ArrayTransform(syncs_removed(kind))


def faster_gpu(factor: float = 2.0) -> Transform:
    """Compute (kernels and memsets, collectives left out: the interconnect bounds those) `factor` times faster."""
    return ArrayTransform(faster(compute, factor))


def faster_comm(factor: float | None) -> Transform:
    """Collective kernels (comm.py) `factor` times faster; None: fully overlapped, i.e. off the critical path."""
    return ArrayTransform(faster(comm_kernels, factor))


def remove_module(module: str) -> Transform:
    return ArrayTransform(module_removed(module))


#: The host's own work between launches (segments longer than the dispatch) moved off the critical path.
host_off_path = ArrayTransform(host_work_arrays)


#: The GPU allocator's calls (cudaMalloc/cudaFree and the driver's) cost nothing: buffers reused, or the caching
#: allocator warm (cudaFree also waits for the device, so its wait goes too).
no_allocator = ArrayTransform(allocator_free)


def _user_modules(graphs: list[RoundGraph]) -> tuple[list[str], list[str]]:
    """The user's Python modules by sampled time in the host segments (the framework's left out): in the
    segments longer than the dispatch, and in all of them."""
    long: dict[str, int] = {}
    every: dict[str, int] = {}
    for g in graphs:
        f = flat_of(g)
        m = f.modules
        user = np.array([name not in g.framework for name in m.names], dtype=bool)
        sel = (f.kind[m.node] == K_SEGMENT) & user[m.module] if len(m.names) else np.zeros(0, dtype=bool)
        is_long = f.dur[m.node[sel]] > DISPATCH_NS
        for k, ns, lg in zip(m.module[sel].tolist(), m.ns[sel].tolist(), is_long.tolist(), strict=True):
            name = m.names[k]
            every[name] = every.get(name, 0) + ns
            if lg:
                long[name] = long.get(name, 0) + ns
    return sorted(long, key=lambda m: -long[m]), sorted(every, key=lambda m: -every[m])


def _off_path_action(module: str) -> str:
    return f"Take {module}'s work off the critical path: cache or precompute its results, or run it ahead in a worker"


def _removed_action(module: str) -> str:
    """The action of a module's host work removed: unlike `_off_path_action`'s (the host's work between launches off
    the critical path, mostly that module's), which a report listed beside it word for word with another saving."""
    return f"Make {module}'s host work cheaper: cache or precompute its results, or do less of it per step"


#: The collectives' what-ifs (communication_bound): kernels that move data between GPUs (comm.py).
COMM_WHATIFS = [
    WhatIf(
        "collectives fully overlapped with compute",
        "communication_bound",
        "Overlap the collectives with compute (async collectives on their own stream, the next layer's work "
        "issued before waiting)",
        faster_comm(None),
    ),
    WhatIf(
        "collectives 2x faster",
        "communication_bound",
        "Move less data between GPUs (lower-precision activations, fewer or fused collectives, a parallel "
        "layout that keeps more work local)",
        faster_comm(2.0),
    ),
]


def builtin(graphs: list[RoundGraph]) -> list[WhatIf]:
    """The built-in what-ifs for these graphs (the kinds of synchronisation and the modules they hold)."""
    out = [
        WhatIf(
            "a CUDA graph (launch overhead removed)",
            "launch_bound",
            CUDA_GRAPH,
            cuda_graph,
            graph_prerequisite,
        )
    ]
    kinds: dict[str, int] = {}
    for sync in sync_kinds(graphs):
        kinds[sync] = kinds.get(sync, 0) + 1
    for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
        per = count / max(1, len(graphs))
        out.append(
            WhatIf(
                f"{kind} removed ({per:.0f} per round; reads moved to the round's end)",
                "sync_bound",
                REMOVE_SYNCS,
                remove_syncs(kind),
            )
        )
    out.append(
        WhatIf(
            "GPU work 2x faster",
            "gpu_bound",
            LOWER_PRECISION,
            faster_gpu(2.0),
        )
    )
    out += COMM_WHATIFS
    link = max((g.link_gb_s for g in graphs), default=0.0)
    out.append(
        WhatIf(
            f"copies pinned ({PINNED_EFFICIENCY:.0%} of {link:.0f} GB/s), uploads overlapped with compute",
            "transfer_bound",
            PIN_MEMORY,
            pinned_copies,
        )
    )
    out.append(
        WhatIf(
            "GPU allocator calls removed",
            "memory_bound",
            REUSE_BUFFERS,
            no_allocator,
        )
    )
    top, every = _user_modules(graphs)
    out.append(
        WhatIf(
            "the host's own work between launches off the critical path" + (f" (mostly {top[0]})" if top else ""),
            "cpu_bound",
            _off_path_action(top[0])
            if top
            else "Prepare the next batch while the GPU runs this one (DataLoader workers with pin_memory, "
            "or a producer thread), so GPU work is always queued ahead",
            host_off_path,
        )
    )
    for m in every[:MAX_MODULES]:
        out.append(WhatIf(f"{m}'s host work removed", "cpu_bound", _removed_action(m), remove_module(m)))
    return out


@dataclass
class WhatIfTable:
    """The what-ifs simulated on a test's round graphs, the replay's error, and the verdict they give."""

    rows: list[WhatIfRow]
    measured_ms: float  # mean length of the replayed rounds, measured
    replay_ms: float  # the same rounds replayed unchanged
    rounds: int
    #: Why each added what-if that failed did (`simulate`): left out of `rows`.
    errors: list[str] = field(default_factory=list)

    @property
    def replay_error(self) -> float:
        return (self.replay_ms - self.measured_ms) / self.measured_ms if self.measured_ms else 0.0

    def classify(self) -> tuple[str, float, str]:
        """(class, confidence, one-line verdict): the class of the largest saving; confidence from the margin
        to the best saving of another class; a close runner-up is named."""
        best: dict[str, WhatIfRow] = {}
        for r in self.rows:
            if r.bottleneck not in best or r.saved_ms > best[r.bottleneck].saved_ms:
                best[r.bottleneck] = r
        ranked = sorted(best.values(), key=lambda r: -r.saved_ms)
        if not ranked or ranked[0].saved_fraction < MIN_SAVING:
            top = f"{ranked[0].change} saves {ranked[0].saved_fraction:.0%}" if ranked else "nothing applies"
            return UNCLASSIFIED, 1.0, f"no simulated change saves {MIN_SAVING:.0%} of the round ({top})"
        win = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        margin = (win.saved_ms - max(0.0, runner.saved_ms)) / win.saved_ms if runner else 1.0
        verdict = f"{win.bottleneck}: {win.change} saves {win.saved_ms:.2f} ms per round ({win.saved_fraction:.0%})"
        if runner and runner.saved_ms > 0 and margin < CLOSE_MARGIN:
            verdict += (
                f", and {runner.change} ({runner.bottleneck}) saves nearly as much: {runner.saved_ms:.2f} ms "
                f"({runner.saved_fraction:.0%})"
            )
        return win.bottleneck, round(min(1.0, 0.5 + 0.5 * margin), 3), verdict

    def suggestions(self) -> list[Suggestion]:
        """One suggestion per saving fix, the largest simulated saving first, each stating it (two kinds of
        synchronisation removed are one action: the larger saving stands for it; the table keeps both)."""
        out = []
        seen = set()
        for r in sorted(self.rows, key=lambda r: -r.saved_ms):
            if r.saved_ms <= 0 or r.action in seen:
                continue
            seen.add(r.action)
            why = (
                f"simulated: {r.change}: {self.replay_ms:.2f} -> {r.round_ms:.2f} ms per round, -{r.saved_fraction:.0%}"
            )
            if r.prerequisite:
                why += f"; first: {r.prerequisite}"
            out.append(Suggestion(r.action, why, r.saved_ms, "whatif"))
        return out


def simulate(graphs: list[RoundGraph], whatifs: Iterable[WhatIf], added: Iterable[WhatIf] = ()) -> WhatIfTable:
    """Replay every what-if on every graph; a what-if that applies to no round is left out.

    `added` ones (the hook's) come after, each run so that one that fails (its transform or prerequisite raises, or
    the transform returns something other than a graph or None) loses its own row only, and the table's `errors` say
    which and why (extension.py); a built-in one that raises is inferscope's bug and stops the analysis.
    """
    n = len(graphs)
    replayers = [Replayer(g) for g in graphs]
    base = [r.round_ns(g) for r, g in zip(replayers, graphs, strict=True)]
    rows = [row for w in whatifs for row in _rows(w, graphs, replayers, base)]
    errors = []
    for w in added:
        try:
            rows += _rows(w, graphs, replayers, base, checked=True)
        except Exception as exc:  # a plugin's what-if: its row is left out, the analysis goes on
            why = str(exc) if isinstance(exc, _NotAGraph) else f"raised {type(exc).__name__}: {exc}"
            errors.append(f"{describe_whatif(w)} {why}")
    rows.sort(key=lambda r: -r.saved_ms)
    measured = sum(g.measured_ns for g in graphs) / n / 1e6
    base_ms = sum(base) / n / 1e6
    return WhatIfTable(rows, round(measured, 4), round(base_ms, 4), n, errors)


class _NotAGraph(Exception):
    """An added what-if's transform returned something other than a RoundGraph or None (the message says what)."""


def _rows(
    w: WhatIf, graphs: list[RoundGraph], replayers: list[Replayer], base: list[int], checked: bool = False
) -> list[WhatIfRow]:
    """The what-if's row, or none where it applies to no round."""
    changed = [_whatif_ns(r, w.transform, checked) for r in replayers]
    if all(c is None for c in changed):
        return []
    n = len(graphs)
    base_ms = sum(base) / n / 1e6
    ms = sum(b if c is None else c for c, b in zip(changed, base, strict=True)) / n / 1e6
    saved = base_ms - ms
    return [
        WhatIfRow(
            change=w.change,
            round_ms=round(ms, 4),
            saved_ms=round(saved, 4),
            saved_fraction=round(saved / base_ms, 4) if base_ms else 0.0,
            bottleneck=w.bottleneck,
            action=w.action,
            prerequisite=w.prerequisite(graphs) if w.prerequisite else "",
        )
    ]


def _whatif_ns(r: Replayer, transform: Transform, checked: bool = False) -> int | None:
    """The round replayed with the change, or None where it does not apply (`checked`: a transform that returns
    something else raises _NotAGraph)."""
    if isinstance(transform, ArrayTransform):  # on the graph's arrays: no copy of the graph
        f = transform.on_arrays(r.flat)
        return None if f is None else r.round_ns_of(f)
    c = transform(r.graph)
    if checked and c is not None and not isinstance(c, RoundGraph):
        raise _NotAGraph(f"returned {c!r:.80} (a {type(c).__name__}), not a RoundGraph or None")
    return None if c is None else r.round_ns(c)


def diagnose(
    ctx: Context, extra: Iterable[WhatIf] = (), added: Iterable[WhatIf] = ()
) -> tuple[WhatIfTable | None, str]:
    """The what-if table of a test (built-in what-ifs, then `extra`, then a hook's `added` ones, each of which may
    fail on its own: `simulate`), or None and why it cannot be built."""
    with _collector_paused():
        graphs, why = round_graphs(ctx)
        table = simulate(graphs, [*builtin(graphs), *extra], added) if graphs else None
        del graphs  # freed while the collector is paused: else its next pass scans them all (~2 ms for GPT-2)
    return table, why


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: a round's graph is ~75,000 objects with no cycle among them,
    and the collections their allocation would set off (each scanning what the test holds) cost a fifth of
    the time."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


__all__ = ["GRAPH_GAP_NS", "GpuOp", "WhatIf", "WhatIfTable", "builtin", "diagnose", "round_graphs", "simulate"]
