"""The labelled scenarios recorded with torch.profiler on an H200, read back: the class and top what-if of the live run.

`tests/data/kineto_h200/` holds the slow variant of each scenario recorded by `tests/gpu/kineto_scenarios.py`
(a process of its own: CUPTI allows one client per process) and, in `live.json`, the class and what-ifs the
plugin's own collection gave the same scenarios in the same run (`tests/gpu/calibrate_whatif.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_inferscope import kineto
from pytest_inferscope.analyzer import analyze
from pytest_inferscope.merger import merge

DATA = Path(__file__).resolve().parent.parent / "data" / "kineto_h200"
LIVE = json.loads((DATA / "live.json").read_text())["live"]


def _kind(change: str) -> str:
    """A what-if's kind, without the parts that name what the trace calls things (modules, CPU ops)."""
    return change.split(" (")[0].split("'s host work")[0] if "host work removed" not in change else "module removed"


@pytest.mark.parametrize("scenario", ["cpu_bound", "gpu_bound", "launch_bound", "sync_bound"])
def test_the_imported_trace_gets_the_live_class_and_top_whatif(scenario: str) -> None:
    a = analyze(merge(kineto.load(DATA / f"{scenario}.json.gz").raw), kineto.RULES)
    live = LIVE[scenario]
    assert a.whatif_replay["decided_by"] == "whatif" and abs(a.whatif_replay["replay_error"]) < 0.05
    assert a.bottleneck == live["class"], (a.bottleneck, live)
    assert _kind(a.whatif[0].change) == _kind(live["whatif"][0]), ([r.change for r in a.whatif[:3]], live)


def test_the_sync_scenario_names_the_syncs_as_the_live_run_does() -> None:
    # On the H200 the per-step .item() loop is launch_bound by a small margin in both: a CUDA graph saves
    # most. Removing the syncs saved 17% of the live round. Of the imported one it saved 4.7% while only the
    # waits went: torch.profiler's own cost per CPU op (GPU.md: +100-240% per call) lengthens the host
    # segments, the `.item()` dispatch among them. Since the reads go with the syncs (their copy, call and
    # dispatch: graph.reads), it saves 17.6% there too.
    a = analyze(merge(kineto.load(DATA / "sync_bound.json.gz").raw), kineto.RULES)
    syncs = [r for r in a.whatif if r.bottleneck == "sync_bound"]
    assert syncs and syncs[0].change.startswith("stream synchronize removed (200 per round")
    assert 0.12 < syncs[0].saved_fraction < 0.22, [(r.change, r.saved_fraction) for r in a.whatif]


def test_the_memory_scenario_needs_counters_a_kineto_trace_lacks() -> None:
    a = analyze(merge(kineto.load(DATA / "memory_bound.json.gz").raw), kineto.RULES)
    assert LIVE["memory_bound"]["class"] == "memory_bound"
    assert a.bottleneck == "unclassified" and not a.whatif
    assert "no GPU work" in a.whatif_replay["fallback"]
