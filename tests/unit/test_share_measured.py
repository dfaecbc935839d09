"""The built-in rules say whether they measured a finding's share: the default (measured only when above 0) is for
custom rules (docs/custom-rules.md), and a built-in share measured as 0.0 must read "explains 0.0%", as before."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_inferscope
from pytest_inferscope.analyzer import analyze
from pytest_inferscope.events import RawTrace
from pytest_inferscope.merger import merge

DATA = Path(__file__).resolve().parent.parent / "data"


def test_every_built_in_finding_says_whether_its_share_was_measured() -> None:
    package = Path(pytest_inferscope.__file__).parent
    unsaid = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            is_finding = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding"
            if is_finding and "share_measured" not in {k.arg for k in node.keywords}:
                unsaid.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not unsaid, unsaid


def test_a_share_measured_as_none_still_reads_as_measured() -> None:
    """gpu_memory_pressure on a recorded GPU-bound trace: no time in the allocator, measured (read "not measured
    apart" for a day, when the default changed for custom rules)."""
    analysis = analyze(merge(RawTrace.load(str(DATA / "gpu_bound" / "fixed.npz"))))
    (finding,) = [f for f in analysis.findings if f.rule == "gpu_memory_pressure"]
    assert finding.share == 0.0 and finding.share_measured is True
