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
    pytester.makepyfile(SHORT_BODY)
    result = pytester.runpytest("--inferscope-report=out", "--inferscope-sampler=thread", "-p", "no:randomly")
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


def test_counted_cpu_samples_give_hotspots_and_no_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SHORT_BODY.replace("sys.setswitchinterval(100.0)", "pass"))
    result = pytester.runpytest("--inferscope-report=out", "--inferscope-sampler=signal", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    md, data = _report(pytester.path / "out", "report.md")
    assert data["analysis"]["metrics"]["cpu.samples"] > 0
    assert data["analysis"]["no_samples_reason"] == ""
    assert "No CPU samples" not in md and ":test_short (" in md  # the hotspot, module:function (file:line)
