"""A CPU-only test on a GPU machine: GPU collection on (the default there) and no CUDA context in the process.

Its rounds end with its body: the end-of-round look at the devices' contexts finds none, and its time is not the
round's; a `pass` body used to measure 1.35-1.51 µs a round with GPU collection on against 0.30-0.48 off (H200 host,
2026-12-01; 0.31-0.33 on since), and a trivial test's one round 0.008 ms against <0.001. Once the body starts CUDA,
the rounds wait for its work again. And a trivial test's report files stay within issue 16's 20 kB with the GPU row's
explanation in them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gpu_backends import BACKENDS, run_python

pytestmark = pytest.mark.gpu

CPU_THEN_GPU = """
import json, os
from pytest_inferscope.collectors import Collection, CollectionOptions
from pytest_inferscope.collectors.gpu import select_backend

coll = Collection(CollectionOptions(cpu="off"), select_backend("required", os.environ["INFERSCOPE_COLLECTOR"]))
coll.start()
for i in range(20):
    with coll.round(i):
        sum(range(1000))
import torch  # CUDA starts in the rounds below, not before
x = torch.ones(1 << 22)
for i in range(20, 25):
    with coll.round(i):
        (x.cuda() * 2).sum()
rows = list(coll.rounds)
coll.stop()
print(json.dumps({"sync_ns": [r["sync_ns"] for r in rows]}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cpu_only_round_ends_with_its_body_and_a_gpu_round_waits_for_its_work(backend: str) -> None:
    out = run_python(CPU_THEN_GPU, backend)
    cpu, gpu = out["sync_ns"][:20], out["sync_ns"][20:]
    assert cpu == [0] * 20, cpu  # no context: nothing waited for, the round's end is its body's
    assert all(ns > 0 for ns in gpu), gpu  # the body's copy and kernels waited for inside the round


def test_a_trivial_tests_report_files_stay_within_20_kb_with_gpu_collection_on(pytester: pytest.Pytester) -> None:
    # tests/plugin/test_plugin.py holds the same test with GPU collection off to 16.5 kB; on a GPU machine the GPU
    # row's explanation (the backend, its libcupti, why no CUPTI round ran) adds ~2.9 kB: 18,958 bytes, H200 host,
    # 2026-12-01.
    pytester.makepyfile(test_small="def test_nothing():\n    pass\n\ndef test_other():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "--inferscope-all",
        "--inferscope-warmup=1",
        "--inferscope-sample-interval-ms=1000",
        "--inferscope-report=out",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=2)
    folders = [p for p in Path(pytester.path / "out").iterdir() if (p / "report.json").is_file()]
    assert len(folders) == 2
    for folder in folders:
        assert "CUPTI" in (folder / "report.md").read_text()  # GPU collection was on
        sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
        assert sum(sizes.values()) <= 20_000, sizes
