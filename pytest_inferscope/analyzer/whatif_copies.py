"""The transfer what-if (transfer_bound): copies pinned, their calls asynchronous, uploads prefetched.

Its transformation of a round graph (graph.py), copied on write (edits.Edit); whatif.py lists it with the
other what-ifs. Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

from ..events import CopyKind
from .edits import Edit, unblock
from .graph import BLOCKING, CALL, CALLS, EXTERNAL, HOST_LINK, MEMCPY, HostNode, RoundGraph

#: Pinned copies reach this share of the link's peak (docs/architecture.md, "Transfers and the link").
PINNED_EFFICIENCY = 0.8


def pinned_copies(g: RoundGraph) -> RoundGraph | None:
    """Copies at the pinned rate, their calls asynchronous, uploads prefetched on a copy stream."""
    link = g.link_gb_s * PINNED_EFFICIENCY  # bytes per ns
    hits = [j for j, o in enumerate(g.ops) if o.kind == MEMCPY and o.copy in HOST_LINK]  # copy_is_host_link
    if not hits or link <= 0:
        return None
    out = Edit(g)
    launch, changing = _issuing(g, set(hits))
    launch.sort()
    cheap = launch[len(launch) // 2] if launch else 0
    moved = [j for j in hits if g.ops[j].copy == CopyKind.HTOD]
    for j in hits:
        if g.ops[j].nbytes:
            out.op(j).dur = min(g.ops[j].dur, round(g.ops[j].nbytes / link))
    gone = set(moved)
    followers: dict[int, list[int]] = {j: [] for j in moved}
    if gone:
        for k, o in enumerate(g.ops):
            if o.after in gone:
                followers[o.after].append(k)
    copy_stream: dict[int, int] = {}  # per device: the last upload on its copy stream
    for j in moved:
        o = out.op(j)
        for k in followers.get(j, []):  # the op that followed it on its stream now follows the one before it
            out.op(k).after = o.after
            followers.setdefault(o.after, []).append(k)
        o.stream = -(((o.stream >> 32) + 1) << 1)  # a copy stream of its own, per device
        o.after = copy_stream.get(o.stream, -1)
        o.start, o.lat, o.gap, o.floor = 0, 0, 0, 0
        copy_stream[o.stream] = j
    for i, n, copy_call in changing:
        if copy_call or (n.kind == BLOCKING and not n.sync):
            unblock(out, i, min(n.dur, cheap))
        if not gone.isdisjoint(n.ops):
            out.node(i).ops = [j for j in n.ops if j not in gone]
    edited = out.result()
    if edited is not None:
        edited.nodes.insert(0, HostNode(EXTERNAL, 0, 0, name="prefetch", ops=moved))
        edited.derived = None  # a node more: not a copy node for node
    return edited


def _issuing(g: RoundGraph, copies: set[int]) -> tuple[list[int], list[tuple[int, HostNode, bool]]]:
    """The lengths of the launch calls that are not copy calls (a copy call issued `copies` only), and the nodes
    `pinned_copies` may change: (index, node, whether a copy call) of the blocking calls and those that issued a
    copy. In one pass, the common case (a launch of no copy) first: a long round holds ~7,000 launches."""
    launch: list[int] = []
    changing = []
    for i, n in enumerate(g.nodes):
        if not n.ops:
            continue
        if copies.isdisjoint(n.ops):
            if n.kind == CALL:
                launch.append(n.dur)
            elif n.kind == BLOCKING:
                changing.append((i, n, False))
            continue
        copy_call = n.kind in CALLS and not n.sync and copies.issuperset(n.ops)
        if n.kind == CALL and not copy_call:
            launch.append(n.dur)
        changing.append((i, n, copy_call))
    return launch, changing
