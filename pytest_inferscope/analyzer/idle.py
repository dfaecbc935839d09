"""GPU idle attribution: every interval a GPU sat idle inside a measured round, and why.

HolisticTraceAnalysis's idle-time breakdown is the reference (host wait, kernel wait, other);
this module adds the synchronisation that HTA folds into "host wait", and the plugin's own
end-of-round synchronize. For each device, the GPU work of each measured round (kernels,
copies, memsets on any stream) is merged into busy runs; the idle intervals are the gaps
between runs, the lead-in from the round's start to its first run, and the tail from its last
run to the round's end. An interval [a, b) is attributed to one cause:

- ``launch_gap``: the work after it was already queued (its launch call started before `a`,
  when the GPU went idle) and the gap is shorter than `launch_gap_ns` (30 µs by default):
  the cost of starting consecutive work, HTA's "kernel wait".
- ``other``: queued work that still started `launch_gap_ns` or more after `a` (cross-stream
  events, dependencies), or work whose launch call was not recorded.
- ``sync_stall``: the next work was launched after `a`, and at `a` the test thread was blocked
  in a synchronisation it asked for (a runtime/driver ``*Synchronize`` call, a blocking copy):
  the host waited for the GPU to drain, then the GPU waited for the host to launch again.
- ``round_end``: at `a` the host was in the plugin's own end-of-round synchronize (a WAIT span,
  collectors/__init__.py `_end_round`): not the user's code.
- ``host_wait``: anything else where the host had not launched the next work: the CPU is the
  bottleneck (Python, data preparation, launch overhead). A round's lead-in is always host
  wait, and so is its tail unless the host was in the end-of-round synchronize.
- ``peer_wait``: what would be ``other`` on a device that was waiting for another GPU: the work
  after the gap is a peer copy to or from another device (queued on this device behind that
  device's event), or it started within `launch_gap_ns` of a peer copy from another device into
  this one arriving (torch runs a cross-device copy on the source's stream and makes the
  destination's stream wait for it). `IdleGaps.peer` names the other device. A gap whose next work
  was launched late stays ``host_wait``: the host, not the other GPU, held it back.

`IdleGaps` is plain arrays on the merged timeline's clock (the one the timeline's events are
on), so a reporter can shade the intervals: `rows()` gives (start_ns, end_ns, cause) tuples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caching import cached_property
from ..events import GPU_KINDS, Kind, copy_devices, kind_table, peer_copies
from .base import distinct

#: The causes, in the order of their codes in `IdleGaps.cause`.
CAUSES = ("host_wait", "launch_gap", "sync_stall", "round_end", "other", "peer_wait")
HOST_WAIT, LAUNCH_GAP, SYNC_STALL, ROUND_END, OTHER, PEER_WAIT = range(len(CAUSES))
#: Slack for comparing host times with GPU times (the clock fit's residual is a few µs at most).
CLOCK_SLACK_NS = 2_000
#: Whether a kind is GPU work, indexed by kind (a table lookup: np.isin costs ~10x more).
_GPU = kind_table(GPU_KINDS)


@dataclass(frozen=True)
class IdleGaps:
    """GPU idle intervals of the measured rounds, one row per interval, in time order per device.

    `start_ns`/`end_ns`: int64, the merged timeline's clock; `cause`: uint8 codes into `CAUSES`;
    `device`: the CUDA device; `blocked_ns`: for a sync stall, how long the host had been blocked
    in the synchronisation when the GPU went idle (0 for the other causes); `peer`: for a peer wait,
    the device it waited for (-1 for the other causes).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: np.ndarray
    device: np.ndarray
    blocked_ns: np.ndarray
    peer: np.ndarray

    def __len__(self) -> int:
        return len(self.start_ns)

    def rows(self) -> list[tuple[int, int, str]]:
        """(start_ns, end_ns, cause name) per interval: what a timeline view shades."""
        return [
            (int(s), int(e), CAUSES[c])
            for s, e, c in zip(self.start_ns.tolist(), self.end_ns.tolist(), self.cause.tolist(), strict=True)
        ]

    def mask(self, cause: str) -> np.ndarray:
        return self.cause == CAUSES.index(cause)

    def total_ns(self, cause: str | None = None) -> int:
        """Idle ns of one cause (all causes when None), summed over devices."""
        return sum(self._totals) if cause is None else self._totals[CAUSES.index(cause)]

    @cached_property
    def _totals(self) -> list[int]:
        """Idle ns by cause (in `CAUSES` order), found once: the analysis asks for them ~20 times a test."""
        totals = np.zeros(len(CAUSES), dtype=np.int64)
        np.add.at(totals, self.cause.astype(np.intp), self.end_ns - self.start_ns)
        return [int(x) for x in totals.tolist()]

    def totals_ns(self) -> dict[str, int]:
        return {c: self.total_ns(c) for c in CAUSES}

    def peer_waits(self) -> dict[tuple[int, int], int]:
        """Peer-wait ns by (idle device, the device it waited for)."""
        sel = self.mask("peer_wait")
        out: dict[tuple[int, int], int] = {}
        for d, p, ns in zip(
            self.device[sel].tolist(), self.peer[sel].tolist(), (self.end_ns - self.start_ns)[sel].tolist(), strict=True
        ):
            out[(d, p)] = out.get((d, p), 0) + ns
        return out

    def turn_taking_ns(self) -> int:
        """Time lost to host and GPU taking turns around synchronisations: each sync stall, plus as much
        of the host's blocked time before it as the stall lasted (what could have overlapped)."""
        sel = self.mask("sync_stall")
        gap = self.end_ns[sel] - self.start_ns[sel]
        return int(np.sum(gap + np.minimum(gap, self.blocked_ns[sel])))


def no_gaps() -> IdleGaps:
    """The attribution of a timeline with no GPU work: no idle interval."""
    z = np.zeros(0, dtype=np.int64)
    d = np.zeros(0, dtype=np.int16)
    return IdleGaps(z, z.copy(), np.zeros(0, dtype=np.uint8), d, z.copy(), d.copy())


def _covering(spans_s: np.ndarray, spans_e: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each instant: whether a span contains it, and that span's start (the earliest such start)."""
    if not len(spans_s) or not len(at):
        return np.zeros(len(at), dtype=bool), np.zeros(len(at), dtype=np.int64)
    if len(spans_s) == 1:  # one span (a lean test's end-of-round wait): no runs to follow
        s0 = spans_s[0]
        return (s0 <= at + CLOCK_SLACK_NS) & (spans_e[0] >= at - CLOCK_SLACK_NS), np.full(len(at), s0)
    order = spans_s.argsort(kind="stable")
    s, e = spans_s[order], spans_e[order]
    run_end = np.maximum.accumulate(e)
    arg = np.zeros(len(e), dtype=np.int64)  # index of the span that holds run_end so far
    best = np.concatenate(([True], e[1:] > run_end[:-1])).nonzero()[0]
    arg[best] = best
    arg = np.maximum.accumulate(arg)
    k = s.searchsorted(at + CLOCK_SLACK_NS, side="right") - 1
    ok = k >= 0
    kk = np.maximum(k, 0)
    covered = ok & (run_end[kk] >= at - CLOCK_SLACK_NS)
    return covered, s[arg[kk]]


def _device_gaps(
    g_start: np.ndarray, g_end: np.ndarray, r_start: np.ndarray, r_end: np.ndarray
) -> tuple[np.ndarray, ...]:
    """One device's idle intervals in the rounds (`g_start`, `g_end`: its records by start), and the record
    after each (-1: none).

    Lead-in, between the runs of busy records of a round, and the tail; and rounds in which it did nothing.
    """
    if len(r_start) == 1:
        return _one_round_gaps(g_start, g_end, int(r_start[0]), int(r_end[0]))
    # (np.minimum of np.maximum: np.clip's wrappers cost 8 against 2 µs)
    rid = np.minimum(np.maximum(r_start.searchsorted(g_start, side="right") - 1, 0), len(r_start) - 1)
    run_end = np.maximum.accumulate(g_end)
    new = np.ones(len(g_start), dtype=bool)
    new[1:] = (g_start[1:] > run_end[:-1]) | (rid[1:] != rid[:-1])
    first = new.nonzero()[0]
    run_s, run_rid = g_start[first], rid[first]
    # The run's end: the latest end among its own records (not an earlier round's).
    run_e = np.maximum.reduceat(g_end, first)
    # Idle intervals: lead-in, between runs of a round, tail. `nxt` is the record after the gap (-1: none).
    lead = np.ones(len(first), dtype=bool)
    lead[1:] = run_rid[1:] != run_rid[:-1]
    tail = np.ones(len(first), dtype=bool)
    tail[:-1] = run_rid[1:] != run_rid[:-1]
    a = np.concatenate((r_start[run_rid[lead]], run_e[~tail], run_e[tail]))
    b = np.concatenate((run_s[lead], run_s[(~tail).nonzero()[0] + 1], r_end[run_rid[tail]]))
    nxt = np.concatenate((first[lead], first[(~tail).nonzero()[0] + 1], np.full(int(tail.sum()), -1)))
    # Rounds in which this device did nothing at all: idle throughout, the host launched nothing.
    busy = np.zeros(len(r_start), dtype=bool)
    busy[run_rid] = True
    empty = (~busy).nonzero()[0]
    a = np.concatenate((a, r_start[empty]))
    b = np.concatenate((b, r_end[empty]))
    nxt = np.concatenate((nxt, np.full(len(empty), -1)))
    keep = b > a
    return a[keep], b[keep], nxt[keep]


def _one_round_gaps(g_start: np.ndarray, g_end: np.ndarray, r0: int, r1: int) -> tuple[np.ndarray, ...]:
    """`_device_gaps` in one round [r0, r1) (a lean test's API round, its profile round): the same intervals, in
    the same order, without the rounds' bookkeeping (~15 array operations of ~2 µs on a few hundred records)."""
    run_end = np.maximum.accumulate(g_end)
    new = np.empty(len(g_start), dtype=bool)
    new[0] = True
    np.greater(g_start[1:], run_end[:-1], out=new[1:])
    first = new.nonzero()[0]
    a = np.concatenate(((r0,), np.maximum.reduceat(g_end, first)))
    b = np.concatenate((g_start[first], (r1,)))
    nxt = np.concatenate((first, (-1,)))
    keep = b > a
    return a[keep], b[keep], nxt[keep]


class _PeerCopies:
    """The rounds' copies between two known devices, for telling a gap that waited for another GPU."""

    def __init__(self, events: np.ndarray, gpu: np.ndarray) -> None:
        cp = gpu[events["kind"][gpu] == int(Kind.MEMCPY)]
        if len(cp):  # (most rounds copy nothing: their flags need no unpacking)
            cp = cp[peer_copies(events["flags"][cp])]
        self.src, self.dst = copy_devices(events["flags"][cp])
        self.end = events["end"][cp]
        self.lane = events["device"][cp]

    @staticmethod
    def other_device(copy_flags: np.ndarray, dev: int) -> np.ndarray:
        """For each copy's flags (0: none): the device other than `dev` it copies from or to (-1: not a peer copy)."""
        src, dst = copy_devices(copy_flags)
        return np.where(peer_copies(copy_flags), np.where(src != dev, src, dst), -1).astype(np.int16)

    def arrived(self, dev: int, a: np.ndarray, b: np.ndarray, window_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """For each gap [a, b) of `dev`: the device whose copy into `dev`, run on another lane, ended inside the gap
        and within `window_ns` before its end (-1: none), and when that copy ended."""
        sel = (self.dst == dev) & (self.src != dev) & (self.lane != dev)
        if not sel.any() or not len(a):
            return np.full(len(a), -1, dtype=np.int16), b
        order = self.end[sel].argsort(kind="stable")
        end, src = self.end[sel][order], self.src[sel][order]
        k = end.searchsorted(b + CLOCK_SLACK_NS, side="right") - 1
        kk = np.maximum(k, 0)
        ok = (k >= 0) & (end[kk] > a - CLOCK_SLACK_NS) & (b - end[kk] <= window_ns + CLOCK_SLACK_NS)
        return np.where(ok, src[kk], -1).astype(np.int16), np.where(ok, end[kk], b)


def _gpu_work(
    events: np.ndarray, in_rounds: np.ndarray, round_idx: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The GPU records inside the rounds (`in_rounds`), and the rounds' starts and ends by start; None without
    either."""
    starts, ends = events["start"], events["end"]
    gpu_mask = _GPU[events["kind"]] & in_rounds
    if not gpu_mask.any() or not len(round_idx):
        return None
    r_order = starts[round_idx].argsort(kind="stable")
    return gpu_mask.nonzero()[0], starts[round_idx][r_order], ends[round_idx][r_order]


def _per_device(events: np.ndarray, gpu: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Each device among GPU records `gpu`, with its records by start."""
    starts, gpu_dev = events["start"], events["device"][gpu]
    out = []
    for dev in distinct(gpu_dev).tolist():
        g = gpu[gpu_dev == dev]
        g_start = starts[g]
        if len(g) > 1 and (g_start[1:] < g_start[:-1]).any():  # a merged timeline is in order already
            g = g[g_start.argsort(kind="stable")]
        out.append((dev, g))
    return out


def idle_total_ns(events: np.ndarray, in_rounds: np.ndarray, round_idx: np.ndarray) -> int:
    """`attribute_idle(events, in_rounds, round_idx, ...).total_ns()`: the idle intervals' summed length, which
    their causes do not change. What `GpuView.idle_scale` reads of the GPU rounds when they are not the API rounds;
    attributing their causes there too cost ~0.3 ms a ViT-B/16 test on the 2-core dev VM (2026-11-28)."""
    work = _gpu_work(events, in_rounds, round_idx)
    if work is None:
        return 0
    gpu, r_start, r_end = work
    total = 0
    for _, g in _per_device(events, gpu):
        a, b, _ = _device_gaps(events["start"][g], events["end"][g], r_start, r_end)
        total += int((b - a).sum())
    return total


def attribute_idle(
    events: np.ndarray,
    in_rounds: np.ndarray,
    round_idx: np.ndarray,
    sync_idx: np.ndarray,
    launch_gap_ns: int,
) -> IdleGaps:
    """The idle intervals of every device in the measured rounds, each with its cause.

    `events`: the merged timeline's events; `in_rounds`: mask of events inside measured rounds;
    `round_idx`: the measured ROUND spans; `sync_idx`: the user's blocking calls (synchronisations,
    blocking copies; not the plugin's own end-of-round synchronize, which is found as WAIT spans).
    """
    kind, corr = events["kind"], events["corr"]
    starts, ends = events["start"], events["end"]
    work = _gpu_work(events, in_rounds, round_idx)
    if work is None:
        return no_gaps()
    gpu, r_start, r_end = work
    # Launch call of each GPU record, by correlation id (host RUNTIME records carry the same id).
    rt = ((kind == int(Kind.RUNTIME)) & (corr > 0)).nonzero()[0]
    rt = rt[corr[rt].argsort(kind="stable")]
    rt_corr, rt_start = corr[rt], starts[rt]
    waits = ((kind == int(Kind.WAIT)) & in_rounds).nonzero()[0]
    w_start, w_end = starts[waits], ends[waits]
    s_start, s_end = starts[sync_idx], ends[sync_idx]
    peers = _PeerCopies(events, gpu)
    out: list[tuple[np.ndarray, ...]] = []
    for dev, g in _per_device(events, gpu):
        g_corr = corr[g]
        a, b, nxt = _device_gaps(starts[g], ends[g], r_start, r_end)
        cause = np.full(len(a), HOST_WAIT, dtype=np.uint8)
        has_next = nxt >= 0
        # When was the next record launched?
        nc = np.where(has_next, g_corr[np.maximum(nxt, 0)], 0)
        k = rt_corr.searchsorted(nc)
        known = has_next & (nc > 0) & (k < len(rt))
        known[known] = rt_corr[k[known]] == nc[known]
        launch = np.where(known, rt_start[np.minimum(k, max(len(rt) - 1, 0))] if len(rt) else 0, 0)
        queued = known & (launch + CLOCK_SLACK_NS < a)
        in_wait, _ = _covering(w_start, w_end, a)
        in_sync, sync_start = _covering(s_start, s_end, a)
        late = ~queued
        cause[late & in_wait] = ROUND_END
        cause[late & ~in_wait & in_sync & has_next] = SYNC_STALL
        cause[has_next & ~known & ~(in_sync | in_wait)] = OTHER
        cause[queued] = np.where((b - a)[queued] < launch_gap_ns, LAUNCH_GAP, OTHER)
        blocked = np.where(cause == SYNC_STALL, np.maximum(0, a - sync_start), 0)
        peer = np.full(len(a), -1, dtype=np.int16)
        if len(peers.end):
            after = g[np.maximum(nxt, 0)]
            nxt_copy = np.where(has_next & (kind[after] == int(Kind.MEMCPY)), events["flags"][after], 0)
            cause, peer = _peer_wait(peers, dev, cause, (a, b), nxt_copy, (known, launch), launch_gap_ns)
        out.append((a, b, cause, np.full(len(a), dev, dtype=np.int16), blocked, peer))
    if not out:
        return no_gaps()
    if len(out) == 1 and not (out[0][0][1:] < out[0][0][:-1]).any():
        a, b, c, d, blk, p = out[0]  # one device's gaps, in order already (the stable sort's identity)
    else:
        a, b, c, d, blk, p = (np.concatenate(x) for x in zip(*out, strict=True))
        order = np.lexsort((a, d))
        a, b, c, d, blk, p = a[order], b[order], c[order], d[order], blk[order], p[order]
    return IdleGaps(
        a.astype(np.int64),
        b.astype(np.int64),
        c.astype(np.uint8),
        d.astype(np.int16),
        blk.astype(np.int64),
        p.astype(np.int16),
    )


def _peer_wait(
    peers: _PeerCopies,
    dev: int,
    cause: np.ndarray,
    gap: tuple[np.ndarray, np.ndarray],
    nxt_copy: np.ndarray,
    launch: tuple[np.ndarray, np.ndarray],
    window_ns: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of `dev` that waited for another GPU, and which (see the module's docstring).

    `gap`: the gaps' (start, end); `nxt_copy`: the flags of the copy after each gap (0: no copy after it);
    `launch`: whether the next record's launch call is known, and when it started. A gap that would be
    ``other`` qualifies; so does a ``host_wait`` whose next work was launched before what it waited for arrived
    (a peer copy into `dev`: its end; the peer copy after the gap: `window_ns` before it started), since the
    work would have waited for the other GPU however early the host had launched it.
    """
    a, b = gap
    known, at = launch
    other = peers.other_device(nxt_copy, dev)
    arrived, when = peers.arrived(dev, a, b, window_ns)
    when = np.where(other >= 0, b - window_ns, when)
    other = np.where(other >= 0, other, arrived)
    waited = (other >= 0) & ((cause == OTHER) | ((cause == HOST_WAIT) & known & (at + CLOCK_SLACK_NS < when)))
    cause = np.where(waited, PEER_WAIT, cause).astype(np.uint8)
    return cause, np.where(waited, other, -1).astype(np.int16)
