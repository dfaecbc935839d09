"""`inferscope analyze` on CPU torch.profiler traces recorded as users record them (tests/data/kineto_cpu/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.cli import main
from pytest_inferscope.reporters import load_report

DATA = Path(__file__).parent.parent / "data" / "kineto_cpu"


def only_report(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name != "assets"]
    return folder


#: torch.profiler's key_averages() for the session that wrote steps.pt.trace.json.gz (README.md): (self CPU, CPU total)
#: in µs over its 3 steps, for functions that ran in the steps only.
STEPS_KEY_AVERAGES = {
    "aten::addmm": (105.509, 130.337),
    "aten::mul": (52.005, 120.628),
    "aten::_to_copy": (45.520, 71.896),
    "torch/nn/modules/container.py(248): forward": (42.780, 368.480),
}


def test_hotspots_of_a_trace_with_stacks_are_its_calls_by_self_time(work: Path) -> None:
    assert main(["analyze", str(DATA / "steps.pt.trace.json.gz"), "--report", "out"]) == 0
    result = load_report(only_report(work / "out") / "report.json")
    assert len(result.latency.samples_ms) == 3
    spots = result.analysis.hotspots
    assert [h.function for h in spots[:4]] == list(STEPS_KEY_AVERAGES)  # the largest self times, as torch's table
    for h in spots[:4]:
        self_us, total_us = STEPS_KEY_AVERAGES[h.function]
        assert (h.self_ms * 3, h.total_ms * 3) == pytest.approx((self_us / 1000, total_us / 1000), abs=1e-6)
    assert spots == sorted(spots, key=lambda h: -h.self_ms) and 0 < spots[0].share < 1
