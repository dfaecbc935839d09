"""JUnit XML properties: a test's key figures as (name, value) pairs for `item.user_properties`.

CI systems read these from the JUnit report to gate on or chart them; the names are part of
the plugin's interface, so they only ever gain entries.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..results import TestResult


def junit_properties(result: TestResult, report_dir: Path | None) -> list[tuple[str, str]]:
    """The inferscope.* properties of one test, in a stable order."""
    lat = result.latency
    props = [
        ("inferscope.latency_ms.median", _num(lat.median)),
        ("inferscope.latency_ms.p90", _num(lat.p90)),
        ("inferscope.latency_ms.p99", _num(lat.p99)),
        ("inferscope.latency_ms.iqr", _num(lat.iqr)),
        ("inferscope.latency_ms.min", _num(lat.min)),
        ("inferscope.latency_ms.max", _num(lat.max)),
        ("inferscope.rounds", str(len(lat.samples_ms))),
        ("inferscope.bottleneck", result.analysis.bottleneck),
        ("inferscope.confidence", _num(result.analysis.confidence)),
        ("inferscope.verdict", result.verdict),
        ("inferscope.dropped_events", str(result.dropped_events)),
    ]
    if result.analysis.unclassified_reason:  # no class named, so no confidence in one: why (the number stays, as ever)
        props.append(("inferscope.unclassified_reason", result.analysis.unclassified_reason))
    if result.added:  # what the plugin added to the test's time, formatting its report files too (TestResult.added)
        props.append(("inferscope.added_ms", _num(result.added.get("added_ms"))))
        if "reports_ms" in result.added:  # that part, said: report.json's added_ms is without it, index.json's has more
            props.append(("inferscope.added_reports_ms", _num(result.added["reports_ms"])))
    if result.partial_reason:
        props.append(("inferscope.partial_reason", result.partial_reason))
    if result.earlier_runs:  # rerun in this session (pytest-rerunfailures): the verdicts of the runs before this one
        props.append(("inferscope.earlier_runs", ",".join(result.earlier_runs)))
    if report_dir is not None and "md" in result.files:
        props.append(("inferscope.report", str(Path(report_dir) / result.files["md"])))
    if report_dir is not None and "trace" in result.files:
        props.append(("inferscope.trace", str(Path(report_dir) / result.files["trace"])))
    props += [(f"inferscope.check.{c.key}", c.status) for c in result.checks]
    # The user's scopes (the fixture's or scope()'s), so CI can chart a stage, not only the whole body.
    props += [
        (f"inferscope.scope.{s.path}.mean_ms", _num(s.mean_ms)) for s in result.analysis.scopes if s.kind == "scope"
    ]
    if result.marks:
        props.append(("inferscope.marks", str(len(result.marks))))
    reg = result.regression
    if reg is not None:
        props += [
            ("inferscope.regression.verdict", reg.verdict),
            ("inferscope.regression.ratio", _num(reg.latency.ratio)),
            ("inferscope.regression.p_value", _num(reg.latency.p_value)),
            ("inferscope.regression.baseline", reg.baseline_name),
        ]
    ab = result.ab
    if ab is not None:
        props += [
            ("inferscope.ab.verdict", str(ab.get("verdict"))),
            ("inferscope.ab.ratio", _num(ab.get("ratio"))),
            ("inferscope.ab.p", _num(ab.get("p_value"))),
            ("inferscope.ab.ref", str(ab.get("ref", ""))),
            ("inferscope.ab.core_busy", _num(ab.get("busy"))),  # waiting for the pinned core / running (paired.py)
        ]
        if ab.get("recheck"):  # a fresh pair re-checked the first pairs' verdict (ab/recheck.py)
            props.append(("inferscope.ab.recheck", str(ab["recheck"].get("outcome"))))
        if ab.get("not_compared"):  # --inferscope-compare given, and not made: the A/B is the gate
            props.append(("inferscope.regression.not_compared", str(ab["not_compared"])))
    return props


def _num(v: float | None) -> str:
    """A number as CI tools parse it: up to 6 significant digits, 'NaN' when not measured (Java's Double.parseDouble,
    which Jenkins' plugins use, takes 'NaN' and not 'nan'; Python, Go, .NET and JavaScript take both)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "NaN"
    return f"{v:.6g}"
