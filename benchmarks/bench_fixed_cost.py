"""Fixed cost of the plugin per test: 500 trivial tests run by pytest four ways, interleaved.

A temporary project holds `def test_i(): pass` for i < 500 and an empty pytest.ini. pytest runs in a
subprocess (`python -m pytest -q -p no:cacheprovider -p no:randomly`) in four modes:

  a  `-p no:inferscope`                                    the plugin not loaded
  b  (no inferscope flags, no markers)                     installed but unused
  c  `--inferscope-all`                                    every test profiled, one round
  d  `--inferscope-all --inferscope-report=DIR`            ... and its reports written (fresh DIR each run)

Each repetition runs all four, in an order rotated every repetition (abcd, bcda, cdab, dabc, ...),
after one untimed warm-up run of each (bytecode caches). Per run it records the wall time of the
subprocess, pytest's own "in X s" time, and the child's CPU time (user + sys, from
`resource.getrusage(RUSAGE_CHILDREN)`; less sensitive to other load on the machine). The added cost
per test of a mode is the paired difference against mode a *of the same repetition*, divided by the
number of tests; the table gives its median, IQR and range over repetitions.

Targets: c - a <= 5 ms per test, and d - a <= 5 ms per test too (issue 16); b - a: no measurable
difference (the difference is reported with its noise band). When c or d is over 5 ms per test (or
with --profile), one in-process run of `pytest.main` under cProfile shows where the time goes.

    python benchmarks/bench_fixed_cost.py            # full: 500 tests x 7 repetitions, ~4 minutes
    python benchmarks/bench_fixed_cost.py --quick    # 100 tests x 2 repetitions, < 30 s
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _common  # the header every benchmark prints (benchmarks/_common.py)
from _common import med, quartiles

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 5.0
MODES: dict[str, tuple[str, list[str]]] = {
    "a": ("plugin not loaded (-p no:inferscope)", ["-p", "no:inferscope"]),
    "b": ("installed, unused", []),
    "c": ("--inferscope-all", ["--inferscope-all"]),
    "d": ("--inferscope-all --inferscope-report=DIR", ["--inferscope-all", "--inferscope-report={report}"]),
}
BASE = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


def header(title: str) -> list[str]:
    """The common header, with this benchmark's versions line."""
    pytest_v = _common._run([sys.executable, "-c", "import pytest; print(pytest.__version__)"])
    versions = f"python {platform.python_version()}, pytest {pytest_v}"
    return _common.header(title, versions)


# -- statistics ------------------------------------------------------------------------------------


# -- the project and the runs ----------------------------------------------------------------------


def make_project(folder: Path, n_tests: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder is the rootdir; no config from above
    (folder / "test_trivial.py").write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(n_tests)))
    return folder


#: Where the child processes keep their bytecode (set by main); None keeps the environment's choice.
PYCACHE: Path | None = None


def clean_env() -> dict[str, str]:
    """The environment without inferscope or pytest settings that would change what is measured.

    With PYCACHE set, bytecode (and pytest's rewritten test modules) is cached there, as on a
    developer's machine or CI, instead of recompiled every run (PYTHONDONTWRITEBYTECODE=1), and the
    repository stays free of __pycache__ folders.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("INFERSCOPE_") and k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
    }
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


@dataclass
class Run:
    wall: float  # s, the subprocess from start to exit
    cpu: float  # s, user + sys of the child
    inner: float  # s, pytest's own "N passed in X s"
    added: float = float("nan")  # s, with reports: what the results say the plugin added (index.json's `added_ms`)


@dataclass
class Mode:
    key: str
    label: str
    runs: list[Run] = field(default_factory=list)


_IN_SECONDS = re.compile(r" in ([0-9.]+)s")


def run_pytest(project: Path, args: list[str], scratch: Path, n_tests: int) -> Run:
    report = Path(tempfile.mkdtemp(prefix="report-", dir=scratch))
    cmd = [sys.executable, "-m", "pytest", *BASE, *(a.format(report=report) for a in args)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=project, env=clean_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    added = _added_s(report / "index.json")
    shutil.rmtree(report, ignore_errors=True)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or f"{n_tests} passed" not in tail:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    m = _IN_SECONDS.search(tail)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall=wall, cpu=cpu, inner=float(m.group(1)) if m else float("nan"), added=added)


def _added_s(index: Path) -> float:
    """The sum of the tests' `added_ms` in a report folder's index.json, in s (nan without one)."""
    try:
        tests = json.loads(index.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return float("nan")
    return sum(float((t.get("added") or {}).get("added_ms") or 0.0) for t in tests) / 1e3


def paired_ms_per_test(mode: Mode, base: Mode, attr: str, n_tests: int) -> list[float]:
    return [(getattr(x, attr) - getattr(a, attr)) * 1e3 / n_tests for x, a in zip(mode.runs, base.runs, strict=True)]


def profile_in_process(project: Path, args: list[str], scratch: Path, top: int) -> str:
    """cProfile of one `pytest.main` run in a fresh interpreter; the heaviest plugin functions and overall."""
    report = Path(tempfile.mkdtemp(prefix="report-", dir=scratch))
    stats_file = scratch / "pytest.prof"
    argv = [*BASE, *(a.format(report=report) for a in args)]
    code = (
        "import cProfile, sys, pytest\n"
        f"prof = cProfile.Profile(); prof.enable(); rc = pytest.main({argv!r}); prof.disable()\n"
        f"prof.dump_stats({str(stats_file)!r}); sys.exit(int(rc))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=project, env=clean_env(), capture_output=True, text=True)
    shutil.rmtree(report, ignore_errors=True)
    import io
    import pstats

    buf = io.StringIO()
    stats = pstats.Stats(str(stats_file), stream=buf)
    buf.write(f"### cumulative, functions of pytest_inferscope (top {top})\n")
    stats.sort_stats("cumulative").print_stats("pytest_inferscope", top)
    buf.write(f"### own time, everything (top {top})\n")
    stats.sort_stats("tottime").print_stats(top)
    text = buf.getvalue().replace(str(ROOT) + "/", "")
    return re.sub(r"/\S*/site-packages/", "", text)


def import_diff(project: Path, scratch: Path, top: int) -> str:
    """Modules that mode b imports and mode a does not, by cumulative import time (python -X importtime)."""

    def imports(args: list[str]) -> dict[str, tuple[int, int]]:
        cmd = [sys.executable, "-X", "importtime", "-m", "pytest", *BASE, *args]
        err = subprocess.run(cmd, cwd=project, env=clean_env(), capture_output=True, text=True).stderr
        out: dict[str, tuple[int, int]] = {}
        for line in err.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) == 3 and parts[0].strip().isdigit():
                out[parts[2].strip()] = (int(parts[0]), int(parts[1]))
        return out

    a, b = imports(MODES["a"][1]), imports(MODES["b"][1])
    extra = {k: v for k, v in b.items() if k not in a}
    lines = [
        f"{len(extra)} modules imported only with the plugin loaded; their own import time adds up to "
        f"{sum(v[0] for v in extra.values()) / 1e3:.0f} ms (one run; heaviest by cumulative time, ms):"
    ]
    for name, (_, cum) in sorted(extra.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {cum / 1e3:7.1f}  {name}")
    return "\n".join(lines)


def cell(xs: list[float], fmt: str = "{:.2f}") -> str:
    q1, q3 = quartiles(xs)
    f = fmt.format
    return f"{f(med(xs))} [{f(q1)} {f(q3)}] ({f(min(xs))}..{f(max(xs))})"


def main(argv: list[str] | None = None) -> int:
    global PYCACHE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 tests, 2 repetitions (< 30 s)")
    parser.add_argument("--tests", type=int, default=None, help="number of trivial tests (default 500)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 7)")
    parser.add_argument("--profile", action="store_true", help="cProfile modes c and d even when within target")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE from the environment (every run recompiles the plugin)",
    )
    args = parser.parse_args(argv)
    n_tests = args.tests or (100 if args.quick else 500)
    reps = args.reps or (2 if args.quick else 7)

    print("\n".join(header("bench_fixed_cost: pytest with and without the plugin, trivial tests")))
    print(f"{n_tests} tests `def test_i(): pass`, {reps} repetitions, modes rotated every repetition")
    print(f"pytest {' '.join(BASE)} [mode flags], in a subprocess; target: c - a <= {TARGET_MS:g} ms per test")

    scratch = Path(tempfile.mkdtemp(prefix="inferscope-fixed-"))
    if not args.no_bytecode_cache:
        PYCACHE = scratch / "pycache"
    print(
        "bytecode: "
        + (
            "cached (PYTHONPYCACHEPREFIX in a scratch folder; PYTHONDONTWRITEBYTECODE removed)"
            if PYCACHE
            else f"as the environment says (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')})"
        )
    )
    sys.stdout.flush()
    try:
        project = make_project(scratch / "project", n_tests)
        single = make_project(scratch / "single", 1)  # the per-session part: startup, imports, first use
        modes = {k: Mode(k, label) for k, (label, _) in MODES.items()}
        ones = {k: Mode(k, label) for k, (label, _) in MODES.items()}
        keys = list(MODES)
        # Warm-up, untimed: bytecode caches, the page cache, first imports (d uses every module the others do).
        for k in ["d"] if args.quick else keys:
            run_pytest(project, MODES[k][1], scratch, n_tests)
        for r in range(reps):
            order = keys[r % len(keys) :] + keys[: r % len(keys)]
            for k in order:
                modes[k].runs.append(run_pytest(project, MODES[k][1], scratch, n_tests))
                if not args.quick:
                    ones[k].runs.append(run_pytest(single, MODES[k][1], scratch, 1))
            print(
                f"  repetition {r + 1}/{reps} ({''.join(order)}): "
                + ", ".join(f"{k} {modes[k].runs[-1].wall:.2f} s" for k in keys)
                + f"; load {os.getloadavg()[0]:.2f}"
            )
            sys.stdout.flush()

        print(f"\n## time per run of {n_tests} tests (s): median [IQR] (min .. max) over {reps} runs")
        print(f"  {'mode':<46} {'wall':>28} {'pytest in-session':>28} {'child CPU (user+sys)':>28}")
        for m in modes.values():
            cells = [cell([getattr(r, attr) for r in m.runs]) for attr in ("wall", "inner", "cpu")]
            print(f"  {m.key} {m.label:<44} " + " ".join(f"{c:>28}" for c in cells))

        print(f"\n## added ms per test against a (paired, same repetition, / {n_tests}): median [IQR] (min .. max)")
        base = modes["a"]
        for k in ("b", "c", "d"):
            cells = [cell(paired_ms_per_test(modes[k], base, attr, n_tests)) for attr in ("wall", "inner", "cpu")]
            print(f"  {k} - a   wall {cells[0]}   in-session {cells[1]}   CPU {cells[2]}")
        a_wall = [r.wall for r in base.runs]
        a_noise = [(y - x) * 1e3 / n_tests for x, y in itertools.pairwise(a_wall)]
        if a_noise:
            print(f"  noise: a - a (consecutive repetitions), wall ms per test: {cell(a_noise, '{:+.2f}')}")

        if args.quick:
            ones.clear()  # --quick leaves out the 1-test runs that split per-session from per-test cost
        if ones:
            print(
                f"\n## split: per-session constant (a 1-test project) and per-test slope ((T{n_tests} - T1) / "
                f"{n_tests - 1}), wall, against a, paired: median [IQR] (min .. max)"
            )
            for k in ("b", "c", "d"):
                const = [(x.wall - a.wall) * 1e3 for x, a in zip(ones[k].runs, ones["a"].runs, strict=True)]
                slope = [
                    ((x.wall - x1.wall) - (a.wall - a1.wall)) * 1e3 / (n_tests - 1)
                    for x, x1, a, a1 in zip(modes[k].runs, ones[k].runs, base.runs, ones["a"].runs, strict=True)
                ]
                slope_cpu = [
                    ((x.cpu - x1.cpu) - (a.cpu - a1.cpu)) * 1e3 / (n_tests - 1)
                    for x, x1, a, a1 in zip(modes[k].runs, ones[k].runs, base.runs, ones["a"].runs, strict=True)
                ]
                print(
                    f"  {k} - a   per session {cell(const, '{:+.0f}')} ms   per test {cell(slope, '{:+.2f}')} ms"
                    f"   per test (CPU) {cell(slope_cpu, '{:+.2f}')} ms"
                )

        verdicts: list[str] = []
        b = paired_ms_per_test(modes["b"], base, "wall", n_tests)
        lo, hi = min(b), max(b)
        b_differs = not lo <= 0 <= hi
        verdicts.append(
            f"b (unused) vs a: {med(b):+.2f} ms per test (range {lo:+.2f}..{hi:+.2f}): "
            + ("a measurable difference" if b_differs else "no measurable difference (the range includes 0)")
        )
        over: list[str] = []
        for k in ("c", "d"):
            d = med(paired_ms_per_test(modes[k], base, "wall", n_tests))
            ok = d <= TARGET_MS
            if not ok:
                over.append(k)
            target = "target" if k == "c" else "target (issue 16)"
            status = "met" if ok else f"over by {d - TARGET_MS:.2f} ms ({d / TARGET_MS:.2f}x)"
            verdicts.append(f"{k} vs a: {d:.2f} ms per test, {target} <= {TARGET_MS:g} ms: {status}")
        print("\n## verdicts\n  " + "\n  ".join(verdicts))
        sys.stdout.flush()

        if b_differs and not args.quick:
            print("\n## where b's difference comes from: imports at startup (python -X importtime)")
            print(import_diff(project, scratch, top=20))
        # --quick profiles only when asked: a profiled run takes as long as a repetition.
        for k in ("c", "d") if args.profile else ([] if args.quick else over):
            print(f"\n## where the time goes: mode {k} ({MODES[k][0]}), one pytest.main under cProfile")
            print(profile_in_process(project, MODES[k][1], scratch, top=12 if args.quick else 25))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
