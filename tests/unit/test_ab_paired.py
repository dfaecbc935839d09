"""The A/B statistics (ab/paired.py) and the twin's command line (ab/args.py), without processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_inferscope.ab.args import twin_args
from pytest_inferscope.ab.paired import judge, looks, median_ratio_ci, signed_rank_p
from pytest_inferscope.ab.worktree import Worktree


@pytest.mark.parametrize("seed", range(5))
def test_signed_rank_matches_scipy(seed: int) -> None:
    stats = pytest.importorskip("scipy.stats")
    d = np.random.default_rng(seed).normal(0.3, 1.0, size=15)
    greater, less = signed_rank_p(d.tolist())
    assert greater == pytest.approx(stats.wilcoxon(d, alternative="greater", method="exact").pvalue, rel=1e-9)
    assert less == pytest.approx(stats.wilcoxon(d, alternative="less", method="exact").pvalue, rel=1e-9)


def test_signed_rank_with_ties_uses_the_normal_approximation() -> None:
    stats = pytest.importorskip("scipy.stats")
    d = [1.0, 1.0, 2.0, -0.5, 3.0, 3.0, 0.7, 1.5, -1.0, 2.5, 0.9, 1.1]
    greater, _ = signed_rank_p(d)
    ref = stats.wilcoxon(d, alternative="greater", method="approx", correction=True).pvalue
    assert greater == pytest.approx(ref, rel=1e-6)


def test_looks_every_first_pairs_and_the_cap() -> None:
    assert looks(20, 60) == [20, 40, 60]
    assert looks(20, 50) == [20, 40, 50]
    assert looks(10, 10) == [10]


def test_median_ratio_ci_covers_the_ratio() -> None:
    logs = np.log(np.random.default_rng(1).normal(1.1, 0.02, size=30)).tolist()
    ratio, lo, hi = median_ratio_ci(logs, 0.99)
    assert lo < ratio < hi and 1.05 < ratio < 1.15


def _pairs(ratio: float, n: int, noise: float, seed: int = 0) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    ref = rng.normal(3.0, 0.3, size=n)  # drift shared by both halves of a pair
    new = ref * ratio * np.exp(rng.normal(0, noise, size=n))
    return new.tolist(), ref.tolist()


def test_judge_regressed_improved_unchanged() -> None:
    kw = {"max_regression": 0.05, "alpha": 0.01, "n_looks": 3}
    assert judge(*_pairs(1.2, 20, 0.01), last=False, **kw).verdict == "regressed"
    assert judge(*_pairs(0.8, 20, 0.01), last=False, **kw).verdict == "improved"
    same = judge(*_pairs(1.0, 20, 0.01), last=False, **kw)
    assert same.verdict == "unchanged" and same.final
    # a real but small change: significant, within the allowed 5%, unchanged
    small = judge(*_pairs(1.02, 20, 0.002), last=True, **kw)
    assert small.verdict == "unchanged" and small.p_value < 0.001


def test_judge_waits_then_says_inconclusive_with_a_reason() -> None:
    kw = {"max_regression": 0.05, "alpha": 0.01, "n_looks": 3}
    new, ref = _pairs(1.1, 20, 0.4, seed=3)  # pairs disagree far more than the change
    early = judge(new, ref, last=False, **kw)
    assert not early.final and early.verdict == "inconclusive"
    late = judge(new[:6], ref[:6], last=True, **kw)
    assert late.final and late.verdict == "inconclusive" and "cannot reach significance" in late.reason


def test_false_positive_rate_of_the_sequential_rule() -> None:
    """Unchanged code, 20/40/60 pairs with looks: regressed at most alpha of the time (simulated pairs)."""
    rng = np.random.default_rng(7)
    false = 0
    for _ in range(400):
        ref = rng.lognormal(0, 0.05, size=60)
        new = ref * rng.lognormal(0, 0.06, size=60)
        for j, n in enumerate(looks(20, 60)):
            look = judge(new[:n].tolist(), ref[:n].tolist(), max_regression=0.0, alpha=0.01, n_looks=3, last=j == 2)
            if look.final:
                false += look.verdict == "regressed"
                break
    assert false / 400 <= 0.01


def test_twin_args_drop_this_sides_outputs_and_map_paths(tmp_path: Path) -> None:
    tree = Worktree(tmp_path / "repo", "main", "0" * 40, tmp_path / "wt" / "repo", tmp_path / "wt", tmp_path / "g")
    (tmp_path / "repo" / "tests").mkdir(parents=True)
    args = [
        "-k", "decode", "-n", "2", "--junitxml=j.xml", "--basetemp", "/tmp/x", "--inferscope-ab=main",
        "-n2", "--inferscope-report", "out", str(tmp_path / "repo" / "tests") + "::t", "--inferscope-rounds=5",
    ]  # fmt: skip
    assert twin_args(args, tree) == ["-k", "decode", str(tmp_path / "wt" / "repo" / "tests") + "::t",
                                     "--inferscope-rounds=5"]  # fmt: skip
    assert twin_args(["-x", "--basetemp=/t"], None) == ["-x"]


def test_the_reasons_say_the_allowed_change_as_a_percentage() -> None:
    """The A/B reasons said "beyond the allowed 0.05" where every other message says 5%."""
    kw = {"max_regression": 0.05, "alpha": 0.01, "n_looks": 1, "last": True}
    slower = judge(*_pairs(1.5, 20, 0.01), **kw)  # type: ignore[arg-type]
    assert slower.verdict == "regressed" and slower.reason.endswith("beyond the allowed 5%."), slower.reason
    same = judge(*_pairs(1.0, 20, 0.01), **kw)  # type: ignore[arg-type]
    assert same.verdict != "regressed" and "0.05" not in same.reason, same.reason
