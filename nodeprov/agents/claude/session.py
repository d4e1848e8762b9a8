"""A ``claude`` session: the Claude Code CLI on a node, through the Claude Agent SDK's
client and :class:`~nodeprov.agents.claude.NodeTransport` (this module imports the SDK)."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from typing import Any, Literal, cast

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, SessionKey, SessionStore

# Pinned with the SDK: the CLI's own naming of project directories and transcript files.
from claude_agent_sdk._internal.session_store import file_path_to_session_key
from claude_agent_sdk.types import SessionStoreEntry

from ...errors import AgentError, ConfigError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, KeptProcess
from ...prompts import Block, ImageBlock, Prompt, prompt_text
from .. import AgentSession, Message, Result, SessionArchive, StateKey
from .._quiet import quiet_bounded
from ..structured import check_structured
from .agent import ClaudeAgent, config_dir
from .bridge import NodeTransport
from .messages import convert
from .session_store import fold_summary

__all__ = ["ClaudeSession", "sdk_options"]

logger = logging.getLogger("nodeprov.agents.claude")

_PERMISSION_MODES: dict[str, Literal["plan", "acceptEdits", "bypassPermissions"]] = {
    "read-only": "plan",
    "edit": "acceptEdits",
    "full": "bypassPermissions",
}


def sdk_options(
    agent: ClaudeAgent, node: NodeHandle, *, resume: str | None = None, archive: SessionArchive | None = None
) -> ClaudeAgentOptions:
    """The SDK's options for ``agent``'s session on ``node`` (see :meth:`ClaudeAgent.sdk_options`)."""
    options = agent.options
    return ClaudeAgentOptions(
        model=options.model,
        permission_mode=_PERMISSION_MODES[options.permission],
        env={**options.env, "CLAUDE_CONFIG_DIR": config_dir(node)},
        cwd=options.cwd,
        cli_path=agent.cli_on(node),
        max_turns=options.max_turns,
        allowed_tools=list(options.allowed_tools),
        disallowed_tools=list(options.disallowed_tools),
        system_prompt=options.system_prompt,
        mcp_servers=cast(Any, dict(options.mcp_servers)),
        output_format=(
            {"type": "json_schema", "schema": options.output_schema} if options.output_schema else None
        ),
        resume=resume,
        # A store makes the CLI mirror its transcript; the frames reach the archive.
        session_store=cast(SessionStore, _ArchiveStore(archive)) if archive is not None else None,
    )


class ClaudeSession(AgentSession):
    """A ``ClaudeSDKClient`` on the node; the CLI starts with the first turn and serves
    every turn after it."""

    def __init__(
        self,
        agent: ClaudeAgent,
        node: NodeHandle,
        resume: str | None,
        archive: SessionArchive | None,
        keep: KeepOptions | None = None,
    ) -> None:
        self.session_id = resume
        self._agent = agent
        self._options = sdk_options(agent, node, resume=resume, archive=archive)
        mirror = _Mirror(archive, f"{config_dir(node)}/projects") if archive is not None else None
        self._transport = NodeTransport.for_node(node, self._options, transcripts=mirror, keep=keep)
        self._schema = agent.options.output_schema
        self._quiet_limit = agent.options.no_output_timeout
        self._client: ClaudeSDKClient | None = None

    async def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        blocks = self._agent.prepare_prompt(prompt)
        client = await self._connected()
        if any(isinstance(block, ImageBlock) for block in blocks):
            await client.query(_user_message(blocks))
        else:
            await client.query(prompt_text(blocks))
        async for message in self._relay(client, 0):
            yield message

    async def follow(self, keeper: str, skip: int) -> AsyncIterator[Message]:
        """The SDK's session is rebuilt on the kept CLI's output from its start; its
        ``initialize`` is answered from there, never sent to the CLI again."""
        if self._client is not None:
            raise ConfigError("follow() re-attaches a session that has not started")
        self._transport.reattach_to(keeper)
        async for message in self._relay(await self._connected(), skip):
            yield message

    async def _connected(self) -> ClaudeSDKClient:
        if self._client is None:
            client = ClaudeSDKClient(options=self._options, transport=self._transport)
            await client.connect()
            self._client = client
            process = self._transport.process
            self.keeper = process.keeper if isinstance(process, KeptProcess) else None
        return self._client

    async def _relay(self, client: ClaudeSDKClient, skip: int) -> AsyncIterator[Message]:
        """The turn's messages, less the first ``skip``, to its result."""
        async for converted in quiet_bounded(self._converted(client), self._quiet_limit, "claude"):
            message = converted
            if isinstance(message, Result) and self._schema is not None:
                message = check_structured(message, self._schema, message.structured)
            said = getattr(message, "session_id", None)
            if said:
                self.session_id = said
            if skip:
                skip -= 1
                continue
            yield message

    @staticmethod
    async def _converted(client: ClaudeSDKClient) -> AsyncIterator[Message]:
        """The turn's messages to its result, converted from the CLI's own JSON: the SDK's
        client would make its classes of each (``receive_response``), for nothing."""
        # A private SDK part, pinned by the version range in pyproject.toml and covered by tests.
        query = client._query
        if query is None:
            raise AgentError("the agent's session is not connected")
        async for raw in query.receive_messages():
            for message in convert(raw):
                yield message
            if raw.get("type") == "result":
                return

    async def interrupt(self) -> None:
        if self._client is not None:
            await self._client.interrupt()

    async def detach(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._transport.detach()
            await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            client, self._client = self._client, None
            if client is not None:
                with suppress(Exception):  # the abort is what counts: nothing to report
                    await client.disconnect()
            await self._transport.close()  # idempotent; a disconnect that failed may have left it open


async def _user_message(blocks: Sequence[Block]) -> AsyncIterator[dict[str, Any]]:
    """The prompt as the SDK sends content blocks: one stream-json user message whose
    content is Messages API blocks (an image as base64 with its media type)."""
    content = [
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": block.media_type,
                "data": base64.b64encode(block.data).decode(),
            },
        }
        if isinstance(block, ImageBlock)
        else {"type": "text", "text": block.text}
        for block in blocks
    ]
    yield {"type": "user", "message": {"role": "user", "content": content}, "parent_tool_use_id": None}


class _Mirror:
    """The CLI's transcript frames, off the bridge, into the archive."""

    def __init__(self, archive: SessionArchive, projects_dir: str) -> None:
        self._archive = archive
        self._projects_dir = projects_dir
        self._keys: dict[str, StateKey | None] = {}  # a session writes a handful of files

    def add(self, file_path: str, entries: list[dict[str, Any]]) -> None:
        if file_path not in self._keys:
            self._keys[file_path] = file_path_to_session_key(file_path, self._projects_dir)
        key = self._keys[file_path]
        if key is None:
            logger.warning("dropping a transcript frame of %s: not under %s", file_path, self._projects_dir)
        elif entries:
            self._archive.add(key, entries, summarize=fold_summary)

    async def flush(self) -> None:
        await self._archive.flush()


class _ArchiveStore:
    """The SDK's ``SessionStore`` over an archive, as far as a custom transport uses one (append
    and load): its presence makes the CLI mirror its transcript, and the bridge takes the
    frames before the SDK sees them."""

    def __init__(self, archive: SessionArchive) -> None:
        self._archive = archive

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        self._archive.add(key, cast(list[dict[str, Any]], entries), summarize=fold_summary)
        await self._archive.flush()

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        return cast(list[SessionStoreEntry] | None, await self._archive.load(key))
