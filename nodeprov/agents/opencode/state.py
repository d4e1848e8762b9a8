"""Where a workspace's OpenCode keeps its state on a node, and its sessions' state between a
node and an archive."""

from __future__ import annotations

import json
import logging
import secrets
import string
import time
from contextlib import suppress
from typing import TYPE_CHECKING

import anyio

from ...errors import AgentExitError, NodeFileError, NodeprovError
from ...node import NodeHandle
from ...spawn import SpawnOptions
from .. import SessionArchive, StateKey
from .._files import archive_entries, read_lines, workspace_home, workspace_key

if TYPE_CHECKING:
    from .agent import OpenCodeAgent

__all__ = ["QUIET_ENV", "home_of", "load_state", "new_session_id", "save_state", "state_key", "workspace_env"]

logger = logging.getLogger("nodeprov.agents.opencode")

_CLI_TIMEOUT = 60.0  # an `opencode export` or `import`: a start of OpenCode, on a loaded node too
_SESSION = "session"  # the subpath of a session's own record beside its messages

# Nothing from other hosts: a node may have no way out but the model's. Nothing from the
# node's $HOME either (its ~/.claude, its skills).
QUIET_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # the catalog built into OpenCode serves
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
}


def state_key(workspace: str) -> str:
    """``opencode-``, the workspace's name (letters, digits, ``.``, ``_``, ``-``) and a hash of it."""
    return workspace_key("opencode", workspace)


_BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase


def new_session_id() -> str:
    """A session id as OpenCode makes one (``Identifier.descending("session")``): ``ses_``,
    the time in milliseconds shifted by 12 bits and inverted (the newest sorts first) in 12
    hexadecimal digits, then 14 random base62 characters."""
    inverted = ~(int(time.time() * 1000) << 12 | secrets.randbelow(1 << 12)) & ((1 << 48) - 1)
    return f"ses_{inverted:012x}{''.join(secrets.choice(_BASE62) for _ in range(14))}"


def home_of(node: NodeHandle, project_key: str) -> str:
    """The home of the workspace whose key is ``project_key`` on ``node``."""
    return workspace_home(node, "opencode", project_key)


def workspace_env(home: str) -> dict[str, str]:
    """What puts the directories OpenCode uses under ``home``: its data (the sessions'
    SQLite database, logs), config, state and cache (its temporary files: the wrapper's
    ``TMPDIR``)."""
    return {
        "XDG_DATA_HOME": f"{home}/data",
        "XDG_CONFIG_HOME": f"{home}/config",
        "XDG_STATE_HOME": f"{home}/state",
        "XDG_CACHE_HOME": f"{home}/cache",
        # The home whose .opencode is a config directory of OpenCode's (read, and given npm
        # packages): the workspace's, not the node's $HOME.
        "OPENCODE_TEST_HOME": home,
        **QUIET_ENV,
    }


async def save_state(
    agent: OpenCodeAgent, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
) -> bool:
    """Archive the session as ``opencode export`` gives it: its messages, one entry each, and
    its own record (subpath ``session``); return whether it was. A node that cannot say
    leaves the archive as it is."""
    home = home_of(node, project_key)
    try:
        exported = json.loads(await _run(agent, node, home, ["export", session_id]))
        info, messages = exported["info"], exported["messages"]
    except (NodeprovError, TimeoutError, ValueError, KeyError, TypeError) as error:
        logger.warning("session %s not exported from node %s: %s", session_id, node.node_id, error)
        return False
    key: StateKey = {"project_key": project_key, "session_id": session_id}
    await archive_entries([m for m in messages if isinstance(m, dict)], key, archive)
    record: StateKey = {**key, "subpath": _SESSION}
    if await archive.load(record) != [info]:
        await archive.replace(record, [info])
    return True


async def load_state(
    agent: OpenCodeAgent, node: NodeHandle, session_id: str, project_key: str, archive: SessionArchive
) -> bool:
    """Give the workspace's OpenCode on ``node`` the archived session (``opencode import``).

    Raises:
        NodeFileError: OpenCode did not take it.
    """
    key: StateKey = {"project_key": project_key, "session_id": session_id}
    messages, record = await archive.load(key), await archive.load({**key, "subpath": _SESSION})
    if not messages or not record:
        return False
    home = home_of(node, project_key)
    path = f"{home}/nodeprov/import-{session_id}.json"
    await node.write_file(path, json.dumps({"info": record[0], "messages": messages}).encode())
    try:
        await _run(agent, node, home, ["import", path])
    except (AgentExitError, TimeoutError) as error:
        raise NodeFileError(
            f"session {session_id} not imported by opencode on node {node.node_id}: {error}"
        ) from None
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLI_TIMEOUT), suppress(NodeprovError):
            await _run_plain(node, SpawnOptions("rm", ["-f", path]))  # the conversation is in OpenCode's now
    return True


async def _run(agent: OpenCodeAgent, node: NodeHandle, home: str, args: list[str]) -> bytes:
    """The stdout of ``opencode ARGS`` for the workspace whose home is ``home``.

    Raises:
        AgentExitError: OpenCode failed.
        TimeoutError: it took longer than :data:`_CLI_TIMEOUT`.
        NodeprovError: it could not be run.
    """
    stderr_file = f"{home}/nodeprov/stderr-{secrets.token_hex(8)}.log"
    with anyio.fail_after(_CLI_TIMEOUT):
        said, status = await _run_plain(node, agent.wrapped(home, stderr_file, [agent.cli_on(node), *args]))
    if status != 0:
        lines = await read_lines(node, stderr_file)
        raise AgentExitError(
            f"opencode {args[0]} failed (exit status {status})",
            exit_code=status,
            stderr_tail="\n".join(line[:2000] for line in lines[-20:]),
        )
    return said


async def _run_plain(node: NodeHandle, options: SpawnOptions) -> tuple[bytes, int]:
    async with await node.spawn(options) as process:
        await process.stdin.aclose()
        await process.stderr.aclose()
        said = b"".join([chunk async for chunk in process.stdout])
        return said, await process.wait()
