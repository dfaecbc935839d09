"""The A/B controller's lines for the summary and its usage errors that need no state of their own: what the user
asked for that an A/B run does not do, why the twin was no A/B twin (controller.py), and the tests a fresh pair
re-checked (recheck.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..units import fmt_count
from .args import given as option_given
from .worktree import own_packages

if TYPE_CHECKING:
    from ..options import Settings
    from ..results import TestResult
    from .twin_process import Twin, TwinDied
    from .worktree import Worktree


#: How the verdict of a test this checkout's twin could not start ends its note (--inferscope-ab-pairs=twins).
PAIRED_HERE = "the pairs are this pytest process's and the twin's"


def start_note(label: str, core: int | None, cores: Sequence[int], *, twins: bool) -> str:
    """Who takes the turns, on which core (one process, no xdist)."""
    if not twins:
        return (
            f"inferscope A/B: this checkout against {label}, round by round in alternating order, both processes "
            f"pinned to CPU core {core} (of the allowed {list(cores)})"
        )
    return (
        f"inferscope A/B: this checkout's twin against the twin at {label}, round by round in alternating order, "
        f"this process's own rounds between their pairs (--inferscope-ab-pairs=twins), all pinned to CPU core {core} "
        f"(of the allowed {list(cores)})"
    )


def hashseed_note(*, twins: bool, workers: int = 0) -> list[str]:
    """Where PYTHONHASHSEED is not set: set it (the processes that take the turns: this one or each xdist worker and
    its twin, or its two twins with --inferscope-ab-pairs=twins)."""
    if os.environ.get("PYTHONHASHSEED"):
        return []
    who = "each xdist worker and its twins" if workers else "this process and its twins"
    who = who if twins else who.replace("twins", "twin")
    return [
        f"inferscope A/B: PYTHONHASHSEED is not set, so {who} hash strings differently; on the development VM that "
        "alone moved whole runs' ratios by a few per cent (docs/ab.md). Set PYTHONHASHSEED=0 for A/B runs: every "
        "twin inherits it."
    ]


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


def nothing_paired(nodeids: list[str], rootdir: Path, here: Path, tree: Worktree, label: str) -> str | None:
    """The summary's line when none of this side's profiled tests (`nodeids`, relative to `rootdir`) has a counterpart
    at the ref, so every one reads `new` and nothing was gated: the folders (or files) of their tests that do not exist
    there (named as from `here`, pytest's folder), or, where their files are all there, that none of their tests is
    profiled there. None when there is no test."""
    files = sorted({rootdir / n.partition("::")[0] for n in nodeids})
    if not files:
        return None
    gone: list[Path] = []
    there = 0  # the files that exist at the ref
    for f in files:
        if tree.map_path(f).exists():
            there += 1
            continue
        top = f  # the topmost folder above it (below the repository's top) that the ref lacks
        while top.parent != tree.top and top.parent != top and not tree.map_path(top.parent).exists():
            top = top.parent
        if top not in gone:
            gone.append(top)
    if len(nodeids) == 1:
        head = f"inferscope A/B: the 1 profiled test here has no counterpart at {label}, so it reads `new` and was not"
    else:
        head = f"inferscope A/B: none of the {len(nodeids)} profiled tests here has a counterpart at {label}, so each"
        head += " reads `new` and none was"
    head += " compared: the A/B gate did not run"
    rest = "none of their tests is profiled (or collected) there"
    if not gone:
        return f"{head}. Their test files exist there, but {rest}"
    shown = ", ".join(_shown(p, here) + ("/" if p.is_dir() else "") for p in gone[:5]) + (
        " ..." if len(gone) > 5 else ""
    )
    others = (
        f"; the {fmt_count(there, 'other file')} {'exists' if there == 1 else 'exist'} there, but {rest}"
        if there
        else ""
    )
    return (
        f"{head}: {shown} {'does' if len(gone) == 1 else 'do'} not exist at {label}{others}. Compare against a ref "
        "that has the tests"
    )


def _shown(path: Path, here: Path) -> str:
    try:
        return str(path.relative_to(here))
    except ValueError:
        return str(path)


def recheck_notes(results: Sequence[TestResult]) -> list[str]:
    """The summary's line on the tests a fresh pair of processes re-checked (recheck.py), [] where none was: how many,
    each outcome, and the tests whose first verdict it did not confirm (theirs is now the fresh pair's); and the line
    on the tests this checkout's twin could not start (`_paired_here`)."""
    outcomes: dict[str, list[str]] = {}
    for result in results:
        if result.ab and result.ab.get("recheck"):
            outcomes.setdefault(str(result.ab["recheck"].get("outcome")), []).append(result.nodeid)
    if not outcomes:
        return _paired_here(results)
    said = ", ".join(f"{len(outcomes[k])} {k}" for k in ("confirmed", "not confirmed", "not run") if k in outcomes)
    line = (
        f"inferscope A/B: {fmt_count(sum(map(len, outcomes.values())), 'test')} that read regressed or improved "
        f"re-checked by a fresh pair of processes, started alike: {said}"
    )
    if overruled := outcomes.get("not confirmed"):
        more = f" and {len(overruled) - 5} more" if len(overruled) > 5 else ""
        line += f" (the fresh pair's verdict stands for {', '.join(overruled[:5])}{more}; docs/ab.md)"
    return [line, *_paired_here(results)]


def _paired_here(results: Sequence[TestResult]) -> list[str]:
    """With --inferscope-ab-pairs=twins, the tests this checkout's twin could not start, which this process paired with
    the twin instead (controller._begin): said once in the summary, so that a twin that runs none is not missed."""
    tests = [r.nodeid for r in results if r.ab and any(str(n).endswith(PAIRED_HERE) for n in r.ab.get("notes") or ())]
    if not tests:
        return []
    more = f" and {len(tests) - 5} more" if len(tests) > 5 else ""
    return [
        f"inferscope A/B: {fmt_count(len(tests), 'test')} this checkout's twin could not start, paired by this pytest "
        f"process and the twin instead (--inferscope-ab-pairs=twins; each verdict's note says why): "
        f"{', '.join(tests[:5])}{more}"
    ]
