"""The CLI's options that may hold secrets, as 0600 files on the node, never arguments."""

from __future__ import annotations

import posixpath
import secrets
from contextlib import suppress

import anyio

from ...errors import NodeprovError
from ...node import NodeHandle
from ...spawn import SpawnOptions

__all__ = ["SECRET_FLAGS", "OptionFiles"]

SECRET_FLAGS = ("--mcp-config", "--settings")
"""CLI options whose JSON values may hold secrets (MCP server env and headers, settings)."""


class OptionFiles:
    """The values of :data:`SECRET_FLAGS` in a CLI's argument vector, moved into 0600 files
    in a directory of their own on ``node``, under ``home`` (else the node's ``HOME``, else
    its workdir) in ``.nodeprov/``: any user of a node can read arguments (``ps``, an
    engine's exec inspection). Without a node (a bare spawn function) they stay arguments."""

    def __init__(self, node: NodeHandle | None, home: str | None) -> None:
        self._node = node
        self._home = home or (node.base_env.get("HOME") or node.workdir if node is not None else "")
        self._directory: str | None = None

    async def written(self, argv: list[str]) -> list[str]:
        """``argv`` with each JSON value of :data:`SECRET_FLAGS` replaced by its file's path.

        Raises:
            NodeFileError, NodeGoneError: a file could not be written.
        """
        if self._node is None:
            return argv
        argv = list(argv)
        for index in range(1, len(argv)):
            if argv[index - 1] in SECRET_FLAGS and argv[index].lstrip().startswith("{"):
                if self._directory is None:
                    self._directory = posixpath.join(self._home, ".nodeprov", f"agent-{secrets.token_hex(8)}")
                path = posixpath.join(self._directory, f"{argv[index - 1].lstrip('-')}.json")
                await self._node.write_file(path, argv[index].encode(), mode=0o600)
                argv[index] = path
        return argv

    async def remove(self) -> None:
        """Remove the files, where the node still answers; bounded, never raises."""
        directory, self._directory = self._directory, None
        if directory is None or self._node is None:
            return
        with anyio.move_on_after(5), suppress(NodeprovError):
            async with await self._node.spawn(SpawnOptions("rm", ["-rf", "--", directory])) as remover:
                await remover.stdin.aclose()
                await remover.wait()
