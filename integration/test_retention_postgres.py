"""Retention and lease compaction (tests/test_retention.py), run again on a real PostgreSQL
server: every test there that takes a store, with stores in a schema of the test's own."""

from __future__ import annotations

import inspect

import pytest

from tests import test_retention as shared
from tests.conftest import MakeStore
from tests.test_retention import store  # noqa: F401 - the fixture, fed by make_store below

from .test_store_postgres import _stores_at

pytestmark = pytest.mark.anyio

globals().update(
    {
        name: test
        for name, test in vars(shared).items()
        if name.startswith("test_") and {"store", "make_store"} & set(inspect.signature(test).parameters)
    }
)


@pytest.fixture
def make_store(postgres_url: str) -> MakeStore:
    return _stores_at(postgres_url)
