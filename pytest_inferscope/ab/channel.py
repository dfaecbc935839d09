"""The pipe between the two processes: one JSON object per line, each way, with a timeout on reads."""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from typing import Any

ENV = "INFERSCOPE_AB_TWIN"  # set in the twin: its ends of the pipes, "rfd,wfd" (twin.py)


class ChannelClosed(Exception):
    """The other end closed its pipe, or did not answer in time; the message says which."""


class Channel:
    """Newline-delimited JSON over a pair of file descriptors (read, write)."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self._buf = b""

    def send(self, **msg: Any) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.wfd, data) :]
        except OSError as exc:  # EPIPE: the other side is gone
            raise ChannelClosed(f"the other process closed the pipe ({exc})") from exc

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.rfd], [], [], wait)
            if not ready:
                raise ChannelClosed(f"no answer within {timeout:g} s")
            chunk = os.read(self.rfd, 65536)
            if not chunk:
                raise ChannelClosed("the other process closed the pipe (it exited)")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        msg: dict[str, Any] = json.loads(line)
        return msg

    def close(self) -> None:
        for fd in (self.rfd, self.wfd):
            with contextlib.suppress(OSError):
                os.close(fd)
