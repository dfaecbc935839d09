"""gpu_rounds: auto's decision after the warm-up, and the trace_rounds=all conflict."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.collectors.gpu_rounds import AUTO_LEAN_ABOVE, RECORD_COST_NS, decide_auto
from pytest_inferscope.config import ConfigError, resolve


def test_dense_kernels_go_lean_with_the_numbers_in_the_reason() -> None:
    d = decide_auto(18, [310_000], 3)  # the small forward: 18 kernels per 0.31 ms round
    assert d.mode == "trace" and d.estimated_cost == pytest.approx(18 * RECORD_COST_NS / 310_000)
    assert d.estimated_cost > AUTO_LEAN_ABOVE
    assert d.reason.startswith(
        "GPU activity recorded only after the measured rounds, in 3 profile rounds and the trace round(s): "
        "the warm-up's 18 GPU records"
    )
    assert "0.31 ms round would have cost ~2.9% per round" in d.reason


def test_sparse_kernels_stay_measured_and_the_fastest_warmup_round_counts() -> None:
    d = decide_auto(2 * 108, [25_000_000, 19_000_000], 3)  # the transformer: 108 kernels per 19 ms round
    assert d.mode == "measured" and d.records_per_round == 108 and d.round_ms == pytest.approx(19.0)
    assert "cost ~0.3% per round (auto: at most 1%)" in d.reason
    assert decide_auto(0, [], 3).mode == "measured"  # no warm-up: measured


def test_the_first_warmup_round_is_left_out_when_there_are_more() -> None:
    """The first call after a collection starts is slow (3.8 ms against 0.33 ms on the H200): judged alone it
    keeps the GPU in the measured rounds; with a second warm-up round auto judges from the warm one."""
    cold, warm = 3_890_000, 330_000
    assert decide_auto(18, [cold], 3).mode == "measured"
    d = decide_auto(36, [cold, warm], 3)
    assert d.mode == "trace" and d.round_ms == pytest.approx(0.33) and d.records_per_round == 18
    assert decide_auto(36, [warm, cold], 3).round_ms == pytest.approx(3.89)  # only the first is left out


def test_trace_with_all_trace_rounds_is_one_error_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(cli={"gpu_rounds": "trace", "trace_rounds": "all"}, ini={}, env={}, rootdir=tmp_path)
    text = str(err.value)
    assert "cli --inferscope-trace-rounds" in text and "cli --inferscope-gpu-rounds" in text
    assert resolve(cli={"gpu_rounds": "auto", "trace_rounds": "all"}, ini={}, env={}, rootdir=tmp_path)
