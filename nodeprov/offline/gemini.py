"""A scripted Gemini API server on 127.0.0.1: the Gemini CLI runs offline against it (tests,
and any client of the ``@google/genai`` SDK).

The Gemini CLI (0.61, through ``@google/genai``) reaches the server given by
``GOOGLE_GEMINI_BASE_URL`` with its key, ``GEMINI_API_KEY``, in an ``x-goog-api-key``
header. Its agent loop posts ``/v1beta/models/MODEL:streamGenerateContent?alt=sse`` and reads
server-sent events, each ``data: <GenerateContentResponse JSON>`` on one line and a blank
line (``\\r\\n\\r\\n``, as Google sends them: the SDK splits the stream on exactly that, and
takes nothing else between events but whitespace). Its side requests post
``:generateContent``, most of them for JSON (``generationConfig.responseMimeType:
application/json`` with a ``responseJsonSchema``): with its default model, ``auto``, a
routing request before each prompt (a complexity score from 1 to 100); as the need arises,
loop detection, edit correction, summaries. With an image in the prompt (ACP), it first
posts ``:countTokens``.

This server answers each *agent* request (a ``generateContent`` or
``streamGenerateContent`` that offers ``functionDeclarations``: the CLI's main loop always
does, its side requests never) with the next :class:`Turn` of a script. Other requests get a
short fixed reply and do not consume the script: for a JSON request, the smallest object its
schema accepts (enums take their first value, so the next-speaker check hears
``{"next_speaker": "user", "reasoning": "scripted"}``), else the text ``ok``. Every answer
ends with ``finishReason: "STOP"`` and carries ``usageMetadata`` and ``modelVersion`` (the
model of the request's path). ``:countTokens`` answers an estimate, ``GET /v1beta/models``
(and ``/v1beta/models/MODEL``) lists :attr:`ScriptedGemini.model`. The API versions
``v1``, ``v1alpha`` and ``v1beta`` are served alike (the SDK's is ``v1beta``, unless
``GOOGLE_GENAI_API_VERSION`` says otherwise). A request without the key, :data:`API_KEY`,
gets Google's 403; with another key, Google's 400 ``API_KEY_INVALID``; errors are Google's
``{"error": {"code", "message", "status"}}``. Every request is recorded, so a test can
assert what the model was sent, tool outputs and images included
(:attr:`GeminiRequest.function_responses`, :meth:`GeminiRequest.images`).

Point the CLI at it with :meth:`ScriptedGemini.agent_env` and keep it offline with
:meth:`ScriptedGemini.gemini_settings` (its ``~/.gemini/settings.json``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ._server import _STALL_PING, HttpError, ScriptedServer, ScriptHandler, ScriptState, Stall

__all__ = [
    "API_KEY",
    "DEFAULT_MODEL",
    "FunctionCall",
    "GeminiFunctionCall",
    "GeminiHttpError",
    "GeminiRequest",
    "GeminiStall",
    "GeminiText",
    "GeminiTurn",
    "HttpError",
    "ScriptedGemini",
    "ShellCommand",
    "Stall",
    "Text",
    "Turn",
]

DEFAULT_MODEL = "gemini-2.5-flash"
API_KEY = "nodeprov-scripted-key"
"""The key the server takes (:meth:`ScriptedGemini.agent_env` gives it to the CLI)."""


@dataclass(frozen=True)
class Text:
    """A model turn that answers with ``text`` and ends the agent's turn; ``thought``, when
    given, is streamed first as a thought part (``{"thought": true, "text": ...}``), which
    the CLI shows as the model's thinking (``**Subject** description``, as Gemini writes
    them)."""

    text: str
    thought: str = ""


@dataclass(frozen=True)
class FunctionCall:
    """A model turn that calls the CLI's tool ``name`` with ``args``, after an optional
    ``text``. The Gemini CLI 0.61's file and shell tools and their arguments (the required
    ones first):

    - ``run_shell_command``: ``command``; ``description``, ``dir_path``, ``is_background``,
      ``delay_ms`` (see :class:`ShellCommand`);
    - ``read_file``: ``file_path``; ``start_line``, ``end_line`` (1-based, inclusive);
    - ``write_file``: ``file_path``, ``content``;
    - ``replace``: ``file_path``, ``instruction``, ``old_string``, ``new_string``;
      ``allow_multiple``;
    - ``list_directory``: ``dir_path``; ``ignore`` (globs);
    - ``glob``: ``pattern``; ``dir_path``;
    - ``grep_search``: ``pattern``; ``dir_path``, ``include_pattern``, ``exclude_pattern``.
    """

    name: str
    args: Mapping[str, Any]
    text: str = ""


@dataclass(frozen=True)
class ShellCommand:
    """A model turn that asks the CLI to run ``command`` with its shell tool,
    ``run_shell_command`` (``bash -c COMMAND`` in ``dir_path``, the project's root when
    None), after an optional ``text``; the CLI shows ``description`` beside it."""

    command: str
    text: str = ""
    description: str = "Runs a scripted command"
    dir_path: str | None = None


Turn = Text | FunctionCall | ShellCommand | Stall | HttpError

# The names :mod:`nodeprov.testing` exports them under, distinct from the other APIs' turns.
GeminiText = Text
GeminiFunctionCall = FunctionCall
GeminiStall = Stall
GeminiHttpError = HttpError
GeminiTurn = Turn

# /VERSION/models[/MODEL[:METHOD]]
_ROUTE = re.compile(r"/v1(?:alpha|beta)?/models(?:/(?P<model>[^/:]+)(?::(?P<method>\w+))?)?")
_GENERATE = frozenset({"generateContent", "streamGenerateContent"})


@dataclass(frozen=True)
class GeminiRequest:
    """One request the server received: method, path (with its query), decoded JSON body,
    whether it took a scripted turn, and headers (names lower-cased)."""

    method: str
    path: str
    body: Mapping[str, Any]
    is_agent_turn: bool
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The model the path names (``gemini-2.5-flash`` of
        ``/v1beta/models/gemini-2.5-flash:streamGenerateContent``); empty when it names none."""
        route = _ROUTE.fullmatch(urlsplit(self.path).path)
        return (route["model"] or "") if route else ""

    @property
    def contents(self) -> list[dict[str, Any]]:
        """The request's ``contents``: the conversation, oldest first."""
        contents = self.body.get("contents", [])
        return [c for c in contents if isinstance(c, dict)] if isinstance(contents, list) else []

    @property
    def tool_names(self) -> list[str]:
        """The names of the functions the request declares."""
        return list(_declared(self.body))

    @property
    def function_responses(self) -> list[dict[str, Any]]:
        """The ``response`` of every ``functionResponse`` part, oldest first: the results of
        earlier tool calls (the CLI's are ``{"output": "..."}``)."""
        return [
            response
            for part in _parts(self.contents)
            if isinstance(call := part.get("functionResponse"), dict)
            and isinstance(response := call.get("response"), dict)
        ]

    def text(self) -> str:
        """Every text part of the user contents, joined (the system instruction left out)."""
        user = [c for c in self.contents if c.get("role", "user") == "user"]
        return "\n".join(part["text"] for part in _parts(user) if isinstance(part.get("text"), str))

    def images(self) -> list[tuple[str, bytes]]:
        """The ``inlineData`` parts of the user contents, in order: each one's media type and
        bytes, decoded from base64 (one that is not base64 is left out)."""
        found = []
        for part in _parts([c for c in self.contents if c.get("role", "user") == "user"]):
            data = part.get("inlineData")
            if isinstance(data, dict) and isinstance(data.get("data"), str):
                try:
                    found.append(
                        (str(data.get("mimeType", "")), base64.b64decode(data["data"], validate=True))
                    )
                except binascii.Error:
                    continue
        return found


def _parts(contents: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for content in contents:
        parts = content.get("parts")
        yield from (p for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ()


def _declared(body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The functions ``body`` declares, by name: their declarations."""
    tools = body.get("tools")
    declared = {}
    for tool in tools if isinstance(tools, list) else []:
        functions = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for function in functions if isinstance(functions, list) else []:
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                declared[function["name"]] = function
    return declared


@dataclass
class _State(ScriptState[Turn, GeminiRequest]):
    model: str = ""


class ScriptedGemini(ScriptedServer[Turn, GeminiRequest]):
    """A scripted Gemini API on ``127.0.0.1:<free port>``.

    Use as a context manager, sync or async::

        async with ScriptedGemini([ShellCommand("touch x"), Text("done")]) as model:
            (home / ".gemini" / "settings.json").write_text(json.dumps(model.gemini_settings()))
            env = {"PATH": os.environ["PATH"], "HOME": str(home), **model.agent_env()}
            argv = ["gemini", "-p", "do it", "--output-format", "json", "--yolo", "--skip-trust"]

    Once the script is used up every further agent request gets ``fallback``. ``model`` is
    the model the server lists and :meth:`gemini_settings` selects (the server answers any
    model the CLI asks for).
    """

    def __init__(
        self, script: Sequence[Turn] = (), *, fallback: Turn = Text("ok"), model: str = DEFAULT_MODEL
    ) -> None:
        self._state: _State = _State(list(script), fallback, model=model)
        super().__init__(self._state, _Handler, "scripted-gemini")

    @property
    def model(self) -> str:
        """The model name the server lists."""
        return self._state.model

    def agent_env(self) -> dict[str, str]:
        """The environment that points the Gemini CLI at this server: its base URL (the SDK
        appends ``/v1beta/models/...``) and the key the server takes."""
        return {"GEMINI_API_KEY": API_KEY, "GOOGLE_GEMINI_BASE_URL": self.url}

    def gemini_settings(self) -> dict[str, Any]:
        """A Gemini CLI ``settings.json`` (``~/.gemini/``) that keeps the CLI on this server
        and off the network otherwise: no usage statistics (Google's Clearcut), telemetry or
        update checks; :attr:`model` as the CLI's model (which also spares its ``auto``
        model's routing requests); the key in the environment as its way in
        (``gemini-api-key``: without it the CLI infers the ``gateway`` type from
        ``GOOGLE_GEMINI_BASE_URL``, which ``-p`` refuses). Folder trust is left to the
        caller: ``gemini -p`` refuses to run in a folder it does not trust unless given
        ``--skip-trust`` (or ``GEMINI_CLI_TRUST_WORKSPACE=true``)."""
        return {
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "model": {"name": self.model},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }


class _Handler(ScriptHandler):
    shared: _State

    def _key_error(self) -> tuple[int, dict[str, Any]] | None:
        """Google's answer to a request without this server's key (None when it has it)."""
        key = self.headers.get("x-goog-api-key") or parse_qs(urlsplit(self.path).query).get("key", [""])[0]
        if not key:
            message = "Method doesn't allow unregistered callers. Please use an API Key."
            return 403, _google_error(403, message)
        if key != API_KEY:
            return 400, _google_error(
                400, "API key not valid. Please pass a valid API key.", "API_KEY_INVALID"
            )
        return None

    def _record(
        self, method: str, body: dict[str, Any], is_agent: bool, otherwise: Turn = Text("ok")
    ) -> tuple[Turn, int]:
        """Record this request; its turn (``otherwise`` unless ``is_agent``) and number."""
        headers = {key.lower(): value for key, value in self.headers.items()}
        return self.shared.take(GeminiRequest(method, self.path, body, is_agent, headers), otherwise)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's handler name
        self._record("GET", {}, False)
        route = _ROUTE.fullmatch(urlsplit(self.path).path)
        if (refused := self._key_error()) is not None:
            self._send_json(*refused)
        elif route is None or route["method"]:
            self._send_json(404, _google_error(404, f"no route {urlsplit(self.path).path}"))
        elif route["model"]:
            self._send_json(200, _model_info(route["model"]))
        else:
            self._send_json(200, {"models": [_model_info(self.shared.model)]})

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's handler name
        try:
            body = self._body()
        except ValueError:
            self._send_json(400, _google_error(400, "Invalid JSON payload received."))
            return
        if not isinstance(body, dict):
            self._send_json(400, _google_error(400, "Invalid JSON payload received: not an object."))
            return
        route = _ROUTE.fullmatch(urlsplit(self.path).path)
        method = route["method"] if route and route["model"] else None
        refused = self._key_error()
        is_agent = refused is None and method in _GENERATE and bool(_declared(body))
        turn, number = self._record("POST", body, is_agent, _side_reply(body))
        model = str(route["model"]) if route and route["model"] else self.shared.model
        if refused is not None:
            self._send_json(*refused)
        elif method == "countTokens":
            self._send_json(200, {"totalTokens": max(1, len(json.dumps(body.get("contents", []))) // 4)})
        elif method not in _GENERATE:
            self._send_json(404, _google_error(404, f"no route {urlsplit(self.path).path}"))
        elif isinstance(turn, HttpError):
            self._send_json(turn.status, _google_error(turn.status, turn.message))
        elif method == "streamGenerateContent":
            self._stream(turn, model, number)
        else:
            self._send_json(200, _response(_parts_of(turn), model, number, final=True))

    def _stream(self, turn: Turn, model: str, number: int) -> None:
        self._start_events()
        try:
            chunks = _chunks(turn) or [[]]  # a turn with nothing to say: one empty chunk
            for index, parts in enumerate(chunks, 1):
                final = index == len(chunks) and not isinstance(turn, Stall)
                # json.dumps escapes every non-ASCII character: no line break can split an event.
                event = f"data: {json.dumps(_response(parts, model, number, final=final))}\r\n\r\n"
                self.wfile.write(event.encode())
                self.wfile.flush()
            # Hold a stalled stream open; a vanished client shows up as a failed write. The
            # SDK skips whitespace between events, and takes nothing else (an SSE comment
            # would stop its parsing), so the ping is a blank line.
            while isinstance(turn, Stall) and not self.shared.closing.wait(_STALL_PING):
                self.wfile.write(b"\r\n")
                self.wfile.flush()
        except OSError:
            pass  # the client went away (an interrupted agent): nothing to answer


_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _google_error(code: int, message: str, reason: str = "") -> dict[str, Any]:
    """An error as Google's APIs say one: the HTTP status ``code``, its canonical ``status``
    name, and an ``ErrorInfo`` detail when there is a ``reason``."""
    status = _STATUS_NAMES.get(code, "INTERNAL" if code >= 500 else "FAILED_PRECONDITION")
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if reason:
        info = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
        }
        error["details"] = [info]
    return {"error": error}


def _model_info(model: str) -> dict[str, Any]:
    return {
        "name": f"models/{model}",
        "version": "001",
        "displayName": model,
        "description": "A scripted model for tests (nodeprov.offline).",
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "thinking": True,
    }


def _side_reply(body: Mapping[str, Any]) -> Text:
    """The fixed reply to a request that takes no scripted turn: for a JSON request the
    smallest object its schema accepts, else ``ok``."""
    config = body.get("generationConfig")
    if not isinstance(config, dict) or config.get("responseMimeType") != "application/json":
        return Text("ok")
    return Text(json.dumps(_instance(config.get("responseJsonSchema") or config.get("responseSchema") or {})))


# A scalar of each type where its schema says no more: an integer counts or ranks from 1 (the
# router's complexity score runs from 1 to 100), a number is a confidence that stays low (the
# loop detector's finds a loop from 0.9).
_SCALARS: dict[str, Any] = {"string": "scripted", "integer": 1, "number": 0, "boolean": False, "null": None}


def _instance(schema: Any) -> Any:
    """A small value that ``schema`` accepts (a JSON schema, or the OpenAPI subset of Gemini's
    ``responseSchema``, whose type names are upper-case): every property given, an enum's
    first value, the first of alternatives, a range's minimum, lists as short as allowed."""
    if not isinstance(schema, dict):
        return {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list):
        return _instance(alternatives[0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    kind = str(kind).lower()
    if kind == "object":
        properties = schema.get("properties")
        return {
            name: _instance(sub) for name, sub in (properties if isinstance(properties, dict) else {}).items()
        }
    if kind == "array":
        return [_instance(schema.get("items"))] * int(schema.get("minItems", 0))
    return schema.get("minimum", _SCALARS.get(kind))


def _parts_of(turn: Turn) -> list[dict[str, Any]]:
    """Every part of ``turn``'s answer, in order."""
    return [part for parts in _chunks(turn) for part in parts]


def _chunks(turn: Turn) -> list[list[dict[str, Any]]]:
    """The parts of ``turn``'s answer as the stream's chunks carry them: the thought, then the
    text, then the call, each on its own."""
    chunks: list[list[dict[str, Any]]] = []
    if isinstance(turn, Text) and turn.thought:
        chunks.append([{"text": turn.thought, "thought": True}])
    if isinstance(turn, Text | FunctionCall | ShellCommand | Stall) and turn.text:
        chunks.append([{"text": turn.text}])
    if isinstance(turn, ShellCommand):
        args = {"command": turn.command, "description": turn.description}
        if turn.dir_path is not None:
            args["dir_path"] = turn.dir_path
        chunks.append([{"functionCall": {"name": "run_shell_command", "args": args}}])
    elif isinstance(turn, FunctionCall):
        chunks.append([{"functionCall": {"name": turn.name, "args": dict(turn.args)}}])
    return chunks


def _response(parts: list[dict[str, Any]], model: str, number: int, *, final: bool) -> dict[str, Any]:
    """A ``GenerateContentResponse`` of ``parts``; the ``final`` one says why it stopped."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if final:
        candidate["finishReason"] = "STOP"
    return {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": model,
        "responseId": f"scripted-{number:06d}",
    }
