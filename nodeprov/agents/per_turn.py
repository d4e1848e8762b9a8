"""What the agents that run one process per turn share (Codex's ``codex exec``, OpenCode's
``opencode run``, and the next ones): a session whose turn's process writes one JSON event
a line, read in batches into the one message model, the silence bounded only while the
agent waits on its model, the session's state archived after each turn, a detach that
leaves a kept process running.

A subclass starts each turn's process, converts its events (a :class:`TurnConverter`) and
says how a turn that ends without a result ends."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any, ClassVar, Protocol

import anyio

from .._json import loads
from ..errors import AgentOutputError, DeadlineError, NodeprovError
from ..node import NodeHandle
from ..node.keeper import KeepOptions
from ..spawn import SpawnedProcess
from . import Agent, AgentSession, SessionArchive
from ._guard import leave_running
from .messages import Message, Notice

__all__ = ["MAX_LINE", "PerTurnSession", "TurnConverter", "parse_event"]

logger = logging.getLogger("nodeprov.agents")

MAX_LINE = 16 * 1024 * 1024
"""Bytes of one event line at most: a longer one is an :class:`AgentOutputError`."""


def parse_event(line: bytes, cli: str) -> dict[str, Any] | None:
    """One JSON event of ``cli``'s output line; blank and non-JSON lines (log noise) are None.

    Raises:
        AgentOutputError: the line starts as a JSON object but is not one.
    """
    text = line.strip()
    if not text.startswith(b"{"):
        if text:
            logger.debug("skipping a non-JSON line of %s output: %.200r", cli, text)
        return None
    try:
        event = loads(text)
    except ValueError as error:  # UnicodeDecodeError included
        raise AgentOutputError(f"{cli} output is not valid JSON ({error}): {text[:200]!r}") from None
    if not isinstance(event, dict):
        raise AgentOutputError(f"{cli} output is not an event: {text[:200]!r}")
    return event


class TurnConverter(Protocol):
    """One turn's events to messages."""

    @property
    def session_id(self) -> str | None:
        """The agent's session, once an event said it."""

    @property
    def waiting_on_model(self) -> bool:
        """Whether the agent waits on its model now (its silence is then bounded), rather
        than on a tool of its own (whose run time is the tool's)."""

    @property
    def failure(self) -> str:
        """Why the model is not answering, as far as the events said ("" if they did not)."""

    def convert(self, event: dict[str, Any] | None) -> list[Message]: ...


class PerTurnSession(AgentSession):
    """Turns of an agent on a node, one process each (see the module's documentation)."""

    cli: ClassVar[str]
    """The CLI's name, in errors."""

    def __init__(
        self,
        agent: Agent[Any],
        node: NodeHandle,
        project_key: str,
        resume: str | None,
        archive: SessionArchive | None,
        *,
        keep: KeepOptions | None,
    ) -> None:
        self.session_id = resume
        self._agent = agent
        self._node = node
        self._project_key = project_key
        self._archive = archive
        self._keep = keep
        self._process: SpawnedProcess | None = None
        self._interrupted = False
        self._stderr_file = ""

    async def _events(
        self, process: SpawnedProcess, converter: TurnConverter, quiet_limit: float
    ) -> AsyncIterator[list[Message]]:
        """The turn's messages, those of each read together (a generator step per message
        would cost more than the conversion), until its output ends; the session id as the
        events say it. Silent for ``quiet_limit`` seconds while waiting on its model (its
        model-API retry notices do not count), the turn raises :class:`DeadlineError`.

        Raises:
            DeadlineError: as said.
            AgentOutputError: a line is too long or not an event.
        """
        pending = b""
        quiet_since = anyio.current_time()
        while True:
            with anyio.move_on_after(max(0.0, quiet_since + quiet_limit - anyio.current_time())) as waiting:
                try:
                    chunk = await process.stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    chunk = b""
            if waiting.cancelled_caught:
                if not converter.waiting_on_model:  # a tool of the agent's is running
                    quiet_since = anyio.current_time()
                    continue
                why = f" ({converter.failure})" if converter.failure else ""
                raise DeadlineError(
                    f"{self.cli} said nothing for {quiet_limit:g} s while waiting for its model{why}"
                )
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > MAX_LINE:
                raise AgentOutputError(f"{self.cli} output line of more than {MAX_LINE} bytes")
            batch = [message for line in lines for message in converter.convert(parse_event(line, self.cli))]
            if any(not (isinstance(m, Notice) and m.retry) for m in batch):
                quiet_since = anyio.current_time()
            self.session_id = converter.session_id or self.session_id
            if batch:
                yield batch
        if pending.strip():
            yield converter.convert(parse_event(pending, self.cli))
        self.session_id = converter.session_id or self.session_id

    async def _archive_state(self) -> None:
        """Archive the session's state (shielded: a turn that ended keeps what it did)."""
        if self._archive is not None and self.session_id is not None:
            with anyio.CancelScope(shield=True):
                await self._agent.export_state(self._node, self.session_id, self._project_key, self._archive)

    async def detach(self) -> None:
        await leave_running(self._process)
        await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            process, self._process = self._process, None
            if process is not None:
                await self._stop(process)

    async def _stop(self, process: SpawnedProcess) -> None:
        """Close a turn's process (shielded by the caller; never raises)."""
        with suppress(NodeprovError):
            await process.aclose()
