"""What the client does for an ACP agent on a node: the agent's ``fs/*`` and ``terminal/*``
requests served on the node, and its ``session/request_permission`` answered by the run's
:data:`~nodeprov.agents.Permission`, since nobody answers prompts on a node.

=======================  ==================================================================
permission               what the agent is offered and allowed
=======================  ==================================================================
``read-only``            ``fs/read_text_file``; tool calls that read, search, think
``edit``                 and ``fs/write_text_file`` under the session's directory; tool
                         calls that edit, delete, move
``full``                 and ``terminal/*`` (unless kept); every tool call
=======================  ==================================================================

A kept agent is offered no terminal: a terminal is a process of the client's, and would end
with the control plane the kept agent outlives. The agent then runs its commands itself.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

import anyio

from ...errors import NodeFileNotFoundError, NodePathError
from ...node import NodeHandle
from .. import Permission
from .rpc import METHOD_NOT_FOUND, RpcError
from .terminals import Terminals

__all__ = ["INVALID_PARAMS", "RESOURCE_NOT_FOUND", "NodeClient"]

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
"""ACP's error code for a file or session that is not there."""
_READ_LIMIT = 64 * 1024 * 1024  # bytes of a file read back as text, at most

_ALLOWED_KINDS: dict[Permission, frozenset[str]] = {
    "read-only": frozenset({"read", "search", "think"}),
    "edit": frozenset({"read", "search", "think", "edit", "delete", "move"}),
    "full": frozenset(),  # every kind
}


class NodeClient:
    """Serves one ACP agent's requests on ``node`` (a :data:`~nodeprov.agents.acp.rpc.Server`)
    for a session working in ``root`` (an absolute path on the node)."""

    def __init__(self, node: NodeHandle, permission: Permission, root: str, *, kept: bool) -> None:
        self._node, self._permission, self._root = node, permission, posixpath.normpath(root)
        self._terminals = Terminals(node) if permission == "full" and not kept else None
        self.cancelled = False
        """Set while a turn is being cancelled: permission requests are answered ``cancelled``
        (what ACP asks of a client that sent ``session/cancel``)."""
        self._refused: list[dict[str, Any]] = []

    def refusals(self) -> list[dict[str, Any]]:
        """The tool calls refused since the last call, as ``tool_call`` updates that fail
        them: an agent may say nothing more of a call it was refused (the Gemini CLI does
        not), and the run should show it."""
        refused, self._refused = self._refused, []
        return refused

    def capabilities(self) -> dict[str, Any]:
        """The ``clientCapabilities`` of ``initialize``."""
        writes = self._permission != "read-only"
        return {
            "fs": {"readTextFile": True, "writeTextFile": writes},
            "terminal": self._terminals is not None,
        }

    async def __call__(self, method: str, params: Any) -> Any:
        if not isinstance(params, Mapping):
            raise RpcError(INVALID_PARAMS, f"{method} takes an object")
        if method == "session/request_permission":
            return self._permit(params)
        if method == "fs/read_text_file":
            return {"content": await self._read(params)}
        if method == "fs/write_text_file" and self._permission != "read-only":
            path = self._path(params, writing=True)
            await self._node.write_file(path, str(params.get("content", "")).encode(), mode=0o644)
            return None
        if method.startswith("terminal/") and self._terminals is not None:
            return await self._terminals.serve(method.removeprefix("terminal/"), params)
        raise RpcError(
            METHOD_NOT_FOUND, f"{method} is not offered to this agent (permission {self._permission})"
        )

    def _permit(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The option the policy picks among those the agent offers: one that allows for a
        tool call of an allowed kind, else one that rejects; ``cancelled`` when there is none."""
        if self.cancelled:
            return {"outcome": {"outcome": "cancelled"}}
        call = params.get("toolCall")
        kind = str(call.get("kind") or "other") if isinstance(call, Mapping) else "other"
        allowed = self._permission == "full" or kind in _ALLOWED_KINDS[self._permission]
        wanted = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        options = [option for option in params.get("options") or [] if isinstance(option, Mapping)]
        if not allowed and isinstance(call, Mapping):
            why = f"refused: the run's permission ({self._permission}) allows no tool call of kind {kind}"
            content = [{"type": "content", "content": {"type": "text", "text": why}}]
            self._refused.append(
                {**call, "sessionUpdate": "tool_call", "status": "failed", "content": content}
            )
        for option_kind in wanted:
            for option in options:
                if option.get("kind") == option_kind:
                    return {"outcome": {"outcome": "selected", "optionId": option.get("optionId")}}
        return {"outcome": {"outcome": "cancelled"}}

    def _path(self, params: Mapping[str, Any], *, writing: bool) -> str:
        path = params.get("path")
        if not isinstance(path, str) or not posixpath.isabs(path):
            raise RpcError(INVALID_PARAMS, f"a path must be absolute, not {path!r}")
        try:
            full = self._node.node_path(path)
        except NodePathError as error:
            raise RpcError(INVALID_PARAMS, str(error)) from None
        if writing and self._permission != "full" and not (full + "/").startswith(self._root + "/"):
            raise RpcError(INVALID_PARAMS, f"{path} is outside {self._root}, where this agent may write")
        return full

    async def _read(self, params: Mapping[str, Any]) -> str:
        """The file's text (undecodable bytes replaced), from ``line`` (1-based) for
        ``limit`` lines when given."""
        path = self._path(params, writing=False)
        data = bytearray()
        try:
            async with self._node.read_file(path) as chunks:
                async for chunk in chunks:
                    data += chunk
                    if len(data) > _READ_LIMIT:
                        raise RpcError(INVALID_PARAMS, f"{path} is over {_READ_LIMIT} bytes")
        except NodeFileNotFoundError:
            # ACP's words for it, which agents match (the Gemini CLI creates a file it reads first).
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: {path}", {"path": path}) from None
        text = data.decode("utf-8", "replace")
        line, limit = params.get("line"), params.get("limit")
        if line is None and limit is None:
            return text
        lines = text.split("\n")  # not splitlines(): that cuts at U+2028 and others too
        start = max(line - 1, 0) if isinstance(line, int) else 0
        end = start + limit if isinstance(limit, int) else None
        return "\n".join(lines[start:end])

    async def aclose(self) -> None:
        """Kill and release the terminals left (shielded, bounded; never raises)."""
        if self._terminals is not None:
            with anyio.CancelScope(shield=True):
                await self._terminals.aclose()
