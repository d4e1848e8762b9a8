"""The session store's tests (tests/test_store.py), run again on a real PostgreSQL server."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import pytest

from nodeprov.store import Store
from nodeprov.testing.pytest_plugin import require_engine
from tests import test_store as shared
from tests.test_store import MakeStore, store  # noqa: F401 - the fixture, fed by make_store below

pytestmark = pytest.mark.anyio

# The same tests, collected here again, where make_store is PostgreSQL's.
globals().update({name: getattr(shared, name) for name in dir(shared) if name.startswith("test_")})

URL = os.environ.get(
    "NODEPROV_TEST_POSTGRES_URL", "postgresql://nodeprov:nodeprov@127.0.0.1:5432/nodeprov_test"
)
TABLES = [
    "snapshots",
    "nodes",
    "runs",
    "sessions",
    "workspaces",
    "transcript_entries",
    "transcript_summaries",
]


@pytest.fixture
async def make_store() -> AsyncIterator[MakeStore]:
    """Each test gets a schema of its own; ``fresh=True`` empties it first."""
    try:
        admin = await Store.open(URL)
    except Exception as error:  # any failure to reach the server means: no engine
        require_engine("a PostgreSQL server", False, f"{error}; `make engines` starts one")
    schema = f"t_{secrets.token_hex(4)}"
    await admin.db.execute(f"CREATE SCHEMA {schema}")
    url = f"{URL}?options=-csearch_path%3D{schema}"

    async def make(fresh: bool) -> Store:
        opened = await Store.open(url)
        if fresh:
            await opened.db.execute(f"TRUNCATE {', '.join(TABLES)}")
        return opened

    yield make
    await admin.db.execute(f"DROP SCHEMA {schema} CASCADE")
    await admin.aclose()
