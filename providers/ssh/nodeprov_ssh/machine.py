"""A node that is a machine of its own (an EC2 instance, a codespace) whose node directory is
made on it over SSH: what the providers of such machines share."""

from __future__ import annotations

from abc import abstractmethod
from contextlib import suppress
from typing import Any, ClassVar

import anyio

from nodeprov.errors import NodeprovError
from nodeprov.node import NodeHandle
from nodeprov.spawn import SpawnedProcess, SpawnOptions
from nodeprov_ssh.node import SshNode
from nodeprov_ssh.provider import SshNodes

__all__ = ["MachineNode"]

_PRE_DESTROY = 10.0  # seconds for the node's processes to be ended over SSH before the machine goes


class MachineNode(NodeHandle):
    """The machine's node directory is its :class:`SshNode`, attached on first use (a handle
    needs no SSH to exist); spawns go to it. Destroy ends the node's processes over SSH when
    the machine answers at once (their channels then close with an exit status, not a lost
    connection), then removes the machine, which ends them anyway."""

    can_suspend: ClassVar[bool] = True

    def __init__(self, *, ssh: SshNode | None, suspended: bool, **handle: Any) -> None:
        super().__init__(suspended=suspended, **handle)
        self._ssh = ssh
        self._ssh_lock = anyio.Lock()

    @abstractmethod
    async def _reach(self) -> SshNodes:
        """The SSH side of the machine (it may start it)."""

    @abstractmethod
    async def _remove(self) -> None:
        """Remove the machine; fine if it is gone."""

    def _attached(self, ssh: SshNode) -> None:
        """Take what the node's record holds, once it has answered."""
        self.base_env, self.tool_paths = ssh.base_env, ssh.tool_paths

    async def _connected(self) -> SshNode:
        async with self._ssh_lock:
            if self._ssh is None:
                self._ssh = await (await self._reach()).attach(self.node_id)
                self._attached(self._ssh)
            return self._ssh

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        return await (await self._connected())._spawn(options)

    async def _destroy(self) -> None:
        if not self.suspended:
            with anyio.move_on_after(_PRE_DESTROY), suppress(NodeprovError):
                await (await self._connected())._destroy()
        self._ssh = None
        await self._remove()
