"""One message model for every agent.

An agent's own output (the Claude Code CLI's stream-json messages, the Codex CLI's JSONL
events, OpenCode's JSON events) is converted into these, one or more per agent message;
each keeps the agent's message in ``raw``, as the agent wrote it (JSON values), so nothing
the agent said is lost. Run events, the
CLI's ``--json`` output and its rendering use them.

:func:`message_to_json` and :func:`message_from_json` are their stored form:
``{"kind": "text", ...fields, "raw": {...}}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "AgentText",
    "ErrorMessage",
    "Message",
    "Notice",
    "Result",
    "Thinking",
    "ToolResult",
    "ToolUse",
    "json_value",
    "message_from_json",
    "message_to_json",
]


@dataclass(frozen=True)
class Message:
    """Base of every message. ``raw`` is the agent's own message, as JSON values."""

    kind: ClassVar[str] = "message"
    raw: Any = field(default=None, kw_only=True, repr=False, compare=False)


@dataclass(frozen=True)
class AgentText(Message):
    """Text the agent said to the user."""

    kind: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True)
class Thinking(Message):
    """The agent's reasoning, as far as the agent shows it."""

    kind: ClassVar[str] = "thinking"
    text: str


@dataclass(frozen=True)
class ToolUse(Message):
    """The agent calls a tool: ``name`` with ``input``. A shell command has ``name``
    ``"Bash"`` (Claude), ``"command_execution"`` (Codex) or ``"bash"`` (OpenCode) and
    ``input["command"]``."""

    kind: ClassVar[str] = "tool_use"
    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class ToolResult(Message):
    """What the tool call ``tool_use_id`` returned."""

    kind: ClassVar[str] = "tool_result"
    tool_use_id: str
    output: str
    is_error: bool = False


@dataclass(frozen=True)
class Result(Message):
    """The end of a turn. ``is_error`` says whether it failed (``text`` then says why).

    ``usage`` holds token counts as the agent reports them (``input_tokens``,
    ``output_tokens``, ...); ``cost_usd`` is set where the agent knows it (Claude).
    ``structured`` is the parsed value when the run asked for an output schema.
    """

    kind: ClassVar[str] = "result"
    is_error: bool
    text: str = ""
    session_id: str | None = None
    usage: Mapping[str, Any] | None = None
    cost_usd: float | None = None
    structured: Any = None


@dataclass(frozen=True)
class ErrorMessage(Message):
    """An error the agent reported; the turn may go on (a failed item) or end after it."""

    kind: ClassVar[str] = "error"
    message: str


@dataclass(frozen=True)
class Notice(Message):
    """Anything else the agent says about itself: its session started (``session_id``
    set), a status change, a model API retry (``retry``: not progress of the task)."""

    kind: ClassVar[str] = "notice"
    subtype: str
    text: str = ""
    session_id: str | None = None
    retry: bool = False


_KINDS: dict[str, type[Message]] = {
    cls.kind: cls for cls in (AgentText, Thinking, ToolUse, ToolResult, Result, ErrorMessage, Notice)
}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _KINDS.values()}


def message_to_json(message: Message) -> dict[str, Any]:
    """``message`` as JSON values: ``{"kind": ..., fields..., "raw": ...}``."""
    return {"kind": message.kind, **{name: getattr(message, name) for name in _FIELDS[type(message)]}}


def message_from_json(body: Mapping[str, Any]) -> Message:
    """The message whose :func:`message_to_json` is ``body``.

    Raises:
        ValueError: ``body`` is not a message of a known kind.
    """
    cls = _KINDS.get(str(body.get("kind")))
    if cls is None:
        raise ValueError(f"not an agent message: {body.get('kind')!r}")
    try:
        return cls(**{name: body[name] for name in _FIELDS[cls] if name in body})
    except TypeError as error:
        raise ValueError(f"malformed {cls.kind} message: {error}") from None


_DATACLASS_FIELDS: dict[type, tuple[str, ...] | None] = {}  # a type's fields, None if not a dataclass


def json_value(value: Any) -> Any:  # noqa: PLR0911 - one return per shape
    """``value`` as JSON values: a dataclass (an SDK message, say) becomes a dict with its
    class name under ``kind``; anything else unknown, its ``repr``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is list:
        return [json_value(v) for v in value]
    if type(value) is dict:
        return {str(k): json_value(v) for k, v in value.items()}
    cls = type(value)
    names = _DATACLASS_FIELDS.get(cls, ())
    if names == ():
        is_dataclass = dataclasses.is_dataclass(cls)
        names = _DATACLASS_FIELDS[cls] = (
            tuple(f.name for f in dataclasses.fields(cls)) if is_dataclass else None
        )
    if names is not None:
        return {"kind": cls.__name__, **{name: json_value(getattr(value, name)) for name in names}}
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value if isinstance(value, (str, int, float, bool)) else repr(value)
