"""A process started through a pod's exec subresource, as a :class:`~nodeprov.spawn.SpawnedProcess`.

The API server upgrades ``GET .../pods/NAME/exec?command=...&stdin=true&stdout=true&stderr=true``
to a websocket whose binary messages begin with a channel byte: 0 stdin, 1 stdout, 2 stderr,
3 the status (a JSON ``Status`` once the process has exited), 4 a terminal resize.
``v5.channel.k8s.io`` (Kubernetes 1.30 and later) adds 255, a close signal: ``[255, 0]``
ends the process's stdin. ``v4.channel.k8s.io`` cannot end stdin short of closing the
connection, which ends the output too: there the preamble relays stdin through a FIFO
(:data:`~nodeprov.preamble.RELAYED_PREAMBLE`), and closing stdin ends the relay once it has
passed on every byte, through a second exec.

:class:`ExecChannel` splits the messages on demand: whichever stream is read pulls messages
off the websocket and queues what belongs to the other (up to a limit, then reading waits,
as a full pipe would), so no background task is needed. Neither protocol ends stdout apart
from stderr: a process that closes its stdout and goes on is noticed by asking the pod
whether anything still holds the pipe (:class:`~nodeprov.spawn.ReleasedStdout`).
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import aiohttp
import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from nodeprov.errors import NodeGoneError
from nodeprov.spawn import ReleasedStdout, SpawnedProcess, StopPolicy

STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255
V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
PROTOCOLS = (V5, V4)
"""Offered in this order: v5 where the API server speaks it, else v4."""
_QUEUE_LIMIT = 8 * 1024 * 1024  # bytes held for a stream nobody is reading, before reading pauses
_SEND_SIZE = 1024 * 1024  # the largest stdin message
_ENDS = (
    aiohttp.WSMsgType.CLOSE,
    aiohttp.WSMsgType.CLOSING,
    aiohttp.WSMsgType.CLOSED,
    aiohttp.WSMsgType.ERROR,
)


class ExecChannel:
    """One exec's websocket: stdin out; stdout, stderr and the status in (see the module).

    ``protocol`` is what the API server agreed to; ``sent`` counts the bytes of the
    process's own stdin (see :meth:`send`); ``status`` is the status message once it came,
    ``closed`` whether the websocket has ended.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.protocol = ws.protocol or V4
        self.sent = 0
        self.status: dict[str, Any] | None = None
        self.closed = False
        self._lock = anyio.Lock()
        self._queues: dict[int, deque[bytes]] = {STDOUT: deque(), STDERR: deque()}
        self._queued = {STDOUT: 0, STDERR: 0}
        self._discard = {STDOUT: False, STDERR: False}
        self._ended = {STDOUT: False, STDERR: False}
        self._drained = anyio.Event()

    async def send(self, data: bytes, *, counted: bool = True) -> None:
        """Send ``data`` to the process's stdin; ``counted`` adds it to :attr:`sent`.

        Raises ``anyio.BrokenResourceError`` when the websocket is gone."""
        try:
            for start in range(0, len(data), _SEND_SIZE):
                await self._ws.send_bytes(b"\x00" + data[start : start + _SEND_SIZE])
        except (aiohttp.ClientError, ConnectionError, RuntimeError):
            raise anyio.BrokenResourceError from None
        if counted:
            self.sent += len(data)

    async def close_stdin(self) -> None:
        """End the process's stdin (v5 only); nothing if the websocket is gone."""
        with suppress(aiohttp.ClientError, ConnectionError, RuntimeError):
            await self._ws.send_bytes(bytes([CLOSE, STDIN]))

    def push_back(self, kind: int, data: bytes) -> None:
        if data:
            self._queues[kind].appendleft(data)
            self._queued[kind] += len(data)

    def end(self, kind: int) -> None:
        """``kind`` has ended in the pod: what is queued is still read, then EOF."""
        self._ended[kind] = self._discard[kind] = True

    def discard(self, kind: int) -> None:
        """The reader of ``kind`` is gone: drop what is queued and what still comes."""
        self._discard[kind] = True
        self._queues[kind].clear()
        self._queued[kind] = 0
        self._drained.set()

    async def receive(self, kind: int, max_bytes: int) -> bytes:
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
            if self._ended[kind] or self.closed:
                raise anyio.EndOfStream
            await self._pull(lambda: bool(self._queues[kind]) or self._ended[kind])

    async def collect(self, kind: int) -> bytes:
        """Everything the stream ``kind`` still sends."""
        data = bytearray()
        with suppress(anyio.EndOfStream):
            while True:
                data += await self.receive(kind, 1 << 20)
        return bytes(data)

    async def exited(self) -> None:
        """Wait for the status, or the end of the websocket."""
        while self.status is None and not self.closed:
            await self._pull(lambda: self.status is not None)

    async def _pull(self, satisfied: Callable[[], bool]) -> None:
        """Read one message off the websocket and route it (or let another reader do it)."""
        if any(queued > _QUEUE_LIMIT for queued in self._queued.values()):
            self._drained = anyio.Event()  # like a full pipe: wait for that stream's reader
            await self._drained.wait()
            return
        async with self._lock:
            if satisfied() or self.closed:
                return
            message = await self._ws.receive()  # cancellable: an unread message stays queued
        if message.type is aiohttp.WSMsgType.BINARY and message.data:
            channel, payload = message.data[0], message.data[1:]
            if channel in (STDOUT, STDERR) and payload and not self._discard[channel]:
                self._queues[channel].append(payload)
                self._queued[channel] += len(payload)
            elif channel == STATUS:
                with suppress(ValueError):
                    self.status = json.loads(payload)
            elif channel == CLOSE and payload and payload[0] in (STDOUT, STDERR):
                self._ended[payload[0]] = True
        elif message.type in _ENDS:
            self.closed = True
            self._drained.set()

    async def aclose(self) -> None:
        self.closed = True
        self._drained.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(2), suppress(aiohttp.ClientError, OSError):
            await self._ws.close()


def exit_status(status: dict[str, Any]) -> int | None:
    """The exit status a status message reports, or ``None`` for a failure that is not one
    (the exec itself failed: its ``message`` says why)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or ():
            if cause.get("reason") == "ExitCode":
                with suppress(TypeError, ValueError):
                    return int(cause.get("message"))
    return None


class _Output(ByteReceiveStream):
    def __init__(self, channel: ExecChannel, kind: int) -> None:
        self._channel = channel
        self._kind = kind

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._channel.receive(self._kind, max_bytes)

    async def aclose(self) -> None:
        self._channel.discard(self._kind)


EndStdin = Callable[[int], Awaitable[None]]
"""Ends a v4 exec's stdin relay once it has passed on this many bytes."""


class _Input(ByteSendStream):
    """Closing sends EOF: v5's close signal, or v4's relay ended (see the module)."""

    def __init__(self, channel: ExecChannel, end_relay: EndStdin | None) -> None:
        self._channel = channel
        self._end_relay = end_relay
        self._closed = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._channel.send(item)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._channel.protocol == V5:
            await self._channel.close_stdin()
        elif self._end_relay is not None and not self._channel.closed:
            await self._end_relay(self._channel.sent)


Signal = Callable[[str], Awaitable[None]]
Held = Callable[[], Awaitable[bool]]
Lost = Callable[[int | None], Awaitable[NodeGoneError | None]]
"""Whether the pod is gone (given the exit status, if one came): the error to raise, or None."""


class PodProcess(SpawnedProcess):
    """A process in a pod; ``pid`` is its process id there (it leads its process group).

    A process ended by signal N reports ``128 + N``, as the container runtime does. When the
    websocket ends without a status (the pod deleted, the API server gone), the output
    streams end and :meth:`wait` raises :class:`~nodeprov.errors.NodeGoneError`; so does an
    exit by signal while the pod is being deleted.
    """

    def __init__(
        self,
        channel: ExecChannel,
        *,
        pid: int,
        signal_group: Signal,
        lost: Lost,
        stop_policy: StopPolicy,
        end_relay: EndStdin | None = None,
        stdout_held: Held | None = None,
    ) -> None:
        super().__init__(stop_policy)
        self.pid = pid
        self._channel = channel
        self.stdin = _Input(channel, end_relay)
        self.stdout: ByteReceiveStream = _Output(channel, STDOUT)
        if stdout_held is not None:
            self.stdout = ReleasedStdout(
                functools.partial(channel.receive, STDOUT),
                held=stdout_held,
                end=functools.partial(channel.end, STDOUT),
                close=self.stdout.aclose,
            )
        self.stderr = _Output(channel, STDERR)
        self._signal_group = signal_group
        self._lost = lost
        self._returncode: int | None = None
        self._signalled = ""

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        if self._returncode is not None:
            return self._returncode
        await self._channel.exited()
        status = self._channel.status
        code = None if status is None else exit_status(status)
        if code is None or code > 128:
            gone = await self._lost(code)
            if gone is not None:
                self._returncode = 128 + 9  # removed with its pod: killed, as the runtime reports it
                raise gone
        if code is None:
            self._returncode = 128 + 9
            said = (status or {}).get("message") or "no status"
            raise NodeGoneError(f"the exec of process {self.pid} ended without an exit status ({said})")
        self._returncode = code
        return code

    async def terminate(self) -> None:
        if self._returncode is None:
            if self._channel.closed:
                await self.kill()  # out of reach: one signal is all it gets
            elif not self._signalled:
                self._signalled = "TERM"
                await self._signal_group("TERM")

    async def kill(self) -> None:
        if self._returncode is None and self._signalled != "KILL":
            self._signalled = "KILL"
            await self._signal_group("KILL")

    async def discard(self) -> None:
        if self._returncode is None:
            self._returncode = 128 + 9  # removed with its pod: killed, as the runtime reports it
        await super().discard()

    async def _release(self) -> None:
        if self._signalled == "TERM":
            await self._signal_group("KILL")  # what it started may have ignored SIGTERM
        await super()._release()
        await self._channel.aclose()
