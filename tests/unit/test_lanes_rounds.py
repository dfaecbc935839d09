"""The timeline payload of a timeline of only rounds (`reporters/lanes_rounds.py`) is `lanes.timeline_payload`'s."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
from test_html_report import result_for

import pytest_inferscope.reporters.html as html
from pytest_inferscope.events import EVENT_DTYPE, Kind
from pytest_inferscope.merger import Timeline
from pytest_inferscope.reporters.html import _attributed_gaps, write_html_report
from pytest_inferscope.reporters.lanes import Gaps, timeline_payload
from pytest_inferscope.reporters.lanes_rounds import MAX_EVENTS, rounds_payload
from pytest_inferscope.rounds import RoundKind, kind_flags

STRINGS = ["test_t.py::test_0", "round 0", "device synchronize (end of round)", "mark", "unused", "round 1"]


def timeline(rows: list[tuple[int, int, int, int, int, int]], strings: list[str] = STRINGS) -> Timeline:
    """Events from (kind, start, end, name, tid, flags); parents as the merger sets them (rounds under the test)."""
    events = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (kind, start, end, name, tid, flags) in enumerate(rows):
        events[i] = (start, end, 0, 0, name, tid, -1, -1, kind, 0, flags)
    events = events[np.argsort(events["start"], kind="stable")]
    parent = np.where(events["kind"] == Kind.TEST, -1, 0).astype(np.int32)
    return Timeline(events=events, parent=parent, strings=list(strings), attrs=[])


MEASURED, WARMUP, TRACE = (kind_flags(k) for k in (RoundKind.MEASURED, RoundKind.WARMUP, RoundKind.TRACE))
TRIVIAL = [  # a trivial test's timeline, as the plugin records it
    (Kind.TEST, 0, 863_530, 0, 29124, 0),
    (Kind.ROUND, 661_901, 669_903, 1, 29124, MEASURED),
    (Kind.WAIT, 665_376, 669_903, 2, 29124, 0),
    (Kind.MEMORY, 669_903, 669_903, 0, 29124, 1),
]


def random_rounds_timeline(rng: random.Random) -> Timeline:
    """Only the kinds a rounds-only timeline has, on one to three threads (one may be unknown: -1)."""
    tids = rng.sample([5, 29124, -1, 77], rng.randint(1, 3))
    rows = []
    t = rng.choice([0, 10**6, 2**33])
    if rng.random() < 0.8:
        rows.append((Kind.TEST, 0, 10**7, 0, tids[0], 0))
    for _ in range(rng.randint(1, 20)):
        kind = rng.choice([Kind.ROUND, Kind.ROUND, Kind.WAIT, Kind.MARK, Kind.MEMORY])
        step = rng.choice([0, 5, 1_000, 2**32 + 7])  # past 2**32 ns: absolute starts
        t += step
        dur = rng.choice([0, 3, 4_000, 2**32 + 1, -5])  # negative: an end before the start, drawn as 0
        flags = rng.choice([MEASURED, WARMUP, TRACE, 0]) if kind == Kind.ROUND else 0
        rows.append((kind, t, t + dur, rng.choice([1, 2, 3, 5]), rng.choice(tids), flags))
    return timeline(rows)


def assert_same_payload(tl: Timeline, gaps: Gaps | None = None) -> None:
    fast, general = rounds_payload(tl, gaps), timeline_payload(tl, gaps)
    assert fast is not None
    assert json.dumps(fast.manifest) == json.dumps(general.manifest)  # same keys, values, order and types
    assert fast.blob == general.blob


def test_a_trivial_tests_payload_is_the_general_codes() -> None:
    assert_same_payload(timeline(TRIVIAL))
    no_gaps = Gaps(*(np.zeros(0, np.int64) for _ in range(3)), np.zeros(0, np.uint8), attributed=True)
    assert_same_payload(timeline(TRIVIAL), no_gaps)


@pytest.mark.parametrize("seed", range(200))
def test_random_rounds_only_timelines_give_the_general_codes_payload(seed: int) -> None:
    tl = random_rounds_timeline(random.Random(seed))
    if not (tl.events["kind"] != Kind.MEMORY).any():
        pytest.skip("memory readings only: nothing drawn")  # not a timeline a test leaves
    assert_same_payload(tl)


def test_other_timelines_are_left_to_the_general_code() -> None:
    rows = list(TRIVIAL)
    for extra in [(Kind.SAMPLE, 1, 2, 3, 29124, 0), (Kind.SCOPE, 1, 2, 3, 29124, 0), (Kind.KERNEL, 1, 2, 3, 29124, 0)]:
        assert rounds_payload(timeline([*rows, extra]), None) is None, extra
    on_gpu = timeline(rows)
    on_gpu.events["device"][2] = 0
    assert rounds_payload(on_gpu, None) is None
    gaps = Gaps(np.array([1]), np.array([2]), np.array([0]), np.zeros(1, np.uint8))
    assert rounds_payload(timeline(rows), gaps) is None
    many = [(Kind.ROUND, i, i + 1, 1, 5, MEASURED) for i in range(MAX_EVENTS + 1)]
    assert rounds_payload(timeline(many), None) is None
    assert rounds_payload(timeline([(Kind.ROUND, 1, 2, len(STRINGS), 5, MEASURED)]), None) is None  # a bad name


SHARED = {"folder": "../assets/", "report_css": "a.css", "timeline_js": "b.js"}


def test_the_page_is_the_same_bytes_with_and_without_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    tl = timeline(TRIVIAL)
    result = result_for("test_t.py::test_0")
    assert rounds_payload(tl, _attributed_gaps(tl, None)) is not None  # the fast path is taken
    fast = io.BytesIO()
    write_html_report(result, tl, fast, shared=SHARED)
    monkeypatch.setattr(html, "rounds_payload", lambda tl, gaps: None)
    general = io.BytesIO()
    write_html_report(result, tl, general, shared=SHARED)
    assert fast.getvalue() == general.getvalue()
    assert b'"kind":"rounds"' in fast.getvalue()
