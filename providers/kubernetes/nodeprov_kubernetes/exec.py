"""A process started through a pod's exec subresource, as a :class:`~nodeprov.spawn.SpawnedProcess`.

The API server upgrades ``GET .../pods/NAME/exec?command=...&stdin=true&stdout=true&stderr=true``
to a websocket whose binary messages begin with a channel byte: 0 stdin, 1 stdout, 2 stderr,
3 the status (a JSON ``Status`` once the process has exited), 4 a terminal resize.
``v5.channel.k8s.io`` (Kubernetes 1.30 and later) adds 255, a close signal: ``[255, 0]``
ends the process's stdin. ``v4.channel.k8s.io`` cannot end stdin short of closing the
connection, which ends the output too: there the preamble relays stdin through a FIFO
(:data:`~nodeprov.exec.RELAYED_PREAMBLE`), and closing stdin ends the relay once it has
passed on every byte, through a second exec.

:class:`ExecChannel` splits the messages on demand (a :class:`~nodeprov.exec.Demux`):
whichever stream is read pulls messages off the websocket and queues what belongs to the
other, so no background task is needed. Neither protocol ends stdout apart from stderr: a
process that closes its stdout and goes on is noticed by asking the pod whether anything
still holds the pipe (:class:`~nodeprov.exec.ReleasedStdout`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, Unpack

import aiohttp
import anyio

from nodeprov.errors import NodeGoneError
from nodeprov.exec import KILLED, STDERR, STDOUT, Demux, GroupArgs, GroupProcess, Input

__all__ = ["PROTOCOLS", "V4", "V5", "EndStdin", "ExecChannel", "Lost", "PodProcess", "exit_status"]

STDIN, STATUS, CLOSE = 0, 3, 255
V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
PROTOCOLS = (V5, V4)
"""Offered in this order: v5 where the API server speaks it, else v4."""
_SEND_SIZE = 1024 * 1024  # the largest stdin message
_ENDS = (
    aiohttp.WSMsgType.CLOSE,
    aiohttp.WSMsgType.CLOSING,
    aiohttp.WSMsgType.CLOSED,
    aiohttp.WSMsgType.ERROR,
)


class ExecChannel(Demux):
    """One exec's websocket: stdin out; stdout, stderr and the status in (see the module).

    ``protocol`` is what the API server agreed to; ``sent`` counts the bytes of the
    process's own stdin (see :meth:`send`); ``status`` is the status message once it came,
    ``closed`` whether the websocket has ended.
    """

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        super().__init__()
        self._ws = ws
        self.protocol = ws.protocol or V4
        self.sent = 0
        self.status: dict[str, Any] | None = None
        self._lock = anyio.Lock(fast_acquire=True)  # taken per message: no yield when free

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

    async def exited(self) -> None:
        """Wait for the status, or the end of the websocket."""
        while self.status is None and not self.closed:
            await self._read(lambda: self.status is not None)

    async def _pull(self, kind: int) -> None:
        await self._read(lambda: bool(self._queues[kind]) or self._ended[kind])

    async def _read(self, satisfied: Callable[[], bool]) -> None:
        """Read one message off the websocket and route it (or let another reader do it)."""
        if await self._wait_for_room():
            return
        async with self._lock:
            if satisfied() or self.closed:
                return
            message = await self._ws.receive()  # cancellable: an unread message stays queued
        if message.type is aiohttp.WSMsgType.BINARY and message.data:
            channel, payload = message.data[0], message.data[1:]
            if channel in (STDOUT, STDERR):
                self._deliver(channel, payload)
            elif channel == STATUS:
                with suppress(ValueError):
                    self.status = json.loads(payload)
            elif channel == CLOSE and payload and payload[0] in (STDOUT, STDERR):
                self._ended[payload[0]] = True
        elif message.type in _ENDS:
            self._close()

    async def aclose(self) -> None:
        self._close()
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


EndStdin = Callable[[int], Awaitable[None]]
"""Ends a v4 exec's stdin relay once it has passed on this many bytes."""
Lost = Callable[[int | None], Awaitable[NodeGoneError | None]]
"""Whether the pod is gone (given the exit status, if one came): the error to raise, or None."""


class PodProcess(GroupProcess):
    """A process in a pod; ``pid`` is its process id there (it leads its process group).

    A process ended by signal N reports ``128 + N``, as the container runtime does. When the
    websocket ends without a status (the pod deleted, the API server gone), the output
    streams end and :meth:`wait` raises :class:`~nodeprov.errors.NodeGoneError`; so does an
    exit by signal while the pod is being deleted. Closing stdin sends EOF: v5's close
    signal, or v4's relay ended (``end_relay``, see the module).
    """

    def __init__(
        self,
        channel: ExecChannel,
        *,
        lost: Lost,
        end_relay: EndStdin | None = None,
        **process: Unpack[GroupArgs],
    ) -> None:
        async def end_stdin() -> None:
            if channel.protocol == V5:
                await channel.close_stdin()
            elif end_relay is not None and not channel.closed:
                await end_relay(channel.sent)

        super().__init__(channel, Input(channel.send, end_stdin), **process)
        self._channel = channel
        self._lost = lost

    async def wait(self) -> int:
        if self._returncode is not None:
            return self._returncode
        await self._channel.exited()
        status = self._channel.status
        code = None if status is None else exit_status(status)
        if code is None or code > 128:
            gone = await self._lost(code)
            if gone is not None:
                self._returncode = KILLED  # removed with its pod, as the runtime reports it
                raise gone
        if code is None:
            self._returncode = KILLED
            said = (status or {}).get("message") or "no status"
            raise NodeGoneError(f"the exec of process {self.pid} ended without an exit status ({said})")
        self._returncode = code
        return code
