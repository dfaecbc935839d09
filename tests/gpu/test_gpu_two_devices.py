"""Two GPUs in one process: a model split across cuda:0 and cuda:1 with a copy between them.

For each backend, in a fresh interpreter with the backend forced and INFERSCOPE_GPU=required: the first half of
a stack of linear layers on cuda:0, its output copied to cuda:1 for the second half, the result copied back.
torch runs a cross-device copy on the source device's stream and makes the destination's stream wait for it,
so device 1 sits idle until device 0's half and the copy are done. Checked: the GPU lanes of both devices
(report.html, trace.json.gz), the peer copies' direction (MEMCPY2 records: 0→1 and 1→0), busy and idle time per
device, and the idle cause naming the GPU waited for (`peer_wait`, in the finding and the diagnosis).
Needs two GPUs (skips with fewer, fails under INFERSCOPE_GPU=required). NVLink multicast stays off.
Lines starting "INFERSCOPE-GPU" are the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from test_gpu_backends import BACKENDS, _report, run_python

pytestmark = [pytest.mark.gpu, pytest.mark.gpus(2)]

#: NVLink SHARP / multicast off in everything started here (the machines' note: KINDS.md).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

SPLIT = """
import json
import numpy as np, torch
from pytest_inferscope import api
from pytest_inferscope.analyzer import idle_gaps
from pytest_inferscope.events import Kind, copy_devices, copy_direction, peer_copies

report_dir = REPORT_DIR
torch.manual_seed(0)
first = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).to("cuda:0")
second = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).to("cuda:1")
x = torch.randn(512, 4096, device="cuda:0")


def body():
    with torch.no_grad():
        h = first(x).to("cuda:1")  # the copy 0->1
        return second(h).to("cuda:0")  # and back, 1->0


for _ in range(3):
    body()
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
sink = api.Profile("two-gpus")
with api.collecting(sink.name, sink, rounds=5, warmup=1, report_dir=report_dir, thresholds=None, cpu=None,
                    trace_rounds=1) as coll:
    coll.run_rounds(body, 5, 1)
tl, res = sink.timeline, sink.result
ev = tl.events
copies = ev[ev["kind"] == Kind.MEMCPY]
peer = copies[peer_copies(copies["flags"])]
src, dst = copy_devices(peer["flags"])
gaps = idle_gaps(tl)
gpu = next(c for c in res.collectors if c.name == "gpu")
a = res.analysis
print(json.dumps({
    "mode": gpu.mode,
    "kernels_by_device": {str(d): int(np.count_nonzero((ev["kind"] == Kind.KERNEL) & (ev["device"] == d)))
                          for d in (0, 1)},
    "copies": [[copy_direction(int(f)), int(d), int(v)] for f, d, v in zip(copies["flags"], copies["device"],
                                                                             copies["value"])][:12],
    "peer": sorted({(int(s), int(t)) for s, t in zip(src, dst)}),
    "streams": a.gpu["streams"], "copies_table": a.gpu["copies"],
    "by_cause": a.gpu["idle_gaps"]["by_cause_ms_per_round"],
    "gap_devices": sorted({int(d) for d in gaps.device}),
    "peer_waits": {f"{d}<-{p}": ns / 1e6 for (d, p), ns in gaps.peer_waits().items()},
    "note": a.whatif_replay.get("peer_wait", ""),
    "findings": {f.rule: f.summary for f in a.findings},
    "metric": a.metrics.get("gpu.idle_peer_wait_fraction"),
    "files": res.files, "bottleneck": a.bottleneck,
}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_model_split_across_two_gpus(backend: str, tmp_path: Path) -> None:
    script = SPLIT.replace("REPORT_DIR", repr(str(tmp_path)))
    out = run_python(script, backend, **NO_MULTICAST)
    _report(f"{backend} two GPUs", **{k: out[k] for k in ("kernels_by_device", "peer", "by_cause", "peer_waits")})
    _report(f"{backend} two GPUs", note=out["note"], bottleneck=out["bottleneck"], copies=out["copies"][:4])
    # Both devices ran their half, and each has its lane in the analysis, report.html and trace.json.
    assert out["kernels_by_device"]["0"] > 0 and out["kernels_by_device"]["1"] > 0
    assert {s["device"] for s in out["streams"]} == {0, 1}
    assert all(s["busy_ms_per_round"] > 0 for s in out["streams"] if s["kernels_per_round"] > 0)
    assert out["gap_devices"] == [0, 1]
    html = (tmp_path / out["files"]["html"]).read_text()
    manifest = re.search(r'<script type="application/json" id="is-manifest">(.*?)</script>', html, re.S)
    assert manifest, "report.html has no timeline"
    labels = [lane["label"] for lane in json.loads(manifest.group(1))["lanes"]]
    for lane in ("GPU 0 · stream", "GPU 1 · stream", "GPU 0 · idle", "GPU 1 · idle"):
        assert any(label.startswith(lane) for label in labels), (lane, labels)
    path = tmp_path / out["files"]["trace"]
    trace = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    processes = {e["args"]["name"] for e in json.loads(trace)["traceEvents"] if e.get("name") == "process_name"}
    assert {"GPU 0", "GPU 1"} <= processes, processes
    # The copies between the GPUs were recorded with their direction (CUPTI's MEMCPY2).
    assert [0, 1] in out["peer"] and [1, 0] in out["peer"], out["copies"]
    assert any(name.startswith("PtoP 0→1 on GPU") for name in out["copies_table"])
    assert "PtoP 0\\u21921" in trace or "PtoP 0→1" in trace
    # Device 1 waited for device 0: the new idle cause, the finding and the diagnosis name both.
    assert out["by_cause"]["peer_wait"] > 0 and out["metric"] > 0
    assert out["peer_waits"].get("1<-0", 0) > 0, out["peer_waits"]
    assert "waiting for device 0" in out["findings"]["peer_wait"]
    assert "device 1 sat idle" in out["note"] and "waiting for device 0" in out["note"]
