"""A scripted OpenAI Responses API server on 127.0.0.1: the Codex CLI runs offline against it
(tests, and ``nodeprov run --model scripted``).

``codex exec`` streams ``POST /v1/responses`` from a custom model provider and reads
server-sent events. This server answers each *agent* request (a turn of the conversation;
Codex marks them ``request_kind: "turn"`` in its ``x-codex-turn-metadata`` header) with the
next :class:`Turn` of a script; other requests (a compaction, for example) get a short fixed
reply and do not consume the script. Every request is recorded, so a test can assert what
the model was sent.

Point Codex at it with :meth:`ScriptedResponses.codex_config` (a ``model_providers`` table)
and :meth:`ScriptedResponses.agent_env` (the provider's key), or with the complete
``-c`` overrides of :meth:`ScriptedResponses.codex_args`.
"""

from __future__ import annotations

import json
import shlex
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
    "ExecCommand",
    "HttpError",
    "ResponsesHttpError",
    "ResponsesRequest",
    "ResponsesStall",
    "ResponsesText",
    "ResponsesTurn",
    "ScriptedResponses",
    "Stall",
    "Text",
    "Turn",
]

DEFAULT_MODEL = "scripted-model"


@dataclass(frozen=True)
class Text:
    """A model turn that answers with ``text`` and ends the agent's turn.

    Structured output (``codex exec --output-schema``) is a ``Text`` whose text is JSON.
    ``reasoning``, when given, is streamed first as a reasoning item with that summary.
    """

    text: str
    reasoning: str = ""


@dataclass(frozen=True)
class ExecCommand:
    """A model turn that asks Codex to run a shell command, after an optional ``text``.

    The call goes to the shell tool the request offers: ``exec_command`` (``{"cmd": "..."}``,
    what Codex 0.169 offers), ``shell_command`` (``{"command": "..."}``) or ``shell``
    (``{"command": [...]}``). A list is joined with shell quoting where a string is wanted.
    """

    command: Sequence[str] | str
    text: str = ""
    workdir: str | None = None


Turn = Text | ExecCommand | Stall | HttpError

# The names :mod:`nodeprov.testing` exports them under, distinct from the Messages API turns.
ResponsesText = Text
ResponsesStall = Stall
ResponsesHttpError = HttpError
ResponsesTurn = Turn

# The shell tools Codex may offer, most recent first.
_SHELL_TOOLS = ("exec_command", "shell_command", "shell")


@dataclass(frozen=True)
class ResponsesRequest:
    """One request the server received: method, path, headers (names lower-cased) and decoded
    JSON body."""

    method: str
    path: str
    body: Mapping[str, Any]
    is_agent_turn: bool
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def input(self) -> list[dict[str, Any]]:
        """The ``input`` items of a Responses API request (a string input as one user message)."""
        items = self.body.get("input", [])
        if isinstance(items, str):
            return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": items}]}]
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    @property
    def tool_names(self) -> list[str]:
        """The names of the top-level tools the request offers."""
        tools = self.body.get("tools") or []
        return [str(tool["name"]) for tool in tools if isinstance(tool, dict) and "name" in tool]

    @property
    def function_call_outputs(self) -> list[str]:
        """The outputs of earlier tool calls that the request carries, oldest first."""
        return [
            "\n".join(strings_of(item.get("output")))
            for item in self.input
            if item.get("type") in {"function_call_output", "custom_tool_call_output"}
        ]

    @property
    def metadata(self) -> dict[str, Any]:
        """Codex's ``x-codex-turn-metadata`` header, decoded (empty when absent)."""
        raw = self.headers.get("x-codex-turn-metadata", "")
        try:
            decoded = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}

    def text(self) -> str:
        """Every message text and tool-call output in the request's ``input``, joined."""
        parts: list[str] = []
        for item in self.input:
            kind = item.get("type", "message")
            if kind == "message":
                parts.extend(strings_of(item.get("content")))
            elif kind in {"function_call_output", "custom_tool_call_output"}:
                parts.extend(strings_of(item.get("output")))
        return "\n".join(parts)

    def images(self) -> list[tuple[str, bytes]]:
        """The media type and decoded bytes of every ``input_image`` (a base64 ``data:``
        URL) in the request's messages, oldest first: what the model was shown."""
        found: list[tuple[str, bytes]] = []
        messages = [item for item in self.input if item.get("type", "message") == "message"]
        for item in messages:
            content = item.get("content")
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "input_image":
                    decoded = decode_data_url(part.get("image_url"))
                    if decoded is not None:
                        found.append(decoded)
        return found


@dataclass
class _State(ScriptState[Turn, ResponsesRequest]):
    model: str = ""


class ScriptedResponses(ScriptedServer[Turn, ResponsesRequest]):
    """A scripted Responses API on ``127.0.0.1:<free port>``.

    Use as a context manager, sync or async::

        async with ScriptedResponses([ExecCommand(["touch", "x"]), Text("done")]) as model:
            argv = ["codex", "exec", *model.codex_args(), "-m", model.model, "do it"]

    Once the script is used up every further agent request gets ``fallback``. ``model`` is
    the name the model catalog (``GET /v1/models``) describes.
    """

    def __init__(
        self, script: Sequence[Turn] = (), *, fallback: Turn = Text("ok"), model: str = DEFAULT_MODEL
    ) -> None:
        self._state: _State = _State(list(script), fallback, model=model)
        super().__init__(self._state, _Handler, "scripted-responses")

    @property
    def model(self) -> str:
        """The model name the catalog describes (pass it to ``codex -m``)."""
        return self._state.model

    def codex_config(self, env_key: str = "NODEPROV_SCRIPTED_KEY", *, catalog: bool = True) -> dict[str, str]:
        """The ``model_providers.NAME`` table that points Codex at this server (the Codex
        agent's ``model_provider`` option). With ``catalog`` Codex also reads this server's
        model catalog, and so knows :attr:`model` and does not warn "Model metadata ... not
        found" (it needs ``-c features.api_key_model_discovery=true`` too)."""
        table = {
            "name": "scripted",
            "base_url": f"{self.url}/v1",
            "wire_api": "responses",
            "env_key": env_key,
        }
        if catalog:
            table["model_catalog_url"] = f"{self.url}/v1/models"
        return table

    def agent_env(self, env_key: str = "NODEPROV_SCRIPTED_KEY") -> dict[str, str]:
        """The provider key Codex needs in its environment (a dummy: never checked)."""
        return {env_key: "dummy"}

    def codex_args(self, env_key: str = "NODEPROV_SCRIPTED_KEY", *, catalog: bool = True) -> list[str]:
        """``codex`` options that select this server as the model provider, offline (see
        :meth:`codex_config` for ``catalog``)."""
        table = self.codex_config(env_key, catalog=catalog)
        fields = ", ".join(f"{key}={json.dumps(value)}" for key, value in table.items())
        args = [
            "--disable",
            "plugins",
            "-c",
            "analytics.enabled=false",
            "-c",
            "model_provider=scripted",
            "-c",
            f"model_providers.scripted={{{fields}}}",
        ]
        if catalog:
            args += ["-c", "features.api_key_model_discovery=true"]
        return args


# How often a stalled stream checks that its client is still there.


# Where Codex posts a model turn: ``base_url`` + ``/responses`` (with or without ``/v1``).
_RESPONSES_PATHS = frozenset({"/v1/responses", "/responses"})


def _is_agent_turn(path: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    if path not in _RESPONSES_PATHS:
        return False
    raw = headers.get("x-codex-turn-metadata")
    if raw:
        try:
            kind = json.loads(raw).get("request_kind")
        except (ValueError, AttributeError):
            kind = None
        if isinstance(kind, str):
            return kind == "turn"
    return bool(body.get("tools"))


class _Handler(OpenAIHandler):
    shared: _State
    paths = _RESPONSES_PATHS
    ok = Text("ok")

    def _record(self, method: str, body: dict[str, Any], is_agent: bool) -> ResponsesRequest:
        return ResponsesRequest(method, self.path, body, is_agent, self._headers())

    def _is_agent(self, path: str, body: dict[str, Any]) -> bool:
        return _is_agent_turn(path, body, self._headers())

    def _models(self) -> dict[str, Any]:
        return _models(self.shared.model)

    def _frames(self, turn: Turn, body: dict[str, Any], number: int) -> Iterator[bytes]:
        for event in _events(turn, body, number):
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

    def _answer(self, turn: Turn, body: dict[str, Any], number: int) -> dict[str, Any]:
        return _response(turn, body, number, _output(turn, body, number), "completed")


def _models(model: str) -> dict[str, Any]:
    """An OpenAI model list that is also a Codex model catalog (``models``) for ``model``."""
    info = {
        "slug": model,
        "display_name": model,
        "description": "A scripted model for tests (nodeprov.testing).",
        "default_reasoning_level": "medium",
        "supported_reasoning_levels": [{"effort": "medium", "description": "The only level."}],
        "shell_type": "unified_exec",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 1,
        "upgrade": None,
        "base_instructions": "You are a scripted model in a test. Follow the script.",
        "supports_reasoning_summaries": True,
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None,
        "truncation_policy": {"mode": "bytes", "limit": 10000},
        "supports_parallel_tool_calls": False,
        "context_window": 200000,
        "experimental_supported_tools": [],
    }
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": 0, "owned_by": "nodeprov"}],
        "models": [info],
    }


def _usage() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def _shell_call(turn: ExecCommand, body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The shell tool the request offers and the arguments that run ``turn.command`` with it."""
    offered = {str(tool.get("name")) for tool in body.get("tools") or [] if isinstance(tool, dict)}
    name = next((tool for tool in _SHELL_TOOLS if tool in offered), _SHELL_TOOLS[0])
    joined = turn.command if isinstance(turn.command, str) else shlex.join(turn.command)
    arguments: dict[str, Any]
    if name == "shell":
        listed = ["bash", "-lc", turn.command] if isinstance(turn.command, str) else list(turn.command)
        arguments = {"command": listed}
    elif name == "shell_command":
        arguments = {"command": joined}
    else:
        arguments = {"cmd": joined}
    if turn.workdir is not None:
        arguments["workdir"] = turn.workdir
    return name, arguments


def _message(text: str, number: int, index: int) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_scripted_{number:06d}_{index}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _output(turn: Turn, body: Mapping[str, Any], number: int) -> list[dict[str, Any]]:
    """The completed output items of ``turn``."""
    items: list[dict[str, Any]] = []
    if isinstance(turn, Text) and turn.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_scripted_{number:06d}",
                "summary": [{"type": "summary_text", "text": turn.reasoning}],
            }
        )
    text = turn.text if isinstance(turn, Text | ExecCommand | Stall) else ""
    if text:
        items.append(_message(text, number, len(items)))
    if isinstance(turn, ExecCommand):
        name, arguments = _shell_call(turn, body)
        items.append(
            {
                "type": "function_call",
                "id": f"fc_scripted_{number:06d}",
                "status": "completed",
                "call_id": f"call_scripted_{number:06d}",
                "name": name,
                "arguments": json.dumps(arguments),
            }
        )
    return items


def _response(
    turn: Turn, body: Mapping[str, Any], number: int, output: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    return {
        "id": f"resp_scripted_{number:06d}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": str(body.get("model", DEFAULT_MODEL)),
        "output": output,
        "usage": _usage() if status == "completed" else None,
    }


def _pending(item: Mapping[str, Any]) -> dict[str, Any]:
    """An output item as ``response.output_item.added`` announces it, before its content."""
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "reasoning":
        return {**item, "summary": []}
    return {**item, "status": "in_progress", "arguments": ""}


def _events(turn: Turn, body: Mapping[str, Any], number: int) -> Iterator[dict[str, Any]]:
    output = _output(turn, body, number)
    yield {"type": "response.created", "response": _response(turn, body, number, [], "in_progress")}
    for index, item in enumerate(output):
        yield {"type": "response.output_item.added", "output_index": index, "item": _pending(item)}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield {"type": "response.content_part.added", **where, "part": part}
            yield {"type": "response.output_text.delta", **where, "delta": text}
            if isinstance(turn, Stall):
                return
            yield {"type": "response.output_text.done", **where, "text": text}
            yield {"type": "response.content_part.done", **where, "part": {**part, "text": text}}
        elif item["type"] == "reasoning":
            summary = item["summary"][0]["text"]
            where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            yield {"type": "response.reasoning_summary_part.added", **where, "part": {"type": "summary_text"}}
            yield {"type": "response.reasoning_summary_text.delta", **where, "delta": summary}
            yield {"type": "response.reasoning_summary_text.done", **where, "text": summary}
        else:
            where = {"item_id": item["id"], "output_index": index}
            yield {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]}
            yield {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
    if isinstance(turn, Stall):
        return
    yield {"type": "response.completed", "response": _response(turn, body, number, output, "completed")}
