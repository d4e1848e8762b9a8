"""nodeprov's side of an editor's ACP connection: each editor session is one run, each
prompt one turn of it (see :mod:`nodeprov.editors`)."""

from __future__ import annotations

import dataclasses
import logging
from contextlib import suppress
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..agents import Result
from ..agents.acp.rpc import INTERNAL_ERROR, METHOD_NOT_FOUND, Connection, Notification, Pipes, RpcError
from ..errors import AgentError, ConfigError, NodeprovError, RunStateError
from ..prompts import Prompt
from ..runs import AgentMessage, Orchestrator, Run, RunSpec
from ..runs.spec import ResumeFields
from ..store import new_id
from .updates import history_updates, prompt_of, updates_of

__all__ = ["INVALID_PARAMS", "PROTOCOL_VERSION", "RESOURCE_NOT_FOUND", "EditorServer"]

logger = logging.getLogger("nodeprov.editors")

PROTOCOL_VERSION = 1
"""The ACP version served (the editor's asked for, when it is another, is answered with it)."""
INVALID_PARAMS = -32602
"""JSON-RPC's code for a request whose parameters are wrong (a prompt that is refused)."""
RESOURCE_NOT_FOUND = -32002
"""ACP's code for a session that does not exist."""
CANCELLED = "cancelled in the editor"
"""The reason of the pause an editor's ``session/cancel`` makes."""
LEFT = "the editor left"
"""The reason of the pause of a turn under way when the editor closes the connection."""
_LEAVE_TIMEOUT = 120.0  # pausing what runs and destroying kept nodes, once the editor left


@dataclass
class _Session:
    id: str
    started: bool = False  # its run is in the store (a prompt started it, or a load found it)
    run: Run | None = None  # its turn under way, or its last
    busy: bool = False
    cancelled: bool = False


class EditorServer:
    """Serves one editor over ACP with ``plane``'s runs, each started as ``template`` says
    (its prompt replaced by the session's first; each later prompt resumes the run).

    Every turn keeps its node for the next (``keep_node``) and ends in a pause
    (``pause_after_turn``), so a session's turns share their node and the agent's session;
    a cancel pauses the turn (kind ``human``). When the editor leaves, a turn under way is
    paused with its node released, and the nodes kept for the sessions' next turns are
    destroyed: a ``session/load`` later resumes the run on a fresh node, from its checkpoint.
    """

    def __init__(self, plane: Orchestrator, template: RunSpec) -> None:
        self._plane = plane
        self._template = dataclasses.replace(template, keep_node=True, pause_after_turn=True)
        self._sessions: dict[str, _Session] = {}
        self._connection: Connection | None = None

    async def serve(self, pipes: Pipes) -> None:
        """Serve the editor on ``pipes`` until it closes them (or writes what is not JSON-RPC),
        then leave as the class says. Never raises for the editor's doing."""
        connection = self._connection = Connection(pipes, self._answer, name="the editor")
        try:
            async with anyio.create_task_group() as tasks:
                await self._listen(connection, tasks)
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LEAVE_TIMEOUT):
                await self._leave()
            await connection.aclose()

    async def _listen(self, connection: Connection, tasks: TaskGroup) -> None:
        while True:
            try:
                item = await connection.receive()
            except AgentError as why:
                logger.info("the editor's connection ended: %s", why)
                return
            if isinstance(item, Notification) and item.method == "session/cancel":
                with suppress(RpcError):  # a cancel of no session is no cancel
                    tasks.start_soon(self._cancel, _session_id(item.params))

    async def _answer(self, method: str, params: Any) -> Any:
        if method == "initialize":
            return _initialized()
        if method == "authenticate":
            return {}  # nothing to sign in to: the agents' keys are this process's to give
        if method == "session/new":
            session = _Session(new_id("run"))
            self._sessions[session.id] = session
            return {"sessionId": session.id}
        if method == "session/load":
            await self._load(_session_id(params))
            return {}
        if method == "session/prompt":
            return {"stopReason": await self._prompt(self._session(params), params.get("prompt"))}
        raise RpcError(METHOD_NOT_FOUND, f"{method} is not served")

    def _session(self, params: Any) -> _Session:
        session = self._sessions.get(_session_id(params))
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no session {_session_id(params)!r} here: load it first")
        return session

    async def _load(self, session_id: str) -> None:
        """Replay the run's turns to the editor, and hold it as a session whose next prompt
        resumes it."""
        if session_id in self._sessions and self._sessions[session_id].busy:
            raise RpcError(INVALID_PARAMS, f"session {session_id} has a prompt under way")
        if await self._plane.store.run(session_id) is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"no run {session_id} in the store")
        async for event in self._plane.events(session_id, follow=False):
            for update in history_updates(event):
                await self._tell(session_id, update)
        self._sessions[session_id] = _Session(session_id, started=True)

    async def _prompt(self, session: _Session, blocks: Any) -> str:
        """Run the session's next turn, telling the editor its messages; its stop reason."""
        if session.busy:
            raise RpcError(INVALID_PARAMS, f"session {session.id} has a prompt under way")
        session.busy, session.cancelled = True, False
        try:
            try:
                prompt = prompt_of(blocks)
            except ConfigError as refused:
                raise RpcError(INVALID_PARAMS, str(refused)) from None
            run = session.run = await self._turn(session, prompt)
            if session.cancelled:  # the cancel came while the turn started
                await _pause(run, CANCELLED)
            ended_well = False
            async for event in run.events():
                if isinstance(event, AgentMessage):
                    if isinstance(event.message, Result):
                        ended_well = not event.message.is_error
                    for update in updates_of(event.message):
                        await self._tell(session.id, update)
            outcome = await run.wait()
        finally:
            session.busy = False
        if outcome == "error":
            raise RpcError(INTERNAL_ERROR, run.error or "the run failed")
        return "end_turn" if ended_well else "cancelled"

    async def _turn(self, session: _Session, prompt: Prompt) -> Run:
        """The session's run started with ``prompt``, or resumed with it."""
        template = self._template
        try:
            if not session.started:
                run = await self._plane.start(dataclasses.replace(template, prompt=prompt, run_id=session.id))
                session.started = True
                return run
            how = ResumeFields(
                message=prompt,
                model=template.model,
                options=template.options,
                provider_settings=template.provider_settings,
                deadline=template.deadline,
                idle_timeout=template.idle_timeout,
                keep_node=True,
                pause_after_turn=True,
                agent_grace=template.agent_grace,
            )
            return await self._plane.resume_run(session.id, **how)
        except ConfigError as refused:
            raise RpcError(INVALID_PARAMS, str(refused)) from None
        except NodeprovError as error:
            raise RpcError(INTERNAL_ERROR, str(error)) from None

    async def _cancel(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is None or not session.busy:
            return
        session.cancelled = True
        if session.run is not None:
            await _pause(session.run, CANCELLED)

    async def _tell(self, session_id: str, update: dict[str, Any]) -> None:
        assert self._connection is not None  # noqa: S101 - narrows a type: set before anything is served
        await self._connection.notify("session/update", {"sessionId": session_id, "update": update})

    async def _leave(self) -> None:
        for session in self._sessions.values():
            if session.run is not None and session.run.state.live:
                await _pause(session.run, LEFT, keep_node=False)
        for session in self._sessions.values():
            if session.started:
                with suppress(NodeprovError):
                    await self._plane.release_kept_node(session.id)


async def _pause(run: Run, reason: str, *, keep_node: bool = True) -> None:
    with suppress(RunStateError):  # it paused at its turn's end, or is over, already
        await run.pause("human" if reason == CANCELLED else "system", reason, keep_node=keep_node)


def _initialized() -> dict[str, Any]:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": False, "sse": False},
        },
        "authMethods": [],
        "agentInfo": {"name": "nodeprov", "title": "nodeprov", "version": version("nodeprov")},
    }


def _session_id(params: Any) -> str:
    session_id = params.get("sessionId") if isinstance(params, dict) else None
    if not isinstance(session_id, str):
        raise RpcError(INVALID_PARAMS, "sessionId is missing")
    return session_id
