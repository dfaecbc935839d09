"""Both GPU backends, proved on a real GPU through the public path: `profile()`/`measure()` and a pytest run.

For each backend (native, cupti-python), in fresh interpreters with INFERSCOPE_COLLECTOR forcing
it and INFERSCOPE_GPU=required (so nothing falls back to CPU-only unnoticed):

* the workloads of benchmarks/bench_gpu_overhead.py (a transformer forward, 2,000 small kernels,
  64 MB pageable and pinned copies, long kernels between CUDA events) give the kernel names and
  counts torch.profiler records for the same code, kernels of 1 ms or more last what CUDA events
  say (within 1%), and no GPU record starts before its launch call;
* the clock fit is checked against extra (host, CUPTI) readings taken inside the body, before
  torch.profiler ever ran in the process and after (which makes CUPTI's clock tick at another rate);
* torch.profiler still records after us, and while it runs we fall back to CPU-only with a reason;
* a pytest run of marked tests with --inferscope-report says in its header which backend ran, and
  its report.json / raw.npz hold the same proof; a torch.profiler session runs before and after;
* JAX and CuPy bodies are profiled without torch in the process;
* every interpreter exits cleanly (no crash at exit) and leaves no GPU process behind.

Lines starting "INFERSCOPE-GPU" are the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_inferscope.collectors.gpu_native import traced_api
from pytest_inferscope.events import Kind, RawTrace
from pytest_inferscope.merger import MAX_RESIDUAL_NS, merge
from pytest_inferscope.reporters import load_report
from pytest_inferscope.rounds import RoundKind, kinds_of

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
BACKENDS = ("native", "cupti-python")
CRASH = ("Segmentation fault", "Fatal Python error", "core dumped", "Aborted", "terminate called")


#: The start of a script (run_python) that collects rounds of the benchmark workloads: `w` warmed up, and
#: `round_records(timeline)`, the records inside each ROUND span (kernels, runtime records, launches, linked).
ROUNDS_PRELUDE = f"""
import json, sys
sys.path.insert(0, {str(BENCH)!r})
import numpy as np, torch
import bench_gpu_overhead as bench
from pytest_inferscope import api, api_measure
from pytest_inferscope.events import Kind
from pytest_inferscope.rounds import RoundKind, kinds_of

w = bench.Workloads(torch)
w.warm()


def round_records(tl):
    ev, out = tl.events, []
    for r in ev[ev["kind"] == Kind.ROUND]:
        inside = (ev["start"] >= r["start"]) & (ev["start"] < r["end"])
        rt = ev[inside & (ev["kind"] == Kind.RUNTIME)]
        launches = rt[np.array(["LaunchKernel" in tl.strings[i] for i in rt["name"]], dtype=bool)]
        k = ev[inside & (ev["kind"] == Kind.KERNEL)]
        kind = RoundKind(int(kinds_of(np.array([r["flags"]]))[0])).name
        out.append({{"kind": kind, "kernels": int(len(k)), "launches": int(len(launches)),
                    "api_records": int(len(rt)), "linked": int(np.isin(k["corr"], launches["corr"]).sum())}})
    return out
"""


def _required() -> bool:
    return os.environ.get("INFERSCOPE_GPU") == "required"


def _report(what: str, **numbers: object) -> None:
    print(f"INFERSCOPE-GPU {what}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


def run_python(script: str, backend: str, timeout: int = 420, **env: str) -> dict[str, Any]:
    """Runs `script` in a fresh interpreter with `backend` forced; its last stdout line is a JSON object.

    The interpreter must exit with 0 and print no crash (at exit included), and be gone after.
    """
    environ = {
        **os.environ,
        "INFERSCOPE_COLLECTOR": backend,
        "INFERSCOPE_GPU": "required",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",  # JAX would otherwise take 75% of the GPU
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{backend}: the script ran past {timeout} s\n{err[-3000:]}")
    crashed = [c for c in CRASH if c in err]
    assert proc.returncode == 0 and not crashed, f"{backend}: exit {proc.returncode} {crashed}\n{err[-4000:]}"
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# -- the analysis the subprocesses share ------------------------------------------------------------------

#: In the scripts below: the tightest of n back-to-back (host, CUPTI) readings, as the collection takes its clock
#: pairs (a thread preempted between two reads puts a single reading's midpoint up to half the gap off: one probe read
#: 74 µs off the fit on a host still busy from the call before, 2026-11-29).
TIGHTEST = """
def tightest(gpu, n=3):
    best = None
    for _ in range(n):
        h0 = host_clock_ns(); d = gpu.timestamp(); h1 = host_clock_ns()
        if best is None or h1 - h0 < best[0]:
            best = (h1 - h0, (h0 + h1) // 2, d)
    return [best[1], best[2]]
"""

COMMON = """
import json, os, sys, warnings
from collections import Counter
sys.path.insert(0, BENCH)
import numpy as np
import pytest_inferscope
from pytest_inferscope import api, api_measure
from pytest_inferscope.collectors import active
from pytest_inferscope.events import Kind, MemoryKind, host_clock_ns, unpack_copy_flags

def probe(probes):
    # an extra (host, CUPTI) reading inside the body, to test the fitted clock against
    probes.append(tightest(active().gpu))

def predict(fit, d):
    # host time the fit gives a CUPTI timestamp (ClockFit: integer references, then rate and offset)
    return getattr(fit, "host_ref_ns", 0) + fit.rate * (d - getattr(fit, "device_ref_ns", 0)) + fit.offset_ns

def summary(result, tl, probes, brackets=()):
    ev, names = tl.events, tl.strings
    k = ev[ev["kind"] == Kind.KERNEL]
    k = k[np.argsort(k["start"], kind="stable")]
    c = ev[ev["kind"] == Kind.MEMCPY]
    c = c[np.argsort(c["start"], kind="stable")]
    src = unpack_copy_flags(c["flags"])[1]
    rt = ev[ev["kind"] == Kind.RUNTIME]
    fit = result.clock
    ms = lambda r: float(r["end"] - r["start"]) / 1e6
    timed = [(label, s.elapsed_time(e)) for label, s, e in brackets]
    spins = [r for r in k if "spin_kernel" in names[r["name"]]]
    others = [r for r in k if "spin_kernel" not in names[r["name"]]]
    durations = []
    for (label, events_ms), r in zip([t for t in timed if t[0].startswith(("lead", "spin"))], spins):
        durations.append([label, names[r["name"]][:40], ms(r), events_ms])
    for label, events_ms in [t for t in timed if t[0] == "matmul"]:
        if others:
            durations.append([label + (" (1 kernel)" if len(others) == 1 else f" ({len(others)} kernels, span)"),
                              names[others[0]["name"]][:40], float(others[-1]["end"] - others[0]["start"]) / 1e6,
                              events_ms])
    for (label, events_ms), r in zip([t for t in timed if t[0] in ("pageable", "pinned")], c):
        durations.append(["copy " + label, names[r["name"]], ms(r), events_ms])
    gpu = next(x for x in result.collectors if x.name == "gpu")
    return {
        "kernels": dict(Counter(names[i] for i in k["name"])),
        "overheads": dict(Counter(names[i] for i in ev[ev["kind"] == Kind.OVERHEAD]["name"])),
        "copies": {"pageable": int((src == MemoryKind.PAGEABLE).sum()), "pinned": int((src == MemoryKind.PINNED).sum()),
                   "all": int(len(c))},
        "long_kernels": sorted((round(ms(r), 3), names[r["name"]][:60]) for r in k if ms(r) >= 1.0),
        "durations": durations,
        "clock": fit.to_dict(),
        "probe_residual_ns": max((abs(h - predict(fit, d)) for h, d in probes), default=None),
        "gpu": gpu.to_dict(),
        "runtime_records": int(len(rt)), "driver_records": int((rt["flags"] == 1).sum()),
        "api_names": sorted({names[i] for i in rt["name"]}),
        "incomplete": tl.incomplete, "dropped": tl.dropped, "torch_loaded": "torch" in sys.modules,
    }

def ours(name, fn, sync):
    probes = []
    with pytest_inferscope.profile(name) as p:
        probe(probes)
        brackets = fn()
        sync()
        probe(probes)
    return summary(p.result, p.timeline, probes, brackets or ())

def measured(r):
    return {"clock": r.clock.to_dict(), "launches_per_round": r.analysis.metrics.get("gpu.kernel_launches_per_round")}

def libcupti():
    return sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l})
"""

PROOF = """
import torch
import bench_gpu_overhead as bench
w = bench.Workloads(torch)
w.warm()
work = {k: f for k, f in w.named().items() if k != "small_forward"}
sync = torch.cuda.synchronize
out = {"ours": {}, "theirs": {}, "pairs": {}}

def per_round_pairs(phase):
    # Collection takes a clock reading after every round, so the fit has pairs to be checked against
    r = pytest_inferscope.measure(w.elementwise_loop, rounds=5, warmup=1, name=phase + "-pairs")
    # a pair at each CUPTI start and stop (lean: it stops after the warm-up and starts again after the
    # measured rounds, unless the warm-up stood for every round after them) and after each round it recorded
    lat = r.latency
    lean = any("only after the measured rounds" in c.mode for c in r.collectors if c.name == "gpu")
    recorded = len(lat.warmup_ms) + len(lat.trace_ms) + (0 if lean else len(lat.samples_ms))
    out["pairs"][phase] = {**r.clock.to_dict(), "expected": (4 if lean and lat.trace_ms else 2) + recorded}

def settings(gpu):
    os.environ["INFERSCOPE_GPU"] = gpu
    api._cached_choice.cache_clear()  # the backend choice is cached per process; settings are read per call

out["ours"]["clean"] = {k: ours("clean-" + k, f, sync) for k, f in work.items()}
per_round_pairs("clean")
out["theirs"]["first"] = {k: bench.torch_profiler_counts(torch, f) for k, f in work.items()}
out["ours"]["after_torch_profiler"] = {k: ours("after-" + k, f, sync) for k, f in work.items()}
per_round_pairs("after_torch_profiler")
out["theirs"]["after_ours"] = {k: bench.torch_profiler_counts(torch, f) for k, f in work.items()}

settings("auto")  # CUPTI held by a running torch.profiler: CPU-only collection, with the reason
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.profiler.profile(activities=acts) as prof:
        with pytest_inferscope.profile("held") as p:
            w.elementwise_loop()
            sync()
gpu = next(x for x in p.result.collectors if x.name == "gpu")
theirs = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
out["held"] = {"gpu": gpu.to_dict(), "has_gpu": p.timeline.has_gpu, "theirs_kernels": theirs,
               "warnings": [str(x.message)[:300] for x in caught]}
out["theirs"]["after_held"] = {"elementwise_loop": bench.torch_profiler_counts(torch, w.elementwise_loop)}
settings("required")
out["ours"]["last"] = {"elementwise_loop": ours("last", w.elementwise_loop, sync)}
out["libcupti"] = libcupti()
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=BACKENDS)
def proof(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The whole proof script's results for one backend (one fresh interpreter)."""
    backend: str = request.param
    result = run_python(f"BENCH = {str(BENCH)!r}\n" + COMMON + TIGHTEST + PROOF, backend)
    result["backend"] = backend
    gpu = result["ours"]["clean"]["transformer"]["gpu"]
    _report(f"{backend} backend", mode=gpu["mode"], libcupti=result["libcupti"])
    return result


def _predict(clock: Any, device_ns: int) -> float:
    """The host time a fitted clock gives a CUPTI timestamp (the merger's formula, integer references first)."""
    host_ref, device_ref = getattr(clock, "host_ref_ns", 0), getattr(clock, "device_ref_ns", 0)
    return float(host_ref + clock.rate * (device_ns - device_ref) + clock.offset_ns)


def _per_call(counts: dict[str, int], calls: int) -> dict[str, float]:
    return {k: v / calls for k, v in counts.items()}


def test_the_forced_backend_is_the_one_that_ran(proof: dict[str, Any]) -> None:
    for phase, runs in proof["ours"].items():
        for name, run in runs.items():
            gpu = run["gpu"]
            assert gpu["active"] and gpu["mode"].startswith(f"{proof['backend']} CUPTI ("), (phase, name, gpu)
            assert run["dropped"] == 0 and run["incomplete"] == 0, (phase, name)


def test_kernel_names_and_counts_equal_torch_profilers(proof: dict[str, Any]) -> None:
    reference = proof["theirs"]["first"]
    problems = []
    for phase in ("clean", "after_torch_profiler"):
        for name, run in proof["ours"][phase].items():
            ours, theirs = run["kernels"], reference[name]["kernels"]
            names = set(ours) | set(theirs)
            diff = {k: (ours.get(k, 0), theirs.get(k, 0)) for k in names if ours.get(k) != theirs.get(k)}
            _report(f"{proof['backend']} {phase} {name}", kernels=sum(ours.values()), names=len(ours),
                    torch_profiler=sum(theirs.values()), differ=len(diff))  # fmt: skip
            if diff:
                problems.append((phase, name, dict(list(diff.items())[:5])))
    assert not problems, problems
    assert sum(reference["transformer"]["kernels"].values()) > 50
    assert reference["elementwise_loop"]["kernels"] and sum(reference["elementwise_loop"]["kernels"].values()) == 2000


def test_pageable_and_pinned_copies_are_counted_as_torch_profiler_counts_them(proof: dict[str, Any]) -> None:
    theirs = proof["theirs"]["first"]["copies"]["copies"]
    pageable = sum(v for k, v in theirs.items() if "Pageable" in k)
    pinned = sum(v for k, v in theirs.items() if "Pinned" in k)
    for phase in ("clean", "after_torch_profiler"):
        copies = proof["ours"][phase]["copies"]["copies"]
        _report(f"{proof['backend']} {phase} copies", ours=copies, torch_profiler=theirs)
        assert (copies["pageable"], copies["pinned"]) == (pageable, pinned) == (1, 1)


def test_long_kernels_last_what_cuda_events_say(proof: dict[str, Any]) -> None:
    problems = []
    for phase in ("clean", "after_torch_profiler"):
        for name in ("long_kernels", "copies"):
            for label, kernel, cupti_ms, events_ms in proof["ours"][phase][name]["durations"]:
                error = (cupti_ms - events_ms) / events_ms
                _report(f"{proof['backend']} {phase} duration", label=label, cupti_ms=f"{cupti_ms:.3f}",
                        cuda_events_ms=f"{events_ms:.3f}", error=f"{error * 100:+.2f}%")  # fmt: skip
                if label.startswith("spin") or label == "matmul (1 kernel)":
                    if abs(error) >= 0.01:
                        problems.append((phase, label, kernel, cupti_ms, events_ms))
                elif cupti_ms > events_ms * 1.01 + 0.01:  # copies, lead, spans: the record lies inside the bracket
                    problems.append((phase, label, kernel, cupti_ms, events_ms))
        spins = [d for d in proof["ours"][phase]["long_kernels"]["durations"] if d[0].startswith("spin")]
        assert len(spins) == 3
        _report(f"{proof['backend']} {phase} CUPTI overhead records", **{
            name: run["overheads"] for name, run in proof["ours"][phase].items()})  # fmt: skip
        for name, run in proof["ours"][phase].items():  # kernels of 1 ms or more that no events bracket
            if name != "long_kernels" and run["long_kernels"]:
                _report(f"{proof['backend']} {phase} {name} unbracketed kernels >= 1 ms", kernels=run["long_kernels"])
    assert not problems, problems


def test_the_clock_fit_holds_before_and_after_torch_profiler(proof: dict[str, Any]) -> None:
    for phase, runs in proof["ours"].items():
        for name, run in runs.items():
            clock = run["clock"]
            assert clock["ok"] and clock["pairs"] >= 2 and clock["causality_violations"] == 0, (phase, name, clock)
            assert clock["residual_ns"] <= MAX_RESIDUAL_NS
            assert run["probe_residual_ns"] <= MAX_RESIDUAL_NS, (phase, name, run["probe_residual_ns"])
            if phase == "clean":
                assert abs(clock["rate"] - 1) < 1e-3, (name, clock)
        rates = [r["clock"]["rate"] for r in runs.values()]
        worst = max(r["probe_residual_ns"] for r in runs.values())
        _report(f"{proof['backend']} {phase} clock", rate=f"{min(rates):.6f}..{max(rates):.6f}",
                probe_residual_us=f"{worst / 1e3:.2f}", causality_violations=0)  # fmt: skip
    for phase, clock in proof["pairs"].items():  # a clock pair after every round, besides start and stop
        _report(f"{proof['backend']} {phase} per-round pairs", pairs=clock["pairs"], rate=f"{clock['rate']:.6f}",
                residual_us=f"{clock['residual_ns'] / 1e3:.2f}", causality=clock["causality_violations"])  # fmt: skip
        # at least one pair per recorded round, and more than the start and stop pairs (with only those the fit's
        # residual is 0 and proves nothing): the fewest is lean with the warm-up standing for every round after the
        # measured ones, CUPTI's one run (its start, the warm-up round, its stop)
        assert clock["pairs"] >= max(3, clock["expected"]), (phase, clock)
        assert clock["ok"] and clock["causality_violations"] == 0, (phase, clock)


def test_only_the_traced_api_calls_are_recorded(proof: dict[str, Any]) -> None:
    """Launches, copies, memsets, syncs and allocations: not torch's cudaGetDevice, cudaGetLastError, ..."""
    for phase in ("clean", "after_torch_profiler"):
        for name, run in proof["ours"][phase].items():
            kernels = sum(run["kernels"].values())
            _report(f"{proof['backend']} {phase} {name} API records", records=run["runtime_records"], kernels=kernels,
                    names=run["api_names"])  # fmt: skip
            assert [n for n in run["api_names"] if not traced_api(n)] == [], (phase, name)


def test_torch_profiler_records_after_us_and_we_step_aside_while_it_runs(proof: dict[str, Any]) -> None:
    first, after = proof["theirs"]["first"], proof["theirs"]["after_ours"]
    for name in first:
        assert after[name]["kernels"] == first[name]["kernels"], name
    held = proof["held"]
    _report(f"{proof['backend']} under torch.profiler", gpu=held["gpu"]["reason"][:120],
            theirs_kernels=held["theirs_kernels"], warnings=len(held["warnings"]))  # fmt: skip
    assert not held["gpu"]["active"] and not held["has_gpu"]
    assert "in use by another profiler" in held["gpu"]["reason"] and "torch.profiler" in held["gpu"]["reason"]
    assert held["theirs_kernels"] >= 2000, "our refused start must not disturb the running profiler"
    # one clear warning says GPU collection stepped aside, and why
    cupti_warnings = [w for w in held["warnings"] if "GPU activity is not collected" in w]
    assert len(cupti_warnings) == 1 and "in use by another profiler" in cupti_warnings[0], held["warnings"]
    assert sum(proof["theirs"]["after_held"]["elementwise_loop"]["kernels"].values()) == 2000
    last = proof["ours"]["last"]["elementwise_loop"]
    assert sum(last["kernels"].values()) == 2000 and last["clock"]["causality_violations"] == 0


# -- a pytest run of marked tests, with reports ------------------------------------------------------------

INNER = """
import json, os, sys
sys.path.insert(0, BENCH)
import pytest, torch
import bench_gpu_overhead as bench
from pytest_inferscope.collectors import active
from pytest_inferscope.events import host_clock_ns

OUT = os.environ["INFERSCOPE_PROOF_OUT"]
SEEN = {"brackets": {}, "probes": {}}
WORK = ("transformer", "elementwise_loop", "copies", "long_kernels")

@pytest.fixture(scope="module")
def w():
    w = bench.Workloads(torch)
    w.warm()
    return w

def dump(name, data):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(data, f)

def run(w, name):
    gpu = active().gpu  # the running collection's backend: extra clock readings to test the fit against
    def probe():
        SEEN["probes"].setdefault(name, []).append(tightest(gpu))
    probe()
    brackets = w.named()[name]()
    torch.cuda.synchronize()
    probe()
    SEEN["brackets"].setdefault(name, []).extend((label, s.elapsed_time(e)) for label, s, e in brackets)
    dump("seen", SEEN)

def test_a_torch_profiler_before(w):
    dump("before", {k: bench.torch_profiler_counts(torch, w.named()[k]) for k in WORK})

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_b_transformer(w):
    run(w, "transformer")

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_c_elementwise_loop(w):
    run(w, "elementwise_loop")

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_d_copies(w):
    run(w, "copies")

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_e_long_kernels(w):
    run(w, "long_kernels")

def test_z_torch_profiler_after(w):
    after = {k: bench.torch_profiler_counts(torch, w.named()[k]) for k in WORK}
    dump("after", after)
    assert sum(after["elementwise_loop"]["kernels"].values()) == 2000
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pytest_run_reports_the_backend_and_proves_it(
    backend: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("INFERSCOPE_COLLECTOR", backend)
    monkeypatch.setenv("INFERSCOPE_GPU", "required")
    monkeypatch.setenv("INFERSCOPE_PROOF_OUT", str(tmp_path))
    pytester.makepyfile(test_proof=f"BENCH = {str(BENCH)!r}\n" + INNER + TIGHTEST)
    report = tmp_path / "report"
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", f"--inferscope-report={report}", timeout=400)
    output = result.stdout.str()
    assert result.ret == 0, output[-6000:] + result.stderr.str()[-2000:]
    assert not [c for c in CRASH if c in output + result.stderr.str()], output[-3000:]
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines([f"inferscope: cpu *; gpu {backend} (*"])  # the -v header says what ran
    _report(f"{backend} pytest header", line=next(x for x in output.splitlines() if x.startswith("inferscope: cpu")))
    before, after = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("before", "after"))
    seen = json.loads((tmp_path / "seen.json").read_text())
    problems: list[tuple[str, str, dict[str, Any]]] = []
    assert len(list(report.glob("*/report.json"))) == 4, sorted(report.iterdir())
    for path in sorted(report.glob("*/report.json")):
        res = load_report(path)
        name = res.nodeid.split("::")[-1].split("_", 2)[-1]
        gpu = next(c for c in res.collectors if c.name == "gpu")
        clock = res.clock
        probes = seen["probes"][name]
        probe_residual = max(abs(h - _predict(clock, d)) for h, d in probes)
        timeline = merge(RawTrace.load(str(path.parent / "raw.npz")))
        ev = timeline.events
        kernels = ev[ev["kind"] == Kind.KERNEL]
        counts = Counter(timeline.strings[i] for i in kernels["name"])
        # the calls CUPTI recorded: the trace rounds call the body too; auto (the default) may take the
        # measured rounds lean (elementwise_loop's 2000 launches per call): then they recorded nothing, and
        # a settling round (in no latency list) recorded before the profile and trace rounds where the GPU
        # could not be primed
        lean = "GPU activity recorded only after the measured rounds" in gpu.mode
        settling = int(np.sum(kinds_of(ev["flags"][ev["kind"] == Kind.ROUND]) == RoundKind.SETTLING))
        assert settling == 0, "the GPU was primed after CUPTI started: no settling round"
        calls = (settling if lean else res.rounds) + res.warmup + len(res.latency.trace_ms)
        per_call = _per_call(dict(counts), calls)
        spins = kernels[np.array(["spin_kernel" in timeline.strings[i] for i in kernels["name"]], dtype=bool)]
        spins = spins[np.argsort(spins["start"])]
        timed = [(label, ms) for label, ms in seen["brackets"].get(name, []) if label.startswith(("lead", "spin"))]
        pairs = list(zip(spins, timed, strict=True))
        errors = [((s["end"] - s["start"]) / 1e6 - e) / e for s, (label, e) in pairs if label.startswith("spin")]
        lead = [((s["end"] - s["start"]) / 1e6, e) for s, (label, e) in pairs if label.startswith("lead")]
        _report(f"{backend} pytest {name}", rate=f"{clock.rate:.6f}", residual_ns=f"{clock.residual_ns:.0f}",
                probe_residual_us=f"{probe_residual / 1e3:.2f}", causality=clock.causality_violations,
                kernels_per_call=sum(per_call.values()), worst_spin_error=f"{max(map(abs, errors), default=0):.4%}",
                verdict=res.analysis.bottleneck,
                lead_spins_cupti_vs_events_ms=[(round(a, 3), round(b, 3)) for a, b in lead])  # fmt: skip
        theirs = _per_call(before[name]["kernels"], 1)
        diff: dict[str, tuple[float | None, float | None]] = {
            k: (per_call.get(k), v) for k, v in theirs.items() if per_call.get(k) != v
        }
        diff.update({k: (v, None) for k, v in per_call.items() if k not in theirs})
        checks = {
            "backend": gpu.active and gpu.mode.startswith(f"{backend} CUPTI ("),
            "clock": clock.ok and clock.causality_violations == 0 and clock.residual_ns <= MAX_RESIDUAL_NS,
            "probes": probe_residual <= MAX_RESIDUAL_NS,
            "kernels as torch.profiler's before": not diff,
            "kernels as torch.profiler's after": _per_call(after[name]["kernels"], 1) == theirs,
            "spins within 1%": all(abs(e) < 0.01 for e in errors),
            "spins counted": len(errors) == (3 * calls if name == "long_kernels" else 0),
        }
        problems += [(name, check, dict(list(diff.items())[:5])) for check, ok in checks.items() if not ok]
    assert not problems, problems


# -- beyond torch --------------------------------------------------------------------------------------------

CUPY = """
import cupy as cp
scale = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 2.0f", "inferscope_scale")
a = cp.ones((2048, 2048), dtype=cp.float32)
b = cp.empty_like(a)
def body():
    for _ in range(10):
        scale(a, b)
    return a @ a
body(); cp.cuda.Device().synchronize()
def call():
    body()
out = ours("cupy", call, cp.cuda.Device().synchronize)
r = pytest_inferscope.measure(body, rounds=3, warmup=1, name="cupy-measure")
out["measure"] = measured(r)
out["libcupti"] = libcupti()
print(json.dumps(out))
"""

JAX = """
import jax, jax.numpy as jnp
@jax.jit
def step(x):
    return jnp.tanh(x @ x) * 0.5
x = jnp.ones((2048, 2048), jnp.float32)
step(x).block_until_ready()
def body():
    y = x
    for _ in range(5):
        y = step(y)
    y.block_until_ready()
out = ours("jax", body, lambda: None)
r = pytest_inferscope.measure(body, rounds=3, warmup=1, name="jax-measure")
out["measure"] = measured(r)
out["libcupti"] = libcupti()
out["devices"] = str(jax.devices())
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("framework", ["cupy", "jax"])
def test_cupy_and_jax_bodies_are_profiled_without_torch(framework: str, backend: str) -> None:
    if importlib.util.find_spec(framework) is None:
        if _required():
            pytest.fail(f"INFERSCOPE_GPU=required but {framework} is not installed here")
        pytest.skip(f"{framework} not installed")
    script = f"BENCH = {str(BENCH)!r}\n" + COMMON + TIGHTEST + (CUPY if framework == "cupy" else JAX)
    out = run_python(script, backend, timeout=240)
    kernels, clock, measured = out["kernels"], out["clock"], out["measure"]["clock"]
    _report(f"{backend} {framework}", kernels=sum(kernels.values()), names=sorted(kernels)[:4],
            driver_records=out["driver_records"], rate=f"{clock['rate']:.6f}",
            probe_residual_us=f"{out['probe_residual_ns'] / 1e3:.2f}", causality=clock["causality_violations"],
            launches_per_round=out["measure"]["launches_per_round"], libcupti=out["libcupti"])  # fmt: skip
    assert not out["torch_loaded"], "the body and the plugin must not need torch"
    assert out["gpu"]["active"] and out["gpu"]["mode"].startswith(f"{backend} CUPTI (")
    for fit in (clock, measured):
        assert fit["ok"] and fit["causality_violations"] == 0 and abs(fit["rate"] - 1) < 1e-3, fit
    assert out["probe_residual_ns"] <= MAX_RESIDUAL_NS
    if framework == "cupy":
        assert kernels.get("inferscope_scale") == 10 and sum(kernels.values()) >= 11, kernels
    else:
        assert sum(kernels.values()) >= 5 and out["driver_records"] > 0, kernels


SMALL_CAP = """
import json, torch
from pytest_inferscope import api, api_measure
from pytest_inferscope.collectors.gpu import max_records_for

x = torch.ones(256, device="cuda")
torch.cuda.synchronize()
r = api_measure.measure(lambda: [x.add_(1) for _ in range(2000)], rounds=4, warmup=1, trace_rounds="all", cpu="off")
settings = api.standalone_settings()
backend = api._gpu_choice(settings.gpu, settings.trace_size_mb).collector  # the one measure() used (cached)
print(json.dumps({"trace_size_mb": settings.trace_size_mb, "backend_dropped": backend.dropped(),
                  "dropped": r.dropped_events, "samples": len(r.latency.samples_ms), "cap": max_records_for(0.05)}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_config_files_trace_size_caps_the_gpu_records_and_keeps_every_round(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trace_size_mb from the config file (not the environment) reaches the backend; 10,000 kernels overflow it."""
    if backend == "cupti-python" and importlib.util.find_spec("cupti") is None and not _required():
        pytest.skip("cupti-python not installed")
    (tmp_path / ".inferscope.yaml").write_text("trace_size_mb: 0.05\n")
    monkeypatch.chdir(tmp_path)  # the config file of the working folder, as measure() reads it
    monkeypatch.delenv("INFERSCOPE_TRACE_SIZE_MB", raising=False)
    out = run_python(SMALL_CAP, backend, timeout=240)
    _report(f"{backend} small cap", **out)
    assert out["trace_size_mb"] == 0.05 and out["samples"] == 4  # the latency samples are never dropped
    # 5 calls x 2,000 kernels and as many launch records: the backend keeps `cap` of them and counts the rest
    assert out["backend_dropped"] >= 2 * 5 * 2000 - out["cap"], out
    assert out["dropped"] >= out["backend_dropped"]


def test_no_gpu_process_is_left_behind() -> None:
    """Runs last in this module: every interpreter above has exited; none still holds the GPU (or CUPTI)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi not found")
    query = [smi, "--query-compute-apps=pid,process_name", "--format=csv,noheader"]
    listed = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    others = [line for line in listed if line.split(",")[0].strip() != str(os.getpid())]
    _report("GPU processes after the backend tests", listed=listed or "none")
    assert not others, others


if __name__ == "__main__":  # the scripts, for reading: python3 tests/gpu/test_gpu_backends.py
    print(textwrap.dedent(COMMON + TIGHTEST + PROOF))
