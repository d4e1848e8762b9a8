"""The orchestrator: starts, pauses, resumes and reconciles runs; see :mod:`nodeprov.runs`."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, Self

import anyio
from anyio.abc import TaskGroup

from ..agents import Agent, AgentOptions, AgentSession, Message, Notice, Result, StateKey, ToolResult, ToolUse
from ..agents.registry import get_agent, route_model
from ..errors import ConfigError, DeadlineError, NodeGoneError, NodeprovError, RunStateError
from ..node import LABEL_EXPIRES_AT, GarbageReport, NodeConfig, NodeHandle, NodeProvider, owner_alive
from ..registry import get_provider, provider_class
from ..store import (
    EventRecord,
    NodeRecord,
    NodeRecordState,
    RunRecord,
    SnapshotRecord,
    Store,
    dumps,
    entry_key,
    new_id,
    now,
)
from .events import (
    AgentMessage,
    NodeReady,
    NodeReleased,
    RunEvent,
    RunFinished,
    RunPaused,
    RunStarted,
    event_from_json,
)
from .state import LIVE_STATES, TRANSITIONS, RunState

_N = NodeRecordState
logger = logging.getLogger("nodeprov.runs")

PauseKind = Literal["human", "external", "system"]
_PAUSE_KINDS = ("human", "external", "system")
_RESUMABLE = (RunState.PAUSED, RunState.FAILED)
_LEASE_PREFIX = "lease:"
_INTERRUPT_TIMEOUT = 10.0  # the polite interrupt; the abort after it is certain
_CLEANUP_TIMEOUT = 180.0  # a run's own teardown outside a shutdown: destroy plus store writes
_CLOSE_TIMEOUT = 10.0  # closing the providers' connections at exit
_SUBSCRIBER_BUFFER = 1024  # events a subscriber may lag before it reads from the store instead
_FLUSH_GATHER = 0.02  # how long the writer lets events and transcript frames gather


@dataclass
class _Pause:
    kind: str
    reason: str
    keep_node: bool
    keep_for: float
    saved: SnapshotRecord | None = None  # written to the store
    snapshot: SnapshotRecord | None = None  # returned to the caller, once the run is paused


class _Subscriber:
    """One reader of a run's live events; one that lags too far is told to read the store."""

    def __init__(self) -> None:
        self.queue: deque[RunEvent | None] = deque()  # None: the drive ended
        self.overflowed = False
        self.ready = anyio.Event()

    def push(self, event: RunEvent | None) -> None:
        if event is not None and len(self.queue) >= _SUBSCRIBER_BUFFER:
            self.queue.clear()
            self.overflowed = True
        else:
            self.queue.append(event)
        self.ready.set()


class Run:
    """A run driven by this control plane. Subscribe with :meth:`events`; wait with
    :meth:`wait`; pause with :meth:`pause`. ``state`` is its :class:`RunState`."""

    def __init__(self, orchestrator: Orchestrator, run_id: str, state: RunState, first_seq: int) -> None:
        self.id = run_id
        self.state = state
        self.outcome: str | None = None
        self.error: str | None = None
        self.agent_session_id: str | None = None
        self._orchestrator = orchestrator
        self.first_seq = first_seq
        """The sequence number of this drive's ``run.started`` (a resume continues the run's)."""
        self._next_seq = first_seq
        self._unflushed: list[RunEvent] = []  # emitted, not yet in the store
        self._subscribers: list[_Subscriber] = []
        self._finished = anyio.Event()
        self._moving = anyio.Lock()
        self._session: AgentSession | None = None
        self._agent: Agent[Any] | None = None
        self._node: NodeHandle | None = None
        self._abort: anyio.CancelScope | None = None
        self._pause: _Pause | None = None
        self._progress = _Progress()

    def _emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        event = event_type(run_id=self.id, seq=self._next_seq, at=now(), **fields)
        self._next_seq += 1
        self._unflushed.append(event)
        self._orchestrator._queue_event(event)
        for subscriber in self._subscribers:
            subscriber.push(event)

    async def events(self, *, after: int | None = None) -> AsyncIterator[RunEvent]:
        """The events of this drive of the run from its ``run.started`` (a late subscriber
        gets them from the store first), or, with ``after``, every event of the run's whole
        life above that sequence number; then live ones, until this drive ends. Any number
        of subscribers; one that falls behind by more than a buffer's worth reads what it
        missed from the store.

        Raises:
            StoreError: the store could not be read.
        """
        store = self._orchestrator.store
        subscriber = _Subscriber()
        if not self._finished.is_set():
            self._subscribers.append(subscriber)  # before the history is read: nothing is missed
        else:
            subscriber.push(None)
        last = self.first_seq - 1 if after is None else after
        try:
            while True:
                subscriber.overflowed = False
                await self._orchestrator._flush_events()
                while records := await store.events(self.id, after=last):
                    for record in records:
                        last = record.seq
                        if (stored_event := _stored_event(record)) is not None:
                            yield stored_event
                for event in list(self._unflushed):
                    if event.seq > last:
                        last = event.seq
                        yield event
                while not subscriber.overflowed:
                    if not subscriber.queue:
                        subscriber.ready = anyio.Event()
                        await subscriber.ready.wait()
                        continue
                    item = subscriber.queue.popleft()
                    if item is None:
                        return
                    if item.seq > last:
                        last = item.seq
                        yield item
        finally:
            with suppress(ValueError):
                self._subscribers.remove(subscriber)

    async def wait(self) -> str:
        """Wait until nobody drives the run; return its outcome (ok, paused, error)."""
        await self._finished.wait()
        assert self.outcome is not None  # set before _finished
        return self.outcome

    async def pause(
        self,
        kind: PauseKind = "human",
        reason: str = "",
        *,
        keep_node: bool = False,
        keep_for: float | None = None,
    ) -> SnapshotRecord:
        """Stop the agent (its interrupt, then abort) and save a snapshot.

        Works while the run starts (provisioning is interrupted; the snapshot keeps the
        session being resumed) or runs. ``kind`` (human, external, system) is diagnostics
        metadata. With ``keep_node`` the node stays for the resume, for ``keep_for``
        seconds at most (default: the orchestrator's ``keep_for``) and never past its own
        lifetime: after that reconcile destroys it, and the resume provisions a new one, as
        it does when the node is not kept. Returns the snapshot, whose ``token`` resumes
        the run.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is finishing or over, is being paused already, or
                failed while pausing (its error says why).
        """
        _check_pause_kind(kind)
        if keep_for is not None and not keep_for > 0:
            raise ConfigError(f"keep_for must be positive, got {keep_for!r}")
        if self._pause is not None:
            raise RunStateError(f"run {self.id} is being paused already: it cannot be paused")
        pause = _Pause(kind, reason, keep_node, self._orchestrator.keep_for if keep_for is None else keep_for)
        if not await self._orchestrator._move(
            self,
            RunState.PAUSING,
            unless=lambda: self._pause is not None,
            then=lambda: self._paused_by(pause),
        ):
            raise RunStateError(f"run {self.id} is {self.state}: it cannot be paused")
        session = self._session
        if session is not None:
            with anyio.move_on_after(_INTERRUPT_TIMEOUT), suppress(Exception):
                await session.interrupt()  # a dying agent may refuse: the abort is what counts
        if self._abort is not None:
            self._abort.cancel()
        await self._finished.wait()
        if pause.snapshot is None:
            raise RunStateError(f"run {self.id} failed while pausing: {self.error}")
        return pause.snapshot

    def _paused_by(self, pause: _Pause) -> None:
        self._pause = pause


@dataclass(frozen=True)
class _Plan:
    """How to get the run's node and what to tell the agent."""

    prompt: str
    provider: str
    provider_settings: dict[str, Any]
    agent: Agent[Any]
    workspace: str
    node_config: NodeConfig
    resume: SnapshotRecord | None = None
    deadline: float | None = None
    idle_timeout: float | None = None


@dataclass(frozen=True)
class ReconcileReport:
    """What :meth:`Orchestrator.reconcile` did: ``ended`` runs of dead control planes, the
    nodes it ``destroyed``, and the nodes it could not destroy (``failed``, with why; they
    stay recorded and are tried again next time)."""

    ended: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


class Orchestrator:
    """Starts, pauses, resumes and reconciles runs. Use it as an async context manager.

    **Ownership.** On entering, it takes a lease in the store (id, holder, heartbeat,
    expiry by the database's clock) and renews it every ``lease_ttl / 3`` seconds. Its runs
    and nodes are owned by ``lease:ID``. Any control plane sharing the store reconciles what
    a dead one left (every ``reconcile_interval`` seconds, and in :meth:`reconcile`): a
    control plane that died, on any host or in any PID namespace, is cleaned up within
    ``lease_ttl + reconcile_interval`` seconds plus the time its nodes take to destroy. An
    orchestrator that finds its own lease lost (the store unreachable for longer than the
    lease) aborts its runs, since another may have taken them over, and takes a new lease.

    **Supervision.** A failure in one run ends that run as ``failed`` (with a resumable
    snapshot when the agent's session is known) and never another run or the
    orchestrator. Background work (heartbeats, pause requests, reconcile, event writes)
    logs its failures and goes on.

    **Leaving** pauses whatever still runs (kind ``system``, node released), so nothing is
    left without a snapshot, then flushes events and releases the lease. It takes at most
    ``shutdown_timeout`` seconds (plus, if the store itself hangs, its statement timeout):
    a run that cannot be paused in time is left to reconcile, which the released lease
    makes immediate for any other control plane.

    **Kept nodes** (a pause with ``keep_node``) are kept for ``keep_for`` seconds at most
    (a day by default), never past the node's own lifetime, and only while a resume may
    still use them: reconcile destroys one whose time is up, whose run was resumed
    elsewhere or ended, or whose workspace switched agents.

    **Events** are written to the store in batches, with their sequence numbers, and can
    be read from any process (:meth:`events`). The agent's transcript frames are mirrored
    into the store in the same batches (one transaction every 20 ms at most, less while
    the previous one commits); a result is reported only once its turn is stored.
    """

    def __init__(
        self,
        store: Store,
        *,
        holder: str | None = None,
        lease_ttl: float = 30.0,
        reconcile_interval: float | None = None,
        poll_interval: float = 0.5,
        shutdown_timeout: float = 30.0,
        keep_for: float = 86400.0,
        provider_settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if not keep_for > 0:
            raise ConfigError(f"keep_for must be positive, got {keep_for!r}")
        self.store = store
        self.keep_for = keep_for
        """How long a node kept for a paused run's resume is kept at most (a day by default)."""
        self.provider_settings = {name: dict(given) for name, given in (provider_settings or {}).items()}
        """Per provider, settings laid over what a run stored, when this control plane acts on
        runs it does not drive (reconcile, garbage collection): the secrets runs never store."""
        self.holder = holder or f"{socket.gethostname()} pid {os.getpid()}"
        self.lease_ttl = lease_ttl
        self.reconcile_interval = lease_ttl / 2 if reconcile_interval is None else reconcile_interval
        self.shutdown_timeout = shutdown_timeout
        self._poll_interval = poll_interval
        self.owner = ""  # lease:ID once entered
        self._runs: dict[str, Run] = {}
        self._launching: set[str] = set()  # owned in the store, not yet in _runs
        self._providers: dict[str, NodeProvider[Any]] = {}
        self._tg: TaskGroup | None = None
        self._pending_events: list[RunEvent] = []
        self._pending_frames: list[tuple[StateKey, list[tuple[str, Any]]]] = []  # entries with their keys
        self._events_waiting = anyio.Event()
        self._flush_lock = anyio.Lock()
        self._shutdown_at: float | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._take_lease()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._every, self.lease_ttl / 3, self._heartbeat, "lease heartbeat")
        self._tg.start_soon(self._every, self._poll_interval, self._serve_pause_requests, "pause requests")
        self._tg.start_soon(self._writer)
        if self.reconcile_interval > 0:
            self._tg.start_soon(self._every, self.reconcile_interval, self.reconcile, "reconcile")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._tg is not None
        self._shutdown_at = anyio.current_time() + self.shutdown_timeout
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_timeout * 0.8):
            async with anyio.create_task_group() as pausing:  # all at once: each may take seconds
                for run in list(self._runs.values()):
                    pausing.start_soon(self._pause_for_shutdown, run)
        self._tg.cancel_scope.cancel()  # drives still going end in their bounded cleanup
        try:
            await self._tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
                await self._flush_events()
                await self.store.release_lease(self.owner.removeprefix(_LEASE_PREFIX))
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                providers, self._providers = list(self._providers.values()), {}
                for provider in providers:  # their connections; the nodes stay
                    await provider.aclose()

    async def _pause_for_shutdown(self, run: Run) -> None:
        with suppress(NodeprovError):  # over, or pausing already: either way it ends
            await run.pause("system", "the control plane is shutting down")
        await run._finished.wait()  # a pause under way (another caller's) ends too

    def _cleanup_time(self, *, destroying: bool = False) -> float:
        """How long a teardown may still take: until the shutdown deadline, if shutting down.
        Destroying a node leaves a quarter of the shutdown time for the store writes after it."""
        if self._shutdown_at is None:
            return _CLEANUP_TIMEOUT
        reserve = self.shutdown_timeout / 4 if destroying else 0.0
        return max(0.0, self._shutdown_at - reserve - anyio.current_time())

    async def _take_lease(self) -> None:
        lease = await self.store.acquire_lease(self.holder, self.lease_ttl)
        self.owner = _LEASE_PREFIX + lease.id

    async def _heartbeat(self) -> None:
        if await self.store.renew_lease(self.owner.removeprefix(_LEASE_PREFIX), self.lease_ttl):
            return
        logger.error("control plane lease %s was lost: aborting its runs and taking a new lease", self.owner)
        for run in list(self._runs.values()):
            if run._abort is not None:
                run._abort.cancel()
        await self._take_lease()

    async def _every(self, interval: float, step: Callable[[], Awaitable[Any]], name: str) -> None:
        while True:
            await anyio.sleep(interval)
            try:
                await step()
            except Exception:
                logger.exception("%s failed; trying again in %g s", name, interval)

    # -- starting and resuming ---------------------------------------------------------

    def run(self, run_id: str) -> Run:
        """A run this control plane drives now, by id.

        Raises:
            RunStateError: no such run is driven here.
        """
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunStateError(f"run {run_id} is not driven by this control plane") from None

    async def start(
        self,
        prompt: str,
        *,
        provider: str,
        provider_settings: Mapping[str, Any] | None = None,
        agent: str | None = None,
        options: AgentOptions | Mapping[str, Any] | None = None,
        workspace: str = "default",
        node_config: NodeConfig | None = None,
        deadline: float | None = None,
        idle_timeout: float | None = None,
    ) -> Run:
        """Start a run of ``prompt`` on a new node of ``provider``; returns at once.

        ``agent`` names the agent (see :func:`~nodeprov.registry.route_model`: by default
        the one the options' model routes to); ``options`` are its options (its options
        model, or a mapping of them). The workspace's session follows the agent: a run of
        another agent than the workspace's last one archives that session.

        ``deadline`` bounds the whole run in seconds (provisioning included);
        ``idle_timeout`` bounds the time the agent may go without progress (a message other
        than the agent's model-API retry notices). Either ends the run as failed, with the
        cause: the model API's last error when it kept failing.

        Raises:
            ProviderNotFoundError, ConfigError: the provider, the agent, or their settings
                or options are wrong.
            StoreError: the store failed.
        """
        settings = dict(provider_settings or {})
        # Fail now, not in the background; store what another environment needs to find the node.
        checked = (await self._provider(provider, settings)).resolved_settings()
        model = options.model if isinstance(options, AgentOptions) else (options or {}).get("model")
        chosen = await _agent_of(lambda: get_agent(route_model(model, agent), options))
        _check_limits(deadline, idle_timeout)
        session = await self.store.active_session(workspace, chosen.name)
        run_id = new_id("run")
        plan = _Plan(
            prompt,
            provider,
            settings,
            chosen,
            workspace,
            node_config or NodeConfig(),
            None,
            deadline,
            idle_timeout,
        )
        self._launching.add(run_id)
        try:
            await self.store.create_run(
                RunRecord(
                    id=run_id,
                    session_id=session.id,
                    workspace_id=workspace,
                    prompt=prompt,
                    node_provider=provider,
                    node_settings=dumps(checked.storable()),
                    node_secret_fields=dumps(checked.secrets_set()),
                    agent=chosen.name,
                    agent_options=dumps(chosen.options.storable()),
                    node_config=_storable_node_config(plan.node_config),
                    state=RunState.STARTING,
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
            return await self._launch(run_id, plan)
        finally:
            self._launching.discard(run_id)

    async def resume(
        self,
        token: str,
        *,
        message: str = "continue",
        options: AgentOptions | Mapping[str, Any] | None = None,
        provider_settings: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        idle_timeout: float | None = None,
    ) -> Run:
        """Resume a paused (or failed) run from its snapshot token; the token is used up.

        The run's own agent resumes its session: on a kept node there; otherwise a fresh
        node is provisioned and the agent's session state restored onto it first.
        ``options`` are laid over the run's stored ones, and carry what was never stored
        (``env``, with credentials). ``provider_settings`` are laid over the stored ones:
        the run's secret settings (never stored) must be given again. A run paused before
        its agent ever started is started again with its own prompt.

        Raises:
            TokenError: the token is unknown or used already.
            ConfigError: a secret provider setting the run was started with is missing, or
                the options are invalid for the run's agent (checked before the token is
                used).
            RunStateError: the run is not paused or failed, its workspace's session was
                archived (the workspace switched to another agent since), or another
                control plane resumed it first.
        """
        _check_limits(deadline, idle_timeout)
        given = dict(provider_settings or {})
        peeked = await self.store.peek_snapshot(token)
        if peeked is not None and peeked.used_at is None:  # else claiming says what is wrong
            current = await self.store.run(peeked.run_id)
            if current is not None and current.state not in _RESUMABLE:
                raise RunStateError(
                    f"run {current.id} is {current.state}: only a paused or failed run can be resumed"
                )
            missing = sorted(set(json.loads(current.node_secret_fields)) - set(given)) if current else []
            if missing:
                raise ConfigError(
                    f"run {peeked.run_id} was started with secret provider settings that are never "
                    f"stored; give them again: {', '.join(missing)}"
                )
            if current is not None:
                await _agent_of(lambda: _resumed_agent(current, options))
                await self._check_session(current)
        snapshot = await self.store.claim_snapshot(token)
        self._launching.add(snapshot.run_id)
        try:
            return await self._claim_and_launch(
                snapshot, message, options, given, deadline=deadline, idle_timeout=idle_timeout
            )
        finally:
            self._launching.discard(snapshot.run_id)

    async def _check_session(self, record: RunRecord) -> None:
        """Refuse to resume a session its workspace archived (it switched agents since)."""
        for session in await self.store.sessions(record.workspace_id):
            if session.id == record.session_id and session.state != "active":
                raise RunStateError(
                    f"run {record.id} belongs to {record.agent} session {session.id} of workspace "
                    f"{record.workspace_id}, archived when the workspace switched to another agent: "
                    "it cannot be resumed"
                )

    async def _claim_and_launch(
        self,
        snapshot: SnapshotRecord,
        message: str,
        options: AgentOptions | Mapping[str, Any] | None,
        given_settings: dict[str, Any],
        *,
        deadline: float | None,
        idle_timeout: float | None,
    ) -> Run:
        record = await self.store.run(snapshot.run_id)
        if record is None:
            raise RunStateError(f"run {snapshot.run_id} is gone")
        agent = await _agent_of(lambda: _resumed_agent(record, options))
        if not await self.store.update_run(
            record.id,
            expect_states=_RESUMABLE,
            state=RunState.STARTING,
            owner=self.owner,
            outcome=None,
            error=None,
            pause_request=None,
        ):
            raise RunStateError(f"run {record.id} was resumed by another control plane")
        await self.store.use_snapshots(record.id)  # an earlier pause's token must not fork the run
        settings = {**json.loads(record.node_settings), **given_settings}
        if snapshot.agent_session_id is None:  # the agent never started: start it afresh
            message = record.prompt if message == "continue" else f"{record.prompt}\n\n{message}"
        plan = _Plan(
            message,
            record.node_provider,
            settings,
            agent,
            record.workspace_id,
            NodeConfig.model_validate_json(record.node_config),
            snapshot,
            deadline,
            idle_timeout,
        )
        return await self._launch(record.id, plan)

    async def resume_run(
        self,
        run_id: str,
        *,
        message: str = "continue",
        options: AgentOptions | Mapping[str, Any] | None = None,
        provider_settings: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        idle_timeout: float | None = None,
    ) -> Run:
        """Resume ``run_id`` from its latest unused snapshot (see :meth:`resume`).

        Raises:
            RunStateError: the run does not exist, is not paused or failed, or has no
                snapshot left to resume from.
            ConfigError: as :meth:`resume`.
        """
        record = await self.store.run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}")
        if record.state not in _RESUMABLE:
            raise RunStateError(f"run {run_id} is {record.state}: only a paused or failed run can be resumed")
        unused = [s for s in await self.store.snapshots(run_id) if s.used_at is None]
        if not unused:
            raise RunStateError(f"run {run_id} has no snapshot to resume from")
        return await self.resume(
            unused[-1].token,
            message=message,
            options=options,
            provider_settings=provider_settings,
            deadline=deadline,
            idle_timeout=idle_timeout,
        )

    async def _launch(self, run_id: str, plan: _Plan) -> Run:
        if self._tg is None:
            raise ConfigError("use the Orchestrator as an async context manager")
        run = Run(self, run_id, RunState.STARTING, await self.store.last_event_seq(run_id) + 1)
        run._agent = plan.agent
        if plan.resume is not None:  # a pause before the agent starts must keep the session
            run.agent_session_id = plan.resume.agent_session_id
        self._runs[run_id] = run
        resumed = f"{plan.resume.pause_kind} pause at {plan.resume.created_at}" if plan.resume else None
        run._emit(
            RunStarted,
            prompt=plan.prompt,
            provider=plan.provider,
            agent=plan.agent.name,
            resumed_from=resumed,
        )
        self._tg.start_soon(self._drive, run, plan)
        return run

    async def _provider(self, name: str, settings: dict[str, Any]) -> NodeProvider[Any]:
        """The provider ``name`` with ``settings``, made once per orchestrator."""
        key = f"{name}\0{dumps(settings)}"
        if key not in self._providers:
            await anyio.to_thread.run_sync(provider_class, name)  # see _agent_of
            self._providers[key] = get_provider(name, **settings)
        return self._providers[key]

    # -- state ---------------------------------------------------------------------------

    async def _move(
        self,
        run: Run,
        target: RunState,
        *,
        unless: Callable[[], bool] | None = None,
        then: Callable[[], None] | None = None,
        **changes: Any,
    ) -> bool:
        """Move ``run`` to ``target`` if the table allows it from where it stands: one
        compare-and-set in the store, on the run's state and its owner (this control
        plane). ``unless`` may veto first; ``then`` runs once the run has moved, before any
        other mover of the run. Returns whether the run moved."""
        async with run._moving:
            if target not in TRANSITIONS[run.state] or (unless is not None and unless()):
                return False
            if target.outcome is not None:
                changes.setdefault("outcome", target.outcome)
            moved = await self.store.update_run(
                run.id, expect_states=(run.state,), expect_owner=self.owner, state=target, **changes
            )
            if not moved:
                logger.warning("run %s changed under this control plane (lease lost?)", run.id)
                return False
            run.state = target
            if then is not None:
                then()
            return True

    # -- driving a run ---------------------------------------------------------------------

    async def _drive(self, run: Run, plan: _Plan) -> None:
        """Drive ``run`` to a state nobody drives. Never raises: whatever fails ends the run."""
        try:
            result = await self._steps(run, plan)
            if run.state is RunState.PAUSING:
                await self._settle_pause(run)
            elif result is not None and not result.is_error:
                if await self._move(run, RunState.FINISHING):
                    await self._release(run)
                    await self._move(run, RunState.FINISHED)
                elif run._pause is not None:  # the pause won the race with the result
                    await self._settle_pause(run)
            else:
                await self._fail(run, _result_error(result, run))
        except Exception as error:  # noqa: BLE001 - any failure ends this run, and only this run
            logger.info("run %s failed: %s", run.id, error)  # an outcome, reported as an event
            await self._fail(run, _describe(error))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
                if run.state is RunState.PAUSING:  # cancelled while pausing: finish the pause
                    with suppress(Exception):
                        await self._settle_pause(run)
                if run.state.live:
                    await self._fail(run, "the control plane stopped before the run could pause")
            await self._close(run)

    async def _steps(self, run: Run, plan: _Plan) -> Result | None:
        """Get a node and run the agent, unless a pause or a deadline cuts in."""
        with anyio.CancelScope() as scope:
            run._abort = scope
            if plan.deadline is not None:
                scope.deadline = anyio.current_time() + plan.deadline
            try:
                provider = await self._provider(plan.provider, plan.provider_settings)
                reused, restored = await self._node_for(run, plan, provider)
                assert run._node is not None
                run._emit(NodeReady, node_id=run._node.node_id, reused=reused, transcript_restored=restored)
                if await self._move(run, RunState.RUNNING):
                    return await self._agent(run, plan, run._node)
                if run.state is not RunState.PAUSING:
                    raise NodeprovError(f"run {run.id} was taken over by another control plane")
                return None  # a pause won
            finally:
                run._abort = None
        if run.state is not RunState.PAUSING:  # cancelled by the deadline, or by a lost lease
            if plan.deadline is not None and anyio.current_time() >= scope.deadline:
                raise DeadlineError(
                    f"the run's deadline of {plan.deadline:g} s passed ({run._progress.waiting()})"
                )
            raise NodeprovError("the run was aborted")
        return None

    async def _release(self, run: Run, *, keep_for: float | None = None) -> None:
        """Destroy the run's node, or with ``keep_for`` keep it that many seconds for the
        resume, before the run reports its outcome. A node another control plane has begun
        to destroy meanwhile (the keep lost that race) is destroyed.

        A destroy that fails leaves the node recorded live, for reconcile to retry.
        """
        node, run._node = run._node, None
        if node is None:
            return
        suspended = False
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
            keep = keep_for is not None and await self.store.move_node(
                node.node_id, (_N.LIVE,), _N.KEPT, keep_for=keep_for
            )
            if keep_for is not None and not keep:
                logger.warning("node %s of run %s was taken for destruction: not kept", node.node_id, run.id)
            if keep:
                if node.can_suspend:  # nothing runs on it until the resume: stop paying for it
                    try:
                        await node.suspend(
                            suspend_timeout=min(node.suspend_timeout, self._cleanup_time(destroying=True))
                        )
                        suspended = True
                    except NodeprovError as error:
                        logger.warning(
                            "could not suspend kept node %s of run %s: %s", node.node_id, run.id, error
                        )
            else:
                try:  # bounded by the shutdown deadline too: destroy is shielded on its own
                    await node.destroy(
                        destroy_timeout=min(node.destroy_timeout, self._cleanup_time(destroying=True))
                    )
                except NodeprovError as error:
                    logger.warning("could not destroy node %s of run %s: %s", node.node_id, run.id, error)
                    return
                await self.store.set_node_state(node.node_id, _N.DESTROYED)
            run._emit(NodeReleased, node_id=node.node_id, kept=keep, suspended=suspended)

    async def _node_for(self, run: Run, plan: _Plan, provider: NodeProvider[Any]) -> tuple[bool, bool]:
        """Get the run's node into ``run._node``: the kept one, or a new one (with the
        transcript restored onto it when resuming). Returns (reused, restored).

        Provisioning is not shielded: a pause or shutdown interrupts it, and the provider
        removes whatever it had made (its contract), so the intent is settled as failed.
        """
        snapshot = plan.resume
        kept = snapshot.node_id if snapshot is not None and snapshot.node_kept else None
        # Taken from the kept state in one compare-and-set: a reconcile destroying it wins or loses whole.
        if kept and await self.store.move_node(kept, (_N.KEPT,), _N.LIVE):
            try:
                node = await provider.attach(kept)
                await node.wake()  # a suspended kept node: started again, ready to spawn
            except NodeGoneError as error:
                logger.info(
                    "kept node %s of run %s is gone (%s): provisioning a new one", kept, run.id, error
                )
                await self.store.set_node_state(kept, _N.DESTROYED)
            else:
                run._node = node
                await self._record_node(run, node)
                return True, False
        elif kept:
            logger.info("node %s of run %s is no longer kept: provisioning a new one", kept, run.id)
        await self._drop_kept_nodes(run)
        tools = dict(plan.node_config.tools)
        if plan.agent.options.ship_cli:
            cli = plan.agent.local_cli()
            if cli is None:
                raise ConfigError(f"ship_cli: the {plan.agent.name} agent's CLI is not found on this machine")
            tools[plan.agent.cli_name] = cli
        config = plan.node_config.model_copy(
            update={"session_id": run.id, "owner": self.owner, "tools": tools}
        )
        await self.store.node_intent(config.node_id, plan.provider, run.id)
        try:
            node = await provider.provision(config)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
                await self.store.set_node_state(config.node_id, _N.FAILED)
            raise
        run._node = node
        await self._record_node(run, node)
        if snapshot is not None and snapshot.agent_session_id and snapshot.project_key:
            archive = _Archive(self, snapshot.project_key)
            return False, await plan.agent.import_state(
                node, snapshot.agent_session_id, plan.agent.state_key(node, plan.workspace), archive
            )
        return False, False

    async def _drop_kept_nodes(self, run: Run) -> None:
        """Destroy nodes kept by earlier pauses of ``run`` that its resume does not use."""
        stale = await self.store.nodes(states=(_N.KEPT,), run_id=run.id)
        record = await self.store.run(run.id) if stale else None
        if record is not None:
            report = ReconcileReport()
            await self._destroy_nodes(record, stale, report, "its run resumed without it")
            for node_id, why in report.failed:
                logger.warning("could not destroy node %s kept for run %s: %s", node_id, run.id, why)

    def _keep_time(self, node: NodeHandle, keep_for: float) -> float:
        """How long ``node`` may be kept: ``keep_for``, but never past its own lifetime."""
        expires = node.labels.get(LABEL_EXPIRES_AT)
        if not expires:
            return keep_for
        try:
            left = (datetime.fromisoformat(expires) - datetime.now(UTC)).total_seconds()
        except ValueError:
            return 0.0
        return min(keep_for, left)

    async def _record_node(self, run: Run, node: NodeHandle) -> None:
        await self.store.set_node_state(node.node_id, _N.LIVE)
        await self.store.update_run(run.id, node_id=node.node_id)

    async def _save_state(self, run: Run) -> None:
        """Before the run's node goes: archive the agent's session state the node holds
        beyond the archived copy (see :meth:`Agent.export_state`)."""
        node, session, agent = run._node, run.agent_session_id, run._agent
        await self._flush_events()  # the frames received, so that the comparison sees them
        record = await self.store.run(run.id)
        if node is None or session is None or agent is None or record is None or not record.project_key:
            return
        archive = _Archive(self, record.project_key)
        await agent.export_state(node, session, agent.state_key(node, record.workspace_id), archive)

    async def _agent(self, run: Run, plan: _Plan, node: NodeHandle) -> Result | None:
        agent = plan.agent
        record = await self.store.run(run.id)
        key = record.project_key if record is not None else None
        if key is None:  # the run's first node names its archive, whatever nodes come after
            key = agent.state_key(node, plan.workspace)
            await self.store.update_run(run.id, project_key=key)
        result: Result | None = None
        resume = plan.resume.agent_session_id if plan.resume is not None else None
        archive = _Archive(self, key)
        session = agent.session(node, workspace=plan.workspace, resume=resume, archive=archive)
        run._session = session
        ended = False
        try:
            async for message in _progress_bounded(session.turn(plan.prompt), plan.idle_timeout, run):
                run._emit(AgentMessage, message=message)
                if session.session_id and session.session_id != run.agent_session_id:
                    run.agent_session_id = session.session_id
                    await self.store.update_run(run.id, agent_session_id=session.session_id)
                    record = await self.store.run(run.id)
                    if record is not None:  # the workspace's session follows its agent's
                        await self.store.set_provider_session_id(record.session_id, session.session_id)
                if isinstance(message, Result):
                    result = message
            ended = True
        finally:
            run._session = None
            await self._close_session(session, node, at_once=not ended and run._pause is None)
        return result

    async def _close_session(self, session: AgentSession, node: NodeHandle, *, at_once: bool) -> None:
        """Abort the agent: at once when a limit, an abort or a failure ended its turn (a
        limit ends what it bounds at the limit, not a stop policy's graces later); else
        politely, as its session's stop policy says, but never past the cleanup deadline
        (a shutdown's)."""
        with anyio.CancelScope(shield=True):
            if at_once:
                await node.kill_processes()
            async with anyio.create_task_group() as tg:

                async def at_the_deadline() -> None:
                    await anyio.sleep(self._cleanup_time())
                    await node.kill_processes()

                tg.start_soon(at_the_deadline)
                await session.aclose()
                tg.cancel_scope.cancel()

    async def _settle_pause(self, run: Run) -> None:
        """Save the pause's snapshot (once, even when settling is retried after a
        cancellation), release or keep the node, and end the run as paused."""
        pause = run._pause
        assert pause is not None
        if pause.saved is None:  # nothing to keep before provisioning, or past the node's lifetime
            keep_for = self._keep_time(run._node, pause.keep_for) if run._node is not None else 0.0
            keep = pause.keep_node and keep_for >= 1.0
            pause.keep_for = keep_for
            pause.saved = await self._snapshot(run, pause.kind, pause.reason, keep_node=keep)
        snapshot = pause.saved
        await self._save_state(run)  # a kept node too: it may be gone before the resume
        await self._release(run, keep_for=pause.keep_for if snapshot.node_kept else None)
        if await self._move(run, RunState.PAUSED, pause_request=None):
            pause.snapshot = snapshot
            logger.info(
                "run %s paused (%s): %s; node %s",
                run.id,
                pause.kind,
                pause.reason,
                "kept" if keep else "released",
            )
            run._emit(
                RunPaused, pause_kind=pause.kind, reason=pause.reason, token=snapshot.token, node_kept=keep
            )

    async def _fail(self, run: Run, error: str) -> None:
        """End ``run`` as failed, resumable when its agent session is known. Bounded and
        shielded; a store that fails here is logged (the run then ends in memory only, and
        reconcile settles its row once this control plane's lease is gone)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
            run.error = error
            try:
                if run.agent_session_id and run.state.live:
                    await self._snapshot(run, "system", error, keep_node=False)
                    await self._save_state(run)
                await self._release(run)
                await self._move(run, RunState.FAILED, error=error[:2000])
            except Exception:
                logger.exception("could not record the failure of run %s", run.id)

    async def _close(self, run: Run) -> None:
        """Report the end of this drive: the last event, flushed, then release the waiters."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._cleanup_time()):
            with suppress(Exception):
                await self._release(run)  # a failure before the release path, say
            run.outcome = run.state.outcome or "error"
            if run.outcome != "error":
                run.error = None
            elif run.error is None:
                run.error = f"the run ended {run.state}"
            run._emit(
                RunFinished, outcome=run.outcome, error=run.error, agent_session_id=run.agent_session_id
            )
            with suppress(Exception):
                await self._flush_events()
        if self._runs.get(run.id) is run:
            del self._runs[run.id]
        run._finished.set()
        for subscriber in run._subscribers:
            subscriber.push(None)

    async def _snapshot(self, run: Run, kind: str, reason: str, *, keep_node: bool) -> SnapshotRecord:
        record = await self.store.run(run.id)
        if record is None:
            raise RunStateError(f"run {run.id} is gone from the store")
        snapshot = _snapshot_of(
            record,
            node_id=run._node.node_id if run._node else record.node_id,
            agent_session_id=run.agent_session_id,
            kind=kind,
            reason=reason,
            keep_node=keep_node,
        )
        await self.store.save_snapshot(snapshot)
        return snapshot

    # -- events ------------------------------------------------------------------------

    def _queue_event(self, event: RunEvent) -> None:
        self._pending_events.append(event)
        self._events_waiting.set()

    def _queue_frames(self, key: StateKey, entries: list[Any]) -> None:
        # Keyed once, here: a batch written again after an unknown fate stores nothing twice.
        pending, keyed = self._pending_frames, [(entry_key(entry), entry) for entry in entries]
        if pending and pending[-1][0] == key:
            pending[-1][1].extend(keyed)
        else:
            pending.append((key, keyed))
        self._events_waiting.set()

    async def _writer(self) -> None:
        while True:
            await self._events_waiting.wait()
            self._events_waiting = anyio.Event()
            await anyio.sleep(_FLUSH_GATHER)  # let a batch gather
            try:
                await self._flush_events()
            except Exception:
                logger.exception("could not write run events; trying again")
                self._events_waiting.set()
                await anyio.sleep(1)

    async def _flush_events(self) -> None:
        """Write every pending event and transcript frame to the store, in one grouped
        transaction. Flushes are serialized, so frames reach the store in their order."""
        async with self._flush_lock:
            batch, self._pending_events = self._pending_events, []
            frames, self._pending_frames = self._pending_frames, []
            if not batch and not frames:
                return
            try:
                await self.store.append_events(
                    [EventRecord(e.run_id, e.seq, e.kind, e.at, json.dumps(e.to_json())) for e in batch],
                    frames,
                )
            except BaseException:
                self._pending_events[:0] = batch
                self._pending_frames[:0] = frames
                raise
            written = {(e.run_id, e.seq) for e in batch}
            for run_id in {e.run_id for e in batch}:
                run = self._runs.get(run_id)
                if run is not None:
                    run._unflushed = [e for e in run._unflushed if (e.run_id, e.seq) not in written]

    async def events(self, run_id: str, *, after: int = 0, follow: bool = True) -> AsyncIterator[RunEvent]:
        """The events of any run, from any process: those above sequence ``after``, then, with
        ``follow``, new ones as they are written, until the run's drive ends with nobody
        driving it (checked every ``poll_interval``), or its control plane is known to be
        gone (its lease expired or was released: nobody will write more; a reconcile ends the
        run). A server forwarding server-sent events passes the client's ``Last-Event-ID``
        as ``after``.

        Raises:
            RunStateError: there is no such run.
            StoreError: the store could not be read.
        """
        if await self.store.run(run_id) is None:
            raise RunStateError(f"no run {run_id}")
        last, ended = after, False
        while True:
            run = self._runs.get(run_id)
            if run is not None:
                async for event in run.events(after=last):
                    last = event.seq
                    ended = isinstance(event, RunFinished)
                    yield event
                continue  # it may have been resumed here meanwhile
            stored = await self.store.events(run_id, after=last)
            for item in stored:
                last = item.seq
                if (readable := _stored_event(item)) is not None:
                    ended = isinstance(readable, RunFinished)
                    yield readable
            if stored:
                continue
            if not follow:
                return
            record = await self.store.run(run_id)
            if ended and record is not None and not RunState(record.state).live:
                return
            orphaned = record is not None and RunState(record.state).live and run_id not in self._runs
            if orphaned and record is not None and (await self._owner_check())(record.owner) is False:
                return  # its control plane is gone: nobody will write more (reconcile ends it)
            await anyio.sleep(self._poll_interval)

    # -- across processes --------------------------------------------------------------

    async def request_pause(
        self, run_id: str, kind: PauseKind = "external", reason: str = "", *, keep_node: bool = False
    ) -> str:
        """Ask whichever control plane drives ``run_id`` to pause it (it checks every
        ``poll_interval``). For a run of this control plane, prefer :meth:`Run.pause`.
        Returns the request, for :meth:`withdraw_pause`.

        Raises:
            ConfigError: ``kind`` is not human, external or system.
            RunStateError: the run is not starting or running.
        """
        _check_pause_kind(kind)  # checked here: the driving process would meet it too late
        request = json.dumps({"kind": kind, "reason": reason, "keep_node": keep_node, "id": new_id("pause")})
        if not await self.store.update_run(
            run_id, expect_states=(RunState.STARTING, RunState.RUNNING), pause_request=request
        ):
            raise RunStateError(f"run {run_id} is not running")
        return request

    async def withdraw_pause(self, run_id: str, request: str) -> bool:
        """Take back a pause request nobody served (its control plane is gone, say), so a
        later resume does not pause at once. Returns whether it was still pending."""
        return await self.store.clear_pause_request(run_id, request)

    async def _serve_pause_requests(self) -> None:
        for run_id, raw in await self.store.pause_requests(self.owner):
            run = self._runs.get(run_id)
            if run is None or run._pause is not None or not run.state.live:
                continue
            assert self._tg is not None
            self._tg.start_soon(self._serve_pause, run, raw)

    async def _serve_pause(self, run: Run, raw: str) -> None:
        try:
            request = json.loads(raw)
            await run.pause(request["kind"], request["reason"], keep_node=bool(request["keep_node"]))
        except (NodeprovError, ValueError, KeyError, TypeError) as error:  # over meanwhile, or garbled
            logger.info("pause request for run %s not served: %s", run.id, error)
            with suppress(NodeprovError):
                await self.store.clear_pause_request(run.id, raw)

    # -- reconcile and garbage -----------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """Clean up after control planes that died, on any host sharing this store, and
        release the nodes no run will use.

        A run is orphaned when its owner is known to be gone: a lease of this store that
        expired or was released, or (for owners without a lease) a process known to be dead.
        A lease this store does not know is another store's: whether it lives cannot be told
        here, so its runs are left alone. An orphaned run's nodes (being made or live) are
        destroyed, and the run ends: ``failed`` with a resumable snapshot (kind ``system``)
        when its agent's session is known, ``finished`` when it was finishing.

        Nodes are destroyed too when their run is not live and will not use them: a destroy
        that failed; a node kept for a paused run whose keep time is up, whose resume token
        was used (the run resumed elsewhere, or ended), or whose workspace switched agents.
        Each node is taken for destruction in one compare-and-set on its state, so a pause
        keeping it or a resume taking it, landing meanwhile, wins or loses whole. Pause
        requests nobody will serve are cleared. A destroy that fails is reported and the rest
        goes on.

        Raises:
            StoreError: the store failed.
        """
        report = ReconcileReport()
        alive = await self._owner_check()
        for record in await self.store.runs(states=tuple(LIVE_STATES)):
            if record.id in self._runs or record.id in self._launching:
                continue
            if record.owner != self.owner and alive(record.owner) is not False:
                continue  # a live owner drives it, or another store's (ours, not driven here, is orphaned)
            reason = f"control plane {record.owner} died during the run"
            nodes = await self.store.nodes(states=(_N.INTENT, _N.LIVE, _N.DESTROYING), run_id=record.id)
            await self._destroy_nodes(record, nodes, report, reason)
            finishing = record.state == RunState.FINISHING
            if record.agent_session_id and not finishing:
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
            target = RunState.FINISHED if finishing else RunState.FAILED
            if await self.store.update_run(
                record.id,
                expect_states=(record.state,),
                expect_owner=record.owner,
                state=target,
                outcome=target.outcome,
                error=None if finishing else reason,
                pause_request=None,
            ):
                report.ended.append(record.id)
                await self._append_finished(record, target, None if finishing else reason)
        await self._release_unused_nodes(report)
        await self.store.clear_stale_pause_requests(
            tuple(s for s in RunState if s not in (RunState.STARTING, RunState.RUNNING))
        )
        return report

    async def _release_unused_nodes(self, report: ReconcileReport) -> None:
        """Destroy the nodes of runs that are not live and will not use them (see
        :meth:`reconcile`). A live run's nodes are its driver's: a resume takes its kept node
        or destroys the ones it does not use."""
        clock = await self.store.clock_ms()
        runs: dict[str, RunRecord | None] = {}
        for node in await self.store.nodes(states=(_N.INTENT, _N.LIVE, _N.KEPT, _N.DESTROYING)):
            if node.run_id in self._runs or node.run_id in self._launching:
                continue
            if node.run_id not in runs:
                runs[node.run_id] = await self.store.run(node.run_id)
            record = runs[node.run_id]
            if record is None or RunState(record.state).live:
                continue
            why = await self._unused(node, record, clock)
            if why is not None:
                await self._destroy_nodes(record, [node], report, why)

    async def _unused(self, node: NodeRecord, record: RunRecord, clock: int) -> str | None:
        """Why ``node`` of ``record`` (a run that is not live) will not be used, or ``None``
        when a resume may still take it."""
        if node.state != _N.KEPT:
            return f"its run is {record.state}"
        if node.keep_until_ms is None or node.keep_until_ms <= clock:
            return "its keep time is up"
        if record.state not in _RESUMABLE:
            return f"its run is {record.state}"
        snapshots = await self.store.snapshots(record.id)
        if not any(s.used_at is None and s.node_kept and s.node_id == node.id for s in snapshots):
            return "no resume will use it"
        if not await self._resumable_session(record):
            return "its workspace switched to another agent"
        return None

    async def _resumable_session(self, record: RunRecord) -> bool:
        """Whether the run's agent session is still its workspace's active one."""
        return any(
            session.id == record.session_id and session.state == "active"
            for session in await self.store.sessions(record.workspace_id)
        )

    async def _append_finished(self, record: RunRecord, state: RunState, error: str | None) -> None:
        """The ``run.finished`` event a dead control plane could not write, so followers end."""
        seq = await self.store.last_event_seq(record.id) + 1
        event = RunFinished(
            run_id=record.id,
            seq=seq,
            at=now(),
            outcome=state.outcome or "error",
            error=error,
            agent_session_id=record.agent_session_id,
        )
        with suppress(NodeprovError):  # its writer got there after all: the stream has an end
            await self.store.append_events(
                [EventRecord(record.id, seq, event.kind, event.at, json.dumps(event.to_json()))]
            )

    async def _owner_check(self) -> Callable[[str], bool | None]:
        """Whether an owner lives: a lease by this store (``None`` for a lease it does not
        know: another store's, whose holder may well live), other owners by
        :func:`owner_alive`."""
        leases = await self.store.lease_liveness()

        def alive(owner: str) -> bool | None:
            if owner.startswith(_LEASE_PREFIX):
                return leases.get(owner.removeprefix(_LEASE_PREFIX))
            return owner_alive(owner)

        return alive

    async def _provider_for(self, record: RunRecord) -> NodeProvider[Any]:
        """The provider of a run, as it was started, with this control plane's settings for
        it (the secrets a run never stores) laid over."""
        stored = json.loads(record.node_settings)
        return await self._provider(
            record.node_provider, {**stored, **self.provider_settings.get(record.node_provider, {})}
        )

    async def _destroy_nodes(
        self, record: RunRecord, nodes: list[NodeRecord], report: ReconcileReport, why: str
    ) -> None:
        """Destroy ``nodes`` of ``record``, each taken for destruction first (a
        compare-and-set from the state it was read in: one that moved meanwhile is skipped)."""
        if not nodes:
            return
        try:
            provider = await self._provider_for(record)
        except NodeprovError as error:
            report.failed.extend((node.id, str(error)) for node in nodes)
            return
        for node in nodes:
            if node.state != _N.DESTROYING and not await self.store.move_node(
                node.id, (node.state,), _N.DESTROYING
            ):
                continue  # kept by a pause, or taken by a resume, since it was read
            try:
                with suppress(NodeGoneError):  # never made, or gone with its host
                    await (await provider.attach(node.id)).destroy()
                await self.store.set_node_state(node.id, _N.DESTROYED)
                report.destroyed.append(node.id)
                logger.info("destroyed node %s of run %s: %s", node.id, record.id, why)
            except NodeprovError as error:
                logger.warning("could not destroy node %s of run %s: %s", node.id, record.id, error)
                report.failed.append((node.id, str(error)))

    async def collect_garbage(
        self, provider: NodeProvider[Any], *, dry_run: bool = False, settle: float = 0.0
    ) -> GarbageReport:
        """Reap ``provider``'s abandoned nodes, judging owners by the store: a lease of this
        store that expired or was released is gone; one it does not know is another store's,
        and its nodes are reaped only past their lifetime. Nodes the store holds (being
        made, live, or kept for a paused run) are reaped only past their lifetime:
        :meth:`reconcile` settles the others (``nodeprov gc`` runs it first).
        See :meth:`NodeProvider.collect_garbage` for ``settle``.

        Raises:
            ProviderError: the platform could not be asked.
            StoreError: the store failed.
        """
        held = {
            node.id for node in await self.store.nodes(states=(_N.INTENT, _N.LIVE, _N.KEPT, _N.DESTROYING))
        }
        report = await provider.collect_garbage(
            dry_run=dry_run, alive=await self._owner_check(), spare=held, settle=settle
        )
        if not dry_run:
            for info in report.reaped:
                await self.store.set_node_state(info.node_id, _N.DESTROYED)
        return report


def _check_limits(deadline: float | None, idle_timeout: float | None) -> None:
    for name, value in (("deadline", deadline), ("idle_timeout", idle_timeout)):
        if value is not None and not 0 < value < float("inf"):
            raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")


def _storable_node_config(config: NodeConfig) -> str:
    """What a run's every node is made from: ``config`` less what each node has of its own."""
    return config.model_dump_json(exclude={"node_id", "owner", "session_id", "provision_key"})


def _stored_event(record: EventRecord) -> RunEvent | None:
    """The event stored as ``record``; ``None`` (logged) for one this version cannot read,
    such as a kind added by a newer control plane: followers go on past it."""
    try:
        return event_from_json(json.loads(record.body))
    except (ValueError, TypeError) as error:
        logger.warning("skipping unreadable event %d of run %s: %s", record.seq, record.run_id, error)
        return None


class _Archive:
    """The store's archive of a run's agent session state (a
    :class:`~nodeprov.agents.SessionArchive`), under the run's own key: the state key of the
    run's first node. An agent names keys by where the state lies on its node, which
    changes with the node (a local or SSH node's directory is in it); filed under the run's
    key, the whole conversation stays in one place whatever the number of nodes it lived
    on. Entries added go out with the orchestrator's batched event writes."""

    def __init__(self, orchestrator: Orchestrator, run_key: str) -> None:
        self._orchestrator = orchestrator
        self._transcripts = orchestrator.store.transcripts
        self._run_key = run_key

    def _filed(self, key: StateKey) -> StateKey:
        return {**key, "project_key": self._run_key}

    def add(self, key: StateKey, entries: list[dict[str, Any]]) -> None:
        if entries:
            self._orchestrator._queue_frames(self._filed(key), entries)

    async def flush(self) -> None:
        # Called in the SDK's reader task, which the SDK cancels natively (piercing anyio's
        # shields): the write runs in a task of the orchestrator's, and only the wait here
        # can be cancelled. A failure is logged and retried by the writer, as the SDK's own
        # mirror reports and drops it.
        done = anyio.Event()

        async def write() -> None:
            try:
                await self._orchestrator._flush_events()
            except Exception as error:  # noqa: BLE001 - the writer tries again
                logger.warning("could not store agent session state yet: %s", error)
                self._orchestrator._events_waiting.set()
            finally:
                done.set()

        tg = self._orchestrator._tg
        assert tg is not None
        tg.start_soon(write)
        await done.wait()

    async def load(self, key: StateKey) -> list[dict[str, Any]] | None:
        return await self._transcripts.load(self._filed(key))

    async def subpaths(self, key: StateKey) -> list[str]:
        return await self._transcripts.subpaths(self._filed(key))

    async def replace(self, key: StateKey, entries: list[dict[str, Any]]) -> None:
        await self._orchestrator._flush_events()  # what was queued before goes first
        await self._transcripts.replace(self._filed(key), entries)


class _Progress:
    """What the agent is waiting for, and how the model API has been failing, so that a run
    that times out can say why."""

    def __init__(self) -> None:
        self.tool: str | None = None  # the tool the agent waits on, else the model
        self.retries = 0
        self.failure = ""

    def saw(self, message: Message) -> bool:
        """Note ``message``; return whether it is progress (model-API retry notices are not)."""
        if isinstance(message, Notice) and message.retry:
            self.retries += 1
            self.failure = message.text
            return False
        if isinstance(message, ToolUse):
            self.tool = message.name
        elif isinstance(message, ToolResult | Result):
            self.tool = None
        return True

    def waiting(self) -> str:
        if self.tool is not None:
            return f"waiting for its {self.tool} tool"
        if self.retries:
            return f"waiting for the model API, which failed {self.retries} times: {self.failure}"
        return "waiting for the model API"

    def cause(self) -> str:
        return f" (the model API failed {self.retries} times: {self.failure})" if self.retries else ""


async def _progress_bounded(
    messages: AsyncIterator[Message], idle_timeout: float | None, run: Run
) -> AsyncIterator[Message]:
    """``messages``, ended with :class:`DeadlineError` when none but API-retry notices come
    for ``idle_timeout`` seconds; the error says what the agent was waiting for."""
    if idle_timeout is None:  # no cancel scope per message
        async for message in messages:
            run._progress.saw(message)
            yield message
        return
    progress_at = anyio.current_time()
    while True:
        with anyio.move_on_after(progress_at + idle_timeout - anyio.current_time()) as waiting:
            try:
                message = await anext(messages)
            except StopAsyncIteration:
                return
        if waiting.cancelled_caught:
            raise DeadlineError(
                f"the agent made no progress for {idle_timeout:g} s ({run._progress.waiting()})"
            )
        if run._progress.saw(message):
            progress_at = anyio.current_time()
        yield message


def _result_error(result: Result | None, run: Run) -> str:
    """Why the agent's result is a failure, in the agent's own words where it gave them."""
    if result is None:
        return "the agent ended without a result" + run._progress.cause()
    return (result.text or "the agent ended with an error") + run._progress.cause()


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__


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
        agent=record.agent,
    )


async def _agent_of(make: Callable[[], Agent[Any]]) -> Agent[Any]:
    """``make()`` in a worker thread: the first use of an agent (or provider) imports its
    module, which for Claude's SDK takes most of a second, a stall of the event loop that
    would starve the lease's heartbeat and every run's relay."""
    return await anyio.to_thread.run_sync(make)


def _resumed_agent(record: RunRecord, options: AgentOptions | Mapping[str, Any] | None) -> Agent[Any]:
    """The run's own agent, with ``options`` laid over its stored ones.

    Raises:
        ConfigError: the options are invalid for that agent.
    """
    given = (
        options.model_dump(exclude_unset=True) if isinstance(options, AgentOptions) else dict(options or {})
    )
    return get_agent(record.agent, {**json.loads(record.agent_options), **(given or {})})
