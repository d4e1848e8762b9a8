"""Nothing in the store grows for ever: retention deletes runs that are over and old with all
they own (and only that), dead leases are compacted once nothing names them (a lease then
unknown is "cannot tell", never "dead"), and one control plane of those sharing a store prunes
at most hourly. integration/test_retention_postgres.py runs these again on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.prompts import ImageBlock
from nodeprov.runs import Orchestrator
from nodeprov.runs import retention as policy
from nodeprov.runs.lease import owner_check
from nodeprov.runs.state import LIVE_STATES
from nodeprov.store import (
    EntryBatch,
    EventRecord,
    NodeRecordState,
    PoolRecord,
    PruneReport,
    RunRecord,
    SnapshotRecord,
    Store,
    keyed,
    now,
)
from nodeprov.testing.images import sample_png
from tests.conftest import MakeStore

pytestmark = pytest.mark.anyio

OLD = (datetime.now(UTC) - timedelta(days=40)).isoformat(timespec="microseconds")
MONTH = 30 * 86400.0


@pytest.fixture
async def store(make_store: MakeStore) -> AsyncIterator[Store]:
    """An empty store of the test's own (``make_store``: tests/conftest.py's, or PostgreSQL's)."""
    async with await make_store(True) as opened:
        yield opened


async def seed(
    store: Store,
    run_id: str,
    *,
    state: str,
    updated_at: str,
    workspace: str = "ws",
    conversation: str | None = None,
    images: tuple[ImageBlock, ...] = (),
    node: NodeRecordState = NodeRecordState.DESTROYED,
    owner: str = "me",
) -> None:
    """A run as a control plane leaves it: three events, a snapshot, a node record, and (with
    ``conversation``) transcript entries of that agent session."""
    session = await store.active_session(workspace, "claude")
    record = RunRecord(
        run_id, session.id, workspace, "task", "local", "{}", "{}", state, None, None, f"n-{run_id}",
        conversation, "project" if conversation else None, owner, None, updated_at, updated_at, "claude",
    )  # fmt: skip
    await store.create_run(record, images)
    key = {"project_key": "project", "session_id": conversation} if conversation else None
    frames = [EntryBatch(key, keyed([{"uuid": f"{run_id}-{n}", "n": n} for n in range(2)]))] if key else []  # type: ignore[arg-type]
    await store.append_events([EventRecord(run_id, seq, "kind", now(), "{}") for seq in (1, 2, 3)], frames)
    await store.save_snapshot(
        SnapshotRecord(
            token=f"tok-{run_id}",
            run_id=run_id,
            node_id=None,
            node_kept=False,
            provider="local",
            agent_session_id=None,
            project_key=None,
            state=state,
            pause_kind="human",
            reason="",
            created_at=now(),
            used_at=None,
            agent="claude",
        )
    )
    await store.node_intent(f"n-{run_id}", "local", run_id)
    await store.set_node_state(f"n-{run_id}", node)


def pool(holder: str | None) -> PoolRecord:
    return PoolRecord("warm", "local", "{}", "[]", "{}", 2, 3600.0, 2, "active", holder, None, None, 0, now())


async def count(store: Store, table: str) -> int:
    row = await store.db.fetchone(f"SELECT COUNT(*) FROM {table}")
    assert row is not None
    return int(row[0])


async def test_prune_deletes_what_is_over_and_old_with_all_it_owns_and_nothing_else(store: Store) -> None:
    lonely, shared = ImageBlock.from_bytes(sample_png(2, 2)), ImageBlock.from_bytes(sample_png(3, 3))
    await seed(
        store, "old-finished", state="finished", updated_at=OLD, conversation="a", images=(lonely, shared)
    )
    await seed(store, "old-paused", state="paused", updated_at=OLD, conversation="b")
    await seed(store, "old-failed", state="failed", updated_at=OLD)
    await seed(store, "old-but-kept", state="paused", updated_at=OLD, node=NodeRecordState.KEPT)
    await seed(store, "old-but-running", state="running", updated_at=OLD, node=NodeRecordState.LIVE)
    await seed(store, "new-finished", state="finished", updated_at=now(), conversation="b", images=(shared,))
    await store.db.execute("UPDATE images SET created_at = ?", (OLD,))
    before = {table: await count(store, table) for table in ("runs", "run_events", "snapshots", "nodes")}

    would = await policy.prune(store, MONTH, dry_run=True)
    assert {table: await count(store, table) for table in before} == before  # nothing went
    done = await policy.prune(store, MONTH)
    assert (would.runs, would.events, would.dry_run, done.dry_run) == (3, 9, True, False)
    assert would.as_json() | {"dry_run": False} == done.as_json()

    kept = {record.id for record in await store.runs()}
    assert kept == {"old-but-kept", "old-but-running", "new-finished"}
    for gone in ("old-finished", "old-paused", "old-failed"):
        assert await store.events(gone) == []
        assert await store.snapshots(gone) == []
        assert await store.node(f"n-{gone}") is None
    assert (done.snapshots, done.nodes) == (3, 3)
    assert await store.transcripts.load({"project_key": "project", "session_id": "a"}) is None
    assert len(await store.transcripts.load({"project_key": "project", "session_id": "b"}) or []) == 4
    assert list(await store.images.get([lonely.sha256, shared.sha256])) == [shared.sha256]
    assert done.images == 1
    assert (await policy.prune(store, MONTH)).as_json() == PruneReport().as_json()


async def test_a_session_and_its_workspace_go_with_their_last_run(store: Store) -> None:
    await seed(store, "first", state="finished", updated_at=OLD, workspace="gone")
    await store.active_session("gone", "codex")  # archives the claude session of the run above
    await store.db.execute("UPDATE sessions SET created_at = ? WHERE workspace_id = 'gone'", (OLD,))
    await store.db.execute("UPDATE workspaces SET created_at = ?", (OLD,))
    await seed(store, "other", state="finished", updated_at=now(), workspace="stays")
    report = await policy.prune(store, MONTH)
    # The archived session with its run, and the active one, made as long ago and never used.
    assert (report.runs, report.sessions, report.workspaces) == (1, 2, 1)
    assert {s.workspace_id for s in await store.sessions()} == {"stays"}
    report = await policy.prune(store, 0)
    assert (report.runs, report.sessions, report.workspaces) == (1, 1, 1)
    assert await store.sessions() == []


async def test_spent_pool_nodes_and_old_idempotency_keys_go(store: Store) -> None:
    await store.pools.create(pool(None))
    for node_id, state in (("p-claimed", "claimed"), ("p-destroyed", "destroyed"), ("p-ready", "ready")):
        await store.db.execute(
            "INSERT INTO pool_nodes (id, pool, state, owner, ready_ms, run_id, updated_at)"
            " VALUES (?, 'warm', ?, 'lease:x', 1, NULL, ?)",
            (node_id, state, OLD),
        )
    await store.idempotency.reserve("me", "k", kind="run", fingerprint="f", resource_id="r", holder="h")
    await store.db.execute("UPDATE idempotency_keys SET created_at = ?", (OLD,))
    report = await policy.prune(store, MONTH)
    assert (report.pool_nodes, report.idempotency_keys) == (2, 1)
    assert [node.id for node in await store.pools.nodes("warm")] == ["p-ready"]


async def _dead(store: Store, holder: str, *, ago: float) -> str:
    lease = await store.leases.acquire(holder, 60)
    await store.leases.release(lease.id)
    await store.db.execute(
        "UPDATE leases SET expires_ms = expires_ms - ? WHERE id = ?", (int(ago * 1000), lease.id)
    )
    return lease.id


async def test_dead_leases_are_compacted_once_nothing_names_them(store: Store) -> None:
    live = (await store.leases.acquire("alive", 60)).id
    long_dead = await _dead(store, "long dead", ago=3600)
    just_dead = await _dead(store, "just dead", ago=1)
    owns_a_run = await _dead(store, "owns a live run", ago=3600)
    owned_a_run = await _dead(store, "owned a finished run", ago=3600)
    holds_a_pool = await _dead(store, "holds a pool", ago=3600)
    makes_a_node = await _dead(store, "was making a pool node", ago=3600)
    holds_a_key = await _dead(store, "holds a pending key", ago=3600)
    await seed(store, "live", state="running", updated_at=now(), owner=f"lease:{owns_a_run}")
    await seed(store, "over", state="finished", updated_at=now(), owner=f"lease:{owned_a_run}")
    await store.pools.create(pool(f"lease:{holds_a_pool}"))
    await store.db.execute(
        "INSERT INTO pool_nodes (id, pool, state, owner, ready_ms, run_id, updated_at)"
        " VALUES ('p-1', 'warm', 'intent', ?, NULL, NULL, ?)",
        (f"lease:{makes_a_node}", now()),
    )
    await store.idempotency.reserve(
        "me", "k", kind="run", fingerprint="f", resource_id="r", holder=f"lease:{holds_a_key}"
    )

    while await store.leases.compact(LIVE_STATES):
        pass
    remaining = set(await store.leases.liveness())
    assert remaining == {live, just_dead, owns_a_run, holds_a_pool, makes_a_node, holds_a_key}
    alive = await owner_check(store)
    assert alive(f"lease:{live}") is True
    assert alive(f"lease:{owns_a_run}") is False  # still known dead: its run is reconciled
    assert alive(f"lease:{long_dead}") is None  # compacted: cannot tell, as another store's lease
    assert (await owner_check(store, [f"lease:{owned_a_run}", f"lease:{live}"]))(f"lease:{live}") is True

    await store.update_run("live", state="failed")  # reconciled: nothing names it now
    await store.idempotency.complete("me", "k", "{}")
    while await store.leases.compact(LIVE_STATES):
        pass
    assert set(await store.leases.liveness()) == {live, just_dead, holds_a_pool, makes_a_node}
    assert not await store.leases.renew(owns_a_run, 60)  # gone: lost, as an expired one


async def test_of_the_control_planes_sharing_a_store_one_prunes_each_hour(make_store: MakeStore) -> None:
    async with await make_store(False) as first, await make_store(False) as second:
        assert [await first.retention.due(3600), await second.retention.due(3600)] == [True, False]
        assert not await first.retention.due(3600)
        assert await second.retention.due(0.0)


async def test_a_control_plane_prunes_on_its_own(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(store, "old", state="finished", updated_at=OLD)
    await seed(store, "new", state="finished", updated_at=now())
    monkeypatch.setattr(policy, "_FIRST_LOOK", 0.0)
    async with Orchestrator(store, reconcile_interval=0):
        with anyio.fail_after(30):
            while await store.run("old") is not None:  # noqa: ASYNC110 - pruned in the background
                await anyio.sleep(0.05)
    assert await store.run("new") is not None
    async with Orchestrator(store, reconcile_interval=0, retention=None):
        pass  # keeps everything: nothing to check but that it is allowed


def test_nodeprov_prune_says_what_it_deletes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"

    async def seeded() -> None:
        async with await Store.open(url) as opened:
            await seed(opened, "old", state="finished", updated_at=OLD)

    anyio.run(seeded)
    runner = CliRunner()
    dry = runner.invoke(app, ["prune", "--dry-run", "--json", "--store", url])
    assert dry.exit_code == 0, dry.stderr
    assert json.loads(dry.stdout) | {} == {**json.loads(dry.stdout), "runs": 1, "events": 3, "dry_run": True}
    done = runner.invoke(app, ["prune", "--older-than", "30d", "--store", url])
    assert done.exit_code == 0, done.stderr
    assert "deleted" in done.stdout
    assert json.loads(runner.invoke(app, ["prune", "--json", "--store", url]).stdout)["runs"] == 0
    bad = runner.invoke(app, ["prune", "--older-than", "a while", "--store", url])
    assert (bad.exit_code, bad.stderr.count("\n")) == (2, 1)
    assert "not an age" in bad.stderr
