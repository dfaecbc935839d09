"""A test whose body raised before any measured round completed: no latency sample and no class from the rounds that
ran (the warm-up, or the round cut short), where the reports said 'cpu_bound (86%)', and 'median of 2 rounds' of
two warm-up rounds."""

from __future__ import annotations

import numpy as np
from test_analyzer import build

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.events import Kind, RawTrace
from pytest_inferscope.merger import merge
from pytest_inferscope.results import UNCLASSIFIED
from pytest_inferscope.rounds import RAISED_FLAG


def _raised_in(raw: RawTrace, nth: int) -> RawTrace:
    """The trace with its `nth` round (0-based, in time) marked as raised: the body's call did not finish."""
    rounds = (raw.events["kind"] == Kind.ROUND).nonzero()[0]
    i = rounds[np.argsort(raw.events["start"][rounds])][nth]
    raw.events["flags"][i] |= RAISED_FLAG
    return raw


def test_raised_in_the_first_measured_round_names_no_class() -> None:
    a_raw = _raised_in(build(n_rounds=1, warmup=0, cpu_busy=0.97), 0)
    tl = merge(a_raw)
    a = analyze(tl)
    assert a.bottleneck == UNCLASSIFIED and a.confidence == 0.0
    assert a.unclassified_reason == (
        "no measured round completed (the body raised in its first measured round), so no class is named; "
        "the breakdown and findings below are from that round, cut short"
    )
    assert a.whatif_replay["rule_class"] == "cpu_bound"  # what the rules made of it, kept as data
    assert any(f.rule == "cpu_saturation" for f in a.findings)  # the findings stay, for what they tell


def test_raised_in_the_warm_up_has_no_latency_sample_and_names_no_class() -> None:
    from pytest_inferscope.analyzer.context import Context

    raw = _raised_in(build(n_rounds=0, warmup=3, cpu_busy=0.97), 2)
    ctx = Context(merge(raw))
    lat = ctx.rounds.latency
    assert lat.samples_ms == [] and len(lat.warmup_ms) == 3  # the two warm-up rounds were read as measured ones
    a = analyze(ctx.timeline, ctx=ctx)
    assert a.bottleneck == UNCLASSIFIED and a.unclassified_reason.startswith(
        "no measured round completed (the body raised during the warm-up), so no class is named; the breakdown and "
        "findings below are from the 3 warm-up rounds, the one that raised included"
    )


def test_a_measured_round_that_completed_before_the_raise_still_names_the_class() -> None:
    raw = _raised_in(build(n_rounds=4, warmup=1, cpu_busy=0.97), 3)  # measured rounds 1 and 2 completed
    a = analyze(merge(raw))
    assert a.bottleneck == "cpu_bound" and a.unclassified_reason == ""


def test_the_report_says_no_class_and_not_that_the_rules_decided() -> None:
    from test_reporters import partial_result

    from pytest_inferscope.analyzer.context import Context
    from pytest_inferscope.reporters.markdown import render_report

    raw = _raised_in(build(n_rounds=1, warmup=0, cpu_busy=0.97), 0)
    ctx = Context(merge(raw))
    r = partial_result()
    r.latency, r.analysis = ctx.rounds.latency, analyze(ctx.timeline, ctx=ctx)
    md = render_report(r)
    assert "**unclassified**: no measured round completed (the body raised in its first measured round)" in md
    assert "the class comes from the rules' findings" not in md and "(confidence" not in md.split("## Findings")[0]
