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


def _raised_late(n_rounds: int) -> RawTrace:
    """`n_rounds` measured rounds sleeping (5% on CPU), then one more that ran 10x as long, all on CPU, and raised (the
    body's fourth measured round for n_rounds=3): the call that raised did other work than the completed ones."""
    raw = build(n_rounds=n_rounds + 1, warmup=1, cpu_busy=0.05)
    ev = raw.events
    rounds = (ev["kind"] == Kind.ROUND).nonzero()[0]
    last = rounds[np.argsort(ev["start"][rounds])][-1]
    ev["flags"][last] |= RAISED_FLAG
    ev["end"][last] = ev["start"][last] + 10 * (ev["end"][last] - ev["start"][last])
    ev["end"][ev["kind"] == Kind.TEST] = ev["end"][last]
    row = raw.meta["rounds"][-1]  # type: ignore[index]
    row.update(raised=True, wall_ns=10 * row["wall_ns"], thread_cpu_ns=10 * row["wall_ns"], user_ns=10 * row["wall_ns"])
    return raw


def test_a_later_measured_round_that_raised_is_left_out_of_the_breakdown_and_findings_too() -> None:
    # Only the latency left it out: its 100 ms on CPU made the 3 sleeping rounds' breakdown 34 ms a round, 'cpu_bound'.
    from pytest_inferscope.analyzer.context import Context

    ctx = Context(merge(_raised_late(3)))
    assert ctx.rounds.n_rounds == 3 and len(ctx.rounds.latency.samples_ms) == 3
    a = analyze(ctx.timeline, ctx=ctx)
    completed = analyze(merge(build(n_rounds=3, warmup=1, cpu_busy=0.05)))  # the same rounds, without the one raised
    assert a.bottleneck == completed.bottleneck != "cpu_bound" and a.metrics["rounds"] == 3.0
    assert [(p.name, p.ms) for p in a.breakdown] == [(p.name, p.ms) for p in completed.breakdown]
    assert [(f.rule, f.share) for f in a.findings] == [(f.rule, f.share) for f in completed.findings]
    assert a.raised_round_note == (
        "the body raised in measured round 4, cut short: it is left out of the latency, the breakdown and the "
        "findings, which are from the 3 measured rounds that completed"
    )
    assert completed.raised_round_note == ""
    none_completed = _raised_in(build(n_rounds=1, warmup=0, cpu_busy=0.97), 0)  # unclassified_reason says it
    assert analyze(merge(none_completed)).raised_round_note == ""


def test_the_partial_banner_says_which_measured_round_raised_and_that_it_is_left_out() -> None:
    import io

    from test_reporters import partial_result

    from pytest_inferscope.analyzer.context import Context
    from pytest_inferscope.reporters.html import write_html_report
    from pytest_inferscope.reporters.markdown import render_report

    ctx = Context(merge(_raised_late(3)))
    r = partial_result()
    r.latency, r.analysis = ctx.rounds.latency, analyze(ctx.timeline, ctx=ctx)
    said = "The body raised in measured round 4, cut short: it is left out of the latency, the breakdown and the"
    html = io.BytesIO()
    write_html_report(r, ctx.timeline, html)
    assert said in render_report(r).split("## Latency")[0] and said in html.getvalue().decode()
