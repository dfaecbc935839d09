"""Real models under the plugin as a user runs it: pytest, the marker, default settings, reports written.

The models of tests/gpu/real_models.py (random weights, nothing downloaded) that were not written here, each
a marked test in a fresh pytest process with INFERSCOPE_GPU=required; the class and the top what-if each
report names must be the ones its build gives (launch-heavy batch-1 models, an fp32 convolutional batch, a
feed from pageable memory). What `calibrate_whatif.py` found with every round recorded must hold with the
defaults too: one trace round, auto choosing the rest (docs/scenarios.md, "Nine real models").
Lines starting "INFERSCOPE-GPU" are the numbers for docs/gpu-validation.md (run with -s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: model -> (the class, the change of the top what-if).
EXPECTED = {
    "bert_base_b1_s128": ("launch_bound", "a CUDA graph"),
    "mobilenet_v3_b1": ("launch_bound", "a CUDA graph"),
    "convnext_tiny_b64_fp32": ("gpu_bound", "GPU work 2x faster"),
    "resnet18_b64_pageable_upload": ("transfer_bound", "copies pinned"),
}
TEST_FILE = """
import sys
sys.path.insert(0, {here!r})
import pytest
import torch
from real_models import build_models

torch.set_num_threads(1)
BODIES = build_models(torch.device("cuda"), False, {names!r})


@pytest.mark.inferscope
@pytest.mark.parametrize("name", {names!r})
def test_model(name):
    BODIES[name]()
"""


def test_real_models_get_their_class_under_the_plugin_defaults(tmp_path: Path) -> None:
    for package in ("torchvision", "transformers"):
        pytest.importorskip(package)
    names = sorted(EXPECTED)
    (tmp_path / "test_real.py").write_text(TEST_FILE.format(here=str(HERE), names=names))
    env = {**os.environ, "INFERSCOPE_GPU": "required",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "test_real.py", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--inferscope-report=rep"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    got = {}
    for entry in json.loads((tmp_path / "rep" / "index.json").read_text())["tests"]:
        report = json.loads((tmp_path / "rep" / entry["files"]["json"]).read_text())
        name = entry["nodeid"].split("[", 1)[1].rstrip("]")
        a = report["analysis"]
        top = a["whatif"][0]["change"] if a["whatif"] else None
        got[name] = (a["bottleneck"], top)
        decided = a["whatif_replay"].get("decided_by")
        print(f"INFERSCOPE-GPU real model {name}: class={a['bottleneck']} ({a['confidence']:.2f}), top={top}, "
              f"median_ms={report['latency']['median']:.3f}, decided_by={decided}")  # fmt: skip
    assert set(got) == set(names), got
    for name, (cls, change) in EXPECTED.items():
        assert got[name][0] == cls and (got[name][1] or "").startswith(change), (name, got[name])
