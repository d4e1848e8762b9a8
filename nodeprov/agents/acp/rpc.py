"""JSON-RPC 2.0 as the Agent Client Protocol carries it: one JSON object per line on an
agent process's stdin (what the client sends) and stdout (what the agent sends).

:func:`connect` reads the agent's output in a task of its own for as long as its block
lasts: a response goes to the :meth:`Connection.request` waiting for it, a notification to
the ``listen`` callback (called in the order the agent wrote them, never concurrently: a
session's updates are a sequence), a request of the agent's (``fs/read_text_file``,
``session/request_permission``...) to ``serve`` in a task of its own, whose return value is
the result sent back (:class:`RpcError` raised there is sent as the error). The ACP Python
library's ``Connection`` does the same on tasks of its own outside any task group; here every
task lives in the block's, so leaving it (or a failure in it) ends them all.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..._json import loads
from ...errors import AgentError, AgentExitError, AgentOutputError, leaf
from ...spawn import SpawnedProcess

__all__ = ["INTERNAL_ERROR", "METHOD_NOT_FOUND", "Connection", "Listener", "RpcError", "Server", "connect"]

MAX_LINE = 16 * 1024 * 1024  # an image in a prompt or a file read back is one line
METHOD_NOT_FOUND = -32601
"""The error code of an answer to a method the answering side does not have."""
INTERNAL_ERROR = -32603
"""The error code of an answer that failed for another reason."""

Server = Callable[[str, Any], Awaitable[Any]]
"""What answers the agent's requests: ``(method, params) -> result``; raises
:class:`RpcError` to answer with an error."""

Listener = Callable[[str, Any], None]
"""What takes the agent's notifications: ``(method, params)``, in the agent's order."""


class RpcError(AgentError):
    """An error answer: the agent's to a request (from :meth:`Connection.request`), or the
    client's to the agent's (raised by a :data:`Server`)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code, self.message, self.data = code, message, data


class _Waiting:
    """A request sent, until its answer comes."""

    def __init__(self) -> None:
        self.answered = anyio.Event()
        self.answer: dict[str, Any] = {}


class Connection:
    """The client's side of one agent process's ACP channel (made by :func:`connect`)."""

    def __init__(self, process: SpawnedProcess, name: str) -> None:
        self._process, self._name = process, name
        self._sending = anyio.Lock()
        self._next_id = 0
        self._waiting: dict[int, _Waiting] = {}
        self._ended: AgentError | None = None

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result.

        Raises:
            RpcError: the agent answered with an error.
            AgentExitError: the agent's output ended (it exited) before it answered.
            AgentOutputError: the agent wrote something that is not JSON-RPC (the channel
                is over).
        """
        if self._ended is not None:
            raise self._ended
        self._next_id += 1
        number, waiting = self._next_id, _Waiting()
        self._waiting[number] = waiting
        try:
            await self._send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
            await waiting.answered.wait()
        finally:
            del self._waiting[number]
        if (error := waiting.answer.get("error")) is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            code = error.get("code")
            number = code if isinstance(code, int) else INTERNAL_ERROR
            raise RpcError(number, str(error.get("message", "")), error.get("data"))
        if self._ended is not None and "result" not in waiting.answer:
            raise self._ended
        return waiting.answer.get("result")

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer comes)."""
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._sending:  # a line is never cut by another's
            try:
                await self._process.stdin.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                gone = AgentExitError(f"{self._name} closed its input", exit_code=None)
                raise self._ended or gone from None

    async def _read(self, group: TaskGroup, serve: Server, listen: Listener) -> None:
        pending = b""
        try:
            while True:
                try:
                    chunk = await self._process.stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > MAX_LINE:
                    raise AgentOutputError(f"{self._name} wrote a line of more than {MAX_LINE} bytes")
                for line in lines:
                    if line.strip():
                        self._take(self._parse(line), group, serve, listen)
            if pending.strip():
                self._take(self._parse(pending), group, serve, listen)
            self._end(AgentExitError(f"{self._name} closed its output", exit_code=None))
        except AgentError as error:
            self._end(error)
            raise

    def _parse(self, line: bytes) -> dict[str, Any]:
        try:
            message = loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise AgentOutputError(f"{self._name} wrote what is not JSON-RPC: {line[:200]!r}")
        return message

    def _take(self, message: dict[str, Any], group: TaskGroup, serve: Server, listen: Listener) -> None:
        method = message.get("method")
        if method is None:  # an answer
            number = message.get("id")
            waiting = self._waiting.get(number) if isinstance(number, int) else None
            if waiting is not None:
                waiting.answer = message
                waiting.answered.set()
        elif "id" in message:
            group.start_soon(self._answer, message["id"], str(method), message.get("params"), serve)
        else:
            listen(str(method), message.get("params"))

    async def _answer(self, number: Any, method: str, params: Any, serve: Server) -> None:
        try:
            answer: dict[str, Any] = {"result": await serve(method, params)}
        except RpcError as error:
            answer = {"error": {"code": error.code, "message": error.message, "data": error.data}}
        if self._ended is None:
            await self._send({"jsonrpc": "2.0", "id": number, **answer})

    def _end(self, why: AgentError) -> None:
        self._ended = why
        for waiting in self._waiting.values():
            waiting.answered.set()


@asynccontextmanager
async def connect(
    process: SpawnedProcess, *, serve: Server, listen: Listener, name: str = "the agent"
) -> AsyncIterator[Connection]:
    """A :class:`Connection` over ``process``'s stdin and stdout for the block's length.

    Raises:
        AgentOutputError: the agent wrote what is not JSON-RPC, or a line over
            :data:`MAX_LINE` (the block is cancelled).
    """
    connection = Connection(process, name)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(connection._read, group, serve, listen)
            yield connection
            group.cancel_scope.cancel()
    except BaseExceptionGroup as raised:
        raise leaf(raised) from None
