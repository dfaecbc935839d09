"""--inferscope-ab next to processes spinning on its pinned core: the verdict says the core was busy (docs/ab.md,
"A busy pinned core"). The verdict itself is not asserted: which way the scheduler's preemptions fall is chance, and
what the gate promises is that a verdict on a busy core holds on the rounds' CPU time too, or says it cannot judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from test_ab import make_repo, run

from pytest_inferscope.ab.paired import BUSY_MIN

BODY = """
import pytest

def work(n):
    acc = 1
    for _ in range(n):
        acc = (acc * 31 + 7) % 1_000_003
    return acc

@pytest.mark.inferscope(rounds=10, warmup=1)
def test_same():
    work(150_000)  # ~9 ms a round: a 1 ms one ran ahead of the spinners at times (busy 0.06 once, 0.2 needed)
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs os.sched_setaffinity (Linux)")
def test_a_busy_pinned_core_is_said(pytester: pytest.Pytester) -> None:
    root = make_repo(pytester, BODY, BODY)
    core = sorted(os.sched_getaffinity(0))[-1]  # the core the A/B pins to: the last this session may use
    spin = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        result = run(pytester, "--inferscope-ab=HEAD~1", "--junitxml=junit.xml", f"--inferscope-report={root / 'out'}")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert result.ret in (0, 1), result.stdout.str()  # (1: a verdict that held on both clocks, by chance)
    (report,) = (root / "out").glob("test_x.py__test_same*/report.json")
    ab = json.loads(report.read_text())["ab"]
    assert ab["busy"] >= BUSY_MIN, ab
    assert "busy" in ab["reason"], ab["reason"]
    assert ab["verdict"] == "inconclusive" or "the rounds' CPU time gives the same verdict" in ab["reason"]
    assert len(ab["clocks"]["ref_wait_ms"]) == ab["pairs"] and all(x is not None for x in ab["clocks"]["ref_cpu_ms"])
    props = {p.get("name"): p.get("value") for p in ET.parse(root / "junit.xml").iter("property")}
    assert float(props["inferscope.ab.core_busy"]) == pytest.approx(ab["busy"], rel=1e-5)
