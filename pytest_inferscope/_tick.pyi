"""Type stub for the stack sampler's clock in C, `native/_tick.c` (see native/README.md)."""

from collections.abc import Callable
from types import FrameType

def start(interval_ns: int, callback: Callable[[FrameType | None], object], signum: int, thread_id: int, /) -> None:
    """Every interval: callback(frame) in the main thread by a pending call (thread_id 0), or signum to thread_id."""

def stop() -> int:
    """Nothing after it returns; the number of ticks since start()."""
