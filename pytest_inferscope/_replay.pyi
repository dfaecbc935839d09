"""Type stub for the replay's walk in C, `native/_replay.c` (see native/README.md)."""

from typing import Any

def walk(
    kinds: Any,
    durs: Any,
    ops_at: Any,
    ops: Any,
    waits_at: Any,
    waits: Any,
    op_start: Any,
    op_lat: Any,
    op_floor: Any,
    op_after: Any,
    op_gap: Any,
    op_dur: Any,
    counted: Any,
    start_out: Any,
    end_out: Any,
    segment: int,
    external: int,
    blocking: int,
    /,
) -> tuple[int, int]:
    """The replay's walk (analyzer/replay.py `_walk`) over C-contiguous arrays: kinds int8 by node, the rest
    int64; node i issues ops[ops_at[i]:ops_at[i+1]] and, blocking, waits for waits[waits_at[i]:waits_at[i+1]].
    Writes each op's start and end into start_out and end_out; returns (round_ns, host_ns)."""
