"""Shared by the benchmarks: the header they print first (date, commit, machine, versions), small statistics (a
bootstrap interval of the median among them), pinning to one core, and the JSON a child process prints."""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def header(title: str, versions: str) -> list[str]:
    """Date, commit (and whether the working tree differs from it), the package measured, machine, and the given
    versions line.

    The commit is this tree's only where the package imported is this tree's and this tree is a checkout's root: a
    copy of an older package with its own `benchmarks/` inside another checkout (an old-against-new comparison) has no
    commit of its own here, and says so. Session 41 compared two packages that were one: `PYTHONPATH` cannot select
    the old one, since a benchmark puts its own tree first on `sys.path` (docs/performance.md)."""
    import pytest_inferscope

    package = Path(pytest_inferscope.__file__).resolve().parent
    top = _run(["git", "rev-parse", "--show-toplevel"])
    if package != ROOT / "pytest_inferscope" or top in ("", "?") or Path(top).resolve() != ROOT:
        commit = "unknown: the package measured is not a git checkout's own"
    else:
        dirty = [ln for ln in _run(["git", "status", "--porcelain", "--", "pytest_inferscope"]).splitlines() if ln]
        tree = f"working tree differs from HEAD in pytest_inferscope/: {len(dirty)} files" if dirty else "clean tree"
        commit = f"{_run(['git', 'rev-parse', '--short', 'HEAD'])} ({tree})"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"# {title}",
        f"date: {_run(['date', '-u'])}",
        f"commit: {commit}",
        f"package: {package}",
        f"machine: nproc={_run(['nproc'])}, CPU {cpu_model()}, load average {load}",
        versions,
    ]


def pin_to_one_core() -> int:
    """Pin this process to its last allowed core and return the core (a thread started later inherits it)."""
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def quartiles(xs: list[float]) -> tuple[float, float]:
    """First and third quartiles (inclusive method); a single value is its own quartiles."""
    if len(xs) < 2:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def bootstrap_median_ci(xs: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of the median."""
    rng = random.Random(seed)
    meds = sorted(med(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def child_json(cmd: list[str]) -> Any:
    """Run a benchmark's child process and return the JSON of its last line of output; on failure, exit with what
    the child wrote to stderr (the last lines), not only its exit status."""
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"the child process {' '.join(cmd)} failed (exit status {done.returncode}):\n{tail}")
    return json.loads(lines[-1])
