"""What a round is: its kind, stored in each ROUND span and each per-round counter row.

A test body is called in rounds: warm-up rounds, measured rounds (the latency samples), and after
them, when GPU activity is collected, profile rounds (a settling round first where the GPU could not be
primed) and trace rounds. Every
later stage selects rounds by their `RoundKind`; this module is the one place that knows how a
kind is stored in a record, and how traces saved before kinds existed encoded it (flag bits).
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy only where arrays are decoded: the plugin imports this module whether or not it profiles
    import numpy as np

#: A ROUND span's flags: bit 1 is the raised bit (`RAISED_FLAG`); bits 8-15 hold the RoundKind.
#: A span (round or scope) whose body raised: a round that raised is no latency sample (the call did not finish).
RAISED_FLAG = 2
_KIND_SHIFT = 8
_KIND_MASK = 0xFF << _KIND_SHIFT

# Flag bits of traces saved before RoundKind (kept only to read them).
_LEGACY_WARMUP = 1
_LEGACY_TRACE = 4
_LEGACY_PROFILE = 8


class RoundKind(enum.IntEnum):
    """Why a round was run, and so what the analyzer reads from it."""

    WARMUP = 1  # before the measured rounds: not a latency sample
    MEASURED = 2  # a latency sample (the probe-added rounds too)
    SETTLING = 3  # lean mode: the first call after CUPTI starts, read by nothing
    PROFILE = 4  # lean mode: GPU activity recorded without the launch calls; the GPU figures come from these
    TRACE = 5  # the launch calls recorded: launch linkage, sync, copy and allocator calls, idle causes

    @property
    def is_sample(self) -> bool:
        """Whether the round's wall time is a latency sample."""
        return self is RoundKind.MEASURED

    @property
    def after_measured(self) -> bool:
        """A settling, profile or trace round: run after the measured ones, its counters left out of theirs."""
        return self in (RoundKind.SETTLING, RoundKind.PROFILE, RoundKind.TRACE)


def kind_flags(kind: RoundKind) -> int:
    """The flag bits that store `kind` in a ROUND span (to be or-ed with the raised bit)."""
    return int(kind) << _KIND_SHIFT


def _legacy_kind(flags: int) -> RoundKind:
    warmup = bool(flags & _LEGACY_WARMUP)
    if flags & _LEGACY_PROFILE:
        return RoundKind.SETTLING if warmup else RoundKind.PROFILE
    if flags & _LEGACY_TRACE:
        # a round flagged both trace and warm-up was read as neither; SETTLING is read by nothing
        return RoundKind.SETTLING if warmup else RoundKind.TRACE
    return RoundKind.WARMUP if warmup else RoundKind.MEASURED


def kinds_of(flags: np.ndarray) -> np.ndarray:
    """The RoundKind (as uint8) of each ROUND span, from its flags; traces saved before kinds are decoded too."""
    import numpy as np

    flags = np.asarray(flags, dtype=np.uint32)
    kinds = ((flags & _KIND_MASK) >> _KIND_SHIFT).astype(np.uint8)
    legacy = (kinds == 0).nonzero()[0]
    for i in legacy:
        kinds[i] = _legacy_kind(int(flags[i]))
    return kinds


def row_kind(row: Mapping[str, Any]) -> RoundKind:
    """The RoundKind of one per-round counter row (`RawTrace.meta["rounds"]`); older rows are decoded too."""
    kind = row.get("kind")
    if kind is not None:
        return RoundKind[kind] if isinstance(kind, str) else RoundKind(kind)
    warmup = bool(row.get("warmup"))
    if row.get("profile"):
        return RoundKind.SETTLING if warmup else RoundKind.PROFILE
    if row.get("trace"):
        return RoundKind.SETTLING if warmup else RoundKind.TRACE
    return RoundKind.WARMUP if warmup else RoundKind.MEASURED


#: Lean mode's profile rounds, unless their number is given: up to this many, ending at the first `in_step` with the
#: measured rounds. One round read the same GPU figures as three (2026-11-25, H100: ViT-B/16, ResNet-50, GPT-2
#: `generate`, docs/performance.md); more run only when one is slowed by something else (a GC pause, other load).
PROFILE_ROUNDS_MAX = 3
#: A round after the measured ones is in step when its wall time is at most this fraction over the measured rounds'
#: median, beyond what its records cost it (`allowance`). The first call after CUPTI starts ran 15-20% slower (the
#: settling round, H100) until the GPU was primed (devsync.DeviceSync.prime).
STEP = 0.10
#: ... or at most this much over (ns): a loaded machine preempts a thread for about a millisecond, which says
#: nothing about a round of a small body.
STEP_SLACK_NS = 1_000_000


#: The trace rounds, unless their number is given: up to this many, ending at the first in step. A trace round
#: disturbed by something else misleads every what-if: the sync loop's on the H100 ran 35.1 ms against 22.1 ms
#: measured, all of it in 37 of its 200 steps (the median step took as long as in the profile round), 2026-11-25.
TRACE_ROUNDS_MAX = 2


def allowance(kind: RoundKind, lean: bool, estimated_cost: float) -> float:
    """What a round after the measured ones may run over them for its records (a fraction of a round), from
    auto's estimate of the GPU activity records' cost: a profile round pays its activity records (none when
    the measured rounds recorded them too); a trace round pays its launch calls' records besides, about as
    many as the activity records."""
    cost = max(0.0, estimated_cost)
    if kind is RoundKind.TRACE:
        return cost * (2.0 if lean else 1.0)
    return cost if lean else 0.0


def in_step(wall_ns: float, measured_ns: Sequence[float] | np.ndarray, record_cost: float = 0.0) -> bool:
    """Whether a profile round of `wall_ns` ran as the measured rounds (`measured_ns`) did, but for the cost of its
    GPU records (`record_cost`, a fraction of a round: auto's estimate, 0 when there is none). True without
    measured rounds to compare with."""
    if not len(measured_ns):
        return True
    bound = float(statistics.median(measured_ns)) * (1.0 + max(0.0, record_cost))
    return float(wall_ns) <= max(bound * (1.0 + STEP), bound + STEP_SLACK_NS)
