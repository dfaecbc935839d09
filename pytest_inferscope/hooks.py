"""Hookspecs other plugins implement to extend inferscope (`pytest_inferscope_*`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from .analyzer import Rule, WhatIf
    from .results import TestResult


@pytest.hookspec
def pytest_inferscope_rules(config: pytest.Config) -> list[Rule] | None:
    """Return analyzer rules to run after the built-in ones.

    A rule is a pure function `rule(ctx: pytest_inferscope.analyzer.Context) -> list[Finding]`,
    reading the context's views (`ctx.rounds`, `ctx.gpu`, `ctx.cpu`) and its `ctx.metrics`;
    a finding whose `cause` names a bottleneck class takes part in the classification.
    Every implementation's list is used. A rule that raises, or returns anything but a list of
    `Finding`, loses its own findings in that test (`Analysis.extension_errors`, and a warning naming
    it); the analysis, the reports and the test's outcome go on without it (docs/custom-rules.md,
    "When an added rule or hook fails"). A hook implementation that raises adds no rule to that test.
    """


@pytest.hookspec
def pytest_inferscope_whatifs(config: pytest.Config) -> list[WhatIf] | None:
    """Return what-ifs to simulate after the built-in ones (docs/architecture.md, "Diagnosis by simulated fixes").

    A what-if is `pytest_inferscope.analyzer.WhatIf(change, bottleneck, action, transform)`:
    `transform(graph: RoundGraph) -> RoundGraph | None` returns a changed copy of one round's
    dependency graph (`analyzer/graph.py`; never modify the one given), or None where the change
    does not apply. The graph is replayed and the saving goes into the what-if table; the class
    is the what-if that saves the most, so a what-if with `bottleneck` set takes part in the
    verdict, and its `action` becomes a suggestion ranked by its simulated saving. Every
    implementation's list is used; a hook implementation that raises adds no what-if to that test,
    said in a warning naming it (the analysis goes on). A what-if whose transform raises, or returns
    anything but a `RoundGraph` or None, loses its own row in that test (`Analysis.extension_errors`,
    and a warning naming it; docs/custom-rules.md, "When an added rule or hook fails").
    """


class ExtraCollector(Protocol):
    """What `pytest_inferscope_collectors` returns: started before a profiled test's first round,
    stopped after its last, contributing metrics to the analysis."""

    #: Prefix of the metrics it contributes ("power" -> "power.avg_watts"); letters, digits, '_'.
    name: str

    def start(self) -> None: ...

    def stop(self) -> Mapping[str, float | None]: ...


@pytest.hookspec
def pytest_inferscope_collectors(config: pytest.Config, item: pytest.Item) -> list[ExtraCollector] | None:
    """Return collectors to run around this profiled test (new objects for each test).

    Each gets `start()` just before the test's first (warm-up) round and `stop()` just after its
    last; `stop()` returns a mapping of metric names to numbers (None: not measured), which the
    analysis lists as `<collector.name>.<metric>` in `Analysis.metrics` (so reports, JSON and rules
    added through `pytest_inferscope_rules` can read them). A collector that raises is reported in
    a warning naming it and the test, and its metrics are left out; the test and the other
    collectors go on. Every implementation's list is used; a hook implementation that raises is a
    warning naming it, and no collector of this hook runs for that test.
    """


@pytest.hookspec
def pytest_inferscope_machine_info(config: pytest.Config) -> dict[str, Any] | None:
    """Return facts about the machine to add to the environment recorded with every result
    (and, with baselines, to the fingerprint results are compared under).

    An implementation that raises, or returns something other than a dict, adds nothing: one warning
    for the session names it, and every test is analysed and reported as usual."""


@pytest.hookspec
def pytest_inferscope_result(config: pytest.Config, result: TestResult) -> None:
    """Called with each profiled test's result as soon as it is analysed (assert on it, keep it).

    Its report files may not be on disk yet: a helper process writes them while the tests go on. `result.files`
    names them (relative to the report folder); they are all written, with index.json, by the time a
    `@pytest.hookimpl(trylast=True)` `pytest_sessionfinish` runs (in an xdist worker: its own tests' files, the
    index in the controller's): upload them there (docs/ci.md, "Uploading the reports"). An implementation that
    raises is a warning naming it; the result, its verdict and its reports stand.
    """
