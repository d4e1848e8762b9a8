"""What the fast tests share: a store of the test's own, the fake agent's options."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.exception_check import exception_check_fixture


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


MakeStore = Callable[[bool], Awaitable[Store]]


@pytest.fixture
def make_store(tmp_path: Path) -> MakeStore:
    """Open a store: an empty one (``fresh=True``), or one more on the same database (a
    module on PostgreSQL overrides it: integration/test_store_postgres.py)."""
    shared = f"sqlite:///{tmp_path}/shared.db"

    async def make(fresh: bool) -> Store:
        return await Store.open(f"sqlite:///{tmp_path}/{secrets.token_hex(4)}.db" if fresh else shared)

    return make


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        yield store


@pytest.fixture
def agent(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Options for the fake agent following ``steps``."""
    command = fake_agent_command(tmp_path)

    def options(*steps: dict[str, Any]) -> dict[str, Any]:
        return {"cli_path": command, "env": {"NODEPROV_FAKE_AGENT": json.dumps(list(steps))}}

    return options


check_public_api_exceptions = exception_check_fixture()
