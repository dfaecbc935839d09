"""The helpers the benchmarks share (benchmarks/_common.py): what the GPU-only benchmarks rely on and CI can run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_pin_to_one_core_leaves_the_process_on_its_last_allowed_core() -> None:
    # In a child process: pinning this one would slow the rest of the suite.
    code = (
        "import os; from benchmarks._common import pin_to_one_core; "
        "before = max(os.sched_getaffinity(0)); core = pin_to_one_core(); "
        "print(before, core, sorted(os.sched_getaffinity(0)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, core, allowed = out.stdout.split(maxsplit=2)
    assert core == before
    assert allowed.strip() == f"[{core}]"


def test_the_gpu_benchmarks_pin_with_the_shared_helper() -> None:
    from benchmarks import _common, bench_after_measured, bench_sync_balance

    assert bench_sync_balance.pin_to_one_core is _common.pin_to_one_core
    assert bench_after_measured.pin_to_one_core is _common.pin_to_one_core


def test_the_header_names_the_package_measured_and_its_commit_only_where_it_is_this_checkouts(tmp_path: Path) -> None:
    # Session 41 ran "the old package against the new" with PYTHONPATH set to the old one: a benchmark puts its own tree
    # first on sys.path, so both sides ran the new one, and the headers said the same commit.
    code = "from benchmarks._common import header; print('\\n'.join(header('t', 'v')))"
    here = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert here.returncode == 0, here.stderr
    assert f"package: {ROOT / 'pytest_inferscope'}" in here.stdout
    assert "commit: unknown" not in here.stdout, here.stdout
    # A copy of the package with its own benchmarks/ inside another checkout: its path, and no commit claimed.
    old = tmp_path / "old"
    (old / "benchmarks").mkdir(parents=True)
    (old / "benchmarks" / "_common.py").write_text((ROOT / "benchmarks" / "_common.py").read_text())
    (old / "pytest_inferscope").mkdir()
    (old / "pytest_inferscope" / "__init__.py").write_text("")
    there = subprocess.run([sys.executable, "-c", code], cwd=old, capture_output=True, text=True, timeout=60)
    assert there.returncode == 0, there.stderr
    assert f"package: {old / 'pytest_inferscope'}" in there.stdout, there.stdout
    assert "commit: unknown: the package measured is not a git checkout's own" in there.stdout, there.stdout
