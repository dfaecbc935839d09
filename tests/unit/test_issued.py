"""What a blocking call waited for (`analyzer/issued.py`): all of a round's blocking calls at once (`waited`), as
one call at a time (`finished` below, the lookup `waited` replaced) finds it, a stream synchronisation's own
stream first."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_inferscope.analyzer.issued import Issued


def finished(issued: Issued, k: int, at: int, stream: int | None = None) -> list[int]:
    """The lookup one call at a time (build.py before session 15): per stream, the op holding the latest end
    among those item `k` had issued that had ended at `at`."""
    out = []
    for key, items, ends, holder in issued.streams:
        if stream is not None and key & 0xFFFFFFFF != stream & 0xFFFFFFFF:
            continue
        n = int(np.searchsorted(items, k, side="right"))
        m = min(n, int(np.searchsorted(ends, at, side="right")))
        if m:
            out.append(int(holder[m - 1]))
    return out


def _random_issued(rng: np.random.Generator, n_ops: int, n_items: int) -> Issued:
    streams = (rng.integers(0, 2, n_ops) << 32) | rng.choice([7, 13, 0xFFFFFFFF], n_ops)  # device << 32 | handle
    ends = rng.integers(0, 10_000, n_ops)
    item = np.sort(rng.integers(0, n_items, n_ops))  # the item that issued each op, in issue order
    return Issued(streams, ends, item, rng.permutation(n_ops))


@pytest.mark.parametrize("seed", range(8))
def test_all_blocking_calls_at_once_find_what_each_alone_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_items = 60
    issued = _random_issued(rng, int(rng.integers(1, 200)), n_items)
    ks = np.sort(rng.choice(n_items, 25, replace=False))
    at = rng.integers(0, 12_000, len(ks))
    on = [None if rng.random() < 0.4 else int(rng.choice([7, 13, 99, 0xFFFFFFFF])) for _ in ks]  # 99: no such stream
    got = issued.waited(ks, at, on)
    calls = zip(ks.tolist(), at.tolist(), on, strict=True)
    want = [finished(issued, k, a, s) or finished(issued, k, a) for k, a, s in calls]
    assert got == want
    assert any(w for w in want) and any(s is not None and w for s, w in zip(on, want, strict=True))


def test_nothing_issued_waits_for_nothing() -> None:
    empty = np.zeros(0, dtype=np.int64)
    issued = Issued(empty, empty, empty, empty)
    assert issued.waited(np.array([0, 3]), np.array([5, 9]), [None, 7]) == [[], []]
    assert issued.waited(empty, empty, []) == []
