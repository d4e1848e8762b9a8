"""What a capture and a restore share: the workspace's root on the node, and what a process
they run said on its stderr."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

import anyio

from ..errors import CheckpointError, ConfigError, leaf
from ..node import NodeHandle
from ..spawn import SpawnedProcess

__all__ = ["STAGE", "Said", "check", "root_of", "stderr_of"]

STAGE = ".nodeprov-restore-"
"""What the directory a restore writes into begins with (a capture leaves such paths out)."""


def root_of(node: NodeHandle, root: str | None) -> str:
    """``root`` (the node's workdir if None) as a path on ``node``.

    Raises:
        ConfigError: it is ``/``.
        NodePathError: it is outside the node.
    """
    full = node.node_path(root or node.workdir)
    if full == "/":
        raise ConfigError(
            f"refusing to checkpoint or restore all of node {node.node_id} ('/'): name a workspace"
        )
    return full


def check(code: int, said: Said, what: str) -> None:
    """Raise CheckpointError saying ``what`` failed, unless ``code`` is 0."""
    if code != 0:
        raise CheckpointError(f"{what} failed: {said.text(code)}")


class Said:
    """The first 4 KiB a process wrote to stderr, for an error's message."""

    def __init__(self) -> None:
        self._said = bytearray()
        self.ended = anyio.Event()

    async def read(self, process: SpawnedProcess) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for chunk in process.stderr:
                if len(self._said) < 4096:
                    self._said += chunk[: 4096 - len(self._said)]
        self.ended.set()

    def only(self, expected: Sequence[str]) -> bool:
        """Whether every line said holds one of ``expected`` (and something was said)."""
        lines = [line for line in self.text(0).splitlines() if line.strip()]
        return bool(lines) and all(any(text in line for text in expected) for line in lines)

    def text(self, code: int) -> str:
        return bytes(self._said).decode(errors="replace").strip() or f"exit status {code}"


@asynccontextmanager
async def stderr_of(process: SpawnedProcess) -> AsyncIterator[Said]:
    """Read ``process``'s stderr while it runs (a full pipe would stall it)."""
    said = Said()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(said.read, process)
            try:
                yield said
                with anyio.move_on_after(5):
                    await said.ended.wait()
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as raised:  # the caller's own error, not a group's
        raise leaf(raised) from None
