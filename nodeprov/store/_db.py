"""Two SQL backends behind one small async interface: SQLite (embedded) and PostgreSQL.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``.
DDL differences go through :attr:`Database.dialect`.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread

from ..errors import ConfigError, ProviderError

Row = tuple[Any, ...]
Params = Sequence[Any]


class StoreError(ProviderError):
    """The session store's database failed."""


class Database(ABC):
    """A connection to the store's database; every statement runs in a transaction."""

    dialect: Literal["sqlite", "postgres"]

    @abstractmethod
    def transaction(self) -> Any:
        """``async with db.transaction() as tx:`` — statements through ``tx`` commit together,
        or roll back together if the block raises. Writers are serialized (SQLite takes the
        write lock up front; PostgreSQL uses row locks and advisory locks)."""

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

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connection; idempotent."""


class _SQLiteTx:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).fetchall())


class SQLiteDatabase(Database):
    """An SQLite file in WAL mode, safe to share between processes (writers wait up to
    ``busy_timeout`` for each other). One connection, used from one worker thread at a time."""

    dialect = "sqlite"

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, path: Path) -> SQLiteDatabase:
        def connect() -> sqlite3.Connection:
            path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA busy_timeout=30000")
            connection.execute("PRAGMA foreign_keys=ON")
            return connection

        try:
            return cls(await anyio.to_thread.run_sync(connect))
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the SQLite store at {path}: {error}") from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_SQLiteTx]:
        async with self._lock:
            # The whole transaction is shielded: a cancelled caller must not leave it open.
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(self._connection.execute, "BEGIN IMMEDIATE")
                except sqlite3.Error as error:
                    raise StoreError(f"SQLite store: {error}") from None
                try:
                    yield _SQLiteTx(self._connection)
                except BaseException:
                    await anyio.to_thread.run_sync(self._connection.execute, "ROLLBACK")
                    raise
                try:
                    await anyio.to_thread.run_sync(self._connection.execute, "COMMIT")
                except sqlite3.Error as error:
                    raise StoreError(f"SQLite store: {error}") from None

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._connection.close)


class _PostgresTx:
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return int(cursor.rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return [tuple(row) for row in await cursor.fetchall()]


class PostgresDatabase(Database):
    """A PostgreSQL connection (psycopg 3, asynchronous), one transaction at a time."""

    dialect = "postgres"

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, url: str) -> PostgresDatabase:
        try:
            import psycopg
        except ImportError:
            raise ConfigError("a PostgreSQL store needs psycopg: pip install 'psycopg[binary]'") from None
        try:
            connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
        except psycopg.Error as error:
            raise StoreError(f"cannot connect to the PostgreSQL store: {_first_line(error)}") from None
        return cls(connection)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_PostgresTx]:
        import psycopg

        async with self._lock:
            with anyio.CancelScope(shield=True):
                try:
                    async with self._connection.transaction():
                        yield _PostgresTx(self._connection)
                except psycopg.Error as error:
                    raise StoreError(f"PostgreSQL store: {_first_line(error)}") from None

    async def aclose(self) -> None:
        await self._connection.close()


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
