"""Processes that outlive their exec channel: :func:`keep` starts one under a *keeper* on the
node, :func:`reattach` finds it again, and :class:`KeptProcess` is the
:class:`~nodeprov.spawn.SpawnedProcess` over it, which re-attaches by itself when its
channel drops.

The keeper needs a POSIX ``sh``, GNU coreutils (``tail --pid``, ``stat``, ``date``,
``touch``, ``mkfifo``), ``setsid``, ``awk`` and ``grep`` on the node, nothing else. It lives
in a private directory (0700) on the node:

- ``out`` and ``err``: the journals of the process's stdout and stderr, appended as it
  writes; an attach reads them from a byte offset and follows them (``tail -f``: woken by
  inotify, or polling every 2 ms where tail trusts no inotify, as on a container's
  overlayfs), so nothing the process said is lost while no channel is there;
- ``in``: a FIFO, the process's stdin, fed from ``in.log`` by one long-lived ``awk`` that
  writes each frame's payload once, in order of the frames' ids: what a control plane sent
  twice across a drop reaches the process once;
- ``lease``: touched every few seconds by a live attach. When nothing touched it for
  ``grace`` seconds (no control plane attached), or at the node's ``expires_at``, the keeper
  sends the process group SIGTERM, ``term_grace`` seconds later SIGKILL, and sweeps what the
  process started (it carries the keeper's mark, found through ``/proc``): a kept process is
  never unsupervised for ever;
- ``pid``, ``rc`` (the exit status, and why: ``exit``, ``lease`` or ``ttl``), ``attach`` (the
  processes of the current attach, which the next attach ends first: one writer at a time).

Once the process has ended and its last bytes were read, the control plane releases the
directory; a keeper nobody releases removes it ``grace`` seconds after the last attach.
"""

from __future__ import annotations

import logging
import math
import posixpath
import secrets
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from ..errors import CommandNotFoundError, ConfigError, NodeGoneError, NodeprovError, SpawnError
from ..exec.keeper import ATTACH, EXIT, FEED, KEEPER, STATUS, TAG, WRITE
from ..exec.preamble import SIGNAL_GROUP
from ..spawn import SpawnedProcess, SpawnOptions, StopPolicy
from .ownership import LABEL_EXPIRES_AT

if TYPE_CHECKING:
    from .handle import NodeHandle

__all__ = [
    "ChannelWatch",
    "Detached",
    "KeepOptions",
    "KeptProcess",
    "Reattached",
    "keep",
    "keeper_root",
    "kept_state",
    "reattach",
]

logger = logging.getLogger("nodeprov")

_FRAME = 65536  # payload bytes a stdin frame carries at most: awk copies a long line once per 4 KiB
_CHANNEL_POLICY = StopPolicy(eof_grace=0.0, term_grace=0.0, kill_grace=2.0)
_POLL = 0.5  # seconds between looks at the node while waiting for an exit nobody reads
_FIRST_LOOKS = (0.02, 0.05, 0.1, 0.2)  # sooner: a process told to stop exits within milliseconds
_REPORT_LIMIT = 4096
_START_WAIT = 10  # seconds an attach waits for the keeper it started to start the process


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

    Raises (at construction) :class:`~nodeprov.errors.ConfigError` for a grace under 2 s, or
    one that is not finite.
    """

    grace: float = 180.0
    term_grace: float = 5.0
    expires_at: datetime | None = None
    reattach_within: float = 60.0
    may_reattach: Callable[[], Awaitable[bool]] | None = None
    watch: ChannelWatch | None = None

    def __post_init__(self) -> None:
        if not 2 <= self.grace < math.inf or not 0 <= self.term_grace < math.inf:
            raise ConfigError(f"a keeper's grace must be 2 s or more, not {self.grace:g}")

    @property
    def renew_every(self) -> int:
        """Seconds between an attach's renewals of the keeper's lease."""
        return max(1, min(10, math.ceil(self.grace) // 4))


def _seconds(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _expiry(node: NodeHandle, options: KeepOptions) -> str:
    expires = options.expires_at
    if expires is None and node.labels.get(LABEL_EXPIRES_AT):
        with suppress(ValueError):
            expires = datetime.fromisoformat(node.labels[LABEL_EXPIRES_AT])
    if expires is None:
        return ""
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=UTC)
    return str(math.ceil(expires.timestamp()))


def keeper_root(node: NodeHandle) -> str:
    """Where a node's keepers live: ``$HOME/.nodeprov/keep`` of the node (under its workdir
    when it has no HOME)."""
    return posixpath.join(node.base_env.get("HOME") or node.workdir, ".nodeprov", "keep")


async def keep(node: NodeHandle, options: SpawnOptions, settings: KeepOptions | None = None) -> KeptProcess:
    """Start ``options`` on ``node`` under a keeper and attach to it (see the module).

    The process gets ``options.env`` over the node's environment and ``options.cwd``, as a
    spawn's, and one variable more, ``NODEPROV_GUARD`` (the keeper's mark). It leads a
    session of its own; the node's destroy ends it with the node.

    Raises:
        CommandNotFoundError: there is no ``options.command`` on the node.
        SpawnError: the node lacks what the keeper needs (which tool is said), or the
            keeper could not start.
        NodeGoneError: the node is gone.
    """
    settings = settings or KeepOptions()
    directory = posixpath.join(keeper_root(node), secrets.token_hex(12))
    kept = ["=" + options.env[name] if name in options.env else "" for name in ("PWD", "SHLVL")]
    args = [
        directory,
        str(math.ceil(settings.grace)),
        _seconds(settings.term_grace),
        _expiry(node, settings),
        secrets.token_hex(12),
        *kept,
        *options.argv,
    ]
    env = {**options.env, "NP_FEED": FEED}
    await node.spawn_detached(
        SpawnOptions("/bin/sh", ["-c", KEEPER, "nodeprov-keeper", *args], options.cwd, env)
    )
    try:
        return await _reattach(node, directory, settings, 0, 0, wait=_START_WAIT)
    except _StartFailedError as failed:
        reason = str(failed)
        if reason == "notfound":
            raise CommandNotFoundError(f"no command {options.command!r} on node {node.node_id}") from None
        if reason.startswith("missing "):
            raise SpawnError(f"node {node.node_id} cannot keep a process: it has no {reason[8:]}") from None
        raise SpawnError(f"cannot keep {options.command!r} on node {node.node_id}: {reason}") from None


async def kept_state(node: NodeHandle, keeper: str) -> str:
    """How the kept process of ``keeper`` stands on ``node``: ``running``, ``exited`` (its
    output not yet released), or ``gone``.

    Raises:
        NodeGoneError, SpawnError, ProviderError: as :meth:`NodeHandle.spawn`.
    """
    said = await _status(node, keeper)
    return {"exit": "exited", "running": "running"}.get(said[0] if said else "", "gone")


async def _status(node: NodeHandle, keeper: str) -> list[str]:
    """The keeper's status line, in words: ``exit STATUS WHY``, ``running`` or ``gone``."""
    said = await _run(node, SpawnOptions("/bin/sh", ["-c", STATUS, "nodeprov-status", keeper]))
    return said.decode(errors="replace").split()


async def reattach(
    node: NodeHandle,
    keeper: str,
    *,
    stdout_offset: int = 0,
    stderr_offset: int = 0,
    settings: KeepOptions | None = None,
) -> KeptProcess:
    """Attach to the kept process of ``keeper`` (:attr:`KeptProcess.keeper`) on ``node``,
    its stdout and stderr read on from the offsets given, ending the attach before it
    (another control plane's, say).

    Raises:
        NodeGoneError: the keeper is gone (released, or removed once nobody attached for its
            grace), or the node is.
        SpawnError: the node could not start the attach.
    """
    return await _reattach(node, keeper, settings or KeepOptions(), stdout_offset, stderr_offset)


async def _reattach(
    node: NodeHandle, keeper: str, settings: KeepOptions, *offsets: int, wait: int = 0
) -> KeptProcess:
    process = KeptProcess(node, keeper, settings, *offsets)
    await process._attach(wait)
    node.track(process)
    return process


class _StartFailedError(Exception):
    """The keeper said why it could not start the process."""


async def _first_line(stream: ByteReceiveStream) -> bytes:
    said = b""
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        while b"\n" not in said and len(said) < _REPORT_LIMIT:
            said += await stream.receive()
    return said


def _frame(kind: bytes, ident: int, payload: bytes | None = None) -> bytes:
    if payload is None:
        return b"%s %d\n" % (kind, ident)
    return b"%s %d %d %s\n" % (kind, ident, len(payload), payload)


def _spelt(data: bytes) -> bytes:
    return data.replace(b"%", b"%25").replace(b"\n", b"%0A")


class KeptProcess(SpawnedProcess):
    """A process under a keeper (see the module), through an attach that is replaced when it
    drops: ``stdout`` and ``stderr`` go on from the byte where the dropped attach left them,
    and what was written to ``stdin`` is delivered once. ``keeper`` names it for
    :func:`reattach`, with :attr:`stdout_offset` and :attr:`stderr_offset`.

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
        self._pushback = b""  # stdout that came with the attach's report
        self._offsets = [stdout_offset, stderr_offset]
        self._sent: list[tuple[int, bytes]] = []  # frames not yet known to be in the log
        self._next_id = 1
        self._returncode: int | None = None
        self._ended = anyio.Event()
        self._released = False
        self._failure: NodeprovError | None = None
        self._attach_lock = anyio.Lock()
        self._write_lock = anyio.Lock()
        self._detached = False  # no channel any more: nothing is read or written
        self._left = False  # detached: left running, never signalled from here
        self.stdin: ByteSendStream = _Stdin(self)
        self.stdout: ByteReceiveStream = _Journal(self, 0)
        self.stderr: ByteReceiveStream = _Journal(self, 1)

    @property
    def stdout_offset(self) -> int:
        """Bytes of the process's stdout handed to the reader so far."""
        return self._offsets[0]

    @property
    def stderr_offset(self) -> int:
        """Bytes of the process's stderr handed to the reader so far."""
        return self._offsets[1]

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def _attach(self, wait: int = 0) -> None:
        """Open an attach from the current offsets and resend the frames its log lacks."""
        offsets = [str(offset) for offset in self._offsets]
        renew = str(self.settings.renew_every)
        script = ["-c", ATTACH, "nodeprov-attach", self.keeper, *offsets, renew, str(wait)]
        channel = await self.node.spawn(SpawnOptions("/bin/sh", script, env={"NP_WRITE": WRITE}))
        channel.stop_policy = _CHANNEL_POLICY
        try:
            line, _, rest = (await _first_line(channel.stdout)).partition(b"\n")
            self.pid, self._start, logged = self._attached(line)
            self._next_id = max(self._next_id, logged + 1)
            self._sent = [(ident, frame) for ident, frame in self._sent if ident > logged]
            for _, frame in self._sent:
                await channel.stdin.send(frame)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await channel.aclose()
            raise
        self._channel, self._generation, self._pushback = channel, self._generation + 1, rest

    def _attached(self, line: bytes) -> tuple[int, str, int]:
        """The attach's report: the process's pid and start time, the last frame id logged."""
        said = line.removeprefix(TAG).decode(errors="replace")
        if said.startswith("failed "):
            raise _StartFailedError(said[7:])
        if said == "gone":
            raise NodeGoneError(f"the keeper {self.keeper} on node {self.node.node_id} is gone")
        if not line.startswith(TAG + b"attached "):
            raise SpawnError(f"cannot attach to {self.keeper} on node {self.node.node_id}: {line[:200]!r}")
        pid, start, last = said.removeprefix("attached ").split(" ")
        return int(pid), start, int(last)

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
            attempts, delay = 0, 0.1
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
                        await anyio.sleep(delay)
                        delay = min(delay * 2, 5.0)
                        continue
                    if watch is not None:
                        watch(Reattached(anyio.current_time() - began, attempts))
                    return
            self._failure = NodeGoneError(
                f"lost the channel to {self.keeper} on node {self.node.node_id} ({reason}) and could not "
                f"re-attach in {anyio.current_time() - began:.1f} s"
            )
            raise self._failure

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

    async def _look(self) -> None:
        """How the process stands, asked of the node: for a wait while nobody reads stdout."""
        words = await _status(self.node, self.keeper)
        if words[:1] == ["exit"] and len(words) == 3:
            self._exited(words[1], words[2])
        elif words[:1] == ["gone"] and self._returncode is None:
            raise NodeGoneError(f"the keeper {self.keeper} on node {self.node.node_id} is gone")

    async def wait(self) -> int:
        pauses = iter(_FIRST_LOOKS)
        while self._returncode is None:
            with anyio.move_on_after(next(pauses, _POLL)):
                await self._ended.wait()
            if self._returncode is None:
                await self._look()
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
    """End an attach (its processes on the node too, where the node answers), bounded."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_CHANNEL_POLICY.total + 1):
            await channel.aclose()
        await channel.discard()


async def _run(node: NodeHandle, options: SpawnOptions) -> bytes:
    """Run a short script on ``node``; its first line of output."""
    async with await node.spawn(options) as process:
        await process.stdin.aclose()
        said = await _first_line(process.stdout)
        await process.wait()
    return said


class _Stdin(ByteSendStream):
    """Frames with ids: each is kept until an attach finds it in the keeper's log, and sent
    again on the attach after a drop (the keeper feeds each id once)."""

    def __init__(self, process: KeptProcess) -> None:
        self._process = process
        self._ended = False

    async def send(self, item: bytes) -> None:
        if self._ended:
            raise anyio.ClosedResourceError
        if item:
            await self._send([(b"D", _spelt(item[at : at + _FRAME])) for at in range(0, len(item), _FRAME)])

    async def _send(self, frames: list[tuple[bytes, bytes | None]]) -> None:
        process = self._process
        async with process._write_lock:
            data = []
            for kind, payload in frames:
                ident, process._next_id = process._next_id, process._next_id + 1
                data.append(_frame(kind, ident, payload))
                process._sent.append((ident, data[-1]))
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


class _Journal(ByteReceiveStream):
    """The process's stdout (``which`` 0) or stderr (1) across attaches, each attach from the
    offset the last one reached; stdout ends at the keeper's account of the exit."""

    def __init__(self, process: KeptProcess, which: int) -> None:
        self._process = process
        self._which = which
        self._held = b""  # stdout: what may be the start of the exit line
        self._held_from = 0  # the attach it came from: a new one sends it again
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
            if self._held_from != generation:
                self._held, self._held_from = b"", generation
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
                return data
        if self._which == 0:
            await process._release_keeper()
        self._done = True
        raise anyio.EndOfStream

    def _take(self, chunk: bytes) -> bytes:
        """Stdout's bytes in ``chunk``; the exit line, where stdout ends, ends the stream."""
        buffer, self._held = self._held + chunk, b""
        at = buffer.find(EXIT)
        while at >= 0:
            end = buffer.find(b"\n", at)
            if end < 0:
                self._held = buffer[at:]
                return buffer[:at]
            words = buffer[at + len(EXIT) : end].decode(errors="replace").split(" ")
            if len(words) == 3 and words[1] == str(self._process._offsets[0] + at):
                self._process._exited(words[0], words[2])
                self._done = True
                return buffer[:at]
            at = buffer.find(EXIT, end)
        partial = buffer.rfind(b"\x1e", max(0, len(buffer) - len(EXIT)))
        if partial >= 0 and EXIT.startswith(buffer[partial:]):
            self._held = buffer[partial:]
            return buffer[:partial]
        return buffer

    async def aclose(self) -> None:
        self._done = True
