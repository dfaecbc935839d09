"""Type stub for the stack sampler's clock in C, `native/_tick.c` (see native/README.md)."""

from collections.abc import Callable
from types import FrameType

def start(
    interval_ns: int,
    callback: Callable[[FrameType | None], object],
    signum: int,
    thread_id: int,
    watch_id: int = 0,
    watch_tid: int = 0,
    nudge_ns: int = 0,
    /,
) -> None:
    """Every interval: callback(frame) in the main thread by a pending call (thread_id 0), or signum to thread_id; with
    watch_id and watch_tid (a thread's pthread id and native id), whether that thread is at work first (`at_work`);
    with nudge_ns, a pending call still queued that long after its tick, the thread at work, is nudged by a GIL
    hand-over (`nudges`)."""

def at_work() -> int:
    """The watched thread's CPU clock (ns) at the last tick that called or signalled if it found it at work (on a CPU
    or runnable), else -1."""

def stop() -> int:
    """Nothing after it returns; the number of ticks since start()."""

def nudges() -> int:
    """The GIL hand-overs made for pending calls since start()."""
