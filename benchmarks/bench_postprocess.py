"""Post-processing time of one profiled test: merge, analyze and every report, on synthetic traces.

For traces of 1,000,000, 100,000 and 10,000 events (`benchmarks/synthetic.py`), each repetition
times, in one process and on a fresh report folder:

* the end-to-end path the plugin takes, `postprocess.process(raw, Plan(...), collectors, report_dir=...)`
  (merge -> analyze -> checks -> report.md, report.json, trace.json.gz, raw.npz);
* the same stages one by one: `merge(raw)`, `analyze(timeline)`, `write_test_reports(...)`, and the
  report files apart (`write_chrome_trace` plain and gzipped, `RawTrace.save(compress=False)`, report.json,
  report.md);
* a reference measured in the same run: `json.dumps` of as many plain Chrome-trace-like dicts as the
  trace has events (what a naive trace writer does).

The order of the reference, the end-to-end call and the stages alternates between repetitions
(ABC, CBA, ...) so that drift in the machine's load falls on all of them. Once per run it also times
torch.profiler's `key_averages()` (including the event parsing it triggers) on a CPU profile of
`torch.add` calls, the other reference (a note measured 5.2 s for 66,652 events).

Target: merge + analyze + every report <= 2 s for 1,000,000 events.

    python benchmarks/bench_postprocess.py            # full, about 3 minutes
    python benchmarks/bench_postprocess.py --quick    # < 30 s
    python benchmarks/bench_postprocess.py --profile  # also: cProfile of one process() at the largest size
    python benchmarks/bench_postprocess.py --whatif   # only the what-if table: diagnose() and process()
    python benchmarks/bench_postprocess.py --trace-gz # only trace.json vs trace.json.gz at zlib levels 1 and 6
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common  # the header every benchmark prints (benchmarks/_common.py)
from _common import med

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
from synthetic import make_raw_trace  # noqa: E402

from pytest_inferscope.analyzer import analyze  # noqa: E402
from pytest_inferscope.merger import merge  # noqa: E402
from pytest_inferscope.postprocess import Plan, process  # noqa: E402
from pytest_inferscope.reporters import write_test_reports  # noqa: E402
from pytest_inferscope.reporters.files import atomic_write_text  # noqa: E402
from pytest_inferscope.reporters.jsonreport import to_json  # noqa: E402
from pytest_inferscope.reporters.markdown import render_report  # noqa: E402
from pytest_inferscope.reporters.trace import write_chrome_trace  # noqa: E402
from pytest_inferscope.results import CollectorInfo  # noqa: E402

TARGET_S = 2.0
NODEID = "tests/test_inference.py::test_end_to_end_pipeline[synthetic]"
TORCH_NOTE = (66_652, 5.2)  # events, seconds: the original note's key_averages() measurement


def header(title: str) -> list[str]:
    """The common header, with this benchmark's versions line."""
    try:
        import torch

        torch_v = torch.__version__
    except ImportError:
        torch_v = "not installed"
    versions = f"python {platform.python_version()}, numpy {np.__version__}, torch {torch_v}"
    return _common.header(title, versions)


# -- statistics ------------------------------------------------------------------------------------


def iqr(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[2] - q[0]


def fmt_s(xs: list[float]) -> str:
    """'median (best .. worst)' in ms."""
    return f"{med(xs) * 1e3:8.0f} ({min(xs) * 1e3:.0f} .. {max(xs) * 1e3:.0f})"


# -- the measurements ------------------------------------------------------------------------------


def collectors() -> list[CollectorInfo]:
    """What a CPU-only run reports: sampling on, no GPU backend, procfs memory."""
    return [
        CollectorInfo("cpu", True, "stack sampling every 1 ms", overhead=0.01),
        CollectorInfo("gpu", False, "none", reason="no NVIDIA driver"),
        CollectorInfo("memory", True, "procfs"),
    ]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall s, CPU s of this process, all threads, result): CPU time is less sensitive to other load."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def reference_rows(n: int) -> list[dict[str, Any]]:
    """n plain dicts shaped like Chrome trace events (what a naive writer would json.dumps)."""
    return [
        {"ph": "X", "cat": "kernel", "name": f"kernel_{i % 300}", "pid": 100, "tid": 7,
         "ts": i * 1.5, "dur": 3.25, "args": {"correlation": i}}
        for i in range(n)
    ]  # fmt: skip


def torch_key_averages(n_events: int) -> tuple[int, float] | None:
    """(events, seconds of key_averages() on a fresh CPU profile of about n_events ops), or None."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x, y = torch.ones(4), torch.ones(4)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(n_events):
                torch.add(x, y)
        dt, averages = timed(prof.key_averages)  # parses the events on first use, as a user's first call does
        count = sum(int(a.count) for a in averages)
        return count, dt
    finally:
        torch.set_num_threads(threads)


def one_repetition(raw: Any, order: int, work: Path, reference_too: bool) -> dict[str, float]:
    """One repetition at one size; `order` alternates the order of the three blocks."""
    out: dict[str, float] = {"load": os.getloadavg()[0]}

    def reference() -> None:
        if not reference_too:
            return
        # Built (untimed) and freed each time: a million live dicts would slow everything else.
        rows = reference_rows(len(raw.events))
        t0 = time.perf_counter()
        json.dumps(rows)
        out["json.dumps reference"] = time.perf_counter() - t0
        del rows
        gc.collect()

    def end_to_end() -> None:
        folder = work / "e2e"
        wall, cpu, _ = timed_cpu(
            lambda: process(raw, Plan(NODEID, rounds=17, warmup=3), collectors(), report_dir=folder)
        )
        out["process() end to end"], out["process() end to end, CPU time"] = wall, cpu

    def stages() -> None:
        out["merge"], tl = timed(lambda: merge(raw))
        out["analyze"], _ = timed(lambda: analyze(tl))
        # A result to report: the end-to-end path's, built without a report folder (not timed).
        result, _ = process(raw, Plan(NODEID, rounds=17, warmup=3), collectors())
        folder = work / "stages"
        out["write_test_reports (all 4 files)"], _ = timed(lambda: write_test_reports(result, tl, folder, raw=raw))
        apart = work / "apart"
        apart.mkdir()
        out["  write_chrome_trace (trace.json)"], _ = timed(lambda: write_chrome_trace(tl, apart / "trace.json"))
        out["  write_chrome_trace (trace.json.gz)"], _ = timed(
            lambda: write_chrome_trace(tl, apart / "trace.json.gz", compress=True)
        )
        out["  RawTrace.save(compress=False) (raw.npz)"], _ = timed(
            lambda: raw.save(str(apart / "raw.npz"), compress=False)
        )
        out["  report.json (to_json + write)"], _ = timed(
            lambda: atomic_write_text(apart / "report.json", to_json(result))
        )
        out["  report.md (render_report + write)"], _ = timed(
            lambda: atomic_write_text(apart / "report.md", render_report(result))
        )
        out["merge + analyze + reports (sum of stages)"] = (
            out["merge"] + out["analyze"] + out["write_test_reports (all 4 files)"]
        )

    blocks = [reference, end_to_end, stages]
    for block in blocks if order % 2 == 0 else reversed(blocks):
        gc.collect()
        block()
    return out


def bench_size(n: int, reps: int, scratch: Path, reference_too: bool) -> dict[str, list[float]]:
    raw = make_raw_trace(n, seed=0)
    assert len(raw.events) == n
    results: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for r in range(reps):
        work = Path(tempfile.mkdtemp(prefix=f"rep{r}-", dir=scratch))
        try:
            for k, v in one_repetition(raw, r, work, reference_too).items():
                results.setdefault(k, []).append(v)
            if r == 0:
                sizes = {p.name: p.stat().st_size for p in (work / "stages").rglob("*") if p.is_file()}
        finally:
            shutil.rmtree(work, ignore_errors=True)  # not timed
    results["__sizes"] = [float(sizes.get(k, 0)) for k in ("trace.json.gz", "raw.npz", "report.json", "report.md")]
    return results


def print_size(n: int, res: dict[str, list[float]], torch_ref: tuple[int, float] | None) -> list[str]:
    lines = [f"\n## {n:,} events ({len(res['merge'])} repetitions; ms: median (best .. worst))"]
    sizes = res.pop("__sizes")
    order = [
        "merge",
        "analyze",
        "write_test_reports (all 4 files)",
        "  write_chrome_trace (trace.json)",
        "  write_chrome_trace (trace.json.gz)",
        "  RawTrace.save(compress=False) (raw.npz)",
        "  report.json (to_json + write)",
        "  report.md (render_report + write)",
        "merge + analyze + reports (sum of stages)",
        "process() end to end",
        "process() end to end, CPU time",
        "json.dumps reference",
    ]
    width = max(map(len, order))
    for k in order:
        if k in res:
            lines.append(f"  {k:<{width}}  {fmt_s(res[k])}")
    load = res["load"]
    lines.append(f"  load average (1 min) at the start of each repetition: {min(load):.2f} .. {max(load):.2f}")
    e2e = res["process() end to end"]
    lines.append(
        f"  files: trace.json.gz {sizes[0] / 1e6:.1f} MB, raw.npz {sizes[1] / 1e6:.1f} MB, "
        f"report.json {sizes[2] / 1e3:.1f} kB, report.md {sizes[3] / 1e3:.1f} kB"
    )
    lines.append(
        f"  throughput (process() end to end): {n / med(e2e) / 1e6:.2f} M events/s median, "
        f"{n / min(e2e) / 1e6:.2f} M events/s best"
    )
    if "json.dumps reference" in res:
        ratios = [a / b for a, b in zip(e2e, res["json.dumps reference"], strict=True)]
        lines.append(
            f"  ratio process() / json.dumps of {n:,} dicts (same repetition): median {med(ratios):.3f}, "
            f"IQR {iqr(ratios):.3f}, range {min(ratios):.3f} .. {max(ratios):.3f}"
        )
    if torch_ref is not None:
        t_events, t_s = torch_ref
        ours = n / med(e2e)
        theirs = t_events / t_s
        lines.append(
            f"  per event vs torch.profiler key_averages() ({t_events:,} events in {t_s:.2f} s, "
            f"{theirs / 1e3:.1f} k events/s): {ours / theirs:.0f}x faster"
        )
    if n == 1_000_000:
        m = med(e2e)
        verdict = "met" if m <= TARGET_S else f"MISSED by {m - TARGET_S:.2f} s ({m / TARGET_S:.2f}x the target)"
        best = "met" if min(e2e) <= TARGET_S else "missed"
        lines.append(f"  target merge + analyze + every report <= {TARGET_S:.0f} s: median {verdict}; best {best}")
    return lines


def whatif_size(n: int, reps: int, scratch: Path) -> list[str]:
    """`whatif.diagnose()` (on a warm Context: the round graphs, every what-if replayed) and `process()` end to
    end, alternating, at one size."""
    from pytest_inferscope.analyzer.context import Context
    from pytest_inferscope.analyzer.whatif import diagnose

    raw = make_raw_trace(n, seed=0)
    ctx = Context(merge(raw))
    table, why = diagnose(ctx)  # warms the Context's cached properties (not timed)
    res: dict[str, list[float]] = {}
    for r in range(reps):
        blocks = ["diagnose", "process"] if r % 2 == 0 else ["process", "diagnose"]
        for block in blocks:
            gc.collect()
            if block == "diagnose":
                wall, cpu, _ = timed_cpu(lambda: diagnose(ctx))
            else:
                folder = scratch / f"whatif-{n}-{r}"
                wall, cpu, _ = timed_cpu(
                    lambda out=folder: process(raw, Plan(NODEID, rounds=17, warmup=3), collectors(), report_dir=out)
                )
                shutil.rmtree(folder, ignore_errors=True)
            res.setdefault(f"{block} wall", []).append(wall)
            res.setdefault(f"{block} CPU", []).append(cpu)
    rows = table.rows if table else []
    lines = [f"\n## {n:,} events, {reps} repetitions (ms: median (best .. worst)); load {os.getloadavg()[0]:.2f}"]
    lines += [f"  {k:<16} {fmt_s(v)}" for k, v in res.items()]
    lines.append(f"  table: {len(rows)} rows, replay {table.replay_ms if table else '-'} ms, {why or 'built'}")
    return lines


def trace_gz_size(n: int, reps: int, scratch: Path) -> list[str]:
    """trace.json against trace.json.gz at zlib levels 1 and 6, at one size, in an order that rotates between
    repetitions: `write_chrome_trace` to a file (a big test's path: gzipped on the writer thread, what pytest
    waits for), and `atomic_write_gzip` of the formatted bytes (a small test's path: what the writer's helper
    process spends, off pytest's path). Bytes and ms."""
    import io

    from pytest_inferscope.reporters import files

    tl = merge(make_raw_trace(n, seed=0))
    buf = io.BytesIO()
    write_chrome_trace(tl, buf)
    formatted = buf.getvalue()
    variants = [("json", 0), ("json.gz level 1", 1), ("json.gz level 6", 6)]
    res: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    saved = files.GZIP_LEVEL
    try:
        for r in range(reps):
            for name, level in variants[r % 3 :] + variants[: r % 3]:
                files.GZIP_LEVEL = level or saved
                path = scratch / f"trace-{r}.{'json.gz' if level else 'json'}"
                gc.collect()
                res.setdefault(f"write_chrome_trace, {name}", []).append(
                    timed(lambda p=path, c=bool(level): write_chrome_trace(tl, p, compress=c))[0]
                )
                sizes[name] = path.stat().st_size
                path.unlink()
                if level:
                    res.setdefault(f"helper's atomic_write_gzip, level {level}", []).append(
                        timed(lambda p=path: files.atomic_write_gzip(p, formatted))[0]
                    )
                    path.unlink()
    finally:
        files.GZIP_LEVEL = saved
    lines = [f"\n## {n:,} events, {reps} repetitions (ms: median (best .. worst)); load {os.getloadavg()[0]:.2f}"]
    lines += [f"  {k:<40} {fmt_s(v)}" for k, v in res.items()]
    lines += [f"  {k:<40} {v / 1e6:8.2f} MB ({sizes['json'] / v:.1f}x smaller)" for k, v in sizes.items()]
    return lines


def profile_once(n: int, scratch: Path, top: int = 30) -> list[str]:
    import cProfile
    import io
    import pstats

    raw = make_raw_trace(n, seed=0)
    folder = Path(tempfile.mkdtemp(prefix="profile-", dir=scratch))
    process(raw, Plan(NODEID), collectors())  # warm caches and imports
    prof = cProfile.Profile()
    prof.enable()
    process(raw, Plan(NODEID, rounds=17, warmup=3), collectors(), report_dir=folder)
    prof.disable()
    shutil.rmtree(folder, ignore_errors=True)
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return [f"\n## cProfile of one process() at {n:,} events", buf.getvalue()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (< 30 s)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions at 1M events (default 5, quick 1)")
    parser.add_argument("--profile", action="store_true", help="also cProfile one process() at the largest size")
    parser.add_argument("--whatif", action="store_true", help="only diagnose() (the what-if table) and process()")
    parser.add_argument("--trace-gz", action="store_true", help="only trace.json vs trace.json.gz, zlib levels 1, 6")
    args = parser.parse_args(argv)
    if args.trace_gz:
        print("\n".join(header("bench_postprocess --trace-gz: trace.json and trace.json.gz of a synthetic trace")))
        scratch = Path(tempfile.mkdtemp(prefix="inferscope-bench-"))
        try:
            for n, reps in ((10_000, args.reps or 15), (100_000, args.reps or 9), (1_000_000, args.reps or 5)):
                print("\n".join(trace_gz_size(n, reps, scratch)))
                sys.stdout.flush()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return 0
    if args.whatif:
        print("\n".join(header("bench_postprocess --whatif: the what-if table of a synthetic trace")))
        scratch = Path(tempfile.mkdtemp(prefix="inferscope-bench-"))
        try:
            for n, reps in ((1_000_000, args.reps or 5), (100_000, 9)):
                print("\n".join(whatif_size(n, reps, scratch)))
                sys.stdout.flush()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return 0

    big_reps = args.reps or (1 if args.quick else 5)
    plan = [(1_000_000, big_reps), (100_000, 2 if args.quick else 9), (10_000, 3 if args.quick else 15)]
    torch_n, torch_reps = (5_000, 1) if args.quick else (TORCH_NOTE[0], 3)

    print("\n".join(header("bench_postprocess: merge + analyze + reports of a synthetic trace")))
    print(f"mode: {'quick' if args.quick else 'full'}; target: <= {TARGET_S:.0f} s for 1,000,000 events")
    sys.stdout.flush()
    scratch = Path(tempfile.mkdtemp(prefix="inferscope-bench-"))
    try:
        make_raw_trace(10_000, seed=1)  # warm imports and the generator's caches
        process(make_raw_trace(10_000, seed=1), Plan(NODEID), collectors(), report_dir=scratch / "warm")

        torch_runs = [r for r in (torch_key_averages(torch_n) for _ in range(torch_reps)) if r is not None]
        torch_ref = None
        if torch_runs:
            counts, secs = [c for c, _ in torch_runs], [s for _, s in torch_runs]
            torch_ref = (int(med(counts)), med(secs))
            print(
                f"\nreference: torch.profiler key_averages() on a CPU profile of {torch_ref[0]:,} events "
                f"(torch.add x {torch_n:,}, 1 thread): median {med(secs):.2f} s over {len(secs)} "
                f"(range {min(secs):.2f} .. {max(secs):.2f}); the original note: "
                f"{TORCH_NOTE[1]} s for {TORCH_NOTE[0]:,} events"
            )
        for n, reps in plan:
            # --quick leaves out the 1M-dict reference: building and dumping it takes ~10 s.
            res = bench_size(n, reps, scratch, reference_too=not (args.quick and n >= 1_000_000))
            print("\n".join(print_size(n, res, torch_ref)))
            sys.stdout.flush()
        if args.profile:
            print("\n".join(profile_once(plan[0][0], scratch)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
