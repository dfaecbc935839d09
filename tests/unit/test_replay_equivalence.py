"""The array replay (analyzer/flat.py, replay.replay_plan) computes what the node-by-node walk computes.

`reference` below is the walk as it was before the array replay (commit 84522ee), kept here verbatim so
that a change to either production path is checked against it: on random graphs (chains, breaks,
overlapping streams, ops issued by no node or by a segment, waits for ops not yet issued, floors,
external work), and on the graphs of the synthetic benchmark trace and the recorded scenarios with
every built-in what-if, replayed as `simulate` replays them (`Replayer`: what-if copies reread in
part, what-ifs on arrays, edits.py) and as copies.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_inferscope.analyzer import flat
from pytest_inferscope.analyzer import replay as replay_module
from pytest_inferscope.analyzer.build import round_graphs
from pytest_inferscope.analyzer.columns import Modules
from pytest_inferscope.analyzer.context import Context
from pytest_inferscope.analyzer.graph import (
    BLOCKING,
    CALL,
    EXTERNAL,
    SEGMENT,
    GpuOp,
    HostNode,
    RoundGraph,
)
from pytest_inferscope.analyzer.replay import (
    Replayer,
    replay,
    replay_plan,
    replay_walk,
    walk_columns,
    walk_native,
    walk_round_ns,
)
from pytest_inferscope.analyzer.whatif import _whatif_ns, builtin, simulate
from pytest_inferscope.events import Kind, RawTrace
from pytest_inferscope.merger import merge

ROOT = Path(__file__).resolve().parents[2]


def reference(graph: RoundGraph) -> tuple[int, int, list[int], list[int]]:
    """The replay node by node, as of 84522ee: (round, host, op starts, op ends)."""
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
    for j in range(n):
        if not placed[j]:
            place(j, ops[j].start)
    last = max((end[j] for j in graph.counted), default=0)
    return max(h, last), h, start, end


def random_graph(rng: random.Random, n_nodes: int, streams: int, p_block: float, trees: bool = False) -> RoundGraph:
    """A random graph: ops on `streams` streams mostly following the one before them, some not."""
    ops: list[GpuOp] = []
    nodes: list[HostNode] = []
    prev: dict[int, int] = {}
    followed: set[int] = set()
    early: list[tuple[HostNode, int]] = []

    def new_op() -> int:
        st = rng.randrange(streams)
        after = prev.get(st, -1) if rng.random() < 0.9 else -1
        if trees and ops and rng.random() < 0.2:
            after = rng.randrange(len(ops))  # an op two others follow: not a chain
        if not trees and after in followed:
            after = -1
        followed.add(after)
        ops.append(
            GpuOp(
                Kind.KERNEL,
                st,
                dur=rng.randrange(0, 400),
                lat=rng.randrange(0, 30),
                gap=rng.choice([0, 0, rng.randrange(50)]),
                start=rng.randrange(0, 20_000),
                end=0,
                after=after,
                floor=rng.choice([0, 0, 0, rng.randrange(3000)]),
            )
        )
        prev[st] = len(ops) - 1
        return len(ops) - 1

    for _ in range(n_nodes):
        x = rng.random()
        if x < p_block:
            issued = [new_op() for _ in range(rng.choice([0, 0, 1]))]
            waits = rng.sample(range(len(ops)), min(len(ops), rng.randrange(4))) if ops else []
            nodes.append(HostNode(BLOCKING, rng.randrange(100), 0, ops=issued, waits=waits))
            if rng.random() < 0.2:
                early.append((nodes[-1], len(ops)))
        elif x < 0.45:
            seg_ops = [new_op()] if rng.random() < 0.05 else []  # a segment's ops are not issued by it
            nodes.append(HostNode(SEGMENT, rng.randrange(2000), 0, ops=seg_ops))
        elif x < 0.5:
            nodes.append(HostNode(EXTERNAL, rng.randrange(50), 0, ops=[new_op()]))
        else:
            nodes.append(HostNode(CALL, rng.randrange(200), 0, ops=[new_op() for _ in range(rng.choice([1, 1, 2]))]))
    for _ in range(rng.randrange(3)):
        new_op()  # issued by no node
    for node, issued_by_then in early:  # waits for an op issued later (or never): the walk skips it
        if issued_by_then < len(ops):
            node.waits = [*node.waits, rng.randrange(issued_by_then, len(ops))]
    counted = [j for j in range(len(ops)) if rng.random() < 0.8]
    return RoundGraph(nodes, ops, 0, counted=counted)


def fast(graph: RoundGraph) -> tuple[int, int, list[int], list[int]] | None:
    plan = flat.compile_plan(flat.flatten(graph))
    if plan is None:
        return None
    r = replay_plan(plan)
    return r.round_ns, r.host_ns, r.op_start, r.op_end


@pytest.mark.parametrize("seed", range(40))
def test_the_array_replay_equals_the_walk_on_random_graphs(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flat, "MIN_STRETCH", 1)
    rng = random.Random(seed)
    g = random_graph(rng, rng.choice([5, 60, 400, 3000]), rng.choice([1, 2, 5]), rng.choice([0.0, 0.01, 0.1, 0.3]))
    got = fast(g)
    assert got is not None, "a graph of chains takes the array replay"
    assert got == reference(g)
    r = replay(g)
    assert (r.round_ns, r.host_ns, r.op_start, r.op_end) == reference(g)


@pytest.mark.parametrize("seed", range(10))
def test_graphs_the_arrays_cannot_replay_are_walked(seed: int) -> None:
    rng = random.Random(1000 + seed)
    g = random_graph(rng, 300, 3, 0.05, trees=True)
    assert fast(g) is None  # two ops follow one
    r = replay(g)
    assert (r.round_ns, r.host_ns, r.op_start, r.op_end) == reference(g)


@pytest.mark.parametrize("seed", range(20))
def test_the_walk_from_columns_equals_the_walk(seed: int) -> None:
    """`walk_columns` (what-ifs the arrays do not take) reads the columns as the walk reads the objects."""
    rng = random.Random(2000 + seed)
    g = random_graph(
        rng, rng.choice([5, 60, 400]), rng.choice([1, 2, 5]), rng.choice([0.0, 0.05, 0.3]), trees=seed % 2 == 1
    )
    r = walk_columns(flat.flatten(g))
    assert (r.round_ns, r.host_ns, r.op_start, r.op_end) == reference(g)
    call = next(n for n in g.nodes if n.kind == CALL)
    twice = RoundGraph([*g.nodes, HostNode(CALL, 5, 0, ops=list(call.ops))], g.ops, 0, counted=g.counted)
    r = walk_columns(flat.flatten(twice))
    assert (r.round_ns, r.host_ns, r.op_start, r.op_end) == reference(twice)


def test_an_op_issued_twice_and_float_times_are_walked() -> None:
    g = random_graph(random.Random(7), 200, 2, 0.02)
    call = next(n for n in g.nodes if n.kind == CALL)
    twice = RoundGraph([*g.nodes, HostNode(CALL, 5, 0, ops=list(call.ops))], g.ops, 0, counted=g.counted)
    assert fast(twice) is None and replay(twice).round_ns == reference(twice)[0]
    g.nodes[0] = HostNode(SEGMENT, 12.5, 0)  # type: ignore[arg-type]
    assert fast(g) is None and replay(g).round_ns == reference(g)[0]


needs_c_walk = pytest.mark.skipif(
    replay_module._native_walk is None,
    reason="the replay's C walk (native/_replay.c) was not built: no C compiler at install",
)


@needs_c_walk
@pytest.mark.parametrize("seed", range(30))
def test_the_walk_in_c_equals_the_walk(seed: int) -> None:
    rng = random.Random(3000 + seed)
    g = random_graph(
        rng, rng.choice([5, 60, 400]), rng.choice([1, 2, 5]), rng.choice([0.0, 0.05, 0.3]), trees=seed % 2 == 1
    )
    for graph in (g, _issued_twice(g)):
        got = walk_native(flat.flatten(graph))
        assert got is not None
        assert (got.round_ns, got.host_ns, got.op_start, got.op_end) == reference(graph)
        assert walk_round_ns(flat.flatten(graph)) == reference(graph)[0]


def _issued_twice(g: RoundGraph) -> RoundGraph:
    call = next(n for n in g.nodes if n.kind == CALL)
    return RoundGraph([*g.nodes, HostNode(CALL, 5, 0, ops=list(call.ops))], g.ops, 0, counted=g.counted)


def test_without_the_c_walk_or_with_float_times_python_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    g = random_graph(random.Random(11), 300, 2, 0.1)
    monkeypatch.setattr(replay_module, "_native_walk", None)
    assert walk_native(flat.flatten(g)) is None and walk_round_ns(flat.flatten(g)) == reference(g)[0]
    monkeypatch.undo()
    g.nodes[0] = HostNode(SEGMENT, 12.5, 0)  # type: ignore[arg-type]  # a float: not for the C walk
    assert walk_native(flat.flatten(g)) is None and walk_round_ns(flat.flatten(g)) == reference(g)[0]
    g.nodes[0] = HostNode(SEGMENT, 12, 0)
    f = flat.flatten(g)
    block = next(i for i, k in enumerate(f.kind.tolist()) if k == flat.K_BLOCKING)
    f.waits = [*f.waits[:block], [-1], *f.waits[block + 1 :]]  # an index the C walk refuses: Python's walk it is
    assert walk_native(f) is None and walk_round_ns(f) == walk_columns(f).round_ns


@needs_c_walk
def test_the_c_walk_refuses_columns_it_would_misread() -> None:
    native = replay_module._native_walk
    assert native is not None

    def walk(**changed: np.ndarray) -> tuple[int, int]:
        i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
        cols = dict(
            kinds=np.array([1, 2], dtype=np.int8), durs=i64(5, 5), ops_at=i64(0, 1, 1), ops=i64(0),
            waits_at=i64(0, 0, 1), waits=i64(0), op_start=i64(0), op_lat=i64(1), op_floor=i64(0),
            op_after=i64(-1), op_gap=i64(0), op_dur=i64(3), counted=i64(0), start=i64(0), end=i64(0),
        )  # fmt: skip
        cols.update(changed)
        return native(*cols.values(), 0, 3, 2)

    # a call of 5 issues its op 1 after its start (ends at 4); the blocking call finds it done, and takes its 5
    assert walk() == (10, 10)
    assert walk(op_dur=np.array([30], dtype=np.int64)) == (36, 36)  # now it waits for the op's end, 31
    with pytest.raises(IndexError, match="ops"):
        walk(ops=np.array([1], dtype=np.int64))
    with pytest.raises(IndexError, match="op_after"):
        walk(op_after=np.array([2], dtype=np.int64))
    with pytest.raises(TypeError, match="op_dur"):
        walk(op_dur=np.array([3.0]))
    with pytest.raises(ValueError, match="op_lat"):
        walk(op_lat=np.array([1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="decreases"):
        walk(ops_at=np.array([1, 0, 1], dtype=np.int64))


def test_the_whatif_table_is_the_same_walked_in_c_or_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    graphs, _ = round_graphs(Context(merge(RawTrace.load(str(ROOT / "tests/data/sync_bound/trace.npz")))))
    table = simulate(graphs, builtin(graphs))  # the sync loop's what-ifs are walked (stretches too short)
    monkeypatch.setattr(replay_module, "_native_walk", None)
    graphs, _ = round_graphs(Context(merge(RawTrace.load(str(ROOT / "tests/data/sync_bound/trace.npz")))))
    assert simulate(graphs, builtin(graphs)) == table


def test_a_planted_error_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a plan whose chains ignore their gaps gives other times."""
    monkeypatch.setattr(flat, "MIN_STRETCH", 1)
    g = random_graph(random.Random(3), 400, 2, 0.05)
    for o in g.ops:
        o.gap = 500
    plan = flat.compile_plan(flat.flatten(g))
    assert plan is not None
    plan.c[:] = 0
    assert replay_plan(plan).op_end != reference(g)[3]


def whatif_graphs(graphs: list[RoundGraph]) -> list[RoundGraph]:
    """The graphs and their what-if copies; each copy replayed by its graph's `Replayer` equals the walk."""
    out = list(graphs)
    for g in graphs:
        replayer = Replayer(g)
        assert replayer.round_ns(g) == reference(g)[0]
        for w in builtin(graphs):
            c = w.transform(g)
            assert _whatif_ns(replayer, w.transform) == (None if c is None else reference(c)[0]), w.change
            if c is not None:
                assert replayer.round_ns(c) == reference(c)[0], w.change
                out.append(c)
    return out


@pytest.mark.parametrize("in_c", [True, False])
def test_the_array_replay_equals_the_walk_on_the_benchmark_trace_and_its_whatifs(
    in_c: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Replayer` walks in C where that walk is built, and replays by the array plan where not: both as the walk."""
    if not in_c:
        monkeypatch.setattr(replay_module, "_native_walk", None)
    elif replay_module._native_walk is None:
        pytest.skip("the walk in C is not built")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from synthetic import make_raw_trace

    graphs, _ = round_graphs(Context(merge(make_raw_trace(30_000, seed=2))))
    assert graphs
    taken = 0
    for g in whatif_graphs(graphs):
        got = fast(g)
        taken += got is not None
        assert (got or reference(g)) == reference(g)
        assert replay(g).round_ns == replay_walk(g).round_ns == reference(g)[0]
    assert taken >= len(graphs)


@pytest.mark.parametrize("in_c", [True, False])
@pytest.mark.parametrize("scenario", ["sync_bound", "launch_bound", "transfer_bound", "cpu_bound", "gpu_bound"])
def test_the_replay_equals_the_walk_on_the_recorded_scenarios(
    scenario: str, in_c: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flat, "MIN_STRETCH", 1)  # the array replay even where the walk is faster
    if not in_c:  # Replayer's array plan (it walks in C where that walk is built)
        monkeypatch.setattr(replay_module, "_native_walk", None)
    elif replay_module._native_walk is None:
        pytest.skip("the walk in C is not built")
    graphs, _ = round_graphs(Context(merge(RawTrace.load(str(ROOT / "tests/data" / scenario / "trace.npz")))))
    for g in whatif_graphs(graphs):
        got = fast(g)
        assert (got or reference(g)) == reference(g)
        assert replay(g).round_ns == reference(g)[0]


@pytest.mark.parametrize("scenario", ["sync_bound", "launch_bound", "transfer_bound", "cpu_bound", "gpu_bound"])
def test_the_columns_a_graph_is_built_as_are_its_objects_read_back(scenario: str) -> None:
    """build.py writes a round's graph as columns and makes its objects from them only when read: read back
    (flat.flatten), the objects give the same columns, and the issued ops kept on them are those the nodes list."""
    graphs, _ = round_graphs(Context(merge(RawTrace.load(str(ROOT / "tests/data" / scenario / "trace.npz")))))
    assert graphs
    for g in graphs:
        built = flat.flat_of(g)
        assert built is g.flat
        kept = built.issue
        assert kept is not None
        built.issue = None
        assert all(np.array_equal(a, b) for a, b in zip(kept, flat.issued(built), strict=True))
        back = flat.flatten(g)  # reads g.nodes and g.ops: made from the columns here
        assert flat.flat_of(g) is not built  # the objects are the graph now
        for name in ("kind", "dur", "op_dur", "op_lat", "op_gap", "op_floor", "op_start", "op_after", "op_kind"):
            assert np.array_equal(getattr(back, name), getattr(built, name)), name
        for name in ("node_start", "op_stream", "op_end", "op_nbytes", "op_copy", "op_pageable", "counted"):
            assert np.array_equal(getattr(back, name), getattr(built, name)), name
        assert (back.node_ops, back.waits, back.op_name) == (built.node_ops, built.waits, built.op_name)
        assert (back.node_name, back.node_sync) == (built.node_name, built.node_sync)
        assert _entries(back.modules) == _entries(built.modules)
        plain = RoundGraph(g.nodes, g.ops, g.measured_ns, g.stream_busy, g.counted, g.link_gb_s, g.framework)
        assert g == plain and plain == g  # equal to a graph written as objects, either way round


def _entries(m: Modules) -> list[tuple[int, str, int]]:
    rows = zip(m.node.tolist(), m.module.tolist(), m.ns.tolist(), strict=True)
    return [(i, m.names[k], ns) for i, k, ns in rows]
