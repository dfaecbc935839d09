"""A/B gating: this checkout against a git ref (or another interpreter), interleaved round by round.

worktree: the other side's code (a temporary `git worktree`) and the interpreter check;
twin/channel: the second pytest process and the pipe to it; lockstep: the turn-taking of one test;
paired: the statistics on the pairs and the verdict; baselines: what an A/B run does with stored baselines;
controller: the plugin object tying them together for the session. See docs/ab.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .baselines import save_conflict

if TYPE_CHECKING:
    import pytest

    from ..checks import Plan
    from ..options import Settings
    from ..results import TestResult


def filter_twin_args(args: list[str], config: pytest.Config) -> None:
    """In a twin, before pytest parses its arguments: `args` less what only the other side does (ab/args.py)."""
    from .channel import ENV

    if os.environ.get(ENV):
        from .args import SEED_ENV, in_twin

        in_twin(args, config.pluginmanager.hasplugin("randomly"), os.environ.get(SEED_ENV))


def fix_ab_layout(config: pytest.Config, settings: Settings) -> None:
    """Before anything runs, for an A/B run whose tests run with --inferscope-ab-aslr=off: address-space
    randomisation off in this process and the twin it starts (ab/layout.py); this process may execute itself again.
    Not in a twin or an xdist worker, whose parent did it."""
    from .twin import ENV

    if os.environ.get(ENV) or hasattr(config, "workerinput") or not settings.enable or settings.ab_aslr != "off":
        return
    if (settings.ab is None and settings.ab_python is None) or save_conflict(settings) is not None:
        return  # no A/B, or refused at pytest_configure
    if any(config.getoption(name, False) for name in ("collectonly", "setuponly", "setupplan", "help", "version")):
        return  # no test body runs
    from .layout import fix_layout

    fix_layout(config)


def make_ab(config: pytest.Config, settings: Settings, plans: Mapping[str, Plan], results: Sequence[TestResult]) -> Any:
    """The A/B object of this process: the twin's server in a twin, the controller with --inferscope-ab*, or None (also
    when no test body runs: --collect-only, --setup-only).

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
    if (refused := save_conflict(settings)) is not None:
        import pytest

        raise pytest.UsageError(refused)
    if config.getoption("collectonly", False) or config.getoption("setuponly", False):
        return None  # no test body runs (--collect-only, --setup-only, --setup-plan): no worktree, no twin
    from .controller import ABController

    return ABController(config, settings, plans)


def session_settings(settings: Settings) -> Settings:
    """The settings of this process's session: in a twin, without what only the parent does (reports, baselines, its
    own A/B, the probe); in an A/B run, without --inferscope-compare (`not_compared`: the controller keeps it, to say
    so)."""
    import dataclasses

    from .twin import ENV

    if os.environ.get(ENV):
        return dataclasses.replace(
            settings, report=None, compare=None, save_baseline=None, ab=None, ab_python=None, speed_probe="off"
        )
    if settings.compare is not None and (settings.ab is not None or settings.ab_python is not None):
        return dataclasses.replace(settings, compare=None)
    return settings
