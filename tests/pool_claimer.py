"""A control plane claiming from a warm pool at random, for the pool race tests: ``python -m
tests.pool_claimer STORE_URL POOL ATTEMPTS SEED``. It keeps the store's pools too (one of
the processes holds each pool at a time), claims ``ATTEMPTS`` times with random pauses, uses
each node once (destroys it), and prints one JSON line: the node ids it claimed, and how many
attempts found the pool empty. Test-only: never shipped, never loaded by the CLI."""

from __future__ import annotations

import json
import random
import sys

import anyio

from nodeprov.node import NodeHandle
from nodeprov.registry import get_provider
from nodeprov.runs import Orchestrator
from nodeprov.store import NodeRecordState, RunRecord, Store, new_id, now


async def run_record(store: Store, run_id: str) -> None:
    session = await store.active_session("races", "claude")
    stamp = now()
    await store.create_run(
        RunRecord(
            id=run_id,
            session_id=session.id,
            workspace_id="races",
            prompt="",
            node_provider="local",
            node_settings="{}",
            agent_options="{}",
            state="finished",
            outcome="ok",
            error=None,
            node_id=None,
            agent_session_id=None,
            project_key=None,
            owner="nobody",
            pause_request=None,
            created_at=stamp,
            updated_at=stamp,
            agent="claude",
        )
    )


async def main(url: str, pool: str, attempts: int, seed: int) -> None:
    chance = random.Random(seed)
    claimed: list[str] = []
    empty = 0
    async with (
        await Store.open(url) as store,
        Orchestrator(store, keep_pools=True, poll_interval=0.02) as plane,
    ):
        status = await plane.pools.get(pool)
        provider = get_provider(status.pool.provider, **status.pool.provider_settings)
        for _ in range(attempts):
            await anyio.sleep(chance.random() * 0.004)
            run_id = new_id("run")
            await run_record(store, run_id)
            node: NodeHandle | None = await plane.pools.claim(pool, run_id, provider, wait=False)
            if node is None:
                empty += 1
                continue
            claimed.append(node.node_id)
            await node.destroy()
            await store.set_node_state(node.node_id, NodeRecordState.DESTROYED)
    print(json.dumps({"claimed": claimed, "empty": empty}), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
