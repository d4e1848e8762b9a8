"""An ACP agent's session state as files of its home, between a node and an archive: ACP has
no way to ask an agent for a session's state, so an agent entry names where it keeps it.

The files under the paths named are one archive entry each (``path``, ``mode``, and
``text``, or ``base64`` for bytes that are not UTF-8), under the session's key: text keeps a
session id readable in the archive, where a fork renames it
(:meth:`~nodeprov.agents.Agent.fork_state`). They go off the node as one ``tar -c`` and back
as one ``tar -x``.
"""

from __future__ import annotations

import base64
import io
import logging
import posixpath
import tarfile
from collections.abc import Callable, Iterable
from typing import Any

import anyio
import anyio.to_thread

from ...errors import NodeFileError, NodeprovError
from ...node import NodeHandle
from ...spawn import SpawnOptions
from .. import SessionArchive, StateKey

__all__ = ["load_tree", "save_tree", "state_entries", "tree_archive", "write_tree"]

logger = logging.getLogger("nodeprov.agents.acp")

_TIMEOUT = 60.0
_PACK = """\
cd "$1" 2>/dev/null || exit 0
shift
count=$#
while [ "$count" -gt 0 ]; do
  for found in $1; do
    [ -e "$found" ] && set -- "$@" "$found"
  done
  shift
  count=$((count - 1))
done
[ "$#" -gt 0 ] || exit 0
exec tar -c -f - -- "$@"
"""
"""Run as ``sh -c _PACK nodeprov-acp-state HOME PATTERN...``: a tar of the paths the patterns
(paths, or shell glob patterns, without spaces) name that are there."""
_UNPACK = 'mkdir -p "$1" && chmod 700 "$1" && exec tar -x -f - -C "$1" --no-same-owner'


def state_entries(data: bytes) -> list[dict[str, Any]]:
    """The regular files of tar ``data`` as archive entries, sorted by path."""
    entries = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is None:
                continue
            content = extracted.read()
            entry: dict[str, Any] = {"path": posixpath.normpath(member.name), "mode": member.mode & 0o777}
            try:
                entry["text"] = content.decode("utf-8")
            except UnicodeDecodeError:
                entry["base64"] = base64.b64encode(content).decode()
            entries.append(entry)
    return sorted(entries, key=lambda entry: str(entry["path"]))


def tree_archive(entries: Iterable[dict[str, Any]]) -> bytes:
    """A tar of ``entries`` (as :func:`state_entries` makes them).

    Raises:
        NodeFileError: an entry's path leaves the home, or the entry is malformed.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for entry in entries:
            path = posixpath.normpath(str(entry.get("path", "")))
            if path.startswith(("/", "../")) or path in ("", ".", ".."):
                raise NodeFileError(f"a state file's path leaves the agent's home: {path!r}")
            text, encoded = entry.get("text"), entry.get("base64")
            content = text.encode() if isinstance(text, str) else base64.b64decode(str(encoded or ""))
            member = tarfile.TarInfo(path)
            member.size, member.mode = len(content), int(entry.get("mode", 0o600)) & 0o777
            tar.addfile(member, io.BytesIO(content))
    return buffer.getvalue()


async def save_tree(
    node: NodeHandle,
    home: str,
    paths: list[str],
    key: StateKey,
    archive: SessionArchive,
    *,
    keep: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
) -> None:
    """Archive the files under ``paths`` of ``home`` on ``node`` (relative paths, or shell
    glob patterns without spaces) as the session state under ``key``, when they differ from
    the archived copy; ``keep`` chooses among the files found. A node that cannot be read leaves the
    copy as it is.

    Raises:
        StoreError: the archive could not be written.
    """
    try:
        with anyio.fail_after(_TIMEOUT):
            data, status = await _run(
                node, SpawnOptions("/bin/sh", ["-c", _PACK, "nodeprov-acp-state", home, *paths])
            )
        if status != 0:
            raise NodeFileError(f"tar exited with status {status}")
        entries = await anyio.to_thread.run_sync(state_entries, data)
        entries = keep(entries) if keep is not None else entries
    except (NodeprovError, TimeoutError, tarfile.TarError) as error:
        logger.warning(
            "the state of session %s not read from node %s: %s", key["session_id"], node.node_id, error
        )
        return
    if entries and await archive.load(key) != entries:
        await archive.replace(key, entries)


async def load_tree(node: NodeHandle, home: str, key: StateKey, archive: SessionArchive) -> bool:
    """Write the session state archived under ``key`` into ``home`` on ``node``; whether
    there was any.

    Raises:
        NodeFileError: the files could not be written (or an entry is malformed).
        NodeGoneError: the node is gone.
        StoreError: the archive could not be read.
    """
    entries = await archive.load(key)
    if not entries:
        return False
    await write_tree(node, home, entries)
    return True


async def write_tree(node: NodeHandle, home: str, entries: list[dict[str, Any]]) -> None:
    """Write state ``entries`` (as :func:`state_entries` makes them) into ``home`` on ``node``.

    Raises:
        NodeFileError: the files could not be written (or an entry is malformed).
        NodeGoneError: the node is gone.
    """
    try:
        data = await anyio.to_thread.run_sync(tree_archive, entries)
    except (ValueError, TypeError, tarfile.TarError) as error:
        raise NodeFileError(f"an archived session state is malformed: {error}") from None
    with anyio.fail_after(_TIMEOUT):
        _, status = await _run(
            node, SpawnOptions("/bin/sh", ["-c", _UNPACK, "nodeprov-acp-state", home]), data
        )
    if status != 0:
        raise NodeFileError(f"a session state not written on node {node.node_id} (tar: exit status {status})")


async def _run(node: NodeHandle, options: SpawnOptions, given: bytes = b"") -> tuple[bytes, int]:
    async with await node.spawn(options) as process:
        if given:
            await process.stdin.send(given)
        await process.stdin.aclose()
        await process.stderr.aclose()
        said = b"".join([chunk async for chunk in process.stdout])
        return said, await process.wait()
