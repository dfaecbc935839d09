"""The power study's drift ceilings: the formula the docs argue with, against the study's own model."""

from __future__ import annotations

import argparse
import math

import pytest

from benchmarks import regression_power as study


def test_the_median_ratio_rule_reaches_95_percent_exactly_at_the_drift_the_ceiling_names() -> None:
    lines = study.drift_ceilings([0.02] * 10, history=3, max_regression=0.05, alpha=0.01)
    assert lines[0].startswith("run-to-run drift of unchanged code: sigma = 2.00%")
    assert "against one baseline run: 95.0%" in lines[1]
    assert lines[-1].endswith("only while sigma <= 2.00%")
    # More drift, lower ceilings; a longer history raises the floor's ceiling towards the endless one.
    worse = study.drift_ceilings([0.03] * 10, history=3, max_regression=0.05, alpha=0.01)
    ceiling = [float(line.rsplit(": ", 1)[1].rstrip("%")) for line in worse[1:4]]
    assert ceiling[0] < 95.0 and ceiling[1] < ceiling[2] < 100.0
    assert study.drift_ceilings([], 3, 0.05, 0.01) == []


def test_the_ceiling_matches_the_studys_model_of_run_to_run_drift() -> None:
    args = argparse.Namespace(
        model=0.01, model_drift=0.03, trials=120, rounds=(20,), slowdowns=(0.10,), history=3, seed=3,
        warmup=0, round_cap=1.0, max_regression=0.05, alpha=0.01, target_ms=3.0, progress=False,
    )  # fmt: skip
    cells, _, _, log_sds = study.run_study(args)
    caught = cells[("asv", 0.10, 20)].share("regressed")
    sigma = math.sqrt(sum(s * s for s in log_sds) / len(log_sds))
    assert sigma == pytest.approx(0.03, rel=0.2)  # the medians of 20 rounds add a little to the run drift
    line = study.drift_ceilings(log_sds, 3, 0.05, 0.01)[1]
    assert 100 * caught == pytest.approx(float(line.rsplit(": ", 1)[1].rstrip("%")), abs=10)
