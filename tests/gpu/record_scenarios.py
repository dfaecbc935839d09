"""Record the labelled scenarios (example_project/inferapp/scenarios.py) and print how each was classified.

On a GPU machine: every scenario and its fixed variant runs under a real collection (CPU sampling,
GPU via CUPTI, memory) with the scenario's warm-up and rounds, goes through the same merge ->
analyze path as the plugin, and is saved into an output folder laid out as `tests/data/`:

    OUT/<scenario>/trace.npz   the slow variant's raw trace (what the analyzer tests load)
    OUT/<scenario>/fixed.npz   the fixed variant's
    OUT/<scenario>/README.md   what ran, where, when, and what it was classified as
    OUT/summary.json           the table below, machine-readable

and a table is printed: scenario, expected, got, confidence, fixed got, median round time before and
after the fix, and whether the issue's proof holds (labelled class at confidence >= 0.75, or for
sync_bound its own fix simulated to save >= 15%; the fixed variant not flagged with the original class,
and measurably faster).

    python3 tests/gpu/record_scenarios.py --out recorded/ [--tgz scenarios.tgz] [--only cpu_bound,sync_bound]

Without CUDA only the CPU scenarios run (the GPU ones are listed as skipped). Exit status 1 when a
scenario that ran misses the proof.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "example_project"))

#: The proof: the labelled class at this confidence or more (since the class comes from simulated fixes, the
#: confidence is 0.5 + 0.5 x the margin to the next class's saving: 0.75 = the fix saves twice the next one).
MIN_CONFIDENCE = 0.75
#: Scenarios whose class may differ between GPU models: their proof is the simulated saving of their own fix
#: (as the example's `expect_fix` marker key checks), at least this share of the round.
BY_FIX = {"sync_bound": 0.15}
#: "Measurably faster": the fixed median at most this fraction of the slow one, and its p90 under the slow median.
FASTER = 0.9


def _commit() -> str:
    if os.environ.get("COMMIT"):
        return os.environ["COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _machine(torch: Any) -> dict[str, str]:
    info = {"host": platform.node() or "?", "python": platform.python_version(), "torch": torch.__version__}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            info["driver"] = smi.stdout.strip().splitlines()[0] if smi.stdout.strip() else "?"
        except OSError:
            info["driver"] = "?"
    return info


def run_variant(name: str, body: Any, state: Any, rounds: int, warmup: int, choice: Any) -> tuple[Any, Any]:
    """One collection of `body(state)` (warm-up + rounds), analysed as the plugin does: (raw trace, result)."""
    from pytest_inferscope.checks import Plan
    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.postprocess import process

    coll = Collection(CollectionOptions(sample_interval_ms=1.0), choice, name=name)
    coll.start()
    try:
        coll.run_rounds(lambda: body(state), rounds, warmup)
    finally:
        raw = coll.stop()
    result, _ = process(raw, Plan(nodeid=name, rounds=rounds, warmup=warmup), coll.collectors_info())
    return raw, result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder laid out as tests/data/")
    ap.add_argument("--tgz", type=Path, help="also pack the folder into this .tgz")
    ap.add_argument("--only", default="", help="comma-separated scenario names")
    args = ap.parse_args(argv)

    import torch
    from inferapp.scenarios import SCENARIOS

    from pytest_inferscope.collectors.gpu import select_backend

    torch.set_num_threads(1)  # as the example project's conftest does: timings survive a busy host
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    choice = select_backend("required" if cuda else "off")
    machine = _machine(torch)
    commit = _commit()
    today = datetime.date.today().isoformat()
    wanted = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    rows: list[dict[str, Any]] = []
    for name in wanted:
        s = SCENARIOS[name]
        if s.gpu and not cuda:
            rows.append({"scenario": name, "expected": s.expected, "skipped": "needs CUDA"})
            continue
        state = s.setup(device)
        raw_slow, slow = run_variant(f"{name}-slow", s.slow, state, s.rounds, s.warmup, choice)
        state = s.setup(device)  # a fresh state: the slow variant may have grown it (memory_bound)
        raw_fixed, fixed = run_variant(f"{name}-fixed", s.fixed, state, s.rounds, s.warmup, choice)
        del state
        a, b = slow.analysis, fixed.analysis
        row = {
            "scenario": name,
            "expected": s.expected,
            "got": a.bottleneck,
            "confidence": a.confidence,
            "fixed_got": b.bottleneck,
            "fixed_confidence": b.confidence,
            "median_ms": slow.latency.median,
            "fixed_median_ms": fixed.latency.median,
            "fixed_p90_ms": fixed.latency.p90,
            "top_suggestion": a.suggestions[0].action if a.suggestions else "",
            "findings": [(f.rule, f.cause, round(f.share, 3), round(f.confidence, 3)) for f in a.findings],
            "fixed_findings": [(f.rule, f.cause, round(f.share, 3), round(f.confidence, 3)) for f in b.findings],
            "metrics": {k: v for k, v in a.metrics.items() if k.startswith(("gpu.", "host.", "cpu.t", "mem."))},
        }
        row["labelled"] = a.bottleneck == s.expected and a.confidence >= MIN_CONFIDENCE
        if name in BY_FIX:
            own = max((r.saved_fraction for r in a.whatif if r.bottleneck == s.expected), default=0.0)
            row["own_fix_saves"] = own
            row["labelled"] = own >= BY_FIX[name]
        row["verdict"] = a.whatif_replay.get("verdict") or a.whatif_replay.get("fallback")
        row["replay_error"] = a.whatif_replay.get("replay_error")
        row["fixed_not_original"] = b.bottleneck != s.expected
        row["faster"] = fixed.latency.median <= FASTER * slow.latency.median and fixed.latency.p90 < slow.latency.median
        rows.append(row)
        folder = args.out / name
        folder.mkdir(parents=True, exist_ok=True)
        raw_slow.save(str(folder / "trace.npz"))
        raw_fixed.save(str(folder / "fixed.npz"))
        where = ", ".join(f"{k} {v}" for k, v in machine.items())
        (folder / "README.md").write_text(
            f"# {name}\n\n"
            f"Recorded {today} with `python3 tests/gpu/record_scenarios.py` ({where}; commit {commit}); "
            f"{s.rounds} rounds after {s.warmup} warm-up, CPU sampling every 1 ms"
            f"{', GPU ' + choice.describe() if cuda else ''}.\n\n"
            f"- `trace.npz`: {s.slow_doc.strip()} Classified {a.bottleneck} ({a.confidence:.2f}); median "
            f"{slow.latency.median:.3f} ms per round.\n"
            f"- `fixed.npz`: {s.fix_doc.strip()} Classified {b.bottleneck} ({b.confidence:.2f}); median "
            f"{fixed.latency.median:.3f} ms per round.\n\n"
            f"The slow variant's top suggestion: {row['top_suggestion']}\n"
        )
    summary = {"date": today, "commit": commit, "machine": machine, "gpu_backend": choice.describe(), "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    if args.tgz:
        with tarfile.open(args.tgz, "w:gz") as tar:
            tar.add(args.out, arcname=".")
    print(f"\n{today}, commit {commit}, " + ", ".join(f"{k} {v}" for k, v in machine.items()))
    print(f"GPU backend: {choice.describe()}\n")
    head = ("scenario", "expected", "got", "conf", "fixed got", "conf", "median ms", "fixed ms", "proof")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    ok = True
    for r in rows:
        if "skipped" in r:
            print(f"| {r['scenario']} | {r['expected']} | skipped: {r['skipped']} |" + " |" * 6)
            continue
        proof = [k for k in ("labelled", "fixed_not_original", "faster") if not r[k]]
        ok &= not proof
        print(
            f"| {r['scenario']} | {r['expected']} | {r['got']} | {r['confidence']:.2f} | {r['fixed_got']} | "
            f"{r['fixed_confidence']:.2f} | {r['median_ms']:.3f} | {r['fixed_median_ms']:.3f} | "
            f"{'ok' if not proof else 'MISSED: ' + ', '.join(proof)} |"
        )
    for r in rows:
        if "findings" in r:
            print(f"\n{r['scenario']}: slow {r['findings']}\n  fixed {r['fixed_findings']}")
            print(f"  simulated: {r['verdict']} (replay error {r['replay_error']})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
