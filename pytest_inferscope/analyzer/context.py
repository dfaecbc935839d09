"""What every rule reads: the `Context`, composed of three views of one timeline.

`Context` owns the rounds view (`Rounds`, base.py), the GPU view (`GpuView`, context_gpu.py) and
the CPU view (`CpuView`, context_cpu.py: CPU samples, hotspots, scopes), and joins their parts of the
breakdown; the metrics are computed in `metrics.py`. Pure functions of a `Timeline`; nothing here
prints or writes. The names the rules take from the CPU view's module come through here too.
"""

from __future__ import annotations

import numpy as np

from ..merger import Timeline
from ..results import BreakdownPart, EventRef
from .base import LAUNCH_GAP_NS, Rounds, event_refs, union_ns
from .context_cpu import EVENT_LOOP, FRAMEWORK_MARKERS, CpuView, at_line, at_short, is_dropout, wait_site
from .context_gpu import GpuView

__all__ = [
    "EVENT_LOOP", "FRAMEWORK_MARKERS", "LAUNCH_GAP_NS", "Context", "CpuView", "GpuView", "Rounds", "at_line",
    "at_short", "is_dropout", "union_ns", "wait_site",
]  # fmt: skip


class Context:
    """Every rule's input: a timeline seen through its rounds (`rounds`), its GPU work (`gpu`) and its CPU
    samples (`cpu`). `analyze` fills `metrics` (metrics.py) and `gpu_reason` (why there is no GPU data)."""

    def __init__(
        self,
        timeline: Timeline,
        gpu_reason: str = "no GPU data was collected",
        metrics: dict[str, float | None] | None = None,
        launch_gap_ns: int = LAUNCH_GAP_NS,
    ) -> None:
        self.timeline = timeline
        self.gpu_reason = gpu_reason
        self.metrics: dict[str, float | None] = {} if metrics is None else metrics
        self.rounds = Rounds(timeline)
        self.gpu = GpuView(self.rounds, launch_gap_ns)
        self.cpu = CpuView(self.rounds)

    def refs(self, idx: np.ndarray | list[int], limit: int = 5) -> list[EventRef]:
        """The longest of the given events, as report references."""
        return event_refs(self.timeline, idx, limit)

    def breakdown(self) -> list[BreakdownPart]:
        """The report's Timeline Breakdown, per measured round (parts may overlap)."""
        return [*self.cpu.thread_parts(), *self.gpu.breakdown(self.gpu_reason), self.cpu.framework_part()]
