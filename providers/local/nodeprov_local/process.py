"""A local node's processes: :class:`LocalProcess`, the records of the processes a node
started (:class:`StartedProcess`, so another control plane can end them), and ending a
supervisor and what it supervises."""

from __future__ import annotations

import logging
import os
import signal
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import anyio
from anyio.abc import Process

from nodeprov.node import process_start_time
from nodeprov.spawn import SpawnedProcess, StopPolicy
from nodeprov_local import _supervisor

__all__ = ["LocalProcess", "StartedProcess", "abandon", "kill_tree", "read_to_end", "signal_group"]

logger = logging.getLogger("nodeprov.local")

_MAX_PID = 1 << 22  # Linux's highest pid_max


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
        assert process.stdin is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        assert process.stdout is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        assert process.stderr is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
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
            signal_group(self.pid, signal.SIGTERM)
        else:
            self._signal_supervisor(signal.SIGTERM)

    async def kill(self) -> None:
        if self.command_pid is None:
            signal_group(self.pid, signal.SIGKILL)
        else:
            self._signal_supervisor(_supervisor.KILL_ALL)

    async def _release(self) -> None:
        if self.command_pid is None:
            signal_group(self.pid, signal.SIGKILL)  # what the process left running in its group
        elif self.returncode is None and process_start_time(self.pid) is not None:
            # The last resort: the supervisor still runs after kill() and its grace (a
            # supervisor that has ended leaves nothing behind; it ends only when all is reaped).
            logger.warning("supervisor %d did not end; killing it and what it supervises", self.pid)
            kill_tree(self.pid)
        await super()._release()
        if self.returncode is not None:  # reaped: close its transports too (else they are
            await self._process.aclose()  # collected after the event loop, with a warning)

    def _signal_supervisor(self, sig: int) -> None:
        # os.kill, not Popen.send_signal: that one polls, and may reap the child under the
        # event loop's child watcher. Until the watcher has reaped it, the pid is ours.
        if self._process.returncode is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):  # an empty group: all of it exited
        os.killpg(pgid, sig)


def kill_tree(pid: int) -> None:
    """SIGKILL a supervisor and everything below it: the last resort when it does not end."""
    try:
        below = _supervisor.descendants(pid)
    except OSError:
        below = []  # no /proc
    for victim in [*reversed(below), pid]:
        with suppress(OSError):
            os.kill(victim, signal.SIGKILL)


@dataclass(frozen=True)
class StartedProcess:
    """A line of the node's process file: ``KIND PID START NAMESPACE``. KIND is
    ``supervisor`` (Linux) or ``group`` (a process-group leader, elsewhere); START is the
    process's start time (see :func:`process_start_time`, ``-`` if unknown)."""

    kind: str
    pid: int
    start: str
    namespace: str

    KINDS: ClassVar[frozenset[str]] = frozenset({"supervisor", "group"})

    @classmethod
    def parse(cls, line: str) -> StartedProcess:
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


async def read_to_end(fd: int) -> bytes:
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


async def abandon(process: Process, sig: int = _supervisor.KILL_ALL, *, read_stderr: bool = False) -> str:
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
            kill_tree(process.pid)
        with anyio.move_on_after(2):
            await process.aclose()
    return stderr.decode(errors="replace").strip()[-1000:]
