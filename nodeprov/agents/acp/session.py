"""A session of an ACP agent on a node: one agent process, started with the first turn and
serving every turn after it.

The agent is started (behind the stdin guard, or kept), asked to ``initialize`` with the
client's capabilities (:class:`~nodeprov.agents.acp.client.NodeClient`), to authenticate
when its agent entry names a method, then for a session: ``session/new``, or to resume one
``session/load`` (the history it replays is not relayed again) or ``session/resume``, as
the agent offers. A turn is a ``session/prompt`` whose updates are the turn's messages
(:class:`~nodeprov.agents.acp.updates.Turn`) until its answer, the result. An interrupt is
``session/cancel``: the agent ends the turn with the stop reason ``cancelled``.

A kept agent's output is read again from its start by :meth:`AcpSession.follow`: the answers
to the session's requests are there, and the turn's updates; the agent's requests that come
again are answered again (an answer to a request it no longer waits for is dropped by it).
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import AgentError, AgentExitError, ConfigError, DeadlineError, NodeprovError
from ...node import NodeHandle
from ...node.keeper import KeepOptions, KeptProcess, reattach, stopped_by_keeper
from ...prompts import Block, ImageBlock, Prompt
from ...spawn import SpawnedProcess, StopPolicy
from .. import AgentSession, SessionArchive
from .._guard import start_agent
from .._stderr import StderrTail
from ..messages import Message, Notice, Result
from .client import NodeClient
from .rpc import Answer, Connection, Notification
from .updates import Turn

if TYPE_CHECKING:
    from .agent import AcpAgent

__all__ = ["PROTOCOL_VERSION", "AcpSession", "prompt_blocks"]

logger = logging.getLogger("nodeprov.agents.acp")

PROTOCOL_VERSION = 1
_EXIT_WAIT = 5.0  # for an agent whose output ended to exit, so that its status is said


def prompt_blocks(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    """A prompt as ACP content blocks: text, and images as base64 with their media type."""
    return [
        {"type": "image", "mimeType": block.media_type, "data": base64.b64encode(block.data).decode()}
        if isinstance(block, ImageBlock)
        else {"type": "text", "text": block.text}
        for block in blocks
    ]


class AcpSession(AgentSession):
    """An ACP agent on a node (see the module)."""

    def __init__(
        self,
        agent: AcpAgent[Any],
        node: NodeHandle,
        project_key: str,
        resume: str | None,
        archive: SessionArchive | None,
        *,
        keep: KeepOptions | None,
    ) -> None:
        self.session_id = resume
        self._agent, self._node, self._project_key = agent, node, project_key
        self._resume, self._archive, self._keep = resume, archive, keep
        self._client = NodeClient(
            node, agent.options.permission, agent.workdir_on(node), kept=keep is not None
        )
        self._process: SpawnedProcess | None = None
        self._connection: Connection | None = None
        self._stderr: StderrTail | None = None
        self._capabilities: dict[str, Any] = {}
        self._turning = False

    async def turn(self, prompt: Prompt) -> AsyncIterator[Message]:
        blocks = self._agent.prepare_prompt(prompt)
        connection = await self._started()
        blocks = self._seen(blocks)
        if self._turning:
            raise AgentError("a turn of this session is under way")
        self._turning = True
        self._client.cancelled = False
        try:
            number = await connection.send(
                "session/prompt", {"sessionId": self.session_id, "prompt": prompt_blocks(blocks)}
            )
            async for message in self._relayed(self._updates(connection, setup=0, prompt=number)):
                yield message
        finally:
            self._turning = False

    def _seen(self, blocks: tuple[Block, ...]) -> tuple[Block, ...]:
        """``blocks`` as the agent takes them: its ``promptCapabilities`` say whether it
        takes images (the options' ``images`` says what then).

        Raises:
            ConfigError: it takes none, and the options refuse to drop them.
        """
        if not any(isinstance(block, ImageBlock) for block in blocks):
            return blocks
        if (self._capabilities.get("promptCapabilities") or {}).get("image"):
            return blocks
        if self._agent.options.images == "text-only":
            return tuple(block for block in blocks if not isinstance(block, ImageBlock))
        raise ConfigError(
            f"the {self._agent.name} agent takes no images (its prompt capabilities say so): "
            "use the option images='text-only' to send the prompt's text alone"
        )

    async def follow(self, keeper: str, skip: int) -> AsyncIterator[Message]:
        """The kept agent's output from its start: the answers to the session's setup (its
        id in that of ``session/new``, or in the first update after a ``session/load``, whose
        replay of the history is not relayed), then the turn's updates, the first ``skip``
        messages not again."""
        if self._connection is not None:
            raise AgentError("follow() re-attaches a session that has not started")
        self._connected(await reattach(self._node, keeper, settings=self._keep))
        connection = self._connection
        assert connection is not None  # noqa: S101 - narrows a type: set by _connected
        self._turning = True
        setup = 2 if self._agent.authentication() is None else 3  # initialize, authenticate, the session
        try:
            async for message in self._relayed(self._updates(connection, setup=setup, prompt=None)):
                if skip:
                    skip -= 1
                    continue
                yield message
        finally:
            self._turning = False

    async def _relayed(self, messages: AsyncIterator[Message]) -> AsyncIterator[Message]:
        """``messages``, the session's state archived before the result is given (a caller
        that sees it finds the turn's state kept)."""
        async for message in messages:
            if isinstance(message, Result) and self._archive is not None and self.session_id is not None:
                with anyio.CancelScope(shield=True):
                    await self._agent.export_state(
                        self._node, self.session_id, self._project_key, self._archive
                    )
            yield message

    async def _updates(
        self, connection: Connection, *, setup: int, prompt: int | None
    ) -> AsyncIterator[Message]:
        """The turn's messages from the inbox, after ``setup`` answers still to come (a
        followed agent's), to the result made of the prompt's answer (request ``prompt``, or
        the first answer with a stop reason); a notice with the session's id first."""
        turn: Turn | None = None
        if setup == 0 and self.session_id is not None:
            turn = Turn(self.session_id)
            yield Notice("session", session_id=self.session_id, raw={"sessionId": self.session_id})
        while True:
            item = await self._next(connection, turn)
            for refused in self._client.refusals():
                for message in turn.take(refused) if turn is not None else []:
                    yield message
            if isinstance(item, Answer):
                if setup:
                    setup -= 1
                    made = item.result.get("sessionId") if isinstance(item.result, dict) else None
                    self.session_id = made if isinstance(made, str) else self.session_id
                elif item.id == prompt or (prompt is None and _is_prompt_answer(item.result)):
                    answer = item.value()
                    turn = turn or Turn(self.session_id or "")
                    for message in turn.flush():
                        yield message
                    yield turn.result(answer if isinstance(answer, dict) else {})
                    return
                continue
            if setup or item.method != "session/update" or not isinstance(item.params, dict):
                continue  # a followed agent's replay of a loaded session's history among them
            said, update = item.params.get("sessionId"), item.params.get("update")
            if turn is None and isinstance(said, str):
                self.session_id = self.session_id or said
                turn = Turn(self.session_id)
                yield Notice("session", session_id=self.session_id, raw={"sessionId": self.session_id})
            if turn is not None and said == self.session_id and isinstance(update, dict):
                for message in turn.take(update):
                    yield message

    async def _started(self) -> Connection:
        """The agent's connection: the agent started, initialized, its session made or
        loaded, on first use."""
        if self._connection is not None:
            return self._connection
        home = self._agent.home_of(self._node, self._project_key)
        await self._agent.prepare_home(self._node, home)
        process, _ = await start_agent(
            self._node.spawn,
            self._agent.acp_command(self._node, home, resume=self._resume),
            StopPolicy(),
            keep_with=self._keep,
            node=self._node,
        )
        self._connected(process)
        connection = self._connection
        assert connection is not None  # noqa: S101 - narrows a type: set by _connected
        try:
            await self._set_up(connection)
        except BaseException:
            await self.aclose()  # a half-set-up agent serves no turn: the next one starts afresh
            raise
        return connection

    async def _set_up(self, connection: Connection) -> None:
        """``initialize``, ``authenticate`` where the agent needs it, and the session made or
        loaded."""
        initialized, _ = await self._request(
            connection,
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": self._client.capabilities(),
                "clientInfo": {"name": "nodeprov", "title": "nodeprov", "version": version("nodeprov")},
            },
        )
        self._capabilities = (
            initialized.get("agentCapabilities") or {} if isinstance(initialized, dict) else {}
        )
        method = self._agent.authentication()
        if method is not None:
            await self._request(connection, "authenticate", {"methodId": method})
        cwd = self._agent.workdir_on(self._node)
        if self._resume is None:
            made, _ = await self._request(connection, "session/new", {"cwd": cwd, "mcpServers": []})
            self.session_id = str(made["sessionId"])
        else:
            await self._request(
                connection, self._resume_method(), {"sessionId": self._resume, "cwd": cwd, "mcpServers": []}
            )
            await self._settled(connection)

    async def _settled(self, connection: Connection) -> None:
        """Drop what the agent says until it has been quiet for its ``history_settle`` (the
        replay of a loaded session's history, when it comes after the answer)."""
        settle = self._agent.history_settle()
        while settle > 0:
            with anyio.move_on_after(settle) as quiet:
                await self._next(connection, None)
            if quiet.cancel_called:
                return

    def _resume_method(self) -> str:
        """``session/load`` where the agent offers it, else ``session/resume``."""
        if self._capabilities.get("loadSession"):
            return "session/load"
        if "resume" in (self._capabilities.get("sessionCapabilities") or {}):
            return "session/resume"
        raise ConfigError(
            f"the {self._agent.name} agent cannot load or resume a session (its capabilities say so)"
        )

    async def _request(
        self, connection: Connection, method: str, params: dict[str, Any]
    ) -> tuple[Any, list[Notification]]:
        try:
            return await connection.request(method, params)
        except AgentExitError as error:
            raise await self._exited(error) from None

    async def _next(self, connection: Connection, turn: Turn | None) -> Notification | Answer:
        """The next item of the inbox. The agent's silence is bounded by the options'
        ``no_output_timeout`` (a run of text chunks counts, though it is one message only
        once whole), except while a tool call of the turn runs.

        Raises:
            DeadlineError: as said.
            AgentExitError: the agent's output ended (its status and stderr said).
        """
        limit = self._agent.options.no_output_timeout
        try:
            item = connection.receive_nowait()  # what came already: no deadline to set
            if item is not None:
                return item
            while True:
                with anyio.move_on_after(limit if limit is not None else math.inf) as waiting:
                    return await connection.receive()
                if not waiting.cancel_called or not (turn is not None and turn.tools_running):
                    name = self._agent.name
                    raise DeadlineError(
                        f"the {name} agent said nothing for {limit:g} s while waiting for its model"
                    )
        except AgentExitError as error:
            raise await self._exited(error) from None

    async def _exited(self, error: AgentExitError) -> AgentExitError:
        """``error`` with the agent's exit status and the end of its stderr."""
        process = self._process
        if process is None:
            return error
        with anyio.move_on_after(_EXIT_WAIT):
            await process.wait()
        if self._stderr is not None:
            await self._stderr.settled()
        tail = self._stderr.text if self._stderr is not None else ""
        code = process.returncode
        said = stopped_by_keeper(process) or (
            f"the {self._agent.name} agent exited with status {code}" if code is not None else str(error)
        )
        last = f": {self._stderr.last}" if self._stderr is not None and self._stderr.last else ""
        return AgentExitError(f"{said}{last}", exit_code=code, stderr_tail=tail)

    def _connected(self, process: SpawnedProcess) -> None:
        self._process = process
        self.keeper = process.keeper if isinstance(process, KeptProcess) else None
        self._connection = Connection(process, self._client, name=f"the {self._agent.name} agent")
        self._stderr = StderrTail(process)

    async def interrupt(self) -> None:
        """``session/cancel``: the agent ends the turn (stop reason ``cancelled``), and the
        permission requests it makes meanwhile are answered ``cancelled``."""
        connection = self._connection
        if connection is None or not self._turning or self.session_id is None:
            return
        self._client.cancelled = True
        with suppress(AgentError):
            await connection.notify("session/cancel", {"sessionId": self.session_id})

    async def detach(self) -> None:
        if isinstance(self._process, KeptProcess):
            with anyio.CancelScope(shield=True):
                await self._process.detach()
                self._process = None
        await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            connection, self._connection = self._connection, None
            process, self._process = self._process, None
            if connection is not None:
                await connection.aclose()
            await self._client.aclose()
            if process is not None:
                try:
                    await process.aclose()
                except NodeprovError as error:
                    logger.warning("stopping the %s agent: %s", self._agent.name, error)
            if self._stderr is not None:
                await self._stderr.aclose()


def _is_prompt_answer(result: Any) -> bool:
    return isinstance(result, dict) and "stopReason" in result
