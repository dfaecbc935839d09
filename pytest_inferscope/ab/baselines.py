"""What an A/B run does with stored baselines: refuses to save one (`save_conflict`), and compares with none, saying
why (`not_compared`). Its own module so that the package's entry points and the controller both import it, neither
importing the other."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..options import Settings

__all__ = ["not_compared", "save_conflict"]


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
