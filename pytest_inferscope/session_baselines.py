"""The session's baselines: the one `--inferscope-compare` names, the one `--inferscope-save-baseline` appends to,
and the lines they leave in the terminal summary.

Part of the plugin surface (`session.py` holds one); the store itself is `baseline.py`, the verdict `regression.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .config import Settings

if TYPE_CHECKING:
    from .baseline import Baseline
    from .postprocess import Comparison
    from .results import TestResult


class SessionBaselines:
    """Loads and checks the baselines at session start, gives each test its comparison, saves the run at the end.

    `notes` is the session's list of summary lines, shared: a saved baseline, one that could not be saved, and a
    baseline recorded on another machine are said there, never silently."""

    def __init__(self, config: pytest.Config, settings: Settings, notes: list[str]) -> None:
        self.config = config
        self.settings = settings
        self.notes = notes
        self.baseline: Baseline | None = None  # loaded at session start with --inferscope-compare
        self.saving_to: Baseline | None = None  # the existing baseline --inferscope-save-baseline appends to

    def directory(self) -> Path:
        """The baselines folder: relative to the rootdir unless given on the command line or in the environment."""
        d = self.settings.baseline_dir
        if d.is_absolute():
            return d
        source = self.settings.sources.get("baseline_dir", "default")
        base = self.config.invocation_params.dir if source.startswith(("cli", "env")) else self.config.rootpath
        return base / d

    def check(self) -> None:
        """At session start, when a baseline is compared with or saved: a bad name or store stops the run."""
        if self.settings.compare is None and self.settings.save_baseline is None:
            return
        from .baseline import BaselineError, BaselineStore

        try:
            store = BaselineStore(self.directory())
            self.baseline, self.saving_to = store.for_run(self.settings.compare, self.settings.save_baseline)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def comparison(self, nodeid: str) -> Comparison | None:
        """What the test `nodeid` is compared with (None without --inferscope-compare)."""
        if self.baseline is None:
            return None
        from .postprocess import Comparison

        return Comparison(
            baseline_name=self.baseline.name,
            entry=self.baseline.get(nodeid),
            max_regression=self.settings.max_regression,
            alpha=self.settings.alpha,
            tests_in_baseline=len(self.baseline.tests),
            history=list(self.baseline.history.get(nodeid, [])),
        )

    def probe_readings(self, nodeid: str, runs: int = 5) -> list[float]:
        """The speed probe's readings of the test's last `runs` runs in the baseline compared with (or appended to)."""
        known = self.baseline or self.saving_to
        history = known.history.get(nodeid, [])[-runs:] if known is not None else []
        return [x for run in history for x in run.probe_ms]

    def note_environment_change(self, result: TestResult) -> None:
        """Say once, in the summary, that the baseline was recorded elsewhere: never a silent comparison."""
        from .regression import environment_note

        note = environment_note(result)
        if note and not any(n.startswith(note.split(" (")[0]) for n in self.notes):
            self.notes.append(note)

    def save(self, results: list[TestResult], environment: dict[str, Any]) -> bool:
        """At session end with --inferscope-save-baseline: the run saved, or False with the reason in the notes."""
        name = self.settings.save_baseline
        if name is None:
            return True
        from .baseline import BaselineError, BaselineStore

        try:
            self.notes.append(BaselineStore(self.directory()).save_run(name, results, environment))
        except BaselineError as exc:  # not a crash and not silent: the summary says why, and the run fails
            self.notes.append(f"inferscope: baseline {name!r} NOT saved: {exc}")
            return False
        return True

    def missing(self, results: list[TestResult]) -> list[str]:
        """The summary's line naming the profiled tests the compared baseline does not hold (not compared, each with
        `—` at most in the table): where it holds none of them, nothing else would say that the run gated nothing."""
        if self.baseline is None or not results:
            return []
        held = self.baseline.tests
        absent = [r.nodeid for r in results if r.nodeid not in held]
        if not absent:
            return []
        name, n = self.baseline.name, len(absent)
        saving = self.settings.save_baseline == name  # this run appends them
        save = "this run saves them into it" if saving else f"save them into it with --inferscope-save-baseline={name}"
        if n < len(results):
            return [
                f"inferscope: {n} of the {len(results)} profiled tests {'is' if n == 1 else 'are'} not in baseline "
                f"{name!r}, so not compared: {_some(absent)}. {save[0].upper()}{save[1:]}."
            ]
        tests = "the 1 profiled test is" if n == 1 else f"the {n} profiled tests are"
        return [
            f"inferscope: --inferscope-compare={name} compared no test: {tests} not in baseline {name!r} "
            f"({_some(absent)}), which holds {len(held)} test{'s' * (len(held) != 1)} ({_some(sorted(held))}). A test "
            f"id must match exactly (a parameter, or pytest-repeat's [1-3], makes another id); {save}."
        ]


def _some(nodeids: list[str]) -> str:
    """Up to three test ids, and how many more."""
    more = f" and {len(nodeids) - 3} more" if len(nodeids) > 3 else ""
    return ", ".join(nodeids[:3]) + more
