"""An exec in a container as a :class:`~nodeprov.spawn.SpawnedProcess`.

The exec's stdin and its multiplexed output share one hijacked Engine API socket. Output
frames are ``[kind, 0, 0, 0, size (4 bytes, big-endian)]`` followed by ``size`` bytes; kind 1
is stdout, 2 stderr (3, an engine error, is treated as stderr). :class:`ExecOutput` splits them
lazily (a :class:`~nodeprov.exec.Demux`): whichever stream is read pulls frames off the socket
and queues what belongs to the other, so no background task is needed.

The protocol has no end for one stream while the other goes on: a process that closes its
stdout and keeps running sends nothing to say so. So when stdout has been quiet for a while,
the process asks the node whether anything still holds the exec's stdout pipe; when nothing
does, stdout ends, as a pipe would (see :class:`~nodeprov.exec.ReleasedStdout`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Unpack

import anyio
from anyio.abc import SocketStream

from nodeprov.errors import NodeGoneError
from nodeprov.exec import KILLED, STDERR, STDOUT, Demux, GroupArgs, GroupProcess, Input

__all__ = ["DockerProcess", "ExecOutput"]

_READ_SIZE = 256 * 1024


class ExecOutput(Demux):
    """The stdout and stderr of one exec, split out of its multiplexed socket on demand.

    Frames are parsed in place from large socket reads, a read's payloads for one stream
    handed out as one piece. :meth:`aclose` closes the socket.
    """

    def __init__(self, socket: SocketStream) -> None:
        super().__init__()
        self._socket = socket
        self._data = b""  # the last socket read, parsed up to _position
        self._position = 0
        self._lock = anyio.Lock(fast_acquire=True)  # taken per read: no yield when free
        self._kind = 0
        self._left = 0  # payload bytes of the current frame still to come

    async def _pull(self, kind: int) -> None:
        if await self._wait_for_room():
            return
        async with self._lock:
            if self._queues[kind] or self.closed:
                return  # another reader brought it meanwhile
            if not self._split():
                await self._fill()

    def _split(self) -> bool:
        """Queue what the last read holds of frame payloads, each stream's joined into one
        piece (copied once; its reader takes one piece, not one per frame of often 32 KiB),
        and whether anything was."""
        data, position = self._data, self._position
        cuts: dict[int, list[tuple[int, int]]] = {STDOUT: [], STDERR: []}
        while True:
            while self._left == 0:
                if len(data) - position < 8:
                    break
                self._kind, self._left = (
                    data[position],
                    int.from_bytes(data[position + 4 : position + 8], "big"),
                )
                position += 8
            size = min(self._left, len(data) - position)
            if size == 0:
                break
            cuts[STDOUT if self._kind == STDOUT else STDERR].append((position, position + size))
            position += size
            self._left -= size
        self._position = position
        for kind, spans in cuts.items():
            if len(spans) == 1:
                ((begin, end),) = spans
                self._deliver(kind, data if (begin, end) == (0, len(data)) else data[begin:end])
            elif spans:
                view = memoryview(data)
                self._deliver(kind, b"".join([view[begin:end] for begin, end in spans]))
        return bool(cuts[STDOUT] or cuts[STDERR])

    async def _fill(self) -> None:
        try:
            received = await self._socket.receive(_READ_SIZE)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._close()  # a frame cut short by the end is dropped with it
            return
        # What is left unparsed is at most a frame header cut in two by the read.
        rest = self._data[self._position :]
        self._data, self._position = (rest + received if rest else received), 0

    async def send(self, data: bytes) -> None:
        """Send ``data`` to the exec's stdin (anyio's errors when the connection is gone)."""
        await self._socket.send(data)

    async def send_eof(self) -> None:
        """End the exec's stdin (a half-close): its output keeps coming. Nothing if the
        connection is gone, which took the process's stdin with it."""
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._socket.send_eof()

    async def aclose(self) -> None:
        self._close()
        await self._socket.aclose()


ExitCode = Callable[[], Awaitable[int | None]]
"""The exec's exit status, or None while it runs (may raise NodeGoneError)."""


class DockerProcess(GroupProcess):
    """A process started by an exec; ``pid`` is its process id inside the container.

    A process ended by signal N reports ``128 + N``, as the engine does.
    """

    def __init__(self, output: ExecOutput, *, exit_code: ExitCode, **process: Unpack[GroupArgs]) -> None:
        super().__init__(output, Input(output.send, output.send_eof), **process)
        self._exit_code = exit_code

    def _reachable(self) -> bool:
        # Its exit status comes from the engine, not the exec's socket: it can always be seen.
        return True

    async def wait(self) -> int:
        delay = 0.005
        while self._returncode is None:
            try:
                self._returncode = await self._exit_code()
            except NodeGoneError:
                self._returncode = KILLED  # removed with its container, as the engine reports it
                raise
            if self._returncode is None:
                await anyio.sleep(delay)  # the engine has no "exec exited" event to wait on
                delay = min(delay * 2, 0.2)
        return self._returncode
