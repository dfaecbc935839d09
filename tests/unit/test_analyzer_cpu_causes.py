"""The CPU-only causes the rules name on workloads a user writes (docs/scenarios.md, CPU-only workloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_analyzer import MS, build

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.analyzer.arrays import wait_places
from pytest_inferscope.events import Kind, RawTrace, sample_flags
from pytest_inferscope.merger import merge


def _process_cpu(raw: RawTrace, cores: float) -> RawTrace:
    """The trace with the process using `cores` of CPU over each round, its system time kept."""
    for row in raw.meta["rounds"]:  # type: ignore[union-attr]
        row["user_ns"] = int(row["wall_ns"] * cores) - row["sys_ns"]
    return raw


def test_a_wait_for_more_torch_threads_than_cores_names_the_thread_setting() -> None:
    # torch.set_num_threads(8) in a fixture, 30 tanh(a @ b) of 512x512 on the 2-core VM (2026-11-29): the test thread on
    # CPU 17% of the round, waiting for a core 31%, the process at 0.95 cores. The wait read "it may have waited for
    # them (a Python thread holding the GIL, or worker threads)", the first suggestion was about a Python thread and
    # the GIL, the second "Remove or overlap the wait in test_work:matmuls", and the thread setting came fourth.
    raw = build(cpu_busy=0.17, runqueue=0.31, samples=[("t:matmuls (t.py:3)", 0.95)],
                meta={"torch_threads": 8, "cpu_affinity": 2})  # fmt: skip
    a = analyze(merge(_process_cpu(raw, 0.95)))
    (f,) = [f for f in a.findings if f.rule == "off_cpu_wait"]
    assert "8 intra-op threads" in f.summary and "2 available cores" in f.summary and "GIL" not in f.summary, f.summary
    assert not f.suggestions, f.suggestions  # the wait is torch's own work, on the other cores: nothing to remove
    # ... so the round is CPU-bound (it read unclassified in one run, cpu_bound in the next, on either side of the
    # test thread's 50% of user time).
    assert f.cause == "cpu_bound" and a.bottleneck == "cpu_bound", (f.cause, a.bottleneck)
    # The thread advice is cpu_contention's, worth the wait for a core; fewer threads than cores where other processes
    # share them: on 2 threads OpenMP's spinning took 5x the time.
    first = a.suggestions[0]
    assert first.action.startswith("Use fewer torch threads than available cores (torch.set_num_threads(1)"), first
    assert "OMP_WAIT_POLICY=passive" in first.action and first.saving_ms == pytest.approx(3.1, rel=0.01)
    assert not any("GIL" in s.action or "wait in t:matmuls" in s.action for s in a.suggestions), a.suggestions
    # torch at as many threads as cores, the same process CPU: a wait for the process's other threads, the GIL's case.
    fits = build(cpu_busy=0.17, runqueue=0.31, samples=[("t:matmuls (t.py:3)", 0.95)],
                 meta={"torch_threads": 2, "cpu_affinity": 2})  # fmt: skip
    (g,) = [f for f in analyze(merge(_process_cpu(fits, 0.95))).findings if f.rule == "off_cpu_wait"]
    assert "GIL" in g.summary and "intra-op" not in g.summary and g.cause is None, g.summary


def test_torch_threads_spinning_on_cores_other_processes_share_are_worth_the_wait_for_a_core() -> None:
    # torch at its 2 threads on the 2-core VM shared with other processes (2026-11-29): waiting for a core 50% of the
    # round, told "torch.set_num_threads(1)" fourth, saving half that wait (31 ms of 126); on 1 thread, or with
    # OMP_WAIT_POLICY=passive, the same call took a median 76-119 ms against 517-736 (OpenMP's threads spin).
    raw = build(cpu_busy=0.48, runqueue=0.5, samples=[("t:matmuls (t.py:3)", 0.95)],
                meta={"torch_threads": 2, "cpu_affinity": 2})  # fmt: skip
    a = analyze(merge(_process_cpu(raw, 1.0)))
    (f,) = [f for f in a.findings if f.rule == "cpu_contention"]
    (s,) = [s for s in f.suggestions if "set_num_threads" in s.action]
    assert "OMP_WAIT_POLICY=passive" in s.action and s.saving_ms == pytest.approx(5.0, rel=0.01), s


_DROPOUT = "functional:dropout (torch/nn/functional.py:1467)"
_LINEAR = "linear:Linear.forward (torch/nn/modules/linear.py:130)"


def test_dropout_that_takes_time_is_a_model_left_in_training_mode() -> None:
    # An MLP with two Dropout(0.5) layers left in train mode, ten forwards of 64 rows under inference_mode (the 2-core
    # VM, 2026-11-29): cpu_bound, "Speed up or take off the critical path: functional:dropout" (144 ms of 377 a
    # round); nothing said the model was in training mode. In eval mode the same forwards took 62 against 98 ms.
    stack = "t:test_train (t.py:5);container:Sequential.forward (torch/nn/modules/container.py:248);"
    raw = build(cpu_busy=0.98, samples=[(stack + _LINEAR, 0.55), (stack + _DROPOUT, 0.38)])
    a = analyze(merge(raw))
    (f,) = [f for f in a.findings if f.rule == "dropout_active"]
    assert f.share == pytest.approx(0.38, rel=0.01) and "training mode" in f.summary, f.summary
    assert f.evidence["dropout per round (ms)"] == pytest.approx(3.8, rel=0.01)
    (s,) = f.suggestions
    assert "model.eval()" in s.action and s.saving_ms == pytest.approx(3.8, rel=0.01)
    # ... and not "Speed up or take off the critical path: functional:dropout" beside it (listed before it, once).
    assert not any("functional:dropout" in s.action for s in a.suggestions), [s.action for s in a.suggestions]
    # In eval mode dropout returns its input: the odd sample in it is no finding.
    evaluated = build(cpu_busy=0.98, samples=[(stack + _LINEAR, 0.9), (stack + _DROPOUT, 0.003)])
    assert not any(f.rule == "dropout_active" for f in analyze(merge(evaluated)).findings)


def _sampled_cpu(raw: RawTrace, on_cpu: dict[str, float]) -> RawTrace:
    """The trace with each sample of a stack ending in a key of `on_cpu` marked on CPU that share of its time."""
    ev = raw.events
    for i in (ev["kind"] == Kind.SAMPLE).nonzero()[0]:
        leaf = raw.strings[ev["name"][i]].rsplit(";", 1)[-1]
        dur = int(ev["end"][i] - ev["start"][i])
        ev["flags"][i] = sample_flags(int(dur * on_cpu[leaf]))
    return raw


def test_a_wait_is_named_where_the_samples_were_off_cpu_not_where_most_samples_were() -> None:
    # A body that waits 30 ms on a socket, then runs a forward (the 2-core VM, 2026-11-29): off CPU 43% of the round,
    # told "Remove or overlap the wait in linear:Linear.forward", where it computed (34.7 ms sampled there, 27.7 in
    # the body's own frame, the socket's recv a C call).
    body, fwd = "t:test_socket (t.py:3)", "linear:Linear.forward (torch/nn/modules/linear.py:130)"
    raw = build(cpu_busy=0.55, samples=[(body, 0.4), (f"{body};{fwd}", 0.55)])
    a = analyze(merge(_sampled_cpu(raw, {body: 0.0, fwd: 1.0})))
    (f,) = [f for f in a.findings if f.rule == "off_cpu_wait"]
    assert f.suggestions[-1].action == "Remove or overlap the wait in t:test_socket", f.suggestions
    assert f.suggestions[-1].saving_ms == pytest.approx(4.0, rel=0.02)
    assert f.evidence["where it waited 1"] == "t:test_socket (t.py:3): 4.00 ms/round", f.evidence
    assert "where it waited 2" not in f.evidence  # the forward's samples were on CPU throughout
    # A trace whose samples do not say (recorded before, or imported): every sampled ms counts, as before.
    old = analyze(merge(build(cpu_busy=0.55, samples=[(body, 0.4), (f"{body};{fwd}", 0.55)])))
    (g,) = [f for f in old.findings if f.rule == "off_cpu_wait"]
    assert g.evidence["where it waited 1"].startswith("linear:Linear.forward"), g.evidence


_DL = "dataloader:{} (torch/utils/data/dataloader.py:1)"
_LIB = "/usr/lib/python3.11"


def test_dataloader_workers_started_and_stopped_every_round_are_named() -> None:
    # A DataLoader of 64 items, num_workers=2, built and iterated in the body (the 2-core VM, 2026-11-29): cpu_bound,
    # "Speed up linear:Linear.forward"; the workers' start (28.7 ms a round), stop (31.3) and the wait for their
    # batches (24.1) of a 221 ms round were not named. With num_workers=0 the round took 47 ms.
    body = "t:test_loader (t.py:3)"
    start = f"{body};{_DL.format('DataLoader.__iter__')};{_DL.format('_MultiProcessingDataLoaderIter.__init__')}"
    nxt = (
        f"{body};{_DL.format('_BaseDataLoaderIter.__next__')};{_DL.format('_MultiProcessingDataLoaderIter._next_data')}"
    )
    stop = f"{nxt};{_DL.format('_MultiProcessingDataLoaderIter._shutdown_workers')};process:BaseProcess.join (p.py:1)"
    wait = f"{nxt};{_DL.format('_MultiProcessingDataLoaderIter._get_data')};selectors:S.select (s.py:1)"
    fwd = f"{body};linear:Linear.forward (torch/nn/modules/linear.py:130)"
    raw = build(cpu_busy=0.6, samples=[(start, 0.13), (stop, 0.14), (wait, 0.11), (fwd, 0.6)])
    a = analyze(merge(raw))
    (f,) = [f for f in a.findings if f.rule == "dataloader_workers"]
    assert f.share == pytest.approx(0.38, rel=0.01), f.share
    assert f.evidence["starting the workers per round (ms)"] == pytest.approx(1.3, rel=0.01)
    assert f.evidence["stopping the workers per round (ms)"] == pytest.approx(1.4, rel=0.01)
    assert f.evidence["waiting for the workers' batches per round (ms)"] == pytest.approx(1.1, rel=0.01)
    persistent, more = f.suggestions
    assert "persistent_workers=True" in persistent.action and persistent.saving_ms == pytest.approx(2.7, rel=0.01)
    assert more.saving_ms == pytest.approx(1.1, rel=0.01)
    # Batches from the main process (num_workers=0), or persistent workers that had the batches ready: no finding.
    ready = build(cpu_busy=0.9, samples=[(f"{nxt};{_DL.format('_MultiProcessingDataLoaderIter._get_data')}", 0.02),
                                         (fwd, 0.9)])  # fmt: skip
    assert not any(f.rule == "dataloader_workers" for f in analyze(merge(ready)).findings)


def test_the_hottest_function_is_named_at_its_hottest_line(tmp_path: Path) -> None:
    # torch.tensor(list) of 256x4096 floats and .tolist() back, in the body (the 2-core VM, 2026-11-29): "Speed up or
    # take off the critical path: test_work:test_tensor_from_list", the body itself, whose time is in the C calls on
    # its lines; which line, the user had to find.
    src = tmp_path / "t.py"
    src.write_text("def test_list():\n    t = torch.tensor(LIST)\n    back = t.tolist()\n")
    body = f"t:test_list ({src}:1)"
    raw = build(cpu_busy=0.98, samples=[(body, 0.6), (body, 0.3)])
    ev = raw.events
    samples = (ev["kind"] == Kind.SAMPLE).nonzero()[0]
    ev["value"][samples[0::2]], ev["value"][samples[1::2]] = 2, 3  # each round's longer sample on line 2
    a = analyze(merge(raw))
    (f,) = [f for f in a.findings if f.rule == "cpu_saturation"]
    assert f.evidence["hottest line"] == f"t:test_list ({src}:2: `t = torch.tensor(LIST)`): 6.00 ms/round", f.evidence
    first = a.suggestions[0]
    assert first.action == f"Speed up or take off the critical path: t:test_list, at {src.name}:2 " + (
        "`t = torch.tensor(LIST)`"
    ), first.action


def _first_round_longer_at(raw: RawTrace, nth: int, extra_ms: float) -> RawTrace:
    """The trace with its `nth` round (warm-up ones counted) `extra_ms` longer (what follows it later by as much)."""
    ev, d = raw.events, int(extra_ms * MS)
    first = (ev["kind"] == Kind.ROUND).nonzero()[0][nth]
    end = int(ev["end"][first])
    later = ev["start"] >= end
    ev["start"][later] += d
    ev["end"][(ev["end"] >= end) & (ev["kind"] != Kind.SAMPLE) | later] += d
    raw.meta["rounds"][nth]["wall_ns"] += d  # type: ignore[index]
    raw.clock_pairs = [(0, 0), (int(ev["end"].max()), int(ev["end"].max()))]
    return raw


def _first_round_longer(raw: RawTrace, extra_ms: float) -> RawTrace:
    return _first_round_longer_at(raw, 0, extra_ms)


_spike = _first_round_longer_at


def test_a_cold_first_round_measured_without_warm_up_is_named_and_a_warm_up_suggested() -> None:
    # A model loaded lazily on its first call (a 0.2 s sleep standing for the download), warmup=0, 10 rounds (the
    # 2-core VM, 2026-11-29): 246 ms, then 2.9-3.2 ms. The findings read the mean round, 27.4 ms: "off CPU 73%", "Remove
    # or overlap the wait in test_work:lazy_model (saves ~19.3 ms per round)"; nothing said that one cold round was
    # most of the measured time, nor that a warm-up would leave it out.
    raw = _first_round_longer(build(n_rounds=10, round_ms=3.0, warmup=0, cpu_busy=0.9), 243.0)
    a = analyze(merge(raw))
    (f,) = [f for f in a.findings if f.rule == "cold_first_round"]
    assert "246.00 ms" in f.summary and "82.0x" in f.summary and "no warm-up" in f.summary, f.summary
    assert f.share == pytest.approx(243.0 / 273.0, rel=0.01)
    assert a.findings[0].rule == "cold_first_round"
    (s,) = f.suggestions
    assert "warmup=1" in s.action and s.saving_ms == pytest.approx(24.3, rel=0.01), s
    # Rounds alike, or a first round slower by less than 3x the others' median: nothing to say.
    assert not any(
        f.rule == "cold_first_round" for f in analyze(merge(build(n_rounds=10, warmup=0, cpu_busy=0.9))).findings
    )
    mild = _first_round_longer(build(n_rounds=10, round_ms=3.0, warmup=0, cpu_busy=0.9), 5.0)
    assert not any(f.rule == "cold_first_round" for f in analyze(merge(mild)).findings)
    # A loaded machine's slow rounds, the first among them (a training-mode forward on the 2-core VM: 498, 103, 72 ...
    # 556 ms, after warm-up rounds of 76 and 104): not a cold start.
    spikes = build(n_rounds=10, round_ms=3.0, warmup=2, cpu_busy=0.9)
    loaded = analyze(merge(_spike(_first_round_longer_at(spikes, 2, 12.0), 9, 14.0)))
    assert not any(f.rule == "cold_first_round" for f in loaded.findings), [f.rule for f in loaded.findings]
    # Microseconds: a 3 µs body's first round, 3x the others, is below what the clocks tell apart.
    tiny = _first_round_longer(build(n_rounds=10, round_ms=0.003, warmup=0, cpu_busy=0.9), 0.01)
    assert not any(f.rule == "cold_first_round" for f in analyze(merge(tiny)).findings)


def test_the_wait_sites_add_up_to_the_wait_not_to_it_and_the_wait_for_a_core() -> None:
    # torch.set_num_threads(8) on the 2-core VM (2026-11-29): "off CPU per round 28.27 ms" beside "where it waited 1:
    # test_work:matmuls: 46.08 ms/round": the samples' time off a CPU counts the 18 ms waiting for a core too.
    body = "t:test_wait (t.py:3)"
    raw = _sampled_cpu(build(cpu_busy=0.3, runqueue=0.3, samples=[(body, 0.95)]), {body: 0.3})
    (f,) = [f for f in analyze(merge(raw)).findings if f.rule == "off_cpu_wait"]
    assert f.evidence["off CPU per round (ms)"] == pytest.approx(4.0, rel=0.01)
    assert f.evidence["where it waited 1"] == "t:test_wait (t.py:3): 4.00 ms/round", f.evidence


def test_a_function_the_samples_found_off_cpu_is_not_offered_as_one_to_speed_up() -> None:
    # A DataLoader with 2 workers (the 2-core VM, 2026-11-29): "Speed up or take off the critical path:
    # selectors:_PollLikeSelector.select, at selectors.py:415" (33 ms a round), the main thread asleep in poll() for the
    # workers' batches: a wait, not work to speed up.
    sel = f"t:test_loader (t.py:3);selectors:_PollLikeSelector.select ({_LIB}/selectors.py:402)"
    fwd = "t:test_loader (t.py:3);linear:Linear.forward (torch/nn/modules/linear.py:130)"
    raw = _sampled_cpu(
        build(cpu_busy=0.7, samples=[(sel, 0.3), (fwd, 0.65)]), {sel.rsplit(";")[-1]: 0.02, fwd.rsplit(";")[-1]: 1.0}
    )
    a = analyze(merge(raw))
    (f,) = [f for f in a.findings if f.rule == "cpu_saturation"]
    assert not any("selectors" in s.action for s in f.suggestions), [s.action for s in f.suggestions]
    assert f.suggestions[0].action.startswith("Speed up or take off the critical path: linear:Linear.forward")
    assert a.hotspots[0].function.startswith("linear:Linear.forward")  # the hotspots still show where the time went
    # A function on a CPU only a fifth of the time on a crowded machine, as the whole thread was (a matmul loop beside
    # a busy process: on CPU 17%, waiting for a core 71%): still the one to speed up.
    mm = "t:test_crowded (t.py:3);t:matmuls (t.py:9)"
    crowded = _sampled_cpu(build(cpu_busy=0.17, runqueue=0.71, samples=[(mm, 0.9)]), {"t:matmuls (t.py:9)": 0.19})
    (c,) = [f for f in analyze(merge(crowded)).findings if f.rule == "cpu_saturation"]
    assert c.suggestions[0].action.startswith("Speed up or take off the critical path: t:matmuls"), c.suggestions
    # Samples that do not say (an older trace): as before.
    old = analyze(merge(build(cpu_busy=0.7, samples=[(sel, 0.3), (fwd, 0.65)])))
    (g,) = [f for f in old.findings if f.rule == "cpu_saturation"]
    assert any("selectors" in s.action for s in g.suggestions)


def test_threads_read_after_the_rounds_do_not_claim_the_cores_the_process_used_beyond_them() -> None:
    # torch.set_num_threads(8) in the body, set back to the session's 1 in a finally, 10 tanh(a @ a) of 512x512 on the
    # 2-core VM (2026-11-30): the process used 1.68 cores, the test thread waited for a core 32% of the round, and the
    # evidence read "torch intra-op threads: 1", as if the rounds ran on the 1 thread read after them.
    raw = build(cpu_busy=0.26, runqueue=0.32, meta={"torch_threads": 1, "cpu_affinity": 2})
    (f,) = [f for f in analyze(merge(_process_cpu(raw, 1.68))).findings if f.rule == "cpu_contention"]
    said = f.evidence["torch intra-op threads"]
    assert said == "1 (read after the rounds; the process used 1.68 cores: the body may set its own)", said
    # The body on the 1 thread it was given (the process at 1.01 cores, as on the VM): the number alone.
    one = build(cpu_busy=0.9, runqueue=0.32, meta={"torch_threads": 1, "cpu_affinity": 2})
    (g,) = [f for f in analyze(merge(_process_cpu(one, 1.01))).findings if f.rule == "cpu_contention"]
    assert g.evidence["torch intra-op threads"] == 1


def _slept_then_computed(at_work: bool) -> RawTrace:
    """A body that sleeps 7 ms, then computes in `f` (10 ms rounds), sampled at 4, 8 and 10 ms into each round: the
    first sample in the sleep, the second and third in `f`, each off a CPU for part of its span (the second for the
    sleep's last 3 ms, the third for 1.5 ms between the two)."""
    body, f = "t:test_body (t.py:3)", "t:f (t.py:9)"
    raw = build(cpu_busy=0.15)
    raw.strings.extend([body, f"{body};{f}"])
    stacks = {body: len(raw.strings) - 2, f: len(raw.strings) - 1}
    rows = []
    for r in raw.events[raw.events["kind"] == Kind.ROUND]:
        t = int(r["start"])
        for stack, s, e, on_ms, working in ((body, 0, 4, 0.0, False), (f, 4, 8, 1.0, True), (f, 8, 10, 0.5, True)):
            row = np.zeros(1, dtype=raw.events.dtype)[0]
            row["start"], row["end"], row["name"], row["tid"] = t + s * MS, t + e * MS, stacks[stack], 1
            row["kind"], row["flags"] = Kind.SAMPLE, sample_flags(int(on_ms * MS), working and at_work)
            rows.append(row)
    raw.events = np.sort(np.concatenate([raw.events, np.array(rows, dtype=raw.events.dtype)]), order="start")
    return raw


def test_a_wait_is_named_where_the_thread_waited_not_where_it_worked_next() -> None:
    # `inferscope run` of a script sleeping 3 x 10 ms between bursts of work (the 2-core VM, 2026-11-30): "where it
    # waited: script:f", though `f` never waits. A sample stands for the time since the one before, and its time off a
    # CPU went to the stack it was taken in: after a sleep, where the thread worked next. A sample taken with the
    # thread at work gives it to the sample before, where the thread was seen waiting, or to no stack.
    (w,) = [x for x in analyze(merge(_slept_then_computed(at_work=True))).findings if x.rule == "off_cpu_wait"]
    assert w.evidence["off CPU per round (ms)"] == pytest.approx(8.5, rel=0.01)
    assert w.evidence["where it waited 1"] == "t:test_body (t.py:3): 7.00 ms/round", w.evidence
    assert "where it waited 2" not in w.evidence  # not t:f
    assert w.evidence["off CPU where no sample saw it (ms/round)"] == pytest.approx(1.5, rel=0.01)
    assert w.suggestions[-1].action == "Remove or overlap the wait in t:test_body", w.suggestions
    # Samples that do not say it (recorded before 2026-11-30): the time goes to the stack each was taken in, as before,
    # which named `f` first.
    (o,) = [x for x in analyze(merge(_slept_then_computed(at_work=False))).findings if x.rule == "off_cpu_wait"]
    assert o.evidence["where it waited 1"] == "t:f (t.py:9): 4.50 ms/round", o.evidence
    assert "off CPU where no sample saw it (ms/round)" not in o.evidence


def test_wait_places_follow_time_not_the_order_the_samples_are_stored_in() -> None:
    # Stored out of time order (the samples of a trace are sorted by start only after the merge): at [0, 4) waiting,
    # [4, 8) at work, [8, 10) at work, [20, 30) at work after a gap (another round's), [30, 40) waiting.
    starts, ends = np.array([8, 0, 30, 4, 20]), np.array([10, 4, 40, 8, 30])
    at_work = np.array([True, False, False, True, True])
    # [8, 10): the sample before is at work, so no place; [4, 8): the one at 0, index 1; [20, 30) follows a gap.
    assert wait_places(starts, ends, at_work).tolist() == [-1, 1, 2, 1, -1]
