"""The round graph, its replay and the what-ifs on hand-built graphs whose answers are worked out by hand (µs)."""

from __future__ import annotations

import pytest

from pytest_inferscope.analyzer import with_simulated
from pytest_inferscope.analyzer.graph import (
    BLOCKING,
    CALL,
    MIN_CALL_SHARE,
    SEGMENT,
    GpuOp,
    HostNode,
    RoundGraph,
    module_of,
    trim_recording_cost,
)
from pytest_inferscope.analyzer.replay import replay
from pytest_inferscope.analyzer.whatif import (
    GRAPH_GAP_NS,
    PINNED_EFFICIENCY,
    WhatIf,
    WhatIfTable,
    builtin,
    simulate,
)
from pytest_inferscope.events import CopyKind, Kind
from pytest_inferscope.results import Suggestion, WhatIfRow

US = 1000
STREAM = 7


class G:
    """A graph written step by step: host segments, launch calls, blocking calls; the round ends in a wait."""

    def __init__(self) -> None:
        self.nodes: list[HostNode] = []
        self.ops: list[GpuOp] = []

    def seg(self, us: float, **modules: float) -> G:
        self.nodes.append(HostNode(SEGMENT, int(us * US), 0, modules={m: int(v * US) for m, v in modules.items()}))
        return self

    def launch(self, call_us: float, op_us: float, lat_us: float = 10, kind: int = Kind.KERNEL, **op: object) -> G:
        after = len(self.ops) - 1  # one stream: each op follows the one before it
        self.ops.append(GpuOp(kind, STREAM, int(op_us * US), int(lat_us * US), 0, 0, 0, after=after, **op))  # type: ignore[arg-type]
        self.nodes.append(HostNode(CALL, int(call_us * US), 0, name="cudaLaunchKernel", ops=[len(self.ops) - 1]))
        return self

    def block(self, post_us: float, sync: str = "stream synchronize", own_last_op: bool = False) -> G:
        node = HostNode(BLOCKING, int(post_us * US), 0, waits=list(range(len(self.ops))), sync=sync)
        if own_last_op:  # a blocking copy call: it issued the last op
            self.nodes.pop()
            node.ops, node.name = [len(self.ops) - 1], "cudaMemcpyAsync"
        self.nodes.append(node)
        return self

    def end(self, link_gb_s: float = 64.0, framework: tuple[str, ...] = ()) -> RoundGraph:
        self.nodes.append(HostNode(BLOCKING, 0, 0, name="end-of-round synchronize", waits=list(range(len(self.ops)))))
        g = RoundGraph(self.nodes, self.ops, 0, link_gb_s=link_gb_s, framework=set(framework))
        g.counted = list(range(len(self.ops)))
        g.measured_ns = replay(g).round_ns
        return g


def table(g: RoundGraph, extra: tuple[WhatIf, ...] = ()) -> dict[str, tuple[float, str]]:
    t = simulate([g], [*builtin([g]), *extra])
    return {r.change.split(" (")[0]: (r.saved_ms * 1000, r.bottleneck) for r in t.rows}


def test_launch_bound_chain_a_cuda_graph_saves_the_launches() -> None:
    g = G()
    for _ in range(10):
        g.seg(20).launch(5, 2)
    graph = g.end()
    # Host: 10 x (20 + 5) = 250; the last kernel is issued at 245, starts at 255, ends at 257.
    assert replay(graph).round_ns == 257 * US
    saved = table(graph)
    # A CUDA graph: one launch (5) for the stretch, the dispatch segment before it gone; kernel 0 at 10..12,
    # the others ready at 15 and run 0.4 µs apart: kernel k (k >= 1) at 15 + 2.4 (k - 1), kernel 9 ends at 36.2.
    assert GRAPH_GAP_NS == 400
    assert saved["a CUDA graph"] == (pytest.approx(257 - 36.2), "launch_bound")
    t = simulate([graph], builtin([graph]))
    assert t.classify()[0] == "launch_bound" and t.replay_error == 0.0
    assert t.suggestions()[0].action.startswith("Capture the step in a CUDA graph")
    assert "0.26 -> 0.04 ms per round, -86%" in t.suggestions()[0].rationale


def test_a_cuda_graph_skips_the_python_between_its_launches_not_the_work_before_or_after_them() -> None:
    g = G().seg(300)  # the user's own work before the forward: not captured
    for _ in range(5):
        g.launch(5, 2).seg(80)  # the model's Python between launches (longer than a dispatch): replayed away
    g.seg(200)  # after the last launch: stays
    graph = g.end()
    # Host: 300 + 5 x 85 + 200 = 925; kernels run while it works.
    assert replay(graph).round_ns == 925 * US
    # Graphed: 300, one launch (5), then what follows the last launch (80 + 200): 585; the kernels end by 320.
    # The segments between launches (4 x 80) and the other launch calls (4 x 5) are what it saves.
    assert table(graph)["a CUDA graph"][0] == pytest.approx(4 * 80 + 4 * 5)


def sync_loop() -> RoundGraph:
    g = G()
    for _ in range(5):  # launch a 100 µs kernel, wait for it, 60 µs of the host's own work
        g.launch(5, 100).block(5).seg(60)
    return g.end()


def test_sync_bound_loop_removing_the_syncs_saves_most_and_the_host_work_nearly_as_much() -> None:
    graph = sync_loop()
    # Per step: call at h, kernel h+10..h+110, the sync returns at h+115, host work to h+175: 5 steps, 875.
    assert replay(graph).round_ns == 875 * US
    saved = table(graph)
    # Syncs removed: the host issues at 0, 65, 130, 195, 260 and ends at 325; the kernels queue: 10..510.
    assert saved["stream synchronize removed"] == (pytest.approx(875 - 510), "sync_bound")
    # Host work off the path: 115 per step.
    assert saved["the host's own work between launches off the critical path"] == (
        pytest.approx(875 - 575),
        "cpu_bound",
    )
    # GPU 2x: 50 µs kernels, 125 per step.
    assert saved["GPU work 2x faster"] == (pytest.approx(875 - 625), "gpu_bound")
    t = simulate([graph], builtin([graph]))
    cls, confidence, verdict = t.classify()
    # 365 against 300: a margin of 18%, under CLOSE_MARGIN: both are named, and the confidence says it.
    assert cls == "sync_bound" and confidence == pytest.approx(0.5 + 0.5 * 65 / 365, abs=1e-3)
    assert "saves nearly as much" in verdict and "cpu_bound" in verdict
    # Each launch starts a stretch after a sync, and the host work before it is the host's own: a CUDA graph
    # changes nothing here, so it is not in the table.
    assert not any(r.bottleneck == "launch_bound" for r in t.rows)


@pytest.mark.parametrize(("nbytes", "saved_us"), [(4, 485 - 325), (1 << 20, 485 - 380)])
def test_removing_a_sync_moves_the_small_read_it_waited_for_to_the_rounds_end(nbytes: int, saved_us: int) -> None:
    g = G()
    for _ in range(5):  # a 20 µs kernel; `.item()`: 3 µs of dispatch, an 8 µs copy call (2 µs of copy), a sync
        g.launch(5, 20).seg(3).launch(8, 2, kind=Kind.MEMCPY, copy=CopyKind.DTOH, nbytes=nbytes).block(5).seg(60)
    graph = g.end()
    # Per step: kernel h+10..h+30, the copy h+30..h+32, the sync returns at h+37, the host's work to h+97.
    assert replay(graph).round_ns == 485 * US
    # A read of a few values moves to the end with the sync, its dispatch and its call too: 65 µs of host per
    # step, the host ends at 325 and the GPU long before. A 1 MiB copy is not a read: its dispatch (3), call (8)
    # and copy stay, only the sync's wait and its 5 µs go: 76 µs per step, 380.
    assert table(graph)["stream synchronize removed"] == (pytest.approx(saved_us), "sync_bound")


def test_gpu_bound_chain_saves_half_its_kernels() -> None:
    g = G()
    for _ in range(3):
        g.seg(5).launch(5, 1000)
    graph = g.end()
    assert replay(graph).round_ns == 3015 * US  # 15..1015, 1015..2015, 2015..3015
    saved = table(graph)
    assert saved["GPU work 2x faster"] == (pytest.approx(1500), "gpu_bound")
    assert simulate([graph], builtin([graph])).classify()[0] == "gpu_bound"


def test_copy_bound_round_pinned_copies_run_at_the_link_and_overlap() -> None:
    mb64 = 64 * 1024 * 1024
    g = G().seg(10).launch(0, 6400, kind=Kind.MEMCPY, nbytes=mb64, copy=CopyKind.HTOD, pageable=True)
    g.block(5, sync="", own_last_op=True).seg(10).launch(5, 100)
    graph = g.end(link_gb_s=64.0)
    # The copy call at 10 issues the copy (20..6420) and returns 5 after it: 6425; +10; the kernel at 6445..6545.
    assert replay(graph).round_ns == 6545 * US
    saved = table(graph)
    pinned_us = mb64 / (64.0 * PINNED_EFFICIENCY) / US  # 1310.72 µs, prefetched from the round's start
    assert saved["copies pinned"] == (pytest.approx(6545 - pinned_us, abs=0.1), "transfer_bound")  # rows keep 0.1 µs
    assert simulate([graph], builtin([graph])).classify()[0] == "transfer_bound"


def test_host_python_bound_round_names_the_users_module_not_the_frameworks() -> None:
    graph = G().seg(5000, tok=3000, activation=2000).launch(5, 100).end(framework=("activation",))
    assert replay(graph).round_ns == 5110 * US  # the kernel is issued at 5000: 5010..5110
    saved = table(graph)
    assert saved["the host's own work between launches off the critical path"] == (pytest.approx(5000), "cpu_bound")
    assert saved["tok's host work removed"] == (pytest.approx(3000), "cpu_bound")
    assert not any(k.startswith("activation") for k in saved)
    t = simulate([graph], builtin([graph]))
    assert t.classify()[0] == "cpu_bound"
    assert t.suggestions()[0].action.startswith("Take tok's work off the critical path")
    # each fix says what it does: the module's work removed is not worded as the host's work off the path (a report
    # listed the two word for word, with 2.26 and 0.28 ms beside them)
    actions = [s.action for s in t.suggestions()]
    assert len(actions) == len(set(actions)) and any(a.startswith("Make tok's host work cheaper") for a in actions)


def test_a_what_if_from_a_hook_takes_part_in_the_verdict() -> None:
    graph = sync_loop()

    def free_kernels(g: RoundGraph) -> RoundGraph:
        ops = [GpuOp(o.kind, o.stream, 0, o.lat, o.gap, o.start, o.end, after=o.after) for o in g.ops]
        return RoundGraph(g.nodes, ops, g.measured_ns, counted=g.counted)

    # Kernels that take no time: per step the call (5), the sync until 10, then 5, the host's 60: 75 x 5 = 375.
    mine = WhatIf("kernels for free", "gpu_bound", "Precompute the answers", free_kernels)
    t = simulate([graph], [*builtin([graph]), mine])
    assert (t.rows[0].change, t.rows[0].saved_ms) == ("kernels for free", pytest.approx(0.5))
    assert t.classify()[0] == "gpu_bound"


def test_nothing_saving_enough_is_unclassified_with_the_reason() -> None:
    g = G()
    for _ in range(20):  # the framework's short host steps (not followed by a launch, so no CUDA graph takes them)
        g.seg(40)
    graph = g.launch(0.5, 1).end()  # 811 µs; a CUDA graph would skip the last 40 (5%), 2x GPU half a µs
    cls, _, verdict = simulate([graph], builtin([graph])).classify()
    assert cls == "unclassified" and "no simulated change saves 10%" in verdict


@pytest.mark.parametrize(
    ("frame", "module"),
    [
        ("tokenizer:_is_punctuation (example_project/inferapp/tokenizer.py:12)", "tokenizer"),
        ("torch/nn/modules/linear.py(125): forward", "linear"),
        ("aten::linear", "aten::linear"),
    ],
)
def test_module_of_sampled_and_kineto_frames(frame: str, module: str) -> None:
    assert module_of(frame) == module


def test_exposed_collectives_are_communication_bound_and_compute_2x_leaves_them() -> None:
    # Host: 10 µs launches. GPU: a 100 µs GEMM, then a 400 µs all-reduce the next GEMM (100 µs) waits for.
    nccl = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    g = G().launch(10, 100, name="gemm").launch(10, 400, name=nccl).launch(10, 100, name="gemm").end()
    t = table(g)
    # Replay: launch at 0..10 starts at 10 (lat) and runs to 110, then 510, then 610.
    assert g.measured_ns == 610 * US
    assert t["collectives fully overlapped with compute"] == (pytest.approx(400), "communication_bound")
    assert t["collectives 2x faster"] == (pytest.approx(200), "communication_bound")
    # Twice-faster compute halves the GEMMs only: 100 µs saved, not the all-reduce's 200 more.
    assert t["GPU work 2x faster"] == (pytest.approx(100), "gpu_bound")
    cls, _, verdict = simulate([g], builtin([g])).classify()
    assert cls == "communication_bound" and verdict.startswith("communication_bound: collectives fully overlapped")


def test_allocator_calls_in_the_loop_are_memory_bound() -> None:
    g = G().seg(5).launch(5, 100)
    g.nodes.append(HostNode(CALL, 2000 * US, 0, name="cudaMalloc"))  # the caching allocator growing
    graph = g.seg(5).launch(5, 100).end()
    # 5 + 5 (kernel 15..115) + 2000 + 5 + the second call at 2015 (kernel 2025..2125).
    assert replay(graph).round_ns == 2125 * US
    saved = table(graph)
    # Without it the second kernel is issued at 15 and queues behind the first: 115..215.
    assert saved["GPU allocator calls removed"] == (pytest.approx(2125 - 215), "memory_bound")
    t = simulate([graph], builtin([graph]))
    assert t.classify()[0] == "memory_bound" and t.suggestions()[0].action.startswith("Reuse device buffers")


def test_a_trace_rounds_recording_cost_is_taken_off_its_calls_before_the_what_ifs() -> None:
    """A trace round records the launch calls; each cost 10 µs more there than in the timed rounds. Taken off the
    calls, the graph replays about the timed round, and a CUDA graph saves about what it saves there."""

    def launch_loop(call_us: float) -> RoundGraph:
        g = G()
        for _ in range(10):
            g.seg(20).launch(call_us, 2)
        return g.end()

    timed, traced = launch_loop(5), launch_loop(15)
    assert (timed.measured_ns, traced.measured_ns) == (257 * US, 350 * US)
    assert table(timed)["a CUDA graph"][0] == pytest.approx(220.8)
    assert table(traced)["a CUDA graph"][0] == pytest.approx(303.8)
    # 93 µs over 150 µs of calls: each keeps 38% of its 15 µs (5.7 µs; the timed rounds' calls took 5).
    assert trim_recording_cost(traced, timed.measured_ns) == 93 * US
    assert traced.measured_ns == 257 * US and [n.dur for n in traced.nodes if n.kind == CALL] == [5700] * 10
    assert replay(traced).round_ns == pytest.approx(257 * US, rel=0.03)
    assert table(traced)["a CUDA graph"][0] == pytest.approx(220.8, rel=0.03)
    # Never more than the calls can give (MIN_CALL_SHARE of each is kept), and nothing when not slower.
    assert trim_recording_cost(traced, 0) == 10 * (5700 - int(5700 * MIN_CALL_SHARE))
    assert trim_recording_cost(launch_loop(5), 10**9) == 0


def test_a_fix_simulated_is_one_suggestion_and_stands_for_the_rules_estimate_of_it() -> None:
    rows = [
        WhatIfRow("stream synchronize removed", 6.0, 4.0, 0.4, "sync_bound", "Remove syncs"),
        WhatIfRow("device synchronize removed", 8.0, 2.0, 0.2, "sync_bound", "Remove syncs"),
        WhatIfRow("GPU work 2x faster", 10.0, 0.0, 0.0, "gpu_bound", "Lower precision"),
    ]
    table = WhatIfTable(rows=rows, measured_ms=10.0, replay_ms=10.0, rounds=3)
    rules = [
        Suggestion("Remove syncs", "the rule's estimate", 7.66, "sync_stall"),
        Suggestion("Lower precision", "the rule's estimate", 3.0, "gpu_saturation"),
        Suggestion("Fuse kernels", "the rule's estimate", 1.0, "gpu_saturation"),
    ]
    out = with_simulated(table, rules)
    # The two kinds are one action, the larger saving; the faster GPU saved nothing, so it is not suggested, and
    # neither is the rule's 3 ms estimate of it; a fix no what-if simulated keeps the rule's estimate.
    assert [(s.action, s.saving_ms, s.rule) for s in out] == [
        ("Remove syncs", 4.0, "whatif"),
        ("Fuse kernels", 1.0, "gpu_saturation"),
    ]
    assert "stream synchronize removed" in out[0].rationale
