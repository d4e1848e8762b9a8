"""OpenCode's ``opencode run --format json`` events, converted into the one message model (the
table in :mod:`nodeprov.agents.opencode`)."""

from __future__ import annotations

from typing import Any

from ...errors import AgentOutputError
from ..messages import AgentText, ErrorMessage, Message, Notice, Result, Thinking, ToolResult, ToolUse
from ..per_turn import parse_event

__all__ = ["Converter", "parse"]


def parse(line: bytes) -> dict[str, Any] | None:
    """One event of a line of OpenCode's output (see :func:`~nodeprov.agents.per_turn.parse_event`)."""
    return parse_event(line, "opencode")


class Converter:
    """One turn's events to messages. OpenCode says nothing when its turn ends (the process
    exits): :meth:`result` makes the turn's :class:`Result` from what it said."""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id
        self.step_open = False  # between step_start and step_finish: the model has answered
        self.failure = ""  # OpenCode says nothing of its model's failures while it retries
        self.last_text = ""
        self.errors: list[str] = []
        self._said_session = False
        self._steps = 0
        self._last_raw: dict[str, Any] | None = None
        self._tokens = {
            "input": 0,
            "output": 0,
            "reasoning": 0,
            "cache_read": 0,
            "cache_write": 0,
            "total": 0,
        }
        self._cost = 0.0

    @property
    def waiting_on_model(self) -> bool:
        """Outside a step: a step starts once the model answers, and OpenCode says nothing of
        a tool until it is over, so the silence inside one may be a running tool."""
        return not self.step_open

    def convert(self, event: dict[str, Any] | None) -> list[Message]:  # noqa: PLR0911 - one per kind
        if event is None:
            return []
        messages: list[Message] = []
        session = event.get("sessionID")
        if isinstance(session, str) and session and not self._said_session:
            self._said_session = True
            self.session_id = session
            messages.append(Notice("session", session_id=session, raw=event))
        kind, part = event.get("type"), event.get("part")
        if kind == "error":
            self.step_open = False
            said = _error_text(event.get("error"))
            self.errors.append(said)
            self._last_raw = event
            return [*messages, ErrorMessage(said, raw=event)]
        if kind not in ("step_start", "step_finish", "text", "reasoning", "tool_use"):
            return [*messages, Notice(str(kind), raw=event)]
        if not isinstance(part, dict):
            raise AgentOutputError(f"opencode {kind} event without a part: {str(event)[:200]}")
        if kind == "step_start":
            self.step_open = True
            return [*messages, Notice("step_start", raw=event)]
        if kind == "step_finish":
            self.step_open = False
            self._finish(part)
            self._last_raw = event
            return [*messages, Notice("step_finish", str(part.get("reason") or ""), raw=event)]
        if kind == "text":
            self.last_text = str(part.get("text") or "")
            return [*messages, AgentText(self.last_text, raw=event)]
        if kind == "reasoning":
            return [*messages, Thinking(str(part.get("text") or ""), raw=event)]
        return [*messages, *_tool(part, event)]

    def _finish(self, part: dict[str, Any]) -> None:
        self._steps += 1
        tokens = _object(part.get("tokens"))
        cache = _object(tokens.get("cache"))
        counts = {**tokens, "cache_read": cache.get("read"), "cache_write": cache.get("write")}
        for name in self._tokens:
            value = counts.get(name)
            self._tokens[name] += value if isinstance(value, int) else 0
        cost = part.get("cost")
        self._cost += cost if isinstance(cost, int | float) else 0.0

    def result(self, exit_code: int | None) -> Result | None:
        """The turn's result once OpenCode exited with ``exit_code``: an error result if it
        reported an error, else a successful one if it exited 0 after finishing a step; None
        for a turn it did not finish."""
        if self.errors:
            return Result(True, "\n".join(self.errors), session_id=self.session_id, raw=self._last_raw)
        if exit_code != 0 or not self._steps:
            return None
        usage = {f"{name}_tokens": count for name, count in self._tokens.items()}
        return Result(
            False,
            self.last_text,
            session_id=self.session_id,
            usage=usage,
            cost_usd=self._cost or None,  # 0 for a model without prices (a custom endpoint's)
            raw=self._last_raw,
        )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_text(error: Any) -> str:
    """What an ``error`` event says: its ``data.message``, else its name."""
    if not isinstance(error, dict):
        return str(error or "opencode reported an error")
    data = error.get("data")
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(error.get("name") or "opencode reported an error")


def _tool(part: dict[str, Any], event: dict[str, Any]) -> list[Message]:
    """A ``tool_use`` event (OpenCode says a tool call only once it is over): its call and
    its result. A shell command failed if it exited non-zero; a call of a tool OpenCode does
    not offer (one the permission denies) is its ``invalid`` tool, an error."""
    state = _object(part.get("state"))
    call_id = str(part.get("callID") or part.get("id") or "")
    name = str(part.get("tool") or "")
    arguments = state.get("input")
    if state.get("status") == "error":
        output, failed = str(state.get("error") or ""), True
    else:
        metadata = _object(state.get("metadata"))
        output = str(state.get("output") or "")
        failed = name == "invalid" or metadata.get("exit") not in (0, None)
    return [
        ToolUse(call_id, name, arguments if isinstance(arguments, dict) else {}, raw=event),
        ToolResult(call_id, output, failed, raw=event),
    ]
