from __future__ import annotations

import os
import shutil
import signal
import tempfile
from contextlib import suppress
from pathlib import Path
from subprocess import PIPE
from typing import ClassVar

import anyio
import anyio.to_thread
from anyio.abc import Process
from pydantic import BaseModel, Field

from nodeprov.claude import bundled_cli_path
from nodeprov.errors import (
    CommandNotFoundError,
    ConfigError,
    NodeGoneError,
    ProviderError,
    ProvisionError,
    SpawnError,
)
from nodeprov.node import (
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
    process_start_time,
)
from nodeprov.spawn import SpawnedProcess, SpawnOptions, StopPolicy

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECORD_FILE = "node.json"
GROUPS_FILE = "process-groups"


class LocalSettings(ProviderSettings):
    """Settings of the local provider."""

    root: Path = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "nodeprov",
        description="Directory under which each node gets its own directory.",
    )
    path: str = Field(
        default=DEFAULT_PATH,
        description="PATH of every process, unless the node config or the spawn sets one. "
        "The control plane's own PATH is not used.",
    )
    inherit_env: list[str] = Field(
        default_factory=list,
        description="Names of control-plane environment variables to pass to every process "
        "on the node. Nothing is inherited unless named here.",
    )
    claude_cli: str | None = Field(
        default=None,
        description="Claude Code CLI for agents on this node; default: the binary bundled "
        "in the claude-agent-sdk wheel, else 'claude' on PATH.",
    )
    eof_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a stopped process gets to exit after stdin is closed, before SIGTERM.",
    )
    term_grace: float = Field(default=5.0, ge=0, description="Seconds after SIGTERM before SIGKILL.")


class LocalProcess(SpawnedProcess):
    """A child process leading its own process group; signals go to the whole group."""

    def __init__(self, process: Process, stop_policy: StopPolicy) -> None:
        super().__init__(stop_policy)
        # All three are piped by LocalNode._spawn.
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self._process = process
        self.pid = process.pid
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.stderr = process.stderr

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    async def terminate(self) -> None:
        _signal_group(self.pid, signal.SIGTERM)

    async def kill(self) -> None:
        _signal_group(self.pid, signal.SIGKILL)

    async def _release(self) -> None:
        _signal_group(self.pid, signal.SIGKILL)  # what the process left running in its group
        await super()._release()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):  # an empty group: all of it exited
        os.killpg(pgid, sig)


class _Record(BaseModel):
    """What ``node.json`` keeps, so another process can attach to or destroy the node."""

    node_id: str
    labels: dict[str, str]
    workdir: str
    owns_workdir: bool
    env: dict[str, str]


class LocalNode(NodeHandle):
    """A node that is a directory; see :mod:`nodeprov_local`."""

    def __init__(self, *, record: _Record, settings: LocalSettings, directory: Path) -> None:
        home = directory / "home"
        inherited = {name: os.environ[name] for name in settings.inherit_env if name in os.environ}
        super().__init__(
            node_id=record.node_id,
            provider=LocalProvider.name,
            labels=record.labels,
            workdir=record.workdir,
            base_env={"PATH": settings.path, "HOME": str(home), **inherited, **record.env},
            tool_paths={"claude": settings.claude_cli or bundled_cli_path() or "claude"},
        )
        self.directory = directory
        self._owns_workdir = record.owns_workdir
        self._stop_policy = StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace)

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        cwd = anyio.Path(self.workdir) / (options.cwd or ".")
        if not await cwd.is_dir():
            raise SpawnError(f"working directory {str(cwd)!r} does not exist on node {self.node_id}")
        env = {**self.base_env, **options.env}
        # Shielded: a cancellation between fork and return would orphan the child.
        with anyio.CancelScope(shield=True):
            try:
                process = await anyio.open_process(
                    options.argv,
                    stdin=PIPE,
                    stdout=PIPE,
                    stderr=PIPE,
                    cwd=str(cwd),
                    env=env,
                    start_new_session=True,
                )
            except (FileNotFoundError, PermissionError) as error:
                raise CommandNotFoundError(
                    f"cannot run {options.command!r} on node {self.node_id}: {error.strerror}"
                ) from None
            except OSError as error:
                raise SpawnError(f"cannot start {options.command!r}: {error}") from None
            # Remember the group on disk, so a destroy from any process can end it.
            async with await anyio.Path(self.directory / GROUPS_FILE).open("a") as groups:
                await groups.write(f"{process.pid} {process_start_time(process.pid)}\n")
        return LocalProcess(process, self._stop_policy)

    async def _destroy(self) -> None:
        try:
            groups = await anyio.Path(self.directory / GROUPS_FILE).read_text()
        except FileNotFoundError:
            groups = ""
        for line in groups.splitlines():
            pgid, start = line.split()
            # A leader alive with another start time means the id was recycled: not ours.
            if process_start_time(int(pgid)) in (start, None):
                _signal_group(int(pgid), signal.SIGKILL)
        # The user's own workdir stays; only what the node made goes.
        try:
            if self._owns_workdir:
                await anyio.to_thread.run_sync(_remove_tree, self.directory)
            else:
                for made in ("home", GROUPS_FILE, RECORD_FILE):
                    await anyio.to_thread.run_sync(_remove_tree, self.directory / made)
                await anyio.Path(self.directory).rmdir()
        except FileNotFoundError:
            pass  # removed from outside already: destroyed is destroyed
        except OSError as error:
            raise ProviderError(f"cannot remove node directory {self.directory}: {error}") from None


def _remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


class LocalProvider(NodeProvider[LocalSettings]):
    """Nodes as directories under ``settings.root``; see :mod:`nodeprov_local`."""

    name: ClassVar[str] = "local"
    settings_model: ClassVar[type[ProviderSettings]] = LocalSettings

    @classmethod
    def requirements(cls) -> list[Requirement]:
        cli = bundled_cli_path() or shutil.which("claude")
        return [
            Requirement(
                "claude CLI", cli is not None, cli or "not found: install claude-agent-sdk or Claude Code"
            )
        ]

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        directory = anyio.Path(self.settings.root) / config.node_id
        async with Rollback() as rollback:
            try:
                await directory.parent.mkdir(parents=True, exist_ok=True)
                await directory.mkdir(mode=0o700)
            except FileExistsError:
                raise ProvisionError(f"node {config.node_id} exists already at {directory}") from None
            except OSError as error:
                raise ProvisionError(f"cannot create node directory {directory}: {error}") from None
            rollback.push(lambda: anyio.to_thread.run_sync(shutil.rmtree, str(directory), True))
            await (directory / "home").mkdir()
            if config.workdir is None:
                workdir, owns = directory / "work", True
                await workdir.mkdir()
            else:
                workdir, owns = await anyio.Path(config.workdir).resolve(), False
                if not await workdir.is_dir():
                    raise ConfigError(f"workdir {config.workdir!r} is not a directory")
            record = _Record(
                node_id=config.node_id,
                labels=config.resource_labels(),
                workdir=str(workdir),
                owns_workdir=owns,
                env=config.env,
            )
            await (directory / RECORD_FILE).write_text(record.model_dump_json())
            return LocalNode(record=record, settings=self.settings, directory=Path(directory))

    async def list_nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(record.node_id, self.name, record.labels, "ready")
            for record in await anyio.to_thread.run_sync(self._records)
        ]

    async def attach(self, node_id: str) -> NodeHandle:
        record = next(
            (r for r in await anyio.to_thread.run_sync(self._records) if r.node_id == node_id), None
        )
        if record is None:
            raise NodeGoneError(f"no local node {node_id} under {self.settings.root}")
        return LocalNode(record=record, settings=self.settings, directory=self.settings.root / node_id)

    def _records(self) -> list[_Record]:
        records = []
        for path in sorted(self.settings.root.glob(f"*/{RECORD_FILE}")):
            try:
                records.append(_Record.model_validate_json(path.read_text()))
            except (OSError, ValueError):
                continue  # being created or removed right now
        return records
