"""A ``claude`` session: the Claude Code CLI on a node, driven over its stream-json control
protocol directly (no SDK: importing it took most of a second, before the agent could
start; :mod:`~nodeprov.agents.claude.sdk_parity` does what the SDK did around the CLI, and
is pinned to it by tests).

The protocol, as the SDK speaks it: each line on the CLI's stdin is a JSON object, either a
``user`` message (a turn's prompt) or a ``control_request`` (``initialize``, sent once as the
CLI starts; ``interrupt``); the CLI answers each request with a ``control_response`` naming
its ``request_id``, and sends requests of its own (permission prompts, hooks, SDK MCP
servers), which this session, having registered none, answers with an error."""

from __future__ import annotations

import base64
import json
import logging
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import suppress
from typing import Any

from ...errors import AgentError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, KeptProcess
from ...prompts import Block, ImageBlock, Prompt, prompt_text
from .. import AgentSession, Message, Result, SessionArchive, StateKey
from .._quiet import quiet_bounded
from ..structured import check_structured
from .agent import ClaudeAgent, config_dir
from .channel import CliChannel
from .messages import convert
from .sdk_parity import cli_argv, cli_environment, fold_summary, session_key

__all__ = ["ClaudeSession"]

logger = logging.getLogger("nodeprov.agents.claude")


class ClaudeSession(AgentSession):
    """The CLI on the node: it starts with the first turn and serves every turn after it."""

    def __init__(
        self,
        agent: ClaudeAgent,
        node: NodeHandle,
        resume: str | None,
        archive: SessionArchive | None,
        keep: KeepOptions | None = None,
    ) -> None:
        self.session_id = resume
        options = agent.options
        self._agent = agent
        home = config_dir(node)
        self._argv = cli_argv(
            agent.cli_on(node),
            model=options.model,
            permission=options.permission,
            max_turns=options.max_turns,
            allowed_tools=options.allowed_tools,
            disallowed_tools=options.disallowed_tools,
            system_prompt=options.system_prompt,
            mcp_servers=options.mcp_servers,
            output_schema=options.output_schema,
            resume=resume,
            mirror=archive is not None,
        )
        self._env = cli_environment({**options.env, "CLAUDE_CONFIG_DIR": home}, options.cwd)
        self._cwd = options.cwd
        mirror = _Mirror(archive, f"{home}/projects") if archive is not None else None
        self._channel = CliChannel(node.spawn, node=node, home=home, keep=keep, transcripts=mirror)
        self._messages: AsyncGenerator[dict[str, Any], None] | None = None
        self._initialize_id = ""
        self._schema = options.output_schema
        self._quiet_limit = options.no_output_timeout

    async def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        blocks = self._agent.prepare_prompt(prompt)
        messages = await self._started()
        await self._channel.write(_line(_user_message(blocks)))
        async for message in self._relay(messages, 0):
            yield message

    async def follow(self, keeper: str, skip: int) -> AsyncIterator[Message]:
        """The kept CLI's output is read from its start: the answer to its ``initialize`` is
        there, and the turn's messages, the first ``skip`` of which were relayed already."""
        if self._messages is not None:
            raise AgentError("follow() re-attaches a session that has not started")
        await self._channel.reattach(keeper)
        self._messages = self._channel.messages()
        self.keeper = keeper
        async for message in self._relay(self._messages, skip):
            yield message

    async def _started(self) -> AsyncGenerator[dict[str, Any], None]:
        """The CLI's messages, the CLI started (and asked to ``initialize``) on first use."""
        if self._messages is None:
            await self._channel.start(self._argv, self._env, self._cwd)
            process = self._channel.process
            self.keeper = process.keeper if isinstance(process, KeptProcess) else None
            self._messages = self._channel.messages()
            # Its answer comes before the turn's messages (the CLI reads its stdin in order).
            self._initialize_id = await self._request("initialize", owed=True, hooks=None)
        return self._messages

    async def _request(self, subtype: str, *, owed: bool = False, **fields: Any) -> str:
        """Send a control request; ``owed``: the CLI must answer it before it exits (owed
        before the write: a CLI that is gone by then has left it unanswered)."""
        request_id = f"req_{secrets.token_hex(6)}"
        if owed:
            self._channel.expect_answer(request_id, subtype)
        asked = {"subtype": subtype, **fields}
        request = {"type": "control_request", "request_id": request_id, "request": asked}
        await self._channel.write(_line(request))
        return request_id

    async def _relay(self, messages: AsyncIterator[dict[str, Any]], skip: int) -> AsyncIterator[Message]:
        """The turn's messages, less the first ``skip``, to its result."""
        async for converted in quiet_bounded(self._converted(messages), self._quiet_limit, "claude"):
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

    async def _converted(self, messages: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Message]:
        """The turn's messages to its result, converted from the CLI's own JSON; the control
        protocol's are answered or checked here."""
        async for raw in messages:
            kind = raw.get("type")
            if kind == "control_response":
                self._check_answer(raw.get("response") or {})
                continue
            if kind == "control_request":
                await self._refuse(raw)
                continue
            if kind == "control_cancel_request" or _for_the_sdk_alone(raw):
                continue
            for message in convert(raw):
                yield message
            if kind == "result":
                return

    def _check_answer(self, response: dict[str, Any]) -> None:
        """A refused ``initialize`` ends the session; a refused interrupt (one that came as
        the turn ended, say) is only logged: an interrupt may not be honoured."""
        if response.get("subtype") != "error":
            return
        if response.get("request_id") == self._initialize_id:
            raise self._channel.fail(AgentError(f"the agent refused to initialize: {response.get('error')}"))
        logger.info("the agent refused a request: %s", response.get("error"))

    async def _refuse(self, request: dict[str, Any]) -> None:
        """Answer a request of the CLI's: this session registered nothing it could ask for."""
        subtype = (request.get("request") or {}).get("subtype")
        logger.debug("refusing the agent's %s request", subtype)
        response = {"subtype": "error", "request_id": request.get("request_id"), "error": f"no {subtype}"}
        await self._channel.write(_line({"type": "control_response", "response": response}))

    async def interrupt(self) -> None:
        """Ask the CLI to end its turn; it answers, and the turn ends with a result."""
        if self._messages is not None and self._channel.connected:
            await self._request("interrupt")

    async def detach(self) -> None:
        await self._channel.detach()
        await self.aclose()

    async def aclose(self) -> None:
        await self._channel.close()  # idempotent, shielded and bounded
        messages, self._messages = self._messages, None
        if messages is not None:
            with suppress(RuntimeError):  # a reader in another task still holds it: it ends there
                await messages.aclose()


def _for_the_sdk_alone(message: dict[str, Any]) -> bool:
    """A session-state frame the CLI sends only because the environment the SDK sets asks."""
    kind, subtype = message.get("type"), message.get("subtype")
    return kind == "system" and subtype == "session_state_changed" and message.get("sdk_host_only") is True


def _line(message: dict[str, Any]) -> str:
    return json.dumps(message) + "\n"


def _user_message(blocks: Sequence[Block]) -> dict[str, Any]:
    """The prompt as the SDK sends it: a user message whose content is the text, or, with an
    image, Messages API blocks (an image as base64 with its media type)."""
    content: str | list[dict[str, Any]]
    if not any(isinstance(block, ImageBlock) for block in blocks):
        content = prompt_text(blocks)
    else:
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
    message = {"role": "user", "content": content}
    return {"type": "user", "message": message, "parent_tool_use_id": None, "session_id": "default"}


class _Mirror:
    """The CLI's transcript frames, off the bridge, into the archive."""

    def __init__(self, archive: SessionArchive, projects_dir: str) -> None:
        self._archive = archive
        self._projects_dir = projects_dir
        self._keys: dict[str, StateKey | None] = {}  # a session writes a handful of files

    def add(self, file_path: str, entries: list[dict[str, Any]]) -> None:
        if file_path not in self._keys:
            self._keys[file_path] = session_key(file_path, self._projects_dir)
        key = self._keys[file_path]
        if key is None:
            logger.warning("dropping a transcript frame of %s: not under %s", file_path, self._projects_dir)
        elif entries:
            self._archive.add(key, entries, summarize=fold_summary)

    async def flush(self) -> None:
        await self._archive.flush()
