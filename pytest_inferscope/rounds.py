"""What a round is: its kind, stored in each ROUND span and each per-round counter row.

A test body is called in rounds: warm-up rounds, measured rounds (the latency samples), and after
them, when GPU activity is collected, a settling round, profile rounds and trace rounds. Every
later stage selects rounds by their `RoundKind`; this module is the one place that knows how a
kind is stored in a record, and how traces saved before kinds existed encoded it (flag bits).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import numpy as np

#: A ROUND span's flags: bit 1 is the raised bit (collectors.RAISED_FLAG); bits 8-15 hold the RoundKind.
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
    flags = np.asarray(flags, dtype=np.uint32)
    kinds = ((flags & _KIND_MASK) >> _KIND_SHIFT).astype(np.uint8)
    legacy = np.flatnonzero(kinds == 0)
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
