"""The parts of `GpuView.summary` (the report's GPU summary) that read only arrays: per stream, the idle gaps
between work, the copies by direction. Out of context_gpu.py for its length; pure functions, nothing here prints
or writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..events import CopyKind, Kind, MemoryKind, copy_devices, peer_copies, unpack_copy_flags
from .base import _MB, distinct, union_ns


def streams(
    g: np.ndarray, all_busy_ns: int, n: int, per_round_ms: Callable[[float], float], wall_ns: int
) -> list[dict[str, Any]]:
    """Per stream of GPU records `g` (`n` rounds of `wall_ns` together): kernels, copies, busy time.
    `all_busy_ns`: the union of all of `g`, which is the one stream's when there is one (not found again)."""
    out = []
    key = (g["device"].astype(np.int64) << 32) | (g["stream"].astype(np.int64) & 0xFFFFFFFF)
    starts, ends, kinds = g["start"], g["end"], g["kind"]  # columns: no copy of whole records per stream
    keys = distinct(key).tolist()
    for k in keys:
        dev, stream = k >> 32, int(np.int32(np.uint32(k & 0xFFFFFFFF)))
        sel = key == k
        busy = all_busy_ns if len(keys) == 1 else union_ns(starts[sel], ends[sel])
        out.append(
            {
                "device": dev,
                "stream": stream,
                "kernels_per_round": float(np.count_nonzero(kinds[sel] == int(Kind.KERNEL))) / n,
                "copies_per_round": float(np.count_nonzero(kinds[sel] == int(Kind.MEMCPY))) / n,
                "busy_ms_per_round": per_round_ms(busy),
                "busy_share": busy / max(1, wall_ns),
            }
        )
    return out


def merged_busy(records: np.ndarray, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The busy intervals of GPU `records` (kernels, copies, memsets on any stream), merged; of one device when
    given."""
    starts, ends = records["start"], records["end"]  # columns: no copy of whole records
    if device is not None:
        mine = records["device"] == device
        starts, ends = starts[mine], ends[mine]
    if not len(starts):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = starts.argsort(kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)  # (np.ones' wrappers cost more than the work here)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    idx = new.nonzero()[0]
    return s[idx], np.concatenate((run_end[idx[1:] - 1], run_end[-1:]))


def gaps_between_work(records: np.ndarray, round_starts: np.ndarray | None) -> np.ndarray:
    """The idle gaps (ns) between merged busy intervals of one device inside the same round (`round_starts`:
    the rounds' starts, sorted): two GPUs' busy time merged would hide the one idle while the other works."""
    per_device = []
    devices = distinct(records["device"].astype(np.int64) + 1).tolist()  # device -1 (unknown) too
    for dev in devices:
        s, e = merged_busy(records, dev - 1 if len(devices) > 1 else None)  # one device: all the records
        gaps = s[1:] - e[:-1]
        if round_starts is not None and len(gaps):
            rid = round_starts.searchsorted(s, side="right") - 1
            gaps = gaps[rid[1:] == rid[:-1]]
        per_device.append(gaps[gaps > 0])
    return np.concatenate(per_device) if per_device else np.zeros(0, dtype=np.int64)


def copies_by_direction(cp: np.ndarray, n: int, per_round_ms: Callable[[float], float]) -> dict[str, dict[str, Any]]:
    """Copy records `cp` of `n` rounds by direction (peer copies by their devices): counts, sizes, times, memory."""
    copies: dict[str, dict[str, Any]] = {}
    if not len(cp):  # (most rounds copy nothing)
        return copies
    kind, src, dst = unpack_copy_flags(cp["flags"])
    h2d, d2h, d2d = kind == int(CopyKind.HTOD), kind == int(CopyKind.DTOH), kind == int(CopyKind.DTOD)
    for label, mask in (
        ("HtoD", h2d),
        ("DtoH", d2h),
        ("DtoD", d2d),
        ("other", ~(h2d | d2h | d2d) & ~peer_copies(cp["flags"])),
        *_peer_directions(cp),
    ):
        sel = cp.compress(mask)
        if not len(sel):
            continue
        host_side = np.where(kind[mask] == int(CopyKind.DTOH), dst[mask], src[mask])
        dur = float((sel["end"] - sel["start"]).sum())
        copies[label] = {
            "count_per_round": len(sel) / n,
            "mb_per_round": float(sel["value"].sum()) / _MB / n,
            "ms_per_round": per_round_ms(dur),
            "gb_per_s": float(sel["value"].sum()) / dur if dur else 0.0,
            "pageable_per_round": np.count_nonzero(host_side == int(MemoryKind.PAGEABLE)) / n,
            "pinned_per_round": np.count_nonzero(host_side == int(MemoryKind.PINNED)) / n,
        }
    return copies


def _peer_directions(cp: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The copies between two devices by direction and the device they ran on: ("PtoP 0→1 on GPU 0", mask)."""
    peer = peer_copies(cp["flags"])
    if not peer.any():
        return []
    src, dst = copy_devices(cp["flags"])
    keys = {(int(s), int(d), int(on)) for s, d, on in zip(src[peer], dst[peer], cp["device"][peer], strict=True)}
    return [
        (f"PtoP {s}\u2192{d} on GPU {on}", peer & (src == s) & (dst == d) & (cp["device"] == on))
        for s, d, on in sorted(keys)
    ]
