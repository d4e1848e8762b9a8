"""Kept agents in runs: how a control plane takes over the running runs of a dead one whose
agents are kept on their nodes (:class:`Takeover`; the steps of such a drive in
:func:`follower`).

A run's agent, kept (:func:`kept_agent`), outlives its channel and
its control plane for ``agent_grace`` seconds (:mod:`nodeprov.node.keeper`). The run stores
where (``agent_keeper``); reconcile, finding the run's owner dead, takes the run over in one
compare-and-set on its owner, attaches its node and re-attaches to the agent: the agent's
output is read again from the start of its turn, and the first messages, those the store
has as events of the drive, are not emitted twice. Only when the agent is gone does the run
end as reconcile ends any orphan (failed, resumable).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio

from ..agents import Result
from ..errors import NodeGoneError, NodeprovError, RunStateError, StoreError
from ..node import NodeProvider
from ..node.keeper import Detached, KeepOptions, Reattached, kept_state, stop_kept
from ..store import RunRecord, Store
from .events import AgentDetached, AgentMessage, AgentReattached, RunStarted, event_from_json
from .launch import Launcher, Plan
from .lease import owner_lives
from .nodes import Nodes
from .state import RunState

if TYPE_CHECKING:
    from .driver import Drive, Driver, Steps
    from .lease import Lease
    from .plane import ControlPlane

__all__ = ["TAKEOVER_WINDOW", "Takeover", "follower", "kept_agent"]

logger = logging.getLogger("nodeprov.runs")

_STOP_GRACE = 10.0  # seconds a kept agent has to stop on SIGTERM before SIGKILL


def follower(
    driver: Driver,
    nodes: Nodes,
    node_id: str,
    keeper: str,
    *,
    skip: int,
    since: float,
    stored: Result | None = None,
) -> Steps:
    """The steps of a drive that took a run over: attach its node and re-attach to its kept
    agent (``keeper``), whose first ``skip`` messages of the turn the run has (``stored``:
    the turn's result, if among them); ``since`` is when the run was last heard of (epoch
    seconds), for the gap its event says.

    The steps raise :class:`~nodeprov.errors.NodeGoneError` when the agent is gone (its
    keeper too); one that ended while no control plane was attached has its turn's end read
    from its output."""

    async def follow(drive: Drive, plan: Plan) -> Result | None:
        run = drive.run
        provider = await nodes.provider(plan.provider, plan.provider_settings)
        try:
            node = drive.node = await provider.attach(node_id)
            # An agent that ended meanwhile left its output: the turn's end is read from there.
            if await kept_state(node, keeper) == "gone":
                if stored is not None:  # its turn was over, and stored: only the run's end is left
                    return stored
                raise NodeGoneError(f"the agent of run {run.id} is gone from node {node_id}")
            drive.events.emit(AgentReattached, gap=round(max(0.0, time.time() - since), 3), attempts=1)
            result = await driver.run_agent(drive, plan, node, follow=(keeper, skip))
            return result if result is not None else stored  # stored, then its owner died
        finally:
            if not drive.detaching:  # a pause or an end cut in, maybe before the session was there
                await _stopped(drive, provider, node_id, keeper)

    return driver.abortable(follow)


async def _stopped(drive: Drive, provider: NodeProvider[Any], node_id: str, keeper: str) -> None:
    """Make sure the kept agent a taken-over drive followed has stopped, before the run
    reports its pause or end (a pause that came before the re-attach had no session to
    stop): the node attached if it was not yet, the agent stopped on it. Shielded and
    bounded; a node that is gone has nothing left to stop."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(_STOP_GRACE + 30):
        try:
            if drive.node is None:
                drive.node = await provider.attach(node_id)
            if await stop_kept(drive.node, keeper, term_grace=_STOP_GRACE) == "running":
                logger.warning("the agent of run %s outlived its stop on node %s", drive.run.id, node_id)
        except NodeprovError as error:
            logger.warning("could not stop the agent of run %s on node %s: %s", drive.run.id, node_id, error)


@dataclasses.dataclass(frozen=True)
class _Turn:
    """A run's stored events of its last drive: the last ``seq``, how many agent ``messages``
    it has, when the last was written (epoch seconds), and the turn's ``result`` if it was
    stored (a control plane that died between it and the run's end)."""

    last_seq: int
    messages: int
    since: float
    result: Result | None = None


async def _turn_so_far(store: Store, run_id: str) -> _Turn:
    """What the store has of ``run_id``'s last drive (since its last ``run.started``).

    Raises:
        StoreError: the store failed.
    """
    last_seq, messages, at, result = 0, 0, "", None
    while batch := await store.events(run_id, after=last_seq):
        for record in batch:
            last_seq, at = record.seq, record.at
            if record.kind == RunStarted.kind:
                messages, result = 0, None
            elif record.kind == AgentMessage.kind:
                messages += 1
                event = event_from_json(json.loads(record.body))
                if isinstance(event, AgentMessage) and isinstance(event.message, Result):
                    result = event.message
    since = datetime.fromisoformat(at).timestamp() if at else time.time()
    return _Turn(last_seq, messages, since, result)


class Takeover:
    """Takes over running runs of dead control planes whose agents are kept (the
    orchestrator's reconcile asks, see :meth:`adopt`); ``launch`` drives a taken run here,
    and ``launching`` holds the ids of those being taken, for reconcile to leave alone."""

    def __init__(self, plane: ControlPlane, launcher: Launcher) -> None:
        assert plane.driver is not None  # noqa: S101 - narrows a type: the plane's driver is made first
        self._store, self._lease, self._nodes = plane.store, plane.lease, plane.nodes
        self._launcher = launcher
        self._driver = plane.driver
        self._launch = plane.drive_here
        self._launching = plane.launching

    async def adopt_run(self, run_id: str) -> None:
        """Take over ``run_id``, a running run whose control plane is dead and whose agent is
        kept, and drive it here from where its stored events end (as :meth:`adopt` does for
        reconcile).

        Raises:
            RunStateError: no such run; or it is not running, its control plane lives (or
                cannot be told dead), its agent is not kept, or another took it first.
            StoreError: the store failed.
        """
        record = await self._store.run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}")
        if record.state != RunState.RUNNING or record.agent_keeper is None:
            raise RunStateError(
                f"run {run_id} is {record.state}, its agent not kept: it cannot be taken over"
            )
        if record.owner != self._lease.owner and await owner_lives(self._store, record.owner) is not False:
            raise RunStateError(f"run {run_id} is driven by a live control plane ({record.owner})")
        if not await self.adopt(record):
            raise RunStateError(f"run {run_id} was taken over by another control plane")

    async def adopt(self, record: RunRecord) -> bool:
        """Take ``record`` over (a running run whose owner is dead and whose agent is kept)
        and drive it from where its stored events end. Whether it was taken: another
        control plane may have been first.

        Raises:
            StoreError: the store failed.
        """
        if record.node_id is None or record.agent_keeper is None:
            return False
        self._launching.add(record.id)
        try:
            if not await self._store.update_run(
                record.id,
                expect_states=(RunState.RUNNING,),
                expect_owner=record.owner,
                owner=self._lease.owner,
            ):
                return False
            turn = await _turn_so_far(self._store, record.id)
            try:
                plan = await self._launcher.plan_adoption(record)
            except NodeprovError:  # left to the next reconcile, which ends it
                await self._store.update_run(record.id, expect_owner=self._lease.owner, owner=record.owner)
                raise
            drive = self._driver.new_drive(record.id, RunState.RUNNING, plan, turn.last_seq + 1)
            drive.run.agent_session_id = record.agent_session_id
            steps = follower(
                self._driver,
                self._nodes,
                record.node_id,
                record.agent_keeper,
                skip=turn.messages,
                since=turn.since,
                stored=turn.result,
            )
            self._launch(drive, plan, steps)
            logger.info("took over run %s of %s: re-attaching to its agent", record.id, record.owner)
            return True
        finally:
            self._launching.discard(record.id)


TAKEOVER_WINDOW = 64 << 20
"""Bytes of a kept agent's output its node keeps behind what the control plane has read:
a control plane taking the run over reads the turn again from its start (and skips what the
store has), so a turn that said more than this can no longer be taken over (the run then
ends as failed, resumable from the store). The node frees the rest: its journals stay
bounded however long the turn."""


def kept_agent(store: Store, lease: Lease, drive: Drive, grace: float | None) -> KeepOptions | None:
    """How ``drive``'s agent is kept (None: not kept, but guarded): its channel re-attached
    while this control plane still owns the run, each drop and re-attach an event."""
    if grace is None:
        return None
    run = drive.run

    def watch(change: Detached | Reattached) -> None:
        if isinstance(change, Detached):
            drive.events.emit(AgentDetached, reason=change.reason)
        else:
            drive.events.emit(AgentReattached, gap=round(change.gap, 3), attempts=change.attempts)

    async def still_ours() -> bool:
        try:
            record = await store.run(run.id)
        except StoreError:
            return True  # the lease decides: a lost one aborts the run
        return record is not None and record.owner == lease.owner and RunState(record.state).live

    async def recorded(keeper: str) -> None:  # before the agent starts: findable from then on
        drive.keeper = keeper
        await store.update_run(run.id, agent_keeper=keeper)

    # Tried again for as long as the keeper keeps the agent unattached: a host that answers
    # again within it loses nothing of the turn.
    return KeepOptions(
        grace=grace,
        reattach_within=grace,
        watch=watch,
        may_reattach=still_ours,
        on_start=recorded,
        keep_read=TAKEOVER_WINDOW,
    )
