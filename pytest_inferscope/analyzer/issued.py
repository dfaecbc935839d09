"""What a blocking call waited for, from the ops issued before it (graph.py builds a round's host nodes with it)."""

from __future__ import annotations

import numpy as np

from .base import first_seen


class Issued:
    """The ops issued up to each host item, per stream in issue order, for what a blocking call waited for: on
    each stream (or only its own, for a stream synchronisation whose record names it), the op that ended last
    among the longest run of ops that had all finished when the call returned. One op per stream stands for the
    run: a stream runs its ops in order, so the others had finished before it (replay.py keeps that order).

    Ops are issued by host items (calls, waits) in order: op `op[i]` by item `item[i]`, the external ops first
    at each item; `op_streams` and `op_ends` are the ops' streams (graph.GpuOp.stream) and ends, by op."""

    def __init__(self, op_streams: np.ndarray, op_ends: np.ndarray, item: np.ndarray, op: np.ndarray) -> None:
        order = item.argsort(kind="stable")  # externals first at each item: they come first in `item`
        item, op = item[order], op[order]
        stream, end = op_streams[op].astype(np.int64), op_ends[op].astype(np.int64)
        # per stream, in issue order (streams by first issue): the item that issued each op, the latest end so
        # far, and the op holding it (the first to reach it)
        self.streams: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        keys = first_seen(stream)
        for key in keys:
            sel = (stream == key).nonzero()[0] if len(keys) > 1 else slice(None)  # one stream (most rounds): all
            s_end, s_op = end[sel], op[sel]
            ends = np.maximum.accumulate(s_end)
            rises = np.empty(len(s_end), dtype=bool)  # (np.ones' wrappers cost more than the work here)
            rises[0] = True
            np.greater(s_end[1:], ends[:-1], out=rises[1:])
            holder = s_op[np.maximum.accumulate(np.where(rises, np.arange(len(s_end)), 0))]
            self.streams.append((key, item[sel], ends, holder))

    def waited(self, ks: np.ndarray, at: np.ndarray, on: list[int | None]) -> list[list[int]]:
        """What each host item `ks[i]` (with its own ops issued) found finished at `at[i]`: on its stream `on[i]`
        alone (a stream synchronisation's; its low 32 bits, a CUDA stream's handle whatever the device) unless
        nothing is found there, then on every stream. Found for all of them at once, two searches a stream (a
        round of a per-step sync loop has hundreds of blocking calls; tests/unit/test_issued.py keeps the lookup
        one call at a time that this replaced)."""
        if not self.streams or not len(ks):
            return [[] for _ in range(len(ks))]
        found = []
        for _, items, ends, holder in self.streams:
            m = np.minimum(items.searchsorted(ks, side="right"), ends.searchsorted(at, side="right"))
            found.append(np.where(m > 0, holder[np.maximum(m, 1) - 1], -1))
        low = [key & 0xFFFFFFFF for key, *_ in self.streams]
        out = []
        for row, stream in zip(np.stack(found, axis=1).tolist(), on, strict=True):
            if stream is not None:
                mine = [h for h, key in zip(row, low, strict=True) if h >= 0 and key == stream & 0xFFFFFFFF]
                if mine:
                    out.append(mine)
                    continue
            out.append([h for h in row if h >= 0])
        return out
