from __future__ import annotations

import logging
import os
import posixpath
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.to_thread
from pydantic import Field, ValidationError

from nodeprov.errors import ConfigError, NodeGoneError, NodeprovError, ProviderError, ProvisionError
from nodeprov.node import (
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Rollback,
    secret_field,
)
from nodeprov.spawn import StopPolicy
from nodeprov_ssh.link import Link, SshLoginSettings
from nodeprov_ssh.node import (
    CREATE,
    DEFAULT_PATH,
    DESTROY,
    DESTROY_OWN,
    LIST,
    PREPARE_ROOT,
    READ_RECORD,
    RECORD,
    NodeRecord,
    SshNode,
    run_script,
    said,
    ttl_seconds,
    upload_tool,
)

__all__ = ["SshNodeFields", "SshNodeSettings", "SshNodes", "SshProvider", "SshSettings"]

logger = logging.getLogger("nodeprov.ssh")


class SshNodeFields(ProviderSettings):
    """What the nodes on an SSH host are like: where they live, their environment, how their
    processes are stopped. Part of the settings of every provider whose nodes are reached
    over SSH."""

    root: str = Field(
        default=".nodeprov/nodes",
        description="Directory on the host under which each node gets its own; relative to the "
        "login's home. Made with mode 0700; refused unless it is the login user's and nobody "
        "else can write to it (whoever can may make the user delete files or kill processes).",
    )
    path: str = Field(
        default=DEFAULT_PATH,
        description="PATH of every process, unless the node config or the spawn sets one.",
    )
    env: dict[str, str] = secret_field(
        default_factory=dict,
        description="Environment of every process on the node; a secret: sent over each session's "
        "stdin, never on a command line or in the node's record.",
    )
    spawn_timeout: float = Field(default=30.0, gt=0, description="Seconds a process may take to start.")
    eof_grace: float = Field(default=5.0, ge=0, description="Seconds after stdin EOF before SIGTERM.")
    term_grace: float = Field(default=5.0, ge=0, description="Seconds after SIGTERM before SIGKILL.")


class SshNodeSettings(SshLoginSettings, SshNodeFields):
    """Nodes on a host reached over SSH (TCP), and how to log in to it."""


class SshSettings(SshNodeSettings):
    """Settings of the SSH provider: one host, and how to log in to it."""

    # Not the host, how it is logged in to (user, keys, agent), trusted (host keys), nor
    # where on it nodes go: where the operator's key and environment go.
    caller_settings: ClassVar[frozenset[str]] = frozenset({"spawn_timeout", "eof_grace", "term_grace"})

    host: str = Field(description="Host name, address, or a Host alias of the OpenSSH configuration.")


class SshNodes:
    """Nodes as directories under a root on one host, reached through one :class:`Link`;
    what the SSH provider is, and what an EC2 instance has once it answers SSH."""

    def __init__(self, provider: str, link: Link, settings: SshNodeFields) -> None:
        self.provider = provider
        self.link = link
        self.settings = settings
        self._root: str | None = None
        self._root_lock = anyio.Lock()

    async def root(self) -> str:
        """The root on the host, absolute; made on first use.

        Raises:
            ConfigError: the root is not safe to use.
            ProviderError, NodeGoneError: the host failed or could not be reached.
        """
        async with self._root_lock:
            if self._root is None:
                code, out, error = await run_script(self.link, PREPARE_ROOT, self.settings.root)
                if code == 3:
                    raise ConfigError(
                        f"{self.link.host}: refusing node root {self.settings.root}: {said(code, error)}"
                    )
                if code != 0 or not out.strip():
                    raise ProviderError(f"{self.link.host}: cannot make node root: {said(code, error)}")
                self._root = out.decode(errors="surrogateescape").rstrip("\n")
            return self._root

    def node(self, record: NodeRecord, directory: str) -> SshNode:
        settings = self.settings
        return SshNode(
            provider=self.provider,
            link=self.link,
            record=record,
            directory=directory,
            path=settings.path,
            env=settings.env,
            stop_policy=StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace),
            spawn_timeout=settings.spawn_timeout,
        )

    async def create(self, config: NodeConfig) -> SshNode:
        """Make the node's directory, its record, its tools and its watchdog; undone on failure."""
        root = await self.root()
        directory = posixpath.join(root, config.node_id)
        mark = config.provision_mark
        async with Rollback() as rollback:
            # Pushed first: a cancellation while the directory is made must not leave it. It
            # removes only a directory this provision made, never another's of that id.
            rollback.push(lambda: run_script(self.link, DESTROY_OWN, directory, mark, DESTROY))
            code, out, error = await run_script(
                self.link, CREATE, directory, config.workdir or "", mark, makes=True
            )
            if code == 5:
                return await self._adopt(config, directory)
            if code == 3:
                raise ProvisionError(f"node {config.node_id} exists already on {self.link.host}")
            if code == 4:
                raise ConfigError(f"{self.link.host}: {said(code, error)}")
            if code != 0:
                raise ProvisionError(
                    f"cannot make node {config.node_id} on {self.link.host}: {said(code, error)}"
                )
            tools = {
                name: await upload_tool(self.link, root, name, path) for name, path in config.tools.items()
            }
            record = NodeRecord(
                node_id=config.node_id,
                labels=config.resource_labels(),
                workdir=out.decode(errors="surrogateescape").rstrip("\n"),
                env=config.env,
                tools=tools,
            )
            written = record.model_dump_json().encode()
            code, _, error = await run_script(
                self.link,
                RECORD,
                directory,
                ttl_seconds(config.ttl),
                DESTROY,
                str(len(written)),
                stdin=written,
                makes=True,
            )
            if code != 0:
                raise ProvisionError(
                    f"cannot record node {config.node_id} on {self.link.host}: {said(code, error)}"
                )
            return self.node(record, directory)

    async def _adopt(self, config: NodeConfig, directory: str) -> SshNode:
        """The node an earlier attempt of this provision made: adopted once its record is
        there; cut off before that, its directory is removed and the node made again."""
        try:
            node = await self.attach(config.node_id)
        except NodeGoneError:
            node = None
        if node is not None and config.made_by_this(node.labels):
            logger.info(
                "adopting node %s on %s, made by an earlier attempt of this provision",
                config.node_id,
                self.link.host,
            )
            return node
        code, _, error = await run_script(self.link, DESTROY_OWN, directory, config.provision_mark, DESTROY)
        if code != 0:
            raise ProviderError(f"cannot remove {directory} on {self.link.host}: {said(code, error)}")
        return await self.create(config)

    async def records(self) -> list[NodeRecord]:
        """The record of every node under the root. One whose node id is not its directory's
        name is skipped with a warning: it could lead a destroy elsewhere."""
        root = await self.root()
        code, out, error = await run_script(self.link, LIST, root)
        if code != 0:
            raise ProviderError(f"cannot list the nodes on {self.link.host}: {said(code, error)}")
        records = []
        for line in out.decode(errors="replace").splitlines():
            name, _, text = line.partition("\t")
            try:
                record = NodeRecord.model_validate_json(text)
            except ValidationError:
                continue  # being written or removed right now
            if record.node_id != name:
                logger.warning(
                    "skipping node %r on %s: its record names %r", name, self.link.host, record.node_id
                )
                continue
            records.append(record)
        return records

    async def attach(self, node_id: str) -> SshNode:
        try:
            NodeConfig(node_id=node_id, owner="", ttl=None)
        except ValidationError:
            raise NodeGoneError(f"no node {node_id!r} on {self.link.host}: not a node id") from None
        directory = posixpath.join(await self.root(), node_id)
        code, out, error = await run_script(self.link, READ_RECORD, directory)
        if code == 3:
            raise NodeGoneError(f"no node {node_id} on {self.link.host}")
        if code != 0:
            raise ProviderError(f"cannot read node {node_id} on {self.link.host}: {said(code, error)}")
        try:
            record = NodeRecord.model_validate_json(out)
        except ValidationError:
            raise ProviderError(f"node {node_id} on {self.link.host} has an unreadable record") from None
        if record.node_id != node_id:
            raise ProviderError(f"node {node_id} on {self.link.host}: its record names {record.node_id!r}")
        return self.node(record, directory)


def _missing_here(settings: SshLoginSettings) -> str | None:
    """What this machine lacks to log in with ``settings``: a key, the host's key."""
    keys = [Path(key).expanduser() for key in settings.key_files or []]
    if missing := [str(key) for key in keys if not key.is_file()]:
        return f"key files not found: {', '.join(missing)}"
    ssh = Path.home() / ".ssh"
    agent = settings.use_agent and bool(os.environ.get("SSH_AUTH_SOCK"))
    if not keys and not agent and not [key for key in ssh.glob("id_*") if key.suffix != ".pub"]:
        return "no SSH key: no key_files, no ~/.ssh/id_*, no SSH agent (SSH_AUTH_SOCK)"
    known = Path(settings.known_hosts or ssh / "known_hosts").expanduser()
    if not (settings.host_key or settings.insecure_skip_host_key_check or known.is_file()):
        return f"no known_hosts file {known}: set known_hosts, or pin host_key"
    return None


class SshProvider(NodeProvider[SshSettings]):
    """Nodes as directories on a host reached over SSH; see :mod:`nodeprov_ssh`."""

    name: ClassVar[str] = "ssh"
    settings_model: ClassVar[type[ProviderSettings]] = SshSettings

    def __init__(self, settings: SshSettings) -> None:
        super().__init__(settings)
        self.nodes = SshNodes(self.name, Link(settings.host, settings), settings)

    async def probe(self) -> None:
        """Check that a key and the host's key are known here, then log in and make the
        node root.

        Raises:
            ConfigError: no key to log in with, no known_hosts file, the login refused.
            SshHostKeyError: no known_hosts entry for the host, or its key changed.
            ProviderError: the host could not be reached.
        """
        if problem := await anyio.to_thread.run_sync(_missing_here, self.settings):
            raise ConfigError(problem)
        await self.nodes.root()

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        try:
            return await self.nodes.create(config)
        except (ProvisionError, ConfigError):
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot provision node {config.node_id}: {error}") from None

    async def list_nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(record.node_id, self.name, record.labels, "ready")
            for record in await self.nodes.records()
        ]

    async def attach(self, node_id: str) -> NodeHandle:
        return await self.nodes.attach(node_id)

    async def aclose(self) -> None:
        await self.nodes.link.aclose()
