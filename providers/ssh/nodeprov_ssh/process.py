"""A process started over an SSH session, as a :class:`~nodeprov.spawn.SpawnedProcess`.

:class:`Session` is asyncssh's session callback object and the session's
:class:`~nodeprov.exec.Demux`: it queues stdout and stderr apart (up to a limit, then the
channel pauses, as a full pipe would), notes the exit status or signal, and tells a lost
connection from an exit. Streams read from it directly: no background task is needed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import suppress
from typing import Unpack, cast

import anyio
import asyncssh

from nodeprov.errors import NodeGoneError
from nodeprov.exec import STDERR, STDOUT, Demux, GroupArgs, GroupProcess, Input

__all__ = ["Session", "SshProcess", "open_session"]

_BUFFER_LIMIT = 4 * 1024 * 1024  # bytes held unread before the channel pauses
# A wider window and larger packets than asyncssh's (2 MiB, 32 KiB): fewer round trips and
# fewer Python calls per byte; twice OpenSSH's throughput through cat, measured (bench/).
_WINDOW, _MAX_PACKET = 8 * 1024 * 1024, 256 * 1024


class Session(Demux, asyncssh.SSHClientSession[bytes]):
    """The client side of one session channel (see the module); ``closed`` once the
    channel has closed, ``lost`` the reason when that came before the exit status."""

    def __init__(self) -> None:
        super().__init__()
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self._paused = False
        self.exit_status: int | None = None
        self.lost: Exception | None = None
        self._changed = anyio.Event()
        self._writable = anyio.Event()
        self._writable.set()
        self._on_closed: Callable[[], None] | None = None

    def on_closed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when the channel has closed."""
        self._on_closed = callback
        if self.closed:
            self._run_on_closed()

    def _run_on_closed(self) -> None:
        callback, self._on_closed = self._on_closed, None
        if callback is not None:
            callback()

    # the demultiplexer's hooks: asyncssh delivers, readers wait ------------------------

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _pull(self, kind: int) -> None:
        await self._changed.wait()

    def _drain(self) -> None:
        super()._drain()
        if self._paused and sum(self._queued.values()) <= _BUFFER_LIMIT // 2 and self.channel is not None:
            self._paused = False
            self.channel.resume_reading()

    # asyncssh's callbacks (the event loop's thread) ----------------------------------

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.channel = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._deliver(STDERR if datatype == asyncssh.EXTENDED_DATA_STDERR else STDOUT, data)
        if sum(self._queued.values()) > _BUFFER_LIMIT and not self._paused and self.channel is not None:
            self._paused = True
            self.channel.pause_reading()

    def eof_received(self) -> bool:
        self.end(STDOUT)
        self.end(STDERR)
        return False

    def exit_status_received(self, status: int) -> None:
        self.exit_status = status
        self._wake()

    def exit_signal_received(self, signal_name: str, core_dumped: bool, msg: str, lang: str) -> None:
        number = getattr(signal, f"SIG{signal_name}", None)
        self.exit_status = -int(number) if number is not None else 128 + 64  # an unknown signal
        self._wake()

    def pause_writing(self) -> None:
        self._writable = anyio.Event()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.exit_status is None:
            self.lost = exc or ConnectionError("the channel closed without an exit status")
        self._writable.set()
        self._close()
        self._run_on_closed()

    # for the streams ------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """Send ``data`` to the process's stdin.

        Raises ``anyio.BrokenResourceError`` when the channel is gone."""
        while True:
            if self.closed or self.channel is None:
                raise anyio.BrokenResourceError
            if self._writable.is_set():
                break
            await self._writable.wait()
        try:
            self.channel.write(data)
        except (OSError, asyncssh.Error):
            raise anyio.BrokenResourceError from None

    async def exited(self) -> None:
        """Wait for the exit status, or the end of the channel."""
        while self.exit_status is None and not self.closed:
            await self._changed.wait()

    def write_eof(self) -> None:
        """End the process's stdin (nothing if the channel is gone)."""
        if self.channel is not None and not self.closed:
            with suppress(OSError, asyncssh.Error):
                self.channel.write_eof()

    async def send_eof(self) -> None:
        """:meth:`write_eof`, for the process's stdin stream."""
        self.write_eof()

    def close(self) -> None:
        """Close the channel; ``closed`` once it has."""
        if self.channel is not None:
            self.channel.close()

    async def aclose(self) -> None:
        self.close()


async def open_session(connection: asyncssh.SSHClientConnection, command: str) -> Session:
    """Start ``command`` in a new session of ``connection`` (asyncssh's errors unmapped)."""
    _, session = await connection.create_session(
        Session, command, encoding=None, window=_WINDOW, max_pktsize=_MAX_PACKET
    )
    return cast(Session, session)


class SshProcess(GroupProcess):
    """A process on an SSH host; ``pid`` is its process id there (it leads its process
    group). A process killed by signal N reports ``-N`` (sshd reports the signal); its
    ``returncode`` is what sshd reported, ``None`` until then (also when its node was
    discarded).

    When the connection drops before the exit status arrives, the output streams end and
    :meth:`wait` raises :class:`~nodeprov.errors.NodeGoneError`: the process is out of reach
    (and ends by itself if it reads its stdin, which closed; see
    :func:`~nodeprov.agents._guard.guard_stdin` for agents that do not).
    """

    def __init__(self, session: Session, *, host: str, **process: Unpack[GroupArgs]) -> None:
        super().__init__(session, Input(session.send, session.send_eof), **process)
        self._host = host
        self._session = session

    @property
    def returncode(self) -> int | None:
        return self._session.exit_status

    async def wait(self) -> int:
        await self._session.exited()
        if self._session.exit_status is None:
            raise NodeGoneError(
                f"{self._host}: the SSH connection was lost while process {self.pid} ran "
                f"({self._session.lost}); its exit status is unknown"
            )
        return self._session.exit_status
