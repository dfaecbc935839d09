"""A torch.compile'd model under the marker, as a user writes it: where its compilation landed is in the report."""

from __future__ import annotations

import importlib.util
import json

import pytest

# Not imported here: the runs below are subprocesses, and torch imported by a test, after pytester's snapshot of the
# modules, is dropped with the test's modules and cannot be imported again.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch.compile needs torch")

COMPILED = """
import pytest, torch

def forward(x):
    return (x @ torch.ones(16, 4)).relu()

compiled = torch.compile(forward, backend="eager", dynamic=False)

@pytest.mark.inferscope(rounds=3, warmup=WARMUP)
def test_model():
    compiled(torch.ones(2, 16))
"""


@pytest.mark.parametrize("warmup", [0, 1])
def test_the_first_calls_compilation_is_said_in_the_round_it_landed_in(pytester: pytest.Pytester, warmup: int) -> None:
    pytester.makepyfile(COMPILED.replace("WARMUP", str(warmup)))
    # In a process of its own: an inline run drops the modules first imported inside it (torch's, dynamo's as it
    # compiles), which cannot be imported twice.
    result = pytester.runpytest_subprocess("--inferscope-report=out", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    (report,) = (pytester.path / "out").glob("*/report.json")
    analysis = json.loads(report.read_text())["analysis"]
    (f,) = [f for f in analysis["findings"] if f["rule"] == "torch_compile"]
    assert f["evidence"]["compile 0/0"].startswith("round 0: forward (test_the_first_calls_compilation")
    if warmup:
        assert f["title"] == "torch.compile compiled in the warm-up only" and f["share"] == 0.0
        assert analysis["metrics"]["compile.measured_rounds"] == 0.0
    else:
        # round 0 was a measured round: its latency was dynamo's, and the report says so first
        assert analysis["findings"][0]["rule"] == "torch_compile" and f["share"] > 0.5
        assert f["summary"].startswith("1 measured round of 3 compiled (round 0: 1 compilation,")
        assert f["suggestions"][0]["action"].startswith("Run at least 1 warm-up round (")
        assert analysis["metrics"]["compile.measured_rounds"] == 1.0
    # under the terminal's table, whose row reads the compile round's spread: the line naming the test, or none
    compiled = "inferscope: 1 test compiled (torch.compile) in its measured rounds"
    said = [line for line in result.outlines if line.startswith(compiled)]
    if warmup:
        assert said == []
    else:
        (line,) = said
        assert "::test_model (1 of 3 rounds)" in line
