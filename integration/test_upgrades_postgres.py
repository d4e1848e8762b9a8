"""Upgrades keep the data, on PostgreSQL: a dump of a store an earlier version wrote
(tests/stores/schema-N.sql) is restored into a schema of the test's own with psql, opened
with today's code, and found whole (tests/test_upgrades.py says what is checked)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeprov.testing.pytest_plugin import require_engine
from tests.test_upgrades import STORES, check_upgraded, manifest_of

from .conftest import POSTGRES

pytestmark = pytest.mark.anyio

DUMPS = sorted(STORES.glob("schema-*.sql"))


@pytest.fixture
def restored(request: pytest.FixtureRequest) -> Iterator[str]:
    """The dump ``request.param``, restored into a new schema; the store URL on it."""
    psql = shutil.which("psql")
    require_engine("psql (PostgreSQL's client)", psql is not None, "`make engines` installs it")
    assert psql is not None
    schema = f"up_{secrets.token_hex(4)}"
    dump = Path(request.param).read_text().replace("nodeprov_fixture", schema)

    def run(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [psql, POSTGRES, "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    done = run(dump)
    if done.returncode != 0 and "could not connect" in done.stderr:
        require_engine("a PostgreSQL server", False, done.stderr.strip())
    assert done.returncode == 0, done.stderr
    yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
    run(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("restored", DUMPS, ids=lambda path: path.stem, indirect=True)
async def test_a_postgres_store_of_an_earlier_version_keeps_its_data(
    restored: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    dump = Path(request.node.callspec.params["restored"])
    await check_upgraded(restored, manifest_of(dump), tmp_path)
