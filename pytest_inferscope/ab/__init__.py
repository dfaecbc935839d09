"""A/B gating: this checkout against a git ref (or another interpreter), interleaved round by round.

worktree: the other side's code (a temporary `git worktree`) and the interpreter check;
twin/channel: the second pytest process and the pipe to it; lockstep: the turn-taking of one test;
paired: the statistics on the pairs and the verdict; controller: the plugin object tying them
together for the session. See docs/ab.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from ..checks import Plan
    from ..options import Settings
    from ..results import TestResult


def filter_twin_args(args: list[str]) -> None:
    """In a twin, before pytest parses its arguments: `args` less what only the other side does (ab/args.py)."""
    from .channel import ENV

    if os.environ.get(ENV):
        from .args import in_twin

        in_twin(args)


def make_ab(config: pytest.Config, settings: Settings, plans: Mapping[str, Plan], results: Sequence[TestResult]) -> Any:
    """The A/B object of this process: the twin's server in a twin, the controller with --inferscope-ab*, or None.

    `plans` and `results` are the session's own (filled as the run goes), so the twin reads them without
    importing the session back.
    """
    from .twin import ENV, twin_channel

    if os.environ.get(ENV):
        from .twin import TwinServer

        channel = twin_channel()
        assert channel is not None
        return TwinServer(channel, plans, results)
    if settings.ab is None and settings.ab_python is None:
        return None
    from .controller import ABController

    return ABController(config, settings, plans)


def twin_settings(settings: Settings) -> Settings:
    """In a twin: the settings without what only the parent does (reports, baselines, its own A/B, the probe)."""
    from .twin import ENV

    if not os.environ.get(ENV):
        return settings
    import dataclasses

    return dataclasses.replace(
        settings, report=None, compare=None, save_baseline=None, ab=None, ab_python=None, speed_probe="off"
    )
