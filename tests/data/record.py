"""Record the CPU scenarios in tests/data/<scenario>/trace.npz from real collections on this machine.

Run by hand (`python tests/data/record.py`) when the trace format changes; the analyzer
tests then run on these recordings in CI. Each scenario's README.md says when and where
it was recorded.
"""

from __future__ import annotations

import datetime
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

from pytest_inferscope.collectors import Collection, CollectionOptions, scope

HERE = Path(__file__).parent


def tokenize_loop() -> None:
    """cpu_bound: pure-Python tokenisation on the critical path."""
    words = ("the quick brown fox jumps over the lazy dog " * 400).split()
    with scope("tokenize"):
        ids = []
        for w in words:
            ids.append([ord(c) % 97 for c in w.lower()])


_KEEP: list[bytearray] = []


def leak_and_touch() -> None:
    """memory_bound: every call keeps 64 MB more and writes each page (RSS grows, pages fault in)."""
    with scope("allocate"):
        block = bytearray(64 * 1024 * 1024)
        block[::4096] = b"\x01" * len(block[::4096])
        _KEEP.append(block)


SCENARIOS: dict[str, Callable[[], None]] = {"cpu_bound": tokenize_loop, "memory_bound": leak_and_touch}


def record(name: str, body: Callable[[], None], rounds: int = 10, warmup: int = 1) -> Path:
    coll = Collection(CollectionOptions(sample_interval_ms=1.0), name=name)
    coll.start()
    coll.run_rounds(body, rounds, warmup)
    raw = coll.stop()
    out = HERE / name
    out.mkdir(exist_ok=True)
    raw.save(str(out / "trace.npz"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (out / "README.md").write_text(
        f"# {name}\n\n{body.__doc__}\n\nRecorded {datetime.date.today()} on {platform.node() or 'dev'} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}), commit "
        f"{commit or 'uncommitted'}, with `python tests/data/record.py`: {rounds} rounds after {warmup} warm-up.\n"
    )
    return out


if __name__ == "__main__":
    for scenario, fn in SCENARIOS.items():
        print("recorded", record(scenario, fn))
        _KEEP.clear()
