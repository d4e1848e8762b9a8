"""Warm pools (nodeprov.runs.pools): filled and kept at their size by one holder at a time,
claimed by runs atomically, nodes replaced past their age or when gone, a failing provider
backed off, a pool's removal leaving nothing; with the fake agent on the local and fake
providers. The cross-process claim races and a holder's SIGKILL: tests/test_pool_races.py."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from nodeprov.errors import ConfigError, RunStateError, StoreError
from nodeprov.node import NodeConfig
from nodeprov.registry import get_provider
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Pool, PoolStatus
from nodeprov.store import NodeRecordState, PoolNodeState, Store
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio

DEADLINE = 30


def fake_pool(tmp_path: Path, name: str = "warm", **fields: Any) -> Pool:
    settings = {"root": str(tmp_path / "nodes"), **fields.pop("settings", {})}
    return Pool(name=name, provider="fake", provider_settings=settings, **fields)


async def until(check: Callable[[], Any], what: str) -> Any:
    """Wait for ``check()`` (sync or async) to return something true; its value."""
    with anyio.fail_after(DEADLINE):
        while True:
            value = check()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            await anyio.sleep(0.02)
    raise AssertionError(what)


async def ready(orchestrator: Orchestrator, name: str, count: int) -> PoolStatus:
    async def check() -> PoolStatus | None:
        status = await orchestrator.pools.get(name)
        return status if status.ready == count and status.starting == 0 else None

    result: PoolStatus = await until(check, f"{count} ready nodes in pool {name}")
    return result


async def platform_nodes(tmp_path: Path) -> set[str]:
    provider = get_provider("fake", root=str(tmp_path / "nodes"))
    return {info.node_id for info in await provider.list_nodes()}


async def pool_nodes(store: Store, name: str, *states: PoolNodeState) -> set[str]:
    return {node.id for node in await store.pools.nodes(name, states or (PoolNodeState.READY,))}


async def test_a_pool_is_filled_claimed_by_runs_and_refilled(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.05) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=2))
        await ready(orchestrator, "warm", 2)
        first_ready = await pool_nodes(store, "warm")
        assert await platform_nodes(tmp_path) == first_ready
        runs = []
        for text in ("first", "second"):
            run = await orchestrator.start(
                text, pool="warm", options=agent({"write_file": ["trace.txt", text]}, {"text": text})
            )
            assert await run.wait() == "ok"
            runs.append(run)
        claimed = []
        for run in runs:
            events = [event async for event in orchestrator.events(run.id, follow=False)]
            node = next(event for event in events if isinstance(event, NodeReady))
            assert node.pool == "warm"
            claimed.append(node.node_id)
            assert any(isinstance(event, AgentMessage) for event in events)
        assert claimed[0] != claimed[1]
        assert set(claimed) <= first_ready
        for node_id in claimed:  # used once: destroyed with its run
            record = await store.node(node_id)
            assert record is not None
            assert record.state == NodeRecordState.DESTROYED
        await ready(orchestrator, "warm", 2)
        assert not (set(claimed) & await platform_nodes(tmp_path))


async def test_a_claimed_node_has_no_trace_of_another_run(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.05) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=2))
        await ready(orchestrator, "warm", 2)
        writer = await orchestrator.start(
            "write", pool="warm", options=agent({"write_file": ["trace.txt", "secret"]}, {"sleep": 30})
        )
        await until(lambda: writer.state.value == "running", "the writer running")
        await until(lambda: any((tmp_path / "nodes").glob("*/work/trace.txt")), "the writer's trace")
        reader = await orchestrator.start("read", pool="warm", options=agent({"sleep": 30}))
        await until(lambda: reader.state.value == "running", "the reader running")
        records = {r.id: r for r in await store.runs()}
        mine, theirs = records[reader.id].node_id, records[writer.id].node_id
        assert mine
        assert theirs
        assert mine != theirs
        assert (tmp_path / "nodes" / theirs / "work" / "trace.txt").read_text() == "secret"
        assert not list((tmp_path / "nodes" / mine).rglob("trace.txt"))
        for run in (writer, reader):
            await run.pause("human", "done")
            await run.wait()


async def test_an_empty_pool_provisions_cold_or_waits(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store, poll_interval=0.05) as orchestrator:  # keeps no pool: it stays empty
        await orchestrator.pools.create(fake_pool(tmp_path, size=1))
        cold = await orchestrator.start("cold", pool="warm", options=agent({"text": "hi"}))
        assert await cold.wait() == "ok"
        events = [event async for event in orchestrator.events(cold.id, follow=False)]
        assert next(e for e in events if isinstance(e, NodeReady)).pool is None
        waiting = await orchestrator.start("wait", pool="warm", pool_wait=True, options=agent({"text": "hi"}))
        await anyio.sleep(0.3)
        assert waiting.state.value == "starting"
        async with Orchestrator(store, keep_pools=["warm"], poll_interval=0.05):
            assert await waiting.wait() == "ok"
        events = [event async for event in orchestrator.events(waiting.id, follow=False)]
        assert next(e for e in events if isinstance(e, NodeReady)).pool == "warm"


async def test_two_keepers_hold_the_size_and_the_survivor_takes_the_pool_over(
    store: Store, tmp_path: Path
) -> None:
    over: list[int] = []

    async def watch_size() -> None:  # the size must hold at every moment, across both
        while True:
            counts = (await store.pools.counts()).get("warm", {})
            if counts.get("intent", 0) + counts.get("ready", 0) > 3:
                over.append(counts["intent"] + counts["ready"])
            await anyio.sleep(0.005)

    async def keep(name: str, stop: anyio.Event, *, task_status: TaskStatus[Orchestrator]) -> None:
        async with Orchestrator(store, keep_pools=True, poll_interval=0.05, holder=name) as orchestrator:
            task_status.started(orchestrator)
            await stop.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_size)
        stops = {name: anyio.Event() for name in ("first", "second")}
        keepers = {name: await tg.start(keep, name, stop) for name, stop in stops.items()}
        first = keepers["first"]
        await first.pools.create(fake_pool(tmp_path, size=3, settings={"provision_delay": 0.05}))
        status = await ready(first, "warm", 3)
        assert status.held is True
        holder = next(name for name, keeper in keepers.items() if keeper.owner == status.holder)
        for node_id in sorted(await pool_nodes(store, "warm"))[:2]:  # claimed behind the keepers' backs
            assert await store.pools.move(node_id, (PoolNodeState.READY,), PoolNodeState.CLAIMED)
        await ready(first, "warm", 3)
        stops[holder].set()  # the holder leaves, its lease released
        survivor = keepers["second" if holder == "first" else "first"]
        await until(lambda: _held_by(survivor, survivor.owner), "the survivor holding the pool")
        for node_id in sorted(await pool_nodes(store, "warm"))[:3]:
            assert await store.pools.move(node_id, (PoolNodeState.READY,), PoolNodeState.CLAIMED)
        await ready(survivor, "warm", 3)
        tg.cancel_scope.cancel()
    assert over == []


async def _held_by(orchestrator: Orchestrator, owner: str) -> PoolStatus | None:
    status = await orchestrator.pools.get("warm")
    return status if status.holder == owner else None


async def test_a_node_deleted_behind_the_pools_back_is_replaced(store: Store, tmp_path: Path) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=2))
        await ready(orchestrator, "warm", 2)
        gone = sorted(await pool_nodes(store, "warm"))[0]
        shutil.rmtree(tmp_path / "nodes" / gone)
        await until(
            lambda: _state_of(store, gone, PoolNodeState.DESTROYED), "the deleted node recorded destroyed"
        )
        await ready(orchestrator, "warm", 2)
        assert gone not in await pool_nodes(store, "warm")
        assert await platform_nodes(tmp_path) == await pool_nodes(store, "warm")


async def _state_of(store: Store, node_id: str, state: PoolNodeState) -> bool:
    return node_id in await pool_nodes(store, "warm", state)


async def test_nodes_past_their_age_are_destroyed_and_replaced(store: Store, tmp_path: Path) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(
            fake_pool(tmp_path, size=2, max_age=0.5, node_config=NodeConfig(ttl=None))
        )
        await ready(orchestrator, "warm", 2)
        old = await pool_nodes(store, "warm")
        await until(lambda: _destroyed_all(store, old), "the first nodes destroyed once past their age")
        assert not old & await platform_nodes(tmp_path)
        await ready(orchestrator, "warm", 2)


async def _destroyed_all(store: Store, node_ids: set[str]) -> bool:
    return node_ids <= await pool_nodes(store, "warm", PoolNodeState.DESTROYED)


async def test_a_pool_of_nodes_older_than_max_age_gives_none_to_a_claim(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as keeper:
        await keeper.pools.create(fake_pool(tmp_path, size=1, max_age=0.3, node_config=NodeConfig(ttl=None)))
        await ready(keeper, "warm", 1)
    stale = await pool_nodes(store, "warm")  # nobody keeps the pool now: its node ages in place
    await anyio.sleep(0.4)
    async with Orchestrator(store, poll_interval=0.05) as orchestrator:
        run = await orchestrator.start("hi", pool="warm", options=agent({"text": "hi"}))
        assert await run.wait() == "ok"
        events = [event async for event in orchestrator.events(run.id, follow=False)]
        assert next(e for e in events if isinstance(e, NodeReady)).pool is None  # made cold
    assert stale == await pool_nodes(store, "warm")


async def test_a_failing_provider_is_backed_off_and_says_why(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "nodeprov.pools")
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(
            fake_pool(tmp_path, size=2, refill_concurrency=1, settings={"provision_error": "quota exceeded"})
        )
        status: PoolStatus = await until(lambda: _with_error(orchestrator), "the pool's error shown")
        assert "quota exceeded" in (status.error or "")
        assert status.retry_in is not None
        assert 0 <= status.retry_in <= 1  # counting down: how far depends on the machine's load
        failed = await until(
            lambda: pool_nodes(store, "warm", PoolNodeState.FAILED), "the failed attempt recorded"
        )
        assert len(failed) == 1
        second: PoolStatus = await until(lambda: _failures(store, 2), "a second attempt, a second later")
        assert second.retry_in is not None
        assert 0 <= second.retry_in <= 2
        said = [r.getMessage() for r in caplog.records if "trying again in " in r.getMessage()]
        waits = [message.split("trying again in ")[1].split(" s:")[0] for message in said]
        assert waits[:2] == ["1", "2"]  # doubled
        # Each attempt is a failed node, moved before its failure is counted: read between two
        # counts (more attempts may come meanwhile, on a slow machine), the nodes keep up.
        before = await _failure_count(store)
        failed = await pool_nodes(store, "warm", PoolNodeState.FAILED)
        assert 2 <= before <= len(failed) <= await _failure_count(store) + 1
        assert await platform_nodes(tmp_path) == set()


async def _with_error(orchestrator: Orchestrator) -> PoolStatus | None:
    status = await orchestrator.pools.get("warm")
    return status if status.error else None


async def _failure_count(store: Store) -> int:
    record = await store.pools.get("warm")
    assert record is not None
    return record.failures


async def _failures(store: Store, count: int) -> PoolStatus | None:
    record = await store.pools.get("warm")
    if record is None or record.failures < count:
        return None
    async with Orchestrator(store) as reader:
        return await reader.pools.get("warm")


async def test_removing_a_pool_destroys_its_nodes_and_refuses_claims(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=3, settings={"provision_delay": 0.2}))
        await until(lambda: _some_ready(orchestrator), "a node ready, others starting")
        assert await orchestrator.pools.remove("warm", wait=DEADLINE)
        assert await platform_nodes(tmp_path) == set()
        with pytest.raises(ConfigError, match="no pool"):
            await orchestrator.start("hi", pool="warm", options=agent({"text": "hi"}))
        assert await orchestrator.pools.list() == []


async def _some_ready(orchestrator: Orchestrator) -> bool:
    status = await orchestrator.pools.get("warm")
    return status.ready >= 1


async def test_a_pool_being_removed_refuses_a_claim(store: Store, tmp_path: Path) -> None:
    async with Orchestrator(store, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=1))
        await store.pools.mark_removing("warm")
        with pytest.raises(RunStateError, match="being removed"):
            await orchestrator.start("hi", pool="warm")


async def test_a_pool_and_its_runs_are_checked_before_anything_is_stored(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]]
) -> None:
    async with Orchestrator(store) as orchestrator:
        with pytest.raises(ConfigError, match="longer than max_age"):
            await orchestrator.pools.create(fake_pool(tmp_path, max_age=90000))  # the default ttl: a day
        with pytest.raises(ConfigError, match="invalid settings"):
            await orchestrator.pools.create(fake_pool(tmp_path, settings={"nonsense": 1}))
        await orchestrator.pools.create(fake_pool(tmp_path, size=0))
        with pytest.raises(ConfigError, match="exists already"):
            await orchestrator.pools.create(fake_pool(tmp_path))
        with pytest.raises(ConfigError, match="not both"):
            await orchestrator.start("hi", provider="fake", pool="warm")
        with pytest.raises(ConfigError, match="its template"):
            await orchestrator.start("hi", pool="warm", node_config=NodeConfig())
        with pytest.raises(ConfigError, match="ship_cli"):
            await orchestrator.start("hi", pool="warm", options={**agent(), "ship_cli": True})
        assert await store.runs() == []


async def test_gc_spares_a_pools_nodes_but_reaps_what_a_dead_provisioner_was_making(
    store: Store, tmp_path: Path
) -> None:
    provider = get_provider("fake", root=str(tmp_path / "nodes"))
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02, holder="keeper") as keeper:
        await keeper.pools.create(fake_pool(tmp_path, size=1))
        await ready(keeper, "warm", 1)
        dead = keeper.owner
    # The keeper is gone (its lease released), as if it died between recording a node and
    # finishing it: the node exists, its record says being made.
    config = NodeConfig(owner=dead)
    await store.db.execute("UPDATE pools SET size = 2")  # room for it, for this test alone
    assert await store.pools.add_intent("warm", config.node_id, dead)
    await provider.provision(config)
    spared = await pool_nodes(store, "warm")
    assert len(spared) == 1
    async with Orchestrator(store) as reaper:
        report = await reaper.collect_garbage(provider)
    assert [info.node_id for info in report.reaped] == [config.node_id]
    assert await platform_nodes(tmp_path) == spared  # the pool's ready node: spared
    assert config.node_id in await pool_nodes(store, "warm", PoolNodeState.DESTROYED)


async def test_a_pool_task_that_fails_is_logged_and_its_node_settled(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store.pools.made_ready
    failed: list[str] = []

    async def once_away(node_id: str) -> bool:  # the store away just as a node became ready
        if not failed:
            failed.append(node_id)
            raise StoreError("the store is away")
        return await real(node_id)

    monkeypatch.setattr(store.pools, "made_ready", once_away)
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as orchestrator:
        await orchestrator.pools.create(fake_pool(tmp_path, size=2))
        await ready(orchestrator, "warm", 2)  # the orchestrator lives on, and refills
        assert failed
        await until(lambda: _state_of(store, failed[0], PoolNodeState.DESTROYED), "the lost node settled")
        assert await platform_nodes(tmp_path) == await pool_nodes(store, "warm")


async def test_a_pool_is_kept_only_where_its_secret_settings_are_given(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = {"env": {"TOKEN": "s3cret"}}
    async with Orchestrator(store, keep_pools=True, poll_interval=0.05, holder="blind") as blind:
        await blind.pools.create(fake_pool(tmp_path, size=1, settings=secret))
        await until(lambda: "not kept here" in caplog.text, "the blind keeper saying why it keeps nothing")
        assert "secret fake settings not given here: env" in caplog.text
        assert "s3cret" not in caplog.text
        status = await blind.pools.get("warm")
        assert (status.holder, status.ready, status.starting) == (None, 0, 0)
        async with Orchestrator(
            store, keep_pools=True, poll_interval=0.05, holder="given", provider_settings={"fake": secret}
        ) as given:
            status = await ready(given, "warm", 1)
            assert status.holder == given.owner


@pytest.mark.parametrize("by", ["gc", "reconcile"])
async def test_a_pools_nodes_past_max_age_are_destroyed_when_no_keeper_does(
    store: Store, tmp_path: Path, by: str
) -> None:
    """Issue 45: a pool node past ``max_age`` with no keeper stayed ready until its lifetime
    (a day): no claim takes it, and nothing ended it. Now gc and any control plane's
    reconcile do."""
    provider = get_provider("fake", root=str(tmp_path / "nodes"))
    async with Orchestrator(store, keep_pools=True, poll_interval=0.02) as keeper:
        await keeper.pools.create(fake_pool(tmp_path, size=1, max_age=2, node_config=NodeConfig(ttl=None)))
        await ready(keeper, "warm", 1)
    [node_id] = await platform_nodes(tmp_path)
    async with Orchestrator(store) as reaper:

        async def reaped() -> bool:
            await (reaper.collect_garbage(provider) if by == "gc" else reaper.reconcile())
            return await platform_nodes(tmp_path) == set()

        assert not await reaped()
        assert await platform_nodes(tmp_path) == {node_id}  # younger than max_age: the pool's

        assert await wait_until(reaped, 30), "a pool node past max_age was left"
    assert node_id in await pool_nodes(store, "warm", PoolNodeState.DESTROYED)
