"""The rules between the store, nodes and runs that no single module owns (who may reap a
node, how long a kept node lives, what a resume carries), with the fake agent on local nodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.errors import ConfigError
from nodeprov.node import LABEL_EXPIRES_AT
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Run
from nodeprov.store import EventRecord, RunRecord, SnapshotRecord, Store, now
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio

TIMEOUT = 60


def local(tmp_path: Path) -> dict[str, Any]:
    # Named, as on this machine any model but the scripted one must (the fake agent ignores it).
    return {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}, "permission": "edit"}


def nodes_on_disk(tmp_path: Path) -> set[str]:
    root = tmp_path / "nodes"
    return {path.name for path in root.iterdir()} if root.exists() else set()


async def running(run: Run) -> str:
    """Wait until the agent on the run's node has said something; return the node's id."""
    node_id = None
    with anyio.fail_after(TIMEOUT):
        async for event in run.events():
            if isinstance(event, NodeReady):
                node_id = event.node_id
            elif isinstance(event, AgentMessage) and node_id is not None:
                return node_id
    raise AssertionError(f"run {run.id} ended before its agent started: {run.error}")


async def ready_event(run: Run) -> NodeReady:
    with anyio.fail_after(TIMEOUT):
        async for event in run.events():
            if isinstance(event, NodeReady):
                return event
    raise AssertionError(f"run {run.id} ended without a node: {run.error}")


# -- who may reap a node ------------------------------------------------------------------


async def until_destroyed(store: Store, plane: Orchestrator, node_id: str) -> None:
    """Reconcile until the node is destroyed (by this reconcile or the orchestrator's own,
    which may come first): its keep time runs by the database's clock."""
    with anyio.fail_after(TIMEOUT):
        while (node := await store.node(node_id)) is None or node.state != "destroyed":
            await plane.reconcile()
            await anyio.sleep(0.2)


async def test_gc_with_another_store_spares_a_live_run(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A lease the reaping store does not know is another store's: its holder may well
    live, so its nodes are kept (until their lifetime ends), never taken for dead."""
    async with (
        await Store.open(f"sqlite:///{tmp_path}/b.db") as other,
        Orchestrator(store) as plane,
        Orchestrator(other, reconcile_interval=0) as reaper,
    ):
        run = await plane.start("go", options=agent({"stall": True}), **local(tmp_path))
        node_id = await running(run)
        provider = get_provider("local", root=str(tmp_path / "nodes"))
        for _ in range(3):
            assert (await reaper.reconcile()).destroyed == []
            assert (await reaper.collect_garbage(provider)).reaped == []
        assert node_id in nodes_on_disk(tmp_path)
        await run.pause("human", "still alive")  # the run's agent was never touched
        assert await run.wait() == "paused"


async def test_reconcile_rechecks_a_node_right_before_destroying_it(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause that keeps its node lands between reconcile reading the node (live) and the
    run (paused, so not live): the node is kept, not destroyed as a run's leftover."""
    async with (
        await Store.open(store.url) as shared,
        Orchestrator(store) as plane,
        Orchestrator(shared, reconcile_interval=0) as reconciler,
    ):
        run = await plane.start("go", options=agent({"stall": True}), **local(tmp_path))
        node_id = await running(run)
        read_nodes = shared.nodes
        paused: list[SnapshotRecord] = []

        async def nodes_then_a_pause(**kwargs: Any) -> Any:
            found = await read_nodes(**kwargs)
            if not paused:
                paused.append(await run.pause("human", "kept", keep_node=True))
            return found

        monkeypatch.setattr(shared, "nodes", nodes_then_a_pause)
        report = await reconciler.reconcile()
        assert paused, "reconcile never read the nodes"
        assert node_id not in report.destroyed
        assert node_id in nodes_on_disk(tmp_path)
        resumed = await plane.resume(paused[0].token, options=agent({"text": "back"}))
        ready = await ready_event(resumed)
        assert (ready.node_id, ready.reused) == (node_id, True)
        assert await resumed.wait() == "ok", resumed.error


# -- how long a kept node lives -------------------------------------------------------------


async def test_a_kept_node_goes_at_its_keep_time_and_the_run_resumes_on_a_fresh_one(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "the word is quince", options=agent({"text": "noted"}, {"stall": True}), **local(tmp_path)
        )
        node_id = await running(run)
        snapshot = await run.pause("human", "a short break", keep_node=True, keep_for=1.0)
        assert snapshot.node_kept
        assert node_id in nodes_on_disk(tmp_path)
        await until_destroyed(store, plane, node_id)
        assert node_id not in nodes_on_disk(tmp_path)
        resumed = await plane.resume(snapshot.token, options=agent({"text": "back"}))
        ready = await ready_event(resumed)
        assert ready.node_id != node_id
        assert (ready.reused, ready.transcript_restored) == (False, True)
        assert await resumed.wait() == "ok", resumed.error


async def test_a_node_is_kept_no_longer_than_it_lives(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "go",
            options=agent({"stall": True}),
            node_config=NodeConfig(ttl=timedelta(minutes=2)),
            **local(tmp_path),
        )
        node_id = await running(run)
        await run.pause("human", "for a day", keep_node=True, keep_for=86400)
        node = await store.node(node_id)
        assert node is not None
        assert node.state == "kept"
        assert node.keep_until_ms is not None
        assert node.keep_until_ms - await store.clock_ms() <= 120_000


async def test_past_its_lifetime_a_node_the_store_holds_is_reaped(tmp_path: Path) -> None:
    provider = get_provider("local", root=str(tmp_path / "nodes"))
    node = await provider.provision(NodeConfig(ttl=timedelta(minutes=1)))
    held = await provider.collect_garbage(spare={node.node_id})
    assert held.reaped == []
    expiry = datetime.fromisoformat(node.labels[LABEL_EXPIRES_AT])
    later = await provider.collect_garbage(spare={node.node_id}, now=expiry + timedelta(seconds=1))
    assert [info.node_id for info in later.reaped] == [node.node_id]
    assert nodes_on_disk(tmp_path) == set()


async def test_a_kept_node_that_no_resume_will_use_is_destroyed(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """Two tokens of one run (a pause kept the node; a reconcile after a lost lease left a
    second snapshot): the resume from the second leaves the kept node to nobody, so it goes,
    and the first token is used up."""
    async with Orchestrator(store) as plane:
        run = await plane.start("go", options=agent({"stall": True}), **local(tmp_path))
        node_id = await running(run)
        kept = await run.pause("human", "kept", keep_node=True)
        record = await store.run(run.id)
        assert record is not None
        second = SnapshotRecord(
            agent="claude",
            token="tok-second-token-of-the-run",
            run_id=run.id,
            node_id=node_id,
            node_kept=False,
            provider="local",
            agent_session_id=kept.agent_session_id,
            project_key=record.project_key,
            state="failed",
            pause_kind="system",
            reason="its control plane lost its lease",
            created_at=now(),
            used_at=None,
        )
        await store.save_snapshot(second)
        resumed = await plane.resume(second.token, options=agent({"text": "back"}))
        ready = await ready_event(resumed)
        assert ready.node_id != node_id
        assert await resumed.wait() == "ok", resumed.error
        assert node_id not in nodes_on_disk(tmp_path)
        used = await store.peek_snapshot(kept.token)
        assert used is not None
        assert used.used_at is not None


async def test_a_kept_node_of_a_workspace_that_switched_agents_is_destroyed(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start("go", options=agent({"stall": True}), **local(tmp_path))
        node_id = await running(run)
        await run.pause("human", "kept", keep_node=True)
        assert (await plane.reconcile()).destroyed == []
        await store.active_session("default", "codex")  # the workspace moves to another agent
        await until_destroyed(store, plane, node_id)
        assert node_id not in nodes_on_disk(tmp_path)


# -- what a resume carries --------------------------------------------------------------------


async def test_a_resume_on_a_fresh_node_keeps_the_runs_node_config(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    config = NodeConfig(ttl=timedelta(minutes=5), labels={"team": "blue"}, env={"NODE_VAR": "kept"})
    provider = get_provider("local", root=str(tmp_path / "nodes"))
    async with Orchestrator(store) as plane:
        run = await plane.start("go", options=agent({"stall": True}), node_config=config, **local(tmp_path))
        first = await running(run)
        snapshot = await run.pause("human", "released")
        resumed = await plane.resume(snapshot.token, options=agent({"stall": True}))
        second = await running(resumed)
        assert second != first
        node = await provider.attach(second)
        assert node.labels["team"] == "blue"
        assert node.base_env["NODE_VAR"] == "kept"
        record = await store.node(second)
        assert record is not None
        lifetime = datetime.fromisoformat(node.labels[LABEL_EXPIRES_AT]) - datetime.fromisoformat(
            record.created_at
        )
        assert timedelta(minutes=4) < lifetime <= timedelta(minutes=5, seconds=1)
        await resumed.pause("human", "done")


# -- limits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [{"deadline": 0}, {"deadline": -5}, {"idle_timeout": 0}])
async def test_a_limit_must_be_a_positive_time(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path, limit: dict[str, float]
) -> None:
    async with Orchestrator(store) as plane:
        with pytest.raises(ConfigError, match="positive"):
            await plane.start("go", options=agent({"text": "hi"}), **local(tmp_path), **limit)  # type: ignore[arg-type]
        assert await store.runs() == []


@pytest.fixture
def long_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent whose stop policy would wait a minute for it at each step (stdin EOF, SIGTERM)."""
    from functools import partial

    from nodeprov.agents.claude import bridge
    from nodeprov.spawn import StopPolicy

    monkeypatch.setattr(bridge, "StopPolicy", partial(StopPolicy, eof_grace=60, term_grace=60))


@pytest.mark.parametrize("limit", [{"deadline": 1.0}, {"idle_timeout": 1.0}], ids=["deadline", "idle"])
async def test_a_limit_ends_the_run_at_the_limit_not_a_stop_policy_later(
    store: Store,
    agent: Callable[..., dict[str, Any]],
    tmp_path: Path,
    long_graces: None,
    limit: dict[str, float],
) -> None:
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "go",
            options=agent({"ignore_term": True}, {"stall": True}),
            **local(tmp_path),
            **limit,  # type: ignore[arg-type]
        )
        with anyio.fail_after(TIMEOUT):  # the graces alone would take two minutes
            assert await run.wait() == "error"
        assert "deadline" in (run.error or "") or "no progress" in (run.error or "")
    assert nodes_on_disk(tmp_path) == set()


async def test_status_says_a_run_of_a_switched_workspace_is_not_resumable(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    import subprocess
    import sys

    async with Orchestrator(store) as plane:
        run = await plane.start("go", options=agent({"stall": True}), **local(tmp_path))
        await running(run)
        await run.pause("human", "kept", keep_node=True)
    await store.active_session("default", "codex")  # the workspace moves to another agent

    def status() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "nodeprov", "status", run.id, "--json", "--store", store.url],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return dict(json.loads(done.stdout))

    shown = await anyio.to_thread.run_sync(status)
    assert shown["resumable"] is False
    assert [s["resumable"] for s in shown["snapshots"]] == [False]


async def test_leaving_never_overruns_the_shutdown_timeout_by_a_stop_policy(
    store: Store, agent: Callable[..., dict[str, Any]], tmp_path: Path, long_graces: None
) -> None:
    """An agent that answers no interrupt, ignores SIGTERM and outlives stdin EOF: leaving
    the orchestrator kills it within ``shutdown_timeout`` instead of waiting out its graces."""
    async with Orchestrator(store, shutdown_timeout=3) as plane:
        run = await plane.start(
            "go", options=agent({"ignore_term": True}, {"deaf": True}, {"stall": True}), **local(tmp_path)
        )
        await running(run)
        leaving = anyio.current_time()
    assert anyio.current_time() - leaving < 3 + 10  # the graces alone would take two minutes
    assert await wait_until(lambda: _no_agent_left(tmp_path), within=TIMEOUT)
    record = await store.run(run.id)
    assert record is not None
    assert record.state != "running"


async def _no_agent_left(tmp_path: Path) -> bool:
    return await anyio.to_thread.run_sync(_nothing_works_in, tmp_path)


def _nothing_works_in(tmp_path: Path) -> bool:
    """Whether no process works in a directory under ``tmp_path`` (the local nodes)."""
    for proc in Path("/proc").iterdir():
        try:
            working = (proc / "cwd").readlink().is_relative_to(tmp_path)
            zombie = (proc / "stat").read_text().rpartition(") ")[2].startswith("Z")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if working and not zombie:
            return False
    return True


# -- a drive's end is written once --------------------------------------------------------


async def _orphan(store: Store, run_id: str, state: str, kinds: list[str]) -> None:
    """A run in ``state`` left by a control plane that died, with events of ``kinds``."""
    lease = await store.leases.acquire("a control plane that died", 60)
    await store.leases.release(lease.id)
    session = await store.active_session("ws", "claude")
    record = RunRecord(
        run_id, session.id, "ws", "task", "local", "{}", "{}", state, None, None, None,
        None, None, f"lease:{lease.id}", None, now(), now(), "claude",
    )  # fmt: skip
    await store.create_run(record)
    await store.append_events(
        [EventRecord(run_id, seq, kind, now(), "{}") for seq, kind in enumerate(kinds, 1)]
    )


async def test_a_drive_that_wrote_its_end_and_died_before_its_state_moved_ends_once(store: Store) -> None:
    """Its control plane stored the drive's ``run.finished`` and died before the run's state
    moved (a replica stopping): reconcile ends the run, and writes no second end."""
    await _orphan(store, "run-ended", "running", ["run.started", "node.ready", "run.finished"])
    async with Orchestrator(store, reconcile_interval=0, retention=None) as plane:
        assert "run-ended" in (await plane.reconcile()).ended
    assert [e.kind for e in await store.events("run-ended")] == ["run.started", "node.ready", "run.finished"]
    assert (await store.run("run-ended")).state == "failed"  # type: ignore[union-attr]


async def test_a_resume_that_died_before_it_started_gets_its_end(store: Store) -> None:
    """A paused run (its drive ended) was resumed by a control plane that died before the
    drive's first event: reconcile writes the resumed drive's end."""
    await _orphan(store, "run-resumed", "starting", ["run.started", "run.paused", "run.finished"])
    snapshot = SnapshotRecord(
        "tok-1", "run-resumed", None, False, "local", None, None, "paused", "human", "", now(), None, "claude"
    )
    await store.save_snapshot(snapshot)
    await store.claim_snapshot("tok-1")  # the resume began
    async with Orchestrator(store, reconcile_interval=0, retention=None) as plane:
        assert "run-resumed" in (await plane.reconcile()).ended
    kinds = [e.kind for e in await store.events("run-resumed")]
    assert kinds == ["run.started", "run.paused", "run.finished", "run.finished"]
