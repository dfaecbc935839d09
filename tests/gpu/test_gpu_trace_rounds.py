"""Trace rounds on a real GPU: the measured rounds hold kernel records and no launch calls; the trace rounds hold both.

For each backend, in a fresh interpreter with the backend forced and INFERSCOPE_GPU=required,
`measure(small_forward, rounds=5, warmup=1, trace_rounds=2)` and the same with `trace_rounds="all"`.
Lines starting "INFERSCOPE-GPU" are the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import pytest
from test_gpu_backends import BACKENDS, ROUNDS_PRELUDE, _report, run_python

pytestmark = pytest.mark.gpu

ROUNDS = """
out = {}
for mode in (2, "all"):
    sink = api.Profile(f"trace-{mode}")
    with api.collecting(sink.name, sink, rounds=5, warmup=1, report_dir=None, thresholds=None, cpu=None,
                        trace_rounds=mode) as coll:
        coll.run_rounds(w.small_forward, 5, 1)
    tl, res = sink.timeline, sink.result
    per_round = round_records(tl)
    gpu = next(c for c in res.collectors if c.name == "gpu")
    m = res.analysis.metrics
    out[str(mode)] = {
        "rounds": per_round, "causality": res.clock.causality_violations, "clock_ok": res.clock.ok,
        "samples": len(res.latency.samples_ms), "trace_ms": res.latency.trace_ms, "mode": gpu.mode,
        "metrics": {k: m.get(k) for k in ("gpu.kernel_launches_per_round", "host.syncs_per_round",
                                          "gpu.idle_fraction", "gpu.idle_host_wait_fraction",
                                          "gpu.idle_launch_gap_fraction", "gpu.idle_round_end_fraction",
                                          "gpu.idle_other_fraction", "host.wait_fraction")},
        "bottleneck": res.analysis.bottleneck,
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_measured_rounds_have_kernels_but_no_launch_calls_and_trace_rounds_have_both(backend: str) -> None:
    out = run_python(ROUNDS_PRELUDE + ROUNDS, backend)
    traced, every = out["2"], out["all"]
    for label, run in (("trace_rounds=2", traced), ("all", every)):
        _report(
            f"{backend} {label}",
            rounds=[(r["kind"], r["kernels"], r["launches"], r["api_records"], r["linked"]) for r in run["rounds"]],
            causality=run["causality"],
            bottleneck=run["bottleneck"],
            mode=run["mode"],
            **{k.split(".", 1)[1]: (None if v is None else round(v, 4)) for k, v in run["metrics"].items()},
        )
    # trace_rounds=2: 1 warm-up + 5 measured rounds without launch calls, then 2 trace rounds with them
    kinds = [r["kind"] for r in traced["rounds"]]
    assert kinds == ["WARMUP"] + ["MEASURED"] * 5 + ["TRACE"] * 2, kinds
    plain = [r for r in traced["rounds"] if r["kind"] != "TRACE"]
    trace = [r for r in traced["rounds"] if r["kind"] == "TRACE"]
    assert all(r["kernels"] > 0 and r["api_records"] == 0 for r in plain), plain
    assert all(r["kernels"] > 0 and r["launches"] >= r["kernels"] == r["linked"] for r in trace), trace
    assert traced["causality"] == 0 and traced["clock_ok"]
    assert traced["samples"] == 5 and len(traced["trace_ms"]) == 2
    assert "only in the 2 trace rounds" in traced["mode"]
    # all: every round records the launch calls, and no trace round runs
    assert [r["kind"] for r in every["rounds"]] == ["WARMUP"] + ["MEASURED"] * 5
    assert all(r["launches"] >= r["kernels"] == r["linked"] > 0 for r in every["rounds"]), every["rounds"]
    assert every["causality"] == 0 and every["trace_ms"] == [] and "every round" in every["mode"]
    # The kernel count per measured round comes from the measured rounds' kernel records either way.
    k = "gpu.kernel_launches_per_round"
    assert traced["metrics"][k] == every["metrics"][k] == plain[0]["kernels"]


NO_CONTEXT = """
import json
from pytest_inferscope import measure

calls = {"n": 0}


def cpu_only():
    calls["n"] += 1
    return sum(i * i for i in range(20_000))


def run(body, **kw):
    calls["n"] = 0
    res = measure(body, rounds=3, warmup=1, **kw)  # the default settings: gpu_rounds auto, one trace round
    gpu = next(c for c in res.collectors if c.name == "gpu")
    return {"calls": calls["n"], "trace_ms": res.latency.trace_ms, "mode": gpu.mode, "active": gpu.active}


out = {"auto": run(cpu_only), "lean": run(cpu_only, gpu_rounds="trace")}
import torch


def starts_cuda():  # its first call creates the process's CUDA context
    calls["n"] += 1
    return (torch.ones(256, device="cuda") * 2).sum().item()


out["starts_cuda"] = run(starts_cuda)
x = torch.ones(256, device="cuda")


def gpu_body():
    calls["n"] += 1
    return (x * 2).sum().item()


out["gpu"] = run(gpu_body)
out["cpu_after"] = run(cpu_only)
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cpu_only_body_in_a_process_without_a_cuda_context_gets_no_trace_round(backend: str) -> None:
    """No CUDA context after the measured rounds: the body did no GPU work, so no trace round calls it again (and auto,
    lean without a context at the start, never starts CUPTI); a body that starts CUDA gets its rounds after the
    measured ones."""
    out = run_python(NO_CONTEXT, backend)
    _report(f"{backend} no context", **{k: (v["calls"], len(v["trace_ms"])) for k, v in out.items()})
    for mode in ("auto", "lean"):
        run = out[mode]
        assert run["active"] and run["calls"] == 4 and run["trace_ms"] == [], run
        assert "no trace round: no CUDA context was active" in run["mode"], run
    assert "CUPTI never started" in out["auto"]["mode"] and "CUPTI never started" not in out["lean"]["mode"]
    # A body whose first call starts CUDA: lean (nothing could be counted before it), CUPTI started after the measured
    # rounds for the profile and trace rounds.
    run = out["starts_cuda"]
    assert run["calls"] >= 6 and run["trace_ms"], run
    assert "no CUDA context in the process when the test started" in run["mode"] and "no trace round" not in run["mode"]
    # A GPU body gets its trace round, or its warm-up (which recorded the launch calls) stood for it. A CPU-only body
    # after it, with a context in the process, gets none either: its warm-up and measured rounds recorded no GPU work
    # (GpuSession._no_work; it had one before 673aa99, a whole call more).
    run = out["gpu"]
    stood = "stood for the trace round" in run["mode"] or "stood for the profile and trace rounds" in run["mode"]
    assert (run["calls"] >= 5 and run["trace_ms"]) or (stood and run["calls"] == 4), run
    run = out["cpu_after"]
    assert run["calls"] == 4 and run["trace_ms"] == [], run
    assert "no trace round: neither the warm-up nor the measured rounds did GPU work" in run["mode"], run
