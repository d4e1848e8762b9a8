"""What the scripted model servers share: a script of turns played to agent requests, every
request recorded, an HTTP server on 127.0.0.1 in a daemon thread, sync and async context
management. :class:`~nodeprov.offline.ScriptedModel` (Messages API) and
:class:`~nodeprov.offline.ScriptedResponses` (Responses API) add their protocol."""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import anyio
import anyio.to_thread

# How often a server looks at its shutdown flag: stop() waits up to this long (the
# default, 0.5 s, was most of a short `nodeprov run`'s shutdown).
_POLL_INTERVAL = 0.02
_STALL_PING = 0.2  # seconds between the comments that keep a stalled stream open


@dataclass(frozen=True)
class Stall:
    """A model turn that starts streaming ``text`` and then sends nothing more: the response
    stays open until the client goes away or the server stops, which lets a test interrupt
    an agent in the middle of a model call. The same turn on every scripted API."""

    text: str = "thinking"


@dataclass(frozen=True)
class HttpError:
    """A model turn answered with an HTTP error status instead of a stream. An agent that
    retries (Codex and OpenCode do, on a 5xx) takes the next turn with each retry: a
    persistent failure is best scripted as the ``fallback``."""

    status: int = 500
    message: str = "scripted failure"


def decode_data_url(url: object) -> tuple[str, bytes] | None:
    """The media type and bytes of a base64 ``data:`` URL (how OpenAI's APIs carry an image),
    else None."""
    if not isinstance(url, str) or not url.startswith("data:"):
        return None
    header, _, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if encoding != "base64":
        return None
    try:
        return media_type, base64.b64decode(data, validate=True)
    except binascii.Error:
        return None


def strings_of(value: Any) -> Iterator[str]:
    """Every string of a request's content, in order: a string, the items of a list, the
    ``text`` of an object (how OpenAI's APIs nest message text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)
    elif isinstance(value, dict) and "text" in value:
        yield from strings_of(value["text"])


class _Recorded(Protocol):
    @property
    def is_agent_turn(self) -> bool: ...


TurnT = TypeVar("TurnT")
RecordT = TypeVar("RecordT", bound=_Recorded)


@dataclass
class ScriptState(Generic[TurnT, RecordT]):
    """The script and the record, shared by the server's request threads under ``lock``."""

    script: list[TurnT]
    fallback: TurnT
    requests: list[RecordT] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    ids: Iterator[int] = field(default_factory=itertools.count)

    def take(self, record: RecordT, otherwise: TurnT) -> tuple[TurnT, int]:
        """Record a request; return its turn (the script's next for an agent request, else
        ``otherwise``) and a number unique on this server."""
        with self.lock:
            self.requests.append(record)
            if record.is_agent_turn:
                turn = self.script.pop(0) if self.script else self.fallback
            else:
                turn = otherwise
            return turn, next(self.ids)


class ScriptHandler(BaseHTTPRequestHandler):
    """Base of the servers' request handlers: quiet, HTTP/1.1, JSON and event-stream replies."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # tests read the server's requests instead of a log

    def do_HEAD(self) -> None:
        self._send_json(200, {})

    def _body(self) -> Any:
        """The request's JSON body (``{}`` when empty); ``ValueError`` if it is not JSON."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_events(self) -> None:
        """Begin a server-sent event stream that ends with the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True


class OpenAIHandler(ScriptHandler):
    """What the OpenAI-style APIs (Responses, Chat Completions) answer alike: the model list
    on GET, 400 for a body that is no JSON object, 404 off the API's ``paths``, a scripted
    :class:`HttpError` as OpenAI's error, and a turn as a stream (held open, pinged, for a
    :class:`Stall`) or as one answer. A subclass gives the API's own parts."""

    shared: Any  # the API's ScriptState, with its ``model`` and ``closing``
    paths: ClassVar[frozenset[str]]
    ok: ClassVar[Any]
    """The turn a request past the script gets (a text turn of the API's)."""
    stream_end: ClassVar[bytes] = b""
    """What ends a stream that was not held open."""

    def _headers(self) -> dict[str, str]:
        return {key.lower(): value for key, value in self.headers.items()}

    def _record(self, method: str, body: dict[str, Any], is_agent: bool) -> Any:
        """The API's record of this request."""
        raise NotImplementedError

    def _is_agent(self, path: str, body: dict[str, Any]) -> bool:
        """Whether the request is an agent's turn (else the agent's own bookkeeping)."""
        raise NotImplementedError

    def _models(self) -> dict[str, Any]:
        raise NotImplementedError

    def _frames(self, turn: Any, body: dict[str, Any], number: int) -> Iterator[bytes]:
        """The stream of ``turn``, frame by frame."""
        raise NotImplementedError

    def _answer(self, turn: Any, body: dict[str, Any], number: int) -> dict[str, Any]:
        """``turn`` as one answer (a request that does not stream)."""
        raise NotImplementedError

    def do_GET(self) -> None:
        self.shared.take(self._record("GET", {}, False), self.ok)
        path = self.path.split("?", 1)[0]
        if path in {"/v1/models", "/models"}:
            self._send_json(200, self._models())
        else:
            self._send_json(404, openai_error("not_found", f"no route {path}"))

    def do_POST(self) -> None:
        try:
            body = self._body()
        except ValueError:
            self._send_json(400, openai_error("invalid_request_error", "body is not JSON"))
            return
        if not isinstance(body, dict):
            self._send_json(400, openai_error("invalid_request_error", "body is not a JSON object"))
            return
        path = self.path.split("?", 1)[0]
        turn, number = self.shared.take(self._record("POST", body, self._is_agent(path, body)), self.ok)
        if path not in self.paths:
            self._send_json(404, openai_error("not_found", f"no route {path}"))
        elif isinstance(turn, HttpError):
            kind = "server_error" if turn.status >= 500 else "invalid_request_error"
            self._send_json(turn.status, openai_error(kind, turn.message))
        elif body.get("stream"):
            self._stream(turn, body, number)
        else:
            self._send_json(200, self._answer(turn, body, number))

    def _stream(self, turn: Any, body: dict[str, Any], number: int) -> None:
        self._start_events()
        try:
            for frame in self._frames(turn, body, number):
                self.wfile.write(frame)
                self.wfile.flush()
            if isinstance(turn, Stall):
                # Hold the stream open; a vanished client shows up as a failed write. An SSE
                # comment is no event, so the client's idle timer is not reset by it.
                while not self.shared.closing.wait(_STALL_PING):
                    self.wfile.write(b": ping\n\n")
                    self.wfile.flush()
                return
            if self.stream_end:
                self.wfile.write(self.stream_end)
                self.wfile.flush()
        except OSError:
            pass  # the client went away (an interrupted agent): nothing to answer


def openai_error(code: str, message: str) -> dict[str, Any]:
    """An error as OpenAI's APIs say one."""
    return {"error": {"type": code, "code": code, "message": message, "param": None}}


class ScriptedServer(Generic[TurnT, RecordT]):
    """A scripted API on ``127.0.0.1:<free port>``, answering with ``handler`` (whose
    ``shared`` is ``state``) in a thread called ``name``. Once the script is used up every
    further agent request gets the fallback turn."""

    def __init__(self, state: ScriptState[TurnT, RecordT], handler: type[ScriptHandler], name: str) -> None:
        self._state = state
        self._handler = handler
        self._name = name
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``; only while the server runs."""
        if self._server is None:
            raise RuntimeError(f"the {self._name} server is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[RecordT]:
        """Every request received so far, oldest first."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def agent_requests(self) -> list[RecordT]:
        """The requests that consumed (or would have consumed) a scripted turn."""
        return [r for r in self.requests if r.is_agent_turn]

    def extend(self, turns: Sequence[TurnT]) -> None:
        """Append turns to the script (e.g. before resuming a session)."""
        with self._state.lock:
            self._state.script.extend(turns)

    def start(self) -> None:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        if self._server is not None:
            return
        self._state.closing.clear()
        handler = type("Handler", (self._handler,), {"shared": self._state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL},
            name=self._name,
            daemon=True,
        ).start()

    def stop(self) -> None:
        """Stop serving and release every stalled response; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._state.closing.set()
        server.shutdown()
        server.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)
