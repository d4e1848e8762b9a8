"""A kept process's streams across attaches (:class:`KeptStdin`, :class:`KeptOutput`, those
of a :class:`~nodeprov.node.keeper.KeptProcess`), and what its control plane and its
keeper's attach say to each other besides the process's own bytes (the scripts in
:mod:`nodeprov.exec.keeper`): the stdin frames, each held until the keeper says it fed it
(:class:`Frames`); how far the output was read, which lets the node free its journals
behind (:class:`Acks`); and the lines an attach puts among the process's stdout
(:class:`AttachStdout`).
"""

from __future__ import annotations

from collections import deque
from contextlib import suppress
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from ..errors import NodeprovError
from ..exec.keeper import EXIT, FED, TAG

if TYPE_CHECKING:
    from .keeper import KeptProcess

__all__ = [
    "ACK_STEP",
    "FRAME",
    "KEEP_READ",
    "Acks",
    "AttachStdout",
    "Frames",
    "KeptOutput",
    "KeptStdin",
    "payloads",
]

FRAME = 65536
"""Payload bytes a stdin frame carries at most: awk copies a long line once per 4 KiB."""
KEEP_READ = 1 << 20
"""Bytes of stdout and of stderr a node keeps behind what the control plane has read, by
default (:attr:`~nodeprov.node.keeper.KeepOptions.keep_read`)."""
ACK_STEP = 2 << 20
"""Bytes read past the last acknowledgement before the next: one ``fallocate`` on the node a step."""
_TAG_LIMIT = 4096  # an attach's line is shorter: a longer "line" after a tag is the process's


def payloads(data: bytes) -> list[bytes]:
    """``data`` as the payloads of stdin frames: spelt (``%`` as ``%25``, a line break as
    ``%0A``), each from at most :data:`FRAME` bytes."""
    chunks = (data[at : at + FRAME] for at in range(0, len(data), FRAME))
    return [chunk.replace(b"%", b"%25").replace(b"\n", b"%0A") for chunk in chunks]


class Frames:
    """A kept process's stdin frames by id (see :mod:`nodeprov.exec.keeper`): each held from
    the moment it is made until the keeper reports it fed, and sent again on an attach whose
    log lacks it."""

    def __init__(self) -> None:
        self._held: deque[tuple[int, bytes]] = deque()  # rising ids
        self._bytes = 0
        self._next_id = 1

    @property
    def held(self) -> int:
        """Bytes of frames not yet known fed."""
        return self._bytes

    def frame(self, kind: bytes, payload: bytes | None = None) -> bytes:
        """The next frame, ``D`` with a spelt ``payload`` or ``E``, held until it is fed."""
        ident, self._next_id = self._next_id, self._next_id + 1
        if payload is None:
            frame = b"%s %d\n" % (kind, ident)
        else:
            frame = b"%s %d %d %s\n" % (kind, ident, len(payload), payload)
        self._held.append((ident, frame))
        self._bytes += len(frame)
        return frame

    def attached(self, logged: int) -> list[bytes]:
        """An attach found frames up to ``logged`` in the keeper's log: the frames held that
        it lacks, to send again. Ids go on after ``logged``."""
        self._next_id = max(self._next_id, logged + 1)
        return [frame for ident, frame in self._held if ident > logged]

    def fed(self, ident: int) -> None:
        """The keeper fed every frame up to ``ident``: they are let go. An id beyond those
        made here is not this handle's to believe, and changes nothing."""
        if ident >= self._next_id:
            return
        while self._held and self._held[0][0] <= ident:
            self._bytes -= len(self._held.popleft()[1])


class Acks:
    """When to tell the node how far stdout and stderr were read: ``keep_read`` bytes behind
    the reader, in steps of :data:`ACK_STEP` (None: never, the node keeps it all)."""

    def __init__(self, keep_read: int | None) -> None:
        self._keep_read = keep_read
        self._acked = [0, 0]

    def rebase(self, bases: list[int]) -> None:
        """An attach said where the node's journals begin: nothing below needs saying."""
        self._acked = [max(acked, base) for acked, base in zip(self._acked, bases, strict=True)]

    def due(self, offsets: list[int]) -> list[int] | None:
        """The bases to send now that the reader is at ``offsets``, or None."""
        if self._keep_read is None:
            return None
        pairs = list(zip(self._acked, offsets, strict=True))
        bases = [max(acked, offset - self._keep_read) for acked, offset in pairs]
        if all(base - acked < ACK_STEP for base, (acked, _) in zip(bases, pairs, strict=True)):
            return None
        return bases

    def sent(self, bases: list[int]) -> None:
        """``bases`` reached the node's attach."""
        self.rebase(bases)


class AttachStdout:
    """An attach's stdout, one chunk at a time: the process's bytes, the attach's ``fed``
    lines taken out from among them, and the exit line, where stdout ends (a line is the
    attach's only where it says so: a ``fed`` id, an exit at stdout's size)."""

    def __init__(self) -> None:
        self._held = b""  # what may be the start of a line of the attach's

    def reset(self) -> None:
        """A new attach: it sends again what was held (no offset counted it)."""
        self._held = b""

    def take(self, chunk: bytes, offset: int) -> tuple[bytes, int, tuple[str, str] | None]:
        """The process's bytes in ``chunk`` (``offset``: its stdout's bytes before them), the
        highest id said fed (0: none), and the exit's status and why, where stdout ended."""
        buffer, self._held = self._held + chunk, b""
        if TAG[:1] not in buffer:
            return buffer, 0, None
        data, fed, at = bytearray(), 0, 0
        while (tag := buffer.find(TAG, at)) >= 0:
            end = buffer.find(b"\n", tag)
            if end < 0 and len(buffer) - tag < _TAG_LIMIT:
                self._held = buffer[tag:]
                return bytes(data + buffer[at:tag]), fed, None
            line = buffer[tag:end]
            words = line[len(TAG) :].decode(errors="replace").split(" ") if end >= 0 else []
            if line.startswith(FED) and len(words) == 2 and words[1].isdigit():
                data += buffer[at:tag]
                fed, at = max(fed, int(words[1])), end + 1
            elif line.startswith(EXIT) and len(words) == 4 and words[2] == str(offset + len(data) + tag - at):
                return bytes(data + buffer[at:tag]), fed, (words[1], words[3])
            else:
                data += buffer[at : tag + 1]
                at = tag + 1
        data += buffer[at:]
        partial = data.rfind(TAG[:1], max(0, len(data) - len(TAG)))
        if partial >= 0 and TAG.startswith(data[partial:]):
            self._held = bytes(data[partial:])
            del data[partial:]
        return bytes(data), fed, None


class KeptStdin(ByteSendStream):
    """Frames with ids: each is held until the keeper says it fed it, and sent again on an
    attach after a drop whose log lacks it (the keeper feeds each id once)."""

    def __init__(self, process: KeptProcess) -> None:
        self._process = process
        self._ended = False

    async def send(self, item: bytes) -> None:
        if self._ended:
            raise anyio.ClosedResourceError
        if item:
            await self._send([(b"D", payload) for payload in payloads(item)])

    async def _send(self, frames: list[tuple[bytes, bytes | None]]) -> None:
        process = self._process
        async with process._write_lock:
            data = [process._frames.frame(kind, payload) for kind, payload in frames]
            while True:
                channel, generation = process._channel, process._generation
                if process._failure is not None:
                    raise process._failure
                if process._detached:
                    raise anyio.ClosedResourceError
                if channel is not None:
                    try:
                        await channel.stdin.send(b"".join(data))
                        return
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NodeprovError):
                        pass
                # A frame sent twice (resent by the attach, and here) is fed once.
                await process._recover(generation, "its input could not be written")

    async def send_eof(self) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._process._returncode is None and not self._process._detached:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, NodeprovError):
                await self._send([(b"E", None)])


class KeptOutput(ByteReceiveStream):
    """The process's stdout (``which`` 0) or stderr (1) across attaches, each attach from the
    offset the last one reached; stdout ends at the keeper's account of the exit, and says
    which frames were fed."""

    def __init__(self, process: KeptProcess, which: int) -> None:
        self._process = process
        self._which = which
        self._lines = AttachStdout()
        self._lines_from = 0  # the attach what it holds came from: a new one sends it again
        self._done = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        process = self._process
        while not self._done:
            channel, generation = process._channel, process._generation
            if process._detached:
                raise anyio.EndOfStream  # this handle let go of the process (detach, close)
            if channel is None:
                await process._recover(generation, "no channel")
                continue
            if self._lines_from != generation:
                self._lines.reset()
                self._lines_from = generation
            if self._which == 0 and process._pushback:
                chunk, process._pushback = process._pushback, b""
            else:
                stream = channel.stdout if self._which == 0 else channel.stderr
                try:
                    chunk = await stream.receive(max_bytes)
                except (
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    NodeprovError,
                ):
                    if self._which == 1 and process._returncode is not None:
                        break
                    if not process._detached:
                        await process._recover(generation, "its output ended early")
                    continue
            data = chunk if self._which == 1 else self._take(chunk)
            if data:
                process._offsets[self._which] += len(data)
                await process._acknowledge()
                return data
        if self._which == 0:
            await process._release_keeper()
        self._done = True
        raise anyio.EndOfStream

    def _take(self, chunk: bytes) -> bytes:
        """Stdout's bytes in ``chunk``; the exit line, where stdout ends, ends the stream."""
        process = self._process
        data, fed, exited = self._lines.take(chunk, process._offsets[0])
        if fed:
            process._frames.fed(fed)
        if exited is not None:
            process._exited(*exited)
            self._done = True
        return data

    async def aclose(self) -> None:
        self._done = True
