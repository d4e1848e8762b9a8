"""The handle of a kept process (see :mod:`nodeprov.node.keeper`): :class:`KeptProcess`, a
:class:`~nodeprov.spawn.SpawnedProcess` over a keeper's attach that attaches again when its
channel drops, and how it is kept (:class:`KeepOptions`) and watched (:data:`ChannelWatch`);
with the one-shot scripts it runs beside its attach (the keeper's status)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from ..errors import AttachTakenError, ConfigError, NodeGoneError, NodeprovError, SpawnError, first_line
from ..exec.keeper import ATTACH, FREE, REPORT, STATUS, TAG, WRITE
from ..exec.preamble import SIGNAL_GROUP
from ..spawn import SpawnedProcess, SpawnOptions, StopPolicy
from .kept_io import KEEP_READ, Acks, Frames, KeptOutput, KeptStdin

if TYPE_CHECKING:
    from .handle import NodeHandle

__all__ = ["ChannelWatch", "Detached", "KeepOptions", "KeptProcess", "Reattached"]

logger = logging.getLogger("nodeprov")

_CHANNEL_POLICY = StopPolicy(eof_grace=0.0, term_grace=0.0, kill_grace=2.0)
_POLL = 0.5  # seconds between looks at the node while waiting for an exit nobody reads
# The first look comes sooner and waits on the node for the exit a while (a process told to
# stop exits within milliseconds): one look, however long the exit takes within it, where
# looks every few milliseconds would each cost a start of a script on the node.
_FIRST_LOOK, _FIRST_LOOK_WAITS = 0.02, 0.5
_REPORT_LIMIT = 4096
_ATTACH_ENV = {"NP_WRITE": WRITE, "NP_FREE": FREE, "NP_REPORT": REPORT}


@dataclass(frozen=True, slots=True)
class Detached:
    """A kept process's channel dropped: what a :data:`ChannelWatch` hears first."""

    reason: str


@dataclass(frozen=True, slots=True)
class Reattached:
    """A kept process's channel is back after ``gap`` seconds and ``attempts`` tries."""

    gap: float
    attempts: int


ChannelWatch = Callable[[Detached | Reattached], None]
"""Told when a kept process's channel drops and when it is back; must not block."""


@dataclass(frozen=True, slots=True)
class KeepOptions:
    """How a kept process is supervised and re-attached.

    ``grace``: seconds the keeper lets the process run with no control plane attached before
    it stops it (rounded up to whole seconds; at least 2). ``term_grace``: seconds from that
    SIGTERM to SIGKILL. ``expires_at``: when the keeper stops it whatever happens (default:
    the node's lifetime, its ``nodeprov.expires-at`` label). ``reattach_within``: seconds a
    dropped channel is tried again, with backoff, before the streams fail with
    :class:`~nodeprov.errors.NodeGoneError`. ``may_reattach``: asked before each attempt (a
    control plane that lost the run says no). ``watch``: told of each drop and re-attach.
    ``on_start``: given the keeper's directory before the process starts (a control plane
    records it there, so that another finds the process should this one die before it
    hears anything of it); what it raises stops the start.
    ``keep_read``: bytes of stdout and of stderr the node keeps behind what this handle has
    read, for an attach from before there (another control plane that reads a turn again
    from its start); the node frees the rest (None: it keeps it all, and its journals grow
    with the output).

    Raises (at construction) :class:`~nodeprov.errors.ConfigError` for a grace under 2 s, or
    one that is not finite, or a negative ``keep_read``.
    """

    grace: float = 180.0
    term_grace: float = 5.0
    expires_at: datetime | None = None
    reattach_within: float = 60.0
    may_reattach: Callable[[], Awaitable[bool]] | None = None
    watch: ChannelWatch | None = None
    on_start: Callable[[str], Awaitable[None]] | None = None
    keep_read: int | None = KEEP_READ

    def __post_init__(self) -> None:
        if not 2 <= self.grace < math.inf or not 0 <= self.term_grace < math.inf:
            raise ConfigError(f"a keeper's grace must be 2 s or more, not {self.grace:g}")
        if self.keep_read is not None and self.keep_read < 0:
            raise ConfigError(f"keep_read must be 0 or more bytes, not {self.keep_read}")

    @property
    def renew_every(self) -> int:
        """Seconds between an attach's renewals of the keeper's lease."""
        return max(1, min(10, math.ceil(self.grace) // 4))


async def _status(node: NodeHandle, keeper: str, wait: float = 0.0) -> list[str]:
    """The keeper's status line, in words: ``exit STATUS WHY``, ``running`` or ``gone``; after
    waiting up to ``wait`` seconds on the node for the exit."""
    rounds = str(math.ceil(wait * 100))
    script = SpawnOptions("/bin/sh", ["-c", STATUS, "nodeprov-status", keeper, rounds])
    said = await _run(node, script, stop=_CHANNEL_POLICY)  # a wait cut short ends it at once
    return said.decode(errors="replace").split()


class _StartFailedError(Exception):
    """The keeper said why it could not start the process."""


async def _first_line(stream: ByteReceiveStream) -> bytes:
    said = b""
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while b"\n" not in said and len(said) < _REPORT_LIMIT:
            said += await stream.receive()
    return said


class KeptProcess(SpawnedProcess):
    """A process under a keeper (see the module), through an attach that is replaced when it
    drops: ``stdout`` and ``stderr`` go on from the byte where the dropped attach left them,
    and what was written to ``stdin`` is delivered once. ``keeper`` names it for
    :func:`reattach`, with :attr:`stdout_offset` and :attr:`stderr_offset`. Reading tells
    the node what it may free (see the module); the stdin it holds is what the keeper has
    not yet been heard to feed (:attr:`unfed`), which reading stdout hears.

    :meth:`terminate` and :meth:`kill` signal the process's group through a side exec;
    :meth:`aclose` stops it (stdin's end, then the stop policy's signals) and releases the
    keeper; :meth:`detach` leaves it running for another attach. A channel that cannot be
    re-attached within ``reattach_within`` ends the streams with
    :class:`~nodeprov.errors.NodeGoneError`, as does a keeper that is gone.
    """

    def __init__(
        self, node: NodeHandle, keeper: str, settings: KeepOptions, stdout_offset: int, stderr_offset: int
    ) -> None:
        super().__init__()
        self.node = node
        self.keeper = keeper
        self.settings = settings
        self.pid = 0
        self.ended_by = ""
        """Why the process ended: ``exit`` (by itself or a signal of the control plane's),
        ``lease`` or ``ttl`` (stopped by the keeper), ``gone`` (its node's directory went)."""
        self._start = "-"
        self._channel: SpawnedProcess | None = None
        self._generation = 0
        self._held = 0  # the keeper's attach generation this handle holds (0: none yet)
        self._pushback = b""  # stdout that came with the attach's report
        self._offsets = [stdout_offset, stderr_offset]
        self._frames = Frames()
        self._acks = Acks(settings.keep_read)
        self._returncode: int | None = None
        self._ended = anyio.Event()
        self._released = False
        self._failure: NodeprovError | None = None
        self._attach_lock = anyio.Lock()
        self._write_lock = anyio.Lock()
        self._detached = False  # no channel any more: nothing is read or written
        self._left = False  # detached: left running, never signalled from here
        self.stdin: ByteSendStream = KeptStdin(self)
        self.stdout: ByteReceiveStream = KeptOutput(self, 0)
        self.stderr: ByteReceiveStream = KeptOutput(self, 1)

    @property
    def stdout_offset(self) -> int:
        """Bytes of the process's stdout handed to the reader so far."""
        return self._offsets[0]

    @property
    def stderr_offset(self) -> int:
        """Bytes of the process's stderr handed to the reader so far."""
        return self._offsets[1]

    @property
    def unfed(self) -> int:
        """Bytes written to stdin (as frames) that the keeper has not yet been heard to feed
        the process: what this handle holds to send again after a drop."""
        return self._frames.held

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def _attach(self, wait: int = 0) -> None:
        """Open an attach from the current offsets and resend the frames its log lacks.

        Raises NodeGoneError where the node freed stdout from before the offset."""
        offsets = [str(offset) for offset in self._offsets]
        renew = str(self.settings.renew_every)
        script = ["-c", ATTACH, "nodeprov-attach", self.keeper, *offsets, renew, str(wait), str(self._held)]
        channel = await self.node.spawn(SpawnOptions("/bin/sh", script, env=_ATTACH_ENV))
        channel.stop_policy = _CHANNEL_POLICY
        try:
            line, _, rest = (await _first_line(channel.stdout)).partition(b"\n")
            self.pid, self._start, logged, bases, self._held = self._attached(line)
            # Stderr from before its base starts at the base: what was freed is not sent again.
            self._offsets[1] = max(self._offsets[1], bases[1])
            self._acks.rebase(bases)
            for frame in self._frames.attached(logged):
                await channel.stdin.send(frame)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await channel.aclose()
            raise
        self._channel, self._generation, self._pushback = channel, self._generation + 1, rest

    def _attached(self, line: bytes) -> tuple[int, str, int, list[int], int]:
        """The attach's report: the process's pid and start time, the last frame id logged,
        the bases of stdout and stderr (the bytes before them are freed), the attach's
        generation. Raises NodeGoneError where the keeper is gone, or stdout from before its
        offset; AttachTakenError where another attach took it since this handle's."""
        said = line.removeprefix(TAG).decode(errors="replace")
        if said.startswith("failed "):
            raise _StartFailedError(said[7:])
        if said == "gone":
            raise NodeGoneError(f"the keeper {self.keeper} on node {self.node.node_id} is gone")
        if said.startswith("freed "):
            raise NodeGoneError(
                f"the stdout of {self.keeper} on node {self.node.node_id} before byte {said[6:]} was "
                f"read and freed: it cannot be read from byte {self._offsets[0]}"
            )
        if said.startswith("superseded"):
            # The other attach's now: never signalled, released or waited for from here.
            self._detached = self._left = self._closed = True
            raise AttachTakenError(
                f"another control plane attached to {self.keeper} on node {self.node.node_id}: "
                "this one let go of it"
            )
        if not line.startswith(TAG + b"attached "):
            raise SpawnError(f"cannot attach to {self.keeper} on node {self.node.node_id}: {line[:200]!r}")
        pid, start, last, out_base, err_base, generation = said.removeprefix("attached ").split(" ")
        if self._offsets[0] < int(out_base):
            raise NodeGoneError(
                f"the stdout of {self.keeper} on node {self.node.node_id} before byte {out_base} was "
                f"read and freed: it cannot be read from byte {self._offsets[0]}"
            )
        return int(pid), start, int(last), [int(out_base), int(err_base)], int(generation)

    async def _recover(self, generation: int, reason: str) -> None:
        """The attach of ``generation`` dropped: attach again, with backoff, unless another
        stream did already. Raises what ended the process's streams when it cannot."""
        async with self._attach_lock:
            if self._failure is not None:
                raise self._failure
            if self._detached:
                raise anyio.ClosedResourceError
            if self._generation != generation:
                return
            old, self._channel = self._channel, None
            if old is not None:
                await _close_channel(old)
            watch = self.settings.watch
            if watch is not None:
                watch(Detached(reason))
            began = anyio.current_time()
            attempts, delay, last = 0, 0.1, ""
            with anyio.move_on_after(self.settings.reattach_within):
                while True:
                    attempts += 1
                    may = self.settings.may_reattach
                    if may is not None and not await may():
                        break
                    try:
                        await self._attach()
                    except NodeGoneError as error:
                        self._failure = error
                        raise
                    except NodeprovError as error:
                        logger.info("re-attaching %s on node %s: %s", self.keeper, self.node.node_id, error)
                        last = first_line(str(error))
                        await anyio.sleep(delay)
                        delay = min(delay * 2, 5.0)
                        continue
                    if watch is not None:
                        watch(Reattached(anyio.current_time() - began, attempts))
                    return
            outlived = self.settings.reattach_within >= self.settings.grace
            self._failure = NodeGoneError(
                f"lost the channel to {self.keeper} on node {self.node.node_id} ({reason}) and could not "
                f"re-attach in {anyio.current_time() - began:.1f} s"
                + (
                    ", its keeper's grace: it stopped the process, whose output since is lost"
                    if outlived
                    else ""
                )
                + (f"; the last attempt: {last}" if last else "")
            )
            raise self._failure

    async def _acknowledge(self) -> None:
        """Tell the node how far the output was read, when a step more was: it frees the
        journals behind. Skipped while stdin is being written (the next read tells), and
        once the process has ended (its directory goes whole)."""
        bases = self._acks.due(self._offsets)
        channel = self._channel
        if bases is None or channel is None or self._returncode is not None:
            return
        try:
            self._write_lock.acquire_nowait()
        except anyio.WouldBlock:
            return
        try:
            # Shielded: a line cut short would spoil the frame after it.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CHANNEL_POLICY.total + 1):
                await channel.stdin.send(b"A %d %d\n" % (bases[0], bases[1]))
                self._acks.sent(bases)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NodeprovError):
            pass  # the channel dropped: the reader finds out
        finally:
            self._write_lock.release()

    def _exited(self, status: str, why: str) -> None:
        if self._returncode is None:
            self._returncode = int(status) if status.lstrip("-").isdigit() else -9
            self.ended_by = why
            self._ended.set()

    async def _release_keeper(self) -> None:
        """The process has ended and stdout was read to its end: the keeper may go."""
        if self._released:
            return
        self._released = True
        channel = self._channel
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), suppress(Exception):
            if channel is not None:
                await channel.stdin.send(b"R\n")
                await channel.stdin.aclose()
                await channel.wait()
            else:
                await _run(self.node, SpawnOptions("rm", ["-rf", "--", self.keeper]))

    async def _look(self, wait: float = 0.0) -> None:
        """How the process stands, asked of the node (after waiting up to ``wait`` seconds
        there for its exit): for a wait while nobody reads stdout."""
        words = await _status(self.node, self.keeper, wait)
        if words[:1] == ["exit"] and len(words) == 3:
            self._exited(words[1], words[2])
        elif words[:1] == ["gone"] and self._returncode is None:
            raise NodeGoneError(f"the keeper {self.keeper} on node {self.node.node_id} is gone")

    async def wait(self) -> int:
        pause, waits = _FIRST_LOOK, _FIRST_LOOK_WAITS
        while self._returncode is None:
            with anyio.move_on_after(pause):
                await self._ended.wait()
            if self._returncode is None:
                await self._look(waits)
            pause, waits = _POLL, 0.0
        return self._returncode

    async def _signal(self, signal: str) -> None:
        if self._returncode is None and self.pid and not self._left:
            script = ["-c", SIGNAL_GROUP, "nodeprov-signal", signal, str(self.pid), self._start]
            with suppress(NodeGoneError):
                await _run(self.node, SpawnOptions("/bin/sh", script))

    async def terminate(self) -> None:
        await self._signal("TERM")

    async def kill(self) -> None:
        await self._signal("KILL")

    async def _release(self) -> None:
        if self._returncode is not None:
            await self._release_keeper()
        channel, self._channel = self._channel, None
        self._detached = True
        if channel is not None:
            await _close_channel(channel)

    async def detach(self) -> None:
        """Close the channel and leave the process running: the keeper's grace counts from
        now, and :func:`reattach` finds it. Idempotent, shielded, bounded."""
        with anyio.CancelScope(shield=True):
            self._detached = self._left = self._closed = True
            channel, self._channel = self._channel, None
            if channel is not None:
                await _close_channel(channel)

    async def discard(self) -> None:
        with anyio.CancelScope(shield=True):
            self._detached = True
            self._closed = True
            channel, self._channel = self._channel, None
            if channel is not None:
                await channel.discard()


async def _close_channel(channel: SpawnedProcess) -> None:
    """End an attach (its processes on the node too, where the node answers), bounded; a
    node that does not answer leaves them to the next attach, which ends them."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_CHANNEL_POLICY.total + 1), suppress(NodeprovError):
            await channel.aclose()
        await channel.discard()


async def _run(node: NodeHandle, options: SpawnOptions, stop: StopPolicy | None = None) -> bytes:
    """Run a short script on ``node``; its first line of output. ``stop``: how it is stopped
    when the run is cancelled (else the default policy)."""
    async with await node.spawn(options) as process:
        if stop is not None:
            process.stop_policy = stop
        await process.stdin.aclose()
        said = await _first_line(process.stdout)
        await process.wait()
    return said
