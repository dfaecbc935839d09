"""A report.json written before a field existed lacks it (docs/reports.md: fields are only ever added, without a new
schema version), and `load_report` then `write_report` must still render it: every key the files carry, removed one
at a time from results of every kind, either is one the loader requires (a ReportFormatError naming it) or leaves a
file that loads and renders as report.md and report.html. The templates run under StrictUndefined, so a key read
with `.name` that an older file lacks raised (the A/B section's `between` and `not_compared`, 2026-12-01)."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ab_report_lines import _result as ab_result
from test_reporters import cpu_only_failing_result, gpu_result, partial_result

from pytest_inferscope.reporters import write_index
from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.jsonreport import ReportFormatError, result_from_dict, to_json
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import TestResult

#: The A/B section's keys since its first version (2026-11-24): every report.json with an `ab` has them.
AB_FIRST = {"verdict", "reason", "ref", "ratio", "ci_low", "ci_high", "p_value", "pairs", "looks", "new_median_ms",
            "ref_median_ms", "core", "metric_changes", "twin_error"}  # fmt: skip


def _with_ab(r: TestResult) -> TestResult:
    r.ab = ab_result("twins", 3).ab
    return r


def _paths(d: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for k, v in d.items():
        yield (*path, k)
        if isinstance(v, dict) and len(path) < 2:
            yield from _paths(v, (*path, k))


@pytest.mark.parametrize("make", [gpu_result, cpu_only_failing_result, partial_result, lambda: _with_ab(gpu_result())])
def test_a_file_without_any_one_later_key_loads_and_renders(make: Any, tmp_path: Path) -> None:
    """Its report.md and report.html, and the index `inferscope index` writes from such folders."""
    data = json.loads(to_json(make()))
    failed = []
    for path in _paths(data):
        if path[0] == "ab" and len(path) == 2 and path[1] in AB_FIRST:
            continue
        older = copy.deepcopy(data)
        node = older
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        try:
            result = result_from_dict(older, "report.json")
        except ReportFormatError as exc:
            assert ".".join(path) in str(exc) or "schema_version" in str(exc), (path, exc)  # a required key, named
            continue
        try:
            render_report(result)
            write_html_report(result, None, io.BytesIO())
            write_index([result], tmp_path, {})
        except Exception as exc:  # any failure to render is the finding
            failed.append(f"{'.'.join(path)}: {type(exc).__name__}: {exc}")
    assert not failed, failed
