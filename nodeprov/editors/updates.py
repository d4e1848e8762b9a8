"""What an editor is told of a run, and what it asks: nodeprov's messages as ACP
``session/update``s, a run's events as the history a ``session/load`` replays, and an ACP
prompt's content blocks as a nodeprov prompt.

Every agent's messages are told the same way (the one message model); where the agent on
the node speaks ACP itself, what it said of a tool call (its title, kind, locations, content)
or of its plan is passed on as it said it.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from ..agents import AgentText, Message, Notice, Thinking, ToolResult, ToolUse
from ..errors import ConfigError
from ..prompts import Block, ImageBlock, Prompt, TextBlock
from ..runs import AgentMessage, RunEvent, RunStarted

__all__ = ["history_updates", "prompt_of", "updates_of"]

_TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
)


def updates_of(message: Message) -> list[dict[str, Any]]:
    """The ``session/update`` payloads (``update``) that tell ``message``; none for what an
    editor has no place for (notices but a plan; the result, which the prompt's answer is)."""
    said = _acp(message.raw)
    if isinstance(message, AgentText):
        return [_chunk("agent_message_chunk", message.text)]
    if isinstance(message, Thinking):
        return [_chunk("agent_thought_chunk", message.text)]
    if isinstance(message, ToolUse):
        kind = said.get("kind")
        update = {
            "sessionUpdate": "tool_call",
            "toolCallId": message.id,
            "title": str(said.get("title") or message.name),
            "kind": kind if kind in _TOOL_KINDS else "other",
            "status": "in_progress",
            "rawInput": dict(message.input),
        }
        if isinstance(locations := said.get("locations"), list) and locations:
            update["locations"] = locations
        return [update]
    if isinstance(message, ToolResult):
        content = said.get("content")
        if not isinstance(content, list) or not content:
            content = [_text_content(message.output)] if message.output else []
        update = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": message.tool_use_id,
            "status": "failed" if message.is_error else "completed",
        }
        return [{**update, "content": content} if content else update]
    if isinstance(message, Notice) and said.get("sessionUpdate") == "plan":
        return [{"sessionUpdate": "plan", "entries": said.get("entries") or []}]
    return []


def history_updates(event: RunEvent) -> list[dict[str, Any]]:
    """What a ``session/load`` replays of ``event``: each turn's prompt as the user's, each
    message as it was told."""
    if isinstance(event, RunStarted):
        return [_chunk("user_message_chunk", event.prompt)] if event.prompt else []
    if isinstance(event, AgentMessage):
        return updates_of(event.message)
    return []


def prompt_of(blocks: Any) -> Prompt:
    """The prompt an ACP ``session/prompt`` gives as ``blocks``: text, images, embedded
    resources (their text, under their URI) and resource links (their name and URI).

    Raises:
        ConfigError: ``blocks`` is not a list of content blocks, an image's data is not
            base64 of an image, or a block is of a type not taken (audio; a binary resource
            that is no image).
    """
    if not isinstance(blocks, list) or not blocks:
        raise ConfigError("a prompt is a non-empty list of content blocks")
    made: list[Block] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            made.append(TextBlock(str(block.get("text", ""))))
        elif kind == "image":
            made.append(_image(block.get("data")))
        elif kind == "resource" and isinstance(resource := block.get("resource"), Mapping):
            made.append(_resource(resource))
        elif kind == "resource_link":
            made.append(TextBlock(f"{block.get('name') or block.get('uri')}: {block.get('uri')}"))
        else:
            raise ConfigError(f"a prompt's content block of type {kind!r} is not taken")
    return _joined(made)


def _resource(resource: Mapping[str, Any]) -> Block:
    uri = str(resource.get("uri", ""))
    if "text" in resource:
        return TextBlock(f"{uri}:\n{resource['text']}")
    if str(resource.get("mimeType", "")).startswith("image/"):
        return _image(resource.get("blob"))
    raise ConfigError(f"the binary resource {uri} is not an image: it is not taken")


def _image(data: Any) -> ImageBlock:
    try:
        raw = base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("an image's data is not base64") from None
    return ImageBlock.from_bytes(raw)


def _joined(blocks: Sequence[Block]) -> Prompt:
    """Text alone as one string (as a prompt typed in full); else the blocks, consecutive
    texts joined."""
    joined: list[Block] = []
    for block in blocks:
        if isinstance(block, TextBlock) and joined and isinstance(joined[-1], TextBlock):
            joined[-1] = TextBlock(f"{joined[-1].text}\n\n{block.text}")
        else:
            joined.append(block)
    if len(joined) == 1 and isinstance(joined[0], TextBlock):
        return joined[0].text
    return joined


def _acp(raw: Any) -> Mapping[str, Any]:
    """What an agent speaking ACP said of a message (its update), else nothing."""
    return raw if isinstance(raw, Mapping) and "sessionUpdate" in raw else {}


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def _text_content(text: str) -> dict[str, Any]:
    return {"type": "content", "content": {"type": "text", "text": text}}
