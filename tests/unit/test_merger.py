from __future__ import annotations

import numpy as np
import pytest

from pytest_inferscope.events import EVENT_DTYPE, Domain, Kind, RawTrace
from pytest_inferscope.merger import MAX_RESIDUAL_NS, fit_clock, merge

HOST0 = 10**12


def ev(
    kind: int,
    start: int,
    end: int,
    *,
    tid: int = 1,
    corr: int = 0,
    device: int = -1,
    domain: int = Domain.HOST,
    name: int = 0,
    flags: int = 0,
) -> tuple:
    return (start, end, 0, corr, name, tid, -1 if device < 0 else 7, device, kind, domain, flags)


def raw(rows: list[tuple], pairs=None, t0: int = HOST0) -> RawTrace:
    return RawTrace(np.array(rows, dtype=EVENT_DTYPE), ["n0", "n1", "n2"], clock_pairs=pairs or [], t0_ns=t0)


def test_cpu_only_fit_is_identity_and_times_are_relative_to_t0() -> None:
    tl = merge(raw([ev(Kind.ROUND, HOST0 + 100, HOST0 + 900)]))
    assert tl.clock.ok and tl.clock.rate == 1.0 and "CPU-only" in tl.clock.note
    assert (tl.events["start"][0], tl.events["end"][0]) == (100, 900)


def test_fit_recovers_a_device_clock_running_at_another_rate() -> None:
    # torch.profiler's timestamp callback makes CUPTI return TSC ticks (~2.1x ns): the fit must undo it.
    rate_dev = 2.1
    dev = lambda h: int(5_000 + (h - HOST0) * rate_dev)  # noqa: E731
    pairs = [(HOST0, dev(HOST0)), (HOST0 + 1_000_000_000, dev(HOST0 + 1_000_000_000))]
    launch = HOST0 + 10_000
    rows = [
        ev(Kind.ROUND, HOST0, HOST0 + 2_000_000),
        ev(Kind.RUNTIME, dev(launch), dev(launch + 3_000), corr=5, domain=Domain.DEVICE),
        ev(Kind.KERNEL, dev(launch + 15_000), dev(launch + 1_015_000), corr=5, device=0, domain=Domain.DEVICE),
    ]
    tl = merge(raw(rows, pairs))
    assert abs(tl.clock.rate - 1 / rate_dev) < 1e-9
    assert "runs at" in tl.clock.note and tl.clock.causality_violations == 0
    k = tl.events[tl.events["kind"] == Kind.KERNEL][0]
    assert abs(int(k["start"]) - 25_000) <= 2 and abs(int(k["end"] - k["start"]) - 1_000_000) <= 2


def test_causality_violations_are_counted() -> None:
    pairs = [(HOST0, HOST0), (HOST0 + 10**9, HOST0 + 10**9)]
    rows = [
        ev(Kind.RUNTIME, HOST0 + 5_000, HOST0 + 6_000, corr=1, domain=Domain.DEVICE),
        ev(Kind.KERNEL, HOST0 + 4_000, HOST0 + 9_000, corr=1, device=0, domain=Domain.DEVICE),  # before its launch
        ev(Kind.RUNTIME, HOST0 + 7_000, HOST0 + 8_000, corr=2, domain=Domain.DEVICE),
        ev(Kind.KERNEL, HOST0 + 20_000, HOST0 + 30_000, corr=2, device=0, domain=Domain.DEVICE),
    ]
    tl = merge(raw(rows, pairs))
    assert tl.clock.causality_violations == 1
    assert "before their launch" in tl.clock.note


def test_a_bad_fit_drops_gpu_times_but_keeps_cpu_results() -> None:
    pairs = [
        (HOST0, HOST0),
        (HOST0 + 10**6, HOST0 + 10**6),
        (HOST0 + 2 * 10**6, HOST0 + 2 * 10**6 + 5 * MAX_RESIDUAL_NS),
    ]
    rows = [ev(Kind.ROUND, HOST0, HOST0 + 100), ev(Kind.KERNEL, HOST0, HOST0 + 50, device=0, domain=Domain.DEVICE)]
    tl = merge(raw(rows, pairs))
    assert not tl.clock.ok and "not trusted" in tl.clock.note
    assert list(tl.events["kind"]) == [Kind.ROUND]


def test_device_events_without_clock_readings_are_not_placed() -> None:
    fit = fit_clock([], has_device_events=True)
    assert not fit.ok and "cannot be placed" in fit.note


def test_incomplete_records_are_counted_and_dropped() -> None:
    pairs = [(HOST0, HOST0), (HOST0 + 10**6, HOST0 + 10**6)]
    rows = [ev(Kind.KERNEL, HOST0 + 10, 0, device=0, domain=Domain.DEVICE)]
    tl = merge(raw(rows, pairs))
    assert tl.incomplete == 1 and len(tl) == 0


def test_hierarchy_test_round_scope_and_leaves() -> None:
    pairs = [(HOST0, HOST0), (HOST0 + 10**9, HOST0 + 10**9)]
    rows = [
        ev(Kind.TEST, HOST0, HOST0 + 1000),
        ev(Kind.ROUND, HOST0 + 10, HOST0 + 500),
        ev(Kind.SCOPE, HOST0 + 20, HOST0 + 300, name=1),
        ev(Kind.SCOPE, HOST0 + 30, HOST0 + 100, name=2),
        ev(Kind.SAMPLE, HOST0 + 40, HOST0 + 50),
        ev(Kind.RUNTIME, HOST0 + 60, HOST0 + 70, corr=9, domain=Domain.DEVICE),
        ev(Kind.KERNEL, HOST0 + 400, HOST0 + 450, corr=9, device=0, domain=Domain.DEVICE),
        ev(Kind.SCOPE, HOST0 + 200, HOST0 + 250, tid=2),  # another thread, top level there
        ev(Kind.ROUND, HOST0 + 600, HOST0 + 900),
    ]
    tl = merge(raw(rows, pairs))
    kinds = tl.events["kind"]
    idx = {k: np.flatnonzero(kinds == k) for k in (Kind.TEST, Kind.ROUND, Kind.SCOPE, Kind.SAMPLE, Kind.KERNEL)}
    test, (r1, r2) = idx[Kind.TEST][0], idx[Kind.ROUND]
    outer, inner, other = idx[Kind.SCOPE]
    assert tl.parent[test] == -1 and tl.parent[r1] == test and tl.parent[r2] == test
    assert tl.parent[outer] == r1 and tl.parent[inner] == outer
    assert tl.parent[idx[Kind.SAMPLE][0]] == inner
    assert tl.parent[other] == outer  # the test thread's innermost span at t=200
    assert tl.parent[idx[Kind.KERNEL][0]] == inner  # where its launch ran, not where it executed
    assert list(tl.events["start"]) == sorted(tl.events["start"])


def test_fit_is_exact_at_cupti_magnitudes() -> None:
    # CUPTI timestamps are ~1.8e18 ns; float64 steps there are 256 ns, so the fit must work on differences.
    dev0 = 1_760_000_000_123_456_789
    pairs = [(HOST0, dev0), (HOST0 + 2_000_000_000, dev0 + 2_000_000_000)]
    rows = [
        ev(Kind.RUNTIME, dev0 + 1_001, dev0 + 2_003, corr=1, domain=Domain.DEVICE),
        ev(Kind.KERNEL, dev0 + 10_007, dev0 + 10_019, corr=1, device=0, domain=Domain.DEVICE),
    ]
    tl = merge(raw(rows, pairs))
    assert tl.clock.rate == 1.0 and tl.clock.residual_ns == 0.0
    k = tl.events[tl.events["kind"] == Kind.KERNEL][0]
    assert (int(k["start"]), int(k["end"])) == (10_007, 10_019)  # to the nanosecond


def test_fit_is_numpys_least_squares_to_the_bit() -> None:
    # fit_clock runs the ufuncs' reductions (not np.mean/np.sum/np.ptp, whose wrappers cost more than a fit of a
    # few readings): the same numbers to the last bit, for one reading, equal device times, and 2 to 20 readings.
    rng = np.random.default_rng(7)
    cases = [[(HOST0, 5)], [(HOST0, 5), (HOST0 + 999, 5)]]
    for n in range(2, 21):
        d = np.sort(rng.integers(0, 10**12, n))
        h = (d * (1 + rng.normal(0, 1e-6)) + rng.integers(-3000, 3000, n)).astype(np.int64)
        cases.append([(HOST0 + int(a), 1_760_000_000_000_000_000 + int(b)) for a, b in zip(h, d, strict=True)])
    for pairs in cases:
        fit = fit_clock(pairs, has_device_events=True)
        hh = np.array([p[0] - pairs[0][0] for p in pairs], dtype=np.float64)
        dd = np.array([p[1] - pairs[0][1] for p in pairs], dtype=np.float64)
        if len(pairs) == 1 or np.ptp(dd) == 0:
            offset = float(np.mean(hh - dd))
            expected = (1.0, offset, float(np.max(np.abs(hh - dd - offset))))
        else:
            d0, h0 = dd.mean(), hh.mean()
            rate = float(np.sum((dd - d0) * (hh - h0)) / np.sum((dd - d0) ** 2))
            offset = float(h0 - rate * d0)
            expected = (rate, offset, float(np.max(np.abs(hh - (rate * dd + offset)))))
        assert (fit.rate, fit.offset_ns, fit.residual_ns) == expected
        assert fit.pairs == len(pairs)


def test_merge_works_on_its_own_copy_of_the_records_of_any_layout() -> None:
    # merge copies the records (by `take` when they are EVENT_DTYPE already) before it moves them to the host clock
    # and sorts them: the raw trace is left as it was, and records of another layout are converted as before.
    pairs = [(HOST0, HOST0 + 50), (HOST0 + 10**9, HOST0 + 10**9 + 50)]
    rows = [
        ev(Kind.ROUND, HOST0 + 100, HOST0 + 9_000),
        ev(Kind.RUNTIME, HOST0 + 300, HOST0 + 400, corr=3),
        ev(Kind.KERNEL, HOST0 + 550, HOST0 + 950, corr=3, device=0, domain=Domain.DEVICE),
    ]
    r = raw(rows, pairs)
    before = r.events.copy()
    tl = merge(r)
    assert r.events.tobytes() == before.tobytes() and not np.shares_memory(tl.events, r.events)
    assert tl.events["start"].tolist() == [100, 300, 500]  # the kernel moved 50 ns back to the host's clock
    wider = np.array(rows, dtype=[(n, "<i8") if n in ("corr", "name") else (n, t) for n, t in EVENT_DTYPE.descr])
    other = merge(RawTrace(wider, r.strings, clock_pairs=pairs, t0_ns=HOST0))
    assert other.events.dtype == EVENT_DTYPE and other.events.tobytes() == tl.events.tobytes()


def _innermost(spans: list[tuple[int, int, int]], t: int) -> int:
    """The index of the latest-starting span (index, start, end) open at `t`: the innermost of nested spans."""
    return max((i for i, s, e in spans if s <= t < e), default=-1)


@pytest.mark.parametrize("repeats", [1, 2])
def test_links_by_correlation_id_and_thread_hold_on_shuffled_and_repeated_ids(repeats: int) -> None:
    # Calls' ids out of order, once each (the hierarchy reads the causality check's pairs) or repeated (which call
    # is first depends on the order: it looks again); leaves on the test thread, on a thread with its own spans and
    # on threads without any: against the definitions, brute force.
    rng = np.random.default_rng(7)
    pairs = [(HOST0, HOST0), (HOST0 + 10**9, HOST0 + 10**9)]
    rows = [ev(Kind.TEST, HOST0, HOST0 + 100_000), ev(Kind.SCOPE, HOST0 + 50_000, HOST0 + 90_000, tid=2)]
    for k in range(8):
        r0 = HOST0 + 1_000 + k * 10_000
        rows += [ev(Kind.ROUND, r0, r0 + 8_000), ev(Kind.SCOPE, r0 + 1_000, r0 + 5_000, name=1)]
    ids = rng.permutation(np.repeat(np.arange(1, 61), repeats))[:60]
    for c, t in zip(ids.tolist(), rng.integers(HOST0, HOST0 + 100_000, len(ids)).tolist(), strict=True):
        rows.append(ev(Kind.RUNTIME, t, t + 50, tid=int(rng.choice([1, 2, 3])), corr=c, domain=Domain.DEVICE))
        start = t + int(rng.integers(-200, 2_000))
        device = -1 if c % 6 == 0 else 0  # no device: a leaf of its thread, still held to its call's start
        rows.append(ev(Kind.KERNEL, start, start + 300, corr=c, device=device, domain=Domain.DEVICE))
    for t in rng.integers(HOST0, HOST0 + 100_000, 30).tolist():
        rows.append(ev(Kind.SAMPLE, t, t + 10, tid=int(rng.choice([1, 2, 4]))))
    events = np.array(rows, dtype=EVENT_DTYPE)
    tl = merge(raw(rows, pairs))

    # causality: each GPU record against the first call with its id in the collection's order
    first_start = {}
    for e in events[events["kind"] == Kind.RUNTIME]:
        first_start.setdefault(int(e["corr"]), int(e["start"]))
    kernels = events[events["kind"] == Kind.KERNEL]
    assert tl.clock.causality_violations == sum(int(e["start"]) < first_start[int(e["corr"])] for e in kernels) > 0
    # hierarchy: a leaf's innermost span of its thread (the test thread's for a thread without spans); a kernel's,
    # its first call's (in the timeline's order) with its id
    ev_ = tl.events
    spans: dict[int, list[tuple[int, int, int]]] = {1: [], 2: []}
    for i in np.flatnonzero(np.isin(ev_["kind"], [Kind.TEST, Kind.ROUND, Kind.SCOPE])).tolist():
        spans[int(ev_["tid"][i])].append((i, int(ev_["start"][i]), int(ev_["end"][i])))
    first_call: dict[int, int] = {}
    for i in range(len(ev_)):
        kind, tid = int(ev_["kind"][i]), int(ev_["tid"][i])
        if kind == Kind.RUNTIME:
            first_call.setdefault(int(ev_["corr"][i]), i)
        if kind in (Kind.RUNTIME, Kind.SAMPLE) or (ev_["device"][i] < 0 and kind == Kind.KERNEL):
            at = int(ev_["end"][i]) - 1 if kind == Kind.SAMPLE else int(ev_["start"][i])
            assert tl.parent[i] == _innermost(spans.get(tid, spans[1]), at)
    for i in np.flatnonzero((ev_["kind"] == Kind.KERNEL) & (ev_["device"] >= 0)).tolist():
        assert tl.parent[i] == tl.parent[first_call[int(ev_["corr"][i])]]
