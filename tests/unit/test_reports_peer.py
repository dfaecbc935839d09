"""Reports of two GPUs: a peer copy's direction and the device it ran on, and the GPU that waited for the other."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from test_analyzer_peer import split_model
from test_html_report import lane_columns, page_payload
from test_reporters import read_trace

from pytest_inferscope.checks import Plan
from pytest_inferscope.postprocess import process
from pytest_inferscope.reporters.lanes import CATS


def test_every_report_shows_the_peer_copies_direction_and_the_wait(tmp_path: Path) -> None:
    plan = Plan(nodeid="t::split", rounds=1, warmup=0, thresholds={})
    result, _ = process(split_model(), plan, [], report_dir=tmp_path)
    md = (tmp_path / result.files["md"]).read_text()
    assert "| PtoP 0→1 on GPU 0 | 1.0 | 8.00 | 0.500 |" in md
    assert "| PtoP 1→0 on GPU 0 | 1.0 | 8.00 | 0.190 |" in md
    assert "Waiting for another GPU: device 1 sat idle 5.01 ms per round waiting for device 0; " in md
    assert "| GPU idle: peer wait (ms/round) | 9.02 |" in md

    report = json.loads((tmp_path / result.files["json"]).read_text())
    gpu = report["analysis"]["gpu"]
    assert set(gpu["copies"]) == {"PtoP 0→1 on GPU 0", "PtoP 1→0 on GPU 0"}  # not "other"
    assert gpu["idle_gaps"]["by_cause_ms_per_round"]["peer_wait"] == 9.02
    assert report["analysis"]["whatif_replay"]["peer_wait"].startswith("device 1 sat idle 5.01 ms per round waiting")

    trace = read_trace(tmp_path / result.files["trace"])
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpus = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    copies = [e for e in events if e.get("cat") == "memcpy"]
    assert [(gpus[e["pid"]], e["args"]["direction"], e["args"]["bytes"]) for e in copies] == [
        ("GPU 0", "PtoP 0→1", 8 << 20),
        ("GPU 0", "PtoP 1→0", 8 << 20),
    ]
    assert (copies[0]["args"]["src_device"], copies[0]["args"]["dst_device"]) == (0, 1)

    html = (tmp_path / result.files["html"]).read_text()
    assert 'idle-6"></i>peer wait</td>' in html and "Waiting for another GPU: device 1 sat idle" in html
    manifest, blob = page_payload(html)
    lanes = {lane["label"]: lane_columns(lane, blob) for lane in manifest["lanes"]}
    stream = lanes["GPU 0 · stream 7"]
    is_copy = stream["peer"] > 0
    assert [CATS["stream"][int(c)] for c in stream["cat"][is_copy]] == ["copy PtoP", "copy PtoP"]
    assert [(int(p) & 15) - 1 for p in stream["peer"][is_copy]] == [0, 1]  # source devices
    assert [(int(p) >> 4) - 1 for p in stream["peer"][is_copy]] == [1, 0]  # destination devices
    idle1 = lanes["GPU 1 · idle"]
    waits = np.array([CATS["idle"][int(c)] == "peer wait" for c in idle1["cat"]])
    assert waits.any() and (idle1["peer"][waits] == 1).all()  # device 0, + 1
    assert (idle1["peer"][~waits] == 0).all()
