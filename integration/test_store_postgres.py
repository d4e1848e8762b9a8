"""The session store's tests (tests/test_store.py), run again on a real PostgreSQL server."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import pytest

from nodeprov.errors import StoreError
from nodeprov.store import EventRecord, Store, now
from nodeprov.testing.pytest_plugin import require_engine
from tests import test_store as shared
from tests.test_store import MakeStore, store  # noqa: F401 - the fixture, fed by make_store below

pytestmark = pytest.mark.anyio

# The same tests, collected here again, where make_store is PostgreSQL's.
SHARED_TESTS = {name: getattr(shared, name) for name in dir(shared) if name.startswith("test_")}
globals().update(SHARED_TESTS)

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
    "images",
    "api_tokens",
    "idempotency_keys",
    "pool_nodes",
    "pools",
    "image_refs",
    "store_meta",
]


def _stores_at(url: str) -> MakeStore:
    """Stores at ``url``, a schema of the test's own; ``fresh=True`` empties it first."""

    async def make(fresh: bool) -> Store:
        opened = await Store.open(url)
        if fresh:
            await opened.db.execute(f"TRUNCATE {', '.join(TABLES)}")
        return opened

    return make


@pytest.fixture
def make_store(postgres_url: str) -> MakeStore:
    """Each test has a schema of its own on the host's server."""
    return _stores_at(postgres_url)


class TestOnATestContainer:
    """The same shared tests again, on nodeprov's PostgreSQL test container
    (``nodeprov_postgres_url``), as a user's CI would run them."""

    @pytest.fixture
    def make_store(self, nodeprov_postgres_url: str) -> MakeStore:
        return _stores_at(nodeprov_postgres_url)

    locals().update({name: staticmethod(test) for name, test in SHARED_TESTS.items()})


async def test_a_lost_connection_is_reopened(make_store: MakeStore) -> None:

    async with await make_store(True) as victim, await make_store(False) as admin:
        pid = (await victim.db.fetchall("SELECT pg_backend_pid()"))[0][0]
        await admin.db.execute("SELECT pg_terminate_backend(?)", (pid,))
        with suppress(StoreError):  # the transaction under way when it died fails, never replayed
            await victim.db.fetchall("SELECT 1")
        assert await victim.db.fetchall("SELECT 1") == [(1,)]  # a fresh connection
        assert (await victim.db.fetchall("SELECT pg_backend_pid()"))[0][0] != pid


async def test_statements_have_a_timeout(postgres_url: str) -> None:
    import anyio

    async with await Store.open(postgres_url):  # the schema made first: no tight limit for that
        pass
    async with await Store.open(postgres_url, statement_timeout=2) as slow:
        with anyio.fail_after(20), pytest.raises(StoreError):
            await slow.db.fetchall("SELECT pg_sleep(30)")
        assert await slow.db.fetchall("SELECT 1") == [(1,)]


async def _writer_pid(opened: Store) -> int:
    """The backend process of the connection the group commits use."""
    pids: list[tuple[object, ...]] = []
    await opened.db.grouped(lambda statements: pids.extend(statements.fetchall("SELECT pg_backend_pid()")))
    pid = pids[0][0]
    assert isinstance(pid, int)
    return pid


async def _seed_run(opened: Store) -> str:
    session = await opened.active_session("ws", "claude")
    await opened.create_run(shared._run(session.id))
    return "run-1"


async def test_group_commits_survive_their_connection_being_ended(make_store: MakeStore) -> None:
    """The server ends the batches' connection (a restart, an administrator): the next batch
    is written on a new one, without an error for its callers."""
    async with await make_store(True) as opened, await make_store(False) as admin:
        run_id = await _seed_run(opened)
        pid = await _writer_pid(opened)
        await admin.db.execute("SELECT pg_terminate_backend(?)", (pid,))
        await opened.append_events([EventRecord(run_id, 1, "kind", now(), "{}")])
        assert [e.seq for e in await opened.events(run_id)] == [1]
        assert await _writer_pid(opened) != pid


class _LeftBusy:
    """The batches' connection as a server that ended it mid-pipeline leaves it: neither
    closed nor broken in psycopg's eyes, and every statement fails for good."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self.closed = self.broken = False

    def execute(self, *_: object) -> None:
        import psycopg

        raise psycopg.OperationalError("sending query failed: cannot exit pipeline mode while busy")

    def close(self) -> None:
        self._connection.close()
        self.closed = True


async def test_a_batch_connection_left_busy_is_replaced(postgres_url: str) -> None:
    """Found by the suite under load: batches retried on the same connection for a whole retry
    window, each failing alike, instead of on a new one."""
    async with await Store.open(postgres_url, retry_for=5) as opened:
        run_id = await _seed_run(opened)
        await _writer_pid(opened)  # the batches' connection, opened
        database: Any = opened.db
        database._writer = busy = _LeftBusy(database._writer)
        with anyio.fail_after(20):
            await opened.append_events([EventRecord(run_id, 1, "kind", now(), "{}")])
        assert busy.closed
        assert [e.seq for e in await opened.events(run_id)] == [1]


async def test_a_batch_whose_server_hangs_is_abandoned(postgres_url: str) -> None:
    """The batches' server process stops answering (SIGSTOP): once its time is up, the batch
    is written again on a new connection (its works are idempotent: written once)."""
    async with await Store.open(postgres_url):  # the schema made first: no tight limit for that
        pass
    async with await Store.open(postgres_url, statement_timeout=3) as opened:
        run_id = await _seed_run(opened)
        pid = await _writer_pid(opened)
        try:
            os.kill(pid, signal.SIGSTOP)
        except (PermissionError, ProcessLookupError):
            require_engine("a PostgreSQL server on this host, run by a user this test can signal", False, "")
        try:
            with anyio.fail_after(30):
                await opened.append_events([EventRecord(run_id, 1, "kind", now(), "{}")])
            await opened.append_events([EventRecord(run_id, 2, "kind", now(), "{}")])
            assert [e.seq for e in await opened.events(run_id)] == [1, 2]
            assert await _writer_pid(opened) != pid
        finally:
            os.kill(pid, signal.SIGCONT)
            # The abandoned transaction would go on once woken, and its late statements could
            # deadlock with the fixture dropping the schema: end that backend.
            await opened.db.execute(f"SELECT pg_terminate_backend({int(pid)})")


@asynccontextmanager
async def _cut_after_commit(postgres_url: str) -> AsyncIterator[tuple[str, Callable[[], None]]]:
    """A TCP relay to the server that, once armed, lets the next COMMIT through and then
    cuts that connection before its answer: the server committed, the client never hears
    so. Yields the URL through the relay, and the function that arms it."""
    target = urlsplit(postgres_url)
    armed = False

    def arm() -> None:
        nonlocal armed
        armed = True

    async def relay(client: anyio.abc.SocketStream) -> None:
        committing = anyio.Event()
        async with (
            client,
            await anyio.connect_tcp(target.hostname or "127.0.0.1", target.port or 5432) as server,
        ):

            async def up() -> None:
                nonlocal armed
                async for data in client:
                    await server.send(data)
                    if armed and b"COMMIT" in data:
                        armed = False
                        committing.set()

            async def down(tg: anyio.abc.TaskGroup) -> None:
                async for data in server:
                    if committing.is_set():
                        tg.cancel_scope.cancel()  # the answer is dropped with the connection
                        return
                    await client.send(data)

            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(up)
                    tg.start_soon(down, tg)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay)
        try:
            yield target._replace(netloc=f"{target.netloc.rsplit('@', 1)[0]}@127.0.0.1:{port}").geturl(), arm
        finally:
            tg.cancel_scope.cancel()


async def test_a_batch_whose_connection_is_lost_as_it_commits_is_written_once(
    make_store: MakeStore, postgres_url: str
) -> None:
    """The batch committed, but its connection was cut before the answer: the store writes
    it again on a new connection (a batch's works are idempotent by their keys), the caller
    sees no error, and each entry and event is stored once."""
    from nodeprov.store import EntryBatch, EntryKey, keyed

    async with (
        await make_store(True),
        _cut_after_commit(postgres_url) as (url, arm),
        await Store.open(url) as opened,
    ):
        run_id = await _seed_run(opened)
        key: EntryKey = {"project_key": "p", "session_id": "s"}
        lines = keyed([{"type": "response_item", "n": n} for n in range(3)])
        event = EventRecord(run_id, 1, "kind", now(), "{}")
        pid = await _writer_pid(opened)  # the batches' connection, opened before the relay is armed
        arm()
        await opened.append_events([event], [EntryBatch(key, lines)])
        assert await _writer_pid(opened) != pid  # it was cut
        assert await opened.transcripts.load(key) == [entry for _, entry in lines]
        assert [e.seq for e in await opened.events(run_id)] == [1]


async def test_a_compare_and_set_lost_as_it_commits_is_asked_about_not_run_again(
    make_store: MakeStore, postgres_url: str
) -> None:
    """A run's state moved (a compare-and-set) and the connection was cut before the answer:
    run again, it would find the state moved and report a lost race. The store asks the
    server whether the transaction committed, and reports the move it made."""
    async with (
        await make_store(True),
        _cut_after_commit(postgres_url) as (url, arm),
        await Store.open(url) as opened,
    ):
        run_id = await _seed_run(opened)
        before = await opened.run(run_id)
        assert before is not None
        arm()
        moved = await opened.update_run(run_id, expect_states=(before.state,), state="failed", error="x")
        assert moved is True
        after = await opened.run(run_id)
        assert after is not None
        assert (after.state, after.error) == ("failed", "x")
        arm()  # and once more: a move that lost its race is reported lost
        assert await opened.update_run(run_id, expect_states=(before.state,), state="paused") is False
