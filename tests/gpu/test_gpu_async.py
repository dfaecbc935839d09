"""An `async def` body's rounds on a real GPU: the same rounds as a function's (schedule.run_async drives the steps
of the rounds after the measured ones), each call awaited.

For each backend, in a fresh interpreter with the backend forced and INFERSCOPE_GPU=required: `small_forward` with
gpu_rounds="trace" (1 warm-up + 5 measured rounds, then the settling, profile and trace rounds) and the defaults on a
loop of tiny kernels (auto, gone lean), each awaited in an asyncio event loop. Lines starting "INFERSCOPE-GPU" are
the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import pytest
from test_gpu_backends import BACKENDS, ROUNDS_PRELUDE, _report, run_python
from test_gpu_lean_rounds import _trace_mode_rounds, _warmup_profile

pytestmark = pytest.mark.gpu

ASYNC_ROUNDS = """
import asyncio

out = {}
for label, fn, mode, warm, traced in (("trace", w.small_forward, "trace", 1, 3),
                                      ("auto-default", w.elementwise_loop, "auto", 2, 1)):
    async def awaited(fn=fn):
        result = fn()
        await asyncio.sleep(0)
        return result

    sink = api.Profile(label)
    with api.collecting(sink.name, sink, rounds=5, warmup=warm, report_dir=None, thresholds=None, cpu=None,
                        trace_rounds=traced, gpu_rounds=mode, until_in_step=traced == 1) as coll:
        asyncio.run(coll.run_rounds_async(awaited, 5, warm))
    tl, res = sink.timeline, sink.result
    gpu = next(c for c in res.collectors if c.name == "gpu")
    m = res.analysis.metrics
    out[label] = {
        "rounds": round_records(tl), "causality": res.clock.causality_violations, "clock_ok": res.clock.ok,
        "residual_ns": res.clock.residual_ns, "samples": len(res.latency.samples_ms), "trace_ms": res.latency.trace_ms,
        "mode": gpu.mode, "meta": tl.meta.get("gpu_rounds"), "decision": tl.meta.get("gpu_rounds_decision"),
        "profile_warmups": tl.meta.get("profile_warmups"), "trace_warmups": tl.meta.get("trace_warmups"),
        "metrics": {k: m.get(k) for k in ("gpu.kernel_launches_per_round",)}, "bottleneck": res.analysis.bottleneck,
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_async_body_runs_the_rounds_after_the_measured_ones_too(backend: str) -> None:
    out = run_python(ROUNDS_PRELUDE + ASYNC_ROUNDS, backend)
    for label, run in out.items():
        _report(
            f"{backend} async {label}",
            rounds=[(r["kind"], r["kernels"], r["launches"], r["linked"]) for r in run["rounds"]],
            causality=run["causality"], bottleneck=run["bottleneck"], mode=run["mode"],
            profile_warmups=run["profile_warmups"], trace_warmups=run["trace_warmups"],
        )  # fmt: skip
    _trace_mode_rounds(out["trace"])  # as test_gpu_lean_rounds' function's
    _warmup_profile(out["auto-default"])
