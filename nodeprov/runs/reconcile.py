"""Reconcile and garbage collection: ending the runs of control planes that died, and
destroying the nodes no run will use."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import NodeGoneError, NodeprovError, log_failure
from ..node import GarbageReport, NodeProvider
from ..node.keeper import kept_state
from ..store import POOL_HELD, NodeRecord, NodeRecordState, PoolNodeState, RunRecord, now
from .events import RunFinished
from .journal import event_record
from .lease import owner_check
from .pool_keeping import end_pool_node
from .retention import check_retention, prune_forever
from .run import snapshot_of
from .state import LIVE_STATES, RESUMABLE_STATES, RunState

if TYPE_CHECKING:
    from .plane import ControlPlane

__all__ = ["ReconcileReport", "Reconciler"]

logger = logging.getLogger(__name__)

_N = NodeRecordState


@dataclass(frozen=True)
class ReconcileReport:
    """What :meth:`Orchestrator.reconcile` did: ``ended`` runs of dead control planes, the
    nodes it ``destroyed``, the nodes it could not destroy (``failed``, with why; they
    stay recorded and are tried again next time), and the runs whose kept agents it took
    over (``adopted``: driven here from now on)."""

    ended: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)


class Reconciler:
    """Reconciles what dead control planes left in the store, leaving alone the runs
    ``driven`` says this control plane drives or is launching."""

    def __init__(
        self,
        plane: ControlPlane,
        *,
        adopt: Callable[[RunRecord], Awaitable[bool]] | None = None,
        retention: float | None = None,
    ) -> None:
        self._store, self._lease, self._nodes = plane.store, plane.lease, plane.nodes
        self._driven = plane.driven
        self._collect = plane.checkpoints.collect
        self._adopt = adopt  # takes over a running run whose agent is kept; whether it did
        self._retention = check_retention(retention)

    async def reconcile(self) -> ReconcileReport:
        """See :meth:`Orchestrator.reconcile`.

        Raises:
            StoreError: the store failed.
        """
        report = ReconcileReport()
        live = await self._store.runs(states=tuple(LIVE_STATES))
        alive = await owner_check(self._store, {record.owner for record in live})
        for record in live:
            if self._driven(record.id):
                continue
            if record.owner != self._lease.owner and alive(record.owner) is not False:
                continue  # a live owner drives it, or another store's (ours, not driven here, is orphaned)
            kept = record.state == RunState.RUNNING and record.agent_keeper and record.node_id
            if kept and self._adopt is not None and await self._adopt(record):
                report.adopted.append(record.id)
                continue
            if kept and self._adopt is None and await self._agent_lives(record):
                continue  # a control plane that takes runs over may still come for it
            reason = f"control plane {record.owner} died during the run"
            nodes = await self._store.nodes(states=(_N.INTENT, _N.LIVE, _N.DESTROYING), run_id=record.id)
            await self._destroy(record, nodes, report, reason)
            finishing = record.state == RunState.FINISHING
            if record.agent_session_id and not finishing:
                await self._store.save_snapshot(
                    snapshot_of(
                        record,
                        node_id=record.node_id,
                        agent_session_id=record.agent_session_id,
                        kind="system",
                        reason=reason,
                        keep_node=False,
                    )
                )
            target = RunState.FINISHED if finishing else RunState.FAILED
            if await self._store.update_run(
                record.id,
                expect_states=(record.state,),
                expect_owner=record.owner,
                owner=self._lease.owner,  # its end is written by this control plane alone
                state=target,
                outcome=target.outcome,
                error=None if finishing else reason,
                pause_request=None,
            ):
                report.ended.append(record.id)
                await self._append_finished(record, target, None if finishing else reason)
        await self._release_unused_nodes(report)
        await self._end_stale_pool_nodes()
        await self._store.clear_stale_pause_requests(
            tuple(s for s in RunState if s not in (RunState.STARTING, RunState.RUNNING))
        )
        await self._store.leases.compact(LIVE_STATES)
        return report

    async def keep_clean(self, interval: float) -> None:
        """For as long as the control plane runs: reconcile every ``interval`` seconds (0:
        never), and prune the store with the retention given whenever it is due (see
        :func:`~nodeprov.runs.retention.prune_forever`)."""
        async with anyio.create_task_group() as tg:
            if interval > 0:
                tg.start_soon(every, interval, self.reconcile, "reconcile")
            if self._retention is not None:
                tg.start_soon(prune_forever, self._store, self._retention, self._collect)

    async def _agent_lives(self, record: RunRecord) -> bool:
        """Whether the kept agent of ``record`` runs on (or ended its turn, unread) on its
        node: within its keeper's grace, ``nodeprov attach`` or a control plane that takes
        runs over may still finish the turn, so one that takes none over leaves it be. Once
        the keeper has given up (no control plane came for its grace) the agent is gone, and
        the run ends as any other. Cannot tell (the provider failed): left be until the next
        reconcile."""
        assert record.node_id is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        assert record.agent_keeper is not None  # noqa: S101 - narrows a type: an invariant, never a check of input
        try:
            node = await (await self._nodes.provider_for(record)).attach(record.node_id)
            return await kept_state(node, record.agent_keeper) != "gone"
        except NodeGoneError:
            return False
        except NodeprovError as error:
            logger.warning("run %s: cannot tell whether its kept agent lives: %s", record.id, error)
            return True

    async def _destroy(
        self, record: RunRecord, nodes: list[NodeRecord], report: ReconcileReport, why: str
    ) -> None:
        destroyed, failed = await self._nodes.destroy(record, nodes, why)
        report.destroyed.extend(destroyed)
        report.failed.extend(failed)

    async def _release_unused_nodes(self, report: ReconcileReport) -> None:
        """Destroy the nodes of runs that are not live and will not use them (see
        :meth:`Orchestrator.reconcile`). A live run's nodes are its driver's: a resume takes
        its kept node or destroys the ones it does not use."""
        clock = await self._store.clock_ms()
        runs: dict[str, RunRecord | None] = {}
        for node in await self._store.nodes(states=(_N.INTENT, _N.LIVE, _N.KEPT, _N.DESTROYING)):
            if self._driven(node.run_id):
                continue
            if node.run_id not in runs:
                runs[node.run_id] = await self._store.run(node.run_id)
            record = runs[node.run_id]
            if record is None or RunState(record.state).live:
                continue
            why = await self._unused(node, record, clock)
            if why is not None:
                await self._destroy(record, [node], report, why)

    async def _unused(self, node: NodeRecord, record: RunRecord, clock: int) -> str | None:
        """Why ``node`` of ``record`` (a run that is not live) will not be used, or ``None``
        when a resume may still take it."""
        if node.state != _N.KEPT:
            return f"its run is {record.state}"
        if node.keep_until_ms is None or node.keep_until_ms <= clock:
            return "its keep time is up"
        if record.state not in RESUMABLE_STATES:
            return f"its run is {record.state}"
        snapshots = await self._store.snapshots(record.id)
        if not any(s.used_at is None and s.node_kept and s.node_id == node.id for s in snapshots):
            return "no resume will use it"
        if not await self._resumable_session(record):
            return "its workspace switched to another agent"
        return None

    async def _resumable_session(self, record: RunRecord) -> bool:
        """Whether the run's agent session is still its workspace's active one."""
        return any(
            session.id == record.session_id and session.state == "active"
            for session in await self._store.sessions(record.workspace_id)
        )

    async def _append_finished(self, record: RunRecord, state: RunState, error: str | None) -> None:
        """The ``run.finished`` event a dead control plane could not write, so followers end;
        none when its drive wrote its end before it could move the run's state (it died
        between), unless a resume began since that end (its drive ends here, unstarted)."""
        seq = await self._store.last_event_seq(record.id) + 1
        last = await self._store.events(record.id, after=seq - 2, limit=1)
        if last and last[0].kind == RunFinished.kind:
            resumed = [s.used_at for s in await self._store.snapshots(record.id) if s.used_at]
            if not any(used >= last[0].at for used in resumed):
                return
        event = RunFinished(
            run_id=record.id,
            seq=seq,
            at=now(),
            outcome=state.outcome or "error",
            error=error,
            agent_session_id=record.agent_session_id,
        )
        with suppress(NodeprovError):  # its writer got there after all: the stream has an end
            await self._store.append_events([event_record(event)], writer=self._lease.owner)

    async def collect_garbage(
        self, provider: NodeProvider[Any], *, dry_run: bool = False, settle: float = 0.0
    ) -> GarbageReport:
        """See :meth:`Orchestrator.collect_garbage`.

        Raises:
            ProviderError: the platform could not be asked.
            StoreError: the store failed.
        """
        if not dry_run:
            await self._end_stale_pool_nodes(provider.name)
        alive = await owner_check(self._store)
        held = {
            node.id for node in await self._store.nodes(states=(_N.INTENT, _N.LIVE, _N.KEPT, _N.DESTROYING))
        }
        held |= await self._store.pools.held_ids(unless_dead=alive)  # a dead provisioner's intents are not
        report = await provider.collect_garbage(dry_run=dry_run, alive=alive, spare=held, settle=settle)
        if not dry_run:
            for info in report.reaped:
                await self._store.set_node_state(info.node_id, _N.DESTROYED)
                await self._store.pools.move(info.node_id, POOL_HELD, PoolNodeState.DESTROYED)
        return report

    async def _end_stale_pool_nodes(self, provider: str | None = None) -> None:
        """Destroy the nodes of pools that no keeper holds (of ``provider``'s alone, if given)
        past their pool's ``max_age``, or whose destroy began: a keeper does it while one holds
        the pool; with none, they would wait for their lifetime. Each through its pool's own
        settings (the stored ones, this control plane's secrets laid over); a pool whose
        provider cannot be made here, or a destroy that fails, is left to the next round."""
        alive = await owner_check(self._store)
        for pool in await self._store.pools.all():
            if (provider is not None and pool.provider != provider) or (
                pool.holder is not None and alive(pool.holder) is not False
            ):
                continue
            stale = await self._store.pools.stale(pool.name, pool.max_age)
            if not stale:
                continue
            try:
                platform = await self._nodes.provider(
                    pool.provider,
                    self._nodes.laid_over(pool.provider, pool.provider_settings, pool.secret_fields),
                )
            except NodeprovError as error:
                logger.warning("pool %s: cannot end its nodes past max_age here: %s", pool.name, error)
                continue
            for node in stale:
                await end_pool_node(self._store, platform, node, "older than the pool's max_age, no keeper")


async def every(interval: float, step: Callable[[], Awaitable[Any]], name: str) -> None:
    """Run ``step`` every ``interval`` seconds, for ever; a failure is logged in one line (a
    traceback for what nodeprov did not expect) and tried again at the next."""
    while True:
        await anyio.sleep(interval)
        try:
            await step()
        except Exception as error:  # noqa: BLE001 - logged (log_failure)
            log_failure(logger, error, "%s failed; trying again in %g s", name, interval)
