"""The analyzer on a tensor-parallel forward recorded on two H200s (tests/data/communication_bound/).

Each rank's trace holds NCCL's all-reduce kernels beside its matrix products. With thin slices the all-reduces
are most of the round and nothing overlaps them: communication_bound, by the what-ifs and by the rules; with
wide slices the same all-reduces are a sixth of the round: gpu_bound, the collectives still reported as
communication (not compute) with their share. The replay of each round matches the measured one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.events import RawTrace
from pytest_inferscope.merger import merge
from pytest_inferscope.results import Analysis

DATA = Path(__file__).parent.parent / "data" / "communication_bound"


def load(name: str) -> Analysis:
    return analyze(merge(RawTrace.load(str(DATA / f"{name}.npz"))))


def savings(a: Analysis) -> dict[str, float]:
    return {w.change: w.saved_ms for w in a.whatif}


@pytest.mark.parametrize("rank", [0, 1])
def test_thin_slices_are_communication_bound(rank: int) -> None:
    a = load(f"comm_rank{rank}")
    assert a.bottleneck == "communication_bound" and a.confidence >= 0.8
    assert a.whatif_replay["rule_class"] == "communication_bound"
    assert a.whatif[0].change == "collectives fully overlapped with compute"
    saved = savings(a)
    assert saved["collectives fully overlapped with compute"] > 5 * saved["GPU work 2x faster"]
    assert a.metrics["gpu.communication_exposed_fraction"] > 0.6 and a.metrics["gpu.communication_overlap"] == 0
    (finding,) = [f for f in a.findings if f.rule == "communication"]
    assert f"device {rank}" in finding.evidence and "ncclDevKernel_AllReduce" in str(finding.evidence["collective 1"])
    assert a.whatif_replay["replay_ms"] == pytest.approx(a.whatif_replay["measured_ms"], rel=0.02)


@pytest.mark.parametrize("rank", [0, 1])
def test_wide_slices_are_gpu_bound_with_their_communication_reported(rank: int) -> None:
    a = load(f"compute_rank{rank}")
    assert a.bottleneck == "gpu_bound" and a.whatif[0].change == "GPU work 2x faster"
    saved = savings(a)
    assert saved["collectives fully overlapped with compute"] < saved["GPU work 2x faster"] / 2
    assert 0.05 < a.metrics["gpu.communication_fraction"] < 0.3
    assert any(f.rule == "communication" for f in a.findings)  # reported, not the class
    assert a.whatif_replay["replay_ms"] == pytest.approx(a.whatif_replay["measured_ms"], rel=0.02)
