"""A round graph's nodes and ops as columns (`Flat`): what the graph is built as, replayed and changed on.

`build.py` builds a round's graph as these columns; its `HostNode` and `GpuOp` objects (graph.py) are made
from them only when something asks for them (a what-if of the `pytest_inferscope_whatifs` hook, a test).
`flat.py` reads a graph written as objects into the same columns and compiles them for the array replay;
the built-in what-ifs change them (edits.py, whatif_copies.py). Plain data; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from itertools import chain
from typing import Any

import numpy as np

#: Node kinds.
SEGMENT, CALL, BLOCKING, EXTERNAL = "segment", "call", "blocking", "external"
#: Node kind codes; any other kind (K_OTHER) replays as a call.
K_SEGMENT, K_CALL, K_BLOCKING, K_EXTERNAL, K_OTHER = 0, 1, 2, 3, 4
#: The kind of each code (K_OTHER: the kind as written, kept in `Flat.other`).
KIND_OF = {K_SEGMENT: SEGMENT, K_CALL: CALL, K_BLOCKING: BLOCKING, K_EXTERNAL: EXTERNAL}


@dataclass
class Modules:
    """The Python modules sampled in the host segments, one entry per (segment, module): the node, the module
    (an index into `names`) and its sampled ns; by node, then in the order each module was first sampled
    there (`HostNode.modules`' order)."""

    node: np.ndarray
    module: np.ndarray
    ns: np.ndarray
    names: list[str]

    def shifted(self, by: int) -> Modules:
        """The same with every node index moved by `by` (nodes inserted before them)."""
        return Modules(self.node + by, self.module, self.ns, self.names)


def no_modules() -> Modules:
    empty = np.zeros(0, dtype=np.int64)
    return Modules(empty, empty, empty, [])


@dataclass
class Flat:
    """A graph's nodes and ops as arrays; `node_ops` and `waits` are per node, as in the graph.

    The replay reads the first thirteen; the rest are what the what-ifs read and what the node and op
    objects are made from (`patch` rereads only the replay's)."""

    kind: np.ndarray  # per node: K_*
    dur: np.ndarray  # per node
    node_ops: list[list[int]]
    waits: list[list[int]]
    op_dur: np.ndarray
    op_lat: np.ndarray
    op_gap: np.ndarray
    op_floor: np.ndarray
    op_start: np.ndarray
    op_after: np.ndarray
    op_kind: np.ndarray
    op_name: list[str]
    counted: np.ndarray
    node_start: np.ndarray | None = field(default=None, repr=False, compare=False)
    node_name: list[str] = field(default_factory=list, repr=False, compare=False)
    node_sync: list[str] = field(default_factory=list, repr=False, compare=False)
    modules: Modules = field(default_factory=no_modules, repr=False, compare=False)
    op_stream: np.ndarray | None = field(default=None, repr=False, compare=False)
    op_end: np.ndarray | None = field(default=None, repr=False, compare=False)
    op_nbytes: np.ndarray | None = field(default=None, repr=False, compare=False)
    op_copy: np.ndarray | None = field(default=None, repr=False, compare=False)
    op_pageable: np.ndarray | None = field(default=None, repr=False, compare=False)
    link_gb_s: float = field(default=0.0, repr=False, compare=False)  # RoundGraph.link_gb_s
    #: Node kinds outside SEGMENT..EXTERNAL, by node (K_OTHER in `kind`).
    other: dict[int, str] = field(default_factory=dict, repr=False, compare=False)
    #: Which ops are collective kernels, once asked (edits.comm_kernels); None until then, and where ops changed.
    comm: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: `issued(f)`, once asked; None until then, and where nodes changed.
    issue: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    #: What the walk in C reads of the nodes (replay.py `_walk_links`), with the `kind`, `waits` and `issue` it was
    #: read from; None until asked.
    links: tuple[np.ndarray, list[list[int]], object, tuple[np.ndarray, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    def changed(self, **columns: Any) -> Flat:
        """`dataclasses.replace(self, **columns)`: a shallow copy with `columns` set, without replace's call of
        `__init__` over every field (1.5 against 7.7 µs; a test's what-ifs make 4-5 copies, 2-core dev VM,
        2026-11-28). Flat has no `__post_init__` and no field outside `__init__`, so the copy is the same."""
        if not columns.keys() <= _FLAT_FIELDS:
            raise TypeError(f"Flat has no field {sorted(columns.keys() - _FLAT_FIELDS)}")
        new = object.__new__(Flat)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(columns)
        return new


_FLAT_FIELDS = frozenset(f.name for f in fields(Flat))


def issued(f: Flat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How many ops each node issued, and every issued op's node and the op, in node order: kept on `f` for the
    shape and the what-ifs that ask again (they share the nodes' ops)."""
    if f.issue is None:
        counts = np.fromiter(map(len, f.node_ops), dtype=np.int64, count=len(f.node_ops))
        placed = np.fromiter(chain.from_iterable(f.node_ops), dtype=np.int64, count=int(counts.sum()))
        f.issue = (counts, np.arange(len(counts)).repeat(counts), placed)
    return f.issue
