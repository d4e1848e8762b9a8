"""An ACP session's ``session/update`` notifications as nodeprov's messages.

An agent streams its text and its thoughts in chunks; a run of chunks of one kind is one
:class:`AgentText` or :class:`Thinking`, given once another kind of update comes or the turn
ends (:meth:`Turn.flush`). A tool call is a :class:`ToolUse` once it leaves ``pending``
(agents fill in its input by ``tool_call_update`` before it runs: OpenCode's command comes
so), with the title and input the updates gave it; the update that completes or fails it
(or the ``tool_call`` itself, when it comes finished) is its :class:`ToolResult`. A ``plan``
is a :class:`Notice` (``plan``) listing its entries; a ``usage_update`` is kept for the
:class:`Result`. What a client need not show (the commands the agent offers, its config
options, an echo of the user's prompt) gives nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..messages import AgentText, Message, Notice, Result, Thinking, ToolResult, ToolUse

__all__ = ["Turn"]

_CHUNKS = {"agent_message_chunk": AgentText, "agent_thought_chunk": Thinking}
_FINISHED = {"completed": False, "failed": True}  # a tool call's final status: whether it failed
_STOPPED_WELL = {"end_turn"}


_SHOWN: dict[str, Callable[[Mapping[str, Any]], str]] = {  # a block that is not text, as text
    "diff": lambda block: f"(edited {block.get('path', '?')})",
    "resource_link": lambda block: str(block.get("uri", "")),
    "image": lambda block: "(an image)",
}


def _text(content: Any) -> str:
    """The text of a content block, or of a list of them (a tool call's content: blocks
    wrapped as ``{"type": "content", "content": block}``, and diffs)."""
    if isinstance(content, list):
        return "\n".join(text for item in content if (text := _text(item)))
    if not isinstance(content, Mapping):
        return ""
    kind = content.get("type")
    if kind == "text":
        return str(content.get("text", ""))
    if kind == "content":
        return _text(content.get("content"))
    show = _SHOWN.get(str(kind))
    return show(content) if show is not None else ""


class Turn:
    """The messages of one prompt's turn, update by update."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._kind: str | None = None  # the kind of the run of chunks under way
        self._chunks: list[str] = []
        self._last_text = ""
        self._usage: dict[str, Any] | None = None
        self._calls: dict[str, dict[str, Any]] = {}  # tool calls pending: what was said of them
        self._finished: set[str] = set()  # tool calls whose result was given
        self._running: set[str] = set()

    @property
    def tools_running(self) -> bool:
        """Whether a tool call has started and not finished: the agent waits on its tool, not
        its model."""
        return bool(self._running)

    def take(self, update: Mapping[str, Any]) -> list[Message]:
        """The messages ``update`` (a ``session/update``'s ``update``) completes."""
        kind = str(update.get("sessionUpdate", ""))
        if kind in _CHUNKS:
            done = self.flush() if kind != self._kind else []
            self._kind = kind
            self._chunks.append(_text(update.get("content")))
            return done
        done = self.flush()
        if kind in ("tool_call", "tool_call_update"):
            done.extend(self._tool(str(update.get("toolCallId", "")), update))
        elif kind == "plan":
            entries = update.get("entries") or []
            lines = [f"[{entry.get('status', '?')}] {entry.get('content', '')}" for entry in entries]
            done.append(Notice("plan", "\n".join(lines), session_id=self.session_id, raw=update))
        elif kind == "usage_update":
            self._usage = {key: value for key, value in update.items() if key != "sessionUpdate"}
        return done

    def _tool(self, call: str, update: Mapping[str, Any]) -> list[Message]:
        """A tool call's use, once it is no longer pending, and its result once it is over."""
        if call in self._finished or call in self._running:
            return self._result(call, update)
        said = self._calls.setdefault(call, {})
        said.update({key: value for key, value in update.items() if value is not None})
        if update.get("status", "pending") == "pending":
            return []
        del self._calls[call]
        self._running.add(call)
        name = str(said.get("title") or said.get("kind") or "tool")
        raw_input = said.get("rawInput")
        use = ToolUse(call, name, raw_input if isinstance(raw_input, Mapping) else {}, raw=said)
        return [use, *self._result(call, update)]

    def _result(self, call: str, update: Mapping[str, Any]) -> list[Message]:
        failed = _FINISHED.get(str(update.get("status")))
        if failed is None or call in self._finished:
            return []
        self._finished.add(call)
        self._running.discard(call)
        output = _text(update.get("content"))
        if not output and (raw_output := update.get("rawOutput")) is not None:
            output = raw_output if isinstance(raw_output, str) else str(raw_output)
        return [ToolResult(call, output, is_error=failed, raw=update)]

    def flush(self) -> list[Message]:
        """The run of chunks under way, whole (nothing if there is none)."""
        kind, text = self._kind, "".join(self._chunks)
        self._kind, self._chunks = None, []
        if kind is None:
            return []
        if kind == "agent_message_chunk":
            self._last_text = text
        # The run of chunks as one update of its kind: what the agent said, whole.
        return [_CHUNKS[kind](text, raw={"sessionUpdate": kind, "content": {"type": "text", "text": text}})]

    def result(self, answer: Mapping[str, Any]) -> Result:
        """The turn's :class:`Result` from the prompt's answer (call :meth:`flush` first):
        an error unless the agent stopped at the end of its turn."""
        reason = str(answer.get("stopReason", ""))
        failed = reason not in _STOPPED_WELL
        text = f"the agent stopped: {reason}" if failed else self._last_text
        return Result(failed, text, self.session_id, usage=self._usage, raw=dict(answer))
