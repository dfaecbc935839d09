"""The parent's side of a twin (twin.py): `Twin` starts the second pytest process, reads its answers and ends it;
the logs it writes to in TMPDIR, and their removal once their run is gone."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .channel import ENV, Channel, ChannelClosed
from .worktree import alive

#: How long the parent waits for the twin's collection, for one answer during a test, for its session's end.
READY_TIMEOUT_S, ANSWER_TIMEOUT_S, FINISH_TIMEOUT_S = 300.0, 600.0, 30.0


#: A twin's log in TMPDIR (--inferscope-ab-python alone: no worktree folder holds it), named by the process that
#: made it and its host: `inferscope-twin-PID@HOST-RANDOM.log`.
_LOG = re.compile(r"inferscope-twin-(\d+)@(.+)-[A-Za-z0-9_]+\.log")


def _host() -> str:
    """This host's name as a log's name carries it (no path separators, nothing a shell would trip on)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())


def new_log() -> Path:
    """A new, empty file in TMPDIR for the twin's output, named by this process and host (see `remove_stale_logs`)."""
    fd, name = tempfile.mkstemp(prefix=f"inferscope-twin-{os.getpid()}@{_host()}-", suffix=".log")
    os.close(fd)
    return Path(name)


def remove_stale_logs(folder: Path | None = None) -> list[Path]:
    """Remove the twin logs in `folder` (TMPDIR) of runs whose process is gone; the paths removed.

    A run killed outright (SIGKILL, a power cut) cannot remove its own. Only ours: a plain file (no link, no folder)
    of this user, named as `new_log` names them, by a process of this host that no longer exists. A live run's log,
    another host's (a TMPDIR shared between machines), a log named before the names carried a pid, and anything
    else are left as they are.
    """
    where = Path(folder if folder is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        match = _LOG.fullmatch(entry.name)
        if match is None or match[2] != _host():
            continue
        try:
            if not entry.is_file(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        if alive(int(match[1])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


class TwinDied(Exception):
    """The twin exited or stopped answering; the message says how, with the end of its output."""


class Twin:
    """Parent side of one twin process."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path, label: str) -> None:
        self.label = label
        self.log = log
        p2c_r, p2c_w = os.pipe()
        c2p_r, c2p_w = os.pipe()
        env = {**env, ENV: f"{p2c_r},{c2p_w}"}
        try:
            with open(log, "wb") as out:
                self.proc = subprocess.Popen(
                    argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    pass_fds=(p2c_r, c2p_w),
                )  # fmt: skip
                # Same session as this process, not a new one: with the kernel's autogroup scheduling a new
                # session is a scheduling group of its own, and the two sides would get the shared core on
                # different terms. Ctrl-C reaches the twin too; it ignores it (TwinServer) and this side ends it.
        except OSError:
            for fd in (p2c_r, p2c_w, c2p_r, c2p_w):
                os.close(fd)
            raise
        os.close(p2c_r)
        os.close(c2p_w)
        self.channel = Channel(c2p_r, p2c_w)
        self.dead = ""  # why it is no longer usable
        self.asked = False  # told to exit (ask_exit)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def recv(self, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
        if self.dead:
            raise TwinDied(self.dead)
        try:
            return self.channel.recv(timeout)
        except (ChannelClosed, ValueError) as exc:
            code = self.proc.poll()
            if code is None and isinstance(exc, ChannelClosed):  # closed as it exits: its status, when it comes soon
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.proc.wait(timeout=2)
            how = f"exited with status {code}" if code is not None else f"stopped answering ({exc})"
            self.dead = f"the twin pytest process at {self.label} {how}"
            tail = self.tail(5)
            if tail:
                self.dead += "; its last output:\n" + tail
            self.close()
            raise TwinDied(self.dead) from exc

    def send(self, **msg: Any) -> None:
        if self.dead:
            raise TwinDied(self.dead)
        try:
            self.channel.send(**msg)
        except ChannelClosed as exc:
            self.dead = f"the twin pytest process at {self.label} is gone ({exc})"
            self.close()
            raise TwinDied(self.dead) from exc

    def finish(self, timeout: float = FINISH_TIMEOUT_S) -> list[str]:
        """Have the twin end its session; the InferscopeWarnings it raised after its last result (its session's end:
        a sessionfinish hook, its terminal summary), or [] where it does not say them within `timeout` (a twin of a
        version before 2026-11-30, one that died, one already closed)."""
        if self.dead or self.proc.poll() is not None:  # (closed: its pipes' numbers may be another file's now)
            return []
        try:
            self.send(cmd="finish")
            while (msg := self.recv(timeout)).get("type") != "bye":
                pass  # the result of a test it was in (this side stopped during it: -x, Ctrl-C)
        except TwinDied:
            return []
        return [str(w) for w in msg.get("warned") or []]

    def ask_exit(self) -> None:
        """Ask it to exit, once, without waiting (several twins asked first, then closed by one deadline)."""
        if self.proc.poll() is None and not self.asked:
            self.asked = True
            with contextlib.suppress(Exception):
                self.channel.send(cmd="exit")

    def close(self, deadline: float | None = None) -> None:
        """Ask it to exit, then make sure it did, by `deadline` (time.monotonic(); 3 s from now by default); no process
        is left behind."""
        if self.proc.poll() is None:
            self.ask_exit()
            wait = 3.0 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                self.proc.wait(timeout=wait)  # idle between tests it exits at once; inside a test body it is killed
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.channel.close()
