"""The plugin's warning category, a way to say a thing once per process, and the text of a common warning."""

from __future__ import annotations

import warnings


class InferscopeWarning(UserWarning):
    """Something the plugin could not do, that did not fail the test."""


_said: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warn with `message` the first time `key` comes up in this process (a degraded collector, say)."""
    if key not in _said:
        _said.add(key)
        warnings.warn(InferscopeWarning(message), stacklevel=3)


def async_not_profiled(nodeid: str) -> str:
    """Why an async test has no report."""
    return (
        f"inferscope: {nodeid} is an async test, which inferscope cannot call in rounds (its body runs in the "
        "event loop of the plugin that awaits it), so it was not profiled and has no report. Profile the "
        "awaited work inside the test with `with pytest_inferscope.profile():`, or move the model call into a "
        "synchronous test."
    )
