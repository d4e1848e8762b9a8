"""Two SQL backends behind one small async interface: SQLite (embedded) and PostgreSQL.

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``.
DDL and clock differences go through :attr:`Database.dialect` and :attr:`Database.now_ms`.

Every transaction is shielded from cancellation (a cancelled caller must not leave one
open) and bounded instead: after ``statement_timeout`` seconds SQLite's running statement
is interrupted and PostgreSQL's connection is dropped, and the call raises
:class:`StoreError`. A PostgreSQL connection found broken is reopened before the next
transaction begins; a transaction already under way is never replayed (it may have
committed).

The hot writes (run events, transcript frames) go through :meth:`Database.grouped`: work
that many tasks submit at once is committed in one transaction, run synchronously in one
worker thread (one thread hop per batch, none per statement). On PostgreSQL batches have a
connection of their own, so the control plane's other statements never queue behind them.
"""

from __future__ import annotations

import errno
import math
import os
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
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


class Statements(ABC):
    """Statements of a group-committed batch (see :meth:`Database.grouped`). Synchronous: the
    batch runs in a worker thread, off the event loop. Errors are the driver's; the batch
    maps them to :class:`StoreError` for the submitter."""

    @abstractmethod
    def execute(self, sql: str, params: Params = ()) -> int:
        """Run ``sql``; return the number of rows it changed."""

    @abstractmethod
    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        """Run ``sql`` once per row of parameters (PostgreSQL pipelines them)."""

    @abstractmethod
    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        """Run ``sql``; return its rows."""


Work = Callable[[Statements], None]


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

    async def grouped(self, work: Work) -> None:
        """Run ``work`` in a transaction shared with whatever other tasks submit meanwhile
        (group commit: one transaction per batch, not per caller), in a worker thread.
        Returns once committed: durable, for SQLite as for PostgreSQL. ``work`` must only
        run statements (it may run again, alone, if its batch fails).

        Raises:
            StoreError: ``work``'s own transaction failed (a failing batch is retried one
                item at a time, so one caller's failure is not another's), or the batch ran
                out of time.
        """
        await self._group.submit(work)

    @abstractmethod
    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        """Commit ``batch`` in one transaction, or, if that fails, each work in its own;
        return each work's error."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connection; idempotent."""


def _commit_in_thread(
    statements: Statements,
    begin: Callable[[], object],
    commit: Callable[[], object],
    rollback: Callable[[], object],
    batch: list[Work],
) -> list[BaseException | None]:
    """The synchronous body of a group commit: the batch in one transaction, else one by one."""

    def attempt(works: list[Work]) -> BaseException | None:
        try:
            begin()
            for work in works:
                work(statements)
            commit()
        except Exception as error:  # noqa: BLE001 - handed to the submitter
            rollback()
            return error
        return None

    error = attempt(batch)
    if error is None or len(batch) == 1:
        return [error] * len(batch)
    return [attempt([work]) for work in batch]


@dataclass(eq=False)
class _Submitted:
    work: Work
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None


class _GroupCommit:
    """Leader/follower group commit: whoever takes the lock commits everything pending."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: list[_Submitted] = []
        self._lock = anyio.Lock()

    async def submit(self, work: Work) -> None:
        submitted = _Submitted(work)
        self._pending.append(submitted)
        # Shielded: once another caller's batch may hold this work, its fate must be known
        # (a cancelled caller that retried would write it twice). Batches are bounded.
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if not submitted.done.is_set():
                    batch, self._pending = self._pending, []
                    interrupted = StoreError("the store's batch was interrupted")
                    errors: list[BaseException | None] = [interrupted] * len(batch)
                    try:
                        errors = await self._db._commit([s.work for s in batch])
                    except Exception as failure:  # noqa: BLE001 - the whole batch's fate
                        errors = [failure] * len(batch)
                    finally:
                        for each, error in zip(batch, errors, strict=True):
                            each.error = error
                            each.done.set()
        if submitted.error is not None:
            raise submitted.error


class _SQLiteTx(Transaction):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).fetchall())


class _SQLiteStatements(Statements):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Params = ()) -> int:
        return self._connection.execute(sql, params).rowcount

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._connection.executemany(sql, rows)

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return self._connection.execute(sql, params).fetchall()


class SQLiteDatabase(Database):
    """An SQLite file in WAL mode, safe to share between processes (writers wait up to the
    statement timeout for each other). One connection, used from one worker thread at a
    time; a statement still running at the transaction's deadline is interrupted (a
    progress handler, so no watchdog task per transaction). The file and its directory are
    private to the user (0600 and 0700)."""

    dialect = "sqlite"
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

    def __init__(self, connection: sqlite3.Connection, statement_timeout: float) -> None:
        super().__init__(statement_timeout)
        self._connection = connection
        self._lock = anyio.Lock()
        self._deadline = math.inf  # time.monotonic(); read by the progress handler's thread
        connection.set_progress_handler(self._past_deadline, 1000)

    def _past_deadline(self) -> int:
        return int(time.monotonic() > self._deadline)

    @classmethod
    async def open(
        cls,
        path: Path,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        *,
        private_directory: bool = False,
    ) -> SQLiteDatabase:
        """Open (creating) the file at ``path``. The file and SQLite's ``-wal`` and ``-shm``
        files beside it are made 0600, whatever their mode was; a directory made here, or
        with ``private_directory`` (nodeprov's own), 0700.

        Raises:
            StoreError: the file cannot be made or opened (permissions, a file in the way).
        """

        def connect() -> sqlite3.Connection:
            made = not path.parent.exists()
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except FileExistsError:  # a file where a directory should be
                raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of its directory") from None
            if made or private_directory:
                _restrict(path.parent, 0o700)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite's -wal/-shm copy its mode
            for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                _restrict(each, 0o600)
            connection = sqlite3.connect(
                path, timeout=statement_timeout, isolation_level=None, check_same_thread=False
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(f"PRAGMA busy_timeout={int(statement_timeout * 1000)}")
            connection.execute("PRAGMA foreign_keys=ON")
            return connection

        try:
            return cls(await anyio.to_thread.run_sync(connect), statement_timeout)
        except (sqlite3.Error, OSError) as error:
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise StoreError(f"cannot open the SQLite store at {path}: {why}") from None

    @asynccontextmanager
    async def _held(self) -> AsyncIterator[None]:
        """The connection, for this task alone until the statement timeout."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                self._deadline = time.monotonic() + self.statement_timeout
                try:
                    yield
                finally:
                    self._deadline = math.inf

    async def execute(self, sql: str, params: Params = ()) -> int:
        # One statement outside BEGIN is a transaction of its own: one thread hop, not three.
        async with self._held():
            try:
                return int(
                    await anyio.to_thread.run_sync(lambda: self._connection.execute(sql, params).rowcount)
                )
            except sqlite3.Error as error:
                raise StoreError(f"SQLite store: {error}") from None

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        async with self._held():
            try:
                rows: list[Row] = await anyio.to_thread.run_sync(
                    lambda: self._connection.execute(sql, params).fetchall()
                )
            except sqlite3.Error as error:
                raise StoreError(f"SQLite store: {error}") from None
            return rows

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_SQLiteTx]:
        async with self._held():
            try:
                await self._run("BEGIN IMMEDIATE")
                try:
                    yield _SQLiteTx(self._connection)
                except BaseException:
                    await anyio.to_thread.run_sync(self._rollback)
                    raise
                await self._run("COMMIT")
            except sqlite3.Error as error:
                await anyio.to_thread.run_sync(self._rollback)
                raise StoreError(f"SQLite store: {error}") from None

    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        statements = _SQLiteStatements(self._connection)
        async with self._held():
            errors = await anyio.to_thread.run_sync(
                _commit_in_thread,
                statements,
                lambda: self._connection.execute("BEGIN IMMEDIATE"),
                lambda: self._connection.execute("COMMIT"),
                self._rollback,
                batch,
            )
        return [StoreError(f"SQLite store: {e}") if isinstance(e, sqlite3.Error) else e for e in errors]

    def _rollback(self) -> None:
        """Roll back whatever is open, past the deadline too (in the connection's thread)."""
        deadline, self._deadline = self._deadline, math.inf
        try:
            if self._connection.in_transaction:
                self._connection.execute("ROLLBACK")
        finally:
            self._deadline = deadline

    async def _run(self, statement: str) -> None:
        await anyio.to_thread.run_sync(self._connection.execute, statement)

    async def aclose(self) -> None:
        # Once no statement runs: sqlite3 closing a connection under a statement that runs in
        # another thread crashes the interpreter. A holder still there past the statement
        # timeout is idle in a transaction (a statement would have been interrupted).
        with anyio.CancelScope(shield=True):
            held = False
            with anyio.move_on_after(self.statement_timeout):
                await self._lock.acquire()
                held = True
            try:
                await anyio.to_thread.run_sync(self._connection.close)
            finally:
                if held:
                    self._lock.release()


def _restrict(path: Path, mode: int) -> None:
    """Give ``path`` exactly ``mode`` if it exists and is this user's (never follows a link)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if info.st_uid == os.getuid() and not os.path.islink(path) and info.st_mode & 0o777 != mode:
        os.chmod(path, mode)


class _PostgresTx(Transaction):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def execute(self, sql: str, params: Params = ()) -> int:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return int(cursor.rowcount)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        cursor = await self._connection.execute(sql.replace("?", "%s"), params)
        return [tuple(row) for row in await cursor.fetchall()]


class _PostgresStatements(Statements):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Params = ()) -> int:
        return int(self._connection.execute(sql.replace("?", "%s"), params).rowcount)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._connection.cursor().executemany(sql.replace("?", "%s"), rows)

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return [tuple(row) for row in self._connection.execute(sql.replace("?", "%s"), params).fetchall()]


class PostgresDatabase(Database):
    """PostgreSQL through psycopg 3: a pool of up to ``pool_size`` asynchronous connections
    for transactions, and one synchronous connection, used from a worker thread, for group
    commits (so that neither waits for the other).

    The server bounds each statement (``statement_timeout``, ``lock_timeout``), TCP
    keepalives notice a dead server, and a connection found broken is reopened. A batch
    that runs out of time is abandoned with its connection (which closes once it returns).
    """

    dialect = "postgres"
    now_ms = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT)"

    def __init__(self, url: str, statement_timeout: float, pool_size: int = 4) -> None:
        super().__init__(statement_timeout)
        self._url = url
        self._idle: list[Any] = []  # connections of the pool not in use; the last is used first
        self._slots = anyio.Semaphore(pool_size)
        self._writer: Any = None  # the group commits' connection
        self._closed = False

    @classmethod
    async def open(cls, url: str, statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> PostgresDatabase:
        try:
            import psycopg  # noqa: F401 - checked here, used in _connect
        except ImportError:
            raise ConfigError("a PostgreSQL store needs psycopg: pip install 'psycopg[binary]'") from None
        db = cls(url, statement_timeout)
        db._idle.append(await db._connect())
        return db

    def _connect_options(self) -> dict[str, Any]:
        return {
            "autocommit": True,
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
        import psycopg

        try:
            with anyio.fail_after(self.statement_timeout):
                connection = await psycopg.AsyncConnection.connect(self._url, **self._connect_options())
                for setting in self._settings():
                    await connection.execute(setting)
        except (psycopg.Error, OSError) as error:
            raise StoreError(f"cannot connect to the PostgreSQL store: {_first_line(error)}") from None
        except TimeoutError:
            raise StoreError("cannot connect to the PostgreSQL store: timed out") from None
        return connection

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[_PostgresTx]:
        import psycopg

        with anyio.CancelScope(shield=True):
            async with self._slots:
                connection = self._idle.pop() if self._idle else None
                if connection is None or connection.closed or connection.broken:
                    await _close_async(connection)
                    connection = await self._connect()
                try:
                    with anyio.fail_after(self.statement_timeout):
                        async with connection.transaction():
                            yield _PostgresTx(connection)
                except psycopg.Error as error:
                    raise StoreError(f"PostgreSQL store: {_first_line(error)}") from None
                except (TimeoutError, OSError) as error:
                    await _close_async(connection)  # its state is unknown: never reused
                    connection = None
                    raise StoreError(f"PostgreSQL store: {type(error).__name__} {error}") from None
                finally:
                    if connection is not None and not (
                        connection.closed or connection.broken or self._closed
                    ):
                        self._idle.append(connection)
                    elif connection is not None:
                        await _close_async(connection)

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

    def _commit_on(self, writer: Any, batch: list[Work]) -> tuple[list[BaseException | None], bool]:
        """The batch's errors, and whether a COMMIT was sent (after which a lost connection
        leaves the batch's fate unknown)."""
        committing = False

        def rollback() -> None:
            if not (writer.closed or writer.broken):
                writer.execute("ROLLBACK")

        def commit() -> None:
            nonlocal committing
            committing = True
            writer.execute("COMMIT")

        try:
            errors = _commit_in_thread(
                _PostgresStatements(writer), lambda: writer.execute("BEGIN"), commit, rollback, batch
            )
            return errors, committing
        finally:
            if self._writer is not writer:  # abandoned meanwhile, or the store closed
                writer.close()

    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        import psycopg

        def commit() -> list[BaseException | None]:
            writer = self._writer_connection()
            errors, committing = self._commit_on(writer, batch)
            if writer.broken and self._writer is writer:
                if committing and any(errors):
                    # Lost as it committed: the server may have committed it. Never replayed
                    # here; the submitters learn its fate is unknown (their writes are idempotent).
                    unknown = StoreError(
                        "PostgreSQL store: the connection was lost as the batch committed (it may have)"
                    )
                    return [unknown if error is not None else None for error in errors]
                # The server ended the connection before any COMMIT (a restart, a failover,
                # an administrator): nothing committed, so the works run again on a new one.
                errors, _ = self._commit_on(self._writer_connection(), batch)
            return errors

        with anyio.move_on_after(self.statement_timeout):
            try:
                errors = await anyio.to_thread.run_sync(commit, abandon_on_cancel=True)
            except (psycopg.Error, OSError) as error:  # connecting failed
                return [StoreError(f"PostgreSQL store: {_first_line(error)}")] * len(batch)
            return [
                StoreError(f"PostgreSQL store: {_first_line(e)}") if isinstance(e, psycopg.Error) else e
                for e in errors
            ]
        self._writer = None  # the abandoned thread closes it when it returns
        return [StoreError("PostgreSQL store: the batch ran out of time (it may have committed)")] * len(
            batch
        )

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


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
