"""Which rounds record GPU activity (`--inferscope-gpu-rounds`), and auto's decision after the warm-up.

`measured`: the warm-up and measured rounds record kernels, copies and memsets (launch calls per
`--inferscope-trace-rounds`). `trace` ("lean" measured rounds): CUPTI records nothing until the
measured rounds are done; then (the GPU primed, or one settling round) the profile rounds (GPU activity
without the launch calls, read for every GPU figure: analyzer/base.py, `gpu_round_idx`) and the trace
rounds (the launch calls). `auto` (the default): the warm-up rounds record as `measured`; then, if their
GPU records per round at `RECORD_COST_NS` each would cost the measured rounds more than
`AUTO_LEAN_ABOVE` of a round's time, the measured rounds go lean; if they and as many launch calls would
cost at most that (and the number of trace rounds is not given), the measured rounds record the launch
calls too and no trace round runs. The warm-up records the launch calls as well (`WARMUP_LAUNCH_CALLS`), so
that a warm-up round in step with the measured rounds can stand for the trace round, and lean for the profile
round (collectors/schedule.py). The round's time is the fastest warm-up round after the first; with
one warm-up round, the first round over `FIRST_ROUND_SLOWDOWN`, but never less than the GPU's busy time
in it (a GPU-bound round is not faster than its kernels).

Policy only; the `GpuSession` (collectors/gpu_session.py) pauses and resumes the backend.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..events import Kind, kind_table

#: Host cost of one CUPTI activity record (kernel, copy, memset) to the round that makes it: about 1 µs.
#: Measured per call on timm ViT-B/16 (256 kernels per call, launch-heavy), CUPTI recording in the measured
#: rounds against none, 2026-11-25 (docs/gpu-validation.md): 1.1 µs per record on the H200, 0.64 µs on the H100.
#: (On the H200's 18-kernel small forward it was 0.47 µs, 2026-11-21.) The larger one: auto errs towards lean.
RECORD_COST_NS = 1000
#: With one warm-up round, auto takes the round to be at most this many times slower than the rounds after it:
#: the first call after CUPTI starts pays CUPTI's first use of each kernel (2026-11-25: ViT-B/16 20.6 against
#: 7.75 ms on the H100, 11.3 against 7.3 on the H200; ResNet-50 17.6 / 9.9 and 12.5 / 8.3).
FIRST_ROUND_SLOWDOWN = 3.0
#: ... and at most this many times slower: a test's first cuBLAS call made its one warm-up round 511 ms against
#: 21 ms rounds (24x; the example's per-step sync loop on the H100, 2026-11-25). Between the two, auto runs one
#: more warm-up round when they would decide differently (`undecided`).
FIRST_ROUND_MOST_SLOWDOWN = 30.0
#: auto: the measured rounds go lean when the warm-up's records would cost them more than this fraction.
AUTO_LEAN_ABOVE = 0.01
#: The GPU records whose count drives the decision: the ones each launch of GPU work produces.
WORK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
#: auto: launch-call records a round is taken to make per GPU work record (each kernel, copy and memset has its call;
#: syncs and allocations are fewer), each costing `RECORD_COST_NS`, when it judges whether the measured rounds can
#: record the launch calls too, so that no trace round runs.
LAUNCH_CALLS_PER_RECORD = 1
#: auto, the number of trace rounds not given: the warm-up records the launch calls too, so that a warm-up round in
#: step with the measured rounds can stand for the trace round, and for the profile round as well (schedule.py,
#: `_warmups_stand_in`). False: the warm-up records GPU activity only, as before 2026-11-28's session 17 (the
#: benchmarks' handle to measure one schedule against the other in one process).
WARMUP_LAUNCH_CALLS = True


@dataclass(frozen=True)
class GpuRoundsDecision:
    """Which rounds recorded GPU activity in one collection, and why (for the header and report.json)."""

    setting: str  # measured | trace | auto
    mode: str  # measured | trace: what the measured rounds did
    reason: str
    records_per_round: float | None = None  # the warm-up's GPU records per round (auto only)
    round_ms: float | None = None  # the fastest warm-up round (auto only)
    estimated_cost: float | None = None  # records_per_round x RECORD_COST_NS / round time (auto only)
    #: auto: the measured rounds record the launch calls too, and no trace round runs (`decide_auto`)
    launch_calls: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def work_records(records: np.ndarray) -> int:
    """GPU work records (kernels, copies, memsets) among drained records."""
    return int(np.count_nonzero(_work(records)))


def _work(records: np.ndarray) -> np.ndarray:
    return kind_table(WORK_KINDS)[records["kind"]]  # np.isin took ~60 us a call, four calls a test


def busy_ns(records: np.ndarray) -> int:
    """The time the GPU was busy with the work records (the union of their intervals, in ns).

    Column by column, with array methods: selecting whole records copies them field by field (events.py), and
    numpy's function wrappers outcost the work here (85 against 30 µs for a ResNet-50 warm-up's 625 records,
    2-core dev VM, 2026-11-28)."""
    if not len(records):
        return 0
    work = _work(records)
    start, end = records["start"][work], records["end"][work]
    if not len(start):
        return 0
    order = start.argsort(kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    # a new busy stretch begins where a record starts after every earlier one ended
    new = np.empty(len(start), dtype=bool)
    new[0], new[1:] = True, start[1:] > end[:-1]
    firsts = new.nonzero()[0]
    lasts = np.empty_like(firsts)
    lasts[:-1], lasts[-1] = firsts[1:] - 1, len(start) - 1
    return int((end[lasts] - start[firsts]).sum())


def decide_auto(
    n_records: int, warm_round_ns: list[int], lean_trace_rounds: int, busy: int = 0, until_in_step: bool = False
) -> GpuRoundsDecision:
    """auto's decision from the warm-up rounds' GPU work records, their host times and GPU busy time (ns, all rounds).

    The round time is the fastest warm-up round after the first when there are two or more: the
    first call after a collection starts runs slower (CUPTI's first use of each kernel; the small
    forward on the H200 took 3.8 ms against 0.33 ms, 2026-11-21). With one warm-up round it is that
    round over FIRST_ROUND_SLOWDOWN, or the GPU's busy time per round when that is longer.

    `until_in_step` (the number of trace rounds not given): when the records and their launch calls
    (`LAUNCH_CALLS_PER_RECORD`) together would cost at most AUTO_LEAN_ABOVE, the measured rounds record the
    launch calls as well (`launch_calls`) and no trace round runs: that round would cost the test a whole call
    (GPT-2 forward's test of 1 + 10 calls +13.2% against +4.5%, H200, 2026-11-28) to record what the measured
    rounds can record for less than the per-call budget.
    """
    if not warm_round_ns:
        return GpuRoundsDecision("auto", "measured", "GPU activity recorded in every round (auto: no warm-up round "
                                 "to decide from)")  # fmt: skip
    per_round = n_records / len(warm_round_ns)
    if len(warm_round_ns) > 1:
        fastest = max(1, min(warm_round_ns[1:]))
        judged = f"{fastest / 1e6:.2f} ms round"
    else:
        fastest = max(1, int(warm_round_ns[0] / FIRST_ROUND_SLOWDOWN), busy)
        judged = (
            f"{fastest / 1e6:.2f} ms round (from the one warm-up round of {warm_round_ns[0] / 1e6:.2f} ms, "
            "the first after CUPTI started)"
        )
    cost = per_round * RECORD_COST_NS / fastest
    with_calls = cost * (1 + LAUNCH_CALLS_PER_RECORD)
    what = f"the warm-up's {per_round:.0f} GPU records (kernels, copies, memsets) per {judged}"
    if until_in_step and per_round and with_calls <= AUTO_LEAN_ABOVE:
        reason = (
            f"GPU activity and the launch calls recorded in the measured rounds, no trace round: {what} and as many "
            f"launch calls cost ~{100 * with_calls:.1f}% per round (auto: at most {100 * AUTO_LEAN_ABOVE:g}%)"
        )
        return GpuRoundsDecision("auto", "measured", reason, per_round, fastest / 1e6, with_calls, launch_calls=True)
    if cost > AUTO_LEAN_ABOVE:
        reason = (
            f"GPU activity recorded only after the measured rounds, in {_profile(lean_trace_rounds, until_in_step)} "
            f"and the trace rounds: {what} would have cost "
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


def undecided(n_records: int, warm_round_ns: int, busy: int, until_in_step: bool = False) -> bool:
    """With one warm-up round: whether its time leaves auto's decision open. Judged at a third of its time
    (`decide_auto`) and at the least a round can take (a FIRST_ROUND_MOST_SLOWDOWN-th of it, and never less
    than the GPU's busy time), the records' cost falls on different sides of AUTO_LEAN_ABOVE, or (`until_in_step`:
    the launch calls may join the measured rounds) with their launch calls on different sides of it: a warm-up
    round that was mostly first-time work hides how long a round takes."""
    if n_records <= 0:
        return False
    judged = max(1, int(warm_round_ns / FIRST_ROUND_SLOWDOWN), busy)
    least = max(1, int(warm_round_ns / FIRST_ROUND_MOST_SLOWDOWN), busy)
    cost = n_records * RECORD_COST_NS
    costs = (cost, cost * (1 + LAUNCH_CALLS_PER_RECORD)) if until_in_step else (cost,)
    return any((c / judged > AUTO_LEAN_ABOVE) != (c / least > AUTO_LEAN_ABOVE) for c in costs)


def trace_setting(lean_trace_rounds: int, until_in_step: bool = False) -> GpuRoundsDecision:
    return GpuRoundsDecision(
        "trace",
        "trace",
        f"GPU activity recorded only after the measured rounds, in {_profile(lean_trace_rounds, until_in_step)} and "
        "the trace rounds (--inferscope-gpu-rounds=trace)",
    )


#: How auto's decision without a CUDA context at the collection's start begins (describe.py shortens the rest
#: where no context came after the measured rounds either).
NO_CONTEXT_AT_START = "no CUDA context in the process when the test started"


def no_context_setting(lean_trace_rounds: int, until_in_step: bool = False) -> GpuRoundsDecision:
    """auto, when no CUDA context was active at the collection's start: nothing to count the warm-up on yet."""
    return GpuRoundsDecision(
        "auto",
        "trace",
        f"{NO_CONTEXT_AT_START}: the measured rounds ran without CUPTI, which starts after them only if the body "
        f"started CUDA, for {_profile(lean_trace_rounds, until_in_step)} and the trace rounds",
    )


def _profile(n: int, until_in_step: bool) -> str:
    if until_in_step and n > 1:
        return f"the profile rounds (up to {n}, until one runs as the measured rounds did)"
    return f"{n} profile round{'s' if n != 1 else ''}"
