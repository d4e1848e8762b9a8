"""A process on a node whose streams come over an exec channel (:class:`~.demux.Demux`) and
which is stopped by signalling its process group over a side channel (a second exec), as
Docker's, a pod's and an SSH host's are: :class:`GroupProcess`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NotRequired, TypedDict

from anyio.abc import ByteReceiveStream, ByteSendStream

from ..spawn import SpawnedProcess, StopPolicy
from .demux import STDERR, STDOUT, Demux, Output
from .released import Held, ReleasedStdout

__all__ = ["KILLED", "GroupArgs", "GroupProcess", "SignalGroup"]

SignalGroup = Callable[[str], Awaitable[None]]
"""Send the signal named (``TERM``, ``KILL``) to the process's group on the node; a gone
node or group is no error (may raise :class:`~nodeprov.errors.NodeprovError` where the node
cannot be asked)."""

KILLED = 128 + 9
"""The status of a process killed by SIGKILL where the platform reports signals as a shell
would (a container runtime): what a process removed with its node reports."""


class GroupArgs(TypedDict):
    """The keyword arguments of :class:`GroupProcess`, for a subclass to pass through
    (``**process: Unpack[GroupArgs]``)."""

    pid: int
    signal_group: SignalGroup
    stop_policy: StopPolicy
    stdout_held: NotRequired[Held | None]


class GroupProcess(SpawnedProcess):
    """A process that leads its process group on a node; ``pid`` is its id there.

    ``stdin`` is the channel's input; stdout and stderr come from ``demux``, stdout ended
    by :class:`~.released.ReleasedStdout` when ``stdout_held`` is given (the process's
    stdout pipe is known). :meth:`terminate` sends SIGTERM to the group once, or SIGKILL
    when the process is out of reach (:meth:`_reachable`); :meth:`kill` sends SIGKILL
    once; a process that was sent SIGTERM has its group sent SIGKILL when it is released
    (what it started may have ignored SIGTERM), and the channel is closed. A process
    discarded with its node before its exit was seen reports :data:`KILLED`.

    A subclass implements :meth:`wait` (setting ``_returncode``), may override
    :meth:`_reachable`, and takes the keyword arguments as :class:`GroupArgs`.
    """

    def __init__(
        self,
        demux: Demux,
        stdin: ByteSendStream,
        *,
        pid: int,
        signal_group: SignalGroup,
        stop_policy: StopPolicy,
        stdout_held: Held | None = None,
    ) -> None:
        super().__init__(stop_policy)
        self.pid = pid
        self._demux = demux
        self.stdin = stdin
        self.stdout: ByteReceiveStream = (
            Output(demux, STDOUT) if stdout_held is None else ReleasedStdout(demux, stdout_held)
        )
        self.stderr = Output(demux, STDERR)
        self._signal_group = signal_group
        self._returncode: int | None = None
        self._signalled = ""

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def _reachable(self) -> bool:
        """Whether the process's exit can still be seen (its channel is up): when it cannot,
        :meth:`terminate` kills, since one signal is all it gets."""
        return not self._demux.closed

    async def terminate(self) -> None:
        if self.returncode is None:
            if not self._reachable():
                await self.kill()
            elif not self._signalled:
                self._signalled = "TERM"
                await self._signal_group("TERM")

    async def kill(self) -> None:
        if self.returncode is None and self._signalled != "KILL":
            self._signalled = "KILL"
            await self._signal_group("KILL")

    async def discard(self) -> None:
        if self.returncode is None:
            self._returncode = KILLED
        await super().discard()

    async def _release(self) -> None:
        if self._signalled == "TERM":
            # What it started may have ignored SIGTERM. (A process that ends on its own keeps
            # its background children until the node goes: a side channel per process to
            # sweep them would double the cost of every short spawn.)
            await self._signal_group("KILL")
        await super()._release()
        await self._demux.aclose()
