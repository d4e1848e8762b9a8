"""JSON-RPC 2.0 as the Agent Client Protocol carries it: one JSON object per line on an
agent process's stdin (what the client sends) and stdout (what the agent sends).

A :class:`Connection` reads the agent's output in a task of its own (a :class:`Detached`
one: a session's turns may run in any task, and a task group is tied to the task that
entered it). What the client awaits comes through one inbox, in the order the agent wrote
it: the answers to the requests it sent (:meth:`Connection.send`) and the agent's
notifications (a session's updates). So a turn sees every update the agent wrote before the
answer that ends it, and a ``session/load`` the history it replays. A request of the
agent's (``fs/read_text_file``, ``session/request_permission``...) goes to ``serve`` in a
task of its own, whose return value is the result sent back (:class:`RpcError` raised there
is sent as the error, any other :class:`NodeprovError` as an internal error).

The inbox holds :data:`INBOX` items: an agent that writes faster than its client takes
waits for it (its pipe fills), as it would on a terminal. A read's lines go into it
together, and what waits there is taken at once: the event loop is passed once a read, not
once a line (which cost two thirds of the relay's time; see the ACP relay in
docs/benchmarks.md).

The ACP Python library's ``Connection`` was not used: it runs its receive loop and a task
per request as bare asyncio tasks that nothing awaits or bounds at close, and logs their
failures with ``logging.exception``; here :meth:`Connection.aclose` cancels and waits for
every task, bounded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..._json import loads
from ...errors import AgentError, AgentExitError, AgentOutputError, NodeprovError
from .._detached import Detached

__all__ = [
    "INBOX",
    "INTERNAL_ERROR",
    "MAX_LINE",
    "METHOD_NOT_FOUND",
    "Answer",
    "Connection",
    "Notification",
    "Pipes",
    "RpcError",
    "Server",
]

logger = logging.getLogger("nodeprov.agents.acp")

MAX_LINE = 16 * 1024 * 1024  # an image in a prompt or a file read back is one line
INBOX = 256
METHOD_NOT_FOUND = -32601
"""The error code of an answer to a method the answering side does not have."""
INTERNAL_ERROR = -32603
"""The error code of an answer that failed for another reason."""
_CLOSE_TIMEOUT = 5.0  # for the tasks serving the agent's requests to end once cancelled


class RpcError(AgentError):
    """An error answer: the agent's to a request (:meth:`Answer.value`), or the client's to
    the agent's (raised by a :data:`Server`)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code, self.message, self.data = code, message, data


@dataclass(frozen=True)
class Notification:
    """A notification of the agent's."""

    method: str
    params: Any


@dataclass(frozen=True)
class Answer:
    """The agent's answer to request ``id``: its ``result``, or its ``error``."""

    id: int
    result: Any = None
    error: RpcError | None = None

    def value(self) -> Any:
        """The result.

        Raises:
            RpcError: the agent answered with an error.
        """
        if self.error is not None:
            raise self.error
        return self.result


class Pipes(Protocol):
    """The other side's input (what this side sends) and output (what it reads): an agent
    process's (:class:`~nodeprov.spawn.SpawnedProcess`), or an editor's, which are this
    process's own standard output and input (``nodeprov acp``)."""

    @property
    def stdin(self) -> ByteSendStream: ...

    @property
    def stdout(self) -> ByteReceiveStream: ...


Server = Callable[[str, Any], Awaitable[Any]]
"""What answers the agent's requests: ``(method, params) -> result``. Raises
:class:`RpcError` to answer with that error (:data:`METHOD_NOT_FOUND` for a method it does
not serve); a :class:`NodeprovError` is answered as an internal error with its message."""


class Connection:
    """The client's side of one agent process's ACP channel; reads from construction to
    :meth:`aclose`. One task takes from the inbox at a time (a session's turn)."""

    def __init__(self, process: Pipes, serve: Server, *, name: str = "the agent") -> None:
        self._process, self._serve, self._name = process, serve, name
        self._sending = anyio.Lock()
        self._next_id = 0
        self._ended: AgentError | None = None
        self._inbox: MemoryObjectSendStream[Notification | Answer]
        self._taken: MemoryObjectReceiveStream[Notification | Answer]
        self._inbox, self._taken = anyio.create_memory_object_stream[Notification | Answer](INBOX)
        self._serving: set[Detached] = set()
        self._reader = Detached(self._read())

    @property
    def ended(self) -> AgentError | None:
        """Why the channel is over (the agent's output ended, or was not JSON-RPC), if it is."""
        return self._ended

    async def send(self, method: str, params: Any = None) -> int:
        """Send a request; its :class:`Answer` comes through :meth:`receive`. Its id.

        Raises:
            AgentError: the channel is over (why it ended), or the agent's input is closed.
        """
        self._next_id += 1
        number = self._next_id
        await self._write({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        return number

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer comes).

        Raises:
            AgentError: as :meth:`send`.
        """
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def receive(self) -> Notification | Answer:
        """The next answer or notification, in the agent's order: at once if one is waiting
        (what one read of the agent's output held is taken in one pass of the event loop).

        Raises:
            AgentExitError: the agent's output ended (it exited) and all it wrote was taken.
            AgentOutputError: the agent wrote what is not JSON-RPC, or a line over
                :data:`MAX_LINE` (the channel is over).
        """
        item = self.receive_nowait()
        if item is not None:
            return item
        try:
            return await self._taken.receive()
        except anyio.EndOfStream:
            assert self._ended is not None  # noqa: S101 - the reader ends the inbox only once it said why
            raise self._ended from None

    def receive_nowait(self) -> Notification | Answer | None:
        """The next answer or notification if one is waiting (None if not), without waiting
        or passing the event loop: a read's lines are taken together.

        Raises:
            AgentExitError, AgentOutputError: as :meth:`receive`.
        """
        try:
            return self._taken.receive_nowait()
        except anyio.WouldBlock:
            return None
        except anyio.EndOfStream:
            assert self._ended is not None  # noqa: S101 - the reader ends the inbox only once it said why
            raise self._ended from None

    async def request(self, method: str, params: Any = None) -> tuple[Any, list[Notification]]:
        """Send a request and take from the inbox until its answer: its result, and the
        notifications that came before it.

        Raises:
            RpcError: the agent answered with an error.
            AgentError: as :meth:`send` and :meth:`receive`.
        """
        number = await self.send(method, params)
        heard: list[Notification] = []
        while True:
            item = await self.receive()
            if isinstance(item, Notification):
                heard.append(item)
            elif item.id == number:
                return item.value(), heard

    async def _write(self, message: dict[str, Any]) -> None:
        if self._ended is not None:
            raise self._ended
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._sending:  # a line is never cut by another's
            try:
                await self._process.stdin.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise self._ended or AgentExitError(
                    f"{self._name} closed its input", exit_code=None
                ) from None

    async def _read(self) -> None:
        pending = b""
        async with self._inbox:
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
                            await self._take(self._parse(line))
                if pending.strip():
                    await self._take(self._parse(pending))
                self._ended = AgentExitError(f"{self._name} closed its output", exit_code=None)
            except AgentError as error:
                self._ended = error

    def _parse(self, line: bytes) -> dict[str, Any]:
        try:
            message = loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise AgentOutputError(f"{self._name} wrote what is not JSON-RPC: {line[:200]!r}")
        return message

    async def _take(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            number = message.get("id")
            if isinstance(number, int):
                await self._put(Answer(number, message.get("result"), _error(message.get("error"))))
        elif "id" in message:
            self._serving = {task for task in self._serving if not task.done}
            self._serving.add(Detached(self._answer(message["id"], str(method), message.get("params"))))
        else:
            await self._put(Notification(str(method), message.get("params")))

    async def _put(self, item: Notification | Answer) -> None:
        """``item`` into the inbox: at once where it has room (a read's lines go in together,
        not one per pass of the event loop), else once it has."""
        try:
            self._inbox.send_nowait(item)
        except anyio.WouldBlock:
            await self._inbox.send(item)

    async def _answer(self, number: Any, method: str, params: Any) -> None:
        try:
            answer: dict[str, Any] = {"result": await self._serve(method, params)}
        except RpcError as error:
            answer = {"error": {"code": error.code, "message": error.message, "data": error.data}}
        except NodeprovError as error:
            answer = {"error": {"code": INTERNAL_ERROR, "message": str(error)}}
        except Exception as error:  # a defect of the server's: the agent still gets its answer
            logger.warning("serving %s's %s failed", self._name, method, exc_info=True)
            answer = {"error": {"code": INTERNAL_ERROR, "message": f"{method} failed: {error!r}"}}
        try:
            await self._write({"jsonrpc": "2.0", "id": number, **answer})
        except AgentError:
            logger.debug("the answer to %s %s found %s gone", method, number, self._name)

    async def aclose(self) -> None:
        """Stop reading and serving (the process is its owner's to close): cancel the tasks
        and wait for them, bounded. Idempotent, shielded; never raises."""
        with anyio.CancelScope(shield=True):
            tasks = [self._reader, *self._serving]
            for task in tasks:
                task.cancel()
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                for task in tasks:
                    await task.wait()
            self._taken.close()


def _error(error: Any) -> RpcError | None:
    if error is None:
        return None
    error = error if isinstance(error, dict) else {"message": str(error)}
    code = error.get("code")
    return RpcError(
        code if isinstance(code, int) else INTERNAL_ERROR, str(error.get("message", "")), error.get("data")
    )
