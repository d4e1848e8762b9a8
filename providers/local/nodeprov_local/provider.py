from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import signal
import stat
import sys
from contextlib import suppress
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path
from subprocess import PIPE
from typing import ClassVar

import anyio
import anyio.to_thread
from anyio.abc import Process
from pydantic import BaseModel, Field, ValidationError

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
    Rollback,
    pid_namespace,
    process_start_time,
)
from nodeprov.spawn import SpawnedProcess, SpawnOptions, StopPolicy
from nodeprov_local import _supervisor

logger = logging.getLogger("nodeprov.local")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
_MAX_PID = 1 << 22  # Linux's highest pid_max
_HAS_PROC = os.path.isdir("/proc/self")


def _default_root() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "nodeprov"
    return Path.home() / ".local" / "state" / "nodeprov"


class LocalSettings(ProviderSettings):
    """Settings of the local provider."""

    root: Path = Field(
        default_factory=_default_root,
        description="Directory under which each node gets its own directory; default: "
        "$XDG_RUNTIME_DIR/nodeprov when XDG_RUNTIME_DIR is an absolute, existing directory, else "
        "~/.local/state/nodeprov. Created with mode 0700 (missing parents too). Refused unless it "
        "is a real directory (not a symlink) owned by this user and writable by no group or "
        "other user: whoever can write to it can make this user delete files or kill processes.",
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
    eof_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a stopped process gets to exit after stdin is closed, before SIGTERM.",
    )
    term_grace: float = Field(
        default=5.0,
        ge=0,
        description="Seconds after SIGTERM before SIGKILL, when a process is stopped and when "
        "the control plane dies (its processes then get SIGTERM from their supervisor).",
    )


class LocalProcess(SpawnedProcess):
    """A spawned command.

    On Linux ``pid`` is the command's supervisor (see :mod:`nodeprov_local._supervisor`),
    whose exit status mirrors the command's and which contains everything the command
    starts; ``command_pid`` is the command's own pid. ``terminate()`` and ``kill()`` signal
    only the supervisor (SIGTERM, SIGUSR1), which passes SIGTERM, or SIGKILL, to every
    process below it. Off Linux, ``pid`` is the command itself, leading its own process
    group, and signals go to that group (``command_pid`` is ``None``); there the command's
    environment also carries the node marker (``NODEPROV_LOCAL_NODE``), which a supervisor
    keeps to itself.
    """

    def __init__(self, process: Process, stop_policy: StopPolicy, *, command_pid: int | None = None) -> None:
        super().__init__(stop_policy)
        # All three are piped by LocalNode._spawn.
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self._process = process
        self.pid = process.pid
        self.command_pid = command_pid
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.stderr = process.stderr

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    async def terminate(self) -> None:
        if self.command_pid is None:
            _signal_group(self.pid, signal.SIGTERM)
        else:
            self._signal_supervisor(signal.SIGTERM)

    async def kill(self) -> None:
        if self.command_pid is None:
            _signal_group(self.pid, signal.SIGKILL)
        else:
            self._signal_supervisor(_supervisor.KILL_ALL)

    async def _release(self) -> None:
        if self.command_pid is None:
            _signal_group(self.pid, signal.SIGKILL)  # what the process left running in its group
        elif self.returncode is None and process_start_time(self.pid) is not None:
            # The last resort: the supervisor still runs after kill() and its grace (a
            # supervisor that has ended leaves nothing behind; it ends only when all is reaped).
            logger.warning("supervisor %d did not end; killing it and what it supervises", self.pid)
            _kill_tree(self.pid)
        await super()._release()
        if self.returncode is not None:  # reaped: close its transports too (else they are
            await self._process.aclose()  # collected after the event loop, with a warning)

    def _signal_supervisor(self, sig: int) -> None:
        # os.kill, not Popen.send_signal: that one polls, and may reap the child under the
        # event loop's child watcher. Until the watcher has reaped it, the pid is ours.
        if self._process.returncode is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):  # an empty group: all of it exited
        os.killpg(pgid, sig)


def _kill_tree(pid: int) -> None:
    """SIGKILL a supervisor and everything below it: the last resort when it does not end."""
    try:
        below = _supervisor.descendants(pid)
    except OSError:
        below = []  # no /proc
    for victim in [*reversed(below), pid]:
        with suppress(OSError):
            os.kill(victim, signal.SIGKILL)


@dataclass(frozen=True)
class _Started:
    """A line of the node's process file: ``KIND PID START NAMESPACE``. KIND is
    ``supervisor`` (Linux) or ``group`` (a process-group leader, elsewhere); START is the
    process's start time (see :func:`process_start_time`, ``-`` if unknown)."""

    kind: str
    pid: int
    start: str
    namespace: str

    KINDS: ClassVar[frozenset[str]] = frozenset({"supervisor", "group"})

    @classmethod
    def parse(cls, line: str) -> _Started:
        """Raises ValueError for a malformed line."""
        kind, pid, start, namespace = line.split()
        # Never 0, 1 or negative: os.kill would read those as groups or as init.
        if kind not in cls.KINDS or not (pid.isascii() and pid.isdigit()) or not 2 <= int(pid) <= _MAX_PID:
            raise ValueError(f"not a process record: {line!r}")
        return cls(kind, int(pid), start, namespace)

    def __str__(self) -> str:
        return f"{self.kind} {self.pid} {self.start} {self.namespace}"

    def alive(self) -> bool:
        """Whether the recorded process still runs (not recycled: same start time)."""
        return process_start_time(self.pid) == self.start

    def refusal(self, node_id: str) -> str | None:
        """Why this live process must not be signalled for node ``node_id``, or ``None`` when
        it is the node's own: it runs as this user and carries the node's marker. The file
        recording it may be planted, so naming a pid proves nothing."""
        proc = Path(f"/proc/{self.pid}")
        try:
            status = (proc / "status").read_text().splitlines()
            # Real and effective uid; checked before the environment, readable by root anyway.
            if [line.split()[1:3] for line in status if line.startswith("Uid:")] != [[str(os.getuid())] * 2]:
                return "it runs as another user"
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError as error:
            return f"it cannot be inspected ({error})"
        if f"{_supervisor.NODE_MARKER}={node_id}".encode() not in environ:
            return "it does not carry the node's marker"
        return None


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
        return process

    async def _start_supervised(self, options: SpawnOptions, cwd: str, env: dict[str, str]) -> LocalProcess:
        """Start the command under a supervisor, and wait for it to report the exec."""
        status_r, status_w = os.pipe()
        try:
            try:
                process = await anyio.open_process(
                    [
                        sys.executable,
                        "-I",
                        "-S",
                        _SUPERVISOR_SCRIPT,
                        str(os.getpid()),
                        str(status_w),
                        repr(self._stop_policy.term_grace),
                        cwd,
                        "--",
                        *options.argv,
                    ],
                    stdin=PIPE,
                    stdout=PIPE,
                    stderr=PIPE,
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
                await self._record("supervisor", process.pid)
                with anyio.fail_after(_START_TIMEOUT):
                    status = await _read_to_end(status_r)
            except BaseException as error:
                await _abandon(process)
                if isinstance(error, TimeoutError):
                    raise SpawnError(f"{options.command!r} did not start in {_START_TIMEOUT}s") from None
                raise
        finally:
            os.close(status_r)
        stage, _, number = status.decode(errors="replace").partition(" ")
        if stage == "ok" and number.isdigit():
            return LocalProcess(process, self._stop_policy, command_pid=int(number))
        # The start failed: the supervisor ends by itself, leaving nothing.
        stderr = await _abandon(process, read_stderr=not status)
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
            _signal_group(process.pid, signal.SIGKILL)
            await _abandon(process, signal.SIGKILL)
            raise
        return LocalProcess(process, self._stop_policy)

    async def _record(self, kind: str, pid: int) -> None:
        """Remember the process on disk, so a destroy from any process can end it."""
        started = _Started(kind, pid, process_start_time(pid) or "-", pid_namespace())
        try:
            async with await anyio.Path(self.directory / GROUPS_FILE).open("a") as file:
                await file.write(f"{started}\n")
        except FileNotFoundError:
            raise NodeGoneError(f"node {self.node_id} was destroyed during spawn") from None
        except OSError as error:
            raise ProviderError(f"cannot record a process of node {self.node_id}: {error}") from None

    async def _destroy(self) -> None:
        root = self.directory.parent
        await anyio.to_thread.run_sync(_check_root, root)
        if not await anyio.to_thread.run_sync(_strictly_inside, root, self.directory):
            raise ProviderError(f"refusing to remove {self.directory}: not a directory inside {root}")
        # Out of the way first, in one rename: a spawn racing this destroy (another handle's)
        # then finds no node, instead of writing into a directory being removed.
        try:
            await anyio.Path(self.directory).rename(
                root / f"{TOMBSTONE}{self.node_id}.{secrets.token_hex(4)}"
            )
        except FileNotFoundError:
            pass  # destroyed meanwhile, or an earlier destroy was cut off after its rename
        except OSError as error:
            raise ProviderError(f"cannot remove node directory {self.directory}: {error}") from None
        for tombstone in await anyio.to_thread.run_sync(self._tombstones, root):
            await self._end_processes(tombstone)
            # The user's own workdir stays; only what the node made goes.
            made = [tombstone] if self._owns_workdir else [tombstone / name for name in _MADE]
            try:
                left = [path for each in made for path in await anyio.to_thread.run_sync(_remove_tree, each)]
                if left:
                    raise ProviderError(
                        f"node {self.node_id}: left in place, for it crosses into other file systems "
                        f"(mount points inside it: {', '.join(left)}); unmount them and destroy again"
                    )
                if not self._owns_workdir:
                    await anyio.Path(tombstone).rmdir()
            except FileNotFoundError:
                pass  # removed by a destroy running beside this one: destroyed is destroyed
            except OSError as error:
                raise ProviderError(f"cannot remove node directory {self.directory}: {error}") from None

    def _tombstones(self, root: Path) -> list[Path]:
        """This node's directories renamed for removal (strictly inside the root, no symlinks)."""
        found = sorted(root.glob(f"{TOMBSTONE}{self.node_id}.*"))
        return [path for path in found if _strictly_inside(root, path)]

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
                started = _Started.parse(line)
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
                _signal_group(started.pid, signal.SIGKILL)
                continue
            if not started.alive():
                continue  # ended, or the pid was recycled: nothing of ours to signal
            if (why := started.refusal(self.node_id)) is not None:
                logger.warning("node %s: process %d not signalled: %s", self.node_id, started.pid, why)
                continue
            if started.kind == "group":
                _signal_group(started.pid, signal.SIGKILL)
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
                _kill_tree(started.pid)


async def _read_to_end(fd: int) -> bytes:
    """Everything written to the pipe ``fd`` until its writers closed it."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 256)
        except BlockingIOError:
            continue
        if not chunk:
            return data
        data += chunk


async def _abandon(process: Process, sig: int = _supervisor.KILL_ALL, *, read_stderr: bool = False) -> str:
    """End (with ``sig``) and reap a supervisor whose command is not to be used (it did not
    start, or the spawn failed after it did); with ``read_stderr``, return what it wrote to
    stderr."""
    stderr = b""
    with anyio.CancelScope(shield=True):
        if read_stderr and process.stderr is not None:
            with anyio.move_on_after(2), suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while len(stderr) < 4096:
                    stderr += await process.stderr.receive()
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.kill(process.pid, sig)
        with anyio.move_on_after(2):
            await process.wait()
        if process.returncode is None:
            _kill_tree(process.pid)
        with anyio.move_on_after(2):
            await process.aclose()
    return stderr.decode(errors="replace").strip()[-1000:]


def _remove_tree(path: Path) -> list[str]:
    """Remove ``path``: a file or symlink itself (not what it points to), a directory with all
    it holds, but never across a file-system boundary. A mount point inside (a bind mount
    too, on the same file system) is left, with the directories above it, and named in the
    result: what is mounted there is not the node's to delete."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(top.st_mode):
        path.unlink(missing_ok=True)
        return []
    mounts, left = _mount_points(), []

    def clear(directory: str) -> bool:
        """Empty ``directory`` within the boundary; whether it is empty now."""
        empty = True
        with os.scandir(directory) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    with suppress(FileNotFoundError):
                        os.unlink(entry.path)
                elif info.st_dev != top.st_dev or os.path.realpath(entry.path) in mounts:
                    left.append(entry.path)
                    empty = False
                elif clear(entry.path):
                    with suppress(FileNotFoundError):
                        os.rmdir(entry.path)
                else:
                    empty = False
        return empty

    if path.resolve().as_posix() in mounts:
        return [str(path)]
    if clear(str(path)):
        with suppress(FileNotFoundError):
            os.rmdir(path)
    return left


def _mount_points() -> set[str]:
    """The mount points of this process's mount namespace (from ``/proc``; none where there
    is none: then the device check alone tells other file systems apart)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    # Field 5 is the mount point, with space, tab, newline and backslash escaped in octal.
    return {
        re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
        for line in lines
        if len(fields := line.split()) > 4
    }


def _check_root(root: Path) -> bool:
    """Whether ``root`` exists; raises ConfigError if it does and cannot be trusted: everything
    under it decides what is deleted and signalled."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ProviderError(f"cannot examine the local provider root {root}: {error}") from None
    if stat.S_ISLNK(info.st_mode):
        why = "is a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        why = "is not a directory"
    elif info.st_uid != os.getuid():
        why = f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    else:
        return True
    raise ConfigError(
        f"local provider root {root} {why}; refused: it must be a directory of this user's "
        "that only this user can write to (mode 0700)"
    )


def _make_root(root: Path) -> None:
    """Create ``root`` and its missing parents with mode 0700, then check it."""
    for path in reversed(list(takewhile(lambda p: not os.path.lexists(p), [root, *root.parents]))):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass  # made meanwhile; checked below if it is the root
        except OSError as error:
            raise ProvisionError(f"cannot create the local provider root {root}: {error}") from None
    _check_root(root)


def _strictly_inside(root: Path, path: Path) -> bool:
    """Whether ``path`` is no symlink and lies strictly inside ``root``: the test before removing it."""
    resolved, base = path.resolve(), root.resolve()
    return not path.is_symlink() and resolved != base and resolved.is_relative_to(base)


def _is_node_id(value: str) -> bool:
    try:
        NodeConfig(node_id=value, owner="", ttl=None)
    except ValidationError:
        return False
    return True


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
        await anyio.to_thread.run_sync(_make_root, self.root)
        directory = anyio.Path(self.root) / config.node_id
        async with Rollback() as rollback:
            try:
                await directory.mkdir(mode=0o700)
            except FileExistsError:
                return await self._adopt(config, directory)
            except OSError as error:
                raise ProvisionError(f"cannot create node directory {directory}: {error}") from None
            rollback.push(lambda: anyio.to_thread.run_sync(_remove_tree, Path(directory)))
            await (directory / "home").mkdir()
            await (directory / TMP_DIR).mkdir()
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
                tools=config.tools,
            )
            await (directory / RECORD_FILE).write_text(record.model_dump_json())
            return LocalNode(record=record, settings=self.settings, directory=Path(directory))

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
        if not _check_root(self.root):
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
            if node.is_symlink() or record.node_id != node.name or not _is_node_id(record.node_id):
                logger.warning("skipping %s: a symlink, or node id %r is not its name", node, record.node_id)
                continue
            records.append(record)
        return records
