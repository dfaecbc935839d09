"""RoundKind: how a round's kind is stored in a ROUND span and a counter row, and read back from older traces."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_inferscope.rounds import STEP_SLACK_NS, RoundKind, in_step, kind_flags, kinds_of, row_kind

RAISED = 2


@pytest.mark.parametrize("kind", list(RoundKind))
def test_a_kind_stored_in_the_flags_is_read_back_with_the_raised_bit(kind: RoundKind) -> None:
    flags = np.array([kind_flags(kind), kind_flags(kind) | RAISED], dtype=np.uint32)
    assert kinds_of(flags).tolist() == [kind, kind]


@pytest.mark.parametrize(
    ("legacy_flags", "kind"),
    [
        (0, RoundKind.MEASURED),
        (RAISED, RoundKind.MEASURED),
        (1, RoundKind.WARMUP),
        (4, RoundKind.TRACE),
        (8, RoundKind.PROFILE),
        (8 | 1, RoundKind.SETTLING),  # lean mode's settling round: profile and warm-up
        (4 | 1, RoundKind.SETTLING),  # trace and warm-up: read as neither before
    ],
)
def test_traces_saved_before_kinds_are_decoded_from_their_flag_bits(legacy_flags: int, kind: RoundKind) -> None:
    assert kinds_of(np.array([legacy_flags], dtype=np.uint32)).tolist() == [kind]


@pytest.mark.parametrize(
    ("row", "kind"),
    [
        ({"kind": "TRACE"}, RoundKind.TRACE),
        ({"kind": int(RoundKind.PROFILE)}, RoundKind.PROFILE),
        ({"warmup": True}, RoundKind.WARMUP),
        ({}, RoundKind.MEASURED),
        ({"trace": True}, RoundKind.TRACE),
        ({"trace": True, "profile": True}, RoundKind.PROFILE),
        ({"trace": True, "profile": True, "warmup": True}, RoundKind.SETTLING),
    ],
)
def test_counter_rows_give_their_kind_old_and_new(row: dict[str, object], kind: RoundKind) -> None:
    assert row_kind(row) is kind


def test_only_measured_rounds_are_samples_and_only_the_last_three_kinds_come_after_them() -> None:
    assert [k for k in RoundKind if k.is_sample] == [RoundKind.MEASURED]
    assert {k for k in RoundKind if k.after_measured} == {RoundKind.SETTLING, RoundKind.PROFILE, RoundKind.TRACE}


def test_a_profile_round_is_in_step_within_ten_percent_of_the_measured_median_beyond_its_records_cost() -> None:
    measured = [10_000_000, 10_200_000, 9_800_000]  # median 10 ms
    assert in_step(11_000_000, measured)  # +10%
    assert not in_step(11_100_000, measured)
    assert in_step(11_990_000, measured, record_cost=0.09)  # 10.9 ms x 1.1 = 11.99 ms
    assert not in_step(11_990_000, measured, record_cost=0.05)
    assert in_step(5_000_000, measured)  # faster is in step
    assert in_step(123, [])  # nothing to compare with


def test_a_tiny_round_is_in_step_within_the_slack() -> None:
    measured = [20_000, 21_000, 19_000]  # 20 µs rounds: 10% is 2 µs, below the clock's and scheduler's noise
    assert in_step(20_000 + STEP_SLACK_NS, measured)
    assert not in_step(20_001 + STEP_SLACK_NS, measured)
