"""A helper process that puts finished report files on disk while pytest goes on.

A trivial test's reports are a few kB formatted in about a millisecond, but creating a folder and
four files in it costs the kernel from 0.1 to over 1 ms per file on a common ext4 disk (a file
created in a new folder costs many times one created in an old one). A thread of this process
could not take that time off pytest: it needs the GIL between two system calls, and while pytest
runs Python code it gets it only every switch interval (5 ms). So the files go through a pipe to a
small Python process (`_HELPER`, started on first use; it loads `files.py` by its path, not the
plugin's package) that writes each one with `files.atomic_write_bytes`.

The session waits for the writes (`wait`) before it starts the next collection, so no test is
measured while report files are written, and at the end of the session, before the index is
written; the errors of a test's files come back from `wait` with its node id. A test's files are
written in the order given (the trace before report.json, as `write_test_reports` does); after a
failed one the rest of that test's files are not written, so no report.json points to a file that
is missing. When the helper cannot be started or stops, the files it had not confirmed are written
here, as they would be without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import files as _files
from .files import atomic_write_bytes

#: The helper: reads frames from stdin (b"W" group path data | b"S"), writes files, answers a "S"
#: (sync) with one JSON line on stdout: the [group, path, error] of every failure since the last one;
#: after a test's (group's) first failure, its later files are not written.
_HELPER = r"""
import importlib.util, json, os, struct, sys
# files.py by its path (argv[1]): its atomic writes, without importing the plugin's package.
spec = importlib.util.spec_from_file_location("_inferscope_files", sys.argv[1])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
inp, out = sys.stdin.buffer, sys.stdout
failed, errors, made = set(), [], set()

def read(n):
    b = inp.read(n)
    if len(b) != n:
        raise EOFError
    return b

try:
    while True:
        op = read(1)
        if op == b"S":
            out.write(json.dumps(errors) + "\n")
            out.flush()
            errors = []
        else:
            group, n_path, n_data = struct.unpack("<IHQ", read(14))
            path, data = read(n_path).decode("utf-8", "surrogateescape"), read(n_data)
            if group in failed:
                continue
            try:
                folder = os.path.dirname(path)
                if folder not in made:
                    os.makedirs(folder, exist_ok=True)
                    made.add(folder)
                files.atomic_write_bytes(path, data)
            except Exception as e:
                failed.add(group)
                errors.append([group, path, str(e) or type(e).__name__])
except EOFError:
    pass
"""


@dataclass
class WriteError:
    """A test whose report files could not all be written."""

    nodeid: str
    path: Path
    error: BaseException


class ReportWriter:
    """Writes groups of files (one group per test) in the order submitted, through the helper process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False  # the helper could not start or stopped: write here
        self._groups: list[tuple[str, list[tuple[Path, bytes]]]] = []  # submitted since the last confirmed sync
        self._index: dict[str, int] = {}  # node id -> its group in _groups
        self._errors: list[WriteError] = []
        self._failed_here: set[str] = set()  # tests whose files failed in _write_here

    def submit(self, nodeid: str, folder: Path, files: list[tuple[str, bytes]]) -> None:
        """Write `files` (name, content) into `folder` (created if needed), each atomically, after the files
        submitted before; a test's files may come in several calls (each as soon as it is formatted)."""
        new = [(folder / name, data) for name, data in files]
        if not self._broken and self._start():
            index = self._index.setdefault(nodeid, len(self._groups))
            if index == len(self._groups):
                self._groups.append((nodeid, []))
            self._groups[index][1].extend(new)
            try:
                self._send(index, new)
                return
            except OSError:
                self._give_up()  # writes every group since the last sync here, these files included
                return
        self._write_here(nodeid, new)

    def wait(self) -> list[WriteError]:
        """Return when everything submitted is on disk; the errors since the last call."""
        if self._proc is not None and self._groups:
            try:
                stdin, stdout = self._pipes()
                stdin.write(b"S")
                stdin.flush()
                line = stdout.readline()
                if not line:
                    raise OSError("the report writer process stopped")
                for group, path, error in json.loads(line):
                    nodeid = self._groups[group][0]
                    self._errors.append(WriteError(nodeid, Path(path), OSError(error)))
                self._groups, self._index = [], {}
            except (OSError, ValueError):
                self._give_up()
        errors, self._errors = self._errors, []
        return errors

    def close(self) -> list[WriteError]:
        """`wait`, then end the helper."""
        errors = self.wait()
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._pipes()[0].close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a helper that hangs on exit
                self._proc.kill()
            self._end()
        return errors

    # -- internals -----------------------------------------------------------------------------

    def _start(self) -> bool:
        if self._proc is None:
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _HELPER, _files.__file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                self._broken = True
                return False
        return True

    def _end(self) -> None:
        """Close both pipes (an open one would be a ResourceWarning) and forget the helper."""
        for pipe in self._pipes():
            with contextlib.suppress(OSError):
                pipe.close()
        self._proc = None

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        return self._proc.stdin, self._proc.stdout

    def _send(self, index: int, group: list[tuple[Path, bytes]]) -> None:
        stdin = self._pipes()[0]
        for path, data in group:
            raw_path = os.fsencode(path)
            stdin.write(b"W" + struct.pack("<IHQ", index, len(raw_path), len(data)) + raw_path)
            stdin.write(data)
        stdin.flush()

    def _give_up(self) -> None:
        """The helper is gone: write what it had not confirmed here (again: each write replaces atomically)."""
        self._broken = True
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            self._end()
        groups, self._groups, self._index = self._groups, [], {}
        for nodeid, group in groups:
            self._write_here(nodeid, group)

    def _write_here(self, nodeid: str, group: list[tuple[Path, bytes]]) -> None:
        if nodeid in self._failed_here:
            return
        for path, data in group:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, data)
            except OSError as e:
                self._errors.append(WriteError(nodeid, path, e))
                self._failed_here.add(nodeid)
                return
