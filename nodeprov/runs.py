"""Runs: what a control plane calls.

:class:`Orchestrator` starts runs (provision a node, drive the agent through the SDK bridge,
relay every message as a typed :class:`RunEvent`, destroy the node), pauses and resumes them,
and reconciles what a dead control plane left behind. State lives in a
:class:`~nodeprov.store.Store`; transcripts are mirrored into it during runs, so a run whose
node died can resume on a new node.

Pause and resume are workflow concerns, not provider capabilities: pausing interrupts the
agent (the SDK's interrupt, then abort), saves a :class:`~nodeprov.store.SnapshotRecord`
with a single-use token, and keeps or releases the node. Resuming takes the token, attaches
to the kept node or provisions a fresh one (writing the agent's transcript onto it first),
and continues the agent's session with a message.

Nothing secret is stored or emitted: the agent options' ``env`` never reaches the store or
an event; callers pass their options (with credentials) again when resuming.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, Message, ResultMessage, SystemMessage

# Pinned with the SDK: the CLI's own project-directory naming (see pyproject.toml).
from claude_agent_sdk._internal.sessions import _sanitize_path

from .claude import NodeTransport
from .errors import ConfigError, NodeGoneError, NodeprovError
from .node import NodeConfig, NodeHandle, default_owner, owner_alive
from .registry import get_provider
from .spawn import SpawnOptions
from .store import RunRecord, SnapshotRecord, Store, dumps, new_id, now
from .store.transcripts import entries_to_jsonl

__all__ = [
    "AgentMessage",
    "NodeReady",
    "NodeReleased",
    "Orchestrator",
    "PauseKind",
    "Run",
    "RunEvent",
    "RunFinished",
    "RunPaused",
    "RunStarted",
    "RunStateError",
]

logger = logging.getLogger("nodeprov.runs")

PauseKind = Literal["human", "external", "system"]
_PAUSE_KINDS = ("human", "external", "system")
_RESUMABLE = ("paused", "failed")
_SHUTDOWN = {"kind": "system", "reason": "the control plane is shutting down", "keep_node": False}
# Agent options that are kept with a run (for display and for resuming without options).
_STORED_OPTIONS = ("model", "permission_mode", "max_turns", "allowed_tools", "disallowed_tools", "cwd")


class RunStateError(NodeprovError):
    """The run is not in a state that allows this (resuming a run that is not paused,
    pausing one that has finished, another control plane got there first)."""


# -- events --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to a run. ``seq`` counts from 1 within a run."""

    kind: ClassVar[str] = "event"
    run_id: str
    seq: int
    at: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict, e.g. for server-sent events: ``{"type": kind, ...fields}``."""
        return {
            "type": self.kind,
            **{f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)},
        }


@dataclass(frozen=True)
class RunStarted(RunEvent):
    kind: ClassVar[str] = "run.started"
    prompt: str
    provider: str
    resumed_from: str | None = None


@dataclass(frozen=True)
class NodeReady(RunEvent):
    kind: ClassVar[str] = "node.ready"
    node_id: str
    reused: bool
    transcript_restored: bool


@dataclass(frozen=True)
class AgentMessage(RunEvent):
    kind: ClassVar[str] = "agent.message"
    message: Message


@dataclass(frozen=True)
class RunPaused(RunEvent):
    kind: ClassVar[str] = "run.paused"
    pause_kind: str
    reason: str
    token: str
    node_kept: bool


@dataclass(frozen=True)
class RunFinished(RunEvent):
    kind: ClassVar[str] = "run.finished"
    outcome: str  # ok | paused | error
    error: str | None
    agent_session_id: str | None


@dataclass(frozen=True)
class NodeReleased(RunEvent):
    kind: ClassVar[str] = "node.released"
    node_id: str
    kept: bool


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        body = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"kind": type(value).__name__, **body}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


# -- runs ------------------------------------------------------------------------------


@dataclass
class _Pause:
    kind: str
    reason: str
    keep_node: bool
    done: anyio.Event = field(default_factory=anyio.Event)
    snapshot: SnapshotRecord | None = None


class Run:
    """A run in this control plane. Subscribe with :meth:`events`; wait with :meth:`wait`."""

    def __init__(self, orchestrator: Orchestrator, run_id: str) -> None:
        self.id = run_id
        self._orchestrator = orchestrator
        self._history: list[RunEvent] = []
        self._subscribers: list[MemoryObjectSendStream[RunEvent]] = []
        self._finished = anyio.Event()
        self._client: ClaudeSDKClient | None = None
        self._node: NodeHandle | None = None
        self._abort: anyio.CancelScope | None = None
        self._pause: _Pause | None = None
        self.outcome: str | None = None
        self.error: str | None = None
        self.agent_session_id: str | None = None

    def _emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        event = event_type(run_id=self.id, seq=len(self._history) + 1, at=now(), **fields)
        self._history.append(event)
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(event)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.remove(subscriber)  # a subscriber that cannot keep up is dropped
                subscriber.close()

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event of the run from its start (a late subscriber gets the history first),
        then live ones, until the run ends. Any number of subscribers."""
        send, receive = anyio.create_memory_object_stream[RunEvent](10_000)
        history = list(self._history)
        if not self._finished.is_set():
            self._subscribers.append(send)
        else:
            send.close()
        async with receive:
            for event in history:
                yield event
            async for event in receive:
                yield event

    async def wait(self) -> str:
        """Wait for the run to pause or finish; return its outcome (ok, paused, error)."""
        await self._finished.wait()
        assert self.outcome is not None
        return self.outcome

    async def pause(
        self, kind: PauseKind = "human", reason: str = "", *, keep_node: bool = False
    ) -> SnapshotRecord:
        """Interrupt the agent (the SDK's interrupt, then abort) and save a snapshot.

        ``kind`` (human, external, system) is diagnostics metadata. With ``keep_node`` the
        node stays for the resume; otherwise it is destroyed and the resume provisions a new
        one. Returns the snapshot, whose ``token`` resumes the run.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run has finished, or is being paused already.
        """
        _check_pause_kind(kind)
        if self._finished.is_set() or self._pause is not None:
            raise RunStateError(f"run {self.id} is {self.outcome or 'being paused'}: it cannot be paused")
        if not await self._orchestrator.store.update_run(self.id, expect_state="running", state="pausing"):
            raise RunStateError(f"run {self.id} is not running")
        pause = self._pause = _Pause(kind, reason, keep_node)
        client = self._client
        if client is not None:
            with anyio.move_on_after(10):  # the polite way first; the abort below is certain
                await client.interrupt()
        if self._abort is not None:
            self._abort.cancel()
        await pause.done.wait()
        assert pause.snapshot is not None
        return pause.snapshot

    def _close(self, outcome: str, error: str | None) -> None:
        self.outcome, self.error = outcome, error
        self._emit(RunFinished, outcome=outcome, error=error, agent_session_id=self.agent_session_id)
        for subscriber in self._subscribers:
            subscriber.close()
        self._subscribers.clear()
        self._finished.set()


@dataclass(frozen=True)
class _Plan:
    """How to get the run's node and what to tell the agent."""

    prompt: str
    provider: str
    provider_settings: dict[str, Any]
    options: ClaudeAgentOptions
    node_config: NodeConfig
    resume: SnapshotRecord | None = None


class Orchestrator:
    """Starts, pauses, resumes and reconciles runs. Use as an async context manager: runs
    live in its task group; leaving it pauses (kind ``system``, node released) what still
    runs, so nothing is left without a snapshot."""

    def __init__(self, store: Store, *, owner: str | None = None, poll_interval: float = 0.5) -> None:
        self.store = store
        self.owner = owner or default_owner()
        self._poll_interval = poll_interval
        self._runs: dict[str, Run] = {}
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._watch_pause_requests)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as pausing:  # all at once: each may take seconds
                for run in self._runs.values():
                    if not run._finished.is_set():
                        pausing.start_soon(self._pause_quietly, run, _SHUTDOWN)
        self._tg.cancel_scope.cancel()
        try:
            await self._tg.__aexit__(et, e, tb)
        except BaseExceptionGroup as group:
            # The body's own exception comes out as itself, not wrapped by our task group.
            if e is not None and all(inner is e for inner in group.exceptions):
                raise e from None
            raise

    def run(self, run_id: str) -> Run:
        """A run of this control plane, by id. Raises :class:`KeyError` for others."""
        return self._runs[run_id]

    async def start(
        self,
        prompt: str,
        *,
        provider: str,
        provider_settings: Mapping[str, Any] | None = None,
        options: ClaudeAgentOptions | None = None,
        workspace: str = "default",
        node_config: NodeConfig | None = None,
    ) -> Run:
        """Start a run of ``prompt`` on a new node of ``provider``; returns at once.

        Raises:
            ProviderNotFoundError, ConfigError: the provider or its settings are wrong.
        """
        settings = dict(provider_settings or {})
        get_provider(provider, **settings)  # fail now, not in the background
        options = options or ClaudeAgentOptions()
        session = await self.store.active_session(workspace, "claude")
        run_id = new_id("run")
        await self.store.create_run(
            RunRecord(
                id=run_id,
                session_id=session.id,
                workspace_id=workspace,
                prompt=prompt,
                node_provider=provider,
                node_settings=dumps(settings),
                agent_options=dumps(_stored_options(options)),
                state="running",
                outcome=None,
                error=None,
                node_id=None,
                agent_session_id=None,
                project_key=None,
                owner=self.owner,
                pause_request=None,
                created_at=now(),
                updated_at=now(),
            )
        )
        plan = _Plan(prompt, provider, settings, options, node_config or NodeConfig())
        return self._launch(run_id, plan)

    async def resume(
        self, token: str, *, message: str = "continue", options: ClaudeAgentOptions | None = None
    ) -> Run:
        """Resume a paused (or failed) run from its snapshot token; the token is used up.

        On a kept node the agent resumes there; otherwise a fresh node is provisioned and
        the agent's transcript restored onto it first. ``options`` carry what was not
        stored (credentials in ``env``); without them the stored options are used.

        Raises:
            TokenError: the token is unknown or used already.
            RunStateError: the run is not paused, or another control plane resumed it first.
        """
        peeked = await self.store.peek_snapshot(token)
        if peeked is not None and peeked.used_at is None:  # else claiming says what is wrong
            current = await self.store.run(peeked.run_id)
            if current is not None and current.state not in _RESUMABLE:
                raise RunStateError(
                    f"run {current.id} is {current.state}: only a paused or failed run can be resumed"
                )
        snapshot = await self.store.claim_snapshot(token)  # TokenError when unknown or used
        record = await self.store.run(snapshot.run_id)
        assert record is not None
        if not await self.store.update_run(
            record.id, expect_state=record.state, state="running", owner=self.owner
        ):
            raise RunStateError(f"run {record.id} was resumed by another control plane")
        options = options or ClaudeAgentOptions(**json.loads(record.agent_options))
        settings = json.loads(record.node_settings)
        plan = _Plan(message, record.node_provider, settings, options, NodeConfig(), resume=snapshot)
        return self._launch(record.id, plan)

    async def resume_run(
        self, run_id: str, *, message: str = "continue", options: ClaudeAgentOptions | None = None
    ) -> Run:
        """Resume ``run_id`` from its latest unused snapshot (see :meth:`resume`).

        Raises:
            RunStateError: the run does not exist, is not paused or failed, or has no
                snapshot left to resume from.
        """
        record = await self.store.run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}")
        if record.state not in _RESUMABLE:
            raise RunStateError(f"run {run_id} is {record.state}: only a paused or failed run can be resumed")
        unused = [s for s in await self.store.snapshots(run_id) if s.used_at is None]
        if not unused:
            raise RunStateError(f"run {run_id} has no snapshot to resume from")
        return await self.resume(unused[-1].token, message=message, options=options)

    def _launch(self, run_id: str, plan: _Plan) -> Run:
        if self._tg is None:
            raise RuntimeError("use the Orchestrator as an async context manager")
        run = self._runs[run_id] = Run(self, run_id)
        run._emit(
            RunStarted,
            prompt=plan.prompt,
            provider=plan.provider,
            resumed_from=plan.resume.token[:8] + "…" if plan.resume else None,
        )
        self._tg.start_soon(self._drive, run, plan)
        return run

    # -- driving a run ---------------------------------------------------------------

    async def _drive(self, run: Run, plan: _Plan) -> None:
        provider = get_provider(plan.provider, **plan.provider_settings)
        try:
            result: ResultMessage | None = None
            with anyio.CancelScope() as abort:
                run._abort = abort
                if run._pause is None:
                    reused, restored = await self._node_for(run, plan, provider)
                    assert run._node is not None
                    run._emit(
                        NodeReady, node_id=run._node.node_id, reused=reused, transcript_restored=restored
                    )
                    result = await self._agent(run, plan, run._node)
            run._abort = None
            if run._pause is not None:
                await self._paused(run)
            elif result is None or result.is_error:
                await self._failed(run, f"the agent ended with {result.subtype if result else 'no result'}")
            else:
                await self._release(run)
                await self.store.update_run(run.id, state="finished", outcome="ok")
                run._close("ok", None)
        except Exception as error:  # noqa: BLE001 - any failure ends the run as an error, with a snapshot
            logger.info("run %s failed: %s", run.id, error)  # an outcome, reported as an event
            try:
                await self._failed(run, str(error) or type(error).__name__)
            except Exception:  # the store itself failed: the run still ends, below
                logger.exception("could not record the failure of run %s", run.id)
        finally:
            with anyio.CancelScope(shield=True):
                await self._release(run)
                if not run._finished.is_set():
                    run._close("error", "the run was cancelled")

    async def _release(self, run: Run, *, keep: bool = False) -> None:
        """Destroy the run's node (or mark it kept) before the run reports its outcome."""
        node, run._node = run._node, None
        if node is None:
            return
        with anyio.CancelScope(shield=True):
            if keep:
                await self.store.set_node_state(node.node_id, "kept")
            else:
                try:
                    await node.destroy()
                except NodeprovError as error:  # still recorded live: reconcile retries it
                    logger.warning("could not destroy node %s of run %s: %s", node.node_id, run.id, error)
                    return
                await self.store.set_node_state(node.node_id, "destroyed")
            run._emit(NodeReleased, node_id=node.node_id, kept=keep)

    async def _node_for(self, run: Run, plan: _Plan, provider: Any) -> tuple[bool, bool]:
        """Get the run's node into ``run._node``: the kept one, or a new one (with the
        transcript restored onto it when resuming). Returns (reused, restored)."""
        snapshot = plan.resume
        if snapshot is not None and snapshot.node_kept and snapshot.node_id:
            try:
                run._node = await provider.attach(snapshot.node_id)
            except NodeGoneError:
                logger.info(
                    "kept node %s of run %s is gone: provisioning a new one", snapshot.node_id, run.id
                )
            else:
                await self._record_node(run, run._node)
                return True, False
        config = plan.node_config.model_copy(update={"session_id": run.id, "owner": self.owner})
        await self.store.node_intent(config.node_id, plan.provider, run.id)
        with anyio.CancelScope(shield=True):  # once it exists, the run must know about it
            node: NodeHandle = await provider.provision(config)
            run._node = node
            await self._record_node(run, node)
        if snapshot is not None and snapshot.agent_session_id and snapshot.project_key:
            return False, await self._restore_transcript(node, plan, snapshot)
        return False, False

    async def _record_node(self, run: Run, node: NodeHandle) -> None:
        await self.store.set_node_state(node.node_id, "live")
        await self.store.update_run(run.id, node_id=node.node_id)

    def _agent_options(self, plan: _Plan, node: NodeHandle) -> ClaudeAgentOptions:
        home = node.base_env.get("HOME", "/root")
        env = {**plan.options.env, "CLAUDE_CONFIG_DIR": f"{home}/.claude"}  # where the mirror keys come from
        # Eager: every frame reaches the store at once, so a crash mid-turn loses nothing.
        changes: dict[str, Any] = {
            "env": env,
            "session_store": self.store.transcripts,
            "session_store_flush": "eager",
        }
        if plan.resume is not None and plan.resume.agent_session_id:
            changes["resume"] = plan.resume.agent_session_id
        return dataclasses.replace(plan.options, **changes)

    async def _restore_transcript(self, node: NodeHandle, plan: _Plan, snapshot: SnapshotRecord) -> bool:
        """Write the agent's mirrored transcript where the CLI on ``node`` will look for it."""
        assert snapshot.agent_session_id
        assert snapshot.project_key
        key = {"project_key": snapshot.project_key, "session_id": snapshot.agent_session_id}
        entries = await self.store.transcripts.load(key)  # type: ignore[arg-type]
        if not entries:
            return False
        directory = (
            f"{self._agent_options(plan, node).env['CLAUDE_CONFIG_DIR']}/projects/{_project_key(plan, node)}"
        )
        files = {f"{directory}/{snapshot.agent_session_id}.jsonl": entries}
        for subpath in await self.store.transcripts.list_subkeys(key):  # type: ignore[arg-type]
            sub = await self.store.transcripts.load({**key, "subpath": subpath})  # type: ignore[typeddict-item]
            files[f"{directory}/{snapshot.agent_session_id}/{subpath}.jsonl"] = sub or []
        for path, content in files.items():
            write = SpawnOptions("sh", ["-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "restore", path])
            async with await node.spawn(write) as process:
                await process.stdin.send(entries_to_jsonl(content))
                await process.stdin.aclose()
                if await process.wait() != 0:
                    raise NodeprovError(f"could not restore the transcript to {path} on node {node.node_id}")
        return True

    async def _agent(self, run: Run, plan: _Plan, node: NodeHandle) -> ResultMessage | None:
        options = self._agent_options(plan, node)
        await self.store.update_run(run.id, project_key=_project_key(plan, node))
        result: ResultMessage | None = None
        async with ClaudeSDKClient(
            options=options, transport=NodeTransport.for_node(node, options)
        ) as client:
            run._client = client
            try:
                await client.query(plan.prompt)
                async for message in client.receive_response():
                    run._emit(AgentMessage, message=message)
                    session_id = _session_id(message)
                    if session_id and session_id != run.agent_session_id:
                        run.agent_session_id = session_id
                        await self.store.update_run(run.id, agent_session_id=session_id)
                        record = await self.store.run(run.id)
                        if record is not None:  # the workspace's session follows its agent's
                            await self.store.set_provider_session_id(record.session_id, session_id)
                    if isinstance(message, ResultMessage):
                        result = message
            finally:
                run._client = None
        return result

    async def _paused(self, run: Run) -> None:
        pause = run._pause
        assert pause is not None
        node = run._node
        pause.keep_node = pause.keep_node and node is not None  # nothing to keep before provisioning
        snapshot = await self._snapshot(run, node, pause.kind, pause.reason, keep_node=pause.keep_node)
        await self._release(run, keep=pause.keep_node)
        await self.store.update_run(run.id, state="paused", outcome="paused", pause_request=None)
        pause.snapshot = snapshot
        node_fate = "kept" if pause.keep_node else "released"
        logger.info("run %s paused (%s): %s; node %s", run.id, pause.kind, pause.reason, node_fate)
        run._emit(
            RunPaused,
            pause_kind=pause.kind,
            reason=pause.reason,
            token=snapshot.token,
            node_kept=pause.keep_node,
        )
        run._close("paused", None)
        pause.done.set()

    async def _failed(self, run: Run, error: str) -> None:
        with anyio.CancelScope(shield=True):
            if run.agent_session_id:  # resumable: the transcript is in the store
                await self._snapshot(run, run._node, "system", error, keep_node=False)
            await self._release(run)
            await self.store.update_run(run.id, state="failed", outcome="error", error=error[:2000])
            run._close("error", error)
            if run._pause is not None:
                run._pause.done.set()

    async def _snapshot(
        self, run: Run, node: NodeHandle | None, kind: str, reason: str, *, keep_node: bool
    ) -> SnapshotRecord:
        record = await self.store.run(run.id)
        assert record is not None
        snapshot = _snapshot_of(
            record,
            node_id=node.node_id if node else record.node_id,
            agent_session_id=run.agent_session_id,
            kind=kind,
            reason=reason,
            keep_node=keep_node,
        )
        await self.store.save_snapshot(snapshot)
        return snapshot

    # -- across processes --------------------------------------------------------------

    async def request_pause(
        self, run_id: str, kind: PauseKind = "external", reason: str = "", *, keep_node: bool = False
    ) -> None:
        """Ask whichever control plane drives ``run_id`` to pause it (it checks every
        ``poll_interval``). For a run of this control plane, prefer :meth:`Run.pause`.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is not running.
        """
        _check_pause_kind(kind)  # checked here: the driving process would meet it too late
        request = json.dumps({"kind": kind, "reason": reason, "keep_node": keep_node})
        if not await self.store.update_run(run_id, expect_state="running", pause_request=request):
            raise RunStateError(f"run {run_id} is not running")

    async def _watch_pause_requests(self) -> None:
        while True:
            await anyio.sleep(self._poll_interval)
            live = [run for run in self._runs.values() if not run._finished.is_set() and run._pause is None]
            for run in live:
                record = await self.store.run(run.id)
                if record is not None and record.pause_request:
                    request = json.loads(record.pause_request)
                    assert self._tg is not None
                    self._tg.start_soon(self._pause_quietly, run, request)

    @staticmethod
    async def _pause_quietly(run: Run, request: dict[str, Any]) -> None:
        with suppress(RunStateError):  # it finished meanwhile
            await run.pause(request["kind"], request["reason"], keep_node=request["keep_node"])

    async def reconcile(self) -> list[str]:
        """Clean up after control planes that died: destroy the nodes of their runs that no
        live control plane holds, and end those runs as errors with a resumable snapshot.
        Nodes still recorded live for runs that are over (a destroy that failed) go too.

        Runs of live owners (and of owners on other hosts, which cannot be checked) are left
        alone; kept nodes of paused runs are kept. Returns the ids of the runs ended.
        """
        recorded: dict[str, list[str]] = {}  # run id -> its nodes being made or live
        for node_id, _, run_id, _ in await self.store.nodes(states=("intent", "live")):
            recorded.setdefault(run_id, []).append(node_id)
        ended = []
        for record in await self.store.runs(states=("running", "pausing")):
            nodes = recorded.pop(record.id, [])
            if record.id in self._runs or owner_alive(record.owner) is not False:
                continue
            await self._destroy_nodes(record, nodes)
            reason = f"control plane {record.owner} died during the run"
            if record.agent_session_id:
                await self.store.save_snapshot(
                    _snapshot_of(
                        record,
                        node_id=record.node_id,
                        agent_session_id=record.agent_session_id,
                        kind="system",
                        reason=reason,
                        keep_node=False,
                    )
                )
            if await self.store.update_run(
                record.id, expect_state=record.state, state="failed", outcome="error", error=reason
            ):
                ended.append(record.id)
        for run_id, nodes in recorded.items():  # what is left belongs to runs that are over
            over = await self.store.run(run_id)
            if over is not None and run_id not in self._runs:
                await self._destroy_nodes(over, nodes)
        return ended

    async def _destroy_nodes(self, record: RunRecord, node_ids: list[str]) -> None:
        """Destroy nodes of ``record`` that the store still holds as being made or live."""
        if not node_ids:
            return
        provider = get_provider(record.node_provider, **json.loads(record.node_settings))
        for node_id in node_ids:
            with suppress(NodeGoneError):  # never made, or gone with its host
                await (await provider.attach(node_id)).destroy()
            await self.store.set_node_state(node_id, "destroyed")


def _check_pause_kind(kind: str) -> None:
    if kind not in _PAUSE_KINDS:
        raise ConfigError(f"pause kind must be one of {', '.join(_PAUSE_KINDS)}, got {kind!r}")


def _snapshot_of(
    record: RunRecord,
    *,
    node_id: str | None,
    agent_session_id: str | None,
    kind: str,
    reason: str,
    keep_node: bool,
) -> SnapshotRecord:
    """A snapshot of ``record`` as it stands, with a fresh single-use token."""
    return SnapshotRecord(
        token=f"tok-{secrets.token_urlsafe(24)}",
        run_id=record.id,
        node_id=node_id,
        node_kept=keep_node,
        provider=record.node_provider,
        agent_session_id=agent_session_id,
        project_key=record.project_key,
        state=record.state,
        pause_kind=kind,
        reason=reason[:2000],
        created_at=now(),
        used_at=None,
    )


def _project_key(plan: _Plan, node: NodeHandle) -> str:
    """The directory name the CLI gives the agent's working directory (its session key)."""
    cwd = str(plan.options.cwd) if plan.options.cwd else node.workdir
    return str(_sanitize_path(posixpath.normpath(posixpath.join(node.workdir, cwd))))


def _session_id(message: Message) -> str | None:
    if isinstance(message, SystemMessage) and message.subtype == "init":
        value = message.data.get("session_id")
        return str(value) if value else None
    value = getattr(message, "session_id", None)
    return str(value) if value else None


def _stored_options(options: ClaudeAgentOptions) -> dict[str, Any]:
    """What of the agent options is kept: never ``env`` (credentials) or callbacks."""
    return {name: _jsonable(getattr(options, name)) for name in _STORED_OPTIONS if getattr(options, name)}
