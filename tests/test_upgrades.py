"""Upgrades keep the data: a store written by an earlier version (tests/stores/, made by driving
the library at that version) opens with today's code, and everything in it is still there and
still works: runs with their events and transcripts, a paused run resumed on a fresh node,
a kept node, tokens, a pool and its nodes, an image, an idempotency key. A store newer than
the code is refused in one line. The same on PostgreSQL: integration/test_upgrades_postgres.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from nodeprov.cli import app
from nodeprov.errors import StoreError
from nodeprov.runs import Orchestrator
from nodeprov.store import NodeRecordState, Store
from nodeprov.store._schema import SCHEMA_VERSION, schema_version
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio

STORES = Path(__file__).parent / "stores"
SQLITE_FIXTURES = sorted(STORES.glob("schema-*.sqlite"))


def manifest_of(fixture: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(fixture.with_name(fixture.name + ".json").read_text())
    return loaded


async def check_upgraded(url: str, manifest: dict[str, Any], tmp_path: Path) -> None:
    """Open the store at ``url`` (written by an earlier version) and find everything the
    manifest says it holds; resume its released run on a fresh local node."""
    async with await Store.open(url) as store:
        assert await schema_version(store.db) == SCHEMA_VERSION
        for run_id, facts in manifest["runs"].items():
            record = await store.run(run_id)
            assert record is not None, run_id
            assert (record.state, record.agent_session_id, record.node_id) == (
                facts["state"],
                facts["session"],
                facts["node_id"],
            )
            assert await store.last_event_seq(run_id) == facts["events"]
            assert [e.seq for e in await store.events(run_id)] == list(range(1, facts["events"] + 1))
            key = {"project_key": facts["project_key"], "session_id": facts["session"]}
            entries = await store.transcripts.load(key)  # type: ignore[arg-type]
            assert len(entries or []) == manifest["transcript_entries"][run_id]
        kept = await store.nodes(states=[NodeRecordState.KEPT])
        assert [node.id for node in kept] == [manifest["runs"][manifest["kept"]]["node_id"]]
        snapshot = await store.peek_snapshot(manifest["runs"][manifest["kept"]]["token"])
        assert snapshot is not None
        assert (snapshot.node_kept, snapshot.used_at) == (True, None)
        token = manifest["token"]
        found = await store.tokens.authenticate(token["secret"])
        assert found is not None
        assert found.id == token["id"]
        assert {t.id: t.revoked_at is not None for t in await store.tokens.tokens()} == {
            token["id"]: False,
            token["revoked"]: True,
        }
        pool = await store.pools.get("warm")
        assert pool is not None
        assert sorted(n.id for n in await store.pools.nodes("warm")) == manifest["pool_nodes"]
        assert list(await store.images.get([manifest["image"]])) == [manifest["image"]]
        refs = await store.db.fetchall("SELECT run_id FROM image_refs WHERE sha256 = ?", (manifest["image"],))
        assert refs == [(manifest["finished"],)]  # filled in by the upgrade, for retention
        scope, key_name, resource = manifest["idempotency"]
        reserved, made = await store.idempotency.reserve(
            scope, key_name, kind="run", fingerprint="other", resource_id="x", holder="y"
        )
        assert (made, reserved.resource_id) == (False, resource)

        released = manifest["released"]
        fake = fake_agent_command(tmp_path)
        options = {"cli_path": fake, "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "back again"}])}}
        async with Orchestrator(store, reconcile_interval=0) as plane:
            run = await plane.resume(
                manifest["runs"][released]["token"],
                options=options,
                provider_settings={"root": str(tmp_path / "nodes")},
            )
            with anyio.fail_after(60):
                assert await run.wait() == "ok", run.error
        assert await store.last_event_seq(released) > manifest["runs"][released]["events"]
        facts = manifest["runs"][released]
        key = {"project_key": facts["project_key"], "session_id": facts["session"]}
        resumed = await store.transcripts.load(key)  # type: ignore[arg-type]
        assert len(resumed or []) > manifest["transcript_entries"][released]


@pytest.mark.parametrize("fixture", SQLITE_FIXTURES, ids=lambda path: path.stem)
async def test_an_sqlite_store_of_an_earlier_version_keeps_its_data(fixture: Path, tmp_path: Path) -> None:
    copy = tmp_path / "store.db"
    shutil.copyfile(fixture, copy)
    await check_upgraded(f"sqlite:///{copy}", manifest_of(fixture), tmp_path)


def test_there_is_a_fixture_of_the_schema_before_this_one() -> None:
    """A change that adds a migration keeps a store of the schema before it (tests/stores/README.md)."""
    versions = {int(path.stem.split("-")[1]) for path in SQLITE_FIXTURES}
    assert versions
    assert max(versions) < SCHEMA_VERSION
    assert {int(path.stem.split("-")[1]) for path in STORES.glob("schema-*.sql")} == versions


async def test_a_store_newer_than_the_code_is_refused_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    async with await Store.open(url) as store:
        await store.db.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, 'later')", (SCHEMA_VERSION + 1,)
        )
    with pytest.raises(StoreError, match=f"has schema {SCHEMA_VERSION + 1}, newer than this nodeprov"):
        await Store.open(url)
    result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(app, ["runs", "--store", url]))
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "upgrade nodeprov" in result.stderr
