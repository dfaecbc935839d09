"""A second thread that puts finished report files on disk while pytest goes on to the next test.

A trivial test's reports are a few kB formatted in well under a millisecond, but creating a folder
and four files in it costs the kernel ~1 ms or more on a common ext4 disk (a file created in a new
folder costs several times one created in an old one). That time is spent in system calls, which
release the GIL, so this thread can spend it while the main thread goes on with pytest's own work.

The session waits for the writes (`wait`) before it starts the next collection, so no test is
measured while this thread works, and at the end of the session, before the index is written; the
errors of a test's files come back from `wait` with its node id. A test's files are written in the
order given (the trace before report.json, as `write_test_reports` does); after a failed one the
rest of that test's files are not written, so no report.json points to a file that is missing.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass
from pathlib import Path

from .files import atomic_write_bytes


@dataclass
class WriteError:
    """A test whose report files could not all be written."""

    nodeid: str
    path: Path
    error: BaseException


class ReportWriter:
    """Writes groups of files (one group per test) on one daemon thread, in the order submitted."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Path, list[tuple[str, bytes]]] | None] = queue.Queue()
        self._errors: list[WriteError] = []
        self._thread: threading.Thread | None = None

    def submit(self, nodeid: str, folder: Path, files: list[tuple[str, bytes]]) -> None:
        """Create `folder` and write `files` (name, content) into it, each atomically, on the writer thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="inferscope-report-writer", daemon=True)
            self._thread.start()
        self._queue.put((nodeid, folder, files))

    def wait(self) -> list[WriteError]:
        """Return when everything submitted is on disk; the errors since the last call."""
        if self._thread is not None:
            self._queue.join()
        errors, self._errors = self._errors, []
        return errors

    def close(self) -> list[WriteError]:
        """`wait`, then end the thread."""
        errors = self.wait()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        return errors

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            nodeid, folder, files = job
            path = folder
            try:
                os.makedirs(folder, exist_ok=True)
                for name, data in files:
                    path = folder / name
                    atomic_write_bytes(path, data)
            except BaseException as e:  # handed to the session by wait()
                self._errors.append(WriteError(nodeid, path, e))
            finally:
                self._queue.task_done()
        self._queue.task_done()
