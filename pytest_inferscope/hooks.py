"""Hookspecs other plugins implement to extend inferscope (`pytest_inferscope_*`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .analyzer import Rule
    from .results import TestResult


@pytest.hookspec
def pytest_inferscope_rules(config: pytest.Config) -> list[Rule] | None:
    """Return analyzer rules to run after the built-in ones.

    A rule is a pure function `rule(ctx: pytest_inferscope.analyzer.Context) -> list[Finding]`;
    a finding whose `cause` names a bottleneck class takes part in the classification.
    Every implementation's list is used.
    """


@pytest.hookspec
def pytest_inferscope_machine_info(config: pytest.Config) -> dict[str, Any] | None:
    """Return facts about the machine to add to the environment recorded with every result
    (and, with baselines, to the fingerprint results are compared under)."""


@pytest.hookspec
def pytest_inferscope_result(config: pytest.Config, result: TestResult) -> None:
    """Called with each profiled test's result after its reports are written (upload it, assert on it)."""
