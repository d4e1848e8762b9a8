"""The session store's tests (tests/test_store.py), run again on a real PostgreSQL server."""

from __future__ import annotations

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
