"""Two xdist workers, one GPU each: `pytest -n 2 --inferscope-gpus=0,1` against the same tests run serially,
and the A/B gate (`--inferscope-ab`) with each worker and its twin on their own core and GPU.

A small project of GPU tests (matrix products of two sizes, and a Python-heavy body with a little GPU work)
records, from inside each round, which process ran it (xdist worker, A/B side), what CUDA showed it
(CUDA_VISIBLE_DEVICES, device count, current device, the GPU's UUID) and the CPU cores it was allowed. Checked:
each worker saw only its own GPU (one device, UUIDs that differ and match nvidia-smi's GPUs 0 and 1, CUPTI's
records all on device 0 of the process), the fingerprint names the pinned GPU, and the terminal summary, the
index and the JUnit properties of the two-worker run say what the serial run says (the same tests, classes,
verdicts, rounds and property names; latencies within 30 % on identical GPUs). Under A/B each worker and its twin
ran their rounds on one core and one GPU, the two pairs on different ones, and no metric changed between the sides,
a launch-heavy test whose GPU figures come from the rounds after the measured ones among them.
Needs two GPUs (skips with fewer, fails under INFERSCOPE_GPU=required). NVLink multicast stays off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_gpu_backends import _report
from test_gpu_two_devices import NO_MULTICAST

pytestmark = [pytest.mark.gpu, pytest.mark.gpus(2)]

CONFTEST = '''
import json, os, uuid
import pytest
import torch


@pytest.fixture
def where(request):
    """What CUDA and the scheduler showed the rounds of this test, written at teardown."""
    seen = {"cores": set(), "rounds": 0}

    def note():
        seen["cores"].update(os.sched_getaffinity(0))
        seen["rounds"] += 1

    yield note
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    record = {
        "test": request.node.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "serial"),
        "side": "twin" if os.environ.get("INFERSCOPE_AB_TWIN") else "this",
        "pid": os.getpid(),
        "ppid": os.getppid(),  # a twin's parent: the worker that started it
        "cwd": os.getcwd(),  # the ref's twin runs in its worktree, this checkout's twin (ab-pairs=twins) here
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "unset"),
        "device_count": torch.cuda.device_count(),
        "current_device": torch.cuda.current_device(),
        "uuid": str(props.uuid),
        "cores": sorted(seen["cores"]),
        "rounds": seen["rounds"],
    }
    out = os.path.join(os.environ["WHERE_DIR"], f"{uuid.uuid4().hex}.json")
    with open(out, "w") as f:
        json.dump(record, f)
'''

TESTS = """
import pytest
import torch


@pytest.mark.inferscope(rounds=8, warmup=1)
@pytest.mark.parametrize("n", [2048, 4096])
def test_matmul(n, where):
    where()
    a = torch.full((n, n), 1.0 / n, device="cuda")
    for _ in range(6):
        a = a @ a
    torch.cuda.synchronize()


@pytest.mark.inferscope(rounds=8, warmup=1)
def test_python_heavy(where):
    where()
    total = 0
    for i in range(60_000):
        total += i * i % 7
    torch.cuda.synchronize()
    assert torch.ones(4, device="cuda").sum().item() == 4.0
"""


def nvidia_uuids() -> list[str]:
    """The GPUs' UUIDs in nvidia-smi's order (index 0, 1, ...), without the 'GPU-' prefix torch leaves off."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, check=True
    ).stdout
    return [line.strip().removeprefix("GPU-") for line in out.splitlines() if line.strip()]


def pytest_in(root: Path, where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in `root` (a fresh process, CUDA_VISIBLE_DEVICES unset), rounds recorded to `where`."""
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "PYTEST_ADDOPTS")}
    env.update(NO_MULTICAST, WHERE_DIR=str(where), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", *args]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc


def records(where: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(where.glob("*.json"))]


def summary_rows(stdout: str) -> dict[str, tuple[str, ...]]:
    """The inferscope terminal section: test id -> (rounds, bottleneck class, verdict), timings left out."""
    section = stdout.split("= inferscope =", 1)[1].split("inferscope reports:", 1)[0]
    lines = [re.split(r"\s{2,}", line.strip()) for line in section.splitlines()[1:] if line.strip()]
    head, rows = lines[0], [row for row in lines[1:] if "::" in row[0]]
    at = {name: head.index(name) for name in ("test", "rounds", "bottleneck", "verdict")}
    return {r[at["test"]]: (r[at["rounds"]], r[at["bottleneck"]].split(" (")[0], r[at["verdict"]]) for r in rows}


def index(report_dir: Path) -> dict[str, dict[str, Any]]:
    keep = ("verdict", "outcome", "rounds", "measured_rounds", "warmup", "bottleneck", "failed_checks", "checks")
    tests = json.loads((report_dir / "index.json").read_text())["tests"]
    return {t["nodeid"]: {k: t[k] for k in keep} | {"median": t["latency_ms"]["median"]} for t in tests}


def junit(path: Path) -> dict[str, dict[str, str]]:
    """Test id -> its inferscope.* JUnit properties (paths and timings reduced to their names)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[f"{case.get('classname')}::{case.get('name')}"] = props
    return out


def project(root: Path) -> Path:
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_gpu_work.py").write_text(TESTS)
    return root


def test_two_workers_each_on_its_own_gpu_match_a_serial_run(tmp_path: Path) -> None:
    uuids = nvidia_uuids()
    root = project(tmp_path / "proj")
    serial = pytest_in(root, tmp_path / "where-serial", f"--inferscope-report={tmp_path / 'serial'}",
                       f"--junitxml={tmp_path / 'serial.xml'}")  # fmt: skip
    par = pytest_in(root, tmp_path / "where-par", "-n", "2", "--inferscope-gpus=0,1",
                    f"--inferscope-report={tmp_path / 'par'}", f"--junitxml={tmp_path / 'par.xml'}")  # fmt: skip

    # Each worker saw one GPU, its own: CUDA_VISIBLE_DEVICES, one device, and nvidia-smi's UUID of that GPU.
    seen = records(tmp_path / "where-par")
    by_worker: dict[str, set[tuple[str, int, int, str]]] = {}
    for r in seen:
        by_worker.setdefault(r["worker"], set()).add((r["visible"], r["device_count"], r["current_device"], r["uuid"]))
    _report("two workers", by_worker={w: sorted(v) for w, v in by_worker.items()}, nvidia_smi=uuids[:2])
    assert set(by_worker) == {"gw0", "gw1"}, by_worker  # both workers ran tests
    for worker, views in by_worker.items():
        gpu = int(worker.removeprefix("gw"))
        assert views == {(str(gpu), 1, 0, uuids[gpu])}, (worker, views)
    assert {r["uuid"] for r in records(tmp_path / "where-serial")} == {uuids[0]}

    # The fingerprint and CUPTI's records: the pinned GPU, and every record on the process's only device.
    for folder in (tmp_path / "par").glob("test_gpu_work.py__*"):
        report = json.loads((folder / "report.json").read_text())
        env = report["environment"]
        assert env["pinned_gpu"] in (0, 1) and env["gpu_uuid"] == uuids[env["pinned_gpu"]], env
        assert env["gpu_count"] == 1
        streams = report["analysis"]["gpu"]["streams"]
        assert streams and {s["device"] for s in streams} == {0}, streams

    # What the user reads says the same as the serial run's.
    s_rows, p_rows = summary_rows(serial.stdout), summary_rows(par.stdout)
    _report("two workers summary", serial=s_rows, parallel=p_rows)
    assert s_rows == p_rows and len(s_rows) == 3
    s_idx, p_idx = index(tmp_path / "serial"), index(tmp_path / "par")
    assert set(s_idx) == set(p_idx) and len(s_idx) == 3
    for nodeid, s in s_idx.items():
        p = p_idx[nodeid]
        assert {k: v for k, v in s.items() if k != "median"} == {k: v for k, v in p.items() if k != "median"}
        if "matmul" in nodeid:  # identical GPUs, GPU-bound work: the same latency within 30 %
            assert abs(p["median"] / s["median"] - 1) < 0.3, (nodeid, s["median"], p["median"])
    s_junit, p_junit = junit(tmp_path / "serial.xml"), junit(tmp_path / "par.xml")
    assert set(s_junit) == set(p_junit) and len(s_junit) == 3
    for case, props in s_junit.items():
        assert set(props) == set(p_junit[case]), case
        for key in ("inferscope.bottleneck", "inferscope.verdict", "inferscope.rounds"):
            assert props[key] == p_junit[case][key], (case, key)


def git(where: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True)


#: A launch-heavy body, whose measured rounds record no GPU activity: gpu_rounds=auto makes it lean (its module's
#: fixture makes the CUDA context first: run first in its worker without it, CUPTI starts only after the measured
#: rounds, the path the test took on two H200s on 2026-11-30, 301 launches a round at both sides). Both sides must read
#: its GPU figures from the rounds after the measured ones (each twin too, since 2026-11-30: before, the twin ran none,
#: and a lean test failed its A/B on `kernel_launches 0 → N`).
LEAN_TEST = """
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def cuda_context():
    torch.zeros(1, device="cuda")  # whichever test runs first in the worker: auto decides on a measured warm-up


@pytest.mark.inferscope(rounds=8, warmup=1)
def test_launch_heavy(where):
    where()
    x = torch.zeros(64, device="cuda")
    for _ in range(300):
        x.add_(1)
    torch.cuda.synchronize()
"""


@pytest.mark.parametrize("ab_pairs", ["here", "twins"])
def test_ab_pins_each_worker_and_its_twin_to_one_core_and_one_gpu(tmp_path: Path, ab_pairs: str) -> None:
    """With --inferscope-ab-pairs=twins each worker has two twins, the ref's and this checkout's, both on its core and
    GPU, and the pairs are theirs."""
    uuids = nvidia_uuids()
    root = project(tmp_path / "proj")
    (root / "test_gpu_lean.py").write_text(LEAN_TEST)
    git(root, "init", "-q")
    git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
    git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "first")
    (root / "README").write_text("the same tests, one commit later\n")
    git(root, "add", "README")
    git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "second")
    proc = pytest_in(root, tmp_path / "where", "-n", "2", "--inferscope-gpus=0,1", "--inferscope-ab=HEAD~1",
                     f"--inferscope-ab-pairs={ab_pairs}", f"--inferscope-report={tmp_path / 'ab'}")  # fmt: skip
    seen = records(tmp_path / "where")
    twins: dict[int, set[str]] = {}  # a worker's pid -> where its twins ran: the worktree, or this checkout (here)
    for r in seen:
        if r["side"] == "twin":
            twins.setdefault(r["ppid"], set()).add("here" if Path(r["cwd"]).resolve() == root.resolve() else "ref")
    expected = [["here", "ref"]] * 2 if ab_pairs == "twins" else [["ref"]] * 2  # each worker's twins
    assert sorted(map(sorted, twins.values())) == expected, twins
    worker_of = {r["pid"]: r["worker"] for r in seen if r["side"] == "this"}
    pairs: dict[str, dict[str, set[tuple[str, str]]]] = {}
    for r in seen:
        assert len(r["cores"]) == 1 and r["device_count"] == 1, r  # every round on one core, one GPU in sight
        worker = r["worker"] if r["side"] == "this" else worker_of.get(r["ppid"], f"parent {r['ppid']}")
        side = pairs.setdefault(worker, {}).setdefault(r["side"], set())
        side.add((str(r["cores"][0]), r["uuid"]))
    _report("A/B two workers", pairs={w: {s: sorted(v) for s, v in sides.items()} for w, sides in pairs.items()})
    assert set(pairs) == {"gw0", "gw1"}, pairs
    placed = {}
    for worker, sides in pairs.items():
        assert set(sides) == {"this", "twin"}, (worker, sides)
        assert len(sides["this"]) == 1 and sides["this"] == sides["twin"], (worker, sides)  # the pair together
        ((core, uuid),) = sides["this"]
        assert uuid == uuids[int(worker.removeprefix("gw"))], (worker, uuid)
        placed[worker] = (core, uuid)
    assert placed["gw0"][0] != placed["gw1"][0] and placed["gw0"][1] != placed["gw1"][1], placed  # pairs apart
    folders = [*(tmp_path / "ab").glob("test_gpu_work.py__*"), *(tmp_path / "ab").glob("test_gpu_lean.py__*")]
    assert len(folders) == 4, folders
    for folder in folders:
        report = json.loads((folder / "report.json").read_text())
        assert report["ab"]["pairs"] >= 8 and str(report["ab"]["core"]) in {placed["gw0"][0], placed["gw1"][0]}
        assert report["ab"]["metric_changes"] == [], (folder.name, report["ab"]["metric_changes"])
        assert report["ab"]["between"] == ab_pairs, (folder.name, report["ab"]["between"])
        if "lean" in folder.name:
            assert report["analysis"]["metrics"]["gpu.kernel_launches_per_round"] >= 300, folder.name
            decided = report["analysis"]["gpu"]["gpu_rounds"]  # auto's own decision, from the warm-up's records
            assert decided["mode"] == "trace" and decided["records_per_round"], (folder.name, decided)
    assert "each of the 2 xdist workers" in proc.stdout + proc.stderr
    assert ("through its own twin of this checkout" in proc.stdout + proc.stderr) == (ab_pairs == "twins")
