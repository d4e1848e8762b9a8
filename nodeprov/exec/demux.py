"""The standard streams of a process behind an exec channel that carries them together:
:class:`Demux` keeps stdout and stderr apart, :class:`Output` and :class:`Input` are the
byte streams a :class:`~nodeprov.spawn.SpawnedProcess` hands out.

A subclass adds only how bytes come off its transport (:meth:`Demux._pull`, and
:meth:`Demux._deliver` for what came) and how the channel closes (:meth:`Demux.aclose`).
Whichever stream is read brings in what the channel says and queues what belongs to the
other, so no background task is needed; a stream nobody reads holds a bounded amount before
the channel stops being read, as a full pipe would stop its writer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

__all__ = ["QUEUE_LIMIT", "STDERR", "STDOUT", "Demux", "Input", "Output"]

STDOUT, STDERR = 1, 2
"""The two output streams, by their descriptor numbers."""
QUEUE_LIMIT = 8 * 1024 * 1024
"""Bytes held for a stream nobody is reading before :meth:`Demux._wait_for_room` waits."""


class Demux(ABC):
    """The stdout and stderr of one exec channel, split on demand.

    ``receive(kind)`` hands out what is queued for ``kind`` (``STDOUT`` or ``STDERR``), else
    asks the subclass for more (:meth:`_pull`); after :meth:`end` or once the channel is
    :attr:`closed`, it reads out what is queued, then raises ``anyio.EndOfStream``.
    """

    def __init__(self) -> None:
        self._queues: dict[int, deque[bytes]] = {STDOUT: deque(), STDERR: deque()}
        self._queued = {STDOUT: 0, STDERR: 0}
        self._discarded = {STDOUT: False, STDERR: False}
        self._ended = {STDOUT: False, STDERR: False}
        self._drained = anyio.Event()
        self.closed = False
        """The channel has ended (or was closed here): no stream gets more."""

    @abstractmethod
    async def _pull(self, kind: int) -> None:
        """Bring in more of the channel, or wait until there is more, for a reader of
        ``kind`` that found its queue empty: return once something changed (bytes
        delivered, a stream ended, the channel closed), or to have the reader look again."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the channel: every stream ends once its queue is read. Never raises."""

    def _wake(self) -> None:  # noqa: B027 - a hook: a transport read on demand needs no waking
        """Something changed (bytes came, a stream ended): a subclass whose :meth:`_pull`
        waits for its transport's callbacks wakes it here."""

    def _drain(self) -> None:
        """Queued bytes were read or dropped: a reader waiting for room may go on."""
        self._drained.set()

    def _deliver(self, kind: int, data: bytes) -> None:
        """Queue ``data`` that came for ``kind`` (dropped if its reader is gone)."""
        if data and not self._discarded[kind]:
            self._queues[kind].append(data)
            self._queued[kind] += len(data)
            self._wake()

    def _close(self) -> None:
        """The channel has ended: every reader gets what is queued, then EOF."""
        self.closed = True
        self._drain()
        self._wake()

    async def _wait_for_room(self) -> bool:
        """For a subclass that reads its transport on demand, before it reads: while a
        stream holds more than :data:`QUEUE_LIMIT` unread, wait for its reader, as a writer
        to a full pipe would. Whether it waited (the caller then looks again)."""
        if all(queued <= QUEUE_LIMIT for queued in self._queued.values()):
            return False
        self._drained = anyio.Event()
        await self._drained.wait()
        return True

    def ready(self, kind: int) -> bool:
        """Whether :meth:`receive` of ``kind`` returns at once: bytes are queued, or it has ended."""
        return bool(self._queues[kind]) or self._ended[kind] or self.closed

    def push_back(self, kind: int, data: bytes) -> None:
        """Put ``data`` back in front of ``kind``'s queue (read ahead, but not consumed)."""
        if data:
            self._queues[kind].appendleft(data)
            self._queued[kind] += len(data)

    def end(self, kind: int) -> None:
        """``kind`` has ended on the node: what is queued is still read, then EOF."""
        self._ended[kind] = self._discarded[kind] = True
        self._wake()

    def discard(self, kind: int) -> None:
        """The reader of ``kind`` is gone: drop what is queued and what still comes."""
        self._discarded[kind] = True
        self._queues[kind].clear()
        self._queued[kind] = 0
        self._drain()

    async def receive(self, kind: int, max_bytes: int) -> bytes:
        """The next bytes of ``kind``, at most ``max_bytes``.

        Raises:
            anyio.EndOfStream: ``kind`` has ended, or the channel closed, and its queue is read.
        """
        queue = self._queues[kind]
        while not queue:
            if self._ended[kind] or self.closed:
                raise anyio.EndOfStream
            await self._pull(kind)
        chunk = queue.popleft()
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            queue.appendleft(rest)
        self._queued[kind] -= len(chunk)
        self._drain()
        return chunk

    async def collect(self, kind: int) -> bytes:
        """Everything the stream ``kind`` still sends, until its end."""
        data = bytearray()
        with suppress(anyio.EndOfStream):
            while True:
                data += await self.receive(kind, 1 << 20)
        return bytes(data)


class Output(ByteReceiveStream):
    """One output stream of a :class:`Demux`; closing it drops what it would still get."""

    def __init__(self, demux: Demux, kind: int) -> None:
        self._demux = demux
        self._kind = kind

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._demux.receive(self._kind, max_bytes)

    async def aclose(self) -> None:
        self._demux.discard(self._kind)


class Input(ByteSendStream):
    """A process's stdin over a channel: ``send`` writes to it; closing (once) calls
    ``close``, which ends it as the transport can (a half-close, a close signal), while the
    output keeps coming. Sending after closing raises ``anyio.ClosedResourceError``; ``send``
    raises ``anyio.BrokenResourceError`` when the channel is gone."""

    def __init__(
        self, send: Callable[[bytes], Awaitable[None]], close: Callable[[], Awaitable[None]]
    ) -> None:
        self._send = send
        self._close = close
        self._closed = False

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        await self._send(item)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._close()
