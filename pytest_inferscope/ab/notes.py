"""The A/B controller's lines for the summary and its usage errors that need no state of their own: what the user
asked for that an A/B run does not do, and why the twin was no A/B twin (controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .args import given as option_given
from .worktree import own_packages

if TYPE_CHECKING:
    from ..options import Settings
    from .twin import Twin, TwinDied
    from .worktree import Worktree


def settings_notes(tree: Worktree | None, settings: Settings, baseline_note: str | None) -> list[str]:
    """What the user asked for that an A/B run does not do: the baseline comparison, an explicit speed probe; and
    this checkout's uncommitted changes, which this side runs and the twin does not."""
    notes = []
    if tree is not None and tree.uncommitted:
        notes.append(
            f"inferscope A/B: this side runs this checkout as it is, with {tree.uncommitted}; the twin "
            f"{tree.label()} as committed"
        )
    if baseline_note is not None:
        notes.append(f"inferscope A/B: {baseline_note}")
    if settings.speed_probe == "on" and settings.sources.get("speed_probe", "cli") != "default":
        given = option_given(settings, "speed_probe", "on")
        notes.append(
            f"inferscope A/B: the speed probe did not run, though {given} asked for it: in an A/B run the pairing "
            "is the defence against drift, each pair's two rounds run one after the other on one CPU core, so "
            "what slows the machine slows both (docs/ab.md)"
        )
    return notes


def not_a_twin(exc: TwinDied, twin: Twin | None, tree: Worktree | None, settings: Settings, label: str,
               python: Path) -> str:  # fmt: skip
    """Why the twin stopped before saying its tests were collected, for the usage error."""
    code = twin.proc.returncode if twin is not None else None
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        return f"--inferscope-ab: the tests could not be started at {label}: {exc}"
    if tree is not None and "pytest_inferscope" in own_packages(tree.path):
        why = (
            f"the repository's own pytest_inferscope at {tree.ref}, which the twin imports (the worktree "
            "comes first on its PYTHONPATH), has no A/B twin (it predates A/B runs, or does not load). Compare "
            "against a ref whose pytest_inferscope has it"
        )
    elif settings.ab_python is not None:
        why = (
            f"the pytest-inferscope of {python} predates A/B runs, or its configuration does not load it. "
            "Install this version there (`PATH -m pip install pytest-inferscope`)"
        )
    else:
        why = (
            f"its configuration at {label} (its conftest.py or ini file) does not load pytest-inferscope, "
            "or switches it off. Load it there, or compare against another ref"
        )
    return (
        f"--inferscope-ab: the twin pytest process at {label} ran the tests as a plain pytest run, without "
        f"pytest-inferscope's A/B twin (it exited with status {int(code)} without reporting its collection): "
        f"{why}." + (f" Its last output:\n{tail}" if (tail := twin.tail(5) if twin else "") else "")
    )
