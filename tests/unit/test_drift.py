"""The gate's defences against machine drift: the speed probe's steady rounds and the history's noise floor."""

from __future__ import annotations

import math
import os
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


def test_a_shift_no_drift_can_explain_regresses_even_on_a_busy_machine() -> None:
    base = _rounds(3.0, 20, seed=5)
    new, new_probe = _busy_then_idle(20, busy=17, seed=6)
    new = [x * 3.0 for x in new]  # the code got 3x slower: more than the machine's 1.8x could ever explain
    v = compare_to_baseline(_entry(base, [FAST] * 21), _result(new, new_probe), max_regression=0.05)
    assert v.verdict == "regressed" and v.failed
    assert "The machine was busy" in v.reason and "while the machine was at most 1.80x slower (speed probe" in v.reason
    # The same busy machine with 1.5x slower code: the 1.8x drift could explain it, so it stays inconclusive.
    milder = [x / 2.0 for x in new]
    assert compare_to_baseline(_entry(base, [FAST] * 21), _result(milder, new_probe), max_regression=0.05).verdict == (
        "inconclusive"
    )


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


def test_noise_floor_is_z_sqrt_1_plus_1_over_k_times_the_log_sd_around_the_runs_centre() -> None:
    medians = [3.0, 3.3, 2.9, 3.1]
    floor = drift.noise_floor(medians, alpha=0.01)
    assert floor is not None and floor.runs == 4
    sd = float(np.std(np.log(medians), ddof=1))
    assert floor.log_sd == pytest.approx(sd)
    assert floor.floor == pytest.approx(math.exp(2.3263 * math.sqrt(1 + 1 / 4) * sd), rel=1e-4)
    assert floor.centre == pytest.approx(math.prod(medians) ** (1 / 4))
    assert "around 3.07 ms" in floor.describe()  # as the reports write milliseconds
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


def test_the_new_median_is_held_against_the_centre_of_the_history_not_the_latest_run() -> None:
    # Eight saved runs that drift by about 2%: from their centre, 6% stands out (floor about 1.05);
    # against the latest run alone (sqrt(2) instead of sqrt(1 + 1/8)) it would not (about 1.07).
    medians = [3.0, 3.06, 2.94, 3.02, 3.08, 2.96, 2.93, 3.01]
    history = _history(medians)
    floor = drift.noise_floor([float(np.median(e.samples_ms)) for e in history], alpha=0.01)
    assert floor is not None and floor.floor < 1.06 < math.exp(2.3263 * math.sqrt(2) * floor.log_sd)
    new = _rounds(floor.centre * 1.065, 20, seed=35)
    v = compare_to_baseline(history[-1], _result(new, [FAST] * 21), history=history, max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor == pytest.approx(floor.floor, rel=0.01)
    # A latest run that happened to be fast: significantly slower than it, but at the history's centre.
    low = _history([3.15, 3.2, 3.1, 2.95], seed=36)
    v = compare_to_baseline(low[-1], _result(_rounds(3.13, 20, seed=37), [FAST] * 21), history=low, max_regression=0.05)
    assert v.latency.ratio > 1.05 and v.latency.p_value < 0.01
    assert v.verdict == "inconclusive" and "x the centre of the saved runs" in v.reason


def test_the_floor_uses_only_the_latest_saved_runs() -> None:
    # Two runs from before a speed change on main (30% slower), then ten steady ones.
    history = _history([3.9, 3.9, 3.0, 3.01, 2.99, 3.0, 3.02, 2.98, 3.0, 3.01, 2.99, 3.0])
    assert drift.FLOOR_WINDOW == 10
    v = compare_to_baseline(history[-1], _result(_rounds(3.3, 20, seed=38), [FAST] * 21), history=history,
                            max_regression=0.05)  # fmt: skip
    assert v.verdict == "regressed" and v.noise_floor is not None and v.noise_floor < 1.03


def test_the_floor_uses_only_runs_of_the_same_environment() -> None:
    new = _rounds(3.0 * 1.10, 20, seed=40)
    others = [_entry(_rounds(m, 20, 50 + i), [FAST] * 21, fingerprint={"gpu_model": "A100"}) for i, m in
              enumerate([2.0, 4.0, 3.0])]  # fmt: skip
    latest = _history([3.0])[0]
    v = compare_to_baseline(latest, _result(new, [FAST] * 21), history=[*others, latest], max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor is None  # one run of this environment: no floor


def test_runs_saved_before_a_fingerprint_key_existed_are_of_the_same_environment() -> None:
    # The three older runs lack `tracer` (saved before it was a key); the latest has it, as "none": one environment.
    older = _history([3.0, 3.01, 2.99], seed=60)
    latest = _entry(_rounds(3.0, 20, 63), [FAST] * 21, fingerprint={"tracer": "none"})
    new = _rounds(3.0 * 1.10, 20, seed=64)
    v = compare_to_baseline(latest, _result(new, [FAST] * 21), history=[*older, latest], max_regression=0.05)
    assert v.verdict == "regressed" and v.noise_floor is not None  # four runs: a floor


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


@pytest.mark.parametrize("edit", ["1e308", "0", "-2.5"])
def test_a_saved_latency_out_of_range_is_an_error_naming_the_entry(tmp_path: Any, edit: str) -> None:
    # Edited by hand: 1e308 ms overflowed the comparison ("math range error", no verdict); 0 or a negative passed.
    store = BaselineStore(tmp_path)
    store.save("main", [_result(_rounds(3.0, 5, seed=61), [FAST] * 6)], {})
    text = store.path("main").read_text().replace('"samples_ms": [', f'"samples_ms": [{edit}, ', 1)
    store.path("main").write_text(text)
    with pytest.raises(BaselineError, match=r"entry 0 of 't\.py::test_w': samples_ms holds a latency out of range"):
        store.load("main")
    assert store.path("main").read_text() == text  # left as it was


def test_inferscope_compare_uses_the_probe_readings_of_two_baseline_files(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from pytest_inferscope.cli import EXIT_FAILED, EXIT_OK
    from pytest_inferscope.cli.compare import cmd_compare

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


class _FakeMachine:
    """A fake clock, CPU clock and probe: each round takes 3 ms of wall time; the probe reads from a script."""

    def __init__(self, readings: list[float], cpu_share: float = 1.0, device_wait: float = 0.0) -> None:
        self.readings, self.cpu_share, self.device_wait = list(readings), cpu_share, device_wait
        self.held: dict[int, float] = {}  # round -> seconds the scheduler kept the thread off the CPU in it
        self.queue_clock = True  # whether the run-queue wait is known (Linux schedstat)
        self.wall = self.cpu = self.queued = 0.0
        self.ran: list[int] = []

    def run_round(self, i: int) -> float:
        self.ran.append(i)
        self.wall += 3e-3 + self.held.get(i, 0.0)
        self.queued += self.held.get(i, 0.0)
        self.cpu += 3e-3 * self.cpu_share
        return 3e-3 * self.device_wait  # seconds of it spent in the end-of-round device wait

    def probe(self) -> float:
        return self.readings.pop(0)

    def measure(self, rounds: int, cap: int, prior: tuple[float, ...] = ()) -> drift.Measured:
        return drift.measure_steady(
            self.run_round, rounds, cap, prior=prior, probe=self.probe, clock=lambda: self.wall,
            cpu_clock=lambda: self.cpu, queue_clock=lambda: self.queued if self.queue_clock else 0.0,
        )  # fmt: skip


def test_a_steady_machine_runs_exactly_the_requested_rounds() -> None:
    m = _FakeMachine([FAST] * 100)
    done = m.measure(8, 24)
    assert m.ran == list(range(8)) and done.ran == 8 and done.extra == 0
    assert done.steady == 8 and not done.capped and len(done.probe_ms) == 9 and done.cpu_share == pytest.approx(1.0)


def test_unsteady_rounds_are_made_up_for_until_enough_are_steady() -> None:
    # Every fourth reading is busy: rounds 2, 3, 6, 7, ... lie next to one, so 8 steady rounds
    # (0, 1, 4, 5, 8, 9, 12, 13) take 14 rounds.
    m = _FakeMachine([SLOW if i % 4 == 3 else FAST for i in range(100)])
    done = m.measure(8, 24)
    assert done.ran == 14 and done.extra == 6 and done.steady == 8 and not done.capped
    assert m.ran == list(range(14)) and len(done.probe_ms) == 15
    assert list(drift.steady_mask(done.probe_ms, FAST)).count(True) == 8


def test_a_busy_machine_stops_at_the_cap_and_says_so() -> None:
    m = _FakeMachine([FAST] + [SLOW if i % 2 else FAST for i in range(100)])  # no two fast readings in a row
    done = m.measure(8, 20)
    assert done.ran == 20 and done.extra == 12 and done.capped and done.steady < 8
    assert m.measure(8, 8).ran == 8  # a cap of the requested rounds: never more


def test_a_whole_run_at_the_slow_speed_is_unsteady_against_the_prior_readings() -> None:
    alone = _FakeMachine([SLOW] * 100).measure(8, 16)
    assert alone.ran == 8 and alone.steady == 8  # nothing to tell it was slow
    told = _FakeMachine([SLOW] * 100).measure(8, 16, prior=(FAST,) * 20)  # e.g. the baseline's readings
    assert told.ran == 16 and told.steady == 0 and told.capped


def test_rounds_that_are_not_cpu_bound_get_no_extra_rounds() -> None:
    m = _FakeMachine([SLOW if i % 4 == 3 else FAST for i in range(100)], cpu_share=0.2)  # mostly sleeping
    done = m.measure(8, 24)
    assert done.ran == 8 and done.extra == 0 and not done.capped and done.cpu_share == pytest.approx(0.2)


def test_rounds_held_off_the_cpu_by_the_scheduler_are_cpu_bound_and_made_up_for() -> None:
    # A loaded machine: the thread waits on the run queue for half of rounds 0-4, and for 20 ms in
    # round 5. Its CPU time is a small share of the wall time, yet it is a CPU-bound test at a
    # busy moment, so the busy rounds are made up for.
    busy = [SLOW if i % 4 == 3 else FAST for i in range(100)]
    m = _FakeMachine(busy)
    m.held = {**{i: 3e-3 for i in range(5)}, 5: 20e-3}
    done = m.measure(8, 24)
    assert done.ran == 14 and done.extra == 6 and done.cpu_share == pytest.approx(1.0)
    # Without the run-queue clock (not Linux), the median round still says CPU-bound when one round was held.
    m = _FakeMachine(busy)
    m.held, m.queue_clock = {0: 20e-3}, False
    assert m.measure(8, 24).ran == 14


def test_the_run_queue_clock_reads_this_threads_wait() -> None:
    clock = drift.run_queue_clock()
    first = clock()
    assert first >= 0.0 and clock() >= first
    if os.path.exists("/proc/thread-self/schedstat"):
        with open("/proc/thread-self/schedstat") as f:
            assert first <= int(f.read().split()[1]) / 1e9 <= clock()
    getattr(clock, "close", lambda: None)()


def test_the_verdict_says_how_many_extra_rounds_ran_and_why() -> None:
    assert drift.extra_rounds_note(20, 20) == ""
    samples, probe = _busy_then_idle(30, busy=10, seed=5)
    base = _entry(_rounds(3.0, 20, 6), [FAST] * 21)
    result = _result(samples, probe)
    result.rounds = 20  # requested 20, ran 30
    v = compare_to_baseline(base, result, max_regression=0.05)
    assert "30 rounds ran, 10 more than the 20 requested: the speed probe found the machine busy" in v.steady
    assert "20 of this run's 30 ran at the machine's usual speed" in v.steady
    assert v.verdict == "unchanged"


def test_the_marker_takes_a_round_cap_of_at_least_one() -> None:
    from pytest_inferscope.checks import validate_marker

    assert validate_marker("t.py::test_w", (), {"round_cap": 2}) == []
    (problem,) = validate_marker("t.py::test_w", (), {"round_cap": 0.5})
    assert "round_cap" in problem and "0.5 is out of range: give a number >= 1 and <= 100" in problem


def test_a_host_spinning_in_the_end_of_round_device_wait_is_not_cpu_bound() -> None:
    # A GPU-bound round: the host queues work, then spins in our synchronize for 90% of the round, burning CPU.
    busy = [FAST] + [SLOW if i % 2 else FAST for i in range(100)]
    gpu_bound = _FakeMachine(busy, cpu_share=1.0, device_wait=0.9).measure(8, 24)
    assert gpu_bound.ran == 8 and gpu_bound.extra == 0 and not gpu_bound.capped
    assert gpu_bound.cpu_share == pytest.approx(0.1)  # only the 10% outside the wait counts as CPU work
    cpu_bound = _FakeMachine(busy, cpu_share=1.0, device_wait=0.0).measure(8, 24)
    assert cpu_bound.ran == 24 and cpu_bound.capped  # the same readings make a CPU-bound test run to the cap
