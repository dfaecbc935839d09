"""The transfer what-if (transfer_bound): copies pinned, their calls asynchronous, uploads prefetched.

Its transformation of a round graph's columns (columns.Flat, replayed as edits.ArrayTransform); whatif.py
lists it with the other what-ifs. Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import numpy as np

from ..events import CopyKind, unique
from .base import member
from .columns import K_BLOCKING, K_CALL, K_EXTERNAL, Flat, issued
from .edits import ArrayTransform
from .graph import HOST_LINK, MEMCPY

#: Pinned copies reach this share of the link's peak (docs/architecture.md, "Transfers and the link").
PINNED_EFFICIENCY = 0.8
#: graph.HOST_LINK as an array, for base.member (np.isin, whose wrappers cost ~28 µs a call, three a what-if).
_HOST_LINK = np.array([int(k) for k in HOST_LINK], dtype=np.int64)


def pinned_arrays(f: Flat) -> Flat | None:
    """Copies at the pinned rate, their calls asynchronous, uploads prefetched on a copy stream: the copy
    calls and the blocking calls other than synchronisations wait for nothing and cost at most the median
    launch call; the uploads are issued from the round's start by a node put first ("prefetch")."""
    assert f.op_copy is not None and f.op_nbytes is not None and f.op_stream is not None
    link = f.link_gb_s * PINNED_EFFICIENCY  # bytes per ns
    is_copy = (f.op_kind == MEMCPY) & member(f.op_copy, _HOST_LINK)  # graph.copy_is_host_link
    hits = is_copy.nonzero()[0]
    if not len(hits) or link <= 0:
        return None
    unblock, cheap = _unblocked(f, is_copy)
    sized = hits[f.op_nbytes[hits] != 0]
    moved = hits[f.op_copy[hits] == int(CopyKind.HTOD)].tolist()
    if not len(sized) and not moved and not unblock.any():
        return None
    op_dur = f.op_dur.copy()
    op_dur[sized] = np.minimum(f.op_dur[sized], np.round(f.op_nbytes[sized] / link))
    after, stream, start, lat, gap, floor = _uploads_moved(f, moved)
    dur = np.where(unblock, np.minimum(f.dur, cheap), f.dur)
    kinds = np.where(unblock, K_CALL, f.kind).astype(f.kind.dtype)
    waits = [[], *f.waits]
    for i in unblock.nonzero()[0].tolist():
        waits[i + 1] = []
    node_ops, issue = _ops_moved(f, moved)
    return f.changed(  # the prefetch node first: every node one further on
        kind=np.concatenate([np.array([K_EXTERNAL], dtype=kinds.dtype), kinds]),
        dur=np.concatenate([np.zeros(1, dtype=dur.dtype), dur]),
        node_ops=node_ops,
        waits=waits,
        node_start=None if f.node_start is None else np.concatenate([[0], f.node_start]).astype(np.int64),
        node_name=["prefetch", *f.node_name],
        node_sync=["", *f.node_sync],
        modules=f.modules.shifted(1),
        other={i + 1: k for i, k in f.other.items()},
        op_dur=op_dur,
        op_after=after,
        op_stream=stream,
        op_start=start,
        op_lat=lat,
        op_gap=gap,
        op_floor=floor,
        issue=issue,
    )


def _ops_moved(f: Flat, moved: list[int]) -> tuple[list[list[int]], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each node's ops (the prefetch node first, issuing the uploads `moved`; the others without them), and
    `columns.issued` of them."""
    counts, issuer, placed = issued(f)
    node_ops = [moved, *f.node_ops]
    keep = ~member(placed, np.array(moved, dtype=np.int64))
    gone = set(moved)
    for i in unique(issuer[~keep]).tolist():
        node_ops[i + 1] = [j for j in f.node_ops[i] if j not in gone]
    counts = np.concatenate([[len(moved)], np.bincount(issuer[keep], minlength=len(counts))]).astype(np.int64)
    issuer = np.concatenate([np.zeros(len(moved), dtype=np.int64), issuer[keep] + 1])
    return node_ops, (counts, issuer, np.concatenate([np.array(moved, dtype=np.int64), placed[keep]]))


def _unblocked(f: Flat, is_copy: np.ndarray) -> tuple[np.ndarray, int]:
    """The nodes the copies' calls and blocking calls become asynchronous at: the copy calls (calls that issued
    copies only) and the blocking calls that are not synchronisations; and the median launch call's length
    (of the calls that issued something other than a copy), which they cost at most."""
    counts, issuer, placed = issued(f)
    copies = np.bincount(issuer[is_copy[placed]], minlength=len(counts))
    calls = (f.kind == K_CALL) | (f.kind == K_BLOCKING)
    asked = ((counts > 0) & ((copies > 0) | (f.kind == K_BLOCKING))).nonzero()[0].tolist()
    no_sync = np.zeros(len(counts), dtype=bool)
    no_sync[asked] = [not f.node_sync[i] for i in asked]
    copy_call = calls & no_sync & (copies == counts) & (copies > 0)
    launch = np.sort(f.dur[(counts > 0) & (f.kind == K_CALL) & ~copy_call])
    cheap = launch[len(launch) // 2].item() if len(launch) else 0
    unblock = (counts > 0) & (copy_call | ((f.kind == K_BLOCKING) & no_sync))
    return unblock, cheap


def _uploads_moved(f: Flat, moved: list[int]) -> tuple[np.ndarray, ...]:
    """The ops' after, stream, start, lat, gap and floor with the uploads `moved` on a copy stream of their
    device's own, issued at the round's start, each following the one before it there; the op that followed
    one on its stream now follows the op that one followed."""
    assert f.op_stream is not None
    after, stream = f.op_after.copy(), f.op_stream.copy()
    start, lat, gap, floor = f.op_start.copy(), f.op_lat.copy(), f.op_gap.copy(), f.op_floor.copy()
    followers: dict[int, list[int]] = {j: [] for j in moved}
    for k in member(f.op_after, np.array(moved, dtype=np.int64)).nonzero()[0].tolist() if moved else []:
        followers[int(f.op_after[k])].append(k)
    copy_stream: dict[int, int] = {}  # per device: the last upload on its copy stream
    for j in moved:
        before = int(after[j])
        for k in followers.get(j, []):
            after[k] = before
            followers.setdefault(before, []).append(k)
        key = -(((int(stream[j]) >> 32) + 1) << 1)
        stream[j], after[j] = key, copy_stream.get(key, -1)
        start[j] = lat[j] = gap[j] = floor[j] = 0
        copy_stream[key] = j
    return after, stream, start, lat, gap, floor


pinned_copies = ArrayTransform(pinned_arrays)
