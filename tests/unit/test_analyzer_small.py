"""The analyzer's short paths for small inputs (one round, one span, one sample, one value) against the general ones
they stand in for, on random data: the analysis must not change when a test has one device, stream or round."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_inferscope.analyzer.base import distinct, first_seen, union_ns
from pytest_inferscope.analyzer.idle import CLOCK_SLACK_NS, _covering, _device_gaps
from pytest_inferscope.analyzer.sampling import FEW_PAIRS, modules_in, sampled_entries
from pytest_inferscope.events import unique


def _intervals(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    starts = np.sort(rng.integers(0, 100_000, n)).astype(np.int64)
    return starts, starts + rng.integers(0, 3_000, n)


def _union_by_walk(starts: np.ndarray, ends: np.ndarray) -> int:
    total, run_s, run_e = 0, None, None
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if run_e is None or s > run_e:
            total += 0 if run_e is None else run_e - run_s
            run_s, run_e = s, e
        else:
            run_e = max(run_e, e)
    return total + (0 if run_e is None else run_e - run_s)


@pytest.mark.parametrize("seed", range(20))
def test_union_is_the_runs_summed(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, ends = _intervals(rng, int(rng.integers(1, 60)))
    order = rng.permutation(len(starts))  # in any order
    assert union_ns(starts[order], ends[order]) == _union_by_walk(starts, ends)


@pytest.mark.parametrize("value", [0, 7, 5_000, -1, 2**40])
def test_one_value_distinct_as_counted(value: int) -> None:
    a = np.full(50, value, dtype=np.int64)
    expected = np.bincount(a).nonzero()[0] if 0 <= value <= 4 * len(a) + 1024 else unique(a)
    got = distinct(a)
    assert got.tolist() == expected.tolist() == [value]
    assert got.dtype == expected.dtype
    assert first_seen(a) == [value]
    assert distinct(np.array([3, 3, 1], dtype=np.int64)).tolist() == [1, 3]  # ends alike, values not
    assert first_seen(np.array([3, 1, 3], dtype=np.int64)) == [3, 1]


@pytest.mark.parametrize("seed", range(20))
def test_one_round_gaps_as_among_rounds(seed: int) -> None:
    """One round's gaps are those the general path finds for it beside a second, empty round after it."""
    rng = np.random.default_rng(seed)
    g_start, g_end = _intervals(rng, int(rng.integers(1, 40)))
    r0, r1 = int(g_start[0]) - int(rng.integers(0, 500)), int(g_end.max()) + int(rng.integers(0, 500))
    one = _device_gaps(g_start, g_end, np.array([r0]), np.array([r1]))
    far = r1 + 10**9
    a, b, nxt = _device_gaps(g_start, g_end, np.array([r0, far]), np.array([r1, far + 10]))
    own = a < far  # the second round's lone gap (it ran nothing) last
    for got, want in zip(one, (a[own], b[own], nxt[own]), strict=True):
        assert got.tolist() == want.tolist()
        assert got.dtype == want.dtype


@pytest.mark.parametrize("seed", range(20))
def test_one_span_covering_as_among_spans(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s0 = int(rng.integers(0, 50_000))
    s, e = np.array([s0]), np.array([s0 + int(rng.integers(0, 20_000))])
    at = rng.integers(-5_000, 80_000, 30).astype(np.int64)
    covered, start = _covering(s, e, at)
    # the same span beside one long before every instant, which covers none of them
    ref_cov, ref_start = _covering(np.array([-(10**9), s0]), np.array([-(10**9) + 1, int(e[0])]), at)
    assert covered.tolist() == ref_cov.tolist()
    assert start[covered].tolist() == ref_start[ref_cov].tolist() == [s0] * int(covered.sum())
    assert covered.tolist() == ((s0 <= at + CLOCK_SLACK_NS) & (e[0] >= at - CLOCK_SLACK_NS)).tolist()


@pytest.mark.parametrize("seed", range(10))
def test_one_sample_entries_as_modules_in(seed: int) -> None:
    """A sample over more segments than the few counted one by one: the entries `modules_in` gives each."""
    rng = np.random.default_rng(seed)
    a = np.sort(rng.integers(0, 100_000, 80)).astype(np.int64)
    b = a + rng.integers(1, 900, 80)
    s0 = int(rng.integers(0, 10_000))
    samples = ([s0], [s0 + 90_000], [s0 + 90_000], ["mod"])
    seg, module, ns, names = sampled_entries(a, b, samples)
    assert names == ["mod"]
    by_segment = [modules_in(x, y, samples, "") for x, y in zip(a.tolist(), b.tolist(), strict=True)]
    assert [i for i, d in enumerate(by_segment) if d] == seg.tolist()
    assert [by_segment[i]["mod"] for i in seg.tolist()] == ns.tolist()
    assert module.tolist() == [0] * len(seg)
    assert len(seg) > FEW_PAIRS  # (the array path, not the few pairs counted one by one)
