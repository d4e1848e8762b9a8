"""A process started over an SSH session, as a :class:`~nodeprov.spawn.SpawnedProcess`.

:class:`Session` is asyncssh's session callback object: it buffers stdout and stderr apart
(up to a limit, then the channel pauses, as a full pipe would), notes the exit status or
signal, and tells a lost connection from an exit. Streams read from it directly: no
background task is needed.
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import cast

import anyio
import asyncssh
from anyio.abc import ByteReceiveStream, ByteSendStream

from nodeprov.errors import NodeGoneError
from nodeprov.spawn import SpawnedProcess, StopPolicy

STDOUT, STDERR = 0, 1
_BUFFER_LIMIT = 4 * 1024 * 1024  # bytes held unread before the channel pauses
# A wider window and larger packets than asyncssh's (2 MiB, 32 KiB): fewer round trips and
# fewer Python calls per byte; twice OpenSSH's throughput through cat, measured (bench/).
_WINDOW, _MAX_PACKET = 8 * 1024 * 1024, 256 * 1024


class Session(asyncssh.SSHClientSession[bytes]):
    """The client side of one session channel (see the module)."""

    def __init__(self) -> None:
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self._buffers: tuple[deque[bytes], deque[bytes]] = (deque(), deque())
        self._buffered = 0
        self._paused = False
        self._discard = [False, False]
        self._ended = [False, False]
        self.exit_status: int | None = None
        self.lost: Exception | None = None  # the connection ended before the exit status came
        self.closed = False
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

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # asyncssh's callbacks (the event loop's thread) ----------------------------------

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.channel = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        kind = STDERR if datatype == asyncssh.EXTENDED_DATA_STDERR else STDOUT
        if self._discard[kind]:
            return
        self._buffers[kind].append(data)
        self._buffered += len(data)
        if self._buffered > _BUFFER_LIMIT and not self._paused and self.channel is not None:
            self._paused = True
            self.channel.pause_reading()
        self._notify()

    def eof_received(self) -> bool:
        self._ended = [True, True]
        self._notify()
        return False

    def exit_status_received(self, status: int) -> None:
        self.exit_status = status
        self._notify()

    def exit_signal_received(self, signal_name: str, core_dumped: bool, msg: str, lang: str) -> None:
        number = getattr(signal, f"SIG{signal_name}", None)
        self.exit_status = -int(number) if number is not None else 128 + 64  # an unknown signal
        self._notify()

    def pause_writing(self) -> None:
        self._writable = anyio.Event()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.exit_status is None:
            self.lost = exc or ConnectionError("the channel closed without an exit status")
        self.closed = True
        self._ended = [True, True]
        self._writable.set()
        self._notify()
        self._run_on_closed()

    # for the streams ------------------------------------------------------------------

    async def receive(self, kind: int, max_bytes: int) -> bytes:
        while True:
            buffer = self._buffers[kind]
            if buffer:
                chunk = buffer.popleft()
                if len(chunk) > max_bytes:
                    chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
                    buffer.appendleft(rest)
                self._drained(len(chunk))
                return chunk
            if self._ended[kind]:
                raise anyio.EndOfStream
            await self._changed.wait()

    def _drained(self, size: int) -> None:
        self._buffered -= size
        if self._paused and self._buffered <= _BUFFER_LIMIT // 2 and self.channel is not None:
            self._paused = False
            self.channel.resume_reading()

    def push_back(self, kind: int, data: bytes) -> None:
        if data:
            self._buffers[kind].appendleft(data)
            self._buffered += len(data)

    def end(self, kind: int) -> None:
        """``kind`` has ended on the host: what is buffered is still read, then EOF."""
        self._ended[kind] = self._discard[kind] = True
        self._notify()

    def discard(self, kind: int) -> None:
        """The reader of ``kind`` is gone: drop what is buffered and what still comes."""
        self._discard[kind] = True
        self._drained(sum(map(len, self._buffers[kind])))
        self._buffers[kind].clear()

    async def send(self, data: bytes) -> None:
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

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    async def collect(self, kind: int) -> bytes:
        """Everything the stream ``kind`` still sends."""
        data = bytearray()
        with suppress(anyio.EndOfStream):
            while True:
                data += await self.receive(kind, 1 << 20)
        return bytes(data)


async def open_session(connection: asyncssh.SSHClientConnection, command: str) -> Session:
    """Start ``command`` in a new session of ``connection`` (asyncssh's errors unmapped)."""
    _, session = await connection.create_session(
        Session, command, encoding=None, window=_WINDOW, max_pktsize=_MAX_PACKET
    )
    return cast(Session, session)


class _Output(ByteReceiveStream):
    def __init__(self, session: Session, kind: int) -> None:
        self._session = session
        self._kind = kind

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._session.receive(self._kind, max_bytes)

    async def aclose(self) -> None:
        self._session.discard(self._kind)


class _Input(ByteSendStream):
    """Closing sends EOF: the process's stdin ends, its output keeps coming."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._closed = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._session.send(item)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._session.write_eof()


Signal = Callable[[str], Awaitable[None]]


class SshProcess(SpawnedProcess):
    """A process on an SSH host; ``pid`` is its process id there (it leads its process
    group). A process killed by signal N reports ``-N`` (sshd reports the signal).

    When the connection drops before the exit status arrives, the output streams end and
    :meth:`wait` raises :class:`~nodeprov.errors.NodeGoneError`: the process is out of reach
    (and ends by itself if it reads its stdin, which closed; see
    :func:`~nodeprov.spawn.guard_stdin` for agents that do not).
    """

    def __init__(
        self,
        session: Session,
        *,
        host: str,
        pid: int,
        stdout: ByteReceiveStream | None,
        signal_group: Signal,
        stop_policy: StopPolicy,
    ) -> None:
        super().__init__(stop_policy)
        self.pid = pid
        self._host = host
        self._session = session
        self.stdin = _Input(session)
        self.stdout = stdout or _Output(session, STDOUT)
        self.stderr = _Output(session, STDERR)
        self._signal_group = signal_group
        self._signalled = ""

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

    async def terminate(self) -> None:
        if self.returncode is None:
            if self._session.lost is not None:
                await self.kill()  # out of reach: one signal, through a new connection, is all it gets
            elif not self._signalled:
                self._signalled = "TERM"
                await self._signal_group("TERM")

    async def kill(self) -> None:
        if self.returncode is None and self._signalled != "KILL":
            self._signalled = "KILL"
            await self._signal_group("KILL")

    async def _release(self) -> None:
        if self._signalled == "TERM":
            await self._signal_group("KILL")  # what it started may have ignored SIGTERM
        await super()._release()
        self._session.close()
