"""A scripted Anthropic Messages API server on 127.0.0.1: the Claude Code CLI runs offline
against it, without a model or a key (tests, and ``nodeprov run --model scripted``).

The Claude Code CLI streams ``POST /v1/messages`` and reads server-sent events. This server
answers each *agent* request (one that carries ``tools``, which the CLI's main loop always
does) with the next :class:`Turn` of a script; auxiliary requests the CLI makes on its own
(titles, quota probes, token counts) get a short fixed reply and do not consume the script.
Every request is recorded, so a test can assert what the model was sent.

Point the CLI at it with :meth:`ScriptedModel.agent_env`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._server import ScriptedServer, ScriptHandler, ScriptState, Stall

__all__ = ["RecordedRequest", "ScriptedModel", "Stall", "Text", "ToolUse", "Turn"]


@dataclass(frozen=True)
class Text:
    """An assistant turn that answers with ``text`` and ends the agent's turn."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """An assistant turn that asks the agent to run tool ``name`` with ``input``.

    For the Bash tool: ``ToolUse("Bash", {"command": "echo hi > out.txt"})``.
    """

    name: str
    input: Mapping[str, Any]
    text: str = ""


Turn = Text | ToolUse | Stall


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received: method, path and decoded JSON body."""

    method: str
    path: str
    body: Mapping[str, Any]
    is_agent_turn: bool

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` list of a Messages API request (empty for others)."""
        messages = self.body.get("messages", [])
        return list(messages) if isinstance(messages, list) else []

    def text(self) -> str:
        """Every text and tool-result string in the request's messages, joined."""
        return "\n".join(_strings(self.messages))

    def images(self) -> list[tuple[str, bytes]]:
        """The media type and decoded bytes of every base64 image block in the request's
        messages, oldest first: what the model was shown."""
        return list(_images(self.messages))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for key in ("text", "content"):
            if key in value:
                yield from _strings(value[key])


def _images(value: Any) -> Iterator[tuple[str, bytes]]:
    if isinstance(value, list):
        for item in value:
            yield from _images(item)
    elif isinstance(value, dict):
        source = value.get("source")
        if value.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
            yield str(source.get("media_type")), base64.b64decode(str(source.get("data")))
        elif "content" in value:
            yield from _images(value["content"])


class ScriptedModel(ScriptedServer[Turn, RecordedRequest]):
    """A scripted Messages API on ``127.0.0.1:<free port>``.

    Use as a context manager, sync or async::

        async with ScriptedModel([ToolUse("Bash", {"command": "touch x"}), Text("done")]) as model:
            options = ClaudeAgentOptions(env=model.agent_env())

    Once the script is used up every further agent request gets ``fallback``.
    """

    def __init__(self, script: Sequence[Turn] = (), *, fallback: Turn = Text("ok")) -> None:
        super().__init__(ScriptState(list(script), fallback), _Handler, "scripted-model")

    def agent_env(self) -> dict[str, str]:
        """Environment that points the Claude Code CLI at this server, offline.

        The API key is a dummy: this server never checks it.
        """
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted-model-dummy",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",
        }


class _Handler(ScriptHandler):
    shared: ScriptState[Turn, RecordedRequest]

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's handler name
        self._send_json(200, {"data": [], "has_more": False})

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's handler name
        try:
            body = self._body()
        except ValueError:
            self._send_json(400, _error("invalid_request_error", "body is not JSON"))
            return
        path = self.path.split("?", 1)[0]
        is_agent = path == "/v1/messages" and bool(body.get("tools"))
        turn, number = self.shared.take(RecordedRequest("POST", self.path, body, is_agent), Text("ok"))
        if path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": 1})
        elif path != "/v1/messages":
            self._send_json(404, _error("not_found_error", f"no route {path}"))
        elif body.get("stream"):
            self._stream(turn, str(body.get("model", "scripted")), number)
        else:
            self._send_json(200, _message(turn, str(body.get("model", "scripted")), number))

    def _stream(self, turn: Turn, model: str, number: int) -> None:
        self._start_events()
        try:
            for event in _events(turn, model, number):
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            if isinstance(turn, Stall):
                # Hold the stream open; a vanished client shows up as a failed write.
                while not self.shared.closing.wait(0.2):
                    self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                    self.wfile.flush()
        except OSError:
            pass  # the client went away (an interrupted agent): nothing to answer


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _usage() -> dict[str, int]:
    return {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _message(turn: Turn, model: str, number: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    if isinstance(turn, ToolUse):
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_scripted_{number:06d}",
                "name": turn.name,
                "input": dict(turn.input),
            }
        )
    return {
        "id": f"msg_scripted_{number:06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if isinstance(turn, ToolUse) else "end_turn",
        "stop_sequence": None,
        "usage": _usage(),
    }


def _events(turn: Turn, model: str, number: int) -> Iterator[dict[str, Any]]:
    message = _message(turn, model, number)
    yield {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": block["text"]},
            }
        else:
            yield {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
            yield {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])},
            }
        yield {"type": "content_block_stop", "index": index}
    if isinstance(turn, Stall):
        return
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": 5},
    }
    yield {"type": "message_stop"}
