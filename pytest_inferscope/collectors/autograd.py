"""Whether the body runs with autograd recording: the graph nodes autograd made in the measured rounds, counted.

A model called without `torch.no_grad()` or `torch.inference_mode()`, with parameters that require grad, records a
graph node for every op and keeps the tensors each one's backward would need, for a backward that never comes. That
work is in native code: no frame shows it to the stack samples. Autograd numbers the nodes it makes, in a counter of
each thread (`torch._C._autograd._get_sequence_nr`): it moves only where autograd records (not under grad mode off,
inference mode, or where nothing requires grad), and reading it changes nothing. The collection reads it before each
measured round's clock starts and after it stops (`AutogradNodes`: 0.2 µs a round on the 2-core dev VM, outside the
round's wall); the differences are the nodes the test thread's measured calls made. A backward does not move it (a
training step's nodes are its forward's): the rule tells a training step apart by its sampled backward
(`rules_autograd`).

Nothing is hooked or replaced in torch: saved-tensors hooks, which would also give the saved tensors' sizes, cost a
Python call per saved tensor in the round they are on, the one the trace and the what-ifs read where the warm-up stands
for it, and torch.func's transforms refuse to run under them (tried on 2026-11-30 and not kept: docs/performance.md).
torch is never imported here: without it in `sys.modules` the body cannot run torch, and nothing is counted. The
counter is private torch API: where it is missing nothing is counted either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def node_counter() -> Callable[[], int] | None:
    """The test thread's autograd node counter, or None where torch is not imported or has none."""
    torch = sys.modules.get("torch")
    counter = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_get_sequence_nr", None)
    if counter is None:
        return None
    try:
        int(counter())
    except Exception:  # torch's internals changed: nothing counted
        return None
    return counter


class AutogradNodes:
    """The autograd nodes the test thread made in the measured rounds: `enter()` before a round's clock starts, `exit()`
    after it stops (whatever runs between the measured rounds, other rounds of the body included, is not counted)."""

    __slots__ = ("_at", "_counter", "nodes", "rounds")

    def __init__(self, counter: Callable[[], int]) -> None:
        self._counter = counter
        self._at = 0
        self.nodes = 0
        self.rounds = 0

    def enter(self) -> None:
        self._at = self._counter()

    def exit(self) -> None:
        self.nodes += self._counter() - self._at
        self.rounds += 1

    def meta(self) -> dict[str, int]:
        """What the trace keeps (`RawTrace.meta["autograd"]`): the nodes made, the measured rounds they were made in."""
        return {"nodes": self.nodes, "rounds": self.rounds}
