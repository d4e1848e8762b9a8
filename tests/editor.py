"""An editor for the tests of ``nodeprov acp``: the ACP Python library's client side (as Zed
or a Neovim plugin would speak), recording every ``session/update`` it is told."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from acp import RequestError, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities

__all__ = ["Editor", "EditorSide", "acp_process"]

NODEPROV = [sys.executable, "-m", "nodeprov"]
_LEAVE = 120.0  # seconds nodeprov acp may take to leave once its input is closed


@dataclass
class Editor:
    """What an editor was told: every update, by session, in order."""

    updates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    told: anyio.Event = field(default_factory=anyio.Event)

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append((session_id, update.model_dump(by_alias=True, exclude_none=True)))
        self.told.set()
        self.told = anyio.Event()

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")  # nodeprov never asks

    def on_connect(self, conn: Any) -> None:
        pass

    def of(self, session_id: str, kind: str) -> list[dict[str, Any]]:
        return [told for sid, told in self.updates if sid == session_id and told["sessionUpdate"] == kind]

    def texts(self, session_id: str, kind: str = "agent_message_chunk") -> list[str]:
        return [update["content"]["text"] for update in self.of(session_id, kind)]

    async def wait_for(self, session_id: str, kind: str) -> dict[str, Any]:
        """The first update of ``kind`` in ``session_id``, once told."""
        with anyio.fail_after(120):
            while not (found := self.of(session_id, kind)):
                await self.told.wait()
        return found[0]


@dataclass
class EditorSide:
    """A running ``nodeprov acp`` as its editor holds it."""

    connection: ClientSideConnection
    editor: Editor
    process: Any  # asyncio.subprocess.Process

    async def start(self) -> str:
        """Initialize as an editor offering files, and open a session: its id."""
        files = FileSystemCapabilities(read_text_file=True, write_text_file=True)
        capabilities = ClientCapabilities(fs=files)
        initialized = await self.connection.initialize(protocol_version=1, client_capabilities=capabilities)
        assert initialized.protocol_version == 1
        session = await self.connection.new_session(cwd="/editor/project", mcp_servers=[])
        return session.session_id


@asynccontextmanager
async def acp_process(args: Sequence[str], log: Path, env: dict[str, str]) -> AsyncIterator[EditorSide]:
    """``nodeprov acp ARGS`` run by an editor; its standard error to ``log``. Leaving closes
    its input and waits for it to leave."""
    editor = Editor()
    with log.open("ab") as stderr:
        async with spawn_agent_process(
            editor,  # type: ignore[arg-type]
            *NODEPROV,
            "acp",
            *args,
            env={**os.environ, **env},
            transport_kwargs={"stderr": stderr.fileno(), "shutdown_timeout": _LEAVE},
        ) as (connection, process):
            yield EditorSide(connection, editor, process)
