"""Fixed cost per test with reports, two source trees of the plugin compared in one interleaved run.

`bench_fixed_cost.py`'s project (N trivial tests) and its `run_pytest`, run with PYTHONPATH set to
each tree in turn: modes a (`-p no:inferscope`), b (the plugin loaded, unused), c (`--inferscope-all`) and d
(`--inferscope-all --inferscope-report=DIR`) of both trees, the eight runs rotated every repetition, after one untimed
warm-up of each. Added ms per test = (mode - a of the same tree and repetition) / N; for d, besides, what the results
say the plugin added (the sum of index.json's `added_ms`, the first test's `load_ms` included) and what of d - a they
do not hold (pytest calling the plugin's hooks, the session's start and end). With
`--pluggy DIR` (an unpacked pluggy sdist), its suite (`pytest testing`) is run too, with
`--inferscope-all --inferscope-report=DIR` and without the plugin (`-p no:inferscope`, as mode a; before
2026-11-28 against the plugin loaded but unused, which hid what that costs), both trees interleaved.

    python benchmarks/ab_fixed_cost.py --old /tmp/old-tree --new . [--reps 5] [--pluggy /tmp/pluggy-1.7.0]
    python benchmarks/ab_fixed_cost.py --old /tmp/old-tree --new . --quick

Each tree must hold the built extension (`pytest_inferscope/_cupti.abi3.so`) if the other does.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_fixed_cost as bfc
from _common import med, quartiles

MODES = {k: bfc.MODES[k][1] for k in ("a", "b", "c", "d")}


def cell(xs: list[float]) -> str:
    q1, q3 = quartiles(xs)
    return f"{med(xs):+.2f} [{q1:.2f} {q3:.2f}] ({min(xs):.2f}..{max(xs):.2f})"


def added(runs: list[bfc.Run], base: list[bfc.Run], attr: str, n: int) -> list[float]:
    """ms per test of `runs` over `base`, paired by repetition."""
    return [(getattr(x, attr) - getattr(a, attr)) * 1e3 / n for x, a in zip(runs, base, strict=True)]


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def run_in(tree: Path, fn, *args):  # type: ignore[no-untyped-def]
    """`fn(*args)` with the children importing the plugin from `tree`."""
    os.environ["PYTHONPATH"] = str(tree)
    return fn(*args)


def pluggy_run(folder: Path, args: list[str], scratch: Path) -> tuple[float, float]:
    report = Path(tempfile.mkdtemp(prefix="report-", dir=scratch))
    cmd = [sys.executable, "-m", "pytest", "testing", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    cmd += [a.format(report=report) for a in args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, env=bfc.clean_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(report, ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    n = int(proc.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    return wall / n, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--tests", type=int, default=None, help="trivial tests (default 500)")
    parser.add_argument("--quick", action="store_true", help="100 tests, 1 repetition: a smoke test (< 30 s)")
    parser.add_argument("--pluggy", type=Path, default=None, help="an unpacked pluggy sdist: run its suite too")
    args = parser.parse_args()
    args.reps = args.reps or (1 if args.quick else 5)
    args.tests = args.tests or (100 if args.quick else 500)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for name, tree in trees.items():
        git = ["git", "-C", str(tree)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "pytest_inferscope"], capture_output=True, text=True)
        print(f"{name}: {tree} at {commit}" + (" (with uncommitted changes)" if dirty.stdout.strip() else ""))
    print("\n".join(bfc.header("ab_fixed_cost: old and new tree, modes a, b, c, d, interleaved")))
    n = args.tests
    scratch = Path(tempfile.mkdtemp(prefix="inferscope-ab-fixed-"))
    bfc.PYCACHE = scratch / "pycache"
    runs: dict[tuple[str, str], list[bfc.Run]] = {(t, m): [] for t in trees for m in MODES}
    keys = list(runs)
    try:
        project = bfc.make_project(scratch / "project", n)
        for t, m in keys:  # warm-up, untimed: bytecode caches
            run_in(trees[t], bfc.run_pytest, project, MODES[m], scratch, n)
        for r in range(args.reps):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            for t, m in order:
                runs[t, m].append(run_in(trees[t], bfc.run_pytest, project, MODES[m], scratch, n))
            walls = ", ".join(f"{t} {m} {runs[t, m][-1].wall:.2f} s" for t, m in keys)
            print(f"  repetition {r + 1}/{args.reps}: {walls}; load {load()}", flush=True)
        print(f"\n## added ms per test against a of the same tree and repetition (/ {n}): median [IQR] (range)")
        for m in ("b", "c", "d"):
            for attr in ("wall", "cpu"):
                line = "   ".join(f"{t} {cell(added(runs[t, m], runs[t, 'a'], attr, n))}" for t in trees)
                print(f"  {m} - a, {attr:4s}: {line}")
        # What the results themselves say the plugin added (`added` in index.json, the first test's load_ms
        # included), and what of d - a they do not hold: pytest calling the plugin's hooks, the session's start and end.
        said = {t: [r.added * 1e3 / n for r in runs[t, "d"]] for t in trees}
        if all(x == x for xs in said.values() for x in xs):  # a tree from before `added` has none (nan)
            print("  d, `added`:  " + "   ".join(f"{t} {cell(said[t])}" for t in trees))
            rest = {t: [w - s for w, s in zip(added(runs[t, "d"], runs[t, "a"], "wall", n), said[t], strict=True)]
                    for t in trees}  # fmt: skip
            print("  d - a - `added`: " + "   ".join(f"{t} {cell(rest[t])}" for t in trees))
        if args.pluggy:
            title = "`--inferscope-all --inferscope-report=DIR` - `-p no:inferscope`"
            print(f"\n## pluggy's suite ({args.pluggy}), {title}")
            with_args = ["--inferscope-all", "--inferscope-report={report}"]
            without = MODES["a"]
            pk = [(t, w) for t in trees for w in (False, True)]
            res: dict[tuple[str, bool], list[tuple[float, float]]] = {k: [] for k in pk}
            for t, w in pk:
                run_in(trees[t], pluggy_run, args.pluggy, with_args if w else without, scratch)
            for r in range(args.reps):
                order = pk[r % len(pk) :] + pk[: r % len(pk)]
                for t, w in order:
                    res[t, w].append(run_in(trees[t], pluggy_run, args.pluggy, with_args if w else without, scratch))
                print(f"  repetition {r + 1}/{args.reps}; load {load()}", flush=True)
            for t in trees:
                diff = [(x[0] - y[0]) * 1e3 for x, y in zip(res[t, True], res[t, False], strict=True)]
                cpu = [(x[1] - y[1]) * 1e3 for x, y in zip(res[t, True], res[t, False], strict=True)]
                print(f"  {t}: wall ms per test {cell(diff)}   CPU {cell(cpu)}")
        print(f"load at the end: {load()}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
