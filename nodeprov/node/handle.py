"""A provisioned node: :class:`NodeHandle`, what every provider's node is."""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from types import MappingProxyType, TracebackType
from typing import ClassVar, Self

import anyio
import anyio.lowlevel

from ..errors import (
    ConfigError,
    DeadlineError,
    NodeGoneError,
    NodePathError,
    NodeprovError,
    NodeSuspendedError,
    SpawnError,
)
from ..spawn import PreparedSpawn, SpawnedProcess, SpawnOptions
from . import files
from .files import kill_now
from .state import NODE_TRANSITIONS, NodeState

__all__ = ["NodeHandle"]

# Positional parameters: the command. Started in the background, with nothing of the channel.
_DETACH = """\
if command -v setsid >/dev/null 2>&1; then setsid "$@" </dev/null >/dev/null 2>&1 &
else "$@" </dev/null >/dev/null 2>&1 &
fi
"""

logger = logging.getLogger("nodeprov")


class NodeHandle(ABC):
    """A provisioned node.

    ``spawn`` starts a process on it (it is a :data:`~nodeprov.spawn.SpawnFn`); ``destroy``
    removes the node and everything it runs. ``async with handle:`` destroys on exit.

    Attributes: ``node_id``, ``provider`` (its registered name), ``labels`` (what every
    resource of the node carries), ``workdir`` (default cwd of spawns, a path on the node),
    ``base_env`` (the environment a spawn starts from before its own ``env``), and
    ``tool_paths`` (where the executables of :attr:`NodeConfig.tools` lie on the node, by
    name), and ``file_roots`` (the absolute paths under
    which :meth:`write_file` and :meth:`read_file` may reach: ``/`` for a container or a VM,
    the node's own directories for a local node).
    """

    destroy_timeout: ClassVar[float] = 120.0
    """Upper bound of :meth:`destroy`, in seconds."""

    can_suspend: ClassVar[bool] = False
    """Whether nodes of this kind implement :meth:`suspend` and :meth:`wake`."""

    contains_spawns: ClassVar[bool] = False
    """Whether the node ends all a spawn started, when its command or this control plane ends."""

    suspend_timeout: ClassVar[float] = 300.0
    """Upper bound of :meth:`suspend`, in seconds."""

    def __init__(
        self,
        *,
        node_id: str,
        provider: str,
        labels: Mapping[str, str],
        workdir: str,
        base_env: Mapping[str, str],
        tool_paths: Mapping[str, str] | None = None,
        file_roots: Sequence[str] = ("/",),
        suspended: bool = False,
    ) -> None:
        self.node_id = node_id
        self.provider = provider
        self.labels: Mapping[str, str] = MappingProxyType(dict(labels))
        self.workdir = workdir
        self.base_env: Mapping[str, str] = MappingProxyType(dict(base_env))
        self.tool_paths: Mapping[str, str] = MappingProxyType(dict(tool_paths or {}))
        self.file_roots = tuple(posixpath.normpath(root) for root in file_roots)
        self._processes: set[SpawnedProcess] = set()
        self._prepared: PreparedSpawn | None = None
        self._prepare_lock = anyio.Lock()
        self._state = NodeState.SUSPENDED if suspended else NodeState.ACTIVE
        self._destroyed_suspended = False
        self._destroy_lock = anyio.Lock()

    @property
    def state(self) -> NodeState:
        """Where the handle stands in its lifecycle (see :mod:`nodeprov.node.state`)."""
        return self._state

    @property
    def suspended(self) -> bool:
        """Whether the node's compute is stopped (see :meth:`suspend`), as far as this handle
        knows: from a suspend to a wake, and on through the destroy of a suspended node. A
        provider's :meth:`~NodeProvider.attach` tells it from the platform."""
        return self._state is NodeState.SUSPENDED or self._destroyed_suspended

    @property
    def destroyed(self) -> bool:
        """Whether :meth:`destroy` has completed."""
        return self._state is NodeState.DESTROYED

    def _move(self, target: NodeState) -> None:
        """Enter ``target`` (staying where the handle is counts as a move)."""
        if target is not self._state:
            if target not in NODE_TRANSITIONS[self._state]:
                raise RuntimeError(f"node {self.node_id}: no transition {self._state} -> {target}")
            if target is NodeState.DESTROYING:
                self._destroyed_suspended = self._state is NodeState.SUSPENDED
            self._state = target

    async def spawn(self, options: SpawnOptions) -> SpawnedProcess:
        """Start ``options`` on the node and return the running process.

        If the call is cancelled, a process it had already started is killed: a
        cancelled spawn leaves nothing running.

        ``options.cwd`` is resolved by :meth:`node_path`: providers always receive an
        absolute path inside :attr:`file_roots`.

        Raises:
            NodePathError: ``options.cwd`` is outside the node.
            NodeGoneError: the node was destroyed, or is being destroyed.
            CommandNotFoundError: the command does not exist on the node.
            SpawnError: the process could not be started for another reason (bad cwd...).
            ProviderError: the platform failed.
        """
        if self._state.closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if self._state is NodeState.SUSPENDED:
            raise NodeSuspendedError(f"node {self.node_id} is suspended: wake it first")
        options = dataclasses.replace(options, cwd=self.node_path(options.cwd or self.workdir))
        self._processes = {p for p in self._processes if p.returncode is None}
        prepared, self._prepared = self._prepared, None
        process = await prepared.start(options) if prepared is not None else None
        if process is None:
            process = await self._spawn(options)
        self._processes.add(process)
        try:
            await anyio.lowlevel.checkpoint()  # a cancellation that came during _spawn
        except BaseException:
            await kill_now(process)
            raise
        if self._state.closing:
            await kill_now(process)
            raise NodeGoneError(f"node {self.node_id} was destroyed during spawn")
        return process

    async def prepare(self) -> None:
        """Open, ahead of time, what the next :meth:`spawn` needs: an exec channel, and a
        process on the node waiting for its command. That spawn then skips the platform's
        round trips to start an exec (a warm pool prepares its ready nodes, so that a
        claim's first spawn starts at once). The process is the preamble only: it runs
        nothing until a spawn tells it what, and the spawn's process is then exactly what
        :meth:`spawn` would have started. A provider with nothing to open ahead (a local
        node forks at once), or a node prepared already, does nothing. :meth:`destroy`,
        :meth:`suspend`, :meth:`kill_processes` and :meth:`release_prepared` close it unused.

        Raises:
            NodeGoneError: the node is destroyed, or is being destroyed.
            NodeSuspendedError: the node is suspended.
            ProviderError: the platform failed.
        """
        if self._state.closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if self._state is NodeState.SUSPENDED:
            raise NodeSuspendedError(f"node {self.node_id} is suspended: wake it first")
        async with self._prepare_lock:  # one channel at a time: a second prepare finds it
            if self._prepared is not None:
                return
            prepared = await self._prepare()
            if prepared is None:
                return
            try:
                await anyio.lowlevel.checkpoint()  # a cancellation that came during _prepare
            except BaseException:
                await prepared.aclose()
                raise
            if self._state is not NodeState.ACTIVE:
                await prepared.aclose()  # destroyed or suspended meanwhile
            else:
                self._prepared = prepared

    @property
    def prepared(self) -> bool:
        """Whether the next :meth:`spawn` has a channel :meth:`prepare` opened for it."""
        return self._prepared is not None

    async def release_prepared(self) -> None:
        """Close what :meth:`prepare` opened, unused (nothing runs); nothing if there is
        none. Never raises; shielded, and bounded by a few seconds."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            with anyio.CancelScope(shield=True):
                await prepared.aclose()

    async def spawn_detached(self, options: SpawnOptions) -> None:
        """Start ``options`` on the node with no channel: its stdin, stdout and stderr are
        ``/dev/null``, it leads a session of its own, and it outlives the exec channel and
        this control plane, though not the node (its destroy ends it). Returns once it has
        started. What a keeper (:func:`~nodeprov.node.keeper.keep`) runs as.

        Raises:
            NodePathError, NodeGoneError, NodeSuspendedError, CommandNotFoundError,
                SpawnError, ProviderError: as :meth:`spawn`.
        """
        if self._state.closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if self._state is NodeState.SUSPENDED:
            raise NodeSuspendedError(f"node {self.node_id} is suspended: wake it first")
        await self._spawn_detached(
            dataclasses.replace(options, cwd=self.node_path(options.cwd or self.workdir))
        )

    async def _spawn_detached(self, options: SpawnOptions) -> None:
        """Start a detached process (provider hook; ``options.cwd`` is resolved): by default
        through :meth:`_spawn`, a shell that starts it in the background in a session of its
        own (``setsid`` where there is one) and exits. A provider whose spawns end with
        their channel, or whose every process dies with the control plane, overrides it."""
        process = await self.spawn(
            dataclasses.replace(
                options, command="/bin/sh", args=["-c", _DETACH, "nodeprov-detach", *options.argv]
            )
        )
        async with process:
            await process.stdin.aclose()
            code = await process.wait()
        if code != 0:
            raise SpawnError(
                f"cannot start {options.command!r} detached on node {self.node_id} (status {code})"
            )

    def track(self, process: SpawnedProcess) -> None:
        """Count ``process`` among the node's, as if :meth:`spawn` had started it: a process
        on the node that another way started (a :class:`~nodeprov.node.keeper.KeptProcess`).
        :meth:`kill_processes` kills it, and a destroy discards it."""
        self._processes.add(process)

    def node_path(self, path: str) -> str:
        """``path`` as an absolute, normalised path on the node: relative paths are taken
        from :attr:`workdir`, ``..`` is resolved lexically.

        Raises:
            NodePathError: the path is empty, contains NUL, or falls outside
                :attr:`file_roots`.
        """
        if not path or "\x00" in path:
            raise NodePathError(f"invalid path on node {self.node_id}: {path!r}")
        full = "/" + posixpath.normpath(posixpath.join(self.workdir, path)).lstrip("/")
        if not any(root in ("/", full) or full.startswith(root + "/") for root in self.file_roots):
            raise NodePathError(f"{path!r} is outside node {self.node_id} ({', '.join(self.file_roots)})")
        return full

    async def write_file(self, path: str, data: bytes | AsyncIterable[bytes], *, mode: int = 0o600) -> None:
        """Write ``data`` (bytes, or an async iterable of byte chunks, streamed in bounded
        memory) to ``path`` on the node (see :meth:`node_path`), replacing any file there.

        The file appears whole or not at all (written beside it, then renamed), with
        permissions ``mode``; missing parent directories are created ``0700``. Binary-safe.

        Raises:
            NodePathError: the path is refused.
            NodeFileError: the node could not write it (a directory in the way, no
                permission, a full disk); nothing is left at ``path``.
            NodeGoneError, SpawnError, ProviderError: as :meth:`spawn`.
        """
        target = self.node_path(path)
        if not 0 <= mode <= 0o7777:
            raise ConfigError(f"invalid file mode {mode:o}")
        await files.write_file(self.spawn, self.node_id, target, data, mode=mode)

    @asynccontextmanager
    async def read_file(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        """Read ``path`` on the node (see :meth:`node_path`) as a stream of byte chunks, in
        bounded memory::

            async with node.read_file("out.bin") as chunks:
                async for chunk in chunks:
                    ...

        Leaving the block early stops the read. A missing file is reported on entry; a
        failure after the first bytes, at the end of the iteration.

        Raises:
            NodePathError: the path is refused.
            NodeFileNotFoundError: there is no file at ``path``.
            NodeFileError: it is a directory, or unreadable.
            NodeGoneError, SpawnError, ProviderError: as :meth:`spawn`.
        """
        async with files.read_file(self.spawn, self.node_id, self.node_path(path)) as chunks:
            yield chunks

    async def suspend(self, *, suspend_timeout: float | None = None) -> None:
        """Stop the node's compute and keep its files, until :meth:`wake`: a node kept for a
        paused run then costs (almost) nothing while it waits. EC2 stops the instance (its
        disk stays, no compute is billed); Docker pauses the container. An optional
        capability: see :attr:`can_suspend`.

        Processes running on the node do not survive a suspend on every platform (a
        stopped machine reboots), so their handles are released, as by :meth:`destroy`;
        only the node's files are sure to be kept. :meth:`spawn` raises
        :class:`NodeSuspendedError` until :meth:`wake`. Idempotent; shielded from
        cancellation (a half-done suspend is finished) and bounded by ``suspend_timeout`` seconds
        (default :attr:`suspend_timeout`); one that runs out of time may still complete on
        the platform, and can be called again.

        Raises:
            ConfigError: this kind of node cannot be suspended.
            NodeGoneError: the node is destroyed.
            DeadlineError: the platform did not finish in time.
            ProviderError: the platform failed.
        """
        if not self.can_suspend:
            raise ConfigError(f"{self.provider} nodes cannot be suspended")
        if self._state.closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        limit = self.suspend_timeout if suspend_timeout is None else suspend_timeout
        with anyio.CancelScope(shield=True), anyio.move_on_after(limit) as deadline:
            await self._release_processes()
            await self._suspend()
        if deadline.cancelled_caught:
            raise DeadlineError(f"suspending node {self.node_id} took over {limit:g}s")
        if not self._state.closing:  # a destroy that began meanwhile has the last word
            self._move(NodeState.SUSPENDED)
        logger.info("suspended node %s (%s)", self.node_id, self.provider)

    async def wake(self) -> None:
        """Undo :meth:`suspend` and return once processes can be spawned again (the machine
        started, its exec channel answering). Idempotent: a node that is not suspended is
        left as it is, also where nodes cannot be suspended. Cancellable: a cancelled wake
        leaves the node suspended or awake, never broken, and can be called again.

        Raises:
            NodeGoneError: the node is destroyed.
            ProviderError: the platform failed, or the node did not come back in time.
        """
        if self._state.closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if not self.can_suspend:
            return
        await self._wake()
        if not self._state.closing:
            self._move(NodeState.ACTIVE)
        logger.info("woke node %s (%s)", self.node_id, self.provider)

    async def _suspend(self) -> None:
        """Suspend the node on its platform (provider hook); fine if it is already."""
        raise NotImplementedError

    async def _wake(self) -> None:
        """Wake the node on its platform and wait until it can spawn (provider hook); fine
        if it is awake."""
        raise NotImplementedError

    async def destroy(self, *, destroy_timeout: float | None = None) -> None:
        """Destroy the node: remove it on its platform, which ends every process on it.

        The platform removal comes first and takes the node's processes with it; the
        handles of processes spawned here are then released without stopping each one (a
        stop policy per process would cost engine calls the removal makes moot).

        Idempotent (a second call, or a call on a node already gone from outside, returns
        quietly), shielded from cancellation, and bounded by ``timeout`` seconds (default
        :attr:`destroy_timeout`) plus at most one second to release process handles. A
        failed destroy can be retried.

        Raises:
            DeadlineError: the platform did not finish in time (resources may remain; they
                carry labels for a reaper).
            ProviderError: the platform refused.
        """
        limit = self.destroy_timeout if destroy_timeout is None else destroy_timeout
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(limit) as deadline:
                async with self._destroy_lock:
                    if self._state is NodeState.DESTROYED:
                        return
                    self._move(NodeState.DESTROYING)
                    try:
                        await self._destroy()
                    finally:
                        await self._release_processes()
                    self._move(NodeState.DESTROYED)
                    logger.info("destroyed node %s (%s)", self.node_id, self.provider)
            if deadline.cancelled_caught:
                await self._release_processes()
                raise DeadlineError(f"destroying node {self.node_id} took over {limit}s")

    async def kill_processes(self) -> None:
        """SIGKILL, now, every process spawned through this handle that still runs (with
        what it started, where the platform allows): what a limit does to what it bounds.
        Their handles stay with their owners, whose closing then finds them ended. Never
        raises; shielded, and bounded by a few seconds."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self.release_prepared()
            for process in [p for p in self._processes if p.returncode is None]:
                with suppress(NodeprovError):
                    await process.kill()

    async def _release_processes(self) -> None:
        """Drop the handles of this node's processes (their node is gone), within a second."""
        processes, self._processes = list(self._processes), set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await self.release_prepared()
            for process in processes:
                await process.discard()

    @abstractmethod
    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        """Start the process (provider hook). Raise nodeprov errors only."""

    async def _prepare(self) -> PreparedSpawn | None:
        """Open a channel and start a process waiting for its command (provider hook; see
        :meth:`prepare`); ``None``, by default, for a provider with nothing to open ahead.
        Bounded, and shielded where a cancellation would orphan what it started. Raise
        nodeprov errors only."""
        return None

    @abstractmethod
    async def _destroy(self) -> None:
        """Remove the node's resources (provider hook); fine if they are already gone."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.destroy()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.provider}:{self.node_id}>"
