"""The torture test (tests/store_torture.py), short and seeded, on PostgreSQL: nodeprov
processes of every kind on one store, killed at random; every acknowledged write is there
afterwards, and nothing twice. ``NODEPROV_TEST_SEED`` picks another seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store_torture import torture
from tests.test_store_torture import SECONDS, SEED, check

pytestmark = pytest.mark.anyio


async def test_nodeprov_processes_killed_at_random_lose_and_repeat_nothing(
    postgres_url: str, tmp_path: Path
) -> None:
    check(await torture(postgres_url, SEED, SECONDS, tmp_path))
