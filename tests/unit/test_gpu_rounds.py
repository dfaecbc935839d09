"""gpu_rounds: auto's decision after the warm-up, and the trace_rounds=all conflict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_trace_rounds import FakeGpu

from pytest_inferscope.collectors.gpu_rounds import (
    AUTO_LEAN_ABOVE,
    FIRST_ROUND_SLOWDOWN,
    RECORD_COST_NS,
    WORK_KINDS,
    _work,
    busy_ns,
    decide_auto,
    undecided,
    work_records,
)
from pytest_inferscope.config import ConfigError, resolve
from pytest_inferscope.events import EVENT_DTYPE, Kind
from pytest_inferscope.results import TestResult


def test_dense_kernels_go_lean_with_the_numbers_in_the_reason() -> None:
    d = decide_auto(36, [3_890_000, 310_000], 3)  # the small forward: 18 kernels per 0.31 ms round
    assert d.mode == "trace" and d.estimated_cost == pytest.approx(18 * RECORD_COST_NS / 310_000)
    assert d.estimated_cost > AUTO_LEAN_ABOVE
    assert d.reason.startswith(
        "GPU activity recorded only after the measured rounds, in 3 profile rounds and the trace rounds: "
        "the warm-up's 18 GPU records"
    )
    assert "0.31 ms round would have cost ~5.8% per round" in d.reason


def test_sparse_kernels_stay_measured_and_the_fastest_warmup_round_counts() -> None:
    d = decide_auto(2 * 108, [25_000_000, 19_000_000], 3)  # the transformer: 108 kernels per 19 ms round
    assert d.mode == "measured" and d.records_per_round == 108 and d.round_ms == pytest.approx(19.0)
    assert "cost ~0.6% per round (auto: at most 1%)" in d.reason
    assert decide_auto(0, [], 3).mode == "measured"  # no warm-up: measured


def test_the_first_warmup_round_is_left_out_when_there_are_more() -> None:
    """The first call after a collection starts is slow (3.8 ms against 0.33 ms on the H200); with a second
    warm-up round auto judges from the warm one."""
    cold, warm = 3_890_000, 330_000
    d = decide_auto(36, [cold, warm], 3)
    assert d.mode == "trace" and d.round_ms == pytest.approx(0.33) and d.records_per_round == 18
    assert decide_auto(36, [warm, cold], 3).round_ms == pytest.approx(3.89)  # only the first is left out


def test_one_warmup_round_counts_as_up_to_three_times_slower_but_never_faster_than_the_gpu() -> None:
    # timm ViT-B/16 on the H100 (2026-11-25): 294 records in a first round of 20.6 ms, 7.75 ms after it. Judged
    # from the first round as it is, the records would cost 1.4%; as 6.9 ms, 4.3%: lean either way now.
    vit = decide_auto(294, [20_610_000], 3, busy=3_300_000)
    assert vit.mode == "trace" and vit.round_ms == pytest.approx(20.61 / FIRST_ROUND_SLOWDOWN)
    assert "from the one warm-up round of 20.61 ms, the first after CUPTI started" in vit.reason
    # GPT-2 forward (GPU-bound): 247 records, a 58.6 ms first round, the GPU busy 55 ms of it. Over 3 the
    # round would be 19.5 ms and the records 1.3%; the GPU's busy time says the round takes 55 ms: 0.45%.
    gpt2 = decide_auto(247, [58_610_000], 3, busy=55_000_000)
    assert gpt2.mode == "measured" and gpt2.round_ms == pytest.approx(55.0)
    assert decide_auto(247, [58_610_000], 3).mode == "trace"  # without the busy time: lean


def test_the_busy_time_is_the_union_of_the_work_records() -> None:
    recs = np.zeros(5, dtype=EVENT_DTYPE)
    recs["kind"] = [Kind.KERNEL, Kind.KERNEL, Kind.MEMCPY, Kind.RUNTIME, Kind.KERNEL]
    recs["start"] = [100, 150, 400, 0, 1000]
    recs["end"] = [300, 250, 500, 5000, 1010]  # the RUNTIME call spans all, and is not GPU work
    assert busy_ns(recs) == 200 + 100 + 10
    assert busy_ns(recs[3:4]) == 0 and busy_ns(recs[:0]) == 0


def test_the_work_records_are_the_kernels_copies_and_memsets() -> None:
    recs = np.zeros(len(Kind), dtype=EVENT_DTYPE)
    recs["kind"] = list(Kind)
    assert work_records(recs) == 3 == len(WORK_KINDS)
    assert sorted(Kind(k) for k in recs["kind"][_work(recs)]) == sorted(WORK_KINDS)


def test_auto_is_the_default(tmp_path: Path) -> None:
    assert resolve(cli={}, ini={}, env={}, rootdir=tmp_path).gpu_rounds == "auto"


def test_trace_with_all_trace_rounds_is_one_error_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(cli={"gpu_rounds": "trace", "trace_rounds": "all"}, ini={}, env={}, rootdir=tmp_path)
    text = str(err.value)
    assert "cli --inferscope-trace-rounds" in text and "cli --inferscope-gpu-rounds" in text
    assert resolve(cli={"gpu_rounds": "auto", "trace_rounds": "all"}, ini={}, env={}, rootdir=tmp_path)


class _RecordingGpu(FakeGpu):
    """A GPU backend whose every body call leaves `per_call` 1 µs kernel records, handed over by flush or stop."""

    def __init__(self, per_call: int, flushes: bool = True) -> None:
        super().__init__()
        self.per_call, self.pending, self.ready, self.t = per_call, 0, 0, 0
        if not flushes:
            self.flush = None  # type: ignore[assignment]  # a backend that can only stop

    def launch(self) -> None:
        self.calls.append("body")
        self.pending += self.per_call

    def flush(self) -> None:
        self.calls.append("flush")
        self.ready, self.pending = self.ready + self.pending, 0

    def stop(self) -> None:
        super().stop()
        self.ready, self.pending = self.ready + self.pending, 0

    def drain(self) -> tuple[np.ndarray, list[str]]:
        recs = np.zeros(self.ready, dtype=EVENT_DTYPE)
        recs["kind"] = Kind.KERNEL
        recs["start"] = self.t + 2_000 * np.arange(self.ready)
        recs["end"] = recs["start"] + 1_000
        self.t += 2_000 * self.ready
        self.ready = 0
        return recs, ["k"]


def _measure(monkeypatch: pytest.MonkeyPatch, gpu: _RecordingGpu, sleep_s: float, first_s: float | None = None,
             trace_rounds: int | None = None, driver: str = "sync") -> TestResult:  # fmt: skip
    """measure() a body that launches and sleeps `sleep_s` (`first_s` in its first call); with `driver` "async",
    measure_async() of an async body that does the same (schedule.run_async: the same rounds, each awaited)."""
    import asyncio
    import time

    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]

    def body() -> None:
        first = "body" not in gpu.calls
        gpu.launch()
        time.sleep(first_s if first and first_s is not None else sleep_s)

    if driver == "async":

        async def awaited() -> None:
            body()
            await asyncio.sleep(0)

        return asyncio.run(api_measure.measure_async(awaited, rounds=3, warmup=1, cpu="off", trace_rounds=trace_rounds))
    return api_measure.measure(body, rounds=3, warmup=1, cpu="off", trace_rounds=trace_rounds)  # gpu_rounds: auto


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> str:
    """The test through measure() and through measure_async(): an async body takes the same rounds."""
    return str(request.param)


@pytest.mark.usefixtures("every_round_in_step")
def test_auto_records_the_launch_calls_in_the_measured_rounds_when_all_records_fit_the_budget(
    driver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2 records per 30 ms call (one warm-up round: taken as 10 ms), and as many launch calls: ~0.04% per round.
    # CUPTI is flushed, not stopped (the first call after a restart would be slow, and a latency sample), the
    # launch calls the warm-up recorded stay on for the measured rounds, and no trace round runs.
    gpu = _RecordingGpu(per_call=2)
    result = _measure(monkeypatch, gpu, 0.03, driver=driver)
    b = ["body"]
    assert gpu.calls == ["start", *b, "flush", *b * 3, "stop"]
    assert len(result.latency.samples_ms) == 3 and not result.latency.trace_ms
    mode = _gpu_mode(result)
    assert "GPU activity and the launch calls recorded in the measured rounds, no trace round" in mode
    assert "trace round after" not in mode


@pytest.mark.parametrize(("per_call", "trace_rounds", "slow_warmup"), [(600, None, True), (2, 1, False)])
def test_auto_keeps_the_launch_calls_for_the_trace_round_when_they_would_cost_too_much_or_it_is_asked_for(
    monkeypatch: pytest.MonkeyPatch, per_call: int, trace_rounds: int | None, slow_warmup: bool
) -> None:
    # 600 records per 90 ms warm-up round (two: the second is the round): ~0.67% per round, ~1.3% with the launch
    # calls, so they are switched off for the measured rounds; the measured rounds take 30 ms, so neither warm-up
    # round ran in step to stand for the trace round, which runs. Or the number of trace rounds given: it runs.
    import time

    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors import schedule
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=per_call)
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    # The trace round counts as in step: a loaded machine (CI, once) delayed it past the 10% and one more ran. Whether
    # the warm-up stands for it is still judged by rounds.in_step (90 against 30 ms: it does not).
    monkeypatch.setattr(schedule, "_in_step", lambda *_args, **_kw: True)

    def body() -> None:
        gpu.launch()
        time.sleep(0.09 if slow_warmup and gpu.calls.count("body") <= 2 else 0.03)

    result = api_measure.measure(body, rounds=3, warmup=2, cpu="off", trace_rounds=trace_rounds)
    b = ["body"]
    warm = [*b * 2, "flush"] if trace_rounds is None else ["api off", *b * 2, "flush"]
    switched = ["api off"] if trace_rounds is None else []
    assert gpu.calls == ["start", *warm, *switched, *b * 3, "api on", *b, "api off", "stop"]
    assert len(result.latency.samples_ms) == 3 and len(result.latency.trace_ms) == 1
    assert "GPU activity recorded in the measured rounds" in _gpu_mode(result)
    assert "stood for the trace round" not in _gpu_mode(result)


@pytest.mark.usefixtures("every_round_in_step")
def test_auto_staying_measured_reads_the_launch_calls_from_a_warmup_in_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 records per 30 ms round: measured, the launch calls off for the measured rounds. The warm-up recorded them
    # and ran in step with the measured rounds: it stands for the trace round, which does not run.
    gpu = _RecordingGpu(per_call=200)
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]

    def body() -> None:
        import time

        gpu.launch()
        time.sleep(0.03)

    result = api_measure.measure(body, rounds=3, warmup=2, cpu="off")
    b = ["body"]
    assert gpu.calls == ["start", *b * 2, "flush", "api off", *b * 3, "stop"]
    assert len(result.latency.samples_ms) == 3 and not result.latency.trace_ms
    mode = _gpu_mode(result)
    assert "GPU activity recorded in the measured rounds" in mode
    assert "the warm-up recorded the launch calls and, in step with the measured rounds, stood for the trace" in mode


@pytest.mark.parametrize("gpu_rounds", ["auto", "trace"])
def test_a_body_without_gpu_work_gets_no_trace_round_and_lean_never_starts_cupti(
    monkeypatch: pytest.MonkeyPatch, gpu_rounds: str
) -> None:
    """No CUDA context active after the measured rounds (a CPU-only test on a GPU machine): no extra call."""
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=0)
    gpu.has_context = lambda: False  # type: ignore[attr-defined]
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    result = api_measure.measure(gpu.launch, rounds=3, warmup=1, cpu="off", gpu_rounds=gpu_rounds)
    assert gpu.calls == ["body"] * 4  # auto, with no context at the start, is lean too: CUPTI never started
    assert len(result.latency.samples_ms) == 3 and not result.latency.trace_ms
    mode = _gpu_mode(result)
    assert "no trace round: no CUDA context was active" in mode
    # auto without a context before or after the measured rounds says so, not what CUPTI would have done
    short = "no CUDA context in the process when the test started: CUPTI never started; no trace round"
    assert (short in mode) is (gpu_rounds == "auto") and "which starts after them" not in mode, mode


@pytest.mark.usefixtures("every_round_in_step")
@pytest.mark.parametrize(("later", "trace_rounds", "traced"), [(0, None, False), (2, None, True), (0, 1, True)])
def test_a_body_without_gpu_work_in_a_process_with_cuda_up_gets_no_trace_round_unless_asked(
    monkeypatch: pytest.MonkeyPatch, later: int, trace_rounds: int | None, traced: bool
) -> None:
    """A CPU-only test after a GPU test (CUDA up): its warm-up recorded no GPU work, and neither did its measured rounds
    (flushed after them to know), so no trace round calls it once more to link nothing. A body whose GPU work starts
    after its first call (`later` records a call from the second on), or trace rounds asked for, gets its trace
    round."""
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=0)
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]

    def body() -> None:
        gpu.launch()
        gpu.per_call = later  # from the second call on

    result = api_measure.measure(body, rounds=3, warmup=1, cpu="off", trace_rounds=trace_rounds)
    b = ["body"]
    if traced:  # the trace round: one call more, with the launch calls on
        assert gpu.calls[-4:] == ["api on", *b, "api off", "stop"] and gpu.calls.count("body") == 5, gpu.calls
        assert len(result.latency.trace_ms) == 1
    else:  # the warm-up's records counted (a flush), the measured rounds', and no call more
        assert gpu.calls == ["start", *b, "flush", "api off", *b * 3, "flush", "stop"]
        assert not result.latency.trace_ms and len(result.latency.samples_ms) == 3
        assert "no trace round: neither the warm-up nor the measured rounds did GPU work" in _gpu_mode(result)


@pytest.mark.usefixtures("every_round_in_step")
def test_auto_without_a_context_at_the_start_goes_lean_and_starts_cupti_once_the_body_started_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first GPU test of a process: its warm-up starts CUDA, so nothing could be counted before it."""
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=2)
    gpu.has_context = lambda: "body" in gpu.calls  # type: ignore[attr-defined]  # the first call starts CUDA
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    result = api_measure.measure(gpu.launch, rounds=3, warmup=1, cpu="off")
    b = ["body"]
    # no CUPTI in the warm-up and measured rounds; then a settling round (nothing counted: no prime) and the trace
    # round, the launch calls on since CUPTI started: in step, it stands for the profile round, which does not run
    assert gpu.calls == [*b * 4, "start", *b, *b, "api off", "stop"]
    mode = _gpu_mode(result)
    assert "no CUDA context in the process when the test started" in mode
    assert "the trace round ran first and, in step with the measured rounds, stood for the profile round" in mode
    assert len(result.latency.samples_ms) == 3 and len(result.latency.trace_ms) == 1
    assert any(part.name.endswith("(trace rounds)") for part in result.analysis.breakdown), result.analysis.breakdown


@pytest.mark.parametrize("profile_in_step", [True, False])
def test_a_warmup_standing_for_nothing_runs_the_trace_round_first_and_profile_rounds_only_if_it_is_out_of_step(
    driver: str, monkeypatch: pytest.MonkeyPatch, profile_in_step: bool
) -> None:
    """auto gone lean, its warm-up out of step for both rounds (a 60 ms first call against 1 ms calls): CUPTI starts
    after the measured rounds with the launch calls on, for the trace round. In step as a profile round would be too,
    it stands for it (one round after the measured ones, not two); in step only with a trace round's allowance (its
    launch calls cost more than a profile round may run over), the launch calls go off and a profile round runs."""
    from pytest_inferscope.collectors import schedule

    # a trace round's allowance 1, a profile round's 0; the 60 ms warm-up out of step with either; the trace round out
    # of step with the profile round's allowance when `profile_in_step` is False (the first 1 ms round judged with it)
    monkeypatch.setattr(
        schedule, "allowance", lambda kind, lean, cost: 1.0 if kind is schedule.RoundKind.TRACE else 0.0
    )
    judged: list[float] = []

    def in_step(wall_ns: float, measured: object, record_cost: float = 0.0) -> bool:
        if wall_ns >= 30_000_000:
            return False
        judged.append(record_cost)
        return profile_in_step or record_cost > 0 or judged.count(0.0) > 1

    monkeypatch.setattr(schedule, "in_step", in_step)
    gpu = _RecordingGpu(per_call=400)
    result = _measure(monkeypatch, gpu, 0.001, first_s=0.06, driver=driver)
    b = ["body"]
    after = gpu.calls[len(gpu.calls) - gpu.calls[::-1].index("start") - 1 :]
    mode = _gpu_mode(result)
    assert "the warm-up ran in step" not in mode, mode
    if profile_in_step:  # start (launch calls on), a settling round (no prime on this backend), the trace round
        assert after == ["start", *b, *b, "api off", "stop"], after
        assert "the trace round ran first and, in step with the measured rounds, stood for the profile round" in mode
        assert any(part.name.endswith("(trace rounds)") for part in result.analysis.breakdown)
    else:  # ... then the launch calls off and the profile round
        assert after == ["start", *b, *b, "api off", *b, "stop"], after
        assert "stood for the profile round" not in mode, mode
        assert any(part.name.endswith("(profile rounds)") for part in result.analysis.breakdown)
    # the rounds after the measured ones (trace_ms: the trace round, and the profile round where one ran)
    assert len(result.latency.trace_ms) == (1 if profile_in_step else 2) and len(result.latency.samples_ms) == 3


def test_gpu_rounds_trace_asked_for_keeps_its_profile_rounds_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--inferscope-gpu-rounds=trace` (no warm-up recorded, so none stands in) runs the profile rounds first, as it
    says; only auto's warm-up that stood for neither round begins with the trace round."""
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors import schedule
    from pytest_inferscope.collectors.gpu import Choice

    monkeypatch.setattr(schedule, "in_step", lambda *_a, **_k: True)
    gpu = _RecordingGpu(per_call=400)
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    api_measure.measure(gpu.launch, rounds=3, warmup=1, cpu="off", gpu_rounds="trace")
    after = gpu.calls[gpu.calls.index("start") :]
    assert after == ["start", "api off", "body", "body", "api on", "body", "api off", "stop"], after


def _gpu_mode(result: TestResult) -> str:
    return next(c.mode for c in result.collectors if c.name == "gpu")


@pytest.mark.usefixtures("every_round_in_step")
def test_auto_stops_cupti_after_the_warmup_when_it_goes_lean(driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 400 records per 1 ms call: ~13% per round (one warm-up round: taken as 0.33 ms, at least).
    gpu = _RecordingGpu(per_call=400)
    result = _measure(monkeypatch, gpu, 0.001, driver=driver)
    b = ["body"]
    # The warm-up recorded GPU activity and the launch calls, and ran in step with the measured rounds: it stands
    # for the profile and the trace round. CUPTI does not start again, and no round runs after the measured ones.
    assert gpu.calls == ["start", *b, "flush", "stop", *b * 3]
    assert "stood for the profile and trace rounds: no round ran after the measured ones" in _gpu_mode(result)
    assert len(result.latency.samples_ms) == 3 and not result.latency.trace_ms
    assert any(part.name.endswith("(warm-up rounds)") for part in result.analysis.breakdown)  # GPU figures read from it


@pytest.mark.usefixtures("every_round_in_step")
def test_without_the_warmups_launch_calls_it_stands_for_the_profile_round_only(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_inferscope.collectors import gpu_rounds

    monkeypatch.setattr(gpu_rounds, "WARMUP_LAUNCH_CALLS", False)  # the schedule before session 17
    gpu = _RecordingGpu(per_call=400)
    result = _measure(monkeypatch, gpu, 0.001, driver=driver)
    b = ["body"]
    # The warm-up recorded GPU activity without the launch calls: it stands for the profile round. CUPTI starts
    # again with the launch calls on (no switching off and on again), a settling round (no prime on this backend),
    # then the trace round.
    lean = ["start", *b, *b, "api off", "stop"]
    assert gpu.calls == ["start", "api off", *b, "flush", "stop", *b * 3, *lean]
    mode = _gpu_mode(result)
    assert "stood for the profile round" in mode and "stood for the profile and trace rounds" not in mode
    assert len(result.latency.trace_ms) == 1  # the trace round (the settling round is no sample)


def test_a_warmup_slowed_by_its_launch_calls_stands_for_the_trace_round_only(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 12,600 records in a 63 ms warm-up round (taken as 21 ms): ~60% per round, lean. 30 ms measured rounds: the
    # warm-up is in step within a trace round's allowance (its records and as many launch calls: up to 72.6 ms) and
    # not within a profile round's (its activity records alone: up to 52.8 ms), so its GPU figures are not read and
    # a profile round runs, with the launch calls off; no trace round. The warm-up sits ~10 ms from either bound: a
    # loaded machine that delays the measured rounds by up to ~13 ms more than the warm-up still reads the same.
    gpu = _RecordingGpu(per_call=12_600)
    result = _measure(monkeypatch, gpu, 0.03, first_s=0.063, driver=driver)
    b = ["body"]
    after = gpu.calls[len(gpu.calls) - gpu.calls[::-1].index("start") - 1 :]
    assert gpu.calls[:5] == ["start", *b, "flush", "stop", *b] and gpu.calls.count("start") == 2
    # a settling round (no prime on this backend), then profile rounds until one runs in step
    assert after[:2] == ["start", "api off"] and after[-1] == "stop" and "api on" not in after, after
    assert set(after[2:-1]) == {"body"} and len(after) >= 5, after
    mode = _gpu_mode(result)
    assert "the warm-up ran in step with the measured rounds and stood for the trace round" in mode, mode
    assert any(part.name.endswith("(profile rounds)") for part in result.analysis.breakdown)


def test_a_slow_warmup_does_not_stand_for_the_profile_round(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=400)
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    calls = []

    def body() -> None:  # the first two calls (the warm-up, and the one more it asks for) 20x slower: a cold model
        calls.append(1)
        gpu.launch()
        time.sleep(0.02 if len(calls) <= 2 else 0.001)

    result = api_measure.measure(body, rounds=3, warmup=1, cpu="off")
    # After the measured rounds: CUPTI starts with the launch calls on, a settling round (no prime on this backend) and
    # the trace round(s); the launch calls off, and profile rounds where the last trace round ran out of a profile
    # round's allowance. How many of each run depends on this machine's timing of 1 ms rounds; the warm-up's 20 ms,
    # which stands for neither, does not.
    after = gpu.calls[len(gpu.calls) - gpu.calls[::-1].index("start") - 1 :]
    off = after.index("api off")
    assert "api on" not in after and after[0] == "start" and after[1:off] == ["body"] * (off - 1) and off >= 3, after
    assert after[-1] == "stop" and set(after[off + 1 : -1]) <= {"body"}, after
    assert "the warm-up ran in step" not in _gpu_mode(result)
    read_from = "(profile rounds)" if len(after) > off + 2 else "(trace rounds)"
    assert any(read_from in part.name for part in result.analysis.breakdown), result.analysis.breakdown


class _PrimingGpu(_RecordingGpu):
    """A recording backend that primes the GPU after its start (or fails to: `fails`)."""

    def __init__(self, per_call: int, fails: bool = False) -> None:
        super().__init__(per_call)
        self.fails = fails

    def prime(self) -> bool:
        self.calls.append("prime")
        if self.fails:
            raise RuntimeError("cuMemAlloc (device 0) failed: CUDA_ERROR_OUT_OF_MEMORY (2)")
        return True


@pytest.mark.parametrize(("fails", "settling"), [(False, 0), (True, 1)])
@pytest.mark.usefixtures("every_round_in_step")
def test_auto_gone_lean_primes_the_gpu_instead_of_a_settling_round(
    driver: str, monkeypatch: pytest.MonkeyPatch, fails: bool, settling: int
) -> None:
    from pytest_inferscope.collectors import gpu_rounds

    monkeypatch.setattr(gpu_rounds, "WARMUP_LAUNCH_CALLS", False)  # else the warm-up stands for every round after
    gpu = _PrimingGpu(per_call=400, fails=fails)  # ~13% per round: lean
    result = _measure(monkeypatch, gpu, 0.001, driver=driver)
    b = ["body"]
    # Primed at the start too (so that the warm-up may stand for the profile round: it does), and again when CUPTI
    # starts after the measured rounds; no settling call unless the prime failed
    lean = ["start", "prime", *b * settling, *b, "api off", "stop"]
    assert gpu.calls == ["start", "api off", "prime", *b, "flush", "stop", *b * 3, *lean]
    assert len(result.latency.samples_ms) == 3 and len(result.latency.trace_ms) == 1


@pytest.mark.parametrize(("per_call", "trace_rounds"), [(2, None), (2, 1)])
@pytest.mark.usefixtures("every_round_in_step")
def test_auto_staying_measured_primes_the_gpu_after_the_flush(
    driver: str, monkeypatch: pytest.MonkeyPatch, per_call: int, trace_rounds: int | None
) -> None:
    # The first measured round after the warm-up's flush ran 1.4-5.3 ms slower than the rest on GPT-2 forward (H200,
    # 2026-11-28): the prime pays that outside the rounds, after the launch calls are switched on when they are
    gpu = _PrimingGpu(per_call=per_call)
    result = _measure(monkeypatch, gpu, 0.03, trace_rounds=trace_rounds, driver=driver)
    b = ["body"]
    off = [] if trace_rounds is None else ["api off"]  # the warm-up records the launch calls unless it is asked for
    traced = [] if trace_rounds is None else ["api on", *b, "api off"]
    assert gpu.calls == ["start", *off, "prime", *b, "flush", "prime", *b * 3, *traced, "stop"]
    assert len(result.latency.samples_ms) == 3 and len(result.latency.trace_ms) == len(traced) // 3


def test_launch_calls_in_the_measured_rounds_only_when_all_the_records_fit_and_no_trace_round_was_asked_for() -> None:
    # GPT-2 forward on the H200 (2026-11-28): 247 records per 53.19 ms round (the GPU's busy time bounds it)
    gpt2 = decide_auto(247, [55_310_000], 3, busy=53_190_000, until_in_step=True)
    assert gpt2.mode == "measured" and gpt2.launch_calls
    assert gpt2.estimated_cost == pytest.approx(2 * 247 * RECORD_COST_NS / 53_190_000)
    assert "GPU activity and the launch calls recorded in the measured rounds, no trace round" in gpt2.reason
    assert "~0.9% per round" in gpt2.reason
    # the number of trace rounds given: measured, the launch calls left for the trace round
    asked = decide_auto(247, [55_310_000], 3, busy=53_190_000)
    assert asked.mode == "measured" and not asked.launch_calls
    # twice as many records: 0.93% alone, 1.9% with their launch calls: measured, launch calls in the trace round
    denser = decide_auto(494, [55_310_000], 3, busy=53_190_000, until_in_step=True)
    assert denser.mode == "measured" and not denser.launch_calls
    # no GPU work counted: as before (the trace round may still see sync calls)
    assert not decide_auto(0, [55_310_000], 3, until_in_step=True).launch_calls
    assert decide_auto(0, [55_310_000], 3, until_in_step=True).to_json()["launch_calls"] is False


@pytest.mark.usefixtures("every_round_in_step")
def test_auto_on_a_backend_that_cannot_flush_stops_and_starts_again(
    driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = _RecordingGpu(per_call=2, flushes=False)
    _measure(monkeypatch, gpu, 0.03, driver=driver)
    b = ["body"]
    # started again with the launch calls on: the measured rounds record them (2 records a round), no trace round
    assert gpu.calls == ["start", *b, "stop", "start", *b * 3, "stop"]
    # the number of trace rounds given: started again with the launch calls off, and the trace round runs
    gpu = _RecordingGpu(per_call=2, flushes=False)
    _measure(monkeypatch, gpu, 0.03, trace_rounds=1, driver=driver)
    assert gpu.calls == ["start", "api off", *b, "stop", "start", "api off", *b * 3, "api on", *b, "api off", "stop"]


@pytest.mark.parametrize(
    ("records", "warm_ms", "busy_ms", "open_", "open_with_calls"),
    [
        (1003, 511.5, 12.8, True, True),  # the per-step sync loop's first call (cuBLAS init), H100: 4.7% a real round
        (294, 20.61, 3.3, False, False),  # ViT-B/16: lean either way
        (247, 58.61, 55.0, False, False),  # GPT-2 forward: launch calls in the measured rounds either way (0.9%)
        (2, 30.0, 0.002, False, False),  # a few records: measured, launch calls and all, even at a 30th of the round
        (0, 500.0, 0.0, False, False),  # no GPU work
        # 8 records: 0.08% (0.16% with their launch calls) at a third of the round, 0.67% (1.33%) at the GPU's busy
        # time, the least it can take: measured either way, but whether with the launch calls is open
        (8, 30.0, 1.2, False, True),
    ],
)
def test_one_warmup_round_leaves_the_decision_open_only_when_its_bounds_disagree(
    records: int, warm_ms: float, busy_ms: float, open_: bool, open_with_calls: bool
) -> None:
    assert undecided(records, int(warm_ms * 1e6), int(busy_ms * 1e6)) is open_
    assert undecided(records, int(warm_ms * 1e6), int(busy_ms * 1e6), until_in_step=True) is open_with_calls


def test_auto_runs_one_more_warmup_round_when_the_first_left_the_decision_open(
    driver: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 500 records a call; the first call takes 300 ms (first-time work), the others 10 ms: judged at 100 ms the
    # records cost 0.5% (measured), at a 30th (10 ms) 5% (lean). One more warm-up round shows 10 ms: lean.
    gpu = _RecordingGpu(per_call=500)
    result = _measure(monkeypatch, gpu, 0.01, first_s=0.3, driver=driver)
    b = ["body"]
    assert gpu.calls[:7] == ["start", *b, "flush", *b, "flush", "stop", *b]
    assert len(result.latency.warmup_ms) == 2 and len(result.latency.samples_ms) == 3
    mode = next(c.mode for c in result.collectors if c.name == "gpu")
    assert "one more warm-up round ran" in mode and "GPU activity recorded only after the measured rounds" in mode
    # warm-up rounds that decide it (two given): no extra round
    gpu2 = _RecordingGpu(per_call=500)
    monkeypatch.setattr(gpu2, "calls", [])
    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors.gpu import Choice

    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu2))  # type: ignore[arg-type]
    api_measure.measure(gpu2.launch, rounds=3, warmup=2, cpu="off")
    assert gpu2.calls.count("flush") == 1


@pytest.mark.usefixtures("every_round_in_step")
def test_with_no_round_after_the_measured_ones_the_last_measured_calls_result_is_returned() -> None:
    """The warm-up stood for every round after the measured ones: none runs, and `run_rounds` returns what the last
    measured call returned (the result is let go only before a call that follows)."""
    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=400)
    options = CollectionOptions(cpu="off", trace_rounds=1, gpu_rounds="auto", lean_trace_rounds=3, until_in_step=True)
    coll = Collection(options, Choice(gpu), name="t")  # type: ignore[arg-type]
    coll.start()
    calls: list[int] = []

    def body() -> int:
        gpu.launch()
        calls.append(1)
        return len(calls)

    assert coll.run_rounds(body, 3, 1) == 4 == len(calls)  # 1 warm-up + 3 measured, nothing after
    raw = coll.stop()
    assert raw.meta["profile_warmups"] == raw.meta["trace_warmups"] == [0] and raw.meta["gpu_rounds"] == "trace"


def test_a_stop_iteration_the_body_raises_in_a_round_after_the_measured_ones_is_its_own(
    monkeypatch: pytest.MonkeyPatch, driver: str
) -> None:
    """The rounds after the measured ones are steps of a generator: what the body raises is thrown into them, for
    their cleanup, and raised again as it was. A StopIteration (a `next()` on an empty iterator in the body) would
    come out of a generator as PEP 479's RuntimeError, or end the steps as if they were done. (An async body's own
    StopIteration is made a RuntimeError by Python itself, on its way out of the coroutine: that one comes through.)"""
    import asyncio
    import time

    from pytest_inferscope import api, api_measure
    from pytest_inferscope.collectors import schedule
    from pytest_inferscope.collectors.gpu import Choice

    gpu = _RecordingGpu(per_call=600)  # as test_auto_keeps_the_launch_calls_for_the_trace_round...: a trace round runs
    monkeypatch.setattr(api, "_gpu_choice", lambda *_: Choice(gpu))  # type: ignore[arg-type]
    monkeypatch.setattr(schedule, "_in_step", lambda *_args, **_kw: True)

    def body() -> None:
        gpu.launch()
        time.sleep(0.09 if gpu.calls.count("body") <= 2 else 0.03)
        if "api on" in gpu.calls:  # the trace round
            next(iter(()))

    async def awaited() -> None:
        body()

    if driver == "async":
        with pytest.raises(RuntimeError, match="coroutine raised StopIteration"):
            asyncio.run(api_measure.measure_async(awaited, rounds=3, warmup=2, cpu="off", trace_rounds=1))
    else:
        with pytest.raises(StopIteration):
            api_measure.measure(body, rounds=3, warmup=2, cpu="off", trace_rounds=1)
    assert gpu.calls[-4:] == ["api on", "body", "api off", "stop"]  # the steps' cleanup ran: the launch calls off


def test_a_stop_iteration_the_body_raises_in_a_measured_round_with_the_speed_probe_is_its_own() -> None:
    from pytest_inferscope import drift

    readings = iter([0.045] * 100)

    def run_round(i: int) -> float:
        if i == 2:
            raise StopIteration
        return 0.0

    with pytest.raises(StopIteration):
        drift.measure_steady(run_round, 5, 10, probe=lambda: next(readings))
