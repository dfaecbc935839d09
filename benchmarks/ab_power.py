"""A/B mode of the power study (`regression_power.py --ab`): the real plugin, two commits, pytest runs.

A temporary git repository holds one test file, parametrized over trials and slowdowns: every
test is one trial, its body `work(n)` (regression_power.work, calibrated to --target-ms). The
first commit runs the base n everywhere; the second runs n × (1 + s) in the tests of slowdown s
(s = 0: unchanged). The tests are ordered trial by trial, the slowdowns shuffled within a trial,
so a noisy minute on the shared machine hits every setting alike. Then, in one go:

- `ab`: `pytest --inferscope-ab=HEAD~1` at the second commit: every test takes turns with its
  twin, `rounds` pairs (more, sequentially, up to the default round cap of 3x), pinned to one core;
- `ab-first`: the same run's verdicts before a fresh pair re-checked the regressed ones (--inferscope-ab-recheck,
  docs/ab.md): this pytest process and its twin alone, as `--inferscope-ab-recheck=off` would have them;
- `ab-cap1`: the same run's first `rounds` pairs only, judged with one look (the first pairs, from report.json);
- `stored`: the stored-baseline gate on the same trials: `--inferscope-save-baseline=main` at the
  first commit, then `--inferscope-compare=main` at the second (one baseline run, then the new run).

Each verdict is read from the JUnit properties (inferscope.ab.verdict, inferscope.regression.verdict).

    python benchmarks/regression_power.py --ab --trials 200   # the docs/regression-power.md table
    python benchmarks/ab_power.py --trials 10                 # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROOT, header
from benchmarks.regression_power import calibrate
from pytest_inferscope.ab.paired import judge

SLOWDOWNS = (0.0, 0.05, 0.10, 0.20)
RULES = ("ab", "ab-first", "ab-cap1", "stored")

TEST_FILE = """
import pytest

N = {n}
FACTOR = {factors!r}  # slowdown (percent) -> iterations factor at this commit
CASES = {cases!r}


def work(n):
    acc = 1
    for _ in range(n):
        acc = (acc * 31 + 7) % 1_000_003
    return acc


@pytest.mark.inferscope(rounds={rounds}, warmup={warmup}, max_regression={max_regression})
@pytest.mark.parametrize("case", CASES)
def test_work(case):
    work(round(N * FACTOR[case.split("-")[0]]))
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repo(
    repo: Path, n: int, trials: int, rounds: int, warmup: int, max_regression: float, seed: int,
    slowdowns: tuple[float, ...] = SLOWDOWNS,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    cases = []
    for t in range(trials):
        order = [f"s{round(100 * s)}-t{t}" for s in slowdowns]
        rng.shuffle(order)
        cases += order
    common = {"n": n, "cases": cases, "rounds": rounds, "warmup": warmup, "max_regression": max_regression}
    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "bench@example.com")
    _git(repo, "config", "user.name", "bench")
    base = {f"s{round(100 * s)}": 1.0 for s in slowdowns}
    (repo / "test_work.py").write_text(TEST_FILE.format(factors=base, **common))
    _git(repo, "add", "test_work.py")
    _git(repo, "commit", "-qm", "base")
    slower = {f"s{round(100 * s)}": 1.0 + s for s in slowdowns}
    (repo / "test_work.py").write_text(TEST_FILE.format(factors=slower, **common))
    _git(repo, "commit", "-qam", "slower", "--allow-empty")


def pytest_run(repo: Path, *args: str) -> tuple[dict[str, dict[str, str]], float]:
    """Run pytest in `repo`; each test's inferscope.* JUnit properties, and the wall time."""
    xml = repo.parent / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.setdefault("PYTHONHASHSEED", "0")  # as docs/ab.md advises: both sides hash alike
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:benchmark",
         f"--junitxml={xml}", *args],
        cwd=repo, env=env, capture_output=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    props = {}
    for case in ET.parse(xml).iter("testcase"):
        name = case.get("name", "")
        props[name[name.index("[") + 1 : -1]] = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return props, wall


def first_pairs(report_dir: Path, rounds: int, max_regression: float, alpha: float) -> dict[str, dict[str, str]]:
    """Per test, from report.json: the first pairs' verdict (this pytest process and its twin, before a re-check) and
    the verdict on their first `rounds` pairs, one look, as if no pairs had been added."""
    out: dict[str, dict[str, str]] = {"ab-first": {}, "ab-cap1": {}}
    for path in report_dir.glob("*/report.json"):
        data = json.loads(path.read_text())
        ab = data.get("ab") or {}
        case = data["nodeid"].split("[", 1)[1][:-1]
        first = (ab.get("recheck") or {}).get("first")
        out["ab-first"][case] = first["verdict"] if first else ab.get("verdict", "?")
        pairs = first or ab  # (the clocks are the deciding pairs': the first pairs' unless a re-check overruled them)
        new, ref = pairs.get("new_ms") or [], pairs.get("ref_ms") or []
        if len(new) >= rounds:
            clocks = {k: [math.nan if x is None else x for x in v] for k, v in (ab.get("clocks") or {}).items()}
            clocks = clocks if not first or first["new_ms"] == ab.get("new_ms") else {}
            look = judge(new[:rounds], ref[:rounds], max_regression=max_regression, alpha=alpha, n_looks=1, last=True,
                         clocks=clocks)  # fmt: skip
            out["ab-cap1"][case] = look.verdict
        else:
            out["ab-cap1"][case] = ab.get("verdict", "?")
    return out


def spinners(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` processes spinning on the core an A/B run pins to (the last this process may use)."""
    core = sorted(os.sched_getaffinity(0))[-1]
    spin = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def dump_pairs(report_dir: Path, path: Path) -> None:
    """Each test's A/B record (verdict, pairs, run-queue waits) from its report.json, into one JSON file."""
    out = {}
    for p in report_dir.glob("*/report.json"):
        data = json.loads(p.read_text())
        out[data["nodeid"]] = data.get("ab") or {}
    path.write_text(json.dumps(out))


def study(args: argparse.Namespace) -> list[str]:
    n = calibrate(args.target_ms)
    busy = spinners(args.spinners)
    try:
        with tempfile.TemporaryDirectory(prefix="ab-power-") as tmp:
            repo = Path(tmp) / "proj"
            make_repo(repo, n, args.trials, args.rounds, args.warmup, args.max_regression, args.seed, args.slowdowns)
            stored: dict[str, dict[str, str]] = {}
            t_save = t_cmp = 0.0
            if not args.ab_only:
                _git(repo, "checkout", "-q", "HEAD~1")
                _, t_save = pytest_run(repo, "--inferscope-save-baseline=main", f"--inferscope-baseline-dir={tmp}/bl")
                _git(repo, "checkout", "-q", "-")
                stored, t_cmp = pytest_run(repo, "--inferscope-compare=main", f"--inferscope-baseline-dir={tmp}/bl")
            ab, t_ab = pytest_run(repo, "--inferscope-ab=HEAD~1", f"--inferscope-report={tmp}/out")
            first = first_pairs(Path(tmp) / "out", args.rounds, args.max_regression, args.alpha)
            if args.dump:
                dump_pairs(Path(tmp) / "out", Path(args.dump))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    verdicts = {
        "ab": {k: v.get("inferscope.ab.verdict", "?") for k, v in ab.items()},
        **first,
        "stored": {k: v.get("inferscope.regression.verdict", "?") for k, v in stored.items()},
    }
    pairs = [int(v.get("inferscope.rounds", "0")) for v in ab.values()]
    lines = [
        *header("A/B power study through the plugin", f"python {sys.version.split()[0]}"),
        f"workload: pure-Python loop, {n} iterations (~{args.target_ms:g} ms); {args.trials} trials per slowdown; "
        f"{args.rounds} pairs (ab: up to 3x by the sequential rule), warm-up {args.warmup}; max_regression "
        f"{args.max_regression:g}, alpha {args.alpha:g}; {args.spinners} spinner(s) on the pinned core",
        f"wall: save-baseline run {t_save:.0f} s, compare run {t_cmp:.0f} s, A/B run {t_ab:.0f} s; "
        f"A/B pairs per test: median {sorted(pairs)[len(pairs) // 2] if pairs else 0}, max {max(pairs, default=0)}",
        "",
        "| rule | " + " | ".join(f"{round(100 * s)} % slower" for s in args.slowdowns) + " |",
        "|---|" + "---|" * len(args.slowdowns),
    ]
    for rule in RULES if not args.ab_only else RULES[:3]:
        cells = []
        for s in args.slowdowns:
            tag = f"s{round(100 * s)}-"
            got = [v for k, v in verdicts[rule].items() if k.startswith(tag)]
            flagged = sum(v == "regressed" for v in got)
            other = Counter(v for v in got if v != "regressed")
            unsure = "".join(f", {other[v]} {v}" for v in ("improved", "inconclusive") if other[v])
            cells.append(f"{flagged}/{len(got)} ({100 * flagged / max(1, len(got)):.1f} %{unsure})")
            if args.verbose:
                print(rule, tag, dict(other), file=sys.stderr)
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "(0 % column: false positives; the others: caught. A cell counts the tests whose verdict was regressed, "
        "and says how many were inconclusive.)"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=200, help="trials per slowdown (default 200)")
    p.add_argument("--rounds", type=int, default=20, help="pairs per test before the sequential rule (default 20)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--target-ms", type=float, default=3.0)
    p.add_argument("--max-regression", type=float, default=0.05)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="the other verdicts per cell, on stderr")
    p.add_argument("--spinners", type=int, default=0, help="processes spinning on the pinned core meanwhile")
    p.add_argument("--slowdowns", type=lambda v: tuple(float(x) for x in v.split(",")), default=SLOWDOWNS,
                   help="comma-separated fractions (default 0,0.05,0.1,0.2)")  # fmt: skip
    p.add_argument("--ab-only", action="store_true", help="no stored-baseline runs (rule `stored` left out)")
    p.add_argument("--dump", help="write each test's A/B record (pairs, waits) to this JSON file")
    args = p.parse_args(argv)
    print("\n".join(study(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
