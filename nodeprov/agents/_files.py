"""Session state files between a node and an archive, for the agents."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import NodeprovError
from ..node import NodeHandle
from ..prompts import Block, ImageBlock
from . import SessionArchive, StateKey

if TYPE_CHECKING:
    from ..store.entries import Fold

__all__ = [
    "archive_entries",
    "archive_file",
    "read_jsonl",
    "read_lines",
    "workspace_home",
    "workspace_key",
    "write_jsonl",
]

logger = logging.getLogger("nodeprov.agents")

READ_TIMEOUT = 30.0  # reading a state file off a node, perhaps one being released


def workspace_key(agent: str, workspace: str) -> str:
    """``AGENT-``, the workspace's name (letters, digits, ``.``, ``_``, ``-``) and a hash of it:
    the key of a workspace's sessions of an agent that keeps a home per workspace."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", workspace)[:40]
    return f"{agent}-{safe}-{hashlib.sha256(workspace.encode()).hexdigest()[:12]}"


def workspace_home(node: NodeHandle, agent: str, key: str) -> str:
    """The home on ``node`` of the workspace whose key is ``key``: ``$HOME/.nodeprov/AGENT/KEY``."""
    return f"{node.base_env.get('HOME', '/root')}/.nodeprov/{agent}/{key}"


def entries_to_jsonl(entries: list[Any]) -> bytes:
    """A state file's bytes from its entries, ``type`` first as the CLIs write it."""
    lines = (
        json.dumps(
            {"type": e["type"], **e} if isinstance(e, dict) and "type" in e else e, separators=(",", ":")
        )
        for e in entries
    )
    return ("\n".join(lines) + "\n").encode()


async def _read(node: NodeHandle, path: str) -> bytes | None:
    data = bytearray()
    try:
        with anyio.fail_after(READ_TIMEOUT):
            async with node.read_file(path) as chunks:
                async for chunk in chunks:
                    data += chunk
    except (NodeprovError, TimeoutError) as error:
        logger.warning("%s not read from node %s: %s", path, node.node_id, error)
        return None
    return bytes(data)


async def read_lines(node: NodeHandle, path: str) -> list[str]:
    """The non-blank lines of text file ``path`` on ``node``; none if it cannot be read."""
    data = await _read(node, path)
    return [line for line in (data or b"").decode("utf-8", "replace").splitlines() if line.strip()]


async def read_jsonl(node: NodeHandle, path: str) -> list[dict[str, Any]] | None:
    """The JSON lines of ``path`` on ``node`` (a line cut short by the agent's end is
    dropped); None, logged, when it cannot be read within :data:`READ_TIMEOUT`."""
    data = await _read(node, path)
    if data is None:
        return None
    entries = []
    for line in data.splitlines():
        with suppress(ValueError):
            entries.append(json.loads(line))
    return entries


async def write_images(node: NodeHandle, directory: str, blocks: Sequence[Block]) -> list[str]:
    """Write the images among ``blocks`` to ``directory`` on ``node``, each named by its hash,
    for a CLI that takes images as files; their paths, in order."""
    paths = []
    for image in (block for block in blocks if isinstance(block, ImageBlock)):
        paths.append(f"{directory}/{image.filename}")
        await node.write_file(paths[-1], image.data)
    return paths


async def write_jsonl(node: NodeHandle, path: str, entries: list[Any]) -> None:
    """Write ``entries`` as JSON lines to ``path`` on ``node`` (0600)."""
    await node.write_file(path, entries_to_jsonl(entries))


async def archive_file(
    node: NodeHandle,
    path: str,
    key: StateKey,
    archive: SessionArchive,
    *,
    summarize: Fold | None = None,
) -> None:
    """Archive what ``path`` on ``node`` holds beyond the copy under ``key``: the rest is
    appended when the copy is the file's beginning, else a longer file replaces the copy;
    a shorter one never does. A file that cannot be read leaves the copy as it is.
    ``summarize``: see :class:`~nodeprov.agents.SessionArchive`."""
    entries = await read_jsonl(node, path)
    if entries is not None:
        await archive_entries(entries, key, archive, summarize=summarize)


async def archive_entries(
    entries: list[dict[str, Any]], key: StateKey, archive: SessionArchive, *, summarize: Fold | None = None
) -> None:
    """Archive what ``entries`` (a node's copy of a state file) hold beyond the copy under
    ``key``, as :func:`archive_file` does."""
    await archive.flush()
    held = await archive.load(key) or []
    if len(entries) <= len(held):
        return
    if entries[: len(held)] != held:
        await archive.replace(key, entries, summarize=summarize)
        return
    archive.add(key, entries[len(held) :], summarize=summarize)
    await archive.flush()
