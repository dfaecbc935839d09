"""Type stub for the stack sampler's clock in C, `native/_tick.c` (see native/README.md)."""

def start(interval_ns: int, signum: int, thread_id: int = 0, /) -> None:
    """Trip `signum` every `interval_ns` (sent to `thread_id` with pthread_kill when not 0) until stop()."""

def stop() -> int:
    """No trip after it returns; the number of trips since start()."""
