"""The PostgreSQL backend, through psycopg 3: connections that drop are opened again and the
work is done again, without ever doing it twice.

A transaction lost before its COMMIT was sent wrote nothing: it runs again on a new
connection. One lost after its COMMIT was sent is asked about: its transaction id (taken just
before the COMMIT) is looked up with ``txid_status`` on a new connection, and it runs again
only if it did not commit. A group commit's works are idempotent by their keys, so a batch
lost at any point is simply written again. What is tried again, and for how long, is
:mod:`._db`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from ..errors import ConfigError, StoreError
from ._db import (
    DEFAULT_RETRY_FOR,
    DEFAULT_STATEMENT_TIMEOUT,
    Body,
    Database,
    FateUnknownError,
    Params,
    Row,
    Statements,
    T,
    Transaction,
    UnavailableError,
    Work,
    check_params,
    commit_in_thread,
    first_line,
)

__all__ = ["PostgresDatabase", "where"]

# SQLSTATEs of a transaction that may succeed if run again: the connection's class (08),
# the server shutting down or starting, too many connections, serialization failures,
# deadlocks, and a lock wait that ran out (lock_timeout).
_TRANSIENT_CLASSES = ("08",)
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "40001", "40P01", "55P03"})


def where(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _transient(error: BaseException, connection: Any) -> bool:
    """Whether ``error`` (on ``connection``) may go away if the transaction runs again."""
    if (connection is not None and (connection.closed or connection.broken)) or _connection_failed(error):
        return True
    state = getattr(error, "sqlstate", None) or ""
    return state in _TRANSIENT_STATES or state.startswith(_TRANSIENT_CLASSES)


def _connection_failed(error: BaseException) -> bool:
    """Whether ``error`` is a failure of the connection itself, not of SQL (no SQL state): a
    server that ended it mid-pipeline leaves it "busy" without marking it broken."""
    import psycopg

    return any(
        isinstance(seen, psycopg.OperationalError) and not getattr(seen, "sqlstate", None)
        for seen in (error, error.__cause__)
    )


def _lost_state(error: BaseException) -> bool:
    """Whether ``error`` leaves its connection in a state nobody knows: a timeout, the OS, or
    the connection's own failure."""
    return _connection_failed(error) or any(
        isinstance(seen, TimeoutError | OSError) for seen in (error, error.__cause__)
    )


class _PostgresTx(Transaction):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        cursor = await self._connection.execute(sql.replace("?", "%s"), check_params(params))
        return int(cursor.rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = await self._connection.execute(sql.replace("?", "%s"), check_params(params))
        return [tuple(row) for row in await cursor.fetchall()]


class _PostgresStatements(Statements):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Params = ()) -> int:
        return int(self._connection.execute(sql.replace("?", "%s"), check_params(params)).rowcount)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._connection.cursor().executemany(sql.replace("?", "%s"), [check_params(row) for row in rows])

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = self._connection.execute(sql.replace("?", "%s"), check_params(params))
        return [tuple(row) for row in cursor.fetchall()]


class PostgresDatabase(Database):
    """PostgreSQL through psycopg 3: a pool of up to ``pool_size`` asynchronous connections
    for transactions, and one synchronous connection, used from a worker thread, for group
    commits (so that neither waits for the other).

    The server bounds each statement (``statement_timeout``, ``lock_timeout``), TCP
    keepalives notice a dead server, and a connection found broken is replaced. A batch
    that runs out of time is abandoned with its connection (which closes once it returns).
    """

    dialect = "postgres"
    json_rows = "jsonb_array_elements(CAST(? AS jsonb)) WITH ORDINALITY AS j(value, key)"
    now_ms = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)"

    def __init__(self, url: str, statement_timeout: float, retry_for: float, pool_size: int = 4) -> None:
        super().__init__(where(url), statement_timeout, retry_for)
        self._url = url
        self._idle: list[Any] = []  # connections of the pool not in use; the last is used first
        self._slots = anyio.Semaphore(pool_size)
        self._writer: Any = None  # the group commits' connection
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
    ) -> PostgresDatabase:
        """Connect to ``url``. The first connection is not tried again: a store that cannot be
        reached when it is opened is a mistake to report at once, not an outage to ride out.

        Raises:
            ConfigError: psycopg is not installed.
            StoreError: the server cannot be reached or refused the connection.
        """
        try:
            import psycopg  # noqa: F401 - checked here, used in _connect
        except ImportError:
            raise ConfigError("a PostgreSQL store needs psycopg: pip install 'psycopg[binary]'") from None
        db = cls(url, statement_timeout, retry_for)
        try:
            db._idle.append(await db._connect())
        except UnavailableError as error:
            raise StoreError(str(error)) from None
        return db

    def _connect_options(self) -> dict[str, Any]:
        return {
            "autocommit": True,  # transactions are explicit BEGIN ... COMMIT
            "connect_timeout": max(1, int(self.statement_timeout)),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }

    def _settings(self) -> list[str]:
        timeout_ms = int(self.statement_timeout * 1000)
        return [f"SET statement_timeout = {timeout_ms}", f"SET lock_timeout = {timeout_ms}"]

    async def _connect(self) -> Any:
        """A new connection. Raises UnavailableError (the server cannot be reached now) or
        StoreError (it refused: a wrong password, no such database)."""
        import psycopg

        try:
            with anyio.fail_after(self.statement_timeout):
                connection = await psycopg.AsyncConnection.connect(self._url, **self._connect_options())
                for setting in self._settings():
                    await connection.execute(setting)
        except TimeoutError:
            raise UnavailableError(
                f"cannot connect to the PostgreSQL store {self.where}: timed out"
            ) from None
        except (psycopg.Error, OSError) as error:
            why = f"cannot connect to the PostgreSQL store {self.where}: {first_line(error)}"
            if _transient(error, None) or getattr(error, "sqlstate", None) is None:
                raise UnavailableError(why) from None
            raise StoreError(why) from None
        return connection

    @asynccontextmanager
    async def _borrowed(self) -> AsyncIterator[Any]:
        """A connection of the pool, for this task alone; given back after, unless its state is
        unknown (a timeout, an OS error) or it broke."""
        async with self._slots:
            connection = None
            while self._idle and connection is None:
                connection = self._idle.pop()
                if connection.closed or connection.broken:
                    await _close_async(connection)
                    connection = None
            if connection is None:
                connection = await self._connect()
            try:
                yield connection
            except BaseException as error:
                if _lost_state(error):
                    await _close_async(connection)  # its state is unknown: never reused
                else:
                    await self._give_back(connection)
                raise
            await self._give_back(connection)

    async def _give_back(self, connection: Any) -> None:
        if connection.closed or connection.broken or self._closed:
            await _close_async(connection)
        else:
            self._idle.append(connection)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        # A read alone needs no BEGIN and COMMIT: one round trip. Lost, it is simply read again.
        import psycopg

        async def attempt() -> list[Row]:
            async with self._borrowed() as connection:
                try:
                    with anyio.fail_after(self.statement_timeout):
                        return await _PostgresTx(connection).fetchall(sql, params)
                except (psycopg.Error, OSError, TimeoutError) as error:
                    raise self._mapped(error, connection) from error

        return await self._retry(attempt)

    async def _attempt(self, body: Body[T]) -> T:
        import psycopg

        async with self._borrowed() as connection:
            xid: int | None = None
            committing = False
            try:
                with anyio.fail_after(self.statement_timeout):
                    await connection.execute("BEGIN")
                    try:
                        result = await body(_PostgresTx(connection))
                    except BaseException:
                        if not (connection.closed or connection.broken):
                            await connection.execute("ROLLBACK")
                        raise
                    cursor = await connection.execute("SELECT txid_current_if_assigned()")
                    xid = (await cursor.fetchone())[0]
                    committing = True
                    await connection.execute("COMMIT")
            except (psycopg.Error, OSError, TimeoutError) as error:
                if committing and xid is not None:
                    why = f"PostgreSQL store {self.where}: {first_line(error)}"
                    raise FateUnknownError(why, partial(self._committed, xid), result) from error
                raise self._mapped(error, connection) from error
            return result

    def _mapped(self, error: BaseException, connection: Any) -> BaseException:
        """``error`` of a transaction that did not commit, as :mod:`._db` takes it."""
        if isinstance(error, ConfigError | StoreError | UnavailableError):
            return error
        if isinstance(error, TimeoutError):
            return UnavailableError(f"no answer within {self.statement_timeout:g} s")
        if isinstance(error, OSError) or _transient(error, connection):
            return UnavailableError(first_line(error))  # the retries say which store
        why = f"PostgreSQL store {self.where}: {first_line(error)}"
        if getattr(error, "sqlstate", None) == "57014":
            return StoreError(f"{why} (a statement ran out of time)")
        return StoreError(why)

    async def _committed(self, xid: int) -> bool | None:
        """Whether transaction ``xid`` committed (``None``: cannot tell yet)."""
        import psycopg

        async with self._borrowed() as connection:
            try:
                with anyio.fail_after(self.statement_timeout):
                    cursor = await connection.execute("SELECT txid_status(%s)", (xid,))
                    status = (await cursor.fetchone())[0]
            except (psycopg.Error, OSError, TimeoutError) as error:
                raise self._mapped(error, connection) from error
        return {"committed": True, "aborted": False}.get(status)

    def _writer_connection(self) -> Any:
        """The group commits' connection, (re)opened if need be. In the worker thread."""
        import psycopg

        writer = self._writer
        if writer is None or writer.closed or writer.broken:
            if writer is not None:
                writer.close()
            writer = self._writer = psycopg.connect(self._url, **self._connect_options())
            for setting in self._settings():
                writer.execute(setting)
        return writer

    def _commit_in_thread(self, batch: list[Work]) -> list[BaseException | None]:
        import psycopg

        try:
            writer = self._writer_connection()
        except (psycopg.Error, OSError) as error:
            return [UnavailableError(first_line(error))] * len(batch)

        def rollback() -> None:
            if not (writer.closed or writer.broken):
                writer.execute("ROLLBACK")

        def lost(error: BaseException) -> BaseException | None:
            # The works are idempotent by their keys: a batch lost even as it committed is
            # written again, and what it stored already is skipped.
            if isinstance(error, psycopg.Error | OSError) and _transient(error, writer):
                if _lost_state(error):  # ended mid-pipeline, it stays "busy", not broken: never reused
                    writer.close()
                return UnavailableError(first_line(error))
            return None

        try:
            errors = commit_in_thread(
                _PostgresStatements(writer),
                partial(writer.execute, "BEGIN"),
                partial(writer.execute, "COMMIT"),
                rollback,
                batch,
                lost=lost,
            )
        finally:
            if self._writer is not writer:  # abandoned meanwhile, or the store closed
                writer.close()
        return [
            StoreError(f"PostgreSQL store {self.where}: {first_line(e)}")
            if isinstance(e, psycopg.Error)
            else e
            for e in errors
        ]

    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        with anyio.move_on_after(self.statement_timeout):
            return await anyio.to_thread.run_sync(self._commit_in_thread, batch, abandon_on_cancel=True)
        self._writer = None  # the abandoned thread closes it when it returns
        return [
            UnavailableError(
                f"PostgreSQL store {self.where}: a batch had no answer within {self.statement_timeout:g} s"
            )
        ] * len(batch)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close_async(connection)
        writer, self._writer = self._writer, None
        if writer is not None:
            await anyio.to_thread.run_sync(writer.close)


async def _close_async(connection: Any) -> None:
    if connection is not None:
        with anyio.move_on_after(1):
            await connection.close()
