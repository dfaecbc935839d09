"""A progress line for slow post-processing, on an interactive terminal only.

Merging, analysing and writing the reports of a big collection can take seconds; without a word
the session looks stuck after the test body finished. `slow_notice` says what is happening once
the work has taken longer than `PROGRESS_AFTER_S`, through pytest's terminal reporter, and only
when it writes to a tty: captured output, CI logs and pytester runs never see it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

#: Seconds of post-processing before the line is written.
PROGRESS_AFTER_S = 1.0


def count_label(n: int) -> str:
    """1234 -> '1,234', 1234567 -> '1.2M'."""
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n:,}"


@contextlib.contextmanager
def slow_notice(terminal: Any, nodeid: str, events: int, after_s: float | None = None) -> Iterator[None]:
    """Within the block, write "inferscope: post-processing <nodeid> (<n> events)…" once `after_s`
    (default `PROGRESS_AFTER_S`) has passed.

    `terminal` is pytest's TerminalReporter (or None: nothing is written). The line is written by
    a timer thread while the caller works; the block's own work never writes to the terminal, so
    the two cannot interleave.
    """
    isatty = getattr(terminal, "isatty", False)
    if terminal is None or not (isatty() if callable(isatty) else isatty):
        yield
        return
    text = f"inferscope: post-processing {nodeid} ({count_label(events)} events)…"
    timer = threading.Timer(PROGRESS_AFTER_S if after_s is None else after_s, terminal.write_line, args=(text,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
