"""Which rounds record GPU activity (`--inferscope-gpu-rounds`), and auto's decision after the warm-up.

`measured`: the warm-up and measured rounds record kernels, copies and memsets (launch calls per
`--inferscope-trace-rounds`). `trace` ("lean" measured rounds): CUPTI records nothing until the
measured rounds are done; then one settling round, the profile rounds (GPU activity without the
launch calls, read for every GPU figure: analyzer/base.py, `gpu_round_idx`) and the trace rounds
(the launch calls). `auto`: the warm-up rounds record as `measured`; then, if their GPU records per
round at `RECORD_COST_NS` each would cost the measured rounds more than `AUTO_LEAN_ABOVE` of the
fastest warm-up round, the measured rounds go lean.

Policy only; the `Collection` (collectors/__init__.py) pauses and resumes the backend.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..events import Kind

#: Host cost of one CUPTI activity record (kernel, copy, memset) to the round that makes it: about 0.5 µs,
#: measured on the H200 (docs/gpu-validation.md, 2026-11-21): kernel records alone cost ~2.7% of a
#: 0.31 ms forward that launches 18 kernels, 0.027 x 310 µs / 18 = 0.47 µs per record.
RECORD_COST_NS = 500
#: auto: the measured rounds go lean when the warm-up's records would cost them more than this fraction.
AUTO_LEAN_ABOVE = 0.01
#: The GPU records whose count drives the decision: the ones each launch of GPU work produces.
WORK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


@dataclass(frozen=True)
class GpuRoundsDecision:
    """Which rounds recorded GPU activity in one collection, and why (for the header and report.json)."""

    setting: str  # measured | trace | auto
    mode: str  # measured | trace: what the measured rounds did
    reason: str
    records_per_round: float | None = None  # the warm-up's GPU records per round (auto only)
    round_ms: float | None = None  # the fastest warm-up round (auto only)
    estimated_cost: float | None = None  # records_per_round x RECORD_COST_NS / round time (auto only)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def work_records(records: np.ndarray) -> int:
    """GPU work records (kernels, copies, memsets) among drained records."""
    return int(np.count_nonzero(np.isin(records["kind"], np.asarray(WORK_KINDS, dtype=np.uint8))))


def decide_auto(n_records: int, warm_round_ns: list[int], lean_trace_rounds: int) -> GpuRoundsDecision:
    """auto's decision from the warm-up rounds' GPU work records and their host times.

    The round time is the fastest warm-up round after the first when there are two or more: the
    first call after a collection starts runs several times slower (its first-use costs; 3.8 ms
    against 0.33 ms for the small forward on the H200, 2026-11-21), so with one warm-up round the
    estimate is low and auto keeps the GPU in the measured rounds (the cautious side).
    """
    if not warm_round_ns:
        return GpuRoundsDecision("auto", "measured", "GPU activity recorded in every round (auto: no warm-up round "
                                 "to decide from)")  # fmt: skip
    per_round = n_records / len(warm_round_ns)
    fastest = max(1, min(warm_round_ns[1:] or warm_round_ns))
    cost = per_round * RECORD_COST_NS / fastest
    what = f"the warm-up's {per_round:.0f} GPU records (kernels, copies, memsets) per {fastest / 1e6:.2f} ms round"
    if cost > AUTO_LEAN_ABOVE:
        plural = "s" if lean_trace_rounds != 1 else ""
        reason = (
            f"GPU activity recorded only after the measured rounds, in {lean_trace_rounds} profile round{plural} "
            f"and the trace round(s): {what} would have cost "
            f"~{100 * cost:.1f}% per round (auto: above {100 * AUTO_LEAN_ABOVE:g}%)"
        )
        mode = "trace"
    else:
        reason = (
            f"GPU activity recorded in the measured rounds: {what} cost ~{100 * cost:.1f}% per round "
            f"(auto: at most {100 * AUTO_LEAN_ABOVE:g}%)"
        )
        mode = "measured"
    return GpuRoundsDecision("auto", mode, reason, per_round, fastest / 1e6, cost)


def trace_setting(lean_trace_rounds: int) -> GpuRoundsDecision:
    plural = "s" if lean_trace_rounds != 1 else ""
    return GpuRoundsDecision(
        "trace",
        "trace",
        f"GPU activity recorded only after the measured rounds, in {lean_trace_rounds} profile round{plural} and "
        "the trace round(s) (--inferscope-gpu-rounds=trace)",
    )
