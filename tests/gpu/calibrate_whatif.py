"""Calibrate the what-if diagnosis (analyzer/whatif.py) on a GPU: simulated savings against measured ones.

Part 1, the labelled scenarios (example_project/inferapp/scenarios.py): each slow variant and its fixed
variant run under a real collection (launch calls recorded in every round, CPU sampling every 1 ms), as
tests/gpu/record_scenarios.py runs them. For each: the class, the verdict, the replay error, and the
simulated saving of the what-if that does what the fixed variant does, against the measured saving
(slow median - fixed median); the target is within +/-25 %. Slow and fixed run in alternation,
`--repeats` pairs of `--rounds` measured rounds each; the error is the median of the pairs' own
errors. For gpu_bound the fix (bf16) is not the
built-in 2x: the table also replays the slow rounds with the kernels as much faster as the fixed
variant's kernels are.

Part 2, real models no one here wrote, from configs with random weights (nothing is downloaded;
tests/gpu/real_models.py): HF GPT-2 `generate` at batch 1, GPT-2 forward 16x512, timm ViT-B/16 batch 32
bf16, torchvision ResNet-50 batch 128 fp16, HF BERT-base on one 128-token request, MobileNetV3-Large on one
image, ConvNeXt-Tiny batch 64 fp32, ResNet-18 fed from pageable host memory, Faster R-CNN on two images:
class, what-if table, replay error. Then the fixes applied and measured against their prediction, over
`--repeats` model/fix pairs in alternation: a forward captured in a CUDA graph (ViT, ResNet-50, BERT,
MobileNet: the "a CUDA graph" row), bf16 autocast (GPT-2 forward, ConvNeXt: the "GPU work 2x faster" row,
replayed at the kernel speed-up the fix reached) and the input copied from pinned memory asynchronously
(ResNet-18: the "copies pinned" row). `--models a,b` runs only those.

    python3 tests/gpu/calibrate_whatif.py [--out DIR] [--only scenarios|models] [--models a,b] [--cpu-smoke]

Part 3, the scenarios' slow variants recorded with torch.profiler (tests/gpu/kineto_scenarios.py, in a
process of its own) into DIR/kineto/<scenario>.json.gz and read back by the Kineto importer: their class
and what-ifs beside the live collection's (copy them into tests/data/kineto/ to keep them).

Prints the tables and writes DIR/whatif_calibration.md and .json (DIR: $OUT, else ./whatif-calibration).
`--cpu-smoke` runs the same code on the CPU with tiny sizes (a stand-in model where transformers, timm
or torchvision are missing), to check the script, not the numbers. About 4-6 minutes on an H100.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "example_project"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The what-if that does what each scenario's fixed variant does (by the start of its change).
FIX_WHATIF = {
    "cpu_bound": "the host's own work between launches off the critical path",
    "gpu_bound": "GPU work 2x faster",
    "transfer_bound": "copies pinned",
    "launch_bound": "a CUDA graph",
    "sync_bound": "stream synchronize removed",
    "memory_bound": "host memory growth removed",
}
#: A scenario with no GPU work has no round graph, so no what-if table: the saving its rule estimates instead.
FIX_SUGGESTION = {"memory_bound": "Reuse buffers"}  # the fixed variant preallocates one buffer
TOLERANCE = 0.25
#: Where each collection's raw trace is kept (`--save-raw`), to replay its what-ifs offline; None: not kept.
SAVE_RAW: Path | None = None


def collect(name: str, body: Callable[[], Any], rounds: int, warmup: int, choice: Any) -> Any:
    """One collection of `body`, analysed as the plugin does; the `TestResult`."""
    from record_scenarios import run_variant

    raw, result = run_variant(name, lambda _st: body(), None, rounds, warmup, choice)
    if SAVE_RAW is not None:
        SAVE_RAW.mkdir(parents=True, exist_ok=True)
        with open(SAVE_RAW / f"{name.replace('+', '__')}.npz", "wb") as f:
            raw.save(f)
    return result


def row_for(result: Any, change: str) -> Any:
    return next((r for r in result.analysis.whatif if r.change.startswith(change)), None)


def kernel_speedup(slow: Any, fixed: Any) -> float | None:
    """GPU compute per round, slow over fixed (what the fix did to the kernels)."""
    a = (slow.analysis.metrics.get("gpu.compute_fraction") or 0.0) * slow.latency.mean
    b = (fixed.analysis.metrics.get("gpu.compute_fraction") or 0.0) * fixed.latency.mean
    return a / b if a and b else None


def compare(slow: Any, fixed: Any, change: str, suggestion: str = "") -> dict[str, Any]:
    """The predicted saving of `change` on the slow run (its simulated fraction of the slow median) against
    the measured saving (slow median - fixed median). Without such a what-if, the saving the rules estimate
    for the suggestion starting with `suggestion`, if given."""
    r = row_for(slow, change)
    measured = slow.latency.median - fixed.latency.median
    out: dict[str, Any] = {"change": change, "measured_ms": round(measured, 3)}
    if r is None:
        est = next((x for x in slow.analysis.suggestions if suggestion and x.action.startswith(suggestion)), None)
        if est is None or est.saving_ms is None:
            return {**out, "predicted_ms": None, "error": None, "note": "no such what-if (no GPU data?)"}
        out["change"] = f"{suggestion} (the {est.rule} rule's estimate: no GPU work, no round graph)"
        predicted = float(est.saving_ms)
    else:
        predicted = r.saved_fraction * slow.latency.median
    err = (predicted - measured) / measured if measured else None
    return {**out, "predicted_ms": round(predicted, 3), "error": None if err is None else round(err, 3)}


def summary(result: Any) -> dict[str, Any]:
    a = result.analysis
    w = a.whatif_replay
    return {
        "class": a.bottleneck,
        "confidence": a.confidence,
        "decided_by": w.get("decided_by"),
        "verdict": w.get("verdict") or w.get("fallback"),
        "replay_error": w.get("replay_error"),
        "median_ms": round(result.latency.median, 3),
        "whatif": [r.to_dict() for r in a.whatif],
    }


def scenarios(device: Any, choice: Any, smoke: bool, repeats: int = 1, rounds: int = 0) -> list[dict[str, Any]]:
    """Each scenario's slow and fixed variants, `repeats` times in alternation (slow, fixed, slow, fixed, ...), so
    a drift of the machine (clocks, a neighbour) falls on both; the savings are medians over the pairs."""
    from inferapp.scenarios import SCENARIOS

    rows = []
    for name, s in SCENARIOS.items():
        if s.gpu and device.type != "cuda":
            rows.append({"scenario": name, "skipped": "needs CUDA"})
            continue
        n, warmup = (2, 1) if smoke else (max(rounds, s.rounds), s.warmup)
        pairs = []
        for _ in range(repeats):
            state = s.setup(device)
            slow = collect(f"{name}-slow", lambda st=state, f=s.slow: f(st), n, warmup, choice)
            state = s.setup(device)
            fixed = collect(f"{name}-fixed", lambda st=state, f=s.fixed: f(st), n, warmup, choice)
            pairs.append((slow, fixed))
        slow, fixed = pairs[0]
        row: dict[str, Any] = {"scenario": name, "expected": s.expected, "slow": summary(slow), "fixed": summary(fixed)}
        if name in FIX_WHATIF:
            row["fix"] = median_of([compare(a, b, FIX_WHATIF[name], FIX_SUGGESTION.get(name, "")) for a, b in pairs])
        if name == "gpu_bound":
            row["fix_at_measured_speedup"] = median_of(
                [replay_at_speedup(a, b, kernel_speedup(a, b)) for a, b in pairs]
            )
        rows.append(row)
    return rows


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One comparison from several slow/fixed pairs: the median prediction and measurement, and the median of
    the pairs' own errors (a pair's prediction comes from its own slow run, so a slow moment of the machine
    lengthens both its prediction and its measurement), with each pair kept."""
    import statistics

    out = dict(runs[0])
    both = [
        (r["predicted_ms"], r["measured_ms"])
        for r in runs
        if r.get("predicted_ms") is not None and r.get("measured_ms")
    ]
    if not both:
        return out
    errors = [(p - m) / m for p, m in both]
    measured = [m for _, m in both]
    out.update(
        predicted_ms=round(statistics.median(p for p, _ in both), 3),
        measured_ms=round(statistics.median(measured), 3),
        error=round(statistics.median(errors), 3),
        pairs=len(both),
        measured_range=[min(measured), max(measured)],
        per_pair=[[round(p, 3), round(m, 3)] for p, m in both],
    )
    if "factor" in out:
        out["factor"] = statistics.median(r["factor"] for r in runs if r.get("factor"))
    return out


def replay_at_speedup(slow: Any, fixed: Any, factor: float | None) -> dict[str, Any]:
    """The slow run's rounds replayed with its kernels `factor` times faster (a fix that is not 2x)."""
    if not factor or not slow.analysis.whatif:
        return {"factor": factor, "note": "no GPU data"}
    # The factor scales what 2x saves on the critical path: a GPU-bound round saves (1 - 1/f) of its kernels.
    two = row_for(slow, "GPU work 2x faster")
    frac = (two.saved_fraction / 0.5) * (1 - 1 / factor) if two else 0.0
    measured = slow.latency.median - fixed.latency.median
    predicted = frac * slow.latency.median
    return {"factor": round(factor, 2), "predicted_ms": round(predicted, 3), "measured_ms": round(measured, 3),
            "error": round((predicted - measured) / measured, 3) if measured else None}  # fmt: skip


# -- real models ------------------------------------------------------------------------------


def models(
    device: Any, choice: Any, smoke: bool, repeats: int = 1, only: set[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each model's class and what-ifs; each applied fix's prediction against its measured saving, over
    `repeats` model/fix pairs run in alternation (the first pair is the models' first collections)."""
    from real_models import APPLIED, build_models

    bodies = build_models(device, smoke, only)
    rounds, warmup = (2, 1) if smoke else (10, 3)
    results = {}
    for name, body in bodies.items():
        results[name] = collect(name, body, rounds, warmup, choice)
    rows = [{"model": n, **summary(r)} for n, r in results.items() if "+" not in n]
    applied = []
    for base, fix, change in APPLIED:
        if base not in results or fix not in results:
            continue
        pairs = [(results[base], results[fix])]
        for _ in range(repeats - 1):
            pairs.append((collect(base, bodies[base], rounds, warmup, choice),
                          collect(fix, bodies[fix], rounds, warmup, choice)))  # fmt: skip
        row = {"model": base, "fix": fix.split("+")[1], **median_of([compare(a, b, change) for a, b in pairs])}
        if change.startswith("GPU work"):
            row["at_measured_speedup"] = median_of([replay_at_speedup(a, b, kernel_speedup(a, b)) for a, b in pairs])
        applied.append(row)
    return rows, applied


# -- the scenarios through torch.profiler --------------------------------------------------------


def kineto_traces(out: Path, smoke: bool) -> list[Path]:
    """Record the scenarios with torch.profiler in a process of its own (one CUPTI client per process)."""
    import subprocess

    cmd = [sys.executable, str(Path(__file__).with_name("kineto_scenarios.py")), "--out", str(out)]
    done = subprocess.run(cmd + (["--cpu-smoke"] if smoke else []), capture_output=True, text=True)
    if done.returncode:
        print(f"kineto_scenarios.py failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return []
    return [Path(line) for line in done.stdout.splitlines() if line.endswith(".json.gz")]


def kineto_rows(paths: list[Path], live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each imported trace's class and what-ifs beside the live collection's."""
    from pytest_inferscope import kineto
    from pytest_inferscope.analyzer import analyze
    from pytest_inferscope.merger import merge

    by_name = {r["scenario"]: r for r in live if "slow" in r}
    rows = []
    for p in paths:
        name = p.name.removesuffix(".json.gz")
        a = analyze(merge(kineto.load(p).raw), kineto.RULES)
        mine = {
            "class": a.bottleneck,
            "confidence": a.confidence,
            "replay_error": a.whatif_replay.get("replay_error"),
            "whatif": [(r.change, r.saved_fraction) for r in a.whatif[:3]],
        }
        ref = by_name.get(name, {}).get("slow", {})
        live = [(w["change"], w["saved_fraction"]) for w in ref.get("whatif", [])[:3]]
        rows.append(
            {"scenario": name, "trace": str(p), "kineto": mine, "live_class": ref.get("class"), "live_whatif": live}
        )
    return rows


# -- output ------------------------------------------------------------------------------------


def pct(x: Any) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def kineto_table(rows: list[dict[str, Any]]) -> str:
    lines = ["", "## The scenarios imported from torch.profiler traces, beside the live collection", "",
             "| scenario | live class | Kineto class | replay error | live top what-ifs | Kineto top what-ifs |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        k = r["kineto"]
        live = "; ".join(f"{c}: -{f:.0%}" for c, f in r["live_whatif"])
        imp = "; ".join(f"{c}: -{f:.0%}" for c, f in k["whatif"])
        lines.append(
            f"| {r['scenario']} | {r['live_class']} | {k['class']} ({k['confidence']:.2f}) | "
            f"{pct(k['replay_error'])} | {live} | {imp} |"
        )
    return "\n".join(lines) + "\n"


def measured_cell(fx: dict[str, Any]) -> str:
    """The measured saving, with the spread over the slow/fixed pairs when there were several."""
    lo_hi = fx.get("measured_range")
    cell = str(fx.get("measured_ms", "-"))
    if not lo_hi or fx.get("pairs", 1) < 2:
        return cell
    return f"{cell} ({lo_hi[0]:.2f} … {lo_hi[1]:.2f}, {fx['pairs']} pairs)"


def table(scen: list[dict[str, Any]], mods: list[dict[str, Any]], applied: list[dict[str, Any]]) -> str:
    cols = (
        "scenario",
        "class (conf)",
        "decided by",
        "replay error",
        "fix what-if",
        "predicted ms",
        "measured ms",
        "error",
        "fixed class",
    )
    lines = ["## Scenarios: simulated saving of the fix applied vs measured", "", "| " + " | ".join(cols) + " |",
             "|" + "---|" * len(cols)]  # fmt: skip
    for r in scen:
        if "skipped" in r:
            lines.append(f"| {r['scenario']} | skipped: {r['skipped']} |" + " |" * 7)
            continue
        s, f, fx = r["slow"], r["fixed"], r.get("fix") or {}
        lines.append(
            f"| {r['scenario']} | {s['class']} ({s['confidence']:.2f}) | {s['decided_by']} | "
            f"{pct(s['replay_error'])} | {fx.get('change', '-')} | {fx.get('predicted_ms', '-')} | "
            f"{measured_cell(fx)} | {pct(fx.get('error'))} | {f['class']} ({f['confidence']:.2f}) |"
        )
        if "fix_at_measured_speedup" in r:
            m = r["fix_at_measured_speedup"]
            lines.append(
                f"| {r['scenario']} (kernels {m.get('factor')}x, as measured) | | | | GPU work faster | "
                f"{m.get('predicted_ms', '-')} | {m.get('measured_ms', '-')} | {pct(m.get('error'))} | |"
            )
    lines += ["", "Verdicts:", ""] + [f"- {r['scenario']}: {r['slow']['verdict']}" for r in scen if "slow" in r]
    lines += ["", "## Real models (random weights)", "",
              "| model | class (conf) | decided by | replay error | median ms | top what-ifs |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for m in mods:
        top = "; ".join(f"{w['change']}: -{w['saved_fraction']:.0%}" for w in m["whatif"][:3]) or m["verdict"]
        lines.append(
            f"| {m['model']} | {m['class']} ({m['confidence']:.2f}) | {m['decided_by']} | "
            f"{pct(m['replay_error'])} | {m['median_ms']} | {top} |"
        )
    lines += ["", "## Fixes applied to real models", "",
              "| model | fix | what-if | predicted ms | measured ms | error |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for a in applied:
        lines.append(
            f"| {a['model']} | {a['fix']} | {a['change']} | {a['predicted_ms']} | {a['measured_ms']} | "
            f"{pct(a['error'])} |"
        )
        if "at_measured_speedup" in a:
            m = a["at_measured_speedup"]
            lines.append(
                f"| {a['model']} | {a['fix']} (kernels {m.get('factor')}x) | GPU work faster | "
                f"{m.get('predicted_ms', '-')} | {m.get('measured_ms', '-')} | {pct(m.get('error'))} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "whatif-calibration"))
    ap.add_argument("--only", choices=("scenarios", "models"), default=None)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU: checks the script only")
    ap.add_argument("--repeats", type=int, default=3, help="slow/fixed pairs per scenario, run in alternation")
    ap.add_argument("--rounds", type=int, default=15, help="measured rounds per variant, at least the scenario's")
    ap.add_argument("--models", default="", help="comma-separated model names (tests/gpu/real_models.py)")
    ap.add_argument("--save-raw", type=Path, help="keep each collection's raw trace here (<name>.npz)")
    args = ap.parse_args(argv)
    global SAVE_RAW
    SAVE_RAW = args.save_raw

    import torch

    from pytest_inferscope.collectors.gpu import select_backend

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    device = torch.device("cuda" if cuda else "cpu")
    choice = select_backend("required" if cuda else "off")
    t0 = time.monotonic()
    traces = kineto_traces(args.out / "kineto", args.cpu_smoke) if args.only != "models" else []
    repeats = 1 if args.cpu_smoke else args.repeats
    scen = scenarios(device, choice, args.cpu_smoke, repeats, args.rounds) if args.only != "models" else []
    kin = kineto_rows(traces, scen)
    only = {m.strip() for m in args.models.split(",") if m.strip()} or None
    mods, applied = models(device, choice, args.cpu_smoke, repeats, only) if args.only != "scenarios" else ([], [])
    gpu = torch.cuda.get_device_name(0) if cuda else "CPU"
    head = (f"{datetime.date.today().isoformat()}, {gpu}, torch {torch.__version__}, "
            f"commit {os.environ.get('COMMIT', '?')}, {time.monotonic() - t0:.0f} s")  # fmt: skip
    text = f"# What-if calibration\n\n{head}\n\n" + table(scen, mods, applied) + kineto_table(kin)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "whatif_calibration.md").write_text(text)
    (args.out / "whatif_calibration.json").write_text(
        json.dumps({"head": head, "scenarios": scen, "models": mods, "applied": applied, "kineto": kin}, indent=1,
                   default=str)
    )  # fmt: skip
    print(text)
    missed = [r["scenario"] for r in scen if (r.get("fix") or {}).get("error") is not None
              and abs(r["fix"]["error"]) > TOLERANCE]  # fmt: skip
    if missed and not args.cpu_smoke:
        print(f"outside +/-{TOLERANCE:.0%}: {', '.join(missed)}")
    return 1 if missed and not args.cpu_smoke else 0


if __name__ == "__main__":
    sys.exit(main())
