"""The stored-baseline gate on one GPU: a launch-heavy test (lean under auto) and a GPU-bound one, saved three times
as a baseline and compared with it in a fourth run. The other gate's path on a GPU (test_gpu_ab.py is the A/B's):
the deterministic metrics a baseline holds come from the same rounds from run to run, so unchanged code reads no
metric change, whichever rounds auto took them from in each run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_ab import CONFTEST, TESTS
from test_gpu_backends import _report
from test_gpu_two_devices import NO_MULTICAST

pytestmark = pytest.mark.gpu


def test_a_baseline_saved_on_a_gpu_compares_unchanged_code_without_a_metric_change(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_gated.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(NO_MULTICAST, FIXTURE_LOG=str(tmp_path / "fixture.log"), PYTHONUNBUFFERED="1")
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
            f"--inferscope-baseline-dir={tmp_path / 'baselines'}"]  # fmt: skip

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*base, *args], cwd=root, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
        return proc

    for _ in range(3):  # the noise floor needs a history
        pytest_run("--inferscope-save-baseline=main")
    pytest_run("--inferscope-compare=main", f"--inferscope-report={tmp_path / 'out'}")  # (the marker's gate: 50%)
    seen = {}
    for path in (tmp_path / "out").glob("*/report.json"):
        report = json.loads(path.read_text())
        name, regression = report["nodeid"].split("::")[-1], report["regression"]
        launches = report["analysis"]["metrics"]["gpu.kernel_launches_per_round"]
        seen[name] = (regression["verdict"], launches, report["analysis"]["bottleneck"])
        assert regression["metric_changes"] == [], (name, regression["metric_changes"])
        assert launches and launches >= (200 if name == "test_decode" else 10), (name, launches)
    assert set(seen) == {"test_decode", "test_forward"}, seen
    _report("baseline on one GPU", **{k: str(v) for k, v in seen.items()})
