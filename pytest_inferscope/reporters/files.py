"""Safe file output for the reporters: atomic writes, report folder names, the report directory check.

Every report file is written to a temporary file in its final folder and moved into place with
`os.replace`, so a reader (or a crash half-way) sees the old file or the new one, never half of
one; and nothing here deletes a file it did not create.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import re
import stat
import struct
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Future

#: Longest readable part of a slug; the rest of the uniqueness comes from the hash.
SLUG_MAX = 80
_HASH_LEN = 10
#: What a slug cut to SLUG_MAX keeps of the id's start; the rest is its end (the test's name and parameters).
_SLUG_HEAD = 24
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_LOOKS_HASHED = re.compile(rf"-[0-9a-f]{{{_HASH_LEN}}}$")
# Names Windows refuses whatever the extension; a report folder may be copied there by CI.
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}


#: zlib level of trace.json.gz. Measured on benchmarks/synthetic.py's traces (docs/performance.md,
#: "trace.json.gz"): level 1 writes 10-11x smaller files at ~360 MB/s, about as fast as the trace is
#: formatted, so the writer thread keeps up; level 6 is ~20% smaller but 2.5x slower (1.6 s for 1M events).
GZIP_LEVEL = 1
#: What `atomic_write_gzip` compresses between two calls of its `between` (the helper's pause point).
_GZIP_CHUNK = 1 << 20


class Writable(Protocol):
    """Where a writer puts its blocks: a binary file, or a `GzipStream` in front of one."""

    def write(self, block: Any, /) -> Any: ...


class GzipStream:
    """Gzips what is written to it into a binary file: one gzip member (zlib's own header: no name, no
    time, so the same content gives the same bytes); `close` writes the end of the stream."""

    def __init__(self, f: Writable) -> None:
        self._f = f
        self._z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header and trailer

    def write(self, block: Any) -> None:
        out = self._z.compress(block)  # zlib lets go of the GIL while it compresses
        if out:
            self._f.write(out)

    def close(self) -> None:
        self._f.write(self._z.flush())


#: What `ParallelGzipStream` compresses as one piece, on one thread.
_PIECE = 4 << 20
#: The part of the stream before a piece that its compression may refer back to (deflate's whole window).
_WINDOW = 32 << 10
#: zlib's gzip header for a stream without name or time, at level 1 (XFL 4: fastest) on Unix (OS 3).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\x03"


class ParallelGzipStream:
    """`GzipStream` on several threads, as pigz does: one gzip member whose deflate stream is cut into pieces of
    `_PIECE` bytes at fixed offsets, each compressed on its own with the 32 KiB before it as its dictionary and ended
    on a byte boundary (a sync flush), so the pieces join into one valid stream; the file reads as any gzip file does.
    zlib lets go of the GIL while it compresses and checksums, so the pieces run side by side with each other and
    with the caller. The same content gives the same bytes, whatever the number of threads. A block written is
    compressed later, on another thread: it must not change afterwards (the trace writer's blocks are new arrays)."""

    def __init__(self, f: Writable, workers: int) -> None:
        from concurrent.futures import ThreadPoolExecutor  # here: the writer's helper process loads this file too

        self._f = f
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="inferscope-gzip")
        self._pending: deque[Future[bytes]] = deque()
        self._most = 2 * max(1, workers) + 1  # pieces in flight at most: bounds the memory they hold
        self._rest = b""  # the stream's bytes after the last whole piece
        self._before = b""  # the _WINDOW bytes before the next piece
        self._crc = 0
        self._size = 0
        self._f.write(_GZIP_HEADER)

    def write(self, block: Any) -> None:
        try:
            view = memoryview(block).cast("B")  # the trace writer's rows: 2-D, of native uint32
        except TypeError:  # a format cast() refuses (a byte order given): its bytes
            view = memoryview(bytes(block))
        self._crc = zlib.crc32(view, self._crc)
        self._size += len(view)
        at = 0
        if self._rest:
            at = _PIECE - len(self._rest)
            self._rest += bytes(view[:at])
            if len(self._rest) < _PIECE:
                return
            self._submit(self._rest, zlib.Z_SYNC_FLUSH)
        while len(view) - at >= _PIECE:
            self._submit(view[at : at + _PIECE], zlib.Z_SYNC_FLUSH)
            at += _PIECE
        self._rest = bytes(view[at:])

    def close(self) -> None:
        try:
            self._submit(self._rest, zlib.Z_FINISH)
            while self._pending:
                self._f.write(self._pending.popleft().result())
            self._f.write(struct.pack("<II", self._crc & 0xFFFFFFFF, self._size & 0xFFFFFFFF))
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def abandon(self) -> None:
        """Stop without ending the stream (the file is being thrown away): the pieces not started are dropped."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

    def _submit(self, piece: Any, mode: int) -> None:
        self._pending.append(self._pool.submit(_deflate, piece, self._before, mode))
        self._before = bytes(piece[-_WINDOW:]) if len(piece) >= _WINDOW else (self._before + bytes(piece))[-_WINDOW:]
        while self._pending and (self._pending[0].done() or len(self._pending) > self._most):
            self._f.write(self._pending.popleft().result())


def _deflate(piece: Any, before: bytes, mode: int) -> bytes:
    """One piece of a deflate stream (no header), `before` as what it may refer back to."""
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15, zdict=before)  # (an empty one, the first piece's: none)
    return z.compress(piece) + z.flush(mode)


def gzip_threads() -> int:
    """How many threads `ParallelGzipStream` uses here: the cores this process may run on, up to 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class ReportDirError(Exception):
    """The report directory cannot be used; the message says which path and why."""


_O_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)


#: The temporary names' random part: a generator of our own (not `random`'s, which the tests' code may seed),
#: seeded from the OS once and again in a forked child; `secrets` asked the kernel for 4 bytes per file.
_names = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_names.seed)


def _create_temp(path: str) -> tuple[int, str, str]:
    """A new, empty temporary file to replace `path` with: (its descriptor, its path, the path it replaces).

    The path replaced is `path`'s target when `path` is a symlink: the link stays a link (a baseline store linked
    from several checkouts does not fork into a copy), and the temporary file goes in the target's folder, so the
    rename stays within one file system. It has the permissions of the file it replaces (a read-only or group-only
    baseline keeps them); a new file's are left to the umask. Created with O_EXCL under a random name, so it can
    never be someone else's file (O_EXCL, not the name, guarantees that: a name that exists is skipped).
    """
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
    folder, name = os.path.split(target)
    for _ in range(100):
        tmp = os.path.join(folder, f".{name}.{_names.getrandbits(32):08x}.tmp")
        try:
            # 0o666 lets the umask decide a new file's permissions, as for any ordinary file.
            fd = os.open(tmp, _O_FLAGS, 0o666)
        except FileExistsError:
            continue
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        return fd, tmp, target
    raise FileExistsError(errno.EEXIST, "could not create a unique temporary file", folder)  # pragma: no cover


def _sync_folder(folder: str) -> None:
    """Make a rename in `folder` durable (POSIX only; Windows has no directory handles to sync)."""
    if hasattr(os, "O_DIRECTORY"):
        dfd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], *, durable: bool = False) -> Iterator[BinaryIO]:
    """Open a binary file that replaces `path` only when the block finishes without an exception.

    The temporary file lives in the same folder (so `os.replace` is a rename, atomic on POSIX and
    Windows) and is created with O_EXCL under a random name, so it can never be someone else's
    file; on failure it is removed, and `path` is left as it was. `durable` also syncs the file
    and the folder to disk (for baselines; reports can be written again by re-running the tests,
    and a sync of a large trace costs more than writing it).

    Per file that is one create, the writes, one close and one rename: creating a file is the
    expensive part on most disks (~0.1-1 ms), so nothing else is added to it.
    """
    fd, tmp, target = _create_temp(os.fspath(path))
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _sync_folder(os.path.dirname(target))


@contextlib.contextmanager
def open_target(
    target: str | os.PathLike[str] | BinaryIO, *, compress: bool = False, threads: int = 1
) -> Iterator[Writable]:
    """`atomic_open(target)` for a path; a file object (a buffer to write later) is written as it is.

    `compress`: what is written is gzipped (`GzipStream`, or `ParallelGzipStream` on `threads` threads when more
    than one); the stream is ended when the block finishes.
    """
    with contextlib.ExitStack() as stack:
        f: Writable = stack.enter_context(atomic_open(target)) if isinstance(target, str | os.PathLike) else target
        if not compress:
            yield f
            return
        z = ParallelGzipStream(f, threads) if threads > 1 else GzipStream(f)
        try:
            yield z
        except BaseException:
            if isinstance(z, ParallelGzipStream):
                z.abandon()
            raise
        z.close()


def atomic_write_gzip(path: str | os.PathLike[str], data: bytes, between: Callable[[], object] | None = None) -> None:
    """Write `data` gzipped (`GzipStream`) to `path` atomically; `between()` is called after each MiB compressed."""
    with atomic_open(path) as f:
        z = GzipStream(f)
        view = memoryview(data)
        for i in range(0, len(view), _GZIP_CHUNK):
            z.write(view[i : i + _GZIP_CHUNK])
            if between is not None:
                between()
        z.close()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = False) -> None:
    """Write `data` to `path` atomically (see `atomic_open`), without a Python file object."""
    fd, tmp, target = _create_temp(os.fspath(path))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _sync_folder(os.path.dirname(target))


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = False) -> None:
    """Write `text` to `path` atomically as UTF-8 with '\\n' line ends on every platform."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def slugify(nodeid: str) -> str:
    """A folder name for a test's reports: readable, filesystem-safe, distinct for distinct ids.

    The readable part keeps letters, digits, '.', '_' and '-' and turns everything else
    ('/', '::', brackets, spaces, unicode) into '_'; past SLUG_MAX it keeps the start and the end,
    '...' between them (before 2026-11-30 the start alone: a long test's parametrisations read
    alike). When that changed anything, or the id is too long, or it would clash on a
    case-insensitive filesystem, a hash of the full node id is appended: two ids can then only
    share a slug if they share the hash.
    """
    readable = _UNSAFE.sub("_", nodeid.replace("::", "__")).strip("._-") or "test"
    altered = (
        readable != nodeid
        or len(readable) > SLUG_MAX
        or nodeid.lower() != nodeid  # Test_A and test_a must not share a folder on macOS/Windows
        or readable.split(".")[0].upper() in _RESERVED
        or _LOOKS_HASHED.search(readable) is not None  # could equal another id's hashed slug
    )
    if not altered:
        return readable
    digest = hashlib.sha1(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    if len(readable) > SLUG_MAX:  # its start (the folder) and its end (the test's name and parameters), cut between
        tail = readable[-(SLUG_MAX - _SLUG_HEAD - 3) :].lstrip("._-")
        readable = f"{readable[:_SLUG_HEAD].rstrip('._-')}...{tail}"
    return f"{readable.rstrip('._-')}-{digest}"


def check_report_dir(path: str | os.PathLike[str], *, index: bool = True, source: str = "") -> None:
    """Make sure reports can be written under `path`, creating it if needed; never deletes anything.

    `index`: the session's index.md, index.html and index.json will be written there too (not by profile() or
    measure()), so a file of those names must be one an earlier run wrote, not the user's own page.
    `source`: where the folder was set when not on the command line (`env INFERSCOPE_REPORT`), said after it.
    Raises `ReportDirError` with one paragraph that names the path, what is wrong and what to do.
    """
    p = Path(path)
    named = f"{str(p)!r} (from {source})" if source else repr(str(p))
    other = "or pass another folder with --inferscope-report=DIR."
    if p.exists() and not p.is_dir():
        raise ReportDirError(
            f"The inferscope report directory {named} exists but is a file, not a folder; reports are "
            f"written as one folder per test inside it. Move or rename that file, {other}"
        )
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReportDirError(
            f"The inferscope report directory {named} cannot be created: {_why(e)}. Check that each "
            f"parent of it is a folder this user can write to, {other}"
        ) from e
    # os.access ignores read-only mounts and ACLs and is always true for root: try a write instead,
    # with a file of our own (O_EXCL, random name) so the clean-up can only remove what we made.
    try:
        fd, probe = tempfile.mkstemp(prefix=".inferscope-write-check-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ReportDirError(
            f"The inferscope report directory {named} exists but is not writable: {_why(e)}. Give this "
            f"user write permission on it, {other}"
        ) from e
    if index:
        for name in INDEX_FILES:
            if not _is_our_index(p / name):
                raise ReportDirError(
                    f"The inferscope report directory {named} holds {str(p / name)!r}, which is not an inferscope "
                    f"index; the session writes its index.md, index.html and index.json there and would replace it. "
                    f"Move that file, or pass another folder (a new one, or one an earlier run wrote) with "
                    f"--inferscope-report=DIR."
                )


#: The session's index files in a report folder, and how each begins when the plugin wrote it (in every version).
INDEX_FILES = {"index.md": b"# InferScope Index\n", "index.html": b"<title>inferscope \xc2\xb7 ", "index.json": b""}


def _is_our_index(path: Path) -> bool:
    """Whether `path` is absent, empty, or an index an inferscope run wrote (its head is read, not the whole file)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096) if path.name != "index.json" else f.read()
    except FileNotFoundError:
        return True
    except OSError:  # a folder of that name, unreadable: written over it would fail; say so now
        return False
    if not head.strip():
        return True
    if path.name == "index.json":
        try:
            data = json.loads(head)
        except ValueError:
            return False
        return isinstance(data, dict) and "schema_version" in data and isinstance(data.get("tests"), list)
    marker = INDEX_FILES[path.name]
    return head.startswith(marker) if path.name == "index.md" else marker in head


def _why(e: OSError) -> str:
    reason = e.strerror or str(e)
    if e.filename and os.fspath(e.filename) not in reason:
        return f"{reason} ({os.fspath(e.filename)})"
    return reason
