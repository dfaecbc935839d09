"""The collectors other plugins add (`pytest_inferscope_collectors`): started and stopped around a test body.

A third party's collector never breaks the test: one that fails to start is left out, one that fails
to stop loses its metrics, and either is said once as an `InferscopeWarning`.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from .warning import InferscopeWarning


def start_extra_collectors(config: pytest.Config, item: pytest.Item) -> list[Any]:
    """Start the collectors other plugins add (pytest_inferscope_collectors); one that fails is left out."""
    started = []
    for extra in config.hook.pytest_inferscope_collectors(config=config, item=item):
        for c in extra or ():
            try:
                c.start()
                started.append(c)
            except Exception as exc:  # a third party's collector never breaks the test
                _warn_collector(c, item, "start", exc)
    return started


def stop_extra_collectors(item: pytest.Item, collectors: list[Any]) -> dict[str, float | None]:
    """Stop them; their metrics, named `<collector>.<key>`."""
    metrics: dict[str, float | None] = {}
    for c in collectors:
        try:
            for key, value in dict(c.stop()).items():
                metrics[f"{c.name}.{key}"] = None if value is None else float(value)
        except Exception as exc:
            _warn_collector(c, item, "stop", exc)
    return metrics


def _warn_collector(c: Any, item: pytest.Item, when: str, exc: Exception) -> None:
    name = getattr(c, "name", type(c).__name__)
    warnings.warn(
        InferscopeWarning(
            f"inferscope: the collector {name!r} (from pytest_inferscope_collectors) failed to {when} for "
            f"{item.nodeid}: {type(exc).__name__}: {exc}; its metrics are left out of this test's analysis."
        ),
        stacklevel=1,
    )
