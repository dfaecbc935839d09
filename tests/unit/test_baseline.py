"""Unit tests of the baseline store (append-only, atomic, clear errors, untouched files) and the per-test verdict.

The drift defences of the verdict (speed probe, noise floor) are tested in test_drift.py.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_inferscope import baseline as baseline_mod
from pytest_inferscope.baseline import (
    BASELINE_SCHEMA_VERSION,
    FORMAT,
    BaselineEntry,
    BaselineError,
    BaselineStore,
    fingerprint,
    fingerprint_diff,
    validate_name,
)
from pytest_inferscope.regression import RegressionVerdict, compare_to_baseline
from pytest_inferscope.results import SCHEMA_VERSION, Analysis, LatencyStats, TestResult
from pytest_inferscope.units import fmt_ms

ENV: dict[str, Any] = {
    "python": "3.11.9",
    "cpu_model": "AMD EPYC 7B13",
    "plugin_version": "0.1.0",
    "torch": "2.13.0",
    "cuda": "13.0",
    "gpu_model": "NVIDIA H200",
    "driver": "580.65",
    "platform": "Linux",  # not part of the fingerprint
}
METRICS = {
    "gpu.kernel_launches_per_round": 120.0,
    "gpu.h2d_bytes_per_round": 4096.0,
    "gpu.d2h_bytes_per_round": None,
    "gpu.idle_fraction": 0.3,  # timing-dependent: not stored
}


def _samples(median: float, n: int = 20, seed: int = 0, sigma: float = 0.01) -> list[float]:
    return [float(x) for x in np.exp(np.random.default_rng(seed).normal(math.log(median), sigma, n))]


def _result(
    nodeid: str = "tests/test_m.py::test_forward",
    samples: list[float] | None = None,
    *,
    metrics: dict[str, float | None] | None = None,
    bottleneck: str = "gpu_bound",
    env: dict[str, Any] | None = None,
    outcome: str = "passed",
) -> TestResult:
    samples = _samples(3.0) if samples is None else samples
    return TestResult(
        nodeid=nodeid,
        slug=nodeid.replace("/", "_"),
        outcome=outcome,
        verdict="pass",
        rounds=len(samples),
        warmup=3,
        latency=LatencyStats.from_samples(samples),
        analysis=Analysis(bottleneck=bottleneck, confidence=0.8, metrics=dict(METRICS if metrics is None else metrics)),
        environment=dict(ENV if env is None else env),
    )


def _unchanged_by(store: BaselineStore, name: str, action: Any) -> BaselineError:
    """Run `action`, expect BaselineError, and check the file's bytes did not change."""
    before = store.path(name).read_bytes()
    with pytest.raises(BaselineError) as info:
        action()
    assert store.path(name).read_bytes() == before
    return info.value


# --- names and fingerprints ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["main", "release-1.2", "pr_123", "A.b-c_d", "x" * 100])
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "../main", "a\\b", ".hidden", ".", "..", "a b", "main\n", "x" * 101, "é"])
def test_invalid_names_are_a_clear_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="Invalid baseline name") as info:
        BaselineStore(tmp_path).save(name, [_result()], ENV)
    assert repr(name) in str(info.value) and "no path separators" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_a_branch_name_as_a_baseline_name_is_told_how_to_make_one_of_it(pytester: pytest.Pytester) -> None:
    """CI jobs name baselines after the branch ('feature/x'): the error said only which characters a name may have."""
    with pytest.raises(BaselineError) as info:
        validate_name("feature/x")
    assert "'feature/x' as 'feature-x'" in str(info.value) and "${BRANCH//\\//-}" in str(info.value)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=feature/x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "'feature/x' as 'feature-x': in bash, ${BRANCH//\\//-}" in result.stderr.str()


def test_fingerprint_has_every_key_missing_ones_as_none() -> None:
    fp = fingerprint({"python": "3.11.9", "cpu_model": "EPYC", "torch": None, "gpu_driver": 580})
    assert fp == {
        "gpu_model": "none",
        "driver": "580",
        "cuda": "none",
        "torch": "none",
        "python": "3.11.9",
        "cpu_model": "EPYC",
        "plugin_version": "none",
        "pinned_gpu": "none",
        "tracer": "none",
    }
    assert fingerprint(ENV)["gpu_model"] == "NVIDIA H200" and "platform" not in fingerprint(ENV)


def test_fingerprint_diff_names_what_differs() -> None:
    a = fingerprint(ENV)
    b = fingerprint({**ENV, "torch": "2.14.0", "gpu_model": None})
    diff = fingerprint_diff(a, b)
    assert diff == [
        "GPU model differs: baseline 'NVIDIA H200', this run 'none'.",
        "torch version differs: baseline '2.13.0', this run '2.14.0'.",
    ]
    assert fingerprint_diff(a, b, ignore={"torch", "gpu_model"}) == []
    assert fingerprint_diff(a, dict(a)) == []


# --- saving and loading --------------------------------------------------------------------


def test_save_then_load_keeps_samples_metrics_bottleneck_and_fingerprint(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "nested" / "baselines")  # created on save
    r = _result()
    path = store.save("main", [r], ENV)
    assert path == tmp_path / "nested" / "baselines" / "main.json"
    doc = json.loads(path.read_text())
    assert (doc["format"], doc["schema_version"], doc["name"]) == (FORMAT, BASELINE_SCHEMA_VERSION, "main")
    b = store.load("main")
    e = b.tests[r.nodeid]
    assert e.samples_ms == r.latency.samples_ms
    assert e.metrics == {"gpu.kernel_launches_per_round": 120.0, "gpu.h2d_bytes_per_round": 4096.0}
    assert (e.bottleneck, e.confidence, e.rounds, e.warmup) == ("gpu_bound", 0.8, 20, 3)
    assert e.fingerprint == fingerprint(ENV)
    assert e.schema_version == SCHEMA_VERSION and e.timestamp.endswith("+00:00")
    assert b.get(r.nodeid) == e and b.get("tests/other.py::test_x") is None


def test_save_writes_through_a_symlink_and_keeps_the_files_permissions(tmp_path: Path) -> None:
    """A baseline linked to a shared store stays a link (the store is appended to, not forked into a copy here), and
    the file keeps the permissions it had (0640, 0444), where a save made it a fresh 0644 file."""
    shared = tmp_path / "shared"
    BaselineStore(shared).save("main", [_result()], ENV)
    real = shared / "main.json"
    local = tmp_path / "checkout" / "baselines"
    local.mkdir(parents=True)
    (local / "main.json").symlink_to(real)
    for mode in (0o640, 0o444):
        real.chmod(mode)
        BaselineStore(local).save("main", [_result()], ENV)
        assert (local / "main.json").is_symlink() and (local / "main.json").resolve() == real
        assert real.stat().st_mode & 0o777 == mode
    assert len(json.loads(real.read_text())["tests"][_result().nodeid]) == 3
    assert sorted(p.name for p in local.iterdir()) == ["main.json"] and sorted(p.name for p in shared.iterdir()) == [
        "main.json"
    ]


def test_save_appends_and_never_rewrites_history(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    a, other = _result(samples=_samples(3.0, seed=1)), _result("tests/test_m.py::test_other", _samples(1.0))
    store.save("main", [a, other], ENV)
    first = json.loads(store.path("main").read_text())
    newer = _result(samples=_samples(3.3, seed=2), bottleneck="launch_bound")
    store.save("main", [newer], ENV)
    second = json.loads(store.path("main").read_text())
    # every earlier entry is still there, unchanged, with the new one after it
    for nodeid, runs in first["tests"].items():
        assert second["tests"][nodeid][: len(runs)] == runs
    assert len(second["tests"][a.nodeid]) == 2 and len(second["tests"][other.nodeid]) == 1
    b = store.load("main")
    assert b.tests[a.nodeid].samples_ms == newer.latency.samples_ms  # latest wins
    assert [e.bottleneck for e in b.history[a.nodeid]] == ["gpu_bound", "launch_bound"]
    assert b.tests[other.nodeid].samples_ms == other.latency.samples_ms


def test_unknown_fields_in_old_entries_survive_a_save(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [_result()], ENV)
    doc = json.loads(store.path("main").read_text())
    doc["tests"]["tests/test_m.py::test_forward"][0]["note"] = "kept"
    store.path("main").write_text(json.dumps(doc))
    store.save("main", [_result()], ENV)
    again = json.loads(store.path("main").read_text())
    assert again["tests"]["tests/test_m.py::test_forward"][0]["note"] == "kept"


def test_failed_and_empty_results_are_not_saved(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    broken = _result("tests/t.py::test_broken", outcome="failed")
    empty = _result("tests/t.py::test_empty", samples=[])
    store.save("main", [broken, empty, _result()], ENV)
    assert list(store.load("main").tests) == ["tests/test_m.py::test_forward"]
    with pytest.raises(BaselineError, match=r"saved to baseline 'other'.*none of the 2 profiled tests completed"):
        store.save("other", [broken, empty], ENV)
    with pytest.raises(BaselineError, match=r"'other'.*: the one profiled test did not complete its rounds \("):
        store.save("other", [broken], ENV)  # (not "1 profiled test(s)")
    assert not store.path("other").exists()


def test_names_lists_only_baseline_files(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    assert BaselineStore(tmp_path / "missing").names() == []
    store.save("main", [_result()], ENV)
    store.save("release-1.2", [_result()], ENV)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".main.json.tmp").write_text("x")
    (tmp_path / "bad name.json").write_text("{}")
    (tmp_path / "folder.json").mkdir()
    assert store.names() == ["main", "release-1.2"]


def test_concurrent_saves_lose_no_entries(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [_result("tests/t.py::test_0")], ENV)
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            store.save("main", [_result(f"tests/t.py::test_{i}")], ENV)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(store.load("main").tests) == sorted(f"tests/t.py::test_{i}" for i in range(9))


@pytest.mark.parametrize("linked", ["the file", "the folder"])
def test_saves_through_two_symlinks_to_one_store_lose_no_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, linked: str
) -> None:
    """Two CI jobs whose baselines are different symlinks to one shared store: the lock was taken on the link's folder,
    so with the file linked the two saves read the same file, and the second write dropped the first's entry. A pause
    between the read and the write (as a slow shared disk makes) makes the race certain without the lock."""
    shared = tmp_path / "shared"
    BaselineStore(shared).save("main", [_result("tests/t.py::test_0")], ENV)
    roots = [tmp_path / "job1" / "baselines", tmp_path / "job2" / "baselines"]
    for root in roots:
        if linked == "the file":
            root.mkdir(parents=True)
            (root / "main.json").symlink_to(shared / "main.json")
        else:
            root.parent.mkdir()
            root.symlink_to(shared)
    write = baseline_mod.atomic_write_text

    def slow(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.3)
        write(*args, **kwargs)

    monkeypatch.setattr(baseline_mod, "atomic_write_text", slow)
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            BaselineStore(roots[i - 1]).save("main", [_result(f"tests/t.py::test_{i}")], ENV)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(BaselineStore(shared).load("main").tests) == [f"tests/t.py::test_{i}" for i in range(3)]
    if linked == "the file":  # still links, to the one file, which kept its mode (no copy made in a job's folder)
        for root in roots:
            assert (root / "main.json").is_symlink() and (root / "main.json").resolve() == shared / "main.json"
            assert sorted(p.name for p in root.iterdir()) == ["main.json"]
    assert sorted(p.name for p in shared.iterdir()) == ["main.json"]


# --- errors, and the file left untouched -------------------------------------------------


def test_missing_name_lists_existing_names_and_folder(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [_result()], ENV)
    store.save("nightly", [_result()], ENV)
    with pytest.raises(BaselineError) as info:
        store.load("mian")
    msg = str(info.value)
    assert "No baseline named 'mian'" in msg and "main, nightly" in msg and str(tmp_path) in msg
    assert "--inferscope-save-baseline=mian" in msg


def test_missing_folder_is_an_error_not_an_empty_comparison(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"No baseline named 'main'.*folder .* does not exist"):
        BaselineStore(tmp_path / "nope").load("main")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BaselineError, match="has no baselines"):
        BaselineStore(tmp_path / "empty").load("main")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            b'{"format": "pytest-inferscope-baseline", "schema_version": 1, "tests": {',
            "not valid JSON at line 1, column",
        ),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"machine_info": {}, "benchmarks": []}', "not a pytest-inferscope baseline"),
        (b"[1, 2, 3]", "not a pytest-inferscope baseline"),
        (b'{"format": "pytest-inferscope-baseline", "schema_version": 99, "tests": {}}', "newer pytest-inferscope"),
        (b'{"format": "pytest-inferscope-baseline", "schema_version": "1", "tests": {}}', "unknown schema version"),
        (b'{"format": "pytest-inferscope-baseline", "schema_version": true, "tests": {}}', "unknown schema version"),
        (b'{"format": "pytest-inferscope-baseline", "schema_version": 1}', '"tests" is missing'),
        (
            b'{"format": "pytest-inferscope-baseline", "schema_version": 1, "tests": {"t": [{"samples_ms": "1"}]}}',
            "entry 0 of 't': samples_ms",
        ),
        (
            b'{"format": "pytest-inferscope-baseline", "schema_version": 1, "tests": {"t": [{"samples_ms": [NaN]}]}}',
            "finite numbers",
        ),
        (
            b'{"format": "pytest-inferscope-baseline", "schema_version": 1, '
            b'"tests": {"t": [{"samples_ms": [1], "metrics": {"k": "x"}}]}}',
            "metrics is not an object",
        ),
    ],
)
def test_bad_files_are_clear_errors_and_left_byte_for_byte(tmp_path: Path, content: bytes, match: str) -> None:
    store = BaselineStore(tmp_path)
    store.path("main").write_bytes(content)
    err = _unchanged_by(store, "main", lambda: store.load("main"))
    assert str(store.path("main")) in str(err) and "\n" not in str(err)
    assert match in str(err)
    err = _unchanged_by(store, "main", lambda: store.save("main", [_result()], ENV))
    assert match in str(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.json"]  # no temporary file left


def test_corrupt_json_error_gives_line_and_column(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [_result()], ENV)
    text = store.path("main").read_text()
    store.path("main").write_text(text[: len(text) // 2])  # cut short, as by a full disk
    with pytest.raises(BaselineError, match=r"line \d+, column \d+") as info:
        store.load("main")
    assert "left untouched" in str(info.value)


def test_unreadable_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "main.json").mkdir()
    with pytest.raises(BaselineError, match="cannot be read"):
        BaselineStore(tmp_path).load("main")


def test_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [_result()], ENV)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("pytest_inferscope.reporters.files.os.replace", refuse)
    err = _unchanged_by(store, "main", lambda: store.save("main", [_result()], ENV))
    assert "No space left on device" in str(err) and "left as it was" in str(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.json"]


def test_save_writes_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = baseline_mod.atomic_write_text

    def spy(path: Any, text: str, *, durable: bool = False) -> None:
        calls.append(durable)
        real(path, text, durable=durable)

    monkeypatch.setattr(baseline_mod, "atomic_write_text", spy)
    BaselineStore(tmp_path).save("main", [_result()], ENV)
    assert calls == [True]


# --- the verdict against a baseline --------------------------------------------------------


def _entry(samples: list[float], **kw: Any) -> BaselineEntry:
    return BaselineEntry.from_result(_result(samples=samples, **kw), fingerprint(ENV), "2025-01-01T00:00:00+00:00")


def test_slower_run_regresses_with_the_evidence_in_the_message() -> None:
    entry = _entry(_samples(3.0, seed=1))
    new = _result(samples=_samples(3.4, seed=2), bottleneck="launch_bound")
    v = compare_to_baseline(entry, new, max_regression=0.05, alpha=0.01, baseline_name="main")
    assert v.verdict == "regressed" and v.failed and v.latency.verdict == "regressed"
    assert v.bottleneck_changed and v.fingerprint_differences == []
    msg = v.message()
    c = v.latency
    assert msg.startswith("Performance regression against baseline 'main' (recorded 2025-01-01")
    before, after = fmt_ms(c.base_median, c.new_median), fmt_ms(c.new_median, c.base_median)
    assert f"median {before} ms (20 rounds) → {after} ms (20 rounds)" in msg
    assert f"ratio {c.ratio:.3f}" in msg and f"99% CI {c.ci_low:.3f}–{c.ci_high:.3f}" in msg
    assert f"p={c.p_value:.2g}" in msg and "allowed regression 5%" in msg
    assert "bottleneck: gpu_bound → launch_bound." in msg


def test_same_speed_is_unchanged() -> None:
    v = compare_to_baseline(_entry(_samples(3.0, seed=1)), _result(samples=_samples(3.0, seed=2)), max_regression=0.05)
    assert v.verdict == "unchanged" and not v.failed and v.metric_changes == [] and not v.bottleneck_changed


def test_deterministic_metric_regresses_on_its_own() -> None:
    entry = _entry(_samples(3.0, seed=1))
    more_launches = {**METRICS, "gpu.kernel_launches_per_round": 144.0}
    v = compare_to_baseline(entry, _result(samples=_samples(3.0, seed=2), metrics=more_launches), max_regression=0.05)
    assert v.latency.verdict == "unchanged" and v.verdict == "regressed"
    assert v.reason == "gpu.kernel_launches_per_round rose from 120 to 144 (+20.0%), none allowed."
    assert "  metric: gpu.kernel_launches_per_round rose from 120 to 144" in v.message()
    tolerant = compare_to_baseline(
        entry,
        _result(samples=_samples(3.0, seed=2), metrics=more_launches),
        max_regression=0.05,
        metric_tolerance={"gpu.kernel_launches_per_round": 0.25},
    )
    assert tolerant.verdict == "unchanged" and tolerant.metric_changes[0].regressed is False
    # too few rounds make the latency inconclusive, but a metric regression still counts
    few = compare_to_baseline(entry, _result(samples=[3.0, 3.1], metrics=more_launches), max_regression=0.05)
    assert few.latency.verdict == "inconclusive" and few.verdict == "regressed"


def test_fingerprint_mismatch_is_inconclusive_never_a_silent_comparison() -> None:
    entry = _entry(_samples(3.0, seed=1))
    other_gpu = {**ENV, "gpu_model": "NVIDIA A100", "driver": "550.1"}
    v = compare_to_baseline(entry, _result(samples=_samples(4.0, seed=2), env=other_gpu), max_regression=0.05)
    assert v.verdict == "inconclusive" and not v.failed
    assert v.latency.verdict == "regressed" and "would have been 'regressed'" in v.reason
    assert v.fingerprint_differences == [
        "GPU model differs: baseline 'NVIDIA H200', this run 'NVIDIA A100'.",
        "GPU driver differs: baseline '580.65', this run '550.1'.",
    ]
    assert "  environment: GPU model differs" in v.message()
    same = compare_to_baseline(
        entry, _result(samples=_samples(4.0, seed=2), env=other_gpu), max_regression=0.05, environment=ENV
    )
    assert same.verdict == "regressed"
    ignored = compare_to_baseline(
        entry,
        _result(samples=_samples(4.0, seed=2), env=other_gpu),
        max_regression=0.05,
        ignore_fingerprint={"gpu_model", "driver"},
    )
    assert ignored.verdict == "regressed"


def test_noise_warnings_are_labelled_by_side() -> None:
    entry = _entry(_samples(3.0, seed=1, n=4))
    v = compare_to_baseline(entry, _result(samples=_samples(3.0, seed=2, sigma=0.3)), max_regression=0.05)
    assert any(w.startswith("baseline: Too few rounds: with 4 rounds per side") for w in v.warnings)
    assert any(w.startswith("this run: Noisy: the rounds vary by") for w in v.warnings)
    assert v.verdict == "inconclusive" and "  warning: baseline: Too few rounds" in v.message()


def test_verdict_round_trips_as_plain_data() -> None:
    entry = _entry(_samples(3.0, seed=1))
    new = _result(
        samples=[3.0, 3.1], metrics={**METRICS, "gpu.h2d_bytes_per_round": 8192.0}, bottleneck="transfer_bound"
    )
    v = compare_to_baseline(entry, new, max_regression=0.05, baseline_name="main")
    data = json.loads(json.dumps(v.to_dict(), allow_nan=False))  # what xdist's workeroutput carries
    assert data["verdict"] == "regressed" and data["bottleneck_changed"] is True
    back = RegressionVerdict.from_dict(data)
    assert back.message() == v.message()
    assert back.metric_changes == v.metric_changes and back.verdict == v.verdict


def test_a_test_results_regression_verdict_is_typed_and_round_trips_as_plain_data() -> None:
    """report.json and xdist carry the verdict as plain data (NaN as null), and it comes back typed."""
    from pytest_inferscope.comparison import Comparison
    from pytest_inferscope.results import Analysis, LatencyStats, TestResult

    c = Comparison("inconclusive", math.nan, math.nan, math.nan, math.nan, "no rounds", 1.0, math.nan, 3, 0)
    verdict = RegressionVerdict("t", "inconclusive", "no rounds", c, bottleneck_before="a", bottleneck_after="b")
    result = TestResult("t", "t", "passed", "pass", 1, 0, LatencyStats.from_samples([1.0]), Analysis("x", 0.5),
                        regression=verdict)  # fmt: skip
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["regression"]["bottleneck_changed"] is True and data["regression"]["latency"]["ratio"] is None
    back = TestResult.from_dict(data).regression
    assert (
        isinstance(back, RegressionVerdict) and math.isnan(back.latency.ratio) and back.message() == verdict.message()
    )


def test_each_test_is_saved_with_its_own_environment(tmp_path: Path) -> None:
    """Under xdist the controller saves the baseline: it imported no torch and pinned no GPU, its workers did."""
    worker = {**ENV, "pinned_gpu": 1}
    BaselineStore(tmp_path).save(
        "main", [_result(env=worker), _result("t.py::test_no_env", env={})], {"python": "3.12"}
    )
    tests = json.loads((tmp_path / "main.json").read_text())["tests"]
    assert tests["tests/test_m.py::test_forward"][0]["fingerprint"] == fingerprint(worker)
    assert tests["t.py::test_no_env"][0]["fingerprint"]["python"] == "3.12"  # no environment of its own: the run's


def test_another_gpu_of_the_same_model_is_compared_and_said() -> None:
    entry = BaselineEntry.from_result(_result(samples=_samples(3.0, seed=1)), fingerprint({**ENV, "pinned_gpu": 0}), "")
    moved = _result(samples=_samples(3.4, seed=2), env={**ENV, "pinned_gpu": 1})
    v = compare_to_baseline(entry, moved, max_regression=0.05, baseline_name="main")
    assert v.verdict == "regressed" and v.fingerprint_differences == []
    assert v.slot_change == "baseline on GPU 0, this run on GPU 1"
    assert "GPU: another of the same model (baseline on GPU 0, this run on GPU 1)." in v.message()
    unpinned = compare_to_baseline(_entry(_samples(3.0, seed=1)), moved, max_regression=0.05)
    assert unpinned.slot_change == "baseline on the unpinned GPU, this run on GPU 1"
    # Another model on the other slot: not a fair comparison, whatever the slot.
    other = _result(samples=_samples(3.4, seed=2), env={**ENV, "pinned_gpu": 1, "gpu_model": "NVIDIA H100"})
    v = compare_to_baseline(entry, other, max_regression=0.05)
    assert v.verdict == "inconclusive" and v.slot_change == ""
    assert v.fingerprint_differences == ["GPU model differs: baseline 'NVIDIA H200', this run 'NVIDIA H100'."]
