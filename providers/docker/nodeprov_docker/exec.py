"""An exec in a container as a :class:`~nodeprov.spawn.SpawnedProcess`.

The exec's stdin and its multiplexed output share one hijacked Engine API socket. Output
frames are ``[kind, 0, 0, 0, size (4 bytes, big-endian)]`` followed by ``size`` bytes; kind 1
is stdout, 2 stderr (3, an engine error, is treated as stderr). :class:`ExecOutput` splits them
lazily: whichever stream is read pulls frames off the socket and queues what belongs to the
other, so no background task is needed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from nodeprov.spawn import SpawnedProcess, StopPolicy

STDOUT, STDERR = 1, 2
_QUEUE_LIMIT = 8 * 1024 * 1024  # bytes held for a stream nobody is reading, before reading pauses
_READ_SIZE = 65536


class ExecOutput:
    def __init__(self, socket: SocketStream) -> None:
        self._buffered = BufferedByteReceiveStream(socket)
        self._lock = anyio.Lock()
        self._queues: dict[int, deque[bytes]] = {STDOUT: deque(), STDERR: deque()}
        self._queued = {STDOUT: 0, STDERR: 0}
        self._discard = {STDOUT: False, STDERR: False}
        self._drained = anyio.Event()
        self._kind = 0
        self._left = 0
        self.eof = False

    def push_back(self, kind: int, data: bytes) -> None:
        if data:
            self._queues[kind].appendleft(data)
            self._queued[kind] += len(data)

    def discard(self, kind: int) -> None:
        """The reader of ``kind`` is gone: drop what is queued and what still comes."""
        self._discard[kind] = True
        self._queues[kind].clear()
        self._queued[kind] = 0
        self._drained.set()

    async def receive(self, kind: int, max_bytes: int) -> bytes:
        other = STDERR if kind == STDOUT else STDOUT
        while True:
            queue = self._queues[kind]
            if queue:
                chunk = queue.popleft()
                if len(chunk) > max_bytes:
                    chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
                    queue.appendleft(rest)
                self._queued[kind] -= len(chunk)
                self._drained.set()
                return chunk
            if self.eof:
                raise anyio.EndOfStream
            if self._queued[other] > _QUEUE_LIMIT:
                # Like a full pipe: wait for the other stream's reader to catch up.
                self._drained = anyio.Event()
                await self._drained.wait()
                continue
            async with self._lock:
                if self._queues[kind] or self.eof:
                    continue
                piece = await self._next_piece()
                if piece is None:
                    continue
                frame_kind = STDOUT if self._kind == STDOUT else STDERR
                if frame_kind == kind:
                    self.push_back(kind, piece)
                elif not self._discard[frame_kind]:
                    self._queues[frame_kind].append(piece)
                    self._queued[frame_kind] += len(piece)

    async def _next_piece(self) -> bytes | None:
        """The next piece of frame payload; None after reading a header or at the end."""
        try:
            if self._left == 0:
                header = await self._buffered.receive_exactly(8)
                self._kind, self._left = header[0], int.from_bytes(header[4:8], "big")
                return None
            chunk = await self._buffered.receive(min(self._left, _READ_SIZE))
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            self.eof = True
            self._drained.set()
            return None
        self._left -= len(chunk)
        return chunk


class _Output(ByteReceiveStream):
    def __init__(self, demux: ExecOutput, kind: int) -> None:
        self._demux = demux
        self._kind = kind

    async def receive(self, max_bytes: int = _READ_SIZE) -> bytes:
        return await self._demux.receive(self._kind, max_bytes)

    async def aclose(self) -> None:
        self._demux.discard(self._kind)


class _Input(ByteSendStream):
    """Closing sends EOF (a half-close): the exec's stdin ends, its output keeps coming."""

    def __init__(self, socket: SocketStream) -> None:
        self._socket = socket
        self._closed = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._socket.send(item)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # A gone connection means the process's stdin is gone too.
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._socket.send_eof()


Signal = Callable[[str], Awaitable[None]]
ExitCode = Callable[[], Awaitable[int | None]]


class DockerProcess(SpawnedProcess):
    """A process started by an exec; ``pid`` is its process id inside the container.

    A process ended by signal N reports ``128 + N``, as the engine does.
    """

    def __init__(
        self,
        socket: SocketStream,
        output: ExecOutput,
        *,
        pid: int,
        exit_code: ExitCode,
        signal_group: Signal,
        stop_policy: StopPolicy,
    ) -> None:
        super().__init__(stop_policy)
        self.pid = pid
        self._socket = socket
        self._demux = output
        self.stdin = _Input(socket)
        self.stdout = _Output(self._demux, STDOUT)
        self.stderr = _Output(self._demux, STDERR)
        self._exit_code = exit_code
        self._signal_group = signal_group
        self._returncode: int | None = None

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        delay = 0.005
        while self._returncode is None:
            self._returncode = await self._exit_code()
            if self._returncode is None:
                await anyio.sleep(delay)  # the engine has no "exec exited" event to wait on
                delay = min(delay * 2, 0.2)
        return self._returncode

    async def terminate(self) -> None:
        if self._returncode is None:
            await self._signal_group("TERM")

    async def kill(self) -> None:
        if self._returncode is None:
            await self._signal_group("KILL")

    async def _release(self) -> None:
        await self._signal_group("KILL")  # what the process left running in its group
        await self._socket.aclose()
