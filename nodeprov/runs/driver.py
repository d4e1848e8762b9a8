"""One run's workflow through the state table (:mod:`nodeprov.runs.state`): get a node, run
the agent, then finish, pause or fail, releasing or keeping the node, bounded even when the
control plane shuts down."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio

from ..agents import Agent, AgentSession, Result
from ..agents.registry import imported
from ..errors import AttachTakenError, DeadlineError, NodeprovError, RunStateError, log_failure
from ..node import LABEL_EXPIRES_AT, NodeHandle
from ..prompts import prompt_images, prompt_text
from ..store import NodeRecordState, SnapshotRecord, Store
from .acquire import NodeSource
from .archive import Archive
from .events import (
    AgentMessage,
    NodeReady,
    NodeReleased,
    RunFinished,
    RunPaused,
    RunStarted,
)
from .journal import RunEvents
from .keeping import kept_agent
from .launch import Plan
from .pools import Pools
from .progress import Progress, progress_bounded, result_error
from .run import TURN_ENDED, Pause, Run, snapshot_of
from .state import TRANSITIONS, RunState

if TYPE_CHECKING:
    from .plane import ControlPlane

__all__ = ["Drive", "Driver", "Steps", "Teardown"]

_N = NodeRecordState

Steps = Callable[["Drive", Plan], Awaitable[Result | None]]
"""Get a run's node and run its agent (see :meth:`Driver.drive`): the result of the turn, None
when a pause cut in."""
logger = logging.getLogger("nodeprov.runs")

_INTERRUPT_TIMEOUT = 10.0  # the polite interrupt; the abort after it is certain
_CLEANUP_TIMEOUT = 180.0  # a run's own teardown outside a shutdown: destroy plus store writes


class Teardown:
    """How long a run's teardown may still take: a bounded time, or, once the control plane
    is shutting down, until its shutdown deadline."""

    def __init__(self, shutdown_timeout: float) -> None:
        self._shutdown_timeout = shutdown_timeout
        self._shutdown_at: float | None = None

    def shut_down(self) -> None:
        """The control plane is shutting down: the deadline is ``shutdown_timeout`` from now."""
        self._shutdown_at = anyio.current_time() + self._shutdown_timeout

    def time_left(self, *, destroying: bool = False) -> float:
        """How long a teardown may still take: until the shutdown deadline, if shutting down.
        Destroying a node leaves a quarter of the shutdown time for the store writes after it."""
        if self._shutdown_at is None:
            return _CLEANUP_TIMEOUT
        reserve = self._shutdown_timeout / 4 if destroying else 0.0
        return max(0.0, self._shutdown_at - reserve - anyio.current_time())


class Drive:
    """One drive of a run: the caller's handle, its events, and what the driver holds while
    it drives the run."""

    def __init__(self, run: Run, events: RunEvents, agent: Agent[Any]) -> None:
        self.run = run
        self.events = events
        self.agent = agent
        self.node: NodeHandle | None = None
        self.session: AgentSession | None = None
        self.steps: anyio.CancelScope | None = None  # getting the node and running the agent
        self.pause: Pause | None = None  # set by the move to pausing
        self.progress = Progress()
        self.moving = anyio.Lock()
        self.keeper: str | None = None  # the kept agent's, as the store has it
        self.detaching = False  # leaving the run running, its kept agent to another drive

    def abort(self) -> None:
        """Cancel the run's steps (provisioning, the agent), if under way."""
        if self.steps is not None:
            self.steps.cancel()

    def detach(self) -> None:
        """End this drive and leave the run running: its kept agent goes on without it."""
        self.detaching = True
        self.abort()


class Driver:
    """Drives runs through the state table, each move a compare-and-set on the run's state
    and its owner (``lease``'s). A failure ends its run, never another."""

    def __init__(self, plane: ControlPlane, *, keep_for: float, pools: Pools) -> None:
        self._store, self._lease, self._journal = plane.store, plane.lease, plane.journal
        self._nodes, self._teardown = plane.nodes, plane.teardown
        self._source = NodeSource(
            plane.store,
            plane.lease,
            plane.nodes,
            pools,
            time_left=plane.teardown.time_left,
            archive=self._archive,
            checkpoints=plane.checkpoints,
        )
        self._checkpoints = plane.checkpoints
        self._keep_for = keep_for
        self._spawn = plane.spawn

    def begin(self, run_id: str, plan: Plan, first_seq: int) -> Drive:
        """A drive of ``run_id`` by ``plan``, its ``run.started`` emitted: :meth:`drive` drives it."""
        drive = self.new_drive(run_id, RunState.STARTING, plan, first_seq)
        if plan.resume is not None:  # a pause before the agent starts must keep the session
            drive.run.agent_session_id = plan.resume.agent_session_id
        resumed = f"{plan.resume.pause_kind} pause at {plan.resume.created_at}" if plan.resume else None
        if (checkpoint := plan.start_from) is not None:
            resumed = f"checkpoint {checkpoint.id} of run {checkpoint.run_id}"
        drive.events.emit(
            RunStarted,
            prompt=prompt_text(plan.prompt),
            images=tuple(image.ref() for image in prompt_images(plan.prompt)),
            provider=plan.provider,
            agent=plan.agent.name,
            resumed_from=resumed,
            checkpoint=checkpoint.id if checkpoint is not None else None,
        )
        return drive

    def new_drive(self, run_id: str, state: RunState, plan: Plan, first_seq: int) -> Drive:
        """A drive of ``run_id`` by ``plan``, in ``state``, its events numbered from ``first_seq``."""

        def pause(request: Pause) -> Awaitable[SnapshotRecord]:
            return self._pause(drive, request)  # bound below, before the run is handed out

        events = self._journal.stream(run_id, first_seq)
        drive = Drive(
            Run(
                run_id,
                state,
                events,
                pause,
                self._keep_for,
                keep_node=plan.keep_node,
                agent_grace=plan.agent_grace,
            ),
            events,
            plan.agent,
        )
        return drive

    def abortable(self, steps: Steps) -> Steps:
        """``steps`` that a pause, the plan's deadline, or the control plane's end cuts short."""

        async def cut_short(drive: Drive, plan: Plan) -> Result | None:
            run = drive.run
            with anyio.CancelScope() as scope:
                drive.steps = scope
                if drive.pause is not None or drive.detaching:  # asked before the steps began
                    scope.cancel()
                if plan.deadline is not None:
                    scope.deadline = anyio.current_time() + plan.deadline
                try:
                    return await steps(drive, plan)
                finally:
                    drive.steps = None
            if run.state is not RunState.PAUSING and not drive.detaching:  # a deadline, a lost lease
                if plan.deadline is not None and anyio.current_time() >= scope.deadline:
                    raise DeadlineError(
                        f"the run's deadline of {plan.deadline:g} s passed ({drive.progress.waiting()})"
                    )
                raise NodeprovError("the run was aborted")
            return None

        return cut_short

    async def drive(self, drive: Drive, plan: Plan, steps: Steps | None = None) -> None:
        """Drive the run to a state nobody drives and write its last event; the caller then
        ends the drive's events (:meth:`RunEvents.end`). Never raises: whatever fails ends
        the run. ``steps`` get the node and run the agent (default: provision, or take the
        kept node, and start the agent's turn)."""
        run = drive.run
        try:
            result = await (steps or self.abortable(self._provisioned))(drive, plan)
            if drive.detaching:
                pass  # the run goes on, with no drive until one takes it over
            elif run.state is RunState.PAUSING:
                await self._settle_pause(drive, plan)
            elif result is not None and not result.is_error and plan.pause_after_turn:
                await self._pause_after_turn(drive, plan)
            elif result is not None and not result.is_error:
                if await self._move(drive, RunState.FINISHING):
                    if plan.checkpoint == "turn" and drive.node is not None:
                        await self._checkpoint(drive, "turn")
                    await self._release(drive)
                    await self._move(drive, RunState.FINISHED)
                elif drive.pause is not None:  # the pause won the race with the result
                    await self._settle_pause(drive, plan)
            else:
                await self._fail(drive, result_error(result, drive.progress))
        except Exception as error:  # noqa: BLE001 - any failure ends this run, and only this run
            if drive.detaching:  # another control plane took the agent (see run_agent): the run is its
                logger.warning("run %s: another control plane took its agent over; leaving it", run.id)
            else:
                logger.info("run %s failed: %s", run.id, error)  # an outcome, reported as an event
                await self._fail(drive, _describe(error))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._teardown.time_left()):
                if run.state is RunState.PAUSING:  # cancelled while pausing: finish the pause
                    with suppress(Exception):
                        await self._settle_pause(drive, plan)
                if run.state.live and not drive.detaching:
                    await self._fail(drive, "the control plane stopped before the run could pause")
            await self._close(drive)

    async def _pause(self, drive: Drive, pause: Pause) -> SnapshotRecord:
        """:meth:`Run.pause`, once its arguments are checked."""
        run = drive.run
        if drive.pause is not None:
            raise RunStateError(f"run {run.id} is being paused already: it cannot be paused")

        def paused() -> None:
            drive.pause = pause

        if not await self._move(drive, RunState.PAUSING, unless=lambda: drive.pause is not None, then=paused):
            raise RunStateError(f"run {run.id} is {run.state}: it cannot be paused")
        session = drive.session
        if session is not None:
            with anyio.move_on_after(_INTERRUPT_TIMEOUT), suppress(Exception):
                await session.interrupt()  # a dying agent may refuse: the abort is what counts
        drive.abort()
        await drive.events.wait_ended()
        if pause.snapshot is None:
            raise RunStateError(f"run {run.id} failed while pausing: {run.error}")
        return pause.snapshot

    async def _pause_after_turn(self, drive: Drive, plan: Plan) -> None:
        """End the turn's drive as a pause (``pause_after_turn``), or as the pause that won
        the race with the result."""

        def paused() -> None:
            drive.pause = Pause("system", TURN_ENDED, plan.keep_node, self._keep_for)

        await self._move(drive, RunState.PAUSING, unless=lambda: drive.pause is not None, then=paused)
        if drive.pause is not None:
            await self._settle_pause(drive, plan)

    async def _move(
        self,
        drive: Drive,
        target: RunState,
        *,
        unless: Callable[[], bool] | None = None,
        then: Callable[[], None] | None = None,
        **changes: Any,
    ) -> bool:
        """Move the run to ``target`` if the table allows it from where it stands: one
        compare-and-set in the store, on the run's state and its owner (this control
        plane). ``unless`` may veto first; ``then`` runs once the run has moved, before any
        other mover of the run. Returns whether the run moved."""
        run = drive.run
        async with drive.moving:
            if target not in TRANSITIONS[run.state] or (unless is not None and unless()):
                return False
            if target.outcome is not None:
                changes.setdefault("outcome", target.outcome)
            moved = await self._store.update_run(
                run.id, expect_states=(run.state,), expect_owner=self._lease.owner, state=target, **changes
            )
            if not moved:
                logger.warning("run %s changed under this control plane (lease lost?)", run.id)
                return False
            run.state = target
            if then is not None:
                then()
            return True

    async def _provisioned(self, drive: Drive, plan: Plan) -> Result | None:
        """Get a node (provisioned, or the kept one) and run the agent's turn."""
        run = drive.run
        provider = await self._nodes.provider(plan.provider, plan.provider_settings)
        got = await self._source.get(drive, run.id, plan, provider)
        assert drive.node is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        drive.events.emit(
            NodeReady,
            node_id=drive.node.node_id,
            reused=got.reused,
            transcript_restored=got.transcript_restored,
            pool=got.pool,
            workspace_restored=got.workspace_restored,
        )
        if await self._move(drive, RunState.RUNNING):
            return await self.run_agent(drive, plan, drive.node)
        if run.state is not RunState.PAUSING:
            raise NodeprovError(f"run {run.id} was taken over by another control plane")
        return None  # a pause won

    async def _release(self, drive: Drive, *, keep_for: float | None = None) -> None:
        """Destroy the run's node, or with ``keep_for`` keep it that many seconds for the
        resume, before the run reports its outcome. A node another control plane has begun
        to destroy meanwhile (the keep lost that race) is destroyed.

        A destroy that fails leaves the node recorded live, for reconcile to retry.
        """
        node, drive.node = drive.node, None
        if node is None:
            return
        run_id = drive.run.id
        suspended = False
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._teardown.time_left()):
            keep = keep_for is not None and await self._store.move_node(
                node.node_id, (_N.LIVE,), _N.KEPT, keep_for=keep_for
            )
            if keep_for is not None and not keep:
                logger.warning("node %s of run %s was taken for destruction: not kept", node.node_id, run_id)
            if keep:
                if node.can_suspend:  # nothing runs on it until the resume: stop paying for it
                    try:
                        await node.suspend(
                            suspend_timeout=min(
                                node.suspend_timeout, self._teardown.time_left(destroying=True)
                            )
                        )
                        suspended = True
                    except NodeprovError as error:
                        logger.warning(
                            "could not suspend kept node %s of run %s: %s", node.node_id, run_id, error
                        )
            else:
                try:  # bounded by the shutdown deadline too: destroy is shielded on its own
                    await node.destroy(
                        destroy_timeout=min(node.destroy_timeout, self._teardown.time_left(destroying=True))
                    )
                except NodeprovError as error:
                    logger.warning("could not destroy node %s of run %s: %s", node.node_id, run_id, error)
                    return
                await self._store.set_node_state(node.node_id, _N.DESTROYED)
            drive.events.emit(NodeReleased, node_id=node.node_id, kept=keep, suspended=suspended)

    def _archive(self, run_key: str) -> Archive:
        return Archive(self._journal, self._store.transcripts, run_key, self._spawn)

    async def _save_state(self, drive: Drive) -> None:
        """Before the run's node goes: archive the agent's session state the node holds
        beyond the archived copy (see :meth:`Agent.export_state`)."""
        node, session, agent = drive.node, drive.run.agent_session_id, drive.agent
        await self._journal.flush()  # the frames received, so that the comparison sees them
        record = await self._store.run(drive.run.id)
        if node is None or session is None or record is None or not record.project_key:
            return
        archive = self._archive(record.project_key)
        await imported(type(agent))
        await agent.export_state(node, session, agent.state_key(node, record.workspace_id), archive)

    async def run_agent(
        self, drive: Drive, plan: Plan, node: NodeHandle, follow: tuple[str, int] | None = None
    ) -> Result | None:
        """Run the agent's turn on ``node``, its messages the run's events; with ``follow``
        (a keeper, and the messages the run has), re-attach to a kept agent's turn instead.
        Its result, None when the turn ended without one."""
        run = drive.run
        agent = plan.agent
        await imported(type(agent))  # started with the run, beside its node's provisioning
        record = await self._store.run(run.id)
        key = record.project_key if record is not None else None
        if key is None:  # the run's first node names its archive, whatever nodes come after
            key = agent.state_key(node, plan.workspace)
            await self._store.update_run(run.id, project_key=key)
        result: Result | None = None
        resume = plan.resume.agent_session_id if plan.resume is not None and follow is None else None
        keep = kept_agent(self._store, self._lease, drive, plan.agent_grace)
        session = agent.session(
            node, workspace=plan.workspace, resume=resume, archive=self._archive(key), keep=keep
        )
        drive.session = session
        ended = False
        try:
            messages = session.turn(plan.prompt) if follow is None else session.follow(*follow)
            async for message in progress_bounded(messages, plan.idle_timeout, drive.progress):
                drive.events.emit(AgentMessage, message=message)
                if session.keeper != drive.keeper:  # where another control plane finds the agent
                    drive.keeper = session.keeper
                    await self._store.update_run(run.id, agent_keeper=session.keeper)
                if session.session_id and session.session_id != run.agent_session_id:
                    run.agent_session_id = session.session_id
                    await self._store.update_run(run.id, agent_session_id=session.session_id)
                    record = await self._store.run(run.id)
                    if record is not None:  # the workspace's session follows its agent's
                        await self._store.set_provider_session_id(record.session_id, session.session_id)
                if isinstance(message, Result):
                    result = message
            ended = True
        except Exception as error:
            if taken(error):  # nothing of the agent is this drive's to stop or release
                drive.detaching = True
            raise
        finally:
            drive.session = None
            if drive.detaching:
                await session.detach()
            else:
                await _close_session(session, node, self._teardown, at_once=not ended and drive.pause is None)
        return result

    async def _settle_pause(self, drive: Drive, plan: Plan) -> None:
        """Save the pause's snapshot (once, even when settling is retried after a
        cancellation), release or keep the node, and end the run as paused."""
        pause = drive.pause
        assert pause is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        if pause.saved is None:  # nothing to keep before provisioning, or past the node's lifetime
            keep_for = _keep_time(drive.node, pause.keep_for) if drive.node is not None else 0.0
            pause.keep_for = keep_for
            pause.saved = await _snapshot(
                self._store, drive, pause.kind, pause.reason, keep_node=pause.keep_node and keep_for >= 1.0
            )
        snapshot = pause.saved
        keep = snapshot.node_kept  # a settling retried after a cancellation has only the snapshot
        await self._save_state(drive)  # a kept node too: it may be gone before the resume
        if drive.node is not None and not pause.checkpointed and plan.checkpoint != "off":
            pause.checkpointed = True  # the files with the session, for a resume on any node
            await self._checkpoint(drive, "pause")
        await self._release(drive, keep_for=pause.keep_for if keep else None)
        if await self._move(drive, RunState.PAUSED, pause_request=None):
            pause.snapshot = snapshot
            logger.info(
                "run %s paused (%s): %s; node %s",
                drive.run.id,
                pause.kind,
                pause.reason,
                "kept" if keep else "released",
            )
            drive.events.emit(
                RunPaused, pause_kind=pause.kind, reason=pause.reason, token=snapshot.token, node_kept=keep
            )

    async def _checkpoint(self, drive: Drive, reason: str) -> None:
        """Checkpoint the run's workspace on its node with its agent's session; a failure is
        told as ``checkpoint.failed``, and the run goes on."""
        assert drive.node is not None  # noqa: S101 - narrows a type: its callers hold the node
        with suppress(NodeprovError):
            await self._checkpoints.take(
                drive.run.id, drive.node, drive.events, reason=reason, session=drive.run.agent_session_id
            )

    async def _fail(self, drive: Drive, error: str) -> None:
        """End the run as failed, resumable when its agent session is known. Bounded and
        shielded; a store that fails here is logged (the run then ends in memory only, and
        reconcile settles its row once this control plane's lease is gone)."""
        run = drive.run
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._teardown.time_left()):
            run.error = error
            try:
                if run.agent_session_id and run.state.live:
                    await _snapshot(self._store, drive, "system", error, keep_node=False)
                    await self._save_state(drive)
                await self._release(drive)
                await self._move(drive, RunState.FAILED, error=error[:2000])
            except Exception as failure:  # noqa: BLE001 - logged (log_failure)
                log_failure(logger, failure, "could not record the failure of run %s", run.id)

    async def _close(self, drive: Drive) -> None:
        """Report the end of this drive: the last event, flushed. A detached drive's run goes
        on: it keeps its node, and has no last event yet."""
        run = drive.run
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._teardown.time_left()):
            if drive.detaching and run.state.live:
                run.outcome = "detached"
                with suppress(Exception):
                    await self._journal.flush()
                return
            with suppress(Exception):
                await self._release(drive)  # a failure before the release path, say
            run.outcome = run.state.outcome or "error"
            if run.outcome != "error":
                run.error = None
            elif run.error is None:
                run.error = f"the run ended {run.state}"
            drive.events.emit(
                RunFinished, outcome=run.outcome, error=run.error, agent_session_id=run.agent_session_id
            )
            with suppress(Exception):
                await self._journal.flush()


async def _snapshot(store: Store, drive: Drive, kind: str, reason: str, *, keep_node: bool) -> SnapshotRecord:
    """Save a snapshot of ``drive``'s run for its resume."""
    run = drive.run
    record = await store.run(run.id)
    if record is None:
        raise RunStateError(f"run {run.id} is gone from the store")
    snapshot = snapshot_of(
        record,
        node_id=drive.node.node_id if drive.node else record.node_id,
        agent_session_id=run.agent_session_id,
        kind=kind,
        reason=reason,
        keep_node=keep_node,
    )
    await store.save_snapshot(snapshot)
    return snapshot


async def _close_session(
    session: AgentSession, node: NodeHandle, teardown: Teardown, *, at_once: bool
) -> None:
    """Abort the agent: at once when a limit, an abort or a failure ended its turn (a
    limit ends what it bounds at the limit, not a stop policy's graces later); else
    politely, as its session's stop policy says, but never past the cleanup deadline
    (a shutdown's)."""
    with anyio.CancelScope(shield=True):
        if at_once:
            await node.kill_processes()
        async with anyio.create_task_group() as tg:

            async def at_the_deadline() -> None:
                await anyio.sleep(teardown.time_left())
                await node.kill_processes()

            tg.start_soon(at_the_deadline)
            await session.aclose()
            tg.cancel_scope.cancel()


def taken(error: BaseException) -> bool:
    """Whether ``error`` says, or was caused by, a kept agent's attach taken by another
    control plane (:class:`~nodeprov.errors.AttachTakenError`)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, AttachTakenError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _keep_time(node: NodeHandle, keep_for: float) -> float:
    """How long ``node`` may be kept: ``keep_for``, but never past its own lifetime."""
    expires = node.labels.get(LABEL_EXPIRES_AT)
    if not expires:
        return keep_for
    try:
        left = (datetime.fromisoformat(expires) - datetime.now(UTC)).total_seconds()
    except ValueError:
        return 0.0
    return min(keep_for, left)


def _describe(error: BaseException) -> str:
    return str(error) or type(error).__name__
