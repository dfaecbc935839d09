"""--inferscope-ab-pairs=twins: a second twin, of this checkout, whose rounds and the other side's twin's make the
pairs of every test (lockstep.py takes the turns), so that no offset of this pytest process's own speed is in a
verdict (docs/ab.md, "Each process's own speed"). This process still runs the test's rounds, between theirs, for its
own report; the partner reports nothing. Where it cannot start a test (the test skips or fails in its setup there, it
has no such test, or it died), that test's pairs are this process's and the twin's, as without the option, and its
verdict says so (controller._begin).
"""

from __future__ import annotations

from typing import Any

from .twin_process import READY_TIMEOUT_S, Twin, TwinDied

#: How a verdict names the partner where something happened in it.
PARTNER = "this checkout's twin"
#: What an xdist session's note adds to "each worker takes turns with its own twin".
PAIRS_TWINS = (
    " (through its own twin of this checkout, with its own rounds between their pairs: --inferscope-ab-pairs=twins)"
)


class Partner:
    """The partner process and the profiled tests it collected."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.nodeids: set[str] = set()

    def ready(self) -> str:
        """Read its collection: the usage error where it cannot run the tests, or ""."""
        try:
            msg = self.twin.recv(READY_TIMEOUT_S)
        except TwinDied as exc:
            why = f"did not start ({exc})"
        else:
            said = collection_said(msg)
            why = f"did not collect the tests ({said})" if said else ""
            self.nodeids = set(msg.get("nodeids") or ())
        return why and (
            f"--inferscope-ab-pairs=twins: {PARTNER}, a second pytest process of this checkout, {why}. Run without "
            "--inferscope-ab-pairs=twins (this pytest process then takes the turns itself)."
        )

    def begin(self, nodeid: str, after: str | None, core: int | None) -> str:
        """Start the test in it (`after`: the test run next here, whose fixtures it keeps): why it did not, or ""."""
        if self.twin.dead:
            return self.twin.dead
        if nodeid not in self.nodeids:
            return f"{PARTNER} has no profiled test {nodeid}"
        try:
            self.twin.send(cmd="run", nodeid=nodeid, core=core, next=after)
            msg = self.twin.recv()
        except TwinDied as exc:
            return str(exc)
        return f"the test did not start in {PARTNER} ({why})" if (why := not_started(msg)) else ""


def collection_said(ready: dict[str, Any]) -> str:
    """What a twin's first message (its collection) says against running the tests: its usage error, or its
    collection errors; "" where it can run them."""
    return str(ready.get("usage") or "; ".join(map(str, ready.get("errors") or ())))


def not_started(answer: dict[str, Any]) -> str:
    """Why a twin did not start the test it was asked to run (it skipped or failed there in the setup): its answer's
    reason; "" where it started."""
    if answer.get("type") == "started":
        return ""
    return str(answer.get("skipped") or answer.get("error") or "not run there")
