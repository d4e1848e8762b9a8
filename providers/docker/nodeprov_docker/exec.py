"""An exec in a container as a :class:`~nodeprov.spawn.SpawnedProcess`.

The exec's stdin and its multiplexed output share one hijacked Engine API socket. Output
frames are ``[kind, 0, 0, 0, size (4 bytes, big-endian)]`` followed by ``size`` bytes; kind 1
is stdout, 2 stderr (3, an engine error, is treated as stderr). :class:`ExecOutput` splits them
lazily: whichever stream is read pulls frames off the socket and queues what belongs to the
other, so no background task is needed.

The protocol has no end for one stream while the other goes on: a process that closes its
stdout and keeps running sends nothing to say so. So when stdout has been quiet for a while,
the process asks the node whether anything still holds the exec's stdout pipe; when nothing
does, stdout ends, as a pipe would (see :class:`~nodeprov.spawn.ReleasedStdout`).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketStream

from nodeprov.errors import NodeGoneError
from nodeprov.spawn import ReleasedStdout, SpawnedProcess, StopPolicy

STDOUT, STDERR = 1, 2
_QUEUE_LIMIT = 8 * 1024 * 1024  # bytes held for a stream nobody is reading, before reading pauses
_READ_SIZE = 256 * 1024


class ExecOutput:
    """The stdout and stderr of one exec, split out of its multiplexed socket on demand.

    Frames are parsed in place from large socket reads (a payload is copied once, to be
    handed out); a piece for the stream being read is handed over directly, a piece for the
    other one queued (up to a limit, then reading waits, as a full pipe would).
    """

    def __init__(self, socket: SocketStream) -> None:
        self._socket = socket
        self._data = b""  # the last socket read, parsed up to _position
        self._position = 0
        self._lock = anyio.Lock()
        self._queues: dict[int, deque[bytes]] = {STDOUT: deque(), STDERR: deque()}
        self._queued = {STDOUT: 0, STDERR: 0}
        self._discard = {STDOUT: False, STDERR: False}
        self._ended = {STDOUT: False, STDERR: False}
        self._drained = anyio.Event()
        self._kind = 0
        self._left = 0  # payload bytes of the current frame still to come
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

    def end(self, kind: int) -> None:
        """``kind`` has ended on the node: what is queued is still read, then EOF."""
        self._ended[kind] = self._discard[kind] = True

    async def receive(self, kind: int, max_bytes: int) -> bytes:
        other = STDERR if kind == STDOUT else STDOUT
        while True:
            queue = self._queues[kind]
            if queue:
                return self._take(kind, queue.popleft(), max_bytes)
            if self.eof or self._ended[kind]:
                raise anyio.EndOfStream
            if self._queued[other] > _QUEUE_LIMIT:
                # Like a full pipe: wait for the other stream's reader to catch up.
                self._drained = anyio.Event()
                await self._drained.wait()
                continue
            async with self._lock:
                if self._queues[kind] or self.eof:
                    continue
                piece = self._parse()
                if piece is None:
                    await self._fill()
                    continue
                frame_kind = STDOUT if self._kind == STDOUT else STDERR
                if frame_kind == kind:
                    return self._take(kind, piece, max_bytes, queued=False)
                if not self._discard[frame_kind]:
                    self._queues[frame_kind].append(piece)
                    self._queued[frame_kind] += len(piece)

    def _take(self, kind: int, chunk: bytes, max_bytes: int, *, queued: bool = True) -> bytes:
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            self._queues[kind].appendleft(rest)
            self._queued[kind] += len(rest)
        if queued:
            self._queued[kind] -= len(chunk)
            self._drained.set()
        return chunk

    def _parse(self) -> bytes | None:
        """The next piece of frame payload already read, or None if more must be read."""
        data, position = self._data, self._position
        while self._left == 0:
            if len(data) - position < 8:
                return None
            self._kind, self._left = data[position], int.from_bytes(data[position + 4 : position + 8], "big")
            position += 8
            self._position = position
        size = min(self._left, len(data) - position)
        if size == 0:
            return None
        # One copy of the payload (none when a read holds exactly one frame's rest).
        piece = data[position : position + size]
        self._position = position + size
        self._left -= size
        return piece

    async def _fill(self) -> None:
        try:
            received = await self._socket.receive(_READ_SIZE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.eof = True  # a frame cut short by the end is dropped with it
            self._drained.set()
            return
        # What is left unparsed is at most a frame header cut in two by the read.
        rest = self._data[self._position :]
        self._data, self._position = (rest + received if rest else received), 0


class _Output(ByteReceiveStream):
    def __init__(self, demux: ExecOutput, kind: int) -> None:
        self._demux = demux
        self._kind = kind

    async def receive(self, max_bytes: int = 65536) -> bytes:
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


Held = Callable[[], Awaitable[bool]]
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
        stdout_held: Held | None = None,
    ) -> None:
        super().__init__(stop_policy)
        self.pid = pid
        self._socket = socket
        self._demux = output
        self.stdin = _Input(socket)
        self.stdout: ByteReceiveStream = _Output(self._demux, STDOUT)
        if stdout_held is not None:
            self.stdout = ReleasedStdout(
                functools.partial(self._demux.receive, STDOUT),
                held=stdout_held,
                end=functools.partial(self._demux.end, STDOUT),
                close=self.stdout.aclose,
            )
        self.stderr = _Output(self._demux, STDERR)
        self._exit_code = exit_code
        self._signal_group = signal_group
        self._returncode: int | None = None
        self._signalled = ""

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        delay = 0.005
        while self._returncode is None:
            try:
                self._returncode = await self._exit_code()
            except NodeGoneError:
                self._returncode = 128 + 9  # removed with its container: killed, as the engine reports it
                raise
            if self._returncode is None:
                await anyio.sleep(delay)  # the engine has no "exec exited" event to wait on
                delay = min(delay * 2, 0.2)
        return self._returncode

    async def terminate(self) -> None:
        if self._returncode is None:
            self._signalled = "TERM"
            await self._signal_group("TERM")

    async def kill(self) -> None:
        if self._returncode is None:
            self._signalled = "KILL"
            await self._signal_group("KILL")

    async def discard(self) -> None:
        if self._returncode is None:
            self._returncode = 128 + 9  # removed with its container: killed, as the engine reports it
        await super().discard()

    async def _release(self) -> None:
        if self._signalled == "TERM":
            # Stopped by SIGTERM: what it started may have ignored it. (A process that ends
            # on its own keeps its background children until the node goes: an exec per
            # process to sweep them would double the cost of every short spawn.)
            await self._signal_group("KILL")
        await self._socket.aclose()
