"""Autograd left on in a marked test's body, as a user writes it: the report says so, and only where it recorded."""

from __future__ import annotations

import importlib.util
import json

import pytest

# Not imported here: the run below is a subprocess (torch imported after pytester's snapshot cannot be imported again).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="autograd needs torch")

BODIES = """
import time

import pytest, torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
frozen = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).eval().requires_grad_(False)
compiled = torch.compile(model, backend="eager")
x = torch.randn(16, 64)
big = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
xb = torch.randn(512, 512)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_grad_on():
    model(x)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_compiled_grad_on():
    compiled(x)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_inference_mode():
    with torch.inference_mode():
        model(x)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_no_grad_inside():
    with torch.no_grad():
        model(x)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_nothing_requires_grad():
    frozen(x)

# Long enough (50 ms a call by the clock, not ten steps: a faster machine's would be a few sampling periods) for the
# stack samples (every 5 ms: the run's option) to see the backward
@pytest.mark.inferscope(rounds=3, warmup=1)
def test_training_step():
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        big(xb).square().sum().backward()

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_func_grad():
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        torch.func.grad(lambda r: big(r).sum())(xb)
"""


def test_a_body_that_leaves_autograd_on_gets_the_finding_and_one_that_records_nothing_does_not(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_bodies=BODIES)
    result = pytester.runpytest_subprocess(
        "--inferscope-report=out", "-p", "no:randomly", "--inferscope-gpu=off", "--inferscope-sample-interval-ms=5"
    )
    result.assert_outcomes(passed=7)
    found, metrics = {}, {}
    for report in (pytester.path / "out").glob("*/report.json"):
        data = json.loads(report.read_text())
        name = data["nodeid"].rsplit("::", 1)[1]
        found[name] = [f for f in data["analysis"]["findings"] if f["rule"] == "autograd_recording"]
        metrics[name] = data["analysis"]["metrics"]
    assert len(found) == 7, sorted(found)
    for name in ("test_grad_on", "test_compiled_grad_on"):
        assert len(found[name]) == 1, (name, found)
        f = found[name][0]
        assert f["evidence"]["autograd graph nodes per call"] >= 3, (name, f)  # two Linear layers and a ReLU
        assert f["evidence"]["measured rounds counted"] == 3, f
        assert "torch.inference_mode()" in f["suggestions"][0]["action"]
    for name in ("test_inference_mode", "test_no_grad_inside", "test_nothing_requires_grad"):
        assert found[name] == [], (name, found[name])
    for name in ("test_training_step", "test_func_grad"):  # nodes made, for the backward the samples saw
        assert metrics[name]["cpu.samples"] >= 5, (name, metrics[name]["cpu.samples"])
        assert found[name] == [], (name, found[name])
