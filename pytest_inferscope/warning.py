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


def async_not_ab_gated(nodeid: str) -> str:
    """Why an async test has no report under the A/B gate."""
    return (
        f"inferscope: {nodeid} is an async test, and the A/B gate (--inferscope-ab) takes its rounds in turns with the "
        "twin process's, which it cannot do from inside the event loop that awaits the test; so it was not profiled "
        "and has no report. Without --inferscope-ab it is profiled; to gate it on A/B, move the model call into a "
        "synchronous test."
    )
