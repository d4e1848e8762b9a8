"""The session store on SQLite. integration/test_store_postgres.py runs these same tests on
PostgreSQL by overriding the ``make_store`` fixture."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from claude_agent_sdk.testing import run_session_store_conformance

from nodeprov import ImageBlock
from nodeprov.agents.claude import ClaudeSessionStore
from nodeprov.errors import ConfigError, StoreError
from nodeprov.store import (
    CheckpointRecord,
    EntryBatch,
    EntryKey,
    EventRecord,
    IdempotencyRecord,
    RunRecord,
    SnapshotRecord,
    Store,
    TokenError,
    now,
)
from nodeprov.store._db import Statements
from nodeprov.store.entries import Summary
from nodeprov.testing.images import sample_png
from tests.conftest import MakeStore

pytestmark = pytest.mark.anyio


__all__ = ["MakeStore", "store"]  # for integration/test_store_postgres.py, with its make_store


@pytest.fixture
async def store(make_store: MakeStore) -> AsyncIterator[Store]:
    async with await make_store(False) as store:
        yield store


async def test_sdk_session_store_conformance(make_store: MakeStore) -> None:
    opened: list[Store] = []

    async def fresh() -> ClaudeSessionStore:
        store = await make_store(True)
        opened.append(store)
        return ClaudeSessionStore(store.transcripts)

    try:
        await run_session_store_conformance(fresh)
    finally:
        for store in opened:
            await store.aclose()


async def test_appends_are_idempotent_by_uuid(store: Store) -> None:
    key = {"project_key": "p", "session_id": "s"}
    entry = {"type": "user", "uuid": "u1", "message": {"content": "hi"}}
    await store.transcripts.append(key, [entry])  # type: ignore[arg-type]
    await store.transcripts.append(key, [entry, {"type": "tag"}])  # type: ignore[arg-type]
    assert await store.transcripts.load(key) == [entry, {"type": "tag"}]  # type: ignore[arg-type]


async def test_a_sessions_first_entries_and_how_many_each_file_holds(store: Store) -> None:
    key: EntryKey = {"project_key": "p", "session_id": "s"}
    await store.transcripts.append(key, [{"n": 1}, {"n": 2}, {"n": 3}])
    await store.transcripts.append({"project_key": "p", "session_id": "s", "subpath": "sub/a?b"}, [{"n": 4}])
    assert await store.transcripts.load(key, first=2) == [{"n": 1}, {"n": 2}]
    assert await store.transcripts.load(key, first=9) == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert await store.transcripts.counts(key) == {"": 3, "sub/a?b": 1}
    assert await store.transcripts.counts({"project_key": "p", "session_id": "none"}) == {}


async def test_what_checkpoints_name_is_found_by_where_their_objects_are(store: Store) -> None:
    base = CheckpointRecord(
        "ck-1",
        "run-1",
        1,
        1,
        "pause",
        now(),
        "store:?max_bytes=9",
        "m1",
        '["p1"]',
        1,
        1,
        1,
        "{}",
        None,
        None,
        None,
        None,
    )
    for record in (
        base,
        dataclasses.replace(base, id="ck-2", seq=2, objects="store:", manifest="m2", packs='["p2"]'),
        dataclasses.replace(base, id="ck-3", seq=3, objects="store:x?", manifest="m3", packs="[]"),
        dataclasses.replace(base, id="ck-4", seq=4, objects="s3://b/p", manifest="m4", packs="[]"),
    ):
        assert await store.checkpoints.add(record)
    assert await store.checkpoints.named("store:") == {"m1", "p1", "m2", "p2"}
    assert await store.checkpoints.object_bytes() == 0
    await store.checkpoints.put_object("ab" * 32, b"12345")
    assert await store.checkpoints.object_bytes() == 5


async def test_a_summary_is_kept_only_where_the_writer_folds_one(store: Store) -> None:
    """The store knows entries, not agents: a summary is the writer's fold, over what each
    append really added; entries written without one keep none."""
    key: EntryKey = {"project_key": "p", "session_id": "s"}
    await store.transcripts.append(key, [{"type": "x", "uuid": "u1"}])
    assert await store.transcripts.summaries("p") == []

    def count(previous: Summary | None, folded: EntryKey, entries: list[Any]) -> Summary:
        seen = previous["data"]["seen"] if previous else 0
        return {"session_id": folded["session_id"], "mtime": 0, "data": {"seen": seen + len(entries)}}

    await store.transcripts.append(
        key, [{"type": "x", "uuid": "u1"}, {"type": "y", "uuid": "u2"}], fold=count
    )
    await store.transcripts.append(key, [{"type": "z", "uuid": "u3"}], fold=count)
    [summary] = await store.transcripts.summaries("p")
    assert (summary["session_id"], summary["data"]) == ("s", {"seen": 2})  # u1 was stored already
    await store.transcripts.replace(key, [{"type": "w"}])  # no fold: the old summary goes
    assert await store.transcripts.summaries("p") == []


async def test_one_active_session_per_workspace_and_switching_archives(store: Store) -> None:
    first = await store.active_session("ws", "claude")
    assert await store.active_session("ws", "claude") == first
    await store.set_provider_session_id(first.id, "agent-session-1")
    second = await store.active_session("ws", "codex")
    assert second.id != first.id
    sessions = {s.id: s for s in await store.sessions("ws")}
    assert len([s for s in sessions.values() if s.state == "active"]) == 1
    assert sessions[first.id].state == "archived"
    assert sessions[first.id].provider_session_id == "agent-session-1"  # archived, never deleted
    assert sessions[second.id].state == "active"
    assert (await store.active_session("other", "claude")).workspace_id == "other"


def _run(session_id: str, run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        run_id,
        session_id,
        "ws",
        "task",
        "local",
        "{}",
        "{}",
        "running",
        None,
        None,
        None,
        None,
        None,
        "me",
        None,
        now(),
        now(),
        "claude",
    )


async def test_run_compare_and_set(store: Store) -> None:
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    assert await store.update_run("run-1", expect_states=("running",), expect_owner="me", state="pausing")
    assert not await store.update_run("run-1", expect_states=("running",), state="finished")
    assert not await store.update_run("run-1", expect_states=("pausing",), expect_owner="other", state="x")
    assert (await store.run("run-1")).state == "pausing"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="unknown run fields"):
        await store.update_run("run-1", colour="blue")


async def test_a_lease_renewal_is_not_queued_behind_other_statements(store: Store) -> None:
    # A busy control plane's backlog of statements must not delay its heartbeat past the
    # lease's expiry: the renewal finishes while every connection of the store's own is
    # busy with a statement that waits for the test (a function of the test's on SQLite's
    # one; an advisory lock on PostgreSQL's pool of four) and a backlog waits behind them.
    lease = await store.leases.acquire("host pid 1", ttl=30)
    assert await store.leases.renew(lease.id, 30)  # its connection is opened: not what is tested
    release, released = anyio.Event(), threading.Event()
    backlog, done = 200, 0

    async def statement(sql: str = "SELECT 1") -> None:
        nonlocal done
        await store.db.fetchall(sql)
        done += 1

    async def hold_the_lock() -> None:
        async def body(tx: Any) -> None:
            await tx.fetchall("SELECT pg_advisory_xact_lock(4747)")
            await release.wait()

        await store.db.transact(body)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            if store.db.dialect == "sqlite":
                connection = store.db._connection  # type: ignore[attr-defined]
                connection.create_scalar_function("wait_for_the_test", lambda: int(released.wait(60)), 0)
                tg.start_soon(statement, "SELECT wait_for_the_test()")
            else:
                tg.start_soon(hold_the_lock)
                for _ in range(3):
                    tg.start_soon(statement, "SELECT pg_advisory_xact_lock(4747)")
            await anyio.wait_all_tasks_blocked()
            for _ in range(backlog):
                tg.start_soon(statement)
            await anyio.wait_all_tasks_blocked()
            assert await store.leases.renew(lease.id, 30)
            assert done == 0  # every statement still waits
            release.set()
            released.set()
    assert done == backlog + (1 if store.db.dialect == "sqlite" else 3)


async def test_a_closed_store_opens_no_heartbeat_connection(make_store: MakeStore) -> None:
    opened = await make_store(True)
    lease = await opened.leases.acquire("host pid 1", ttl=30)

    async def renew() -> None:
        with suppress(StoreError):  # the store closed under it: refused, never left open
            await opened.leases.renew(lease.id, 30)

    async with anyio.create_task_group() as tg:
        tg.start_soon(renew)
        await anyio.lowlevel.checkpoint()  # it is opening its connection as the store closes
        await opened.aclose()
    assert opened._heartbeats is None
    with pytest.raises(StoreError):
        await opened.leases.renew(lease.id, 30)


async def test_leases_live_by_the_database_clock_until_they_expire_or_are_released(store: Store) -> None:
    lease = await store.leases.acquire("host pid 1", ttl=30)
    short = await store.leases.acquire("host pid 2", ttl=0.2)
    assert {lease.id, short.id} <= await store.leases.live()
    assert lease.expires_ms - lease.heartbeat_ms == 30_000
    await anyio.sleep(0.3)
    assert short.id not in await store.leases.live()
    assert not await store.leases.renew(short.id, 30)  # expired: lost, not revived
    assert await store.leases.renew(lease.id, 30)
    await store.leases.release(lease.id)
    assert lease.id not in await store.leases.live()
    assert not await store.leases.renew(lease.id, 30)
    released = await store.leases.get(lease.id)
    assert released is not None
    assert released.released


async def test_events_are_stored_in_order_and_read_from_any_point(store: Store) -> None:
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    events = [EventRecord("run-1", seq, "kind", now(), f'{{"n": {seq}}}') for seq in range(1, 6)]
    async with anyio.create_task_group() as tg:  # concurrent writers share transactions
        tg.start_soon(store.append_events, events[:2])
        tg.start_soon(store.append_events, events[2:])
    assert [e.seq for e in await store.events("run-1")] == [1, 2, 3, 4, 5]
    assert [e.body for e in await store.events("run-1", after=3)] == ['{"n": 4}', '{"n": 5}']
    assert await store.last_event_seq("run-1") == 5
    assert await store.last_event_seq("run-none") == 0


async def test_group_commit_blames_only_the_failing_writer(store: Store) -> None:
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    first = EventRecord("run-1", 1, "kind", now(), "{}")
    await store.append_events([first])
    outcomes: dict[str, BaseException | None] = {}

    async def append(name: str, records: list[EventRecord]) -> None:
        try:
            await store.append_events(records)
            outcomes[name] = None
        except StoreError as error:
            outcomes[name] = error

    async with anyio.create_task_group() as tg:
        tg.start_soon(append, "orphan", [EventRecord("no-such-run", 1, "kind", now(), "{}")])
        for seq in range(2, 12):
            tg.start_soon(append, f"ok-{seq}", [EventRecord("run-1", seq, "kind", now(), "{}")])
    assert isinstance(outcomes.pop("orphan"), StoreError)  # a store error, never a raw driver one
    assert set(outcomes.values()) == {None}
    assert await store.last_event_seq("run-1") == 11


async def test_a_statement_that_runs_too_long_is_interrupted(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/slow.db"):  # the schema made with no tight limit
        pass
    async with await Store.open(f"sqlite:///{tmp_path}/slow.db", statement_timeout=0.5) as store:
        endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
        with anyio.fail_after(10), pytest.raises(StoreError, match="interrupted"):
            await store.db.fetchall(endless)
        assert await store.db.fetchall("SELECT 1") == [(1,)]  # the connection is still good


async def test_the_sqlite_file_is_private(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/private/store.db"):
        pass
    assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "private" / "store.db").stat().st_mode & 0o777 == 0o600


async def test_an_existing_store_with_loose_modes_is_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    async with await Store.open():
        pass
    directory = tmp_path / "state" / "nodeprov"
    directory.chmod(0o755)
    for made in directory.iterdir():
        made.chmod(0o644)
    async with await Store.open() as store:
        await store.active_session("ws", "claude")  # the -wal file exists while it is open
        assert directory.stat().st_mode & 0o777 == 0o700
        assert {made.name: made.stat().st_mode & 0o777 for made in directory.iterdir()} == {
            "nodeprov.db": 0o600,
            "nodeprov.db-wal": 0o600,
            "nodeprov.db-shm": 0o600,
        }


async def test_a_store_that_cannot_be_opened_says_why_in_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(
        StoreError,
        match=r"cannot open the SQLite store at .*/a-file/store\.db: a file is in the way of its directory",
    ):
        await Store.open(f"sqlite:///{tmp_path}/a-file/store.db")


async def test_a_token_is_claimed_exactly_once_across_stores(make_store: MakeStore) -> None:
    async with await make_store(False) as first, await make_store(False) as second:
        session = await first.active_session("ws", "claude")
        await first.create_run(_run(session.id))
        await first.save_snapshot(
            SnapshotRecord(
                "tok-1",
                "run-1",
                "n1",
                True,
                "local",
                "a1",
                "pk",
                "running",
                "human",
                "lunch",
                now(),
                None,
                "claude",
            )
        )
        outcomes: list[object] = []

        async def claim(store: Store) -> None:
            try:
                outcomes.append(await store.claim_snapshot("tok-1"))
            except TokenError as error:
                outcomes.append(error)

        async with anyio.create_task_group() as tg:
            for store in (first, second, first, second):
                tg.start_soon(claim, store)
        wins = [o for o in outcomes if isinstance(o, SnapshotRecord)]
        assert len(wins) == 1
        assert wins[0].reason == "lunch"
        assert all("used already" in str(o) for o in outcomes if isinstance(o, TokenError))
        with pytest.raises(TokenError, match="unknown"):
            await second.claim_snapshot("no-such-token")


async def test_a_refused_statement_is_a_store_error(store: Store) -> None:
    """Constraint violations inside a transaction come out as StoreError, never as the
    driver's own exception types (sqlite3, psycopg)."""
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    await store.node_intent("np-1", "local", "run-1")
    with pytest.raises(StoreError, match=r"(?i)unique|duplicate"):
        await store.node_intent("np-1", "local", "run-1")
    with pytest.raises(StoreError, match=r"(?i)foreign key"):
        await store.node_intent("np-2", "local", "run-none")
    with pytest.raises(StoreError):
        await store.create_run(_run(session.id))


async def test_an_event_is_stored_once_however_often_it_is_written(store: Store) -> None:
    """A batch whose fate was unknown (a timeout, a cancelled writer) is written again."""
    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    event = EventRecord("run-1", 1, "kind", now(), "{}")
    await store.append_events([event])
    await store.append_events([event, EventRecord("run-1", 2, "kind", now(), "{}")])
    assert [e.seq for e in await store.events("run-1")] == [1, 2]


async def test_transcript_entries_are_stored_once_however_often_a_batch_is_written(store: Store) -> None:
    """Entries without a uuid (every line of a Codex rollout) keep the key they were given,
    so a batch whose fate was unknown, written again, stores each once and folds it once."""
    from nodeprov.store import keyed

    session = await store.active_session("ws", "claude")
    await store.create_run(_run(session.id))
    key: EntryKey = {"project_key": "p", "session_id": "s"}
    lines = keyed([{"type": "response_item", "n": n} for n in range(3)])
    event = EventRecord("run-1", 1, "kind", now(), "{}")
    await store.append_events([event], [EntryBatch(key, lines)])
    await store.append_events(
        [event], [EntryBatch(key, [*lines, *keyed([{"type": "response_item", "n": 3}])])]
    )
    assert await store.transcripts.load(key) == [{"type": "response_item", "n": n} for n in range(4)]


def _counted(previous: Summary | None, key: EntryKey, entries: list[Any]) -> Summary:
    seen = previous["data"]["seen"] if previous else []
    return {"session_id": key["session_id"], "mtime": 0, "data": {"seen": seen + [e["n"] for e in entries]}}


def _sessions_batches(sessions: int, per_session: int, start: int) -> list[EntryBatch]:
    """Interleaved batches: each session's main transcript (folded) and a subagent's (not)."""
    from nodeprov.store import keyed

    batches = []
    for n in range(sessions):
        main = [{"uuid": f"s{n}-{i}", "n": i} for i in range(start, start + per_session)]
        batches.append(EntryBatch({"project_key": "p", "session_id": f"s{n}"}, keyed(main), _counted))
        side = [{"uuid": f"s{n}-side-{i}", "n": i} for i in range(start, start + 2)]
        key: EntryKey = {"project_key": "p", "session_id": f"s{n}", "subpath": "subagents/a"}
        batches.append(EntryBatch(key, keyed(side), _counted))
    return batches


async def test_one_grouped_write_of_many_sessions_keeps_each_ones_order_and_summary(store: Store) -> None:
    """The journal's write: many sessions' frames in one batch, some written before (a batch
    written again after an unknown fate), each session's entries in their order, each main
    transcript's summary folded over what was really added, in order, subagents' not."""
    await store.append_events([], _sessions_batches(20, 5, 0))
    again = _sessions_batches(20, 5, 0)  # the first batch again, then new entries after it
    for batch, more in zip(again, _sessions_batches(20, 5, 5), strict=True):
        batch.entries += more.entries
    await store.append_events([], again)
    for n in range(20):
        main = await store.transcripts.load({"project_key": "p", "session_id": f"s{n}"})
        assert [e["n"] for e in main or []] == list(range(10))
        side = await store.transcripts.load(
            {"project_key": "p", "session_id": f"s{n}", "subpath": "subagents/a"}
        )
        assert [e["n"] for e in side or []] == [0, 1, 5, 6]
    summaries = {s["session_id"]: s["data"]["seen"] for s in await store.transcripts.summaries("p")}
    assert summaries == {f"s{n}": list(range(10)) for n in range(20)}


async def test_a_grouped_write_is_a_few_statements_whatever_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's driver lets go of the interpreter's lock for each row of an ``executemany``
    and must take it back from a busy event loop: the journal's batch is a few statements,
    not one per row or per session."""
    from nodeprov.store import _sqlite

    statements: list[str] = []
    for name in ("execute", "fetchall", "executemany"):
        original = getattr(_sqlite._SQLiteStatements, name)

        def counting(self: Any, sql: str, params: Any = (), _original: Any = original) -> Any:
            statements.append(sql)
            return _original(self, sql, params)

        monkeypatch.setattr(_sqlite._SQLiteStatements, name, counting)
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        session = await store.active_session("ws", "claude")
        await store.create_run(_run(session.id))
        events = [EventRecord("run-1", seq, "kind", now(), "{}") for seq in range(1, 501)]
        statements.clear()
        await store.append_events(events, _sessions_batches(50, 20, 0), writer=None)
        # the events, the entries' stored keys, the entries, the summaries read and written
        assert len(statements) == 5, statements
        assert len(await store.events("run-1", limit=1000)) == 500


async def test_a_statement_never_runs_inside_another_callers_open_transaction(tmp_path: Path) -> None:
    """A statement of its own is queued to the connection's thread at once, unless a
    transaction holds the connection across calls: then it waits for that one's end, and a
    rollback of the transaction does not take the statement's write with it."""
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        await store.db.execute("CREATE TABLE marks (what TEXT)")
        opened, single_done = anyio.Event(), anyio.Event()

        async def body(tx: Any) -> None:
            await tx.execute("INSERT INTO marks VALUES ('transaction')")
            opened.set()
            await anyio.wait_all_tasks_blocked()  # the statement below is waiting, wherever it waits
            assert not single_done.is_set()
            raise LookupError("rolled back")

        async def single() -> None:
            await opened.wait()
            await store.db.execute("INSERT INTO marks VALUES ('single')")
            single_done.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(single)
                with pytest.raises(LookupError):
                    await store.db.transact(body)
        assert await store.db.fetchall("SELECT what FROM marks") == [("single",)]


async def test_a_run_in_a_workspace_with_its_session_holds_no_transaction_across_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What every start stores, once its workspace has a session (the usual case): the
    session read, the run written; neither is a transaction held across calls, which on
    SQLite keeps every other caller waiting while the event loop comes back between its
    statements. A new session, a switch of provider, and a run with images still are."""
    from nodeprov.store import _sqlite

    held: list[str] = []
    original = _sqlite.SQLiteDatabase._attempt

    async def counted(self: Any, body: Any) -> Any:
        held.append(body.__qualname__)
        return await original(self, body)

    monkeypatch.setattr(_sqlite.SQLiteDatabase, "_attempt", counted)
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        held.clear()  # the schema's
        made = await store.active_session("ws", "claude")
        assert len(held) == 1
        assert await store.active_session("ws", "claude") == made
        await store.create_run(_run(made.id))
        assert len(held) == 1
        switched = await store.active_session("ws", "codex")
        assert switched.id != made.id
        await store.create_run(_run(switched.id, "run-2"), [ImageBlock.from_bytes(sample_png(seed=3))])
        assert held[1:] == [
            "WorkspaceSessions.active_session.<locals>.find_or_start",
            "Store.create_run.<locals>.create",
        ]
        assert [run.id for run in await store.runs()] == ["run-1", "run-2"]
        assert [(s.provider, s.state) for s in await store.sessions("ws")] == [
            ("claude", "archived"),
            ("codex", "active"),
        ]


async def test_a_batch_that_runs_too_long_is_interrupted(tmp_path: Path) -> None:
    async with await Store.open(f"sqlite:///{tmp_path}/slow.db"):  # the schema made with no tight limit
        pass
    async with await Store.open(f"sqlite:///{tmp_path}/slow.db", statement_timeout=0.5) as store:
        endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"

        def endless_query(statements: Statements) -> None:
            statements.fetchall(endless)

        with anyio.fail_after(10), pytest.raises(StoreError, match="interrupted"):
            await store.db.grouped(endless_query)
        seen: list[tuple[object, ...]] = []
        await store.db.grouped(lambda statements: seen.extend(statements.fetchall("SELECT 1")))
        assert seen == [(1,)]  # the connection is still good


async def test_the_store_keeps_each_image_once_by_hash(store: Store) -> None:
    first, second = ImageBlock.from_bytes(sample_png(seed=1)), ImageBlock.from_bytes(sample_png(seed=2))
    await store.images.put([first, first], run_id="run-1")
    await store.images.put([first, second], run_id="run-2")
    got = await store.images.get([first.sha256, second.sha256, "0" * 64])
    assert got == {first.sha256: first, second.sha256: second}
    rows = await store.db.fetchall("SELECT sha256 FROM images")
    assert sorted(row[0] for row in rows) == sorted([first.sha256, second.sha256])
    refs = await store.db.fetchall("SELECT sha256, run_id FROM image_refs")  # what retention goes by
    assert sorted(refs) == sorted(
        [(first.sha256, "run-1"), (first.sha256, "run-2"), (second.sha256, "run-2")]
    )


async def test_a_token_authenticates_by_its_secret_until_revoked(store: Store) -> None:
    ci, ci_secret = await store.tokens.create("ci", ["runs", "read", "runs"])
    admin, admin_secret = await store.tokens.create("ops", ["admin"])
    assert re.fullmatch(r"tok-[0-9a-f]{12}", ci.id)
    assert (ci.name, ci.scopes, ci.revoked_at) == ("ci", ("read", "runs"), None)
    assert ci_secret.startswith("npt_")
    assert len(ci_secret) >= 4 + 43  # 32 random bytes, URL-safe base64
    assert ci_secret != admin_secret
    assert await store.tokens.authenticate(ci_secret) == ci
    assert await store.tokens.authenticate(admin_secret) == admin
    for wrong in ("", ci_secret + "x", ci_secret[:-1], "npt_\udcff"):
        assert await store.tokens.authenticate(wrong) is None
    assert await store.tokens.tokens() == [ci, admin]  # oldest first
    assert await store.tokens.any_active()

    assert await store.tokens.revoke(ci.id)
    assert not await store.tokens.revoke(ci.id)  # revoked already: nothing changes
    assert not await store.tokens.revoke("tok-000000000000")
    assert await store.tokens.authenticate(ci_secret) is None
    assert await store.tokens.authenticate(admin_secret) == admin
    listed = await store.tokens.tokens()
    assert [record.id for record in listed] == [ci.id, admin.id]  # revoked ones too
    assert listed[0].revoked_at is not None
    assert listed[1].revoked_at is None
    assert await store.tokens.any_active()
    assert await store.tokens.revoke(admin.id)
    assert not await store.tokens.any_active()


async def test_only_a_tokens_hash_is_stored(store: Store) -> None:
    record, secret = await store.tokens.create("ci", ["read"])
    digest = hashlib.sha256(secret.encode()).hexdigest()
    random_part = secret.removeprefix("npt_")
    assert secret not in repr(record)
    rows = await store.db.fetchall("SELECT * FROM api_tokens")
    cells = [str(cell) for row in rows for cell in row]
    assert digest in cells  # stored: the check below looks in the right place
    assert not [cell for cell in cells if random_part in cell]
    if store.url.startswith("sqlite:///"):
        path = anyio.Path(store.url.removeprefix("sqlite://"))
        stored = b"".join([await each.read_bytes() async for each in path.parent.glob(path.name + "*")])
        assert digest.encode() in stored
        assert random_part.encode() not in stored


async def test_a_token_needs_a_name_and_known_scopes(store: Store) -> None:
    refused: list[tuple[str, Any, str]] = [
        ("", ["read"], "needs a name"),
        ("  ", ["read"], "needs a name"),
        ("ci", [], "at least one scope"),
        ("ci", ["read", "write", "all"], "unknown scopes all, write"),
        ("ci", "read", "not the string 'read'"),
    ]
    for name, scopes, why in refused:
        with pytest.raises(ConfigError, match=why):
            await store.tokens.create(name, scopes)
    assert await store.tokens.tokens() == []
    assert not await store.tokens.any_active()


async def test_of_many_racing_reserves_of_a_key_exactly_one_makes_it(make_store: MakeStore) -> None:
    async with await make_store(False) as first, await make_store(False) as second:
        outcomes: list[tuple[IdempotencyRecord, bool]] = []

        async def reserve(store: Store, n: int) -> None:
            outcomes.append(
                await store.idempotency.reserve(
                    "tok-1", "key-1", kind="run", fingerprint="f", resource_id=f"run-{n}", holder=f"lease:{n}"
                )
            )

        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(reserve, (first, second)[n % 2], n)
        made = [record for record, made in outcomes if made]
        assert len(made) == 1
        assert made[0].state == "pending"
        assert {record for record, _ in outcomes} == {made[0]}  # the same resource and holder for all
        other, other_made = await second.idempotency.reserve(
            "tok-2", "key-1", kind="node", fingerprint="g", resource_id="np-1", holder="lease:x"
        )
        assert other_made  # keys are per caller
        assert (other.kind, other.resource_id) == ("node", "np-1")


async def test_an_idempotency_key_is_taken_over_completed_and_forgotten(store: Store) -> None:
    reserved, made = await store.idempotency.reserve(
        "tok-1", "k", kind="run", fingerprint="f", resource_id="run-1", holder="lease:a"
    )
    assert made
    assert (reserved.scope, reserved.key, reserved.holder, reserved.response) == (
        "tok-1",
        "k",
        "lease:a",
        None,
    )
    assert not await store.idempotency.take_over("tok-1", "k", holder_was="lease:b", holder="lease:c")
    assert await store.idempotency.take_over("tok-1", "k", holder_was="lease:a", holder="lease:b")
    assert not await store.idempotency.take_over("tok-1", "k", holder_was="lease:a", holder="lease:c")

    await store.idempotency.complete("tok-1", "k", '{"id": "run-1"}')
    await store.idempotency.complete("tok-1", "k", '{"id": "run-2"}')  # the first answer stands
    await store.idempotency.forget("tok-1", "k")  # done: kept
    assert not await store.idempotency.take_over("tok-1", "k", holder_was="lease:b", holder="lease:c")
    found, made = await store.idempotency.reserve(
        "tok-1", "k", kind="run", fingerprint="f2", resource_id="run-9", holder="lease:z"
    )
    assert not made
    assert found == dataclasses.replace(reserved, holder="lease:b", state="done", response='{"id": "run-1"}')

    await store.idempotency.reserve(
        "tok-1", "failed", kind="node", fingerprint="f", resource_id="np-1", holder="h"
    )
    await store.idempotency.forget("tok-1", "failed")
    again, made = await store.idempotency.reserve(
        "tok-1", "failed", kind="node", fingerprint="f", resource_id="np-2", holder="h"
    )
    assert made  # afresh, with the retry's resource
    assert again.resource_id == "np-2"


async def test_idempotency_keys_are_purged_by_age(store: Store) -> None:
    for key in ("old", "new"):
        await store.idempotency.reserve(
            "tok-1", key, kind="run", fingerprint="f", resource_id=key, holder="h"
        )
    two_days_ago = (datetime.now(UTC) - timedelta(days=2)).isoformat(timespec="microseconds")
    await store.db.execute("UPDATE idempotency_keys SET created_at = ? WHERE key = 'old'", (two_days_ago,))
    assert await store.idempotency.purge(86400) == 1
    assert await store.idempotency.purge(86400) == 0
    rows = await store.db.fetchall("SELECT key FROM idempotency_keys")
    assert rows == [("new",)]
    assert await store.idempotency.purge(0) == 1
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ConfigError, match="zero or more"):
            await store.idempotency.purge(bad)


async def test_a_bad_idempotency_key_or_kind_is_refused(store: Store) -> None:
    for key in ("", "k" * 256, "caf\u00e9", "a\nb", "tab\there", "\x7f"):
        with pytest.raises(ConfigError, match="printable ASCII"):
            await store.idempotency.reserve(
                "s", key, kind="run", fingerprint="f", resource_id="r", holder="h"
            )
    with pytest.raises(ConfigError, match="unknown idempotency key kind 'job'"):
        await store.idempotency.reserve("s", "k", kind="job", fingerprint="f", resource_id="r", holder="h")
    for key in ("k" * 255, " ~!Az09 "):
        _, made = await store.idempotency.reserve(
            "s", key, kind="run", fingerprint="f", resource_id="r", holder="h"
        )
        assert made


async def test_a_token_known_by_its_hash_is_added_once_and_stays_as_it_is(store: Store) -> None:
    secret = "npt_" + "x" * 43
    digest = hashlib.sha256(secret.encode()).hexdigest()
    added = await store.tokens.add("ops", ["admin", "read"], digest)
    assert added is not None
    assert (added.name, added.scopes) == ("ops", ("admin", "read"))
    assert await store.tokens.authenticate(secret) == added
    assert await store.tokens.add("other", ["read"], digest) is None  # there already: kept
    assert await store.tokens.tokens() == [added]
    assert await store.tokens.revoke(added.id)
    assert await store.tokens.add("ops", ["admin"], digest) is None  # revoked stays revoked
    assert await store.tokens.authenticate(secret) is None
    for bad in ("", digest.upper(), digest[:-1], digest + "0", "g" * 64):
        with pytest.raises(ConfigError, match="64 lowercase hex digits"):
            await store.tokens.add("ops", ["admin"], bad)
    with pytest.raises(ConfigError, match="unknown scopes write"):
        await store.tokens.add("ops", ["write"], "0" * 64)
    assert len(await store.tokens.tokens()) == 1


CLOSE_UNDER_STATEMENTS = """
import sys, anyio
from nodeprov.errors import StoreError
from nodeprov.store import Store

SLOW = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)"
        " SELECT count(*) FROM n")

async def main(path):
    for attempt in range(20):
        store = await Store.open(f"sqlite:///{path}/store-{attempt}.db")
        async def statement():
            try:
                await store.db.fetchall(SLOW)
            except StoreError:
                pass  # the store closed first: refused, as a closed store refuses
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(statement)
            await anyio.sleep(0.001 * (attempt % 5))  # statements queued, one running
            await store.db.aclose()

anyio.run(main, sys.argv[1])
"""


async def test_a_store_closed_under_running_statements_waits_for_the_one_running(tmp_path: Path) -> None:
    # sqlite3 crashes the interpreter when a connection is closed while a statement runs on
    # it in another thread: the store's close waits for that statement. In a child process,
    # so that a crash fails this test instead of ending the run.
    child = await anyio.run_process(
        [sys.executable, "-c", CLOSE_UNDER_STATEMENTS, str(tmp_path)], check=False
    )
    assert child.returncode == 0, (child.returncode, child.stderr.decode()[-2000:])


async def test_a_leader_cancelled_between_attempts_leaves_its_followers_to_commit(tmp_path: Path) -> None:
    """Group commit: the task that leads a batch commits its followers' work too. Cancelled
    while it waits to try a lost batch again, it leaves that work unwritten, and the followers,
    which were not cancelled, commit it themselves (they failed with the leader before)."""
    from nodeprov.store._db import UnavailableError

    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store:
        commit, calls, leader = store.db._commit, 0, -1
        first_batch_held = anyio.Event()

        async def lossy(batch: list[Any]) -> list[BaseException | None]:
            nonlocal calls, leader
            calls += 1
            if calls == 1:
                await first_batch_held.wait()  # meanwhile the two others queue behind it
            elif calls == 2:
                leader = anyio.get_current_task().id
                return [UnavailableError("the connection was lost before the commit")] * len(batch)
            return await commit(batch)

        store.db._commit = lossy  # type: ignore[method-assign]
        scopes: dict[int, anyio.CancelScope] = {}
        outcomes: dict[str, str] = {}

        async def write(name: str) -> None:
            with anyio.CancelScope() as scope:
                scopes[anyio.get_current_task().id] = scope
                try:
                    await store.transcripts.replace({"project_key": "p", "session_id": name}, [{"n": name}])
                    outcomes[name] = "written"
                except StoreError as error:
                    outcomes[name] = str(error)
                    return
            if scope.cancelled_caught:
                outcomes[name] = "cancelled"

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(write, "first")
                await anyio.wait_all_tasks_blocked()
                group.start_soon(write, "a")
                group.start_soon(write, "b")
                await anyio.wait_all_tasks_blocked()
                first_batch_held.set()
                while leader == -1:  # the second batch, led by one of the two, is lost
                    await anyio.lowlevel.checkpoint()
                await anyio.wait_all_tasks_blocked()  # its leader waits to try again
                scopes[leader].cancel()
        cancelled = next(name for name, outcome in outcomes.items() if outcome == "cancelled")
        other = ({"a", "b"} - {cancelled}).pop()
        assert outcomes == {"first": "written", cancelled: "cancelled", other: "written"}
        assert await store.transcripts.load({"project_key": "p", "session_id": other}) == [{"n": other}]
        assert await store.transcripts.load({"project_key": "p", "session_id": cancelled}) is None
