from __future__ import annotations

import pytest

from pytest_inferscope.checks import MARKER_KEYS, evaluate, validate_marker
from pytest_inferscope.results import Analysis, Finding, LatencyStats

NODE = "tests/test_x.py::test_forward"


def test_unknown_key_names_test_key_and_closest_valid_key() -> None:
    (msg,) = validate_marker(NODE, (), {"max_latancy_ms": 10})
    assert NODE in msg and "'max_latancy_ms'" in msg and "did you mean 'max_latency_ms'" in msg


def test_bad_values_name_the_valid_range() -> None:
    problems = validate_marker(
        NODE,
        (),
        {"max_gpu_idle": 1.5, "rounds": 2.5, "warmup": True, "expect_bottleneck": "slow", "max_latency_ms": -1},
    )
    text = "\n".join(problems)
    assert len(problems) == 5
    assert "max_gpu_idle" in text and "<= 1" in text
    assert "rounds" in text and "an integer" in text
    assert "'slow' is not one of" in text and "'cpu_bound'" in text


def test_positional_arguments_are_rejected() -> None:
    (msg,) = validate_marker(NODE, (50,), {})
    assert "keyword arguments only" in msg


def test_every_key_documents_itself() -> None:
    assert all(k.help and k.valid() for k in MARKER_KEYS.values())


def _analysis(**metrics: float | None) -> Analysis:
    finding = Finding(
        rule="cpu_saturation",
        title="CPU-bound",
        summary="The test thread was on CPU 97%.",
        cause="cpu_bound",
        share=0.97,
        confidence=0.95,
    )
    return Analysis(bottleneck="cpu_bound", confidence=0.93, findings=[finding], metrics=dict(metrics))


LAT = LatencyStats.from_samples([10.0, 11.0, 12.0, 30.0])


def test_latency_failure_explains_with_evidence_and_report_path() -> None:
    (check,) = evaluate({"max_latency_ms": 5}, _analysis(), LAT, gpu_collected=False, report="out/x/report.md")
    assert check.status == "failed" and check.measured == LAT.median
    assert "median latency 11.5 ms exceeds limit 5.00 ms" in check.message
    assert "cpu_bound" in check.message and "on CPU 97%" in check.message and "out/x/report.md" in check.message


def test_tiny_limits_and_values_keep_their_significant_digits() -> None:
    tiny = LatencyStats.from_samples([0.0003, 0.0004, 0.0005])
    (check,) = evaluate({"max_latency_ms": 1e-9}, _analysis(), tiny, gpu_collected=False)
    assert "median latency 0.0004 ms exceeds limit 1e-09 ms" in check.message  # was 0.000 ms, and 0.000 ms
    # the evidence as the summary writes such rounds (units.fmt_ms); beside its limit the median keeps its digits
    assert "Evidence: 3 rounds: median <0.001 ms, p90 <0.001 ms, max <0.001 ms" in check.message
    (memory,) = evaluate({"max_host_memory_mb": 0.01}, _analysis(**{"mem.rss_peak_mb": 80.0}), LAT, gpu_collected=False)
    assert "the process's peak RSS 80.0 MB exceeds limit 0.01 MB" in memory.message


def test_a_percent_mb_or_count_beside_its_limit_keeps_the_digits_that_tell_them_apart() -> None:
    """`max_gpu_idle: GPU idle fraction 30.0% exceeds limit 30.0%` (an idle fraction of 0.30004): MB, % and counts
    get the decimals that tell a value from its limit, as milliseconds do (units.fmt_ms's `beside`)."""
    metrics = {
        "gpu.idle_fraction": 0.30004,
        "mem.rss_peak_mb": 200.04,
        "gpu.kernel_launches_per_round": 1000.4,
        "gpu.transfer_fraction": 0.1,
    }
    limits = {"max_gpu_idle": 0.3, "max_host_memory_mb": 200, "max_kernel_launches": 1000, "max_transfer_fraction": 0.5}
    checks = {c.key: c for c in evaluate(limits, _analysis(**metrics), LAT, gpu_collected=True)}
    assert "GPU idle fraction 30.004% exceeds limit 30.000%" in checks["max_gpu_idle"].message
    assert "the process's peak RSS 200.04 MB exceeds limit 200.00 MB" in checks["max_host_memory_mb"].message
    assert "kernel launches per round 1,000.4 exceeds limit 1,000.0" in checks["max_kernel_launches"].message
    assert "transfer fraction 10.0% within limit 50.0%" in checks["max_transfer_fraction"].message  # apart: as alone


def test_latency_stat_from_the_marker_wins() -> None:
    (check,) = evaluate({"max_latency_ms": 20, "latency_stat": "max"}, _analysis(), LAT, gpu_collected=False)
    assert check.status == "failed" and check.measured == 30.0


def test_passing_thresholds_pass() -> None:
    checks = evaluate(
        {"max_latency_ms": 50, "expect_bottleneck": "cpu_bound", "max_host_memory_mb": 1000},
        _analysis(**{"mem.rss_peak_mb": 300.0}),
        LAT,
        gpu_collected=False,
    )
    assert [c.status for c in checks] == ["passed"] * 3


def test_wrong_bottleneck_fails() -> None:
    (check,) = evaluate({"expect_bottleneck": "gpu_bound"}, _analysis(), LAT, gpu_collected=False)
    assert check.status == "failed" and "classified cpu_bound" in check.message


def test_a_failed_checks_message_gives_the_confidence_as_every_report_does() -> None:
    """As a percentage: "cpu_bound (confidence 0.86)" stood in the failure and the Checks table beside the header's
    "cpu_bound (confidence 86%)" of the same report (2026-11-29)."""
    a = _analysis()
    a.confidence = 0.857
    (latency,) = evaluate({"max_latency_ms": 0.001}, a, LAT, gpu_collected=False)
    (cls,) = evaluate({"expect_bottleneck": "gpu_bound"}, a, LAT, gpu_collected=False)
    for check in (latency, cls):
        assert "cpu_bound (confidence 86%)" in check.message, check.message


def test_gpu_thresholds_without_gpu_data_are_not_evaluated_with_the_reason() -> None:
    (check,) = evaluate({"max_gpu_idle": 0.1}, _analysis(), LAT, gpu_collected=False, gpu_reason="no NVIDIA GPU")
    assert check.status == "not_evaluated" and "no NVIDIA GPU" in check.message


def test_gpu_thresholds_fail_when_gpu_is_required() -> None:
    (check,) = evaluate(
        {"max_transfer_fraction": 0.2},
        _analysis(),
        LAT,
        gpu_collected=False,
        gpu_reason="no NVIDIA GPU",
        gpu_required=True,
    )
    assert check.status == "failed" and "required" in check.message


def test_gpu_thresholds_are_evaluated_with_gpu_data() -> None:
    checks = evaluate(
        {"max_gpu_idle": 0.1, "max_transfer_fraction": 0.5},
        _analysis(**{"gpu.idle_fraction": 0.3, "gpu.transfer_fraction": 0.1}),
        LAT,
        gpu_collected=True,
    )
    assert {c.key: c.status for c in checks} == {"max_gpu_idle": "failed", "max_transfer_fraction": "passed"}


def test_overhead_threshold_uses_the_collector_estimate() -> None:
    (check,) = evaluate({"max_overhead": 0.01}, _analysis(), LAT, gpu_collected=False, overhead=0.05)
    assert check.status == "failed" and "5.00%" in check.message


def test_deterministic_per_round_counts_gate_exactly() -> None:
    metrics = {"gpu.kernel_launches_per_round": 412.0, "gpu.h2d_bytes_per_round": 4096.0, "host.syncs_per_round": 0.0}
    checks = {
        c.key: c
        for c in evaluate(
            {"max_kernel_launches": 400, "max_h2d_bytes": 1 << 20, "max_syncs": 0},
            _analysis(**metrics),
            LAT,
            gpu_collected=True,
        )
    }
    assert (
        checks["max_kernel_launches"].status == "failed"
        and "kernel launches per round 412" in checks["max_kernel_launches"].message
    )
    assert checks["max_h2d_bytes"].status == "passed" and checks["max_syncs"].status == "passed"


def test_deterministic_counts_need_gpu_data() -> None:
    (check,) = evaluate({"max_kernel_launches": 10}, _analysis(), LAT, gpu_collected=False, gpu_reason="no GPU")
    assert check.status == "not_evaluated" and "no GPU" in check.message
    assert validate_marker(NODE, (), {"max_syncs": -1})


def _with_whatif(sync_saves: float, gpu_saves: float) -> Analysis:
    from pytest_inferscope.results import WhatIfRow

    a = _analysis()
    a.bottleneck = "gpu_bound" if gpu_saves > sync_saves else "sync_bound"
    a.whatif = [
        WhatIfRow("GPU work 2x faster", 20 * (1 - gpu_saves), 20 * gpu_saves, gpu_saves, "gpu_bound"),
        WhatIfRow("stream synchronize removed", 20 * (1 - sync_saves), 20 * sync_saves, sync_saves, "sync_bound"),
    ]
    return a


def test_expect_fix_passes_when_the_fix_saves_enough_whatever_the_class() -> None:
    # The H200 recording's sync loop: gpu_bound by a nose, the syncs' removal saving 25%.
    (check,) = evaluate({"expect_fix": "sync_bound"}, _with_whatif(0.25, 0.28), LAT, gpu_collected=True)
    assert check.status == "passed" and check.measured == 0.25
    assert "stream synchronize removed saves 25.0% of the round; at least 15% expected" in check.message


def test_expect_fix_fails_below_min_fix_saving_with_the_evidence() -> None:
    thresholds = {"expect_fix": "sync_bound", "min_fix_saving": 0.3}
    (check,) = evaluate(thresholds, _with_whatif(0.25, 0.28), LAT, gpu_collected=True, report="out/r.md")
    assert check.status == "failed" and "at least 30% expected" in check.message and "out/r.md" in check.message
    (other,) = evaluate({"expect_fix": "transfer_bound"}, _with_whatif(0.25, 0.28), LAT, gpu_collected=True)
    assert other.status == "failed" and "no simulated fix of that class" in other.message


def test_expect_fix_without_a_table_says_why() -> None:
    a = _analysis()
    a.whatif_replay = {"decided_by": "rules", "fallback": "the trace records no launch calls"}
    (check,) = evaluate({"expect_fix": "sync_bound"}, a, LAT, gpu_collected=True)
    assert check.status == "not_evaluated" and "no launch calls" in check.message
    (required,) = evaluate({"expect_fix": "sync_bound"}, a, LAT, gpu_collected=True, gpu_required=True)
    assert required.status == "failed"


def test_the_statistics_of_one_sample_are_numpys() -> None:
    """One measured round (every test under --inferscope-all): the same numbers as numpy gives."""
    import dataclasses

    import numpy as np

    for x in [0.0, 1e-9, 0.1, 1.5, 3.3333333333333335, 7e-8, 123456.789, 1e300, np.float64(2.2)]:
        got = LatencyStats.from_samples([x], [1.25], [2.5])
        s = np.asarray([x], dtype=float)
        q25, q50, q75, q90, q99 = np.percentile(s, [25, 50, 75, 90, 99])
        want = LatencyStats(
            samples_ms=[float(x)], warmup_ms=[1.25], median=float(q50), mean=float(s.mean()), p90=float(q90),
            p99=float(q99), min=float(s.min()), max=float(s.max()), iqr=float(q75 - q25), stdev=0.0, trace_ms=[2.5],
        )  # fmt: skip
        assert repr(dataclasses.asdict(got)) == repr(dataclasses.asdict(want)), x
        assert all(type(v) is float for v in dataclasses.asdict(got).values() if not isinstance(v, list))


def test_the_latency_statistics_are_numpys() -> None:
    """Computed without numpy (its percentile took ~100 us a test): numpy's percentiles to the bit, its mean and
    sample standard deviation to rounding, for any number of rounds."""
    import random

    import numpy as np

    from pytest_inferscope.results import percentiles

    rng = random.Random(7)
    for _ in range(3000):
        xs = [rng.lognormvariate(1.0, 0.6) for _ in range(rng.randint(1, 70))]
        qs = (10, 25, 50, 75, 90, 99)
        assert percentiles(sorted(xs), qs) == np.percentile(np.asarray(xs), qs).tolist(), xs
        got, s = LatencyStats.from_samples(xs), np.asarray(xs)
        assert (got.median, got.p90, got.p99) == tuple(np.percentile(s, [50, 90, 99]).tolist())
        assert got.iqr == float(np.subtract(*np.percentile(s, [75, 25])))
        assert (got.min, got.max) == (s.min(), s.max())
        assert abs(got.mean - s.mean()) <= 1e-12 * s.mean()
        assert abs(got.stdev - (s.std(ddof=1) if len(xs) > 1 else 0.0)) <= 1e-9 * s.std()


def test_host_memory_says_it_is_the_whole_process_and_what_was_resident_before_the_rounds() -> None:
    # The 2-core VM, 2026-11-30: torch (242 MB) and a 100 MB model loaded in a fixture, a body adding ~100 MB:
    # "peak host RSS 447.2 MB exceeds limit 200.0 MB", the user reading it as the body's own memory.
    at = {"mem.rss_peak_mb": 447.2, "mem.rss_start_mb": 344.0, "mem.rss_peak_sampled": 0.0}
    (check,) = evaluate({"max_host_memory_mb": 200}, _analysis(**at), LAT, gpu_collected=False)
    assert check.status == "failed" and check.measured == 447.2
    assert "the process's peak RSS 447.2 MB exceeds limit 200.0 MB" in check.message, check.message
    assert "344.0 MB of it resident before the rounds" in check.message and "103.2 MB" in check.message
    assert "sampled" not in check.message
    sampled = {**at, "mem.rss_peak_sampled": 1.0}
    (check,) = evaluate({"max_host_memory_mb": 1000}, _analysis(**sampled), LAT, gpu_collected=False)
    assert check.status == "passed" and "peak was sampled" in check.message and "missed" in check.message


def test_host_memory_added_compares_the_peak_above_what_was_resident_before_the_rounds() -> None:
    # The budget "this inference uses at most 200 MB", whatever torch, a fixture's model or an earlier test kept: with
    # 344 MB resident before the rounds and a peak of 447.2 MB the rounds added 103.2 MB.
    at = {"mem.rss_peak_mb": 447.2, "mem.rss_start_mb": 344.0, "mem.rss_peak_sampled": 0.0}
    (check,) = evaluate({"max_host_memory_added_mb": 200}, _analysis(**at), LAT, gpu_collected=False)
    assert check.status == "passed" and check.measured == pytest.approx(103.2)
    (check,) = evaluate({"max_host_memory_added_mb": 50}, _analysis(**at), LAT, gpu_collected=False)
    assert check.status == "failed", check.message
    assert (
        "max_host_memory_added_mb: the process's peak RSS above its RSS before the rounds 103.2 MB exceeds limit "
        "50.0 MB. The peak was 447.2 MB, 344.0 MB of it resident before the rounds" in check.message
    ), check.message
    (check,) = evaluate(
        {"max_host_memory_added_mb": 50}, _analysis(**{"mem.rss_peak_mb": 1.0}), LAT, gpu_collected=False
    )
    assert check.status == "not_evaluated" and "before the rounds was not read" in check.message


def test_the_evidence_quotes_a_finding_of_the_class_it_names() -> None:
    # The 2-core VM, 2026-11-30: "bottleneck memory_bound (confidence 75%): CPU contention: the test thread waited for
    # a core 77.3% of the measured time": the finding quoted was the first by share, one supporting no class.
    contention = Finding(
        rule="cpu_contention", title="CPU contention", summary="CPU contention: waited 77.3%.", cause=None, share=0.77,
        confidence=0.9,
    )  # fmt: skip
    memory = Finding(
        rule="memory_pressure", title="Memory pressure", summary="RSS grew 0.0 MB over the measured rounds.",
        cause="memory_bound", share=0.6, confidence=0.75,
    )  # fmt: skip
    a = Analysis(bottleneck="memory_bound", confidence=0.75, findings=[contention, memory], metrics={})
    (check,) = evaluate({"max_latency_ms": 1}, a, LAT, gpu_collected=False)
    assert "bottleneck memory_bound (confidence 75%): RSS grew 0.0 MB over the measured rounds" in check.message


def test_a_peak_read_only_at_the_ends_says_a_peak_inside_the_rounds_is_missed() -> None:
    at = {"mem.rss_peak_mb": 58.3, "mem.rss_start_mb": 58.2, "mem.rss_peak_sampled": 2.0}
    (check,) = evaluate({"max_host_memory_mb": 10}, _analysis(**at), LAT, gpu_collected=False)
    assert "read only at the rounds' start and end" in check.message and "sampled" not in check.message


def test_a_failed_memory_threshold_lists_the_memory_finding_first() -> None:
    """memory_pressure explains the kernel's share of the time (faulting pages in): listed by it, below the CPU's 97%,
    where a test failed on host memory, the finding of what it failed on came after those of what it did not."""
    from pytest_inferscope.checks import failed_first

    a = _analysis(**{"mem.rss_peak_mb": 380.0, "mem.rss_start_mb": 80.0})
    memory = Finding("memory_pressure", "Memory pressure: pages fault in", "s", "memory_bound", 0.05, 0.8)
    findings = [*a.findings, memory]
    (check,) = evaluate({"max_host_memory_added_mb": 100}, a, LAT, gpu_collected=False)
    assert check.status == "failed"
    assert [f.rule for f in failed_first(findings, [check])] == ["memory_pressure", "cpu_saturation"]
    (passed,) = evaluate({"max_host_memory_added_mb": 1000}, a, LAT, gpu_collected=False)
    assert failed_first(findings, [passed]) == findings  # by share where it did not fail
