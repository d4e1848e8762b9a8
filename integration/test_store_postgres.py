"""The session store's tests (tests/test_store.py), run again on a real PostgreSQL server."""

from __future__ import annotations

import os
import signal
from contextlib import suppress

import anyio
import pytest

from nodeprov.errors import StoreError
from nodeprov.store import EventRecord, Store, now
from nodeprov.testing.pytest_plugin import require_engine
from tests import test_store as shared
from tests.test_store import MakeStore, store  # noqa: F401 - the fixture, fed by make_store below

pytestmark = pytest.mark.anyio

# The same tests, collected here again, where make_store is PostgreSQL's.
globals().update({name: getattr(shared, name) for name in dir(shared) if name.startswith("test_")})

TABLES = [
    "run_events",
    "leases",
    "snapshots",
    "nodes",
    "runs",
    "sessions",
    "workspaces",
    "transcript_entries",
    "transcript_summaries",
]


@pytest.fixture
def make_store(postgres_url: str) -> MakeStore:
    """Each test has a schema of its own; ``fresh=True`` empties it first."""

    async def make(fresh: bool) -> Store:
        opened = await Store.open(postgres_url)
        if fresh:
            await opened.db.execute(f"TRUNCATE {', '.join(TABLES)}")
        return opened

    return make


async def test_a_lost_connection_is_reopened(make_store: MakeStore) -> None:
    from nodeprov.errors import StoreError

    async with await make_store(True) as victim, await make_store(False) as admin:
        pid = (await victim.db.fetchall("SELECT pg_backend_pid()"))[0][0]
        await admin.db.execute("SELECT pg_terminate_backend(?)", (pid,))
        with suppress(StoreError):  # the transaction under way when it died fails, never replayed
            await victim.db.fetchall("SELECT 1")
        assert await victim.db.fetchall("SELECT 1") == [(1,)]  # a fresh connection
        assert (await victim.db.fetchall("SELECT pg_backend_pid()"))[0][0] != pid


async def test_statements_have_a_timeout(postgres_url: str) -> None:
    import anyio

    from nodeprov.errors import StoreError

    async with await Store.open(postgres_url, statement_timeout=0.5) as slow:
        with anyio.fail_after(10), pytest.raises(StoreError):
            await slow.db.fetchall("SELECT pg_sleep(30)")
        assert await slow.db.fetchall("SELECT 1") == [(1,)]


async def _writer_pid(opened: Store) -> int:
    """The backend process of the connection the group commits use."""
    pids: list[tuple[object, ...]] = []
    await opened.db.grouped(lambda statements: pids.extend(statements.fetchall("SELECT pg_backend_pid()")))
    pid = pids[0][0]
    assert isinstance(pid, int)
    return pid


async def _seed_run(opened: Store) -> str:
    session = await opened.active_session("ws", "claude")
    await opened.create_run(shared._run(session.id))
    return "run-1"


async def test_group_commits_survive_their_connection_being_ended(make_store: MakeStore) -> None:
    """The server ends the batches' connection (a restart, an administrator): the next batch
    is written on a new one, without an error for its callers."""
    async with await make_store(True) as opened, await make_store(False) as admin:
        run_id = await _seed_run(opened)
        pid = await _writer_pid(opened)
        await admin.db.execute("SELECT pg_terminate_backend(?)", (pid,))
        await opened.append_events([EventRecord(run_id, 1, "kind", now(), "{}")])
        assert [e.seq for e in await opened.events(run_id)] == [1]
        assert await _writer_pid(opened) != pid


async def test_a_batch_whose_server_hangs_is_abandoned(postgres_url: str) -> None:
    """The batches' server process stops answering (SIGSTOP): the batch fails once its time
    is up, and the next one commits on a new connection meanwhile."""
    async with await Store.open(postgres_url, statement_timeout=1) as opened:
        run_id = await _seed_run(opened)
        pid = await _writer_pid(opened)
        try:
            os.kill(pid, signal.SIGSTOP)
        except (PermissionError, ProcessLookupError):
            require_engine("a PostgreSQL server on this host, run by a user this test can signal", False, "")
        try:
            with anyio.fail_after(10), pytest.raises(StoreError, match="ran out of time"):
                await opened.append_events([EventRecord(run_id, 1, "kind", now(), "{}")])
            await opened.append_events([EventRecord(run_id, 2, "kind", now(), "{}")])
            assert [e.seq for e in await opened.events(run_id)] == [2]
        finally:
            os.kill(pid, signal.SIGCONT)
            # The abandoned transaction would go on once woken, and its late statements could
            # deadlock with the fixture dropping the schema: end that backend.
            await opened.db.execute(f"SELECT pg_terminate_backend({int(pid)})")
