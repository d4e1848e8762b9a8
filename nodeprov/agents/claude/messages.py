"""The Claude Code CLI's stream-json messages, as they come off the wire, in the one message
model (no SDK import: the CLI's own JSON is converted, not the SDK's classes made of it).

Each converted message keeps the CLI's message, the very dict read off the wire, in ``raw``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .. import AgentText, ErrorMessage, Message, Notice, Result, Thinking, ToolResult, ToolUse

__all__ = ["convert"]

logger = logging.getLogger("nodeprov.agents.claude")


def convert(message: dict[str, Any]) -> list[Message]:
    """The unified messages of one stream-json message of the CLI (as the SDK's
    ``receive_messages`` yields it, control messages already taken out).

    - ``assistant``: one :class:`AgentText`, :class:`Thinking` or :class:`ToolUse` per text,
      thinking or tool-use block (other blocks, a server tool's call, are in ``raw`` only),
      and an :class:`ErrorMessage` when the message carries an ``error``.
    - ``user``: a :class:`ToolResult` per tool-result block, else a :class:`Notice` ``user``.
    - ``result``: a :class:`Result`.
    - ``system``: a :class:`Notice` named by its ``subtype``; ``init`` carries the session id,
      ``api_retry`` is a retry and says how the model API failed.
    - any other type the SDK knows (``stream_event``, ``rate_limit_event``, ...): a
      :class:`Notice` named by the type, as is an ``assistant`` or ``user`` message without
      its ``message``. A type the SDK does not know is skipped, as the SDK does. Never raises.
    """
    kind = message.get("type")
    body = message.get("message")
    if kind == "assistant" and isinstance(body, dict) and isinstance(body.get("content"), list):
        return _assistant(message, body["content"])
    if kind == "user" and isinstance(body, dict):
        return _user(message, body.get("content"))
    if kind == "result":
        return [_result(message)]
    if kind == "system":
        return [_system(message)]
    if kind in _OTHER_KINDS:
        return [Notice(str(kind), raw=message)]
    logger.debug("skipping a message of an unknown type: %.40s", kind)
    return []


# Kinds the SDK's parser knows (claude_agent_sdk 0.2) that are said as a notice of their type:
# an assistant or user message only when it has no message to convert.
_OTHER_KINDS = frozenset({"assistant", "user", "stream_event", "rate_limit_event", "conversation_reset"})


def _assistant(message: dict[str, Any], content: list[Any]) -> list[Message]:
    converted: list[Message] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            converted.append(AgentText(str(block.get("text", "")), raw=message))
        elif kind == "thinking":
            converted.append(Thinking(str(block.get("thinking", "")), raw=message))
        elif kind == "tool_use":
            name, tool_id = str(block.get("name", "")), str(block.get("id", ""))
            converted.append(ToolUse(tool_id, name, block.get("input") or {}, raw=message))
    if error := message.get("error"):
        converted.append(ErrorMessage(str(error), raw=message))
    return converted


def _user(message: dict[str, Any], content: Any) -> list[Message]:
    if isinstance(content, str):
        return [Notice("user", content, raw=message)]
    converted: list[Message] = []
    for block in content if isinstance(content, list) else ():
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            tool_id, output = str(block.get("tool_use_id", "")), _text(block.get("content"))
            converted.append(ToolResult(tool_id, output, bool(block.get("is_error")), raw=message))
        elif kind in ("text", "tool_use"):
            converted.append(Notice("user", str(block.get("text", "")), raw=message))
    return converted


def _result(message: dict[str, Any]) -> Result:
    is_error = bool(message.get("is_error"))
    errors = message.get("errors") or []
    text = message.get("result") or "; ".join(str(error) for error in errors)
    return Result(
        is_error,
        text or ("" if not is_error else f"the agent ended with {message.get('subtype')}"),
        session_id=message.get("session_id"),
        usage=message.get("usage"),
        cost_usd=message.get("total_cost_usd"),
        structured=message.get("structured_output"),
        raw=message,
    )


def _system(message: dict[str, Any]) -> Notice:
    subtype = str(message.get("subtype") or "system")
    if subtype == "api_retry":
        return Notice("api_retry", _retry_failure(message), retry=True, raw=message)
    session = message.get("session_id") if subtype == "init" else None
    return Notice(subtype, str(message.get("cwd") or ""), session_id=session, raw=message)


def _retry_failure(data: dict[str, Any]) -> str:
    """How the model API failed, from a CLI ``api_retry`` notice."""
    status, error = data.get("error_status"), data.get("error")
    said = "" if error in (None, "", "unknown") else f": {error}"
    if status:
        return f"HTTP {status}{said}"
    return said[2:] or "no response (connection refused, reset or timed out)"


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [item.get("text", "") if isinstance(item, dict) else str(item) for item in content]
    return "\n".join(part for part in parts if part) or json.dumps(content)
