"""Two SQL backends behind one small async interface: SQLite (embedded) and PostgreSQL.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``.
DDL and clock differences go through :attr:`Database.dialect` and :attr:`Database.now_ms`.

Every transaction is shielded from cancellation (a cancelled caller must not leave one
open) and bounded instead: after ``statement_timeout`` seconds SQLite's running statement
is interrupted and PostgreSQL's connection is dropped, and the call raises
:class:`StoreError`. A PostgreSQL connection found broken is reopened before the next
transaction begins; a transaction already under way is never replayed (it may have
committed).
"""

from __future__ import annotations

import os
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread

from ..errors import ConfigError, StoreError

Row = tuple[Any, ...]
Params = Sequence[Any]

DEFAULT_STATEMENT_TIMEOUT = 30.0


class Transaction(ABC):
    """Statements of one transaction (see :meth:`Database.transaction`)."""

    @abstractmethod
    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run ``sql``; return the number of rows it changed."""

    @abstractmethod
    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        """Run ``sql``; return its rows."""


class Database(ABC):
    """A connection to the store's database; every statement runs in a transaction."""

    dialect: Literal["sqlite", "postgres"]
    now_ms: str
    """An SQL expression for the database's clock in epoch milliseconds: leases are judged
    by one clock, whatever the clocks of the control planes sharing the store say."""

    def __init__(self, statement_timeout: float) -> None:
        self.statement_timeout = statement_timeout
        self._group = _GroupCommit(self)

    @abstractmethod
    def transaction(self) -> Any:
        """``async with db.transaction() as tx:`` — statements through ``tx`` commit together,
        or roll back together if the block raises. Writers are serialized (SQLite takes the
        write lock up front; PostgreSQL uses row locks and advisory locks).

        Raises:
            StoreError: the database failed, or the transaction ran out of time.
        """

    async def execute(self, sql: str, params: Params = ()) -> int:
        async with self.transaction() as tx:
            return int(await tx.execute(sql, params))

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        async with self.transaction() as tx:
            rows: list[Row] = await tx.fetchall(sql, params)
            return rows

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def grouped(self, work: Callable[[Transaction], Awaitable[None]]) -> None:
        """Run ``work`` in a transaction shared with whatever other tasks submit meanwhile
        (group commit: one transaction per batch, not per caller). Returns once committed.

        Raises:
            StoreError: ``work``'s own transaction failed (a failing batch is retried one
                item at a time, so one caller's failure is not another's).
        """
        await self._group.submit(work)

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connection; idempotent."""


@dataclass(eq=False)
class _Work:
    run: Callable[[Transaction], Awaitable[None]]
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None


class _GroupCommit:
    """Leader/follower group commit: whoever takes the lock commits everything pending."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: list[_Work] = []
        self._lock = anyio.Lock()

    async def submit(self, run: Callable[[Transaction], Awaitable[None]]) -> None:
        work = _Work(run)
        self._pending.append(work)
        # Shielded: once another caller's batch may hold this work, its fate must be known
        # (a cancelled caller that retried would write it twice). Transactions are bounded.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if not work.done.is_set():
                    batch, self._pending = self._pending, []
                    await self._commit(batch)
        if work.error is not None:
            raise work.error

    async def _commit(self, batch: list[_Work]) -> None:
        try:
            async with self._db.transaction() as tx:
                for work in batch:
                    await work.run(tx)
        except Exception:
            if len(batch) == 1:
                raise
            for work in batch:
                try:
                    async with self._db.transaction() as tx:
                        await work.run(tx)
                except Exception as error:  # noqa: BLE001 - handed to its own submitter
                    work.error = error
        finally:
            for work in batch:
                work.done.set()


class _SQLiteTx(Transaction):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).fetchall())


class SQLiteDatabase(Database):
    """An SQLite file in WAL mode, safe to share between processes (writers wait up to the
    statement timeout for each other). One connection, used from one worker thread at a
    time. The file and its directory are private to the user (0600 and 0700)."""

    dialect = "sqlite"
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

    def __init__(self, connection: sqlite3.Connection, statement_timeout: float) -> None:
        super().__init__(statement_timeout)
        self._connection = connection
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, path: Path, statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> SQLiteDatabase:
        def connect() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite's -wal/-shm copy its mode
            connection = sqlite3.connect(
                path, timeout=statement_timeout, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA busy_timeout={int(statement_timeout * 1000)}")
            connection.execute("PRAGMA foreign_keys=ON")
            return connection

        try:
            return cls(await anyio.to_thread.run_sync(connect), statement_timeout)
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the SQLite store at {path}: {error}") from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_SQLiteTx]:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                failure: BaseException | None = None
                async with anyio.create_task_group() as watchdog:
                    # A statement cannot be cancelled in its thread: interrupt it at the deadline.
                    watchdog.start_soon(self._interrupt_after, self.statement_timeout)
                    try:
                        await self._run("BEGIN IMMEDIATE")
                        try:
                            yield _SQLiteTx(self._connection)
                        except BaseException:
                            await self._run("ROLLBACK")
                            raise
                        await self._run("COMMIT")
                    except sqlite3.Error as error:
                        if self._connection.in_transaction:
                            await self._run("ROLLBACK")
                        failure = StoreError(f"SQLite store: {error}")
                    except BaseException as error:  # noqa: BLE001 - raised below, outside the task group
                        failure = error
                    finally:
                        watchdog.cancel_scope.cancel()
                if failure is not None:
                    raise failure

    async def _run(self, statement: str) -> None:
        await anyio.to_thread.run_sync(self._connection.execute, statement)

    async def _interrupt_after(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        self._connection.interrupt()  # thread-safe by design; the statement raises "interrupted"

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._connection.close)


class _PostgresTx(Transaction):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return int(cursor.rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return [tuple(row) for row in await cursor.fetchall()]


class PostgresDatabase(Database):
    """A PostgreSQL connection (psycopg 3, asynchronous), one transaction at a time.

    The server bounds each statement (``statement_timeout``, ``lock_timeout``), TCP
    keepalives notice a dead server, and a connection found broken is reopened.
    """

    dialect = "postgres"
    now_ms = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)"

    def __init__(self, url: str, statement_timeout: float) -> None:
        super().__init__(statement_timeout)
        self._url = url
        self._connection: Any = None
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, url: str, statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> PostgresDatabase:
        try:
            import psycopg  # noqa: F401 - checked here, used in _connect
        except ImportError:
            raise ConfigError("a PostgreSQL store needs psycopg: pip install 'psycopg[binary]'") from None
        db = cls(url, statement_timeout)
        await db._connect()
        return db

    async def _connect(self) -> None:
        import psycopg

        timeout_ms = int(self.statement_timeout * 1000)
        try:
            with anyio.fail_after(self.statement_timeout):
                connection = await psycopg.AsyncConnection.connect(
                    self._url,
                    autocommit=True,
                    connect_timeout=max(1, int(self.statement_timeout)),
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                )
                await connection.execute(f"SET statement_timeout = {timeout_ms}")
                await connection.execute(f"SET lock_timeout = {timeout_ms}")
        except (psycopg.Error, OSError) as error:
            raise StoreError(f"cannot connect to the PostgreSQL store: {_first_line(error)}") from None
        except TimeoutError:
            raise StoreError("cannot connect to the PostgreSQL store: timed out") from None
        self._connection = connection

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_PostgresTx]:
        import psycopg

        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._connection is None or self._connection.closed or self._connection.broken:
                    await self._reconnect()
                try:
                    with anyio.fail_after(self.statement_timeout):
                        async with self._connection.transaction():
                            yield _PostgresTx(self._connection)
                except psycopg.Error as error:
                    if self._connection.closed or self._connection.broken:
                        await self._drop()
                    raise StoreError(f"PostgreSQL store: {_first_line(error)}") from None
                except (TimeoutError, OSError) as error:
                    await self._drop()  # its state is unknown: the next transaction reconnects
                    raise StoreError(f"PostgreSQL store: {type(error).__name__} {error}") from None

    async def _reconnect(self) -> None:
        await self._drop()
        await self._connect()

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with anyio.move_on_after(1):
                await connection.close()

    async def aclose(self) -> None:
        await self._drop()


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
