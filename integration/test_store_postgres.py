"""The session store's tests (tests/test_store.py), run again on a real PostgreSQL server."""

from __future__ import annotations

from contextlib import suppress

import pytest

from nodeprov.store import Store
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
