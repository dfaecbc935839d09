"""The host memory rule (memory_pressure) and the figures its what-if reads (`host_memory`): RSS growing round over
round (a leak, or reference cycles no full collection freed), or the kernel busy faulting pages in (a large temporary
allocated and freed every call). Its threshold, RSS_GROWTH_MB_PER_ROUND, is with the CPU rules' in `rules.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..results import Finding, Suggestion
from .context import Context
from .rules import _MB, RSS_GROWTH_MB_PER_ROUND, _pct

GROWTH_ACTION = "Stop the growth: release per-call results, bound caches, avoid appending to long-lived lists"
FAULTS_ACTION = "Reuse buffers instead of allocating per call (preallocate tensors, use out=, keep allocators warm)"


@dataclass(frozen=True)
class HostMemory:
    """How host memory behaved over the measured rounds (per-round counters and RSS)."""

    growth_mb_per_round: float  # slope of a line through the rounds' RSS
    r2: float  # how well that line fits
    sys_share: float  # the test thread's time in the kernel over the wall time (`host_memory`)
    faults: float  # minor page faults per round
    major: float  # major page faults in all
    sys_ns_per_round: float  # that time, per round
    process_sys_fraction: float  # the kernel's (system) share of the process's CPU time

    @property
    def growing(self) -> bool:
        """Growth counts only when it is steady (a line fits the per-round RSS), not one noisy jump."""
        return self.growth_mb_per_round >= RSS_GROWTH_MB_PER_ROUND and self.r2 >= 0.6

    @property
    def faulting(self) -> bool:
        return (self.sys_share >= 0.1 and self.faults >= 100) or self.major > 0


def host_memory(ctx: Context) -> HostMemory:
    """The host memory figures the memory rule and the memory what-if read.

    The kernel's time is the test thread's: its working time (on a CPU or waiting for one, outside device waits) in the
    kernel's share of the process's CPU, the split cpu_saturation takes the user mode from, so that the two findings
    together explain at most the thread's working time. The process's system time is every thread's: torch's
    intra-op threads fault pages in beside the test thread, and summed over them it read 156% of the wall on two
    threads (the 2-core VM, 2026-11-29), a share and savings larger than the round.
    """
    c = ctx.rounds.counters
    slope, r2 = ctx.rounds.rss_line  # fitted once for the rule and the what-if
    wall = max(1, ctx.rounds.wall_ns)
    sys_ns = c.get("sys_ns", 0.0)
    proc_ns = c.get("user_ns", 0.0) + sys_ns
    split = sys_ns / proc_ns if proc_ns > 0 else 0.0
    share = (ctx.metrics.get("cpu.test_thread_working") or 0.0) * split
    return HostMemory(
        growth_mb_per_round=slope / _MB,
        r2=r2,
        sys_share=share,
        faults=ctx.metrics.get("mem.minor_faults_per_round") or 0.0,
        major=c.get("majflt", 0.0),
        sys_ns_per_round=share * wall / max(1.0, c.get("rounds", 0.0)),
        process_sys_fraction=split,
    )


def memory_pressure(ctx: Context) -> list[Finding]:
    """Host memory grows round over round, or the kernel spends the time faulting pages in."""
    m = host_memory(ctx)
    growing, sys_share, faults, major = m.growing, m.sys_share, m.faults, m.major
    growth_per_round, r2 = m.growth_mb_per_round, m.r2
    wall = max(1, ctx.rounds.wall_ns)
    if not (growing or m.faulting):
        return []
    # What the pressure costs in time is the kernel's share: faulting pages in, zeroing them.
    share = min(1.0, sys_share)
    confidence = min(1.0, 0.5 + 0.25 * growing + 0.25 * (sys_share >= 0.3) + 0.1 * (major > 0))
    evidence = {
        "RSS growth per round (MB)": round(growth_per_round, 2),
        "RSS growth over measured rounds (MB)": round(ctx.metrics.get("mem.rss_growth_mb") or 0.0, 2),
        "minor page faults per round": round(faults),
        "major page faults": int(major),
        "test thread in the kernel (its working time x the process's system share) / wall": _pct(sys_share),
        "kernel (system) share of the process's CPU time": _pct(m.process_sys_fraction),
    }
    round_ms = ctx.rounds.per_round_ms(wall)
    over = ctx.metrics.get("mem.rss_growth_mb") or 0.0  # over the measured rounds: falls where pages went back
    title, said = _memory_words(m, over, ctx.rounds.counters)
    suggestions = []
    if growing:
        suggestions.append(
            Suggestion(
                action=GROWTH_ACTION,
                rationale=f"RSS grows {growth_per_round:.1f} MB every round (fit R² {r2:.2f}): memory later. Its time "
                f"now is not estimated, between nothing and about the kernel's {round_ms * sys_share:.2f} ms a round: "
                "whether a result released instead of kept spares the page faults is the "
                "allocator's to decide (a large buffer freed goes back to the OS and faults in again the next call), "
                "and reusing a buffer is what saves them. To find what keeps it: tracemalloc's snapshots before and "
                "after a few calls name the lines of Python objects; for tensors, count them in gc.get_objects() each "
                "call",
                # A 4 MB tensor kept every call read "saves ~15.4 ms" of a 20 ms round, its kernel time; released
                # instead, it faulted as many pages in (~1,900 a round) and ran no faster (the 2-core VM, 2026-11-30);
                # in session 39's three runs it saved 0.8-1.1x the kernel's time as read (docs/scenarios.md).
                saving_ms=0.0,
                rule="memory_pressure",
            )
        )
    suggestions.append(_reuse(m, round_ms))
    suggestions.append(
        Suggestion(
            action="Keep freed pages in the process: a caching malloc (jemalloc or tcmalloc via LD_PRELOAD, or "
            "MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ raised) so large buffers are not returned and "
            "faulted in again every call",
            rationale=f"{round(faults)} minor faults per round: each new page costs the kernel a fault and a zeroing",
            saving_ms=round_ms * sys_share * 0.5,
            rule="memory_pressure",
        )
    )
    return [
        Finding(
            rule="memory_pressure",
            title=title,
            summary=f"{said} with {round(faults)} page faults per round; the test thread spent {_pct(sys_share)} of "
            "the round in the kernel.",
            cause="memory_bound",
            share=share,
            confidence=confidence,
            evidence=evidence,
            suggestions=suggestions,
            events=ctx.refs(ctx.rounds.round_idx, 3),
            share_measured=True,  # the kernel's share, measured (0: a leak's pages faulted in no measurable time)
        )
    ]


def _reuse(m: HostMemory, round_ms: float) -> Suggestion:
    """Reusing buffers saves the kernel's time on the new pages (the faults, their zeroing, the allocator's mmap and
    munmap), all of it; touching new pages costs user time too, which the counters do not tell apart from the op's, and
    the kernel's share is read from tick-sampled CPU times: the saving is the kernel's time, and the rationale says how
    far from it the measured savings went. A buffer reused (`out=`) saved 0.6-1.9x (median 1.15x) the kernel's time as
    read in the same run, in 18 pairs of 4 MB kept and 16 and 64 MB released every call (the 2-core VM, 2026-11-30:
    docs/scenarios.md), where 0.8x of it read 1.6-4x under the saving in session 38's runs."""
    kernel_ms = round_ms * m.sys_share
    return Suggestion(
        action=FAULTS_ACTION,
        rationale=f"{round(m.faults)} page faults per round; the test thread spends {_pct(m.sys_share)} of the round "
        f"in the kernel ({kernel_ms:.2f} ms), which new pages cost in faults and zeroing. A buffer reused saves about "
        "that, with the user time of touching new pages besides (cache and TLB misses): 0.6-1.9x it where measured",
        saving_ms=kernel_ms,
        rule="memory_pressure",
    )


#: How the memory finding's title begins where host memory grows every round (`HostMemory.growing`).
LEAK_TITLE = "Memory pressure: host memory grows every round (a leak)"


def is_leak(finding: Finding) -> bool:
    """Whether `finding` is memory_pressure's for host memory growing every round: a leak, which explains no share of
    the time (its kernel time may be none) and is ranked by that, not by its share (`analyzer._rank`)."""
    return finding.rule == "memory_pressure" and finding.title.startswith(LEAK_TITLE)


def _memory_words(m: HostMemory, over: float, c: dict[str, float]) -> tuple[str, str]:
    """The memory finding's title and how RSS went: a leak where it grows steadily (or reference cycles, where no full
    garbage collection ran to free them); else the change over the measured rounds: a jump in one round, too few rounds
    to call the growth steady (a line needs three), or a large temporary faulted in and given back every call (no
    leak, and no growth)."""
    if m.growing:
        title = LEAK_TITLE + (" and pages fault in" * m.faulting)
        cycles = "" if c.get("gc_full") else " or reference cycles (no full garbage collection ran in the rounds: "
        return title, (
            f"RSS grew {m.growth_mb_per_round:.1f} MB per round, {over:.1f} MB over the {c.get('rounds', 0):.0f} "
            f"measured rounds: memory kept from every call, a leak unless a cache is filling up{cycles}"
            + ("gc.collect() after each call tells them apart)," if cycles else ",")
        )
    went = f"RSS {'fell' if over < 0 else 'grew'} {abs(over):.1f} MB over the measured rounds"
    if over >= RSS_GROWTH_MB_PER_ROUND * max(1.0, c.get("rounds", 0.0)):  # a jump, or too few rounds to call it steady
        return "Memory pressure: host memory grew and pages fault in", went
    return "Memory pressure: pages fault in every round; host memory does not grow", went
