"""The plugin's warning category, and a way to say a thing once per process."""

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
