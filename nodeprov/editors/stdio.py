"""This process's standard input and output as byte streams of the event loop, for the
editor that runs ``nodeprov acp`` and speaks with it over them.

The descriptors are made non-blocking and waited on by the event loop (never a thread
blocked in a read: leaving must not wait for the editor to write again); a regular file
given as input is read as it is (it never blocks). :meth:`StdioPipes.restore` gives them
back blocking, as they were.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass, field

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ["StdioPipes"]

_CHUNK = 1 << 16


class _Input(ByteReceiveStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        while True:
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            except OSError as error:
                raise anyio.BrokenResourceError(str(error)) from error
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        pass  # the descriptor is the process's: StdioPipes.restore gives it back


class _Output(ByteSendStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
            except OSError as error:  # the editor left (EPIPE)
                raise anyio.BrokenResourceError(str(error)) from error

    async def aclose(self) -> None:
        pass


@dataclass
class StdioPipes:
    """The editor's side as :class:`~nodeprov.agents.acp.rpc.Pipes`: what is sent to it goes
    to this process's standard output (``stdin``, the editor's input), what it says comes
    from standard input (``stdout``, the editor's output)."""

    input_fd: int = 0
    output_fd: int = 1
    stdin: ByteSendStream = field(init=False)
    stdout: ByteReceiveStream = field(init=False)
    _blocking: tuple[bool, bool] = field(init=False)

    def __post_init__(self) -> None:
        self._blocking = (os.get_blocking(self.input_fd), os.get_blocking(self.output_fd))
        os.set_blocking(self.input_fd, False)
        os.set_blocking(self.output_fd, False)
        self.stdin, self.stdout = _Output(self.output_fd), _Input(self.input_fd)

    def restore(self) -> None:
        """Give the descriptors back blocking as they were. Idempotent."""
        for fd, blocking in zip((self.input_fd, self.output_fd), self._blocking, strict=True):
            with suppress(OSError):  # closed by now
                os.set_blocking(fd, blocking)
