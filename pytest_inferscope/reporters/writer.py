"""A helper process that puts finished report files on disk while pytest goes on.

A trivial test's reports are a few kB formatted in about a millisecond, but creating a folder and
four files in it costs the kernel from 0.1 to over 1 ms per file on a common ext4 disk (a file
created in a new folder costs many times one created in an old one). A thread of this process
could not take that time off pytest: it needs the GIL between two system calls, and while pytest
runs Python code it gets it only every switch interval (5 ms). So the files go through a pipe to a
small Python process (`_HELPER`, started on first use; it loads `files.py` by its path, not the
plugin's package) that writes each one with `files.atomic_write_bytes`, or gzips it on the way
(`files.atomic_write_gzip`: trace.json.gz, compressed here, not on pytest's thread), or removes a file
an earlier run left (`remove`).

Before a profiled test's collection starts, the session pauses the helper (`pause`: it finishes
the file it is writing, or the MiB it is compressing, answers, and writes nothing more) and lets it
go on when the collection has stopped (`resume`), so no test is measured while report files are
written, yet the files left from earlier tests wait instead of pytest; a helper that has written all
it was sent says so unasked, and is then not paused (a pause is a round trip to it: ~0.1-0.2 ms
per test on a busy 2-core machine). At the end of the session it waits for all of them (`wait`),
before the index is written. The errors of a test's files come back from `pause` or `wait` with its
node id. A test's files are written in the order given (the trace before report.json, as
`write_test_reports` does); after a failed one the rest of that test's files are not written, so no
report.json points to a file that is missing. When the helper cannot be started or stops, the
files it had not confirmed are written here, as they would be without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import files as _files
from .files import atomic_write_bytes, atomic_write_gzip

#: What the helper does with a file: write it, gzip it into place, or remove it (a frame's first byte).
_WRITE, _GZIP, _REMOVE = b"W", b"Z", b"D"

#: The helper: reads frames from stdin (b"W"/b"Z"/b"D" group path data | b"S"), writes files (b"Z": gzipped,
#: pausing between MiB as between files; b"D": removes the file, data empty), answers a "S"
#: (sync) with one JSON line on stdout: [files done, [group, path, error] of every failure since the
#: last line, "S"]; after a test's (group's) first failure, its later files are not written. A b"P"
#: on the control pipe (its descriptor is argv[2]) is answered the same way ("P") once the file being
#: written is done, and nothing more is written until a b"R" there. Unasked, when it has written
#: everything it was sent and waits for more, it says so once ("I", idle): then a pause needs no answer.
_HELPER = r"""
import importlib.util, json, os, select, struct, sys
# files.py by its path (argv[1]): its atomic writes, without importing the plugin's package.
spec = importlib.util.spec_from_file_location("_inferscope_files", sys.argv[1])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
data, ctl, out = 0, int(sys.argv[2]), sys.stdout
failed, errors, made, done, told = set(), [], set(), 0, 0
buf, pos = b"", 0  # frames read but not yet written, from pos: one read takes all that has come

def frame():
    # The next whole frame in buf: (group, path, data) or "S"; else the bytes it needs, counted from pos.
    global pos
    if len(buf) == pos:
        return 1  # a b"S" is one byte: wait for no more than that
    if buf[pos] == 83:  # b"S"
        pos += 1
        return "S"
    if len(buf) - pos < 15:
        return 15
    group, n_path, n_data = struct.unpack_from("<IHQ", buf, pos + 1)
    start, end = pos + 15, pos + 15 + n_path + n_data
    if len(buf) < end:
        return end - pos
    tag, pos = buf[pos], end
    return group, buf[start:start + n_path].decode("utf-8", "surrogateescape"), buf[start + n_path:end], tag

def read_more(need):
    # Read what has come, and on until `need` bytes are there (a frame is sent whole, all at once).
    global buf, pos
    parts, have = [buf[pos:]], len(buf) - pos
    while True:
        b = os.read(data, max(need - have, 1 << 16))
        if not b:
            raise EOFError
        parts.append(b)
        have += len(b)
        if have >= need:
            break
    buf, pos = b"".join(parts), 0

def read1(fd):
    b = os.read(fd, 1)
    if not b:
        raise EOFError
    return b

def answer(tag):
    global errors, told
    out.write(json.dumps([done, errors, tag]) + "\n")
    out.flush()
    errors, told = [], done

def pause_if_asked(block):
    if block and done != told and not select.select([data], [], [], 0)[0]:
        answer("I")  # everything sent is written: idle until more comes
    # b"P" on the control pipe: say what is done, then write nothing until b"R".
    while ctl in select.select([data, ctl] if block else [ctl], [], [], None if block else 0)[0]:
        if read1(ctl) != b"P":
            continue
        answer("P")
        while read1(ctl) != b"R":
            pass
        block = False  # data may have come meanwhile: look again without waiting

try:
    while True:
        got = frame()
        if isinstance(got, int):  # wait for more (or a pause), then read all that has come
            pause_if_asked(True)
            read_more(got)
            continue
        if got == "S":
            answer("S")
            continue
        pause_if_asked(False)
        group, path, payload, tag = got
        if group not in failed and tag == 68:  # b"D": a file an earlier run left
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except Exception as e:
                failed.add(group)
                errors.append([group, path, str(e) or type(e).__name__])
        elif group not in failed:
            try:
                folder = os.path.dirname(path)
                if folder not in made:
                    try:
                        os.mkdir(folder)  # no look first: the folder is new but for a re-run
                    except FileExistsError:
                        pass  # a file there fails the write below, with the reason
                    except FileNotFoundError:
                        os.makedirs(folder, exist_ok=True)
                    made.add(folder)
                if tag == 90:  # b"Z"
                    files.atomic_write_gzip(path, payload, lambda: pause_if_asked(False))
                else:
                    files.atomic_write_bytes(path, payload)
            except Exception as e:
                failed.add(group)
                errors.append([group, path, str(e) or type(e).__name__])
        done += 1
except EOFError:
    pass
"""


@dataclass
class WriteError:
    """A test whose report files could not all be written."""

    nodeid: str
    path: Path
    error: BaseException


_Entry = tuple[Path, bytes, bytes]  # (path, data, what to do: _WRITE, _GZIP or _REMOVE)


class ReportWriter:
    """Writes groups of files (one group per test) in the order submitted, through the helper process."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: IO[bytes] | None = None  # the helper's control pipe: b"P" pause, b"R" resume
        self._paused = False
        self._broken = False  # the helper could not start or stopped: write here
        # Groups not yet confirmed written: id -> (node id, files, the count of files sent up to its last one).
        self._groups: dict[int, tuple[str, list[_Entry], int]] = {}
        self._index: dict[str, int] = {}  # node id -> its group id
        self._next_group = 0
        self._sent = 0  # files sent to the helper
        self._errors: list[WriteError] = []
        self._failed_here: set[str] = set()  # tests whose files failed in _write_here
        self._unread = b""  # the helper's answers read but not yet taken (lines of JSON)

    def submit(self, nodeid: str, folder: Path, files: list[tuple[str, bytes]], *, compress: bool = False) -> None:
        """Write `files` (name, content) into `folder` (created if needed), each atomically, after the files
        submitted before; a test's files may come in several calls (each as soon as it is formatted).
        `compress`: gzip each content on the way (`files.atomic_write_gzip`), in the helper."""
        self._add(nodeid, [(folder / name, data, _GZIP if compress else _WRITE) for name, data in files])

    def remove(self, nodeid: str, folder: Path, names: list[str]) -> None:
        """Remove these files of `folder` if they are there (left by an earlier run), after those submitted before."""
        self._add(nodeid, [(folder / name, b"", _REMOVE) for name in names])

    def _add(self, nodeid: str, new: list[_Entry]) -> None:
        if not self._broken and self._start():
            self.resume()
            gid = self._index.get(nodeid)
            if gid is None or gid not in self._groups:
                gid = self._index[nodeid] = self._next_group
                self._next_group += 1
                self._groups[gid] = (nodeid, [], 0)
            self._sent += len(new)
            self._groups[gid] = (nodeid, self._groups[gid][1] + new, self._sent)
            try:
                if self._sent % 256 < len(new):
                    self._answers(None)  # now and then, so that unasked answers never fill the pipe
                self._send(gid, new)
                return
            except OSError:
                self._give_up()  # writes every unconfirmed group here, these files included
                return
        self._write_here(nodeid, new)

    def pause(self) -> list[WriteError]:
        """Return when the helper writes nothing until `resume` (or the next `submit` or `wait`), having
        finished the file it was writing; the errors since the last call. Files not written yet wait."""
        if self._proc is not None and self._groups and not self._paused:
            try:
                self._answers(None)  # what the helper said unasked: idle, everything written, needs no pause
                if self._groups:
                    assert self._ctl is not None
                    self._ctl.write(b"P")
                    self._ctl.flush()
                    self._paused = True
                    self._answers("P")
            except (OSError, ValueError):
                self._give_up()
        errors, self._errors = self._errors, []
        return errors

    def resume(self) -> None:
        """Let the helper write again after `pause`."""
        if self._paused and self._ctl is not None:
            self._paused = False
            try:
                self._ctl.write(b"R")
                self._ctl.flush()
            except OSError:
                self._give_up()

    def wait(self) -> list[WriteError]:
        """Return when everything submitted is on disk; the errors since the last call."""
        if self._proc is not None and self._groups:
            self.resume()
            try:
                stdin = self._pipes()[0]
                stdin.write(b"S")
                stdin.flush()
                self._answers("S")
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

    def _answers(self, tag: str | None) -> None:
        """Read the helper's answers (how many files it has done, and its errors since its last answer) up
        to the one tagged `tag` ("S" or "P"); with None, only those already there (never waiting)."""
        fd = self._pipes()[1].fileno()  # read here, not through the pipe's buffer: select() must see all
        while True:
            while b"\n" in self._unread:
                line, self._unread = self._unread.split(b"\n", 1)
                done, failures, said = json.loads(line)
                for gid, path, error in failures:
                    self._errors.append(WriteError(self._groups[gid][0], Path(path), OSError(error)))
                for gid in [g for g, (_, _, last) in self._groups.items() if last <= done]:
                    del self._groups[gid]
                if said == tag:
                    return
            if tag is None and not select.select([fd], [], [], 0)[0]:
                return
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise OSError("the report writer process stopped")
            self._unread += chunk

    def _start(self) -> bool:
        if self._proc is None:
            try:
                read, write = os.pipe()
            except OSError:
                self._broken = True
                return False
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _HELPER, _files.__file__, str(read)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(read,),
                )
            except OSError:
                os.close(write)
                self._broken = True
                return False
            finally:
                os.close(read)
            self._ctl = os.fdopen(write, "wb")
        return True

    def _end(self) -> None:
        """Close the pipes (an open one would be a ResourceWarning) and forget the helper."""
        for pipe in [*self._pipes(), *([self._ctl] if self._ctl is not None else [])]:
            with contextlib.suppress(OSError):
                pipe.close()
        self._proc, self._ctl, self._paused, self._unread = None, None, False, b""

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        return self._proc.stdin, self._proc.stdout

    def _send(self, gid: int, group: list[_Entry]) -> None:
        stdin = self._pipes()[0]
        frames = []
        for path, data, op in group:
            raw_path = os.fsencode(path)
            frames += [op, struct.pack("<IHQ", gid, len(raw_path), len(data)), raw_path, data]
        stdin.write(b"".join(frames))  # one write: the helper reads a frame in one go
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
        groups, self._groups, self._index = self._groups, {}, {}
        for nodeid, group, _ in groups.values():
            self._write_here(nodeid, group)

    def _write_here(self, nodeid: str, group: list[_Entry]) -> None:
        if nodeid in self._failed_here:
            return
        for path, data, op in group:
            try:
                if op == _REMOVE:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                (atomic_write_gzip if op == _GZIP else atomic_write_bytes)(path, data)
            except OSError as e:
                self._errors.append(WriteError(nodeid, path, e))
                self._failed_here.add(nodeid)
                return
