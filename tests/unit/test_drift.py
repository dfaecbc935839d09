"""The gate's defences against machine drift: the speed probe's steady rounds and the history's noise floor."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_inferscope import drift
from pytest_inferscope.baseline import BaselineEntry, BaselineError, BaselineStore
from pytest_inferscope.regression import compare_to_baseline
from pytest_inferscope.results import Analysis, LatencyStats, TestResult

FAST, SLOW = 0.045, 0.081  # probe readings (ms) on an idle core and with the other vCPU busy, as measured


def _rounds(median: float, n: int, seed: int, sigma: float = 0.01) -> list[float]:
    return [float(x) for x in np.exp(np.random.default_rng(seed).normal(math.log(median), sigma, n))]


def _result(samples: list[float], probe: list[float], *, bottleneck: str = "cpu_bound", working: float = 1.0) -> Any:
    latency = LatencyStats.from_samples(samples)
    latency.probe_ms = probe
    analysis = Analysis(bottleneck=bottleneck, confidence=0.9, metrics={"cpu.test_thread_working": working})
    return TestResult("t.py::test_w", "t", "passed", "pass", len(samples), 3, latency, analysis)


def _entry(samples: list[float], probe: list[float], **kw: Any) -> BaselineEntry:
    return BaselineEntry("t.py::test_w", samples, probe_ms=probe, rounds=len(samples), **kw)


def _busy_then_idle(n: int, busy: int, seed: int) -> tuple[list[float], list[float]]:
    """n rounds of a 3 ms body whose first `busy` rounds ran 1.8x slower, with the probe readings that saw it."""
    samples = _rounds(3.0, n, seed)
    samples = [x * 1.8 if i < busy else x for i, x in enumerate(samples)]
    probe = [SLOW if i < busy else FAST for i in range(n)] + [FAST]
    return samples, probe


def test_probe_reading_is_a_short_positive_time() -> None:
    readings = [drift.probe_ms() for _ in range(5)]
    assert all(0 < r < 50 for r in readings)  # well under a round even on a slow, busy machine


def test_probe_fits_needs_one_reading_more_than_rounds() -> None:
    assert drift.probe_fits([1.0, 1.0, 1.0], 2)
    assert not drift.probe_fits([1.0, 1.0], 2) and not drift.probe_fits([], 0)
    assert not drift.probe_fits([1.0, math.nan, 1.0], 2) and not drift.probe_fits([1.0, 0.0, 1.0], 2)


def test_a_round_is_steady_only_when_the_readings_on_both_sides_are() -> None:
    mask = drift.steady_mask([1.0, 1.1, 1.5, 1.0, 1.19, 1.21], reference_ms=1.0, tolerance=0.2)
    assert mask.tolist() == [True, False, False, True, False]
    with pytest.raises(ValueError, match="tolerance"):
        drift.steady_mask([1.0, 1.0], 1.0, tolerance=0.0)


def test_reference_is_a_low_percentile_of_both_runs() -> None:
    assert drift.probe_reference([SLOW] * 30, [FAST] * 10) == pytest.approx(FAST)
    assert drift.probe_reference([SLOW] * 40) == pytest.approx(SLOW)  # a machine busy throughout: its own speed
    assert math.isnan(drift.probe_reference())


def test_steady_rounds_drop_the_busy_ones_and_scale_by_the_readings() -> None:
    samples, probe = _busy_then_idle(10, busy=4, seed=1)
    steady = drift.steady_rounds(samples, probe, samples, probe)
    assert steady is not None and steady.base_ms == samples[4:] and steady.base_total == 10
    assert steady.reference_ms == pytest.approx(FAST)
    assert steady.base_scaled_ms == pytest.approx(samples[4:])  # at the reference speed scaling changes nothing
    assert "6 of the baseline's 10 rounds" in steady.describe()
    assert drift.steady_rounds(samples, probe[:-1], samples, probe) is None  # readings that don't fit: no probe


def test_probe_applies_only_to_cpu_bound_rounds() -> None:
    assert drift.probe_applies("cpu_bound", 0.97) == ""
    assert drift.probe_applies("launch_bound", None) == ""
    assert "gpu_bound" in drift.probe_applies("gpu_bound", 1.0)
    assert "worked only 10%" in drift.probe_applies("unclassified", 0.1)


# --- the gate with the probe ---------------------------------------------------------------


def test_a_slower_machine_in_the_new_run_is_not_a_regression_with_the_probe() -> None:
    base = _rounds(3.0, 20, seed=1)
    new, new_probe = _busy_then_idle(20, busy=12, seed=2)  # 12 of 20 rounds on a busy machine, same code
    without = compare_to_baseline(_entry(base, []), _result(new, []), max_regression=0.05)
    assert without.verdict == "regressed"  # what the plain rule says: the false positive of the study
    v = compare_to_baseline(_entry(base, [FAST] * 21), _result(new, new_probe), max_regression=0.05)
    assert v.verdict == "unchanged" and v.latency.base_n == 20 and v.latency.new_n == 8
    assert "8 of this run's 20 ran" in v.steady and "machine speed: 20 of the baseline's" in v.message()


def test_a_real_regression_still_fails_with_the_probe_on_a_drifting_machine() -> None:
    base, base_probe = _busy_then_idle(20, busy=5, seed=3)
    new, new_probe = _busy_then_idle(20, busy=8, seed=4)
    new = [x * 1.10 for x in new]  # the code got 10% slower
    v = compare_to_baseline(_entry(base, base_probe), _result(new, new_probe), max_regression=0.05)
    assert v.verdict == "regressed" and v.failed
    assert v.latency.ratio == pytest.approx(1.10, abs=0.02)


def test_a_machine_busy_in_almost_every_round_is_inconclusive_with_the_reason() -> None:
    base = _rounds(3.0, 20, seed=5)
    new, new_probe = _busy_then_idle(20, busy=17, seed=6)
    v = compare_to_baseline(_entry(base, [FAST] * 21), _result(new, new_probe), max_regression=0.05)
    assert v.verdict == "inconclusive" and not v.failed
    assert v.reason.startswith("The machine was busy: 20 of the baseline's 20 rounds and 3 of this run's 20")
    assert v.latency.new_n == 20 and v.latency.ratio > 1.5  # the numbers of all rounds are still shown


def test_a_shift_the_probe_explains_is_taken_back() -> None:
    # Mild contention: the probe ran 8% slower throughout the new run (within the tolerance, so
    # every round is "steady") and the code 8% slower with it.
    base = _rounds(3.0, 20, seed=7)
    new = [x * 1.08 for x in _rounds(3.0, 20, seed=8)]
    v = compare_to_baseline(
        _entry(base, [FAST] * 21), _result(new, [FAST * 1.08] * 21), max_regression=0.05, baseline_name="main"
    )
    assert v.verdict == "unchanged" and "once the machine's speed is allowed for" in v.reason
    same_probe = compare_to_baseline(_entry(base, [FAST] * 21), _result(new, [FAST] * 21), max_regression=0.05)
    assert same_probe.verdict == "regressed"  # the same rounds with a steady probe: a regression


def test_gpu_bound_or_idle_rounds_do_not_use_the_probe_but_say_it_drifted() -> None:
    base = _rounds(3.0, 20, seed=9)
    new = _rounds(3.0, 20, seed=10)
    for kw, why in (({"bottleneck": "gpu_bound"}, "gpu_bound"), ({"working": 0.05}, "worked only 5%")):
        v = compare_to_baseline(_entry(base, [FAST] * 21), _result(new, [SLOW] * 21, **kw), max_regression=0.05)
        assert v.verdict == "unchanged" and v.steady == "" and v.latency.new_n == 20
        assert any("the host CPU ran 80% slower" in w and why in w for w in v.warnings), v.warnings


# --- the noise floor -----------------------------------------------------------------------


def test_noise_floor_is_z_sqrt2_times_the_log_sd_of_the_run_medians() -> None:
    medians = [3.0, 3.3, 2.9, 3.1]
    floor = drift.noise_floor(medians, alpha=0.01)
    assert floor is not None and floor.runs == 4
    sd = float(np.std(np.log(medians), ddof=1))
    assert floor.log_sd == pytest.approx(sd)
    assert floor.floor == pytest.approx(math.exp(2.3263 * math.sqrt(2) * sd), rel=1e-4)
    assert drift.noise_floor([3.0, 3.1], alpha=0.01) is None  # too few runs
    assert drift.noise_floor([3.0, 3.1, math.nan], alpha=0.01) is None


def _history(medians: list[float], seed: int = 20) -> list[BaselineEntry]:
    return [_entry(_rounds(m, 20, seed + i), [FAST] * 21) for i, m in enumerate(medians)]


def test_a_shift_within_the_historys_drift_is_inconclusive_and_beyond_it_regressed() -> None:
    new = _rounds(3.0 * 1.08, 20, seed=30)
    drifting = _history([3.0, 3.25, 2.8])  # main's own runs move by about 7%
    v = compare_to_baseline(drifting[-1], _result(new, [FAST] * 21), history=drifting, max_regression=0.05)
    assert v.latency.ratio > 1.05 and v.verdict == "inconclusive"
    assert v.reason.startswith("Within the run-to-run drift: slower by") and v.noise_floor is not None
    assert any("more than the allowed 5%" in w for w in v.warnings)
    steady = _history([3.0, 3.01, 3.0 * 1.08 / 1.08])
    v = compare_to_baseline(steady[-1], _result(new, [FAST] * 21), history=steady, max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor is not None and v.noise_floor < 1.05
    assert "run-to-run noise floor: ratio" in v.message()


def test_the_floor_uses_only_runs_of_the_same_environment() -> None:
    new = _rounds(3.0 * 1.10, 20, seed=40)
    others = [_entry(_rounds(m, 20, 50 + i), [FAST] * 21, fingerprint={"gpu_model": "A100"}) for i, m in
              enumerate([2.0, 4.0, 3.0])]  # fmt: skip
    latest = _history([3.0])[0]
    v = compare_to_baseline(latest, _result(new, [FAST] * 21), history=[*others, latest], max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor is None  # one run of this environment: no floor


def test_probe_readings_are_saved_and_loaded_and_a_bad_list_is_an_error(tmp_path: Any) -> None:
    store = BaselineStore(tmp_path)
    result = _result(_rounds(3.0, 5, seed=60), [FAST] * 6)
    store.save("main", [result], {})
    (loaded,) = store.load("main").history["t.py::test_w"]
    assert loaded.probe_ms == pytest.approx([FAST] * 6)
    text = store.path("main").read_text().replace('"probe_ms": [', '"probe_ms": ["x", ')
    store.path("main").write_text(text)
    with pytest.raises(BaselineError, match="probe_ms is not a list of finite numbers"):
        store.load("main")


def test_inferscope_compare_uses_the_probe_readings_of_two_baseline_files(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from pytest_inferscope.cli import EXIT_FAILED, EXIT_OK
    from pytest_inferscope.cli_compare import cmd_compare

    store = BaselineStore(tmp_path)
    store.save("a", [_result(_rounds(3.0, 20, seed=70), [FAST] * 21)], {})
    busy, busy_probe = _busy_then_idle(20, busy=12, seed=71)  # same code, a busy machine in 12 rounds
    store.save("b", [_result(busy, busy_probe)], {})
    store.save("c", [_result(busy, [])], {})  # the same rounds without readings

    def compare(b: str) -> tuple[int, str]:
        args = argparse.Namespace(a=str(store.path("a")), b=str(store.path(b)), max_regression=0.05, alpha=0.01)
        return cmd_compare(args), capsys.readouterr().out

    code, out = compare("b")
    assert code == EXIT_OK and "1 unchanged" in out
    code, out = compare("c")
    assert code == EXIT_FAILED and "1 regressed" in out


def test_saved_runs_from_a_busy_machine_are_left_out_of_the_floor_and_that_is_said() -> None:
    quiet = _history([3.0, 3.01])
    busy_samples, busy_probe = _busy_then_idle(20, busy=18, seed=80)  # 2 steady rounds: not usable
    history = [_entry(busy_samples, busy_probe), *quiet]
    new = _rounds(3.3, 20, seed=81)
    v = compare_to_baseline(history[-1], _result(new, [FAST] * 21), history=history, max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor is None
    assert any(w.startswith("no run-to-run noise floor: only 2 of the 3 saved runs") for w in v.warnings)
