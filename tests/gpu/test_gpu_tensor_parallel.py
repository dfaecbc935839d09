"""A tensor-parallel forward over two GPUs through NCCL: communication told apart from compute.

Two processes, one GPU each (as torchrun starts them), run the same row-parallel MLP: each multiplies the
activations by its slice of the weights and an all-reduce (an NCCL kernel on NCCL's stream) sums the partial
results. The activations are large and the slices thin, so each rank's step is mostly the all-reduce, which
nothing overlaps: the what-if diagnosis must call it `communication_bound` (collectives fully overlapped
saving the most), the `communication` finding gives each rank's communication time and its overlap with
compute, and the NCCL kernels must not count as GPU compute. Both backends, INFERSCOPE_GPU=required.
Needs two GPUs (skips with fewer, fails under INFERSCOPE_GPU=required). NVLink multicast stays off.
Lines starting "INFERSCOPE-GPU" are the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_gpu_backends import BACKENDS, CRASH, REPO, _report
from test_gpu_two_devices import NO_MULTICAST

pytestmark = [pytest.mark.gpu, pytest.mark.gpus(2)]

RANK = """
import json, os, sys
import torch
import torch.distributed as dist
from pytest_inferscope import api
from pytest_inferscope.events import Kind

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
torch.manual_seed(rank)
# 128 MB all-reduced per layer, a thin matrix product (TP_SLICE: a wider one, for recording a compute-heavy step)
TOKENS, HIDDEN, SLICE, LAYERS = 8192, 8192, int(os.environ.get("TP_SLICE", "256")), 4
w_in = [torch.randn(HIDDEN, SLICE, device="cuda", dtype=torch.bfloat16) / HIDDEN**0.5 for _ in range(LAYERS)]
w_out = [torch.randn(SLICE, HIDDEN, device="cuda", dtype=torch.bfloat16) / SLICE**0.5 for _ in range(LAYERS)]
x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16)


def body():
    h = x
    with torch.no_grad():
        for a, b in zip(w_in, w_out):
            partial = torch.relu(h @ a) @ b  # this rank's share of the layer
            dist.all_reduce(partial)  # the sum over the ranks
            h = partial
    return h


for _ in range(3):
    body()
torch.cuda.synchronize()
dist.barrier()
sink = api.Profile(f"tp-rank{rank}")
with api.collecting(sink.name, sink, rounds=6, warmup=1, report_dir=os.environ["REPORT_DIR"], thresholds=None,
                    cpu=None) as coll:
    coll.run_rounds(body, 6, 1)
dist.barrier()
tl, res = sink.timeline, sink.result
a = res.analysis
strings = tl.strings
kernels = {strings[n] for n in tl.events["name"][tl.events["kind"] == Kind.KERNEL]}
nccl = sorted(k[:80] for k in kernels if "nccl" in k.lower())
gpu = next((c for c in res.collectors if c.name == "gpu"), None)
print(json.dumps({
    "rank": rank, "mode": gpu and gpu.mode, "device": torch.cuda.current_device(),
    "bottleneck": a.bottleneck, "confidence": a.confidence, "verdict": a.whatif_replay.get("verdict"),
    "whatifs": {w.change: [w.saved_ms, w.bottleneck] for w in a.whatif},
    "metrics": {k: v for k, v in a.metrics.items() if "communication" in k or k == "gpu.busy_fraction"},
    "findings": {f.rule: [f.summary, f.cause, {k: str(v) for k, v in f.evidence.items()}] for f in a.findings},
    "nccl_kernels": nccl, "files": res.files, "median_ms": res.latency.median,
}))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(backend: str, tmp_path: Path, world: int = 2, timeout: int = 300) -> list[dict[str, Any]]:
    """The RANK script in `world` processes, as torchrun would start them; each one's last line, parsed."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            **NO_MULTICAST,
            "INFERSCOPE_COLLECTOR": backend,
            "INFERSCOPE_GPU": "required",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "REPORT_DIR": str(tmp_path / f"rank{rank}"),
        }  # fmt: skip
        env.pop("CUDA_VISIBLE_DEVICES", None)
        procs.append(
            subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
        )  # fmt: skip
    outs = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            out, err = proc.communicate()
            pytest.fail(f"{backend} rank {rank}: ran past {timeout} s\n{err[-3000:]}")
        crashed = [c for c in CRASH if c in err]
        assert proc.returncode == 0 and not crashed, f"{backend} rank {rank}: exit {proc.returncode}\n{err[-4000:]}"
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_parallel_forward_is_communication_bound(backend: str, tmp_path: Path) -> None:
    ranks = run_ranks(backend, tmp_path)
    for r in ranks:
        _report(f"{backend} tensor parallel rank {r['rank']}", bottleneck=r["bottleneck"],
                confidence=round(r["confidence"], 2), median_ms=round(r["median_ms"], 3), metrics=r["metrics"],
                whatifs=r["whatifs"])  # fmt: skip
        _report(f"{backend} tensor parallel rank {r['rank']}", verdict=r["verdict"],
                finding=r["findings"].get("communication"), nccl=r["nccl_kernels"][:2])  # fmt: skip
    for r in ranks:
        assert r["device"] == r["rank"]
        # NCCL's kernels were recorded and recognised as communication, not compute.
        assert r["nccl_kernels"], r
        m = r["metrics"]
        assert m["gpu.communication_fraction"] > 0.3 and m["gpu.communication_exposed_fraction"] > 0.3, m
        assert m["gpu.communication_overlap"] is not None and m["gpu.communication_overlap"] < 0.5, m
        # The finding names the communication per device, with its overlap; the diagnosis calls it.
        summary, cause, evidence = r["findings"]["communication"]
        device = f"device {r['rank']}"  # CUPTI's device id: the CUDA ordinal, all GPUs in sight
        assert cause == "communication_bound" and set(evidence) >= {device, "collective 1"}, evidence
        assert summary.startswith("Collective kernels took") and device in summary, summary
        assert "overlapped by compute" in evidence[device] and "nccl" in evidence["collective 1"].lower()
        assert r["bottleneck"] == "communication_bound", (r["bottleneck"], r["whatifs"])
        overlapped, cls = r["whatifs"]["collectives fully overlapped with compute"]
        assert cls == "communication_bound" and overlapped > 0.3 * r["median_ms"], r["whatifs"]
        assert r["whatifs"]["collectives 2x faster"][0] < overlapped
        # The GPU 2x faster what-if leaves the collectives alone: it saves less than they cost.
        assert r["whatifs"]["GPU work 2x faster"][0] < overlapped, r["whatifs"]
        report = json.loads((tmp_path / f"rank{r['rank']}" / r["files"]["json"]).read_text())
        assert report["analysis"]["bottleneck"] == "communication_bound"
