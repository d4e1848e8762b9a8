"""Every hot path's query uses an index on PostgreSQL too (tests/test_store_plans.py): each
statement the store runs for them is explained with sequential scans priced out of reach
(``enable_seqscan = off``): a "Seq Scan" left in a plan is a table no index can serve."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from nodeprov.store import Store
from tests.test_store_plans import HOT_PATHS, captured, seed

pytestmark = pytest.mark.anyio


def explain(url: str, sql: str, params: tuple[Any, ...]) -> list[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")
        rows = connection.execute(f"EXPLAIN {sql.replace('?', '%s')}", params).fetchall()
    return [str(row[0]) for row in rows]


async def test_every_hot_path_reads_through_an_index_on_postgres(postgres_url: str) -> None:
    scans: dict[str, list[tuple[str, list[str]]]] = {}
    async with await Store.open(postgres_url) as store:
        await seed(store)
        for name, call in HOT_PATHS.items():
            with captured() as seen:
                await call(store)
            assert seen, name
            for sql, params in seen:
                plan = explain(postgres_url, sql, params)
                if found := [step for step in plan if "Seq Scan" in step]:
                    scans.setdefault(name, []).append((sql, found))
    assert scans == {}
