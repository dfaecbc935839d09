"""The A/B gate on one GPU: the same code at both sides, a launch-heavy test (lean under auto: its measured rounds
record no GPU activity) and a GPU-bound one, sharing a session-scoped model.

Until 2026-11-30 the twin ran no rounds after the measured ones, where a lean test's GPU figures are read from: it
read 0 kernel launches a round against this side's N, and every lean test failed on `kernel_launches 0 → N` (an H200;
`benchmarks/ab_gpu.py`'s unchanged decode 5 of 5). Checked: the run passes, no deterministic metric differs between
the sides, both read the same kernel launches a round, and the twin set the session's model up once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_gpu_backends import _report
from test_gpu_two_devices import NO_MULTICAST

pytestmark = pytest.mark.gpu

CONFTEST = """
import os, pytest, torch

@pytest.fixture(scope="session")
def weights():
    with open(os.environ["FIXTURE_LOG"], "a") as f:
        f.write("twin\\n" if os.environ.get("INFERSCOPE_AB_TWIN") else "here\\n")
    return torch.randn(64, 64, device="cuda"), torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
"""

# max_regression far above any chance difference of identical code: the test is about what the sides compare
TESTS = """
import pytest, torch

@pytest.mark.inferscope(rounds=10, warmup=2, max_regression=0.5)
def test_decode(weights):
    w, _ = weights
    h = torch.ones(1, 64, device="cuda")
    for _ in range(200):
        h = torch.tanh(h @ w + 1.0)
    torch.cuda.synchronize()

@pytest.mark.inferscope(rounds=10, warmup=2, max_regression=0.5)
def test_forward(weights):
    _, a = weights
    for _ in range(10):
        b = a @ a
    torch.cuda.synchronize()
"""


def git(where: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=where, check=True,
                   capture_output=True, text=True)  # fmt: skip


def test_ab_on_a_gpu_compares_the_same_kernel_launches_at_both_sides(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_ab_gpu.py").write_text(TESTS)
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    git(root, "commit", "-qm", "second", "--allow-empty")
    log = tmp_path / "fixture.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(NO_MULTICAST, FIXTURE_LOG=str(log), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
           "--inferscope-ab=HEAD~1", f"--inferscope-report={tmp_path / 'out'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    reports = {p.parent.name.split("__")[1].split("-")[0]: json.loads(p.read_text())
               for p in (tmp_path / "out").glob("*/report.json")}  # fmt: skip
    assert set(reports) == {"test_decode", "test_forward"}, list(reports)
    seen = {}
    for name, report in reports.items():
        ab = report["ab"]
        launches = report["analysis"]["metrics"]["gpu.kernel_launches_per_round"]
        seen[name] = (ab["verdict"], launches, report["analysis"]["bottleneck"])
        assert ab["metric_changes"] == [], (name, ab["metric_changes"])
        assert launches and launches >= (200 if name == "test_decode" else 10), (name, launches)
    _report("A/B on one GPU", **{k: str(v) for k, v in seen.items()})
    assert log.read_text().split() == ["here", "twin"] or log.read_text().split() == ["twin", "here"]
