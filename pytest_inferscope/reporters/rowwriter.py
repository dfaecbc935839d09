"""The vectorised row writer behind trace.json: many rows of one JSON template, formatted at once.

A row is a byte template with '#' marks for numbers, followed by a variable tail (the name, the
args) looked up by a key. `emit` fills the numbers of every row with numpy and writes the rows in
blocks to a `Sink` (the file, or the trace writer's background thread); a few rows go through
plain Python instead (`SMALL_ROWS`), where numpy's per-call cost would dominate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ..events import unique

#: Rows formatted per numpy pass: small enough to pipeline with the writer thread, large enough
#: that numpy's per-call overhead does not matter.
CHUNK = 150_000
#: Up to this many rows of one kind are formatted one by one in Python, not with numpy.
SMALL_ROWS = 48
_STRIDE_MOD = 144  # in uint32 units: 9 cache lines; see _format

# A column is (values, milli): milli=True prints value / 1000 with three decimals (ns -> us).
Column = tuple[np.ndarray, bool]
Piece = bytes | Column
Tail = Callable[[int], bytes]


class Sink(Protocol):
    """Where formatted blocks go."""

    def write(self, block: Any) -> None: ...


# ---- the vectorised row writer -------------------------------------------------------------
#
# Rows are built four bytes at a time: the fixed part of n rows is a (units, n) array of
# little-endian uint32, one line per 4-byte unit, filled line by line and transposed once on the
# way out. Numbers start on a unit boundary (spaces before them) and are written four digits per
# table look-up; templates and tails are padded with spaces to whole units. JSON allows all
# those spaces: they only ever stand after ':' or ',' or before the next row.

_U4 = np.dtype("<u4")


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """Look-up tables: 4 characters per uint32 for 0..9999 (zero-padded | leading group | last
    group), and '.' plus 3 digits for 0..999."""
    r = np.arange(10000)
    zero = (np.stack([r // 1000, r // 100 % 10, r // 10 % 10, r % 10], axis=1) + 48).astype(np.uint8)
    ndigits = 1 + (r >= 10).astype(int) + (r >= 100) + (r >= 1000)
    last = zero.copy()
    last[np.arange(4)[None, :] < (4 - ndigits)[:, None]] = ord(" ")
    leading = last.copy()
    leading[0] = ord(" ")  # nothing left to print in a group to the left of the last one
    groups = np.concatenate([zero, leading, last]).view(_U4).reshape(-1)
    frac = np.concatenate([np.full((1000, 1), ord("."), np.uint8), zero[:1000, 1:]], axis=1)
    return groups, frac.view(_U4).reshape(-1)


_GROUPS, _FRAC = _tables()


def emit(f: Sink, n: int, pieces: Sequence[Piece], key: np.ndarray | None, tail_of: Tail | None) -> int:
    """Write n rows: the pieces in order, then `tail_of(key[i])` if given."""
    if n == 0:
        return 0
    if n <= SMALL_ROWS:
        return _emit_small(f, n, pieces, key, tail_of)
    tables: dict[int, np.ndarray] = {}
    if key is not None and tail_of is not None:
        # Tails are built once per distinct key actually used, not per row and not per string.
        used = np.flatnonzero(np.bincount(key))
        compact = np.zeros(int(used[-1]) + 1, dtype=np.intp)
        compact[used] = np.arange(len(used))
        tails = [t + b" " * (-len(t) % 4) for t in map(tail_of, used.tolist())]
        lengths = np.fromiter(map(len, tails), dtype=np.int64, count=len(tails)) // 4
        # One table per tail length; `local` is a tail's row in the table of its length.
        local = np.zeros(len(tails), dtype=np.intp)
        for units in unique(lengths).tolist():
            ids = np.flatnonzero(lengths == units)
            local[ids] = np.arange(len(ids))
            tables[units] = np.frombuffer(b"".join(tails[i] for i in ids.tolist()), _U4).reshape(len(ids), units)
        key = compact[key]
        row_len = lengths[key]
        if len(tables) > 1:
            # Rows with the same tail length are written as one block, so bring them together.
            order = np.argsort(row_len.astype(np.uint16) if lengths.max() < 1 << 16 else row_len, kind="stable")
            pieces = _pick(pieces, order)
            key, row_len = key[order], row_len[order]
        key = local[key]
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        fixed = _format(_pick(pieces, slice(a, b)), b - a)
        if key is None:
            f.write(np.ascontiguousarray(fixed.T).data)
            continue
        lens = row_len[a:b]
        cuts = (np.flatnonzero(np.diff(lens)) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, b - a], strict=True):
            tail = tables[int(lens[lo])][key[a + lo : a + hi]]
            # One copy does both jobs: transposes the fixed part to rows and appends the tails.
            f.write(np.concatenate((fixed[:, lo:hi].T, tail), axis=1).data)
    return n


def _emit_small(f: Sink, n: int, pieces: Sequence[Piece], key: np.ndarray | None, tail_of: Tail | None) -> int:
    """`emit` for a few rows, one Python row at a time: numpy's per-call cost would dominate."""
    columns = [p if isinstance(p, bytes) else (p[0].tolist(), p[1]) for p in pieces]
    tails: dict[int, bytes] = {}
    keys: list[int] = []
    if key is not None and tail_of is not None:
        keys = key.tolist()
        tails = {k: tail_of(k) for k in sorted(set(keys))}  # in _emit's order: frame ids come out the same
    rows = []
    for i in range(n):
        row = [p if isinstance(p, bytes) else _py_number(p[0][i], p[1]) for p in columns]
        if keys:
            row.append(tails[keys[i]])
        rows.append(b"".join(row))
    f.write(b"".join(rows))
    return n


def _pick(pieces: Sequence[Piece], index: slice | np.ndarray) -> list[Piece]:
    """`pieces` with each column indexed by `index`, once per column: a column used twice stays
    one object, which `_format` then formats once."""
    done: dict[int, np.ndarray] = {}
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, bytes):
            out.append(p)
            continue
        if id(p[0]) not in done:
            done[id(p[0])] = p[0][index]
        out.append((done[id(p[0])], p[1]))
    return out


def _format(pieces: Sequence[Piece], n: int) -> np.ndarray:
    """The fixed part of n rows as a (units, n) uint32 array whose column i is row i."""
    template = bytearray()
    fields: list[tuple[int, int, np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    seen: dict[tuple[int, bool], bytes | tuple[int, int]] = {}  # column -> its literal, or (unit, units)
    copies: list[tuple[int, int, int]] = []  # (to unit, from unit, units): a column printed again
    for p in pieces:
        if isinstance(p, bytes):
            template += p
            continue
        values, milli = p
        again = seen.get((id(values), milli))
        if isinstance(again, bytes):
            template += again
            continue
        if again is not None:
            template += b" " * (-len(template) % 4)
            copies.append((len(template) // 4, *again))
            template += b" " * (4 * again[1])
            continue
        values = values.astype(np.int64, copy=False)
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:  # the same in every row: a literal
            literal = seen[(id(p[0]), milli)] = _py_number(lo, milli)
            template += literal
            continue
        template += b" " * (-len(template) % 4)
        neg = values < 0 if lo < 0 else None
        mag = np.abs(values) if neg is not None else values
        frac = None
        if milli:
            mag, frac = _div1000(mag)
        groups = -(-(len(str(int(mag.max()))) + (neg is not None)) // 4)
        fields.append((len(template) // 4, groups, mag, frac, neg))
        seen[(id(p[0]), milli)] = (len(template) // 4, groups + milli)
        template += b" " * (4 * groups) + (b".000" if milli else b"")
    template += b" " * (-len(template) % 4)
    units = len(template) // 4
    # The line stride is kept off multiples of 4 KiB: the transposing copy runs several times
    # slower when all lines of a column fall into the same cache sets.
    stride = n + (_STRIDE_MOD - n) % 1024
    out = np.empty((units, stride), dtype=_U4)[:, :n]
    out[:] = np.frombuffer(bytes(template), dtype=_U4)[:, None]
    for unit, groups, mag, frac, neg in fields:
        # uint32 division by a constant is vectorised by numpy; int64 division is far slower.
        v = mag.astype(np.uint32) if int(mag.max()) < 1 << 32 else mag.astype(np.uint64)
        q = np.empty_like(v)
        for k in range(groups):
            np.floor_divide(v, 10000, out=q)
            lead = (q == 0).astype(v.dtype)  # the group holding the number's first digit
            lead *= 20000 if k == 0 else 10000
            idx = v - q * 10000 + lead
            np.take(_GROUPS, idx, out=out[unit + groups - 1 - k], mode="clip")
            v, q = q, v
        if frac is not None:
            np.take(_FRAC, frac, out=out[unit + groups], mode="clip")
        if neg is not None:
            rows = np.flatnonzero(neg)
            ndigits = np.searchsorted(10 ** np.arange(1, 19, dtype=np.int64), mag[rows], side="right") + 1
            pos = 4 * (unit + groups) - 1 - ndigits  # byte of the '-' in the row
            out.view(np.uint8)[pos // 4, 4 * rows + pos % 4] = ord("-")
    for to, src, n_units in copies:
        out[to : to + n_units] = out[src : src + n_units]
    return out


def _div1000(mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mag // 1000, mag % 1000) for mag >= 0, through float64: int64 division is slow in numpy."""
    if int(mag.max()) >= 1 << 52:
        return mag // 1000, mag % 1000
    whole = (mag * 1e-3).astype(np.int64)
    frac = mag - whole * 1000
    # The float quotient can be one off near a multiple of 1000; correct those rows.
    low, high = frac < 0, frac >= 1000
    if low.any() or high.any():
        whole += high.view(np.int8) - low.view(np.int8)
        frac = mag - whole * 1000
    return whole, frac


def _py_number(v: int, milli: bool) -> bytes:
    if not milli:
        return b"%d" % v
    sign, m = ("-" if v < 0 else ""), abs(v)
    return b"%s%d.%03d" % (sign.encode(), m // 1000, m % 1000)
