"""The warm pool races of tests/test_pool_races.py on PostgreSQL: two control-plane processes
claiming 500 times each at random never share a node and the size holds; a SIGKILLed holder
is taken over and leaves nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeprov.store import Store
from tests.test_pool_races import _claim_race, _sigkilled_holder

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    async with await Store.open(postgres_url) as store:
        yield store


async def test_two_processes_claiming_at_random_never_share_a_node(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    await _claim_race(store, postgres_url, tmp_path)


async def test_a_sigkilled_holder_is_taken_over_and_leaves_nothing(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    await _sigkilled_holder(store, postgres_url, tmp_path)
