"""Where a run's node comes from: the node kept for its resume, one claimed from its plan's
warm pool, or a new one provisioned (with the agent's session state restored onto it when
resuming)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from .. import _json
from ..agents.registry import imported
from ..errors import CheckpointError, ConfigError, NodeGoneError
from ..node import NodeHandle, NodeProvider
from ..store import CheckpointRecord, NodeRecordState, SnapshotRecord, Store
from .archive import Archive, ArchiveCut
from .checkpointing import Checkpointing
from .launch import Plan
from .lease import Lease
from .nodes import Nodes
from .pools import Pools

__all__ = ["Got", "NodeSource"]

logger = logging.getLogger("nodeprov.runs")

_N = NodeRecordState


@dataclass(frozen=True)
class Got:
    """How a run's node was got: ``reused`` (the kept one), from ``pool``, and for a resume on
    a fresh node, whether the agent's session state was restored onto it and from which
    checkpoint its workspace was."""

    reused: bool = False
    transcript_restored: bool = False
    pool: str | None = None
    workspace_restored: str | None = None


class NodeHolder(Protocol):
    """What a node is got for (a run's drive): it holds the node from the moment it exists, so
    that a failure after (restoring the session state) still releases it."""

    node: NodeHandle | None


class NodeSource:
    """Gets runs' nodes for the driver; the nodes it makes are owned by ``lease``'s control
    plane, and ``archive`` gives the archive of a run's session state by its key."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        nodes: Nodes,
        pools: Pools,
        *,
        time_left: Callable[[], float],
        archive: Callable[[str], Archive],
        checkpoints: Checkpointing,
    ) -> None:
        self._store = store
        self._lease = lease
        self._nodes = nodes
        self._pools = pools
        self._time_left = time_left  # the teardown's bound, for settling a failed provision
        self._archive = archive
        self._checkpoints = checkpoints

    async def get(self, drive: NodeHolder, run_id: str, plan: Plan, provider: NodeProvider[Any]) -> Got:
        """Get the run's node into ``drive.node``: the kept one, one claimed from the plan's
        pool, or a new one (with the agent's session state and the workspace of the run's
        last checkpoint restored onto it when resuming).

        Provisioning is not shielded: a pause or shutdown interrupts it, and the provider
        removes whatever it had made (its contract), so the intent is settled as failed.
        """
        snapshot = plan.resume
        if plan.start_from is not None and snapshot is not None:
            await self._start_from(run_id, plan.start_from, plan, snapshot)
        kept = snapshot.node_id if snapshot is not None and snapshot.node_kept else None
        # Taken from the kept state in one compare-and-set: a reconcile destroying it wins or loses whole.
        if kept and await self._store.move_node(kept, (_N.KEPT,), _N.LIVE):
            try:
                node = await provider.attach(kept)
                await node.wake()  # a suspended kept node: started again, ready to spawn
            except NodeGoneError as error:
                logger.info(
                    "kept node %s of run %s is gone (%s): provisioning a new one", kept, run_id, error
                )
                await self._store.set_node_state(kept, _N.DESTROYED)
            else:
                drive.node = node
                await self._record(run_id, node)
                return Got(reused=True)
        elif kept:
            logger.info("node %s of run %s is no longer kept: provisioning a new one", kept, run_id)
        await self._nodes.drop_kept(run_id)
        if plan.pool is not None:
            drive.node = await self._pools.claim(plan.pool, run_id, provider, wait=plan.pool_wait)
            if drive.node is not None:  # recorded live for the run by the claim
                await self._store.update_run(run_id, node_id=drive.node.node_id)
                return Got(pool=plan.pool)
            logger.info("pool %s has no node ready: run %s provisions one cold", plan.pool, run_id)
        tools = dict(plan.node_config.tools)
        if plan.agent.options.ship_cli:
            cli = plan.agent.local_cli()
            if cli is None:
                raise ConfigError(f"ship_cli: the {plan.agent.name} agent's CLI is not found on this machine")
            tools[plan.agent.cli_name] = cli
        config = plan.node_config.model_copy(
            update={"session_id": run_id, "owner": self._lease.owner, "tools": tools}
        )
        await self._store.node_intent(config.node_id, plan.provider, run_id)
        try:
            node = await provider.provision(config)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._time_left()):
                await self._store.set_node_state(config.node_id, _N.FAILED)
            raise
        drive.node = node
        await self._record(run_id, node)
        if snapshot is None:
            return Got()
        checkpoint = await self._store.checkpoints.latest(run_id)
        if checkpoint is not None:  # the files first: the agent's state lies within them
            await self._checkpoints.restore(checkpoint, node)
        restored = False
        if snapshot.agent_session_id and snapshot.project_key:
            await imported(type(plan.agent))
            restored = await plan.agent.import_state(
                node,
                snapshot.agent_session_id,
                plan.agent.state_key(node, plan.workspace),
                self._archive(snapshot.project_key),
            )
        return Got(transcript_restored=restored, workspace_restored=checkpoint.id if checkpoint else None)

    async def _start_from(
        self, run_id: str, checkpoint: CheckpointRecord, plan: Plan, snapshot: SnapshotRecord
    ) -> None:
        """Where a fork or a rewind begins: the agent's session as it stood at ``checkpoint``
        copied under the snapshot's new session id, and the checkpoint recorded as the run's.

        Raises:
            CheckpointError: the checkpoint holds none of its session's state, or its objects
                are gone.
            StoreError: the store failed.
        """
        session, key = snapshot.agent_session_id, checkpoint.project_key
        original = checkpoint.agent_session_id
        if session is not None:
            copied = False
            if original and key and checkpoint.session_counts:
                await imported(type(plan.agent))
                cut = ArchiveCut(self._store.transcripts, key, _json.loads(checkpoint.session_counts))
                copied = await plan.agent.fork_state(original, session, key, cut, self._archive(key))
            if not copied:
                raise CheckpointError(f"checkpoint {checkpoint.id} holds none of its agent's session state")
            await self._store.update_run(run_id, agent_session_id=session, project_key=key)
        reason = "rewind" if checkpoint.run_id == run_id else "fork"
        await self._checkpoints.adopt(run_id, checkpoint, reason=reason, session=session)

    async def _record(self, run_id: str, node: NodeHandle) -> None:
        await self._store.set_node_state(node.node_id, _N.LIVE)
        await self._store.update_run(run_id, node_id=node.node_id)
