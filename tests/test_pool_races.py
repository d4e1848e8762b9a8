"""Warm pools across control-plane processes: two processes claiming 500 times each at random
against a pool of 5 (both keeping it) never get one node twice, and the size holds at every
moment; a holder SIGKILLed while it refills is taken over, leaving nothing behind. SQLite
here; PostgreSQL in integration/test_pool_races_postgres.py, with the same tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from nodeprov.registry import get_provider
from nodeprov.runs import Orchestrator, Pool
from nodeprov.store import PoolNodeState, Store

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
ATTEMPTS = 500
SIZE = 5
DEADLINE = 240

OpenStore = Callable[[], Awaitable[Store]]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/pools.db"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with await Store.open(store_url) as store:
        yield store


def local_pool(tmp_path: Path, **fields: object) -> Pool:
    root = tmp_path / "nodes"
    root.mkdir(mode=0o700, exist_ok=True)
    return Pool(name="warm", provider="local", provider_settings={"root": str(root)}, **fields)  # type: ignore[arg-type]


async def platform_nodes(tmp_path: Path) -> set[str]:
    provider = get_provider("local", root=str(tmp_path / "nodes"))
    return {info.node_id for info in await provider.list_nodes()}


async def _claim_race(store: Store, store_url: str, tmp_path: Path) -> None:
    async with Orchestrator(store) as orchestrator:
        await orchestrator.pools.create(local_pool(tmp_path, size=SIZE, refill_concurrency=3))
    peak = 0

    async def watch_size() -> None:
        nonlocal peak
        while True:
            counts = (await store.pools.counts()).get("warm", {})
            peak = max(peak, counts.get("intent", 0) + counts.get("ready", 0))
            await anyio.sleep(0.002)

    outputs: list[dict[str, object]] = []

    async def claimer(seed: int) -> None:
        result = await anyio.run_process(
            [sys.executable, "-m", "tests.pool_claimer", store_url, "warm", str(ATTEMPTS), str(seed)],
            cwd=ROOT,
            check=True,
        )
        outputs.append(json.loads(result.stdout.decode().strip().splitlines()[-1]))

    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_size)
            async with anyio.create_task_group() as claimers:
                for seed in (1, 2):
                    claimers.start_soon(claimer, seed)
            tg.cancel_scope.cancel()
    claimed = [node for output in outputs for node in output["claimed"]]  # type: ignore[attr-defined]
    assert len(claimed) == len(set(claimed)), "a node was handed to two claimants"
    assert all(output["claimed"] for output in outputs), outputs  # both got nodes
    assert len(claimed) + sum(int(output["empty"]) for output in outputs) == 2 * ATTEMPTS  # type: ignore[call-overload]
    assert peak <= SIZE
    records = {node.id: node for node in await store.pools.nodes("warm", (PoolNodeState.CLAIMED,))}
    assert set(claimed) == set(records)
    assert len({record.run_id for record in records.values()}) == len(claimed)
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        assert await orchestrator.pools.remove("warm", wait=60)
    assert await platform_nodes(tmp_path) == set()


async def test_two_processes_claiming_at_random_never_share_a_node(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    await _claim_race(store, store_url, tmp_path)


KEEPER = """
import sys, anyio
from nodeprov.registry import register_provider
from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing.fake_provider import FakeProvider

register_provider("fake", FakeProvider)

async def main(url: str) -> None:
    async with await Store.open(url) as store, Orchestrator(store, keep_pools=True, poll_interval=0.02):
        print("keeping", flush=True)
        await anyio.sleep_forever()

anyio.run(main, sys.argv[1])
"""


async def _sigkilled_holder(store: Store, store_url: str, tmp_path: Path) -> None:
    slow = {"root": str(tmp_path / "fake"), "provision_delay": 0.3}  # nodes certainly being made
    async with Orchestrator(store) as orchestrator:
        await orchestrator.pools.create(
            Pool(name="warm", provider="fake", provider_settings=slow, size=SIZE, refill_concurrency=2)
        )
    process = subprocess.Popen(  # noqa: ASYNC220 - killed, not awaited
        [sys.executable, "-c", KEEPER, store_url], cwd=ROOT, stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"keeping"
        with anyio.fail_after(DEADLINE):  # SIGKILLed while it refills: nodes made, and being made
            while True:
                counts = (await store.pools.counts()).get("warm", {})
                if counts.get("ready") and counts.get("intent"):
                    break
                await anyio.sleep(0.001)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    record = await store.pools.get("warm")
    assert record is not None
    dead = record.holder
    assert dead is not None
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02, lease_ttl=30) as survivor:
        await store.leases.release(dead.removeprefix("lease:"))  # as its expiry would, sooner
        with anyio.fail_after(DEADLINE):
            while True:
                status = await survivor.pools.get("warm")
                if status.holder == survivor.owner and status.ready == SIZE and status.starting == 0:
                    break
                await anyio.sleep(0.02)
        ready = {node.id for node in await store.pools.nodes("warm", (PoolNodeState.READY,))}
        assert await fake_nodes(tmp_path) == ready  # what the dead holder was making: gone
        assert await survivor.pools.remove("warm", wait=60)
    assert await fake_nodes(tmp_path) == set()


async def fake_nodes(tmp_path: Path) -> set[str]:
    provider = get_provider("fake", root=str(tmp_path / "fake"))
    return {info.node_id for info in await provider.list_nodes()}


async def test_a_sigkilled_holder_is_taken_over_and_leaves_nothing(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    await _sigkilled_holder(store, store_url, tmp_path)
