"""The host-memory what-if (memory_bound): the kernel's time spent on the host's new pages, gone.

The round graph has no memory in it; the per-round counters say how much system (kernel) CPU time
the measured rounds took, and the memory rule (`rules_memory.host_memory`) the test thread's part of it and
whether host memory grew or pages faulted in. When it did, the what-if takes that part of a round off
its host segments, in proportion to their length (the counters do not say which segment faulted). Without growth or
faulting it does not apply. Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import numpy as np

from .context import Context
from .edits import ArrayTransform
from .flat import K_SEGMENT, Flat
from .rules_memory import FAULTS_ACTION, host_memory
from .whatif import WhatIf


def fewer_host_ns(kernel_ns: float) -> ArrayTransform:
    """`kernel_ns` taken off a round's host segments, each losing the same share of its length."""

    def on_arrays(f: Flat) -> Flat | None:
        seg = (f.kind == K_SEGMENT) & (f.dur > 0)
        total = float(f.dur[seg].sum())
        if kernel_ns <= 0 or total <= 0:
            return None
        keep = max(0.0, 1.0 - kernel_ns / total)
        return f.changed(dur=np.where(seg, np.round(f.dur * keep).astype(f.dur.dtype), f.dur))

    return ArrayTransform(on_arrays)


def memory_whatifs(ctx: Context) -> list[WhatIf]:
    """The host-memory what-if, where host memory grew or pages faulted in during the measured rounds.

    Its change names what was seen: "host memory growth removed" where memory grew, "host page faults
    removed" where pages faulted in every round and memory did not grow (a temporary, not a leak). Its action is a
    buffer reused either way: what takes the kernel's time off is no new pages, which a result released instead of
    kept does not promise (a large buffer freed goes back to the OS and faults in again the next call).
    """
    m = host_memory(ctx)
    if not (m.growing or m.faulting):
        return []
    if m.growing:
        change = f"host memory growth removed ({m.growth_mb_per_round:.1f} MB a round"
    else:
        change = f"host page faults removed ({m.faults:.0f} page faults a round"
    return [
        WhatIf(
            f"{change}; the kernel's {m.sys_ns_per_round / 1e6:.2f} ms a round)",
            "memory_bound",
            FAULTS_ACTION,  # the growth stopped alone may fault as many pages in (rules_memory: not estimated)
            fewer_host_ns(m.sys_ns_per_round),
        )
    ]
