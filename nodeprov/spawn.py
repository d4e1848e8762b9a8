"""Starting processes on a node: :class:`SpawnOptions`, :class:`SpawnedProcess`, :data:`SpawnFn`,
and :class:`PreparedSpawn` (a spawn's channel opened ahead of its command).

These are the only things the SDK bridge needs from a node. Every provider returns the same
:class:`SpawnedProcess` shape, whether the process is a local child, a ``docker exec`` or an
SSH channel.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Self

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from .errors import ConfigError, NodeGoneError

__all__ = ["PreparedSpawn", "SpawnFn", "SpawnOptions", "SpawnedProcess", "StopPolicy"]

_ENV_NAME = re.compile(r"^[^=\x00]+$")


@dataclass(frozen=True, slots=True)
class SpawnOptions:
    """What to run on a node, and how.

    ``command`` and ``args`` form the argument vector; they are never joined into a shell
    string by nodeprov, and providers whose platform needs a command *string* (ssh) quote
    every element. ``args`` must be a sequence of strings: a bare string is rejected, since
    it would otherwise be read as a list of characters.

    ``cwd`` is a path on the node; ``None`` means the node's working directory, and a
    relative path is taken relative to it (see :meth:`NodeHandle.node_path`: a cwd outside
    the node is refused).

    ``env`` is laid over the node's base environment (:attr:`NodeHandle.base_env`) and is
    *exactly* what is added: nothing of the control plane's own environment reaches the
    process. Names may not contain ``=`` or NUL; values may not contain NUL.

    Raises (at construction) :class:`TypeError` for a non-string command, argument or env
    entry, or a bare string as ``args``; :class:`~nodeprov.errors.ConfigError` (a
    ``ValueError``) for an empty command, a NUL in any string, or a malformed variable name.
    """

    command: str
    args: Sequence[str] = ()
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.args, (str, bytes)):
            raise TypeError("args must be a list of strings, not a single string")
        args = tuple(self.args)
        env = dict(self.env)
        strings = [self.command, *args, *env, *env.values()]
        if not all(isinstance(item, str) for item in strings):
            raise TypeError("command, args and env must be strings")
        if not self.command or any("\x00" in item for item in strings):
            raise ConfigError("the command must be non-empty, and no string may contain NUL")
        bad_names = [name for name in env if not _ENV_NAME.match(name)]
        if bad_names:
            raise ConfigError(f"invalid environment variable names: {bad_names!r}")
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "env", MappingProxyType(env))

    @property
    def argv(self) -> list[str]:
        """``[command, *args]``."""
        return [self.command, *self.args]


@dataclass(frozen=True, slots=True)
class StopPolicy:
    """How :meth:`SpawnedProcess.aclose` stops a process that is still running.

    First stdin is closed and the process gets ``eof_grace`` seconds to exit on its own
    (an agent flushes its session file then); then SIGTERM and ``term_grace`` seconds;
    then SIGKILL and ``kill_grace`` seconds to be reaped.
    """

    eof_grace: float = 5.0
    term_grace: float = 5.0
    kill_grace: float = 5.0

    @property
    def total(self) -> float:
        """The longest :meth:`SpawnedProcess.aclose` can take."""
        return self.eof_grace + self.term_grace + self.kill_grace

    @classmethod
    def immediate(cls) -> StopPolicy:
        """SIGKILL straight away (used when a node is being destroyed)."""
        return cls(eof_grace=0.0, term_grace=0.0, kill_grace=5.0)


class SpawnedProcess(ABC):
    """A process running on a node, with its three standard streams.

    ``stdin`` is a byte send stream (close it to send EOF); ``stdout`` and ``stderr`` are
    byte receive streams, kept apart. A caller that does not read ``stderr`` should still
    drain or close it, or a chatty process may block on a full pipe.

    Use it as an async context manager, or call :meth:`aclose`: both stop the process with
    its :class:`StopPolicy` if it is still running, release its streams, and are idempotent,
    shielded from cancellation and bounded by the policy's total time.
    """

    stdin: ByteSendStream
    stdout: ByteReceiveStream
    stderr: ByteReceiveStream

    def __init__(self, stop_policy: StopPolicy | None = None) -> None:
        self.stop_policy = stop_policy or StopPolicy()
        self._closed = False
        self._close_lock = anyio.Lock()

    @property
    @abstractmethod
    def returncode(self) -> int | None:
        """The exit status once the process has exited and been reaped, else ``None``.

        A process killed by signal N reports ``-N`` where the platform can tell a signal
        from an exit status (local); where it cannot (Docker), ``128 + N``, as a shell would.
        """

    @abstractmethod
    async def wait(self) -> int:
        """Wait for the process to exit and return its exit status (see :attr:`returncode`).

        Raises :class:`~nodeprov.errors.NodeGoneError` if the node vanished meanwhile.
        """

    @abstractmethod
    async def terminate(self) -> None:
        """Ask the process (and what it started, where the platform allows) to stop: SIGTERM.

        Does nothing if it has already exited. Never raises for a gone process.
        """

    @abstractmethod
    async def kill(self) -> None:
        """Kill the process (and what it started, where the platform allows): SIGKILL.

        Does nothing if it has already exited. Never raises for a gone process.
        """

    async def _release(self) -> None:
        """Free what the process holds once it has exited (streams, leftover children)."""
        for stream in (self.stdout, self.stderr):
            await stream.aclose()

    async def aclose(self) -> None:
        """Stop the process with :attr:`stop_policy` if it runs, then release its streams.

        Idempotent and shielded from cancellation; takes at most ``stop_policy.total``
        seconds (plus a short release).
        """
        with anyio.CancelScope(shield=True):
            async with self._close_lock:
                if self._closed:
                    return
                policy = self.stop_policy
                await _close_quietly(self.stdin)
                steps = (
                    (policy.eof_grace, None),
                    (policy.term_grace, self.terminate),
                    (policy.kill_grace, self.kill),
                )
                for grace, signal in steps:
                    if self.returncode is not None:
                        break
                    if signal is not None:
                        await signal()
                    with anyio.move_on_after(grace if grace > 0 else 0.05), suppress(NodeGoneError):
                        await self.wait()  # a vanished node took the process with it
                with anyio.move_on_after(5):
                    await self._release()
                self._closed = True

    async def discard(self) -> None:
        """Release the process's streams without stopping it: its node is gone, and took the
        process with it. Idempotent and shielded; bounded by one second."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            if self._closed:
                return
            self._closed = True
            await _close_quietly(self.stdin)
            await self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class PreparedSpawn(ABC):
    """A spawn started ahead of its command (see :meth:`~nodeprov.node.NodeHandle.prepare`): an exec
    channel open on the node, and a process there waiting to be told what to run."""

    @abstractmethod
    async def start(self, options: SpawnOptions) -> SpawnedProcess | None:
        """Start ``options`` (its cwd resolved) through the prepared channel; ``None`` when
        the channel cannot take them (say, an environment name only another way can set) or
        is found dead before anything could run: the caller spawns the usual way. Used up
        either way: what is not handed out is closed.

        Raises:
            as :meth:`~nodeprov.node.NodeHandle.spawn`, once the command may have started.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Close the channel unused: the waiting process ends, having run nothing.
        Idempotent; never raises; bounded by a few seconds."""


async def _close_quietly(stream: ByteSendStream) -> None:
    try:
        with anyio.move_on_after(1):
            await stream.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the reading side is gone already: EOF is moot


SpawnFn = Callable[[SpawnOptions], Awaitable[SpawnedProcess]]
"""Start a process on a node. ``NodeHandle.spawn`` is one; the SDK bridge needs only this."""
