"""The progress line for slow post-processing: on a terminal after a delay, never otherwise."""

from __future__ import annotations

import time

import pytest

from pytest_inferscope.reporters.progress import count_label, slow_notice


class Terminal:
    def __init__(self, tty: bool) -> None:
        self.isatty = tty
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def test_the_line_comes_only_after_the_delay_on_a_tty() -> None:
    slow, fast, piped = Terminal(True), Terminal(True), Terminal(False)
    with slow_notice(slow, "t.py::test_big", 1_234_567, after_s=0.05):
        end = time.monotonic() + 30.0  # until the line is written: a loaded machine starts the timer's thread late
        while not slow.lines and time.monotonic() < end:
            time.sleep(0.01)
    with slow_notice(fast, "t.py::test_small", 10, after_s=0.2):
        pass
    with slow_notice(piped, "t.py::test_big", 1_234_567, after_s=0.0):
        time.sleep(0.2)
    with slow_notice(None, "t.py::test_big", 5, after_s=0.0):
        time.sleep(0.05)
    time.sleep(0.4)  # a cancelled timer must not fire late
    assert slow.lines == ["inferscope: post-processing t.py::test_big (1.2M events)…"]
    assert fast.lines == [] and piped.lines == []
    assert count_label(999_999) == "999,999" and count_label(2_000_000) == "2.0M"


SLOW = """
import pytest

@pytest.mark.inferscope(rounds=1, warmup=0)
def test_profiled():
    sum(range(1000))
"""


@pytest.mark.parametrize("tty", [True, False])
def test_the_session_writes_it_through_the_terminal_reporter_on_a_tty_only(
    pytester: pytest.Pytester, tty: bool
) -> None:
    pytester.makepyfile(SLOW)
    # Post-processing here takes milliseconds: no delay makes the line due at once; a tty is pretended. The timer's
    # thread may start after those milliseconds on a loaded machine (and the block's end cancel it unrun), so on a
    # tty an added rule keeps the post-processing going until the line is written.
    pytester.makeconftest(f"""
import threading
import pytest
from pytest_inferscope.reporters import progress

progress.PROGRESS_AFTER_S = 0.0
WRITTEN = threading.Event()

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    terminal.isatty = lambda: {tty!r}
    write_line = terminal.write_line

    def noted(line, **kwargs):
        write_line(line, **kwargs)
        if line.startswith("inferscope: post-processing"):
            WRITTEN.set()

    terminal.write_line = noted

def pytest_inferscope_rules(config):
    def until_the_line_is_written(ctx):
        WRITTEN.wait(60 if {tty!r} else 0)
        return []

    return [until_the_line_is_written]
""")
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    line = "inferscope: post-processing test_the_session_writes_it_through*::test_profiled (* events)…"
    if tty:
        result.stdout.fnmatch_lines([line])
    else:
        result.stdout.no_fnmatch_line(line)
