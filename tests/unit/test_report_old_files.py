"""A report.json written before a field existed lacks it, and one written after has keys this version does not know
(docs/reports.md: fields are only ever added, without a new schema version; a reader ignores keys it does not know).
`load_report` then `write_report` must render either: every key the files carry, removed one at a time from results
of every kind, either is one the loader requires (a ReportFormatError naming it) or leaves a file that loads and
renders as report.md, report.html and the index; and a key added at any level leaves one that does. The templates
run under StrictUndefined, so a key read with `.name` that an older file lacks raised (the A/B section's `between`
and `not_compared`), and so did a CPU-only test's empty GPU summary given a key (2026-12-01)."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ab_report_lines import _result as ab_result
from test_real_models_recorded import load as recorded_analysis
from test_reporters import cpu_only_failing_result, gpu_result, partial_result

from pytest_inferscope.reporters import write_index
from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.jsonreport import ReportFormatError, result_from_dict, to_json
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import LatencyStats, TestResult

#: The keys of the free-form sections since their first versions, which every file with the section has: the A/B's
#: (2026-11-24), the GPU summary's and its idle gaps' (2026-11-21), the what-if replay's (2026-11-24, schema 2).
FIRST = {
    ("ab",): {"verdict", "reason", "ref", "ratio", "ci_low", "ci_high", "p_value", "pairs", "looks", "new_median_ms",
              "ref_median_ms", "core", "metric_changes", "twin_error"},
    ("analysis", "gpu"): {"copies", "idle_gaps", "memory_peak_mb", "round_end_wait_ms_per_round", "streams", "syncs"},
    ("analysis", "gpu", "idle_gaps"): {"by_cause_ms_per_round", "gaps_per_round", "longest_ms", "median_us",
                                       "total_ms_per_round"},
    ("analysis", "whatif_replay"): {"decided_by", "measured_ms", "replay_error", "replay_ms", "rounds", "rule_class",
                                    "verdict"},
    ("analysis",): {"whatif_replay"},  # written with `analysis.whatif` since schema 2; a schema-1 file lacks both
}  # fmt: skip
#: The maps whose values have one type, by name, for a file that has them empty.
TYPED = {"added": 1.5, "metrics": 1.5, "files": "later.txt"}


def _with_ab(r: TestResult) -> TestResult:
    r.ab = ab_result("twins", 3).ab
    return r


def _recorded_gpu() -> TestResult:
    """A result with the GPU summary, idle gaps, copies and what-if rows of a real model recorded on an H200 (the
    hand-built results have none)."""
    analysis = recorded_analysis("resnet18_b64_pageable_upload")
    return TestResult("t.py::t", "t", "passed", "pass", 10, 1, LatencyStats.from_samples([7.9, 8.0, 8.1]), analysis)


MAKERS = [gpu_result, cpu_only_failing_result, partial_result, _recorded_gpu, lambda: _with_ab(gpu_result())]


def _paths(d: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for k, v in d.items():
        yield (*path, k)
        if isinstance(v, dict) and len(path) < 2:
            yield from _paths(v, (*path, k))


@pytest.mark.parametrize("make", MAKERS)
def test_a_file_without_any_one_later_key_loads_and_renders(make: Any, tmp_path: Path) -> None:
    """Its report.md and report.html, and the index `inferscope index` writes from such folders."""
    data = json.loads(to_json(make()))
    failed = []
    for path in _paths(data):
        if path[-1] in FIRST.get(path[:-1], ()):
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


@pytest.mark.parametrize("make", MAKERS)
def test_a_file_with_a_key_this_version_does_not_know_loads_and_renders(make: Any, tmp_path: Path) -> None:
    data = json.loads(to_json(make()))
    failed = []
    for path in [(), *(p for p in _paths(data) if isinstance(_at(data, p), dict))]:
        newer = copy.deepcopy(data)
        _at(newer, path)["a_later_key"] = _later_value(_at(data, path), path[-1] if path else "")
        try:
            result = result_from_dict(newer, "report.json")
            render_report(result)
            write_html_report(result, None, io.BytesIO())
            write_index([result], tmp_path, {})
        except Exception as exc:  # any failure to load or render is the finding
            failed.append(f"{'.'.join(path) or '<top>'}: {type(exc).__name__}: {exc}")
    assert not failed, failed


def _at(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _later_value(d: dict[str, Any], name: str) -> Any:
    """What a later version could add to `d` (named `name`): in a map (every value a number, a text or an entry:
    `added`, `files`, the copies by direction) a value of that kind, else a field of a new shape."""
    values = list(d.values())
    if not values and name in TYPED:
        return TYPED[name]
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return 1.5
    if values and all(isinstance(v, str) for v in values):
        return "later.txt"
    if values and all(isinstance(v, dict) for v in values):
        return copy.deepcopy(values[0])
    return {"a": [1, None]}
