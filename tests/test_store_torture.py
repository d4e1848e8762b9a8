"""The torture test (tests/store_torture.py), short and seeded, on SQLite: nodeprov processes
of every kind on one store file, killed at random, and afterwards the file whole, every
acknowledged write there, nothing twice. ``NODEPROV_TEST_SEED`` picks another seed;
``python -m tests.store_torture --seeds 1-10 --seconds 120`` soaks. The same on PostgreSQL:
integration/test_store_torture_postgres.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.store_torture import torture

pytestmark = pytest.mark.anyio

SEED = int(os.environ.get("NODEPROV_TEST_SEED", "1"))
SECONDS = 20.0


def check(figures: dict[str, Any]) -> None:
    print(figures)  # the figures of this seed, for whoever reads the log
    assert figures["integrity"] in ("ok", "n/a"), figures
    assert (figures["lost"], figures["duplicated"]) == (0, 0), figures["details"]
    assert figures["kills"] > 0, figures  # it did what it says
    assert figures["acknowledged"].get("runs finished", 0) > 0, figures
    assert figures["acknowledged"].get("runs finished (service)", 0) > 0, figures


async def test_nodeprov_processes_killed_at_random_lose_and_repeat_nothing(tmp_path: Path) -> None:
    check(await torture(f"sqlite:///{tmp_path}/store.db", SEED, SECONDS, tmp_path))
