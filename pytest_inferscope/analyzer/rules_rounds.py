"""Rules about the measured rounds themselves: a first round far slower than the others (a cold start measured)."""

from __future__ import annotations

import statistics

from ..results import Finding, Suggestion
from .base import MIN_COUNTED_MS
from .context import Context

#: The first measured round against the slowest of the others from which it is a cold start.
COLD_RATIO = 3.0
#: ... and the share of the measured time its excess over that median must be.
COLD_SHARE = 0.1


def cold_first_round(ctx: Context) -> list[Finding]:
    """The first measured round took COLD_RATIO times the slowest of the others or more, and its excess over their
    median is COLD_SHARE of the measured time: a cold start (lazy initialisation, a first call's caches, weights loaded
    on first use) measured as a round. The latency's median leaves it out; the breakdown, the findings and their
    savings are per mean round, which it dominates. No class: the findings say what the rounds did, this says one of
    them was not like the others."""
    r = ctx.rounds
    ms = r.latency.samples_ms
    if len(ms) < 3 or not r.has_counters or len(r.compiled_idx):
        # An imported trace's steps have no warm-up to suggest (kineto_rules); a round torch.compile compiled in is
        # left out of the rest and said by torch_compile (rules_compile.py).
        return []
    rest = statistics.median(ms[1:])
    excess, total = ms[0] - rest, sum(ms)
    # COLD_RATIO times the slowest of the others, not their median: on the loaded 2-core VM (2026-11-29) a training-
    # mode forward's rounds read 498, 103, 72 ... 556, 96, 66 ms after warm-up rounds of 76 and 104: the machine, not
    # a cold start. And above what the clocks tell apart: a 3 µs body's first round read 31% of the measured time.
    if ms[0] < COLD_RATIO * max(ms[1:]) or excess < COLD_SHARE * total or excess < MIN_COUNTED_MS:
        return []
    warm = len(r.latency.warmup_ms)
    had = "no warm-up" if not warm else f"after {warm} warm-up round{'s' if warm > 1 else ''}"
    return [
        Finding(
            rule="cold_first_round",
            title="The first measured round was cold",
            summary=f"The first measured round took {ms[0]:.2f} ms, {ms[0] / rest:.1f}x the other rounds' median "
            f"({rest:.2f} ms), {had}: a cold start (lazy initialisation, weights loaded or caches filled on the first "
            f"call) measured as a round. It is {excess / total:.1%} of the measured time, which the breakdown and the "
            "other findings average over; the latency's median leaves it out.",
            cause=None,
            share=min(1.0, excess / total),
            share_measured=True,
            confidence=0.9,  # the rounds' own wall times
            evidence={
                "first measured round (ms)": round(ms[0], 3),
                "the other rounds' median (ms)": round(rest, 3),
                "warm-up rounds": warm,
            },
            suggestions=[
                Suggestion(
                    action=f"Run {'a' if not warm else 'another'} warm-up round before measuring (the marker's "
                    f"warmup={warm + 1}, or --inferscope-warmup), or do the initialisation in a fixture",
                    rationale=f"the first measured round took {excess:.2f} ms more than the others' median",
                    saving_ms=excess / len(ms),  # per round, as the other findings' savings (the mean round)
                    rule="cold_first_round",
                )
            ],
            events=ctx.refs(r.round_idx[:1], 1),
        )
    ]
