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


def filter_twin_args(args: list[str], config: pytest.Config) -> None:
    """In a twin, before pytest parses its arguments: `args` less what only the other side does (ab/args.py)."""
    from .channel import ENV

    if os.environ.get(ENV):
        from .args import SEED_ENV, in_twin

        in_twin(args, config.pluginmanager.hasplugin("randomly"), os.environ.get(SEED_ENV))


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


def save_conflict(settings: Settings) -> str | None:
    """Why an A/B run refuses --inferscope-save-baseline (None without it).

    This side's rounds are paced: each waits its turn with the twin's, both processes pinned to one core, so their
    latencies are not a plain run's, and a baseline's latest entry is what every later --inferscope-compare judges a
    plain run against. Entries are never removed from a baseline, so a mistaken one could not be taken back: refused
    before anything is made, rather than saved with a label nothing reads."""
    if settings.save_baseline is None:
        return None
    from .args import given as _given

    ab = settings.ab if settings.ab is not None else settings.ab_python
    other = _given(settings, "ab" if settings.ab is not None else "ab_python", ab)
    save = _given(settings, "save_baseline", settings.save_baseline)
    return (
        f"{save} cannot be combined with {other}: in an A/B run this side's rounds are paced, each taking its turn "
        "with the twin's, both processes pinned to one CPU core, so their latencies are not what a plain run "
        f"measures, and the baseline's latest entry is what a later --inferscope-compare={settings.save_baseline} "
        "judges plain runs against (a baseline's entries are never removed). Save the baseline in a run without "
        f"--inferscope-ab or --inferscope-ab-python (pytest --inferscope-save-baseline={settings.save_baseline}), "
        "and run the A/B gate as a run of its own."
    )


def not_compared(settings: Settings, label: str) -> str | None:
    """Why an A/B run does not compare its tests with --inferscope-compare's baseline (None without it); `label`: the
    other side ("HEAD~1 (3f2a9c1d0e)").

    This side's rounds are paced, as for `save_conflict`, so a verdict against a plain run's baseline would compare
    unlike things; and refusing the pair would stop every A/B run of a team whose config file sets the baseline
    compared with on everyday runs. The A/B comparison is the gate."""
    if settings.compare is None:
        return None
    source = settings.sources.get("compare", "cli")
    given = f"--inferscope-compare={settings.compare}" if source.startswith("cli") else f"set by {source}"
    return (
        f"not compared with baseline {settings.compare!r} ({given}): an A/B run's rounds are paced, each taking its "
        "turn with the twin's on one CPU core, so they are not what a plain run measures; the A/B comparison with "
        f"{label} is the gate"
    )


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
