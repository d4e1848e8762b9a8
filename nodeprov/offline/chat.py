"""A scripted OpenAI Chat Completions server on 127.0.0.1: OpenCode (and any client of an
OpenAI-compatible provider) runs offline against it (tests, and ``nodeprov run --agent
opencode --model scripted``).

OpenCode posts ``/v1/chat/completions`` (``stream: true``) and reads ``chat.completion.chunk``
server-sent events, ``data: [DONE]`` last. This server answers each *agent* request (one that
offers ``tools``: OpenCode's main loop always does, its title requests never) with the next
:class:`Turn` of a script; other requests get a short fixed reply and do not consume the
script. Without ``stream`` the answer is one ``chat.completion`` object. ``GET /v1/models``
lists :attr:`ScriptedChat.model`. Every request is recorded, so a test can assert what the
model was sent, images included (:meth:`ChatRequest.images`).

Point OpenCode at it with :meth:`ScriptedChat.opencode_provider` (the OpenCode agent's
``provider`` option), :meth:`ScriptedChat.agent_env` (the key) and
:attr:`ScriptedChat.opencode_model`; or a raw OpenCode with :meth:`ScriptedChat.opencode_config`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._server import (
    HttpError,
    OpenAIHandler,
    ScriptedServer,
    ScriptState,
    Stall,
    decode_data_url,
    strings_of,
)

__all__ = [
    "DEFAULT_MODEL",
    "PROVIDER_ID",
    "BashCommand",
    "ChatHttpError",
    "ChatRequest",
    "ChatStall",
    "ChatText",
    "ChatToolCall",
    "ChatTurn",
    "HttpError",
    "ScriptedChat",
    "Stall",
    "Text",
    "ToolCall",
    "Turn",
]

DEFAULT_MODEL = "scripted-model"
PROVIDER_ID = "scripted"
"""The provider id :meth:`ScriptedChat.opencode_config` gives the server in OpenCode's config:
its model is ``scripted/scripted-model`` there."""


@dataclass(frozen=True)
class Text:
    """A model turn that answers with ``text`` and ends the agent's turn; ``reasoning``, when
    given, is streamed first as ``reasoning_content`` (as DeepSeek-style endpoints do)."""

    text: str
    reasoning: str = ""


@dataclass(frozen=True)
class ToolCall:
    """A model turn that calls tool ``name`` with ``arguments`` (a JSON object), after an
    optional ``text``."""

    name: str
    arguments: Mapping[str, Any]
    text: str = ""


@dataclass(frozen=True)
class BashCommand:
    """A model turn that asks the agent to run ``command`` with its shell tool, ``bash``
    (OpenCode 1.18: ``{"command", "timeout", "workdir"}``; an older one also takes a
    ``description``, given when the request's tool declares it), after an optional ``text``."""

    command: str
    text: str = ""
    description: str = "Runs a scripted command"
    workdir: str | None = None


Turn = Text | ToolCall | BashCommand | Stall | HttpError

# The names :mod:`nodeprov.testing` exports them under, distinct from the other APIs' turns.
ChatText = Text
ChatToolCall = ToolCall
ChatStall = Stall
ChatHttpError = HttpError
ChatTurn = Turn

_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})


@dataclass(frozen=True)
class ChatRequest:
    """One request the server received: method, path, decoded JSON body, whether it took a
    scripted turn, and headers (names lower-cased)."""

    method: str
    path: str
    body: Mapping[str, Any]
    is_agent_turn: bool
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages``."""
        messages = self.body.get("messages", [])
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    @property
    def tool_names(self) -> list[str]:
        """The names of the function tools the request offers."""
        return list(_tools(self.body))

    @property
    def tool_outputs(self) -> list[str]:
        """The results of earlier tool calls that the request carries (``role: tool``), oldest first."""
        return ["\n".join(strings_of(m.get("content"))) for m in self.messages if m.get("role") == "tool"]

    def text(self) -> str:
        """Every text of the request's user, assistant and tool messages, joined (the system
        prompt left out)."""
        return "\n".join(
            text for m in self.messages if m.get("role") != "system" for text in strings_of(m.get("content"))
        )

    def images(self) -> list[tuple[str, bytes]]:
        """The images of the user messages, in order: each ``image_url`` part's media type and
        bytes, decoded from its ``data:`` URL (an image given by an ``http(s)`` URL is not
        fetched, and left out)."""
        found = []
        for message in self.messages:
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            for part in content:
                image = part.get("image_url") if isinstance(part, dict) else None
                decoded = decode_data_url(image.get("url") if isinstance(image, dict) else None)
                if decoded is not None:  # not base64: not an image a model would see either
                    found.append(decoded)
        return found


def _tools(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The function tools ``body`` offers, by name: their parameter schemas."""
    offered = {}
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            offered[function["name"]] = parameters if isinstance(parameters, dict) else {}
    return offered


@dataclass
class _State(ScriptState[Turn, ChatRequest]):
    model: str = ""
    vision: bool = True


class ScriptedChat(ScriptedServer[Turn, ChatRequest]):
    """A scripted Chat Completions API on ``127.0.0.1:<free port>``.

    Use as a context manager, sync or async::

        async with ScriptedChat([BashCommand("touch x"), Text("done")]) as model:
            options = {"provider": model.opencode_provider(), "model": model.opencode_model,
                       "env": model.agent_env()}

    Once the script is used up every further agent request gets ``fallback``. ``model`` is
    the model the server lists; ``vision`` says whether OpenCode is told the model sees
    images (it leaves them out of the request otherwise).
    """

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        fallback: Turn = Text("ok"),
        model: str = DEFAULT_MODEL,
        vision: bool = True,
    ) -> None:
        self._state: _State = _State(list(script), fallback, model=model, vision=vision)
        super().__init__(self._state, _Handler, "scripted-chat")

    @property
    def model(self) -> str:
        """The model name the server lists."""
        return self._state.model

    @property
    def opencode_model(self) -> str:
        """The model as OpenCode names it with :meth:`opencode_config`: ``scripted/MODEL``."""
        return f"{PROVIDER_ID}/{self.model}"

    def agent_env(self, env_key: str = "NODEPROV_SCRIPTED_KEY") -> dict[str, str]:
        """The provider key a client needs in its environment (a dummy: never checked)."""
        return {env_key: "dummy"}

    def opencode_provider(self, env_key: str = "NODEPROV_SCRIPTED_KEY") -> dict[str, Any]:
        """The OpenCode agent's ``provider`` option for this server: an OpenAI-compatible
        endpoint with its key in ``env_key`` and :attr:`model` (seeing images as
        :attr:`vision` says)."""
        return {
            "id": PROVIDER_ID,
            "name": "Scripted",
            "base_url": f"{self.url}/v1",
            "env_key": env_key,
            "models": {self.model: {"vision": self._state.vision, "context_window": 200_000}},
        }

    def opencode_config(self, env_key: str = "NODEPROV_SCRIPTED_KEY") -> dict[str, Any]:
        """An OpenCode config (``OPENCODE_CONFIG_CONTENT``) whose provider ``scripted`` is
        this server (its ``@ai-sdk/openai-compatible`` package is bundled in OpenCode), its
        key read from ``env_key``, and whose model is :attr:`opencode_model`."""
        modalities = ["text", "image"] if self._state.vision else ["text"]
        return {
            "provider": {
                PROVIDER_ID: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted",
                    "options": {"baseURL": f"{self.url}/v1", "apiKey": f"{{env:{env_key}}}"},
                    "models": {
                        self.model: {
                            "name": self.model,
                            "attachment": self._state.vision,
                            "modalities": {"input": modalities, "output": ["text"]},
                        }
                    },
                }
            },
            "model": self.opencode_model,
        }


# How often a stalled stream checks that its client is still there.


class _Handler(OpenAIHandler):
    shared: _State
    paths = _CHAT_PATHS
    ok = Text("ok")
    stream_end = b"data: [DONE]\n\n"

    def _record(self, method: str, body: dict[str, Any], is_agent: bool) -> ChatRequest:
        return ChatRequest(method, self.path, body, is_agent, self._headers())

    def _is_agent(self, path: str, body: dict[str, Any]) -> bool:
        return path in _CHAT_PATHS and bool(body.get("tools"))

    def _models(self) -> dict[str, Any]:
        model = {"id": self.shared.model, "object": "model", "created": 0, "owned_by": "nodeprov"}
        return {"object": "list", "data": [model]}

    def _frames(self, turn: Turn, body: dict[str, Any], number: int) -> Iterator[bytes]:
        for chunk in _chunks(turn, body, number):
            yield f"data: {json.dumps(chunk)}\n\n".encode()

    def _answer(self, turn: Turn, body: dict[str, Any], number: int) -> dict[str, Any]:
        return _completion(turn, body, number)


def _usage() -> dict[str, Any]:
    return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _call(turn: ToolCall | BashCommand, body: Mapping[str, Any], number: int) -> dict[str, Any]:
    """The tool call of ``turn`` as a message's ``tool_calls`` item."""
    if isinstance(turn, ToolCall):
        name, arguments = turn.name, dict(turn.arguments)
    else:
        name, arguments = "bash", {"command": turn.command}
        declared = _tools(body).get(name, {}).get("properties", {})
        if "description" in declared:
            arguments["description"] = turn.description
        if turn.workdir is not None:
            arguments["workdir"] = turn.workdir
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": f"call_scripted_{number:06d}", "type": "function", "function": function}


def _finish(turn: Turn) -> str:
    return "tool_calls" if isinstance(turn, ToolCall | BashCommand) else "stop"


def _completion(turn: Turn, body: Mapping[str, Any], number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": getattr(turn, "text", "") or None}
    if isinstance(turn, Text) and turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    if isinstance(turn, ToolCall | BashCommand):
        message["tool_calls"] = [_call(turn, body, number)]
    return {
        "id": f"chatcmpl-scripted-{number:06d}",
        "object": "chat.completion",
        "created": 0,
        "model": str(body.get("model", DEFAULT_MODEL)),
        "choices": [{"index": 0, "message": message, "finish_reason": _finish(turn)}],
        "usage": _usage(),
    }


def _chunks(turn: Turn, body: Mapping[str, Any], number: int) -> Iterator[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-scripted-{number:06d}",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": str(body.get("model", DEFAULT_MODEL)),
    }

    def delta(fields: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}

    yield delta({"role": "assistant", "content": ""})
    if isinstance(turn, Text) and turn.reasoning:
        yield delta({"reasoning_content": turn.reasoning})
    text = getattr(turn, "text", "")
    if text:
        yield delta({"content": text})
    if isinstance(turn, Stall):
        return
    if isinstance(turn, ToolCall | BashCommand):
        call = _call(turn, body, number)
        arguments = call["function"]["arguments"]
        yield delta({"tool_calls": [{**call, "index": 0, "function": {**call["function"], "arguments": ""}}]})
        yield delta({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]})
    yield delta({}, _finish(turn))
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        yield {**base, "choices": [], "usage": _usage()}
