"""The GPU session's one failure policy: a failing backend is dropped, its reason in the header, said once.

A start that fails raises instead when GPU collection is required (INFERSCOPE_GPU=required, which
the callers pass as `CollectionOptions.gpu_required`).
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import numpy as np
import pytest
from test_trace_rounds import FakeGpu

from pytest_inferscope import warning
from pytest_inferscope.collectors import Collection, CollectionOptions, active
from pytest_inferscope.collectors.gpu import Choice, GpuBackendError
from pytest_inferscope.events import EVENT_DTYPE, Kind, RawTrace
from pytest_inferscope.results import CollectorInfo
from pytest_inferscope.warning import InferscopeWarning


class FailingGpu(FakeGpu):
    """A fake backend that can flush, whose named methods raise (and are recorded in `calls` first)."""

    def __init__(self, *fails: str) -> None:
        super().__init__()
        self.fails = set(fails)

    def _maybe_fail(self, what: str) -> None:
        if what in self.fails:
            raise RuntimeError(f"{what} broke")

    def start(self) -> None:
        super().start()
        self._maybe_fail("start")

    def stop(self) -> None:
        super().stop()
        self._maybe_fail("stop")

    def flush(self) -> None:
        self.calls.append("flush")
        self._maybe_fail("flush")

    def drain(self) -> tuple[np.ndarray, list[str]]:
        self._maybe_fail("drain")
        return super().drain()

    def timestamp(self) -> int:
        self._maybe_fail("timestamp")
        return 0

    def set_api_records(self, on: bool) -> None:
        super().set_api_records(on)
        self._maybe_fail(f"api {'on' if on else 'off'}")


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """warn_once says a thing once per process: each test starts from none said."""
    monkeypatch.setattr(warning, "_said", set())


def _collect(gpu: FailingGpu, **options: object) -> tuple[Collection, RawTrace, list[str]]:
    """One collection of 1 warm-up and 2 measured rounds; the InferscopeWarnings it gave."""
    coll = Collection(CollectionOptions(cpu="off", **options), Choice(gpu), name="t")  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coll.start()
        coll.run_rounds(lambda: gpu.calls.append("body"), 2, 1)
        raw = coll.stop()
    return coll, raw, [str(w.message) for w in caught if issubclass(w.category, InferscopeWarning)]


def _gpu_info(coll: Collection) -> CollectorInfo:
    (info,) = [c for c in coll.collectors_info() if c.name == "gpu"]
    return info


def _assert_dropped(coll: Collection, raw: RawTrace, said: list[str], reason: str, rounds: int = 3) -> None:
    """Dropped, the reason in the header (and in the trace's meta), said in one warning."""
    assert coll.gpu is None and coll.gpu_session.error == reason
    info = _gpu_info(coll)
    assert not info.active and info.reason == reason
    collectors = cast(list[dict[str, Any]], raw.meta["collectors"])
    (gpu_meta,) = [c for c in collectors if c["name"] == "gpu"]
    assert gpu_meta["reason"] == reason
    assert len(said) == 1 and said[0].startswith(f"inferscope: {reason}; GPU activity is not collected")
    assert active() is None
    assert np.count_nonzero(raw.events["kind"] == Kind.ROUND) == rounds  # the rounds ran on, CPU and memory collected


def test_a_backend_that_cannot_start_is_dropped_said_once_and_named_in_the_header() -> None:
    gpu = FailingGpu("start")
    coll, raw, said = _collect(gpu, trace_rounds=1)
    _assert_dropped(coll, raw, said, "fake could not start: start broke")
    assert gpu.calls == ["start", "body", "body", "body"]  # no trace round without GPU collection
    assert raw.clock_pairs == []
    # said once: the same failure in the next collection is in its header, not warned again
    coll, _, said = _collect(FailingGpu("start"))
    assert _gpu_info(coll).reason == "fake could not start: start broke" and said == []


def test_a_backend_whose_clock_fails_at_start_is_stopped_before_it_is_dropped() -> None:
    # started, then the clock pair failed: left recording, it would slow the rounds and refuse the next start
    gpu = FailingGpu("timestamp")
    coll, raw, said = _collect(gpu)
    _assert_dropped(coll, raw, said, "fake could not start: timestamp broke")
    assert gpu.calls == ["start", "stop", "body", "body", "body"]


@pytest.mark.parametrize("gpu_rounds", ["measured", "trace"])
def test_a_required_backend_that_cannot_start_fails_the_collection(gpu_rounds: str) -> None:
    gpu = FailingGpu("start")
    options = CollectionOptions(cpu="off", gpu_required=True, gpu_rounds=gpu_rounds, lean_trace_rounds=1)
    coll = Collection(options, Choice(gpu), name="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferscopeWarning)  # raised, not warned
        match = "GPU collection is required but fake could not start: start broke"
        if gpu_rounds == "measured":  # at the collection's start: nothing runs
            with pytest.raises(GpuBackendError, match=match):
                coll.start()
            assert active() is None and gpu.calls == ["start"]
            return
        coll.start()  # lean: CUPTI starts after the measured rounds, and fails there
        try:
            with pytest.raises(GpuBackendError, match=match):
                coll.run_rounds(lambda: gpu.calls.append("body"), 2, 1)
        finally:
            coll.stop()
    assert gpu.calls == ["body"] * 3 + ["start"] and active() is None


@pytest.mark.parametrize("fails", ["stop", "drain"])
def test_a_backend_that_fails_to_stop_or_drain_is_named_in_the_header_and_said(fails: str) -> None:
    gpu = FailingGpu(fails)
    coll, raw, said = _collect(gpu, trace_rounds=1)
    _assert_dropped(coll, raw, said, f"fake failed while stopping: {fails} broke", rounds=4)  # the trace round too
    assert gpu.calls[-1] == "stop" and gpu.calls.count("stop") == 1  # not stopped twice
    assert len(raw.clock_pairs) == 2 + 4  # start, one per round (the trace round's too), the stop's
    assert "gpu_rounds" not in raw.meta


def test_a_backend_that_fails_to_flush_after_the_warmup_is_stopped_dropped_and_said() -> None:
    gpu = FailingGpu("flush")
    coll, raw, said = _collect(gpu, gpu_rounds="auto", lean_trace_rounds=1, trace_rounds=1)
    _assert_dropped(coll, raw, said, "fake failed while pausing after the warm-up: flush broke")
    # the measured rounds ran without the backend, which was stopped; no profile or trace round
    assert gpu.calls == ["start", "api off", "body", "flush", "stop", "body", "body"]
    assert coll.gpu_session.decision is None and "gpu_rounds" not in raw.meta


def test_a_backend_that_flushes_stays_measured_and_collects_throughout() -> None:
    # the same fake, failing nothing: the policy's tests above differ from this only in the failure
    gpu = FailingGpu()
    coll, raw, said = _collect(gpu, gpu_rounds="auto", lean_trace_rounds=1, trace_rounds=1)
    assert said == [] and coll.gpu is gpu and _gpu_info(coll).active
    b = ["body"]
    assert gpu.calls == ["start", "api off", *b, "flush", *b * 2, "api on", *b, "api off", "stop"]
    assert raw.meta["gpu_rounds"] == "measured" and len(raw.clock_pairs) == 2 + 4


def test_a_backend_that_cannot_switch_its_launch_calls_on_skips_the_trace_rounds_and_says_so() -> None:
    gpu = FailingGpu("api on")
    coll, raw, said = _collect(gpu, trace_rounds=1)
    # the backend stays (its GPU activity is good); no trace round ran, the header and one warning say why
    assert coll.gpu is gpu and _gpu_info(coll).active
    assert gpu.calls == ["start", "api off", "body", "body", "body", "api on", "stop"]
    assert np.count_nonzero(raw.events["kind"] == Kind.ROUND) == 3
    assert "launch calls not switched on around the trace rounds (api on broke)" in _gpu_info(coll).mode
    assert len(said) == 1 and "no trace round ran" in said[0]


class OffFailsAfterTrace(FailingGpu):
    """Switches its launch calls off at the start, and fails to once they were switched on."""

    def set_api_records(self, on: bool) -> None:
        FakeGpu.set_api_records(self, on)
        if not on and "api on" in self.calls:
            raise RuntimeError("api off broke")


def test_a_backend_that_cannot_switch_its_launch_calls_off_after_the_trace_rounds_says_so() -> None:
    coll, raw, said = _collect(OffFailsAfterTrace(), trace_rounds=1)
    assert np.count_nonzero(raw.events["kind"] == Kind.ROUND) == 4  # the trace round ran
    assert "launch calls not switched off around the trace rounds" in _gpu_info(coll).mode
    assert len(said) == 1 and "the trace rounds ran" in said[0]


class NamingGpu(FailingGpu):
    """A backend that, like the native one, keeps every name the process has met and drains records naming some."""

    def __init__(self, names: list[str], used: list[int]) -> None:
        super().__init__()
        self.names, self.used = names, used

    def drain(self) -> tuple[np.ndarray, list[str]]:
        records = np.zeros(len(self.used), dtype=EVENT_DTYPE)
        records["kind"], records["name"] = Kind.KERNEL, self.used
        records["start"], records["end"] = 10, 20
        self.used = []  # drained
        return records, list(self.names)


def test_a_trace_holds_the_names_its_gpu_records_use_not_every_name_the_backend_met() -> None:
    # The backend's name list spans the process (a suite's kernels): each test's trace takes only the names its own
    # records use, so a late test's raw.npz and string table do not carry every earlier test's kernels.
    met = [f"kernel_{i}<float, {i}>" for i in range(5000)]
    for used in ([4999, 7, 7, 123], [0, 2500]):
        _, raw, said = _collect(NamingGpu(met, list(used)), gpu_rounds="measured")
        gpu = raw.events[raw.events["kind"] == Kind.KERNEL]
        assert sorted(raw.strings[i] for i in gpu["name"]) == sorted(met[i] for i in used) and not said
        assert not set(raw.strings) & (set(met) - {met[i] for i in used})


class ReadOnlyGpu(NamingGpu):
    """A backend whose drained records are read-only (a view of its own buffer), kept to be looked at after."""

    def __init__(self, names: list[str], used: list[int]) -> None:
        super().__init__(names, used)
        self.drained: list[np.ndarray] = []

    def drain(self) -> tuple[np.ndarray, list[str]]:
        records, names = super().drain()
        records.flags.writeable = False
        self.drained.append(records)
        return records, names


def test_drained_records_are_copied_before_they_are_renamed_and_the_backends_are_left_as_they_were() -> None:
    gpu = ReadOnlyGpu([f"k{i}" for i in range(50)], [40, 41, 41])
    _, raw, said = _collect(gpu, gpu_rounds="measured")
    kernels = raw.events[raw.events["kind"] == Kind.KERNEL]
    assert [raw.strings[i] for i in kernels["name"]] == ["k40", "k41", "k41"] and not said
    assert [r["name"].tolist() for r in gpu.drained if len(r)] == [[40, 41, 41]]  # the backend's ids, untouched
