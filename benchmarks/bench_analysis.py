"""Post-processing time of recorded traces: `merge(raw)` and `analyze(timeline)`, and what they give.

For each `raw.npz` given (a test's saved collection), each repetition times `merge` and `analyze`
(and, inside analyze, `whatif.diagnose`) once per trace, the traces in turn, after one untimed pass;
the medians of N repetitions are printed with their quartiles and the fastest, for each stage and for
merge and analyze together (`total`). On a small shared VM the medians of single cold analyses move
with the machine (a worker process can also stay ~1.5x slower throughout); the fastest repetition moves
less, so both are shown, and both trees' ratios are worth reading over several runs.

`--dump FILE` writes, instead, a canonical JSON of what the analysis gives for each trace (the whole
`Analysis`: metrics, bottleneck, confidence, findings with shares, suggestions, the what-if rows with
their savings, the replay figures, scopes, the GPU summary) and a digest of the merged timeline, so that
two trees' results can be compared: `--compare A.json B.json` says where they differ (floats equal to
`--rtol`, 1e-9 by default).

`--against TREE` times this tree and another one (a worktree with its compiled extension) in one run:
one worker process per tree, warmed up once, asked in turn (this, other, other, this, ...) so that
drift in the machine's load falls on both.

`--cold MB` walks MB megabytes of Python objects before each trace's merge (plain Python, no SIMD code),
so that the merge and analysis start with the CPU caches holding someone else's data, as in a test: there
the rounds' model code runs between two analyses. Warm repetitions of the same trace read a fraction of it:
on the 2-core dev VM (2026-11-29, lean ViT-B/16 traces from an H200) `merge` took 0.26-0.30 ms back to
back and 0.78-0.92 ms after such a walk (1.75 ms after a torch CPU model's calls), and a test's
`added.analysis_ms` on the H200 host read 3.1-5.5 ms where this benchmark's warm median read 2.4-2.75 ms.

    python benchmarks/bench_analysis.py /tmp/traces/*/raw.npz -n 9
    python benchmarks/bench_analysis.py /tmp/traces/*/raw.npz --dump /tmp/new.json
    python benchmarks/bench_analysis.py tests/data/*/raw.npz tests/data/kineto*/*.json* --dump /tmp/new.json
    python benchmarks/bench_analysis.py /tmp/traces/*/raw.npz --dump /tmp/old.json --tree /tmp/main_tree
    python benchmarks/bench_analysis.py --compare /tmp/old.json /tmp/new.json
    python benchmarks/bench_analysis.py /tmp/traces/*/raw.npz -n 9 --against /tmp/main_tree
    python benchmarks/bench_analysis.py /tmp/traces/*/raw.npz -n 9 --cold 64
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common  # the header every benchmark prints (benchmarks/_common.py)
from _common import med, quartiles

HERE = Path(__file__).resolve().parent
STAGES = ("merge", "analyze", "diagnose", "total")  # total: merge and analyze


def _import_tree(tree: Path) -> None:
    """Import pytest_inferscope from `tree` (this script's tree unless told otherwise)."""
    sys.path.insert(0, str(tree))
    import pytest_inferscope

    if Path(pytest_inferscope.__file__).resolve().parent.parent != tree.resolve():
        raise SystemExit(f"pytest_inferscope came from {pytest_inferscope.__file__}, not {tree}")


def _timed_diagnose() -> dict[str, float]:
    """Wrap the analyzer's `diagnose` so that its time is kept; returns the dict it writes into."""
    import pytest_inferscope.analyzer as an

    spent = {"diagnose": 0.0}
    inner = an.diagnose

    def diagnose(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent["diagnose"] += time.perf_counter() - t

    an.diagnose = diagnose  # type: ignore[assignment]  # a benchmark's probe; analyze() looks it up per call
    return spent


class Runner:
    """The traces loaded once; `once()` times merge and analyze of each, in ms."""

    def __init__(self, paths: list[str], cold_mb: int = 0) -> None:
        from pytest_inferscope.events import RawTrace

        self.raws = {self.label(p): RawTrace.load(p) for p in paths}
        self.spent = _timed_diagnose()
        # `--cold`: one-element lists of ~56 bytes each, walked in their order of allocation (spread over the heap)
        self._junk = [[i] for i in range(cold_mb * (1 << 20) // 56)]

    def evict(self) -> int:
        """Walk the junk (`--cold`): the caches then hold it, not the analysis's code and data."""
        total = 0
        for cell in self._junk:
            total += cell[0]
        return total

    @staticmethod
    def label(path: str) -> str:
        p = Path(path)
        return p.parent.name if p.name == "raw.npz" else f"{p.parent.name}/{p.stem}"

    def once(self) -> dict[str, dict[str, float]]:
        from pytest_inferscope.analyzer import analyze
        from pytest_inferscope.merger import merge

        out = {}
        for name, raw in self.raws.items():
            if self._junk:
                self.evict()
            t0 = time.perf_counter()
            timeline = merge(raw)
            t1 = time.perf_counter()
            self.spent["diagnose"] = 0.0
            analyze(timeline)
            t2 = time.perf_counter()
            out[name] = {
                "merge": (t1 - t0) * 1e3,
                "analyze": (t2 - t1) * 1e3,
                "diagnose": self.spent["diagnose"] * 1e3,
                "total": (t2 - t0) * 1e3,
            }
        return out


def _digest(arr: Any) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()[:16]


def dump(paths: list[str]) -> dict[str, Any]:
    """What merge and analyze give for each trace, as plain data: a raw.npz, or a torch.profiler / Kineto trace
    (.json, .json.gz) imported as `inferscope analyze` imports it, analysed with its rules (`kineto.RULES`)."""
    from pytest_inferscope import kineto
    from pytest_inferscope.analyzer import DEFAULT_RULES, analyze
    from pytest_inferscope.events import RawTrace
    from pytest_inferscope.merger import merge

    out = {}
    for path in paths:
        if path.endswith((".json", ".json.gz")):
            try:
                raw, rules = kineto.load(Path(path)).raw, kineto.RULES
            except kineto.TraceFormatError as e:  # a trace the import refuses (tests/data keeps some): its message
                out[Runner.label(path)] = {"refused": str(e).replace(path, "<path>")}
                continue
        else:
            raw, rules = RawTrace.load(path), DEFAULT_RULES
        timeline = merge(raw)
        out[Runner.label(path)] = {
            "timeline": {
                "events": _digest(timeline.events),
                "parent": _digest(timeline.parent),
                "clock": timeline.clock.to_dict(),
            },
            "analysis": analyze(timeline, rules).to_dict(),
        }
    return out


def differences(a: Any, b: Any, rtol: float, where: str = "") -> list[str]:
    """Where two dumps differ (floats compared to `rtol` relative, 1e-12 absolute)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], rtol, f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, rtol, f"{where}[{i}]")]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        if a == b or math.isclose(a, b, rel_tol=rtol, abs_tol=1e-12):
            return []
    elif a == b:
        return []
    return [f"{where}: {a!r} against {b!r}"]


def _worker(tree: Path, paths: list[str], cold_mb: int) -> None:
    """Answer each line on stdin with one repetition's times (JSON on one line)."""
    _import_tree(tree)
    runner = Runner(paths, cold_mb)
    runner.once()  # untimed: lazy imports, first allocations
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        print(json.dumps(runner.once()), flush=True)


def _commit(tree: Path) -> str:
    git = ["git", "-C", str(tree)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "pytest_inferscope"], capture_output=True, text=True)
    return head + (" (modified)" if dirty.stdout.strip() else "")


def _table(results: dict[str, list[dict[str, dict[str, float]]]]) -> list[str]:
    trees = list(results)
    lines = ["", "median ms [quartiles] fastest, over the repetitions"]
    ratio = "  ratio: median fastest" if len(trees) == 2 else ""
    lines.append(f"{'trace':<16} {'stage':<9} " + " ".join(f"{t:>32}" for t in trees) + ratio)
    for trace in results[trees[0]][0]:
        for stage in STAGES:
            cells, meds, mins = [], [], []
            for t in trees:
                xs = [rep[trace][stage] for rep in results[t]]
                q1, q3 = quartiles(xs)
                meds.append(med(xs))
                mins.append(min(xs))
                cells.append(f"{med(xs):8.2f} [{q1:6.2f}, {q3:6.2f}] {min(xs):6.2f}")
            ratio = ""
            if len(meds) == 2 and meds[0] and mins[0]:
                ratio = f"  {meds[1] / meds[0]:.2f} {mins[1] / mins[0]:.2f}"
            lines.append(f"{trace:<16} {stage:<9} " + " ".join(f"{c:>32}" for c in cells) + ratio)
    return lines


def run_trees(
    trees: dict[str, Path], paths: list[str], n: int, cold_mb: int = 0
) -> dict[str, list[dict[str, dict[str, float]]]]:
    """N repetitions of each tree's worker, alternating which goes first."""
    procs = {}
    for label, tree in trees.items():
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(tree), "--cold", str(cold_mb), *paths]
        procs[label] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for p in procs.values():
        assert p.stdout is not None
        json.loads(p.stdout.readline())  # ready
    results: dict[str, list[dict[str, dict[str, float]]]] = {label: [] for label in trees}
    for rep in range(n):
        order = list(trees) if rep % 2 == 0 else list(reversed(trees))
        for label in order:
            p = procs[label]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("go\n")
            p.stdin.flush()
            results[label].append(json.loads(p.stdout.readline()))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="raw.npz files")
    ap.add_argument("-n", type=int, default=9, help="repetitions (default 9)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions: a smoke test, not a measurement")
    ap.add_argument("--dump", metavar="FILE", help="write what the analysis gives, as canonical JSON")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two dumps")
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--against", metavar="TREE", help="also time this other tree, interleaved")
    ap.add_argument("--tree", metavar="TREE", help="with --dump: the tree whose code runs (default: this one)")
    ap.add_argument(
        "--cold", type=int, default=0, metavar="MB", help="walk MB of objects before each trace (cold caches)"
    )
    ap.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(Path(args.worker), args.paths, args.cold)
        return
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        diffs = differences(a, b, args.rtol)
        print("\n".join(diffs) if diffs else f"equal (floats to {args.rtol:g} relative)")
        sys.exit(1 if diffs else 0)
    if args.dump:
        _import_tree(Path(args.tree) if args.tree else _common.ROOT)
        Path(args.dump).write_text(json.dumps(dump(args.paths), indent=1, sort_keys=True) + "\n")
        return
    import numpy as np

    if args.quick:
        args.n = 3
    versions = f"python {platform.python_version()}, numpy {np.__version__}"
    print("\n".join(_common.header("merge and analyze of recorded traces", versions)))
    trees = {f"this {_commit(_common.ROOT)}": _common.ROOT}
    if args.against:
        trees = {f"other {_commit(Path(args.against))}": Path(args.against), **trees}
    cold = f"; caches evicted before each trace ({args.cold} MB walked)" if args.cold else ""
    print(f"traces: {', '.join(args.paths)}; {args.n} repetitions, trees: {', '.join(trees)}{cold}")
    results = run_trees(trees, args.paths, args.n, args.cold)
    print("\n".join(_table(results)))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
