"""What a user reads in a profiled test's reports where the plain figures would mislead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

#: A pure-Python body of ~1 ms, shorter than the GIL's switch interval. The fixture lengthens that interval for the
#: test, so that no forced hand-over lets the thread sampler in during a round: what a 1 ms round does by chance
#: (most of the time) it does every time here.
SHORT_BODY = """
import sys
import pytest

@pytest.fixture
def no_forced_switch():
    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    yield
    sys.setswitchinterval(old)

@pytest.mark.inferscope(rounds=60, warmup=1)
def test_short(no_forced_switch):
    s = 0
    for i in range(20000):
        s += i * i
"""


def _report(out: Path, name: str) -> tuple[str, dict]:
    (d,) = [p for p in out.iterdir() if p.is_dir() and p.name != "assets"]
    return (d / name).read_text(), json.loads((d / "report.json").read_text())


def test_no_cpu_samples_says_the_thread_sampler_got_in_only_between_rounds(pytester: pytest.Pytester) -> None:
    # In a process of its own: where a CUDA context is active in the process (an earlier test's, in this xdist
    # worker), each round ends by waiting for the device, which lets the GIL go inside the round, and the thread
    # sampler gets in there (15-17 samples in 60 such rounds against 0 on the 2-core VM, a fake backend's wait of
    # 50 µs, 2026-12-01); on an H200 host the test failed so in one of four suite runs, 3 samples counted.
    pytester.makepyfile(SHORT_BODY)
    result = pytester.runpytest_subprocess(
        "--inferscope-report=out", "--inferscope-sampler=thread", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    md, data = _report(pytester.path / "out", "report.md")
    assert data["analysis"]["metrics"]["cpu.samples"] == 0  # none counted: the case this is about
    header = re.search(r"stack sampling every 10 ms(?:; (\d+) samples?, one per)?", md)
    assert header is not None
    taken = int(header[1] or 0)  # as many as the header counts
    said = (
        f"{taken} sample{' was' if taken == 1 else 's were'} taken, none inside a measured round"
        if taken
        else ("the sampler took no sample in the")
    )
    assert f"_No CPU samples: {said}" in md
    assert "the thread sampler needs the GIL" in md and "--inferscope-sampler=signal samples inside" in md
    assert data["analysis"]["no_samples_reason"].startswith(said)
    html, _ = _report(pytester.path / "out", "report.html")
    assert f"No CPU samples: {said}" in html


#: Rounds of 3 ms by the clock, not 20,000 additions (~1 ms here, so a 5x faster machine's 60 rounds would span about
#: one sampling period and could take no sample): 60 of them span 18 periods on any machine.
TIMED_BODY = """
import time
import pytest

@pytest.mark.inferscope(rounds=60, warmup=1)
def test_short():
    end = time.perf_counter() + 0.003
    while time.perf_counter() < end:
        pass
"""


def test_counted_cpu_samples_give_hotspots_and_no_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TIMED_BODY)
    result = pytester.runpytest("--inferscope-report=out", "--inferscope-sampler=signal", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    md, data = _report(pytester.path / "out", "report.md")
    assert data["analysis"]["metrics"]["cpu.samples"] > 0
    assert data["analysis"]["no_samples_reason"] == ""
    assert "No CPU samples" not in md and ":test_short (" in md  # the hotspot, module:function (file:line)


LONG_IDS = """
import pytest

class TestResnetPipeline:
    @pytest.mark.parametrize("device", ["cpu-fp32-batch64", "cpu-bf16-batch128"])
    @pytest.mark.inferscope(rounds=3, warmup=0)
    def test_batch_inference_latency(self, device):
        sum(i * i for i in range(2000))

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_short():
    pass
"""


def _table(stdout: list[str]) -> list[str]:
    """The summary table's lines: after the inferscope separator, before the first 'inferscope:' line."""
    start = next(i for i, line in enumerate(stdout) if "= inferscope =" in line) + 1
    end = next(i for i in range(start, len(stdout)) if stdout[i].startswith("inferscope"))
    return stdout[start:end]


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_the_summary_table_fits_the_terminal(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    pytester.makepyfile(**{"perf/test_inference_pipeline_latency_suite": LONG_IDS})
    monkeypatch.setenv("COLUMNS", str(columns))
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=3)
    table = _table(result.outlines)
    assert all(len(line) <= columns for line in table), "\n".join(table)
    text = "\n".join(table)
    for name in ("test_batch_inference_latency[cpu-fp32-batch64]", "test_batch_inference_latency[cpu-bf16-batch128]",
                 "test_short"):  # fmt: skip
        assert name in text  # the test's function name, whole, for every test
    for word in ("median ms", "± IQR", "spread", "rounds", "bottleneck", "verdict"):
        assert word in text
    assert text.count(" ± ") == 3 + 1 and text.count("pass") == 3  # every test's figures
    assert len(re.findall(r"\w+_bound \(\d+%\)|unclassified", text)) == 3
    if columns == 200:  # a wide terminal: as before, one line a test, ids past 60 characters cut in the middle
        assert len(table) == 4 and "test_short" in table[-1] and "…" in table[1] and len(table[1].split()[0]) == 60


def test_an_unclassified_test_reads_why_not_a_confidence(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sleep's round on a loaded machine also waits for a core on waking: runnable, CPU demand, cpu_bound's (83% of
    # the round after a 2 ms sleep, 68% after a 100 ms one, beside other processes on the 2-core VM). What is checked
    # is how a test no rule names a class for reads: the rounds' counters read no such wait here, as on a kernel that
    # hides it (no schedstat), so the body is off CPU whatever the machine's load.
    from pytest_inferscope.collectors import memory

    monkeypatch.setattr(memory.ProcFiles, "runqueue_ns", lambda self: 0)
    monkeypatch.setattr(memory, "read_schedstat", lambda: (0, 0))
    pytester.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=0)
        def test_sleeps():
            time.sleep(0.002)  # off CPU, no GPU: no rule names a class
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    row = next(line for line in _table(result.outlines) if line.startswith("test_an_unclassified"))
    assert row.split()[-2:] == ["unclassified", "pass"]  # no percentage after it
    md, data = _report(pytester.path / "out", "report.md")
    why = data["analysis"]["unclassified_reason"]
    assert data["analysis"]["bottleneck"] == "unclassified" and why
    assert f"**unclassified**: {why}." in md and "confidence 100%" not in md
    index = (pytester.path / "out" / "index.md").read_text()
    assert "| unclassified |" in index
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="inferscope.unclassified_reason"' in junit


RAISES_EARLY = """
import pytest

CALLS = []

@pytest.mark.inferscope(rounds=5, warmup=0)
def test_raises_first():
    sum(i * i for i in range(100_000))
    raise RuntimeError("boom")

@pytest.mark.inferscope(rounds=5, warmup=3)
def test_raises_in_warmup():
    CALLS.append(1)
    sum(i * i for i in range(100_000))
    if len(CALLS) == 3:
        raise RuntimeError("boom")
"""


def test_a_test_with_no_measured_round_names_no_class_and_counts_no_warm_up(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_early=RAISES_EARLY)
    result = pytester.runpytest("--inferscope-report=out", "--junitxml=junit.xml", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    rows = [line for line in _table(result.outlines) if line.startswith("test_early.py::")]
    # the latency reads the same in the terminal, index.md and index.html: none (and no IQR or spread of nothing)
    assert [row.split()[1:] for row in rows] == [["none", "0", "unclassified", "partial"]] * 2
    out = pytester.path / "out"
    for name, raised in (("test_raises_first", "in its first measured round"), ("test_raises_in_warmup", "during")):
        (d,) = out.glob(f"test_early.py__{name}-*")
        data = json.loads((d / "report.json").read_text())
        assert data["measured_rounds"] == 0 and data["latency"]["samples_ms"] == []
        assert data["analysis"]["bottleneck"] == "unclassified"
        md = (d / "report.md").read_text()
        assert f"**unclassified**: no measured round completed (the body raised {raised}" in md
        assert "0 measured rounds completed" in md and "End-to-end latency: none (no measured round completed)" in md
    index = (out / "index.md").read_text()
    assert index.count("| none | 0 | unclassified |") == 2
    html = (out / "index.html").read_text()
    assert html.count('<td class="num" title="no measured round completed">none</td><td class="num"></td>') == 2
    assert '<td class="num">n/a</td>' not in html
    assert junit_count(pytester.path / "junit.xml", "inferscope.bottleneck", "unclassified") == 2


def junit_count(path: Path, name: str, value: str) -> int:
    import xml.etree.ElementTree as ET

    return sum(1 for p in ET.parse(path).getroot().iter("property") if (p.get("name"), p.get("value")) == (name, value))
