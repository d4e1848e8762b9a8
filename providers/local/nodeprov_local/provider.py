from __future__ import annotations

import errno
import logging
import os
import secrets
import signal
import sys
from contextlib import suppress
from pathlib import Path
from subprocess import DEVNULL, PIPE
from typing import ClassVar

import anyio
import anyio.to_thread
from pydantic import BaseModel

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
    is_node_id,
    pid_namespace,
    process_start_time,
)
from nodeprov.roots import check_root, make_root, strictly_inside
from nodeprov.spawn import SpawnedProcess, SpawnOptions, StopPolicy
from nodeprov_local import _supervisor
from nodeprov_local.process import LocalProcess, StartedProcess, abandon, kill_tree, read_to_end, signal_group
from nodeprov_local.root import remove_tree
from nodeprov_local.settings import LocalSettings

__all__ = ["GROUPS_FILE", "RECORD_FILE", "SUPERVISED", "TMP_DIR", "TOMBSTONE", "LocalNode", "LocalProvider"]

logger = logging.getLogger("nodeprov.local")

_ROOT = "local provider root"  # how errors name it

RECORD_FILE = "node.json"
GROUPS_FILE = "process-groups"
TMP_DIR = "tmp"
TOMBSTONE = ".destroying-"
_MADE = ("home", TMP_DIR, GROUPS_FILE, RECORD_FILE)  # what a node makes beside a workdir of the user's
"""Prefix of a node directory being removed (renamed out of the way first)."""

SUPERVISED = sys.platform == "linux" and bool(sys.executable)
"""Whether spawns run under :mod:`nodeprov_local._supervisor` (Linux); elsewhere each spawn is
a plain child leading its own process group, and what leaves that group is not contained."""

_SUPERVISOR_SCRIPT = str(Path(_supervisor.__file__).resolve())
_START_TIMEOUT = 30.0  # for the supervisor to report that the command was started
_DESTROY_WAIT = 1.0  # for signalled supervisors to end their processes, before SIGKILL
_NOT_FOUND = {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM}
_HAS_PROC = os.path.isdir("/proc/self")


class _Record(BaseModel):
    """What ``node.json`` keeps, so another process can attach to or destroy the node."""

    node_id: str
    labels: dict[str, str]
    workdir: str
    owns_workdir: bool
    env: dict[str, str]
    tools: dict[str, str] = {}


class LocalNode(NodeHandle):
    """A node that is a directory; see :mod:`nodeprov_local`."""

    contains_spawns: ClassVar[bool] = SUPERVISED  # each spawn's supervisor does

    def __init__(self, *, record: _Record, settings: LocalSettings, directory: Path) -> None:
        home = directory / "home"
        inherited = {name: os.environ[name] for name in settings.inherit_env if name in os.environ}
        super().__init__(
            node_id=record.node_id,
            provider=LocalProvider.name,
            labels=record.labels,
            workdir=record.workdir,
            # A temporary directory of its own, gone with the node (the host's /tmp is not the node's).
            base_env={
                "PATH": settings.path,
                "HOME": str(home),
                "TMPDIR": str(directory / TMP_DIR),
                **inherited,
                **record.env,
            },
            tool_paths=record.tools,  # used in place: the node is on this machine
            file_roots=(str(directory), record.workdir),
        )
        self.directory = directory
        self._owns_workdir = record.owns_workdir
        self._stop_policy = StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace)

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        cwd = anyio.Path(self.workdir) / (options.cwd or ".")
        if not await cwd.is_dir():
            raise SpawnError(f"working directory {str(cwd)!r} does not exist on node {self.node_id}")
        env = {**self.base_env, **options.env, _supervisor.NODE_MARKER: self.node_id}
        # Shielded: a cancellation between fork and return would orphan the child. The
        # core kills what a cancelled spawn returns.
        start = self._start_supervised if SUPERVISED else self._start_group
        with anyio.CancelScope(shield=True):
            process = await start(options, str(cwd), env)
        assert process is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        return process

    async def _spawn_detached(self, options: SpawnOptions) -> None:
        if not SUPERVISED:
            return await super()._spawn_detached(options)
        cwd = anyio.Path(self.workdir) / (options.cwd or ".")
        env = {**self.base_env, **options.env, _supervisor.NODE_MARKER: self.node_id}
        with anyio.CancelScope(shield=True):
            await self._start_supervised(options, str(cwd), env, detached=True)

    async def _start_supervised(
        self, options: SpawnOptions, cwd: str, env: dict[str, str], *, detached: bool = False
    ) -> LocalProcess | None:
        """Start the command under a supervisor, and wait for it to report the exec.
        ``detached``: a supervisor that outlives this control plane, with no channel (None)."""
        status_r, status_w = os.pipe()
        stdio = DEVNULL if detached else PIPE
        try:
            try:
                process = await anyio.open_process(
                    [
                        sys.executable,
                        "-I",
                        "-S",
                        _SUPERVISOR_SCRIPT,
                        "0" if detached else str(os.getpid()),
                        str(status_w),
                        repr(self._stop_policy.term_grace),
                        cwd,
                        "--",
                        *options.argv,
                    ],
                    stdin=stdio,
                    stdout=stdio,
                    stderr=stdio,
                    cwd="/",
                    env=env,
                    start_new_session=True,
                    pass_fds=(status_w,),
                )
            except OSError as error:
                raise SpawnError(f"cannot start the supervisor of {options.command!r}: {error}") from None
            finally:
                os.close(status_w)
            try:
                if detached:
                    await process.wait()  # the supervisor's parent: its child goes on
                else:
                    await self._record("supervisor", process.pid)
                with anyio.fail_after(_START_TIMEOUT):
                    status = await read_to_end(status_r)
                stage, _, number = status.decode(errors="replace").partition(" ")
                if detached and stage == "ok":
                    await self._record("supervisor", int(number.split()[1]))
            except BaseException as error:
                await abandon(process)
                if isinstance(error, TimeoutError):
                    raise SpawnError(f"{options.command!r} did not start in {_START_TIMEOUT}s") from None
                raise
        finally:
            os.close(status_r)
        number = number.split(" ")[0]
        if stage == "ok" and number.isdigit():
            return None if detached else LocalProcess(process, self._stop_policy, command_pid=int(number))
        # The start failed: the supervisor ends by itself, leaving nothing.
        stderr = await abandon(process, read_stderr=not status and not detached)
        code = int(number) if number.isdigit() else 0
        if stage == "exec" and code in _NOT_FOUND:
            raise CommandNotFoundError(
                f"cannot run {options.command!r} on node {self.node_id}: {os.strerror(code)}"
            )
        if stage == "chdir":
            raise SpawnError(
                f"cannot enter working directory {cwd!r} on node {self.node_id}: {os.strerror(code)}"
            )
        if stage:
            raise SpawnError(f"cannot start {options.command!r} ({stage}): {os.strerror(code)}")
        raise SpawnError(f"the supervisor of {options.command!r} failed: {stderr or 'no detail'}")

    async def _start_group(self, options: SpawnOptions, cwd: str, env: dict[str, str]) -> LocalProcess:
        """Off Linux: the command as a plain child leading its own session and group."""
        try:
            process = await anyio.open_process(
                options.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, cwd=cwd, env=env, start_new_session=True
            )
        except (FileNotFoundError, PermissionError) as error:
            raise CommandNotFoundError(
                f"cannot run {options.command!r} on node {self.node_id}: {error.strerror}"
            ) from None
        except OSError as error:
            raise SpawnError(f"cannot start {options.command!r}: {error}") from None
        try:
            await self._record("group", process.pid)
        except BaseException:
            signal_group(process.pid, signal.SIGKILL)
            await abandon(process, signal.SIGKILL)
            raise
        return LocalProcess(process, self._stop_policy)

    async def _record(self, kind: str, pid: int) -> None:
        """Remember the process on disk, so a destroy from any process can end it."""
        try:
            await anyio.to_thread.run_sync(self._append_record, kind, pid)
        except FileNotFoundError:
            raise NodeGoneError(f"node {self.node_id} was destroyed during spawn") from None
        except OSError as error:
            raise ProviderError(f"cannot record a process of node {self.node_id}: {error}") from None

    def _append_record(self, kind: str, pid: int) -> None:
        started = StartedProcess(kind, pid, process_start_time(pid) or "-", pid_namespace())
        with (self.directory / GROUPS_FILE).open("a") as file:
            file.write(f"{started}\n")

    async def _destroy(self) -> None:
        # The file system's part of each step in one hop to a worker thread.
        for tombstone in await anyio.to_thread.run_sync(self._out_of_the_way):
            await self._end_processes(tombstone)
            try:
                left = await anyio.to_thread.run_sync(self._remove, tombstone)
            except FileNotFoundError:
                continue  # removed by a destroy running beside this one: destroyed is destroyed
            except OSError as error:
                raise ProviderError(f"cannot remove node directory {self.directory}: {error}") from None
            if left:
                raise ProviderError(
                    f"node {self.node_id}: left in place, for it crosses into other file systems "
                    f"(mount points inside it: {', '.join(left)}); unmount them and destroy again"
                )

    def _out_of_the_way(self) -> list[Path]:
        """Rename the node's directory out of the way, in one rename: a spawn racing this
        destroy (another handle's) then finds no node, instead of writing into a directory
        being removed. Returns this node's directories renamed so, by this destroy or an
        earlier one cut short (strictly inside the root, no symlinks)."""
        root = self.directory.parent
        check_root(root, _ROOT)
        if not strictly_inside(root, self.directory):
            raise ProviderError(f"refusing to remove {self.directory}: not a directory inside {root}")
        try:
            self.directory.rename(root / f"{TOMBSTONE}{self.node_id}.{secrets.token_hex(4)}")
        except FileNotFoundError:
            pass  # destroyed meanwhile, or an earlier destroy was cut off after its rename
        except OSError as error:
            raise ProviderError(f"cannot remove node directory {self.directory}: {error}") from None
        found = sorted(root.glob(f"{TOMBSTONE}{self.node_id}.*"))
        return [path for path in found if strictly_inside(root, path)]

    def _remove(self, tombstone: Path) -> list[str]:
        """Remove what the node made (the user's own workdir stays); the mount points left."""
        made = [tombstone] if self._owns_workdir else [tombstone / name for name in _MADE]
        left = [path for each in made for path in remove_tree(each)]
        if not left and not self._owns_workdir:
            tombstone.rmdir()
        return left

    async def _end_processes(self, directory: Path) -> None:
        """End every process the node started, whoever spawned it: SIGUSR1 to each live
        supervisor (it SIGKILLs all below it, reaps them and exits), a moment's wait, then
        SIGKILL to what is left. Takes at most about ``_DESTROY_WAIT`` seconds."""
        try:
            text = (await anyio.Path(directory / GROUPS_FILE).read_bytes()).decode(errors="replace")
        except FileNotFoundError:
            return
        except OSError as error:
            raise ProviderError(f"cannot read the processes of node {self.node_id}: {error}") from None
        supervisors = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                started = StartedProcess.parse(line)
            except ValueError:
                logger.warning(
                    "node %s: skipping malformed line %d of %s: %r", self.node_id, number, GROUPS_FILE, line
                )
                continue
            if started.namespace != pid_namespace():
                logger.warning(
                    "node %s: process %d was started in another PID namespace; not signalled",
                    self.node_id,
                    started.pid,
                )
                continue
            if started.kind == "group" and not _HAS_PROC:
                # Off Linux nothing of a process can be checked: the recorded group is taken
                # on trust (its leader may be gone while the group lives on).
                signal_group(started.pid, signal.SIGKILL)
                continue
            if not started.alive():
                continue  # ended, or the pid was recycled: nothing of ours to signal
            if (why := started.refusal(self.node_id)) is not None:
                logger.warning("node %s: process %d not signalled: %s", self.node_id, started.pid, why)
                continue
            if started.kind == "group":
                signal_group(started.pid, signal.SIGKILL)
            else:
                with suppress(OSError):
                    os.kill(started.pid, _supervisor.KILL_ALL)
                supervisors.append(started)
        with anyio.move_on_after(_DESTROY_WAIT):
            while any(started.alive() for started in supervisors):  # noqa: ASYNC110 - not our children
                await anyio.sleep(0.01)
        for started in supervisors:
            if started.alive():
                logger.warning("node %s: supervisor %d did not end; killing it", self.node_id, started.pid)
                kill_tree(started.pid)


def _workdir(config: NodeConfig, directory: Path) -> tuple[Path, bool]:
    """The node's workdir, made in ``directory`` unless the config names one; whether the node
    owns it.

    Raises:
        ConfigError: the workdir named is not a directory.
    """
    if config.workdir is None:
        (directory / "work").mkdir()
        return directory / "work", True
    workdir = Path(config.workdir).resolve()
    if not workdir.is_dir():
        raise ConfigError(f"workdir {config.workdir!r} is not a directory")
    return workdir, False


class LocalProvider(NodeProvider[LocalSettings]):
    """Nodes as directories under ``settings.root``; see :mod:`nodeprov_local`."""

    name: ClassVar[str] = "local"
    settings_model: ClassVar[type[ProviderSettings]] = LocalSettings
    on_this_host: ClassVar[bool] = True

    @property
    def root(self) -> Path:
        """``settings.root``, absolute."""
        return Path(os.path.abspath(self.settings.root))

    def resolved_settings(self) -> LocalSettings:
        """The root made explicit and absolute (its default comes from XDG_RUNTIME_DIR or HOME)."""
        return self.settings.model_copy(update={"root": self.root})

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        # In one hop to a worker thread (half a dozen calls to the file system), which is not
        # cut short: the node's directory is made whole, or removed.
        record = await anyio.to_thread.run_sync(self._make_node, config)
        directory = self.root / config.node_id
        if record is None:
            return await self._adopt(config, anyio.Path(directory))
        return LocalNode(record=record, settings=self.settings, directory=directory)

    def _make_node(self, config: NodeConfig) -> _Record | None:
        """The node's directory, made whole or not at all; ``None`` where it is there already.

        Raises:
            ProvisionError: the directory cannot be made.
            ConfigError: ``config.workdir`` is not a directory.
        """
        make_root(self.root, _ROOT)
        directory = self.root / config.node_id
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            return None
        except OSError as error:
            raise ProvisionError(f"cannot create node directory {directory}: {error}") from None
        try:
            (directory / "home").mkdir()
            (directory / TMP_DIR).mkdir()
            workdir, owns = _workdir(config, directory)
            record = _Record(
                node_id=config.node_id,
                labels=config.resource_labels(),
                workdir=str(workdir),
                owns_workdir=owns,
                env=config.env,
                tools=config.tools,
            )
            (directory / RECORD_FILE).write_text(record.model_dump_json())
        except BaseException:
            remove_tree(directory)
            raise
        return record

    async def _adopt(self, config: NodeConfig, directory: anyio.Path) -> NodeHandle:
        """The node an earlier attempt of this provisioning made; anyone else's is left alone."""
        record = next(
            (r for r in await anyio.to_thread.run_sync(self._records) if r.node_id == config.node_id), None
        )
        if record is None or not config.made_by_this(record.labels):
            raise ProvisionError(f"node {config.node_id} exists already at {directory}")
        logger.info("adopting node %s, made by an earlier attempt of this provision", config.node_id)
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
            raise NodeGoneError(f"no local node {node_id} under {self.root}")
        return LocalNode(record=record, settings=self.settings, directory=self.root / node_id)

    def _records(self) -> list[_Record]:
        """The records of the nodes under the root. One in a symlinked directory, or whose node
        id is not a node id or not its directory's name, is skipped with a warning: it could
        lead a destroy to paths outside the root."""
        if not check_root(self.root, _ROOT):
            return []
        records = []
        for path in sorted(self.root.glob(f"*/{RECORD_FILE}")):
            try:
                record = _Record.model_validate_json(path.read_text())
            except (OSError, ValueError):
                continue  # being created or removed right now
            node = path.parent
            if node.name.startswith(TOMBSTONE):
                continue  # being destroyed
            if node.is_symlink() or record.node_id != node.name or not is_node_id(record.node_id):
                logger.warning("skipping %s: a symlink, or node id %r is not its name", node, record.node_id)
                continue
            records.append(record)
        return records
