"""A fake provider, for fast tests of the layers above providers (runs, the CLI).

Registered as ``fake`` in test processes only (the pytest plugin registers it; users never
see it). A node is a directory under ``root``, listed from a JSON record file; a spawn is a
plain child process of this control plane in its own process group. Unlike the real
providers it contains nothing: it exists to make provisioning slow, failing or hanging on
demand, so that races between runs, pauses and shutdowns can be driven many times quickly.
Use the ``local`` provider for anything about processes on a node.

What it reads back is checked as the local provider checks it: the root must be a private
directory of this user's, a record counts only if its node id is valid and names its own
directory, and nothing outside the root is removed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import tempfile
from contextlib import suppress
from pathlib import Path
from subprocess import PIPE
from typing import Any, ClassVar

import anyio
import anyio.to_thread
from anyio.abc import Process
from pydantic import Field

from ..errors import CommandNotFoundError, NodeGoneError, ProviderError, ProvisionError
from ..exec import (
    PREPARED_PREAMBLE,
    STDERR,
    STDOUT,
    Demux,
    Output,
    PreparedChannel,
    prepared_request,
    read_report,
)
from ..node import NodeConfig, NodeHandle, NodeInfo, NodeProvider, ProviderSettings, Rollback, secret_field
from ..roots import check_root, make_root, node_directory, strictly_inside
from ..spawn import PreparedSpawn, SpawnedProcess, SpawnOptions

__all__ = ["FakeProvider", "FakeSettings"]

_RECORD = "node.json"
_WHAT = "fake provider root"
logger = logging.getLogger("nodeprov.testing")


class FakeSettings(ProviderSettings):
    """Settings of the fake provider: where nodes live, and how provisioning misbehaves."""

    root: Path = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "nodeprov-fake",
        description="Directory under which each node gets its own directory.",
    )
    provision_delay: float = Field(default=0.0, ge=0, description="Seconds provisioning takes (cancellable).")
    provision_error: str | None = Field(
        default=None, description="Fail provisioning with this message, after the delay."
    )
    destroy_delay: float = Field(default=0.0, ge=0, description="Seconds destroying takes.")
    prepares: bool = Field(
        default=False,
        description="Open each node's next spawn ahead (NodeHandle.prepare) as the exec providers "
        "do: the exec kit's prepared preamble in a child shell, told its command over stdin.",
    )
    env: dict[str, str] = secret_field(
        default_factory=dict,
        description="Environment of every process on its nodes, as the docker provider's `env`: "
        "a secret setting, never stored.",
    )


class _Process(SpawnedProcess):
    def __init__(self, process: Process, output: _Pipes | None = None) -> None:
        super().__init__()
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self._process = process
        self.stdin, self.stdout, self.stderr = process.stdin, process.stdout, process.stderr
        if output is not None:  # a prepared shell's: what its preamble left unread comes first
            self.stdout, self.stderr = Output(output, STDOUT), Output(output, STDERR)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    async def terminate(self) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGTERM)

    async def kill(self) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)


class _Pipes(Demux):
    """A child's stdout and stderr as an exec channel's, for the prepared preamble; closing
    it closes its stdin too, as closing a channel does."""

    def __init__(self, process: Process) -> None:
        super().__init__()
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self._stdin = process.stdin
        self._streams = {STDOUT: process.stdout, STDERR: process.stderr}

    async def _pull(self, kind: int) -> None:
        try:
            self._deliver(kind, await self._streams[kind].receive())
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.end(kind)

    async def aclose(self) -> None:
        self._close()
        await self._stdin.aclose()
        for stream in self._streams.values():
            await stream.aclose()


class _Node(NodeHandle):
    def __init__(self, provider: FakeProvider, record: dict[str, Any], directory: Path) -> None:
        super().__init__(
            node_id=str(record["node_id"]),
            provider=FakeProvider.name,
            labels=record["labels"],
            workdir=str(directory / "work"),
            base_env={"PATH": os.defpath, "HOME": str(directory / "work"), **provider.settings.env},
            file_roots=(str(directory),),
        )
        self._settings = provider.settings
        self._directory = directory
        self._spawned: list[_Process] = []
        self.prepared_starts = 0
        """Spawns that went through a prepared shell."""

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        with anyio.CancelScope(shield=True):  # a cancellation between fork and return would orphan it
            try:
                process = await anyio.open_process(
                    options.argv,
                    stdin=PIPE,
                    stdout=PIPE,
                    stderr=PIPE,
                    cwd=str(Path(self.workdir) / (options.cwd or ".")),
                    env={**self.base_env, **options.env},
                    start_new_session=True,
                )
            except OSError as error:
                raise CommandNotFoundError(f"cannot run {options.command!r}: {error.strerror}") from None
        spawned = _Process(process)
        self._spawned.append(spawned)
        return spawned

    async def _prepare(self) -> PreparedSpawn | None:
        if not self._settings.prepares:
            return None
        with anyio.CancelScope(shield=True):  # as _spawn
            process = await anyio.open_process(
                ["/bin/sh", "-c", PREPARED_PREAMBLE, str(self._directory)],  # $0: found by the node's path
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env={},
                start_new_session=True,
            )
        assert process.stdin is not None
        pipes = _Pipes(process)
        self._spawned.append(_Process(process, pipes))  # a destroy ends it, used or not

        def request(options: SpawnOptions) -> bytes | None:
            cwd = str(Path(self.workdir) / (options.cwd or "."))
            return prepared_request(cwd, "", options.argv, {**self.base_env, **options.env}, relay=False)

        async def started(options: SpawnOptions) -> SpawnedProcess:
            await read_report(pipes, options, f"node {self.node_id}")
            self.prepared_starts += 1
            return _Process(process, pipes)

        return PreparedChannel(pipes, process.stdin.send, request=request, started=started)

    async def _destroy(self) -> None:
        await anyio.sleep(self._settings.destroy_delay)
        for process in self._spawned:
            await process.kill()
        root = self._settings.root
        await anyio.to_thread.run_sync(check_root, root, _WHAT)
        if not await anyio.to_thread.run_sync(strictly_inside, root, self._directory):
            raise ProviderError(f"refusing to remove {self._directory}: not a directory inside {root}")
        await anyio.to_thread.run_sync(shutil.rmtree, self._directory, True)


class FakeProvider(NodeProvider[FakeSettings]):
    """See :mod:`nodeprov.testing.fake_provider`."""

    name: ClassVar[str] = "fake"
    settings_model: ClassVar[type[ProviderSettings]] = FakeSettings

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        await anyio.to_thread.run_sync(make_root, self.settings.root, _WHAT)
        directory = self.settings.root / config.node_id
        async with Rollback() as rollback:
            try:
                await anyio.Path(directory).mkdir(mode=0o700)
            except FileExistsError:
                mine = [
                    r for r in await anyio.to_thread.run_sync(self._records) if r["node_id"] == config.node_id
                ]
                if mine and config.made_by_this(mine[0]["labels"]):
                    return _Node(self, mine[0], directory)  # an earlier attempt of this provision
                raise ProvisionError(f"node {config.node_id} exists already at {directory}") from None
            rollback.push(lambda: anyio.to_thread.run_sync(shutil.rmtree, directory, True))
            await anyio.Path(directory / "work").mkdir()
            record = {"node_id": config.node_id, "labels": config.resource_labels()}
            await anyio.Path(directory / _RECORD).write_text(json.dumps(record))
            await anyio.sleep(self.settings.provision_delay)
            if self.settings.provision_error is not None:
                raise ProvisionError(self.settings.provision_error)
            return _Node(self, record, directory)

    async def list_nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(str(record["node_id"]), self.name, record["labels"], "ready")
            for record in await anyio.to_thread.run_sync(self._records)
        ]

    async def attach(self, node_id: str) -> NodeHandle:
        for record in await anyio.to_thread.run_sync(self._records):
            if record["node_id"] == node_id:
                return _Node(self, record, self.settings.root / node_id)
        raise NodeGoneError(f"no fake node {node_id}")

    def _records(self) -> list[dict[str, Any]]:
        """The records under the root; one whose node id is not a node id, or not its own
        directory's name, is skipped: it could lead a destroy outside the root."""
        root = self.settings.root
        if not check_root(root, _WHAT):
            return []
        records = []
        for path in root.glob(f"*/{_RECORD}"):
            with suppress(OSError, ValueError, TypeError, KeyError):
                record = json.loads(path.read_text())
                if node_directory(root, record["node_id"]) == path.parent and not path.parent.is_symlink():
                    records.append(record)
                    continue
                logger.warning("skipping %s: node id %r is not its directory's name", path, record["node_id"])
        return records
