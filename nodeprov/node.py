"""Nodes and the providers that make them: :class:`NodeConfig`, :class:`NodeHandle`,
:class:`NodeProvider`, :class:`ProviderSettings`.

A provider turns a platform (a local directory, Docker, a Codespace, EC2, an SSH host) into
one interface: ``provision(config) -> NodeHandle``; a handle spawns processes and destroys
the node. Provider code implements the underscore hooks (``_provision``, ``_spawn``,
``_destroy``); the public methods here add what every provider must guarantee: idempotent,
shielded, bounded teardown, and no leftovers when a call is cancelled half-way.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import posixpath
import re
import secrets
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

import anyio
import anyio.lowlevel
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import (
    ConfigError,
    DeadlineError,
    NodeFileError,
    NodeFileNotFoundError,
    NodeGoneError,
    NodePathError,
    NodeprovError,
    NodeSuspendedError,
)
from .settings import Settings, secret_field
from .spawn import SpawnedProcess, SpawnOptions, StopPolicy

__all__ = [
    "LABEL_EXPIRES_AT",
    "LABEL_NODE_ID",
    "LABEL_OWNER",
    "LABEL_PROVISION",
    "LABEL_SESSION_ID",
    "GarbageReport",
    "NodeConfig",
    "NodeHandle",
    "NodeInfo",
    "NodeProvider",
    "OwnerCheck",
    "ProviderSettings",
    "Requirement",
    "Rollback",
    "abandoned",
    "default_owner",
    "expired",
    "is_node_id",
    "owner_alive",
    "process_start_time",
    "secret_field",
]

logger = logging.getLogger("nodeprov")

LABEL_NODE_ID = "nodeprov.node-id"
LABEL_SESSION_ID = "nodeprov.session-id"
LABEL_OWNER = "nodeprov.owner"
LABEL_EXPIRES_AT = "nodeprov.expires-at"
LABEL_PROVISION = "nodeprov.provision"
"""A digest of :attr:`NodeConfig.provision_key`: the mark of the provisioning that made the node."""

_NODE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def process_start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or ``None`` if
    there is no such process or it has exited (a zombie). With the pid, it names a process
    in a way a recycled pid cannot imitate."""
    try:
        # After the parenthesised command name: field 3 is the state, field 22 the start.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


@functools.cache
def _pid_namespace() -> str:
    """This process's PID namespace and boot (``inode.boot-id``): pids mean something only
    within both, and a hostname is shared by containers, pods and cloned machines."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "unknown"
    return f"{namespace}.{boot}"


def default_owner() -> str:
    """Identify this control-plane process as ``host:pid:start:namespace`` (see
    :func:`process_start_time`), so a reaper in the same PID namespace can tell a live owner
    from a recycled pid. Orchestrators with a store own nodes by lease instead (see
    :mod:`nodeprov.runs`), which works across hosts."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '0'}:{_pid_namespace()}"


def owner_alive(owner: str) -> bool | None:
    """Whether the control-plane process named by ``owner`` (see :func:`default_owner`) lives.

    ``None`` when it cannot be told from here: another host or PID namespace, or an owner of
    another form (a lease, ``cli:USER@HOST``). A recycled pid is told apart by its start time.
    """
    host, pid, start, namespace = [*owner.split(":", 3), "", "", ""][:4]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    if namespace and namespace != _pid_namespace():
        return None
    started = process_start_time(int(pid))
    if started is None:
        return False
    return start in ("", "0") or started == start


OwnerCheck = Callable[[str], "bool | None"]
"""Whether the owner named by a ``nodeprov.owner`` label is alive: ``True``, ``False``, or
``None`` when it cannot be told (the node is then kept until it expires)."""


def abandoned(
    labels: Mapping[str, str], now: datetime | None = None, *, alive: OwnerCheck = owner_alive
) -> str | None:
    """Why a node with these labels may be reaped, or ``None`` if it must be kept.

    A node is abandoned when its ``nodeprov.expires-at`` has passed, or when ``alive`` says
    its owner is gone. A node whose owner cannot be checked is kept until it expires.
    """
    if (why := expired(labels, now)) is not None:
        return why
    owner = labels.get(LABEL_OWNER, "")
    if alive(owner) is False:
        return f"owner {owner} is gone"
    return None


def expired(labels: Mapping[str, str], now: datetime | None = None) -> str | None:
    """Why a node with these labels is past its hard lifetime (``nodeprov.expires-at``), or
    ``None`` while it is not (or has none)."""
    expires = labels.get(LABEL_EXPIRES_AT)
    if not expires:
        return None
    try:
        if datetime.fromisoformat(expires) <= (now or datetime.now(UTC)):
            return f"expired at {expires}"
    except ValueError:
        return f"unreadable expiry {expires!r}"
    return None


def is_node_id(value: str) -> bool:
    """Whether ``value`` is a valid node id (see :attr:`NodeConfig.node_id`). A node id read
    back from a platform (a label, a tag, a record) is trusted only if it is one."""
    return _NODE_ID.fullmatch(value) is not None  # not match(): "$" would let a trailing newline in


def _new_node_id() -> str:
    return f"np-{secrets.token_hex(6)}"


def _new_provision_key() -> str:
    return secrets.token_urlsafe(24)


_TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


class NodeConfig(BaseModel):
    """What a node is for: identity, ownership, lifetime and environment.

    Provider-independent; what a platform needs (an image, an instance type) is in that
    provider's settings. Unknown fields are rejected.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: str = Field(
        default_factory=_new_node_id,
        description="Identifier of the node, unique per provider: lowercase letters, digits "
        "and '-', at most 63 characters. Generated when not given.",
    )
    session_id: str | None = Field(
        default=None, description="The workflow session this node serves (label only)."
    )
    owner: str = Field(
        default_factory=default_owner,
        description="Who holds the node; a reaper removes nodes whose owner is gone. "
        "Defaults to this process (host:pid:start-time:pid-namespace); an orchestrator sets "
        "its lease ('lease:ID').",
    )
    ttl: timedelta | None = Field(
        default=timedelta(hours=24),
        description="Hard lifetime. The node is labelled with its expiry time, and reapers "
        "remove it after that even while its owner lives. None: no expiry.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels for every resource of the node; the 'nodeprov.' prefix is reserved.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment every process on the node starts with, under what each spawn asks for.",
    )
    workdir: str | None = Field(
        default=None,
        description="Working directory on the node. When it names an existing directory of "
        "the user's, destroy leaves it in place. Provider-chosen when not given.",
    )
    tools: dict[str, str] = Field(
        default_factory=dict,
        description="Executables of this machine (the control plane) to make available on the node, "
        "by name: name -> path here. The provider mounts them read-only (or uses them in place, or "
        "copies them) and reports where each lies on the node in NodeHandle.tool_paths.",
    )
    provision_key: str = Field(
        default_factory=_new_provision_key,
        repr=False,
        min_length=16,
        description="A secret of this provisioning, random by default. The node's resources carry "
        "its digest (label nodeprov.provision). A provision that finds a node of its id already "
        "there adopts it only if it carries this key's digest (an earlier attempt of the same "
        "provision, cut off between creating and returning: retry with the same config); any "
        "other node of that id is someone else's, and provision fails without touching it.",
    )

    @field_validator("node_id")
    @classmethod
    def _check_node_id(cls, value: str) -> str:
        if not is_node_id(value):
            raise ValueError("must be lowercase letters, digits and '-', at most 63 characters")
        return value

    @field_validator("tools")
    @classmethod
    def _check_tools(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            if not _TOOL_NAME.fullmatch(name) or not os.path.isabs(path):
                raise ValueError(f"tool {name!r}: a name of letters, digits, '.', '_', '-' and a full path")
        return value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = [key for key in value if key.startswith("nodeprov.")]
        if reserved:
            raise ValueError(f"the 'nodeprov.' label prefix is reserved: {reserved}")
        return value

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        SpawnOptions("true", env=value)  # the same rules as for a spawn
        return value

    @property
    def provision_mark(self) -> str:
        """The digest of :attr:`provision_key` that the node's resources carry (32 hex
        digits: a valid label value on every platform). It tells this provisioning's node
        from another's, and cannot be turned back into the key."""
        return hashlib.sha256(self.provision_key.encode()).hexdigest()[:32]

    def made_by_this(self, labels: Mapping[str, str]) -> bool:
        """Whether a node found with ``labels`` was made by this provisioning (an earlier
        attempt of it): the only node a provision may adopt."""
        return secrets.compare_digest(labels.get(LABEL_PROVISION, ""), self.provision_mark)

    def resource_labels(self, now: datetime | None = None) -> dict[str, str]:
        """The labels every resource of this node carries, the ``nodeprov.*`` ones included."""
        labels = {
            **self.labels,
            LABEL_NODE_ID: self.node_id,
            LABEL_OWNER: self.owner,
            LABEL_SESSION_ID: self.session_id or "",
            LABEL_PROVISION: self.provision_mark,
        }
        if self.ttl is not None:
            expires = (now or datetime.now(UTC)) + self.ttl
            labels[LABEL_EXPIRES_AT] = expires.isoformat(timespec="seconds")
        return labels


class ProviderSettings(Settings):
    """Base of every provider's settings model (see :class:`~nodeprov.settings.Settings`):
    frozen, unknown fields rejected, secrets declared with :func:`secret_field`; a control
    plane stores :meth:`storable` and asks for :meth:`secrets_set` again when it needs them
    (a resume)."""


@dataclass(frozen=True)
class NodeInfo:
    """A node as its provider's platform reports it (see :meth:`NodeProvider.list_nodes`).

    ``state`` is the platform's own word ("running", "exited", ...).
    """

    node_id: str
    provider: str
    labels: Mapping[str, str]
    state: str


@dataclass(frozen=True)
class Requirement:
    """One thing a provider needs on the control plane (a tool, a credential) and whether
    it is there. ``detail`` says where it was found, or how to get it."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class GarbageReport:
    """What :meth:`NodeProvider.collect_garbage` did: the nodes it reaped (or, in a dry run,
    would reap), and those whose destroy failed, with why."""

    reaped: list[NodeInfo] = field(default_factory=list)
    failed: list[tuple[NodeInfo, str]] = field(default_factory=list)


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
    ) -> None:
        self.node_id = node_id
        self.provider = provider
        self.labels: Mapping[str, str] = MappingProxyType(dict(labels))
        self.workdir = workdir
        self.base_env: Mapping[str, str] = MappingProxyType(dict(base_env))
        self.tool_paths: Mapping[str, str] = MappingProxyType(dict(tool_paths or {}))
        self.file_roots = tuple(posixpath.normpath(root) for root in file_roots)
        self._processes: set[SpawnedProcess] = set()
        self.suspended = False
        """Whether the node is suspended (see :meth:`suspend`), as far as this handle knows;
        :meth:`~NodeProvider.attach` tells it from the platform."""
        self._closing = False
        self._destroyed = False
        self._destroy_lock = anyio.Lock()

    @property
    def destroyed(self) -> bool:
        """Whether :meth:`destroy` has completed."""
        return self._destroyed

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
        if self._closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if self.suspended:
            raise NodeSuspendedError(f"node {self.node_id} is suspended: wake it first")
        options = dataclasses.replace(options, cwd=self.node_path(options.cwd or self.workdir))
        self._processes = {p for p in self._processes if p.returncode is None}
        process = await self._spawn(options)
        self._processes.add(process)
        try:
            await anyio.lowlevel.checkpoint()  # a cancellation that came during _spawn
        except BaseException:
            await _kill(process)
            raise
        if self._closing:
            await _kill(process)
            raise NodeGoneError(f"node {self.node_id} was destroyed during spawn")
        return process

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
        partial = f"{target}.nodeprov-{secrets.token_hex(6)}"
        try:
            writer = SpawnOptions("sh", ["-c", _WRITE_PARTIAL, "nodeprov-write", target, partial])
            async with await self.spawn(writer) as process:
                try:
                    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        if isinstance(data, bytes):
                            await process.stdin.send(data)
                        else:
                            async for chunk in data:
                                await process.stdin.send(chunk)
                        await process.stdin.aclose()
                except BaseException:
                    await _kill(process)  # before its stdin closes: a cut stream is not a file
                    raise
                await _file_outcome(process, self.node_id, target)
            await self._file_step(_COMMIT, target, partial, f"{mode:o}")
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10), suppress(NodeprovError):
                await self._file_step(_DISCARD, target, partial)
            raise

    async def _file_step(self, script: str, *args: str) -> None:
        async with await self.spawn(SpawnOptions("sh", ["-c", script, "nodeprov-file", *args])) as step:
            await step.stdin.aclose()
            await _file_outcome(step, self.node_id, args[0])

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
        target = self.node_path(path)
        options = SpawnOptions("sh", ["-c", _READ_FILE, "nodeprov-read", target])
        async with await self.spawn(options) as process:
            await process.stdin.aclose()
            try:
                first = await process.stdout.receive(_CHUNK)
            except anyio.EndOfStream:
                await _file_outcome(process, self.node_id, target)
                first = b""

            async def chunks() -> AsyncIterator[bytes]:
                if not first:
                    return
                yield first
                async for chunk in process.stdout:
                    yield chunk
                await _file_outcome(process, self.node_id, target)

            yield chunks()

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
        if self._closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        limit = self.suspend_timeout if suspend_timeout is None else suspend_timeout
        with anyio.CancelScope(shield=True), anyio.move_on_after(limit) as deadline:
            await self._release_processes()
            await self._suspend()
        if deadline.cancelled_caught:
            raise DeadlineError(f"suspending node {self.node_id} took over {limit:g}s")
        self.suspended = True
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
        if self._closing:
            raise NodeGoneError(f"node {self.node_id} is destroyed")
        if not self.can_suspend:
            return
        await self._wake()
        self.suspended = False
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
                    if self._destroyed:
                        return
                    self._closing = True
                    try:
                        await self._destroy()
                    finally:
                        await self._release_processes()
                    self._destroyed = True
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
            for process in [p for p in self._processes if p.returncode is None]:
                with suppress(NodeprovError):
                    await process.kill()

    async def _release_processes(self) -> None:
        """Drop the handles of this node's processes (their node is gone), within a second."""
        processes, self._processes = list(self._processes), set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            for process in processes:
                await process.discard()

    @abstractmethod
    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        """Start the process (provider hook). Raise nodeprov errors only."""

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


_CHUNK = 65536

# POSIX sh. "$1" is the target, "$2" the partial file beside it; both are absolute and
# normalised, so no operand starts with "-". The partial file becomes the target only once
# the control plane has sent every byte (_COMMIT), so a cut stream never replaces a file.
_WRITE_PARTIAL = """
umask 077
[ -d "$1" ] && { echo "$1 is a directory" >&2; exit 1; }
case $1 in */*) dir=${1%/*} ;; esac
mkdir -p "${dir:-/}" || exit 1
set -C
cat > "$2" || { rm -f "$2"; exit 1; }
"""
_COMMIT = """chmod "$3" "$2" && mv -f "$2" "$1" || { rm -f "$2"; exit 1; }"""
_DISCARD = """rm -f "$2" """
_READ_FILE = """
[ -e "$1" ] || { echo "no such file: $1" >&2; exit 66; }
[ -d "$1" ] && { echo "$1 is a directory" >&2; exit 1; }
exec cat "$1"
"""
_NOT_FOUND = 66


async def _file_outcome(process: SpawnedProcess, node_id: str, path: str) -> None:
    """Raise what the file script on ``node_id`` said, if it failed."""
    said = b""
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        while len(said) < 4096:
            said += await process.stderr.receive(4096)
    code = await process.wait()
    if code == 0:
        return
    detail = said.decode(errors="replace").strip() or f"exit status {code}"
    error = NodeFileNotFoundError if code == _NOT_FOUND else NodeFileError
    raise error(f"{path} on node {node_id}: {detail}")


async def _kill(process: SpawnedProcess) -> None:
    process.stop_policy = StopPolicy.immediate()
    await process.aclose()


class Rollback:
    """Undo steps of a half-finished provision, in reverse, if it fails or is cancelled.

    ::

        async with Rollback() as rollback:
            thing = await create()
            rollback.push(lambda: delete(thing))
            ...                                 # raise or get cancelled here: delete runs
        # success: the undo steps are dropped

    The undo steps run shielded from cancellation, bounded by ``timeout`` seconds in all.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._stack = AsyncExitStack()

    def push(self, undo: Any) -> None:
        """Register ``undo``, an async callable taking no arguments."""

        async def run(*_exc: object) -> None:
            await undo()

        self._stack.push_async_exit(run)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self._stack.pop_all()
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout) as deadline:
            try:
                await self._stack.aclose()
            except Exception as error:  # noqa: BLE001 - the provision's own error is what propagates
                logger.warning(
                    "undoing a failed provision failed (%s); what it made carries labels for gc",
                    str(error).splitlines()[0] if str(error) else type(error).__name__,
                )
        if deadline.cancelled_caught:
            logger.warning(
                "undoing a failed provision took over %gs; what it made carries labels for gc", self.timeout
            )


SettingsT = TypeVar("SettingsT", bound=ProviderSettings)


class NodeProvider(ABC, Generic[SettingsT]):
    """Makes nodes on one platform.

    A provider class names itself (``name``), declares its settings model
    (``settings_model``), registers in the ``nodeprov.providers`` entry-point group, and
    implements :meth:`_provision`. Construct it with :func:`nodeprov.get_provider` or
    :meth:`from_settings`, which validate the settings.
    """

    name: ClassVar[str]
    settings_model: ClassVar[type[ProviderSettings]]

    def __init__(self, settings: SettingsT) -> None:
        self.settings = settings

    @classmethod
    def from_settings(cls, **raw: Any) -> Self:
        """Validate ``raw`` against :attr:`settings_model` and build the provider.

        Raises:
            ConfigError: a field is unknown, missing or invalid; the message names each.
        """
        try:
            settings = cls.settings_model.model_validate(raw)
        except ValidationError as error:
            allowed = ", ".join(cls.settings_model.model_fields) or "none"
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'settings'}: {err['msg']}" for err in error.errors()
            )
            raise ConfigError(
                f"invalid settings for provider {cls.name!r}: {problems} (fields: {allowed})"
            ) from None
        return cls(settings)  # type: ignore[arg-type]

    @classmethod
    def requirements(cls) -> list[Requirement]:
        """What this provider needs on the control plane, and whether each is present.

        Quick and side-effect free (it may look at PATH, files and environment, and
        must not call the platform). Used by ``nodeprov providers``.
        """
        return []

    def resolved_settings(self) -> SettingsT:
        """The settings with every default that comes from this process's environment made
        explicit (``DOCKER_HOST``, ``XDG_RUNTIME_DIR``, a kubeconfig's context, an AWS
        region): what a control plane stores with a run, so that another process in another
        environment (a reconcile, a resume) finds the same platform and the same nodes.
        Providers whose defaults depend on the environment override it; quick and side-effect
        free."""
        return self.settings

    async def probe(self) -> None:
        """Ask the platform, with these settings, whether nodes can be made; make nothing.

        Bounded by the caller (no deadline of its own). The default asks nothing: a
        provider whose platform can be reached without a call (the local host) is ready
        when its :meth:`requirements` are.

        Raises:
            ConfigError: the settings cannot work (a bad endpoint, unsupported options).
            ProviderError: the platform could not be reached or refused.
        """

    async def aclose(self) -> None:
        """Release what the provider holds (connections to a platform); nodes stay. A
        provider used again afterwards connects again. Idempotent; never raises.
        ``async with provider:`` calls it on exit."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def provision(self, config: NodeConfig | None = None) -> NodeHandle:
        """Create a node and wait until processes can be spawned on it.

        Cancellation-safe: if this is cancelled or fails half-way, whatever was created is
        removed before the exception propagates.

        Creates or fails: a node of ``config.node_id`` that exists already is adopted only
        when it carries ``config``'s provision mark (see :attr:`NodeConfig.provision_key`:
        this same provision, retried after it was cut off); any other is left exactly as it
        is, and this raises :class:`ProvisionError`.

        Raises:
            ProvisionError: the platform could not make the node, or a node of that id
                exists that this provisioning did not make.
            ConfigError: the config does not suit this provider.
            ProviderError: the platform failed otherwise.
        """
        config = config or NodeConfig()
        handle = await self._provision(config)
        try:
            await anyio.lowlevel.checkpoint()  # a cancellation that came at the very end
        except BaseException:
            await handle.destroy()
            raise
        logger.info("provisioned node %s (%s)", handle.node_id, self.name)
        return handle

    @abstractmethod
    async def _provision(self, config: NodeConfig) -> NodeHandle:
        """Create the node (provider hook); undo partial work on failure (see Rollback)."""

    @abstractmethod
    async def list_nodes(self) -> list[NodeInfo]:
        """Every node of this provider that exists on its platform, whoever made it.

        Raises:
            ProviderError: the platform could not be asked.
        """

    @abstractmethod
    async def attach(self, node_id: str) -> NodeHandle:
        """A handle on an existing node, made by this or another control-plane process.

        Raises:
            NodeGoneError: no such node exists.
            ProviderError: the platform could not be asked.
        """

    async def collect_garbage(
        self,
        *,
        now: datetime | None = None,
        dry_run: bool = False,
        alive: OwnerCheck = owner_alive,
        spare: Collection[str] = (),
        settle: float = 0.0,
    ) -> GarbageReport:
        """Destroy every node that is :func:`abandoned` (expired, or ``alive`` says its owner
        is gone). The node ids in ``spare`` (say, nodes a store holds for runs) are spared
        their owner's judgement, never their lifetime: every node ends at its expiry.

        Nodes of live owners are never touched before they expire. A node that vanishes
        meanwhile is skipped; a destroy that fails is reported in :attr:`GarbageReport.failed`
        and the others go on.
        With ``settle`` seconds, the nodes are listed again until no abandoned node has
        shown up for that long: a control plane killed mid-provision leaves requests that
        the platform still completes after its death.

        Raises:
            ProviderError: the platform could not be asked.
        """
        report = GarbageReport()
        done: set[str] = set()
        quiet_since = time.monotonic()
        while True:
            listed = await self.list_nodes()
            for info in listed:
                if not is_node_id(info.node_id) and info.node_id not in done:
                    done.add(info.node_id)
                    logger.warning("not reaping %r (%s): not a node id", info.node_id, self.name)
            found = [
                (info, reason)
                for info in listed
                if info.node_id not in done
                if (
                    reason := expired(info.labels, now)
                    if info.node_id in spare
                    else abandoned(info.labels, now, alive=alive)
                )
                is not None
            ]
            if found:
                quiet_since = time.monotonic()
            for info, reason in found:
                done.add(info.node_id)
                logger.info("reaping node %s (%s): %s", info.node_id, self.name, reason)
                if dry_run:
                    report.reaped.append(info)
                    continue
                try:
                    await (await self.attach(info.node_id)).destroy()
                except NodeGoneError:
                    continue
                except NodeprovError as error:
                    logger.warning("could not reap node %s (%s): %s", info.node_id, self.name, error)
                    report.failed.append((info, str(error)))
                    continue
                report.reaped.append(info)
            waited = time.monotonic() - quiet_since
            if dry_run or waited >= settle:
                return report
            await anyio.sleep(min(0.5, settle - waited))
