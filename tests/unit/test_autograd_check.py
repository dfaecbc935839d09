"""Autograd left on in inference: the measured rounds' count of the graph nodes autograd made (collectors/autograd.py)
and the rule that reads it (analyzer/rules_autograd.py)."""

from __future__ import annotations

from typing import Any

import pytest
from test_analyzer import build
from test_collectors import run

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.collectors.autograd import AutogradNodes, node_counter
from pytest_inferscope.merger import merge

torch = pytest.importorskip("torch")


def _mlp(requires_grad: bool = True) -> Any:
    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(4):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).eval().requires_grad_(requires_grad)


def _nodes(body: Any) -> int:
    counter = node_counter()
    assert counter is not None
    nodes = AutogradNodes(counter)
    nodes.enter()
    body()
    nodes.exit()
    return nodes.nodes


def test_a_forward_with_autograd_on_makes_nodes_and_one_that_records_nothing_makes_none() -> None:
    model, x = _mlp(), torch.randn(8, 64)
    assert _nodes(lambda: model(x)) >= 8  # 4 Linear layers and 4 ReLUs

    def no_grad() -> None:
        with torch.no_grad():  # grad mode off inside the body: torch.is_grad_enabled() at the round's start reads on
            model(x)

    def inference() -> None:
        with torch.inference_mode():
            model(x)

    frozen = _mlp(requires_grad=False)
    for body in (no_grad, inference, lambda: frozen(x)):  # grad mode on, but nothing requires grad: no node
        assert _nodes(body) == 0, body


def test_only_the_measured_rounds_are_counted() -> None:
    model, x = _mlp(), torch.randn(4, 64)
    per_call = _nodes(lambda: model(x))
    calls: list[int] = []

    def body() -> None:
        calls.append(1)
        model(x)
        if len(calls) <= 2:  # the two warm-up rounds make twice the nodes: not counted
            model(x)

    _, raw = run(body, rounds=3, warmup=2, cpu="off")
    assert raw.meta["autograd"] == {"nodes": 3 * per_call, "rounds": 3}, raw.meta["autograd"]


def _with(raw: Any, **autograd: int) -> Any:
    raw.meta["autograd"] = {"nodes": 0, "rounds": 10, **autograd}
    return raw


def _found(raw: Any) -> list[Any]:
    return [f for f in analyze(merge(raw)).findings if f.rule == "autograd_recording"]


def test_the_rule_names_autograd_left_on_with_its_nodes_and_claims_no_saving() -> None:
    (f,) = _found(_with(build(cpu_busy=0.9, samples=[("t:body (t.py:1)", 0.9)]), nodes=120))
    assert f.cause is None and f.share == 0.0 and not f.share_measured  # 0 as not measured apart, not as nothing
    assert f.evidence["autograd graph nodes per call"] == 12.0 and f.evidence["measured rounds counted"] == 10
    assert "12 graph nodes a call" in f.summary and "no sample was in a backward" in f.summary, f.summary
    (s,) = f.suggestions
    assert "torch.inference_mode()" in s.action and s.saving_ms == 0.0 and "not simulated" in s.rationale
    # Without samples a training step cannot be told apart: the finding says so and is less sure.
    (unsampled,) = _found(_with(build(cpu_busy=0.9), nodes=120))
    assert "the stack was not sampled" in unsampled.summary and unsampled.confidence < f.confidence


@pytest.mark.parametrize(
    "frame",
    [
        "graph:_engine_run_backward (/venv/lib/torch/autograd/graph.py:966)",
        "_tensor:Tensor.backward (torch/_tensor.py:566)",
        "eager_transforms:grad_impl (torch/_functorch/eager_transforms.py:1531)",
    ],
)
def test_a_sampled_backward_is_a_training_step_not_a_finding(frame: str) -> None:
    stack = f"t:body (t.py:1);{frame}"
    assert not _found(_with(build(cpu_busy=0.9, samples=[(stack, 0.5)]), nodes=120))


def test_no_nodes_or_no_count_is_no_finding() -> None:
    assert not _found(_with(build(cpu_busy=0.9)))  # counted, none made
    assert not _found(build(cpu_busy=0.9))  # not counted (no torch)
