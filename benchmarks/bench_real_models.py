"""What the plugin costs real models per call and per test, and which part of it costs what (issue 16).

Models no one here wrote, built from configs with random weights (nothing is downloaded):

* `gpt2_forward`: transformers GPT-2 (124M) forward, batch 16 x 512 tokens, fp32 (GPU-bound);
* `resnet50`: torchvision ResNet-50, batch 128, fp16, channels-last (GPU-bound);
* `gpt2_generate`: GPT-2 `generate`, batch 1, 24 new tokens, greedy (launch- and Python-heavy);
* `vit_b16`: timm ViT-B/16, batch 32, bf16 autocast (launch-heavy at this size).

Per call: a "test" is `warmup` + `calls` calls; the plugin's figure is the per-round latency it records
for the measured rounds (what a latency threshold sees), the plain figure is each call timed the same way
(perf_counter around the call and a device synchronise), its loop called from a fresh chunk of CPython's
frame stack as the plugin's rounds are (pytest_inferscope/stackbase.py: otherwise where a chunk ends would
differ between the two, which can move a deep model's call by more than the plugin costs). The modes run
interleaved, in an order that rotates every repetition, so machine drift hits them alike; each figure is
the median over repetitions of (mode median / plain median in the same repetition) - 1.

Modes: `plain`; `default` (measure() with default settings: gpu_rounds="auto"); `lean` (gpu_rounds="trace");
`measured` (gpu_rounds="measured", the default until 2026-11-25); `all` (gpu_rounds="measured",
trace_rounds="all": the launch calls recorded in every round, no trace round); `before` (the default as it was
before the warm-up recorded the launch calls to stand for the trace round: `gpu_rounds.WARMUP_LAUNCH_CALLS`
off); `profile_first` (the default with the profile rounds run before the trace rounds even when the warm-up stood
for neither, as before session 27: `schedule.TRACE_FIRST` off); `thread`, `pending` and `signal` (the default with
that stack sampler); and the
parts of the default: `rounds` (CPU sampler off, no GPU collection: the round machinery alone),
`sampler` (stack sampling, no GPU collection), `cupti` (GPU collection, sampler off).

"whole" is the test's wall time from the first call to the result in hand (start, rounds, the extra GPU
rounds, stop, drain, merge, analysis; reports not written), against plain's warm-up + calls.

    python3 benchmarks/bench_real_models.py [--reps 6] [--calls 10] [--models gpt2_generate,vit_b16] [--json F]
    python3 benchmarks/bench_real_models.py --cpu-smoke     # tiny configs on the CPU: checks the script only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, quartiles
from pytest_inferscope.stackbase import fresh_chunk

#: mode -> (environment for the plugin's settings, measure() keywords)
MODES: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "default": ({}, {}),
    "lean": ({}, {"gpu_rounds": "trace"}),
    "measured": ({}, {"gpu_rounds": "measured"}),  # the default before 2026-11-25
    "all": ({}, {"gpu_rounds": "measured", "trace_rounds": "all"}),  # launch calls in every round, no trace round
    "rounds": ({"INFERSCOPE_GPU": "off"}, {"cpu": "off"}),
    "sampler": ({"INFERSCOPE_GPU": "off"}, {"cpu": "sample"}),
    "cupti": ({}, {"cpu": "off"}),
    "signal": ({"INFERSCOPE_SAMPLER": "signal"}, {}),  # the default with the stack sampled by signal in the test thread
    "thread": ({"INFERSCOPE_SAMPLER": "thread"}, {}),  # ... by the sampler's thread (auto's before 3.13 till 2026-12)
    "pending": ({"INFERSCOPE_SAMPLER": "pending"}, {}),  # ... by the clock's pending calls (auto's before 3.13)
    "before": ({}, {}),  # the default with the warm-up recording no launch call (the schedule before session 17)
    "profile_first": ({}, {}),  # the default with the profile rounds before the trace rounds always (before session 27)
}
#: modes that run the default with a module constant changed: mode -> (module, name, value)
SCHEDULES = {
    "before": ("pytest_inferscope.collectors.gpu_rounds", "WARMUP_LAUNCH_CALLS", False),
    "profile_first": ("pytest_inferscope.collectors.schedule", "TRACE_FIRST", False),
}
TARGETS = {"gpt2_forward": 0.01, "resnet50": 0.01, "gpt2_generate": 0.03, "vit_b16": 0.03}


def build(name: str, device: str, smoke: bool) -> Callable[[], Any]:
    """The model's call, ready to run (weights random, inputs on the device)."""
    import torch

    torch.manual_seed(0)
    if name in ("gpt2_forward", "gpt2_generate"):
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2) if smoke else GPT2Config()
        model = GPT2LMHeadModel(cfg).to(device).eval()
        if name == "gpt2_forward":
            ids = torch.randint(0, cfg.vocab_size, (2, 32) if smoke else (16, 512), device=device)
            return lambda: _no_grad(model, ids)
        prompt = torch.randint(0, cfg.vocab_size, (1, 8), device=device)
        new = 4 if smoke else 24
        kwargs = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False, "pad_token_id": 0}
        return lambda: _no_grad(model.generate, prompt, **kwargs)
    if name == "resnet50":
        import torchvision

        dtype = torch.float32 if smoke else torch.float16
        model = torchvision.models.resnet50(weights=None).to(device, dtype).eval()
        model = model.to(memory_format=torch.channels_last)
        x = torch.randn(2 if smoke else 128, 3, 64 if smoke else 224, 64 if smoke else 224, device=device, dtype=dtype)
        x = x.to(memory_format=torch.channels_last)
        return lambda: _no_grad(model, x)
    if name == "vit_b16":
        import timm

        model = timm.create_model("vit_tiny_patch16_224" if smoke else "vit_base_patch16_224", pretrained=False)
        model = model.to(device).eval()
        x = torch.randn(2 if smoke else 32, 3, 224, 224, device=device)

        def vit() -> Any:
            with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
                return model(x)

        return vit
    raise SystemExit(f"unknown model {name!r}; models: {', '.join(TARGETS)}")


def _no_grad(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    import torch

    with torch.no_grad():
        return fn(*args, **kwargs)


def plain(call: Callable[[], Any], sync: Callable[[], None], warmup: int, calls: int) -> tuple[list[float], float]:
    """Per-call ms of `calls` calls after `warmup`, each timed with a device synchronise; and the whole in ms."""
    t0 = time.perf_counter_ns()
    samples = []
    for i in range(warmup + calls):
        start = time.perf_counter_ns()
        call()
        sync()
        if i >= warmup:
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return samples, (time.perf_counter_ns() - t0) / 1e6


def profiled(mode: str, call: Callable[[], Any], warmup: int, calls: int) -> tuple[list[float], float, str]:
    """The measured rounds' latencies, the test's whole time in ms, and its GPU collector's mode."""
    import importlib

    from pytest_inferscope import measure

    env, kwargs = MODES[mode]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    module, name, value = SCHEDULES.get(mode, (None, "", None))
    owner = importlib.import_module(module) if module else None
    kept = getattr(owner, name) if owner is not None else None
    if owner is not None:
        setattr(owner, name, value)
    try:
        t0 = time.perf_counter_ns()
        result = measure(call, rounds=calls, warmup=warmup, name=mode, **kwargs)
        whole = (time.perf_counter_ns() - t0) / 1e6
    finally:
        if owner is not None:
            setattr(owner, name, kept)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    gpu = next((c.mode if c.active else c.reason for c in result.collectors if c.name == "gpu"), "")
    return list(result.latency.samples_ms), whole, gpu


def bench(name: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    import torch

    call = build(name, device, args.cpu_smoke)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):  # compile kernels, fill caches: the first calls of a process are not what is compared
        call()
    sync()
    # Nor its first profiled test, which pays what a process pays once (CUPTI's first start, the backend's choice, the
    # pipeline's first calls: ViT-B/16's took ~105 ms against ~75): before 2026-11-29 (session 27) it was the first
    # listed mode's first repetition, one repetition in each run biased against that mode.
    for mode in args.modes:
        profiled(mode, call, args.warmup, args.calls)
    modes = ["plain", *args.modes]
    per_call: dict[str, list[float]] = {m: [] for m in modes}
    low: dict[str, list[float]] = {m: [] for m in modes}  # each repetition's 10th-percentile call
    whole: dict[str, list[float]] = {m: [] for m in modes}
    gpu_modes: dict[str, list[str]] = {m: [] for m in args.modes}  # which rounds recorded what, per repetition
    for rep in range(args.reps):
        order = modes[rep % len(modes) :] + modes[: rep % len(modes)]
        for mode in order:
            if mode == "plain":
                samples, total = fresh_chunk(plain, call, sync, args.warmup, args.calls)
            else:
                samples, total, gpu = profiled(mode, call, args.warmup, args.calls)
                gpu_modes[mode].append(gpu)
            per_call[mode].append(statistics.median(samples))
            low[mode].append(statistics.quantiles(samples, n=10)[0] if len(samples) > 1 else samples[0])
            whole[mode].append(total)
    out: dict[str, Any] = {"plain_ms": statistics.median(per_call["plain"]), "modes": {}, "per_rep": per_call}
    out["whole_per_rep"] = whole
    out["p10_per_rep"] = low
    out["gpu_mode_per_rep"] = gpu_modes
    for mode in args.modes:
        ratios = [m / p - 1 for m, p in zip(per_call[mode], per_call["plain"], strict=True)]
        wratios = [m / p - 1 for m, p in zip(whole[mode], whole["plain"], strict=True)]
        lratios = [m / p - 1 for m, p in zip(low[mode], low["plain"], strict=True)]
        out["modes"][mode] = {
            "per_call": statistics.median(ratios),
            "per_call_iqr": quartiles(ratios),
            # host noise only adds time: the fastest calls of a repetition move less with it
            "per_call_p10": statistics.median(lratios),
            "per_call_p10_iqr": quartiles(lratios),
            "whole": statistics.median(wratios),
            "whole_iqr": quartiles(wratios),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--models", default=",".join(TARGETS))
    parser.add_argument("--modes", default=",".join(MODES), type=lambda s: [m for m in s.split(",") if m != "plain"],
                        help="modes besides plain, which always runs")  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny configs on the CPU, to check the script")
    args = parser.parse_args(argv)
    import torch

    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --cpu-smoke to check the script")
    gpu = torch.cuda.get_device_name() if device == "cuda" else "none (CPU smoke run)"
    print("\n".join(header("bench_real_models", f"torch {torch.__version__}; GPU {gpu}")), flush=True)
    print(f"reps {args.reps}, a test = {args.warmup} warm-up + {args.calls} calls; modes {', '.join(args.modes)}")
    results = {}
    for name in args.models.split(","):
        results[name] = r = bench(name, args, device)
        print(f"\n## {name}: plain {r['plain_ms']:.2f} ms per call (target {TARGETS[name]:.0%} per call)")
        print("| mode | per call | IQR | per call, p10 | IQR | whole test | IQR |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for mode, m in r["modes"].items():
            lo, hi = m["per_call_iqr"]
            wlo, whi = m["whole_iqr"]
            plo, phi = m["per_call_p10_iqr"]
            cells = [f"{m['per_call']:+.1%}", f"{lo:+.1%} … {hi:+.1%}"]
            cells += [f"{m['per_call_p10']:+.1%}", f"{plo:+.1%} … {phi:+.1%}"]
            cells += [f"{m['whole']:+.1%}", f"{wlo:+.1%} … {whi:+.1%}"]
            print(f"| {mode} | {' | '.join(cells)} |")
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
