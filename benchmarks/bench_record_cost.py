"""What one CUPTI activity record costs a real model per call, and what auto decides for it (issue 16).

For each model of `bench_real_models.py`: auto's decision with one and with two warm-up rounds (the GPU
collector's mode), then 5 interleaved repetitions of plain calls, `gpu_rounds="measured"` (kernel records
in the measured rounds) and `gpu_rounds="trace"` (none), the sampler off; per mode the median over
repetitions of (mode median / plain median) - 1, and the kernels per round. On a CUDA machine:

    python3 benchmarks/bench_record_cost.py vit_b16,resnet50 out.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks.bench_real_models import build
from pytest_inferscope import measure

MODES = ("plain", "measured", "trace")
METRICS = ("gpu.kernel_launches_per_round", "gpu.busy_fraction")


def plain_median(call, calls: int = 11) -> float:
    """The median of `calls` - 1 plain calls (the first left out), each timed with a device synchronise."""
    samples = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        call()
        torch.cuda.synchronize()
        samples.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(samples[1:])


def probe(name: str) -> dict:
    call = build(name, "cuda", False)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    r: dict = {}
    for w in (1, 2):
        res = measure(call, rounds=10, warmup=w, gpu_rounds="auto", cpu="off", name=f"{name}_auto{w}")
        r[f"auto_w{w}"] = next(c.mode for c in res.collectors if c.name == "gpu").split("); ", 1)[-1][:400]
    rows: dict[str, list[float]] = {m: [] for m in MODES}
    for _rep in range(5):
        for mode in MODES:
            if mode == "plain":
                rows[mode].append(plain_median(call))
                continue
            res = measure(call, rounds=10, warmup=1, gpu_rounds=mode, cpu="off", name=f"{name}_{mode}")
            rows[mode].append(statistics.median(res.latency.samples_ms))
            if mode == "measured":
                r["metrics_measured"] = {k: v for k, v in res.analysis.metrics.items() if k in METRICS}
    r["plain_ms"] = statistics.median(rows["plain"])
    for mode in MODES[1:]:
        r[mode] = statistics.median([a / b - 1 for a, b in zip(rows[mode], rows["plain"], strict=True)])
    r["rows"] = rows
    return r


def main() -> None:
    out = {}
    for name in sys.argv[1].split(","):
        out[name] = r = probe(name)
        print(name, json.dumps({k: v for k, v in r.items() if k != "rows"}, indent=1), flush=True)
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
