"""The SQLite backend, through apsw: SQLite's own rules for a file shared by processes.

Why apsw and not the standard library's ``sqlite3``: ``sqlite3`` uses whatever libsqlite3 the
system has, and SQLite 3.7.0 to 3.51.2 carry the WAL-reset bug (two connections writing and
checkpointing at once can lose committed pages: sqlite.org/wal.html#walresetbug), which is
nodeprov's very workload; Debian 12's is 3.40. apsw bundles a current SQLite (at least
3.51.3, checked by tests/test_store_files.py), and refuses a connection used by two threads
at once instead of crashing. Nothing in a process may open a store's file with another copy
of SQLite (``sqlite3`` included) while the store is open: two copies of SQLite in one
process drop each other's locks.

SQLite's "How To Corrupt An SQLite Database File", item by item, and what this module does:

- *A descriptor opened and closed on the file drops every lock the process holds on it.*
  Nothing here opens the file, its ``-wal`` or its ``-shm`` beside SQLite: modes are set by
  path (``chmod``), and a file that does not exist yet is made (``O_EXCL``, 0600, so SQLite's
  ``-wal`` and ``-shm`` copy that mode) under a lock every open of this process takes.
- *Filesystems whose locks do not work* (NFS, SMB, 9p, sshfs): refused, with one line.
- *More than one name for the file* (hard links): refused; a symbolic link is resolved
  first, so the ``-wal`` is the one beside the real file, where SQLite puts it.
- *A file renamed or deleted while in use*: every transaction checks the file is still the
  one opened, and fails rather than write where no other process reads.
- *A connection carried across fork()*: refused in the child (see :mod:`._db`).
- *Syncs*: ``synchronous=FULL`` in WAL mode: a commit that returned is on the disk.
- *Checkpoints*: SQLite's own, which delete the WAL only when its locks say no other
  connection uses it (which the rules above keep true); ``journal_size_limit`` bounds it.
"""

from __future__ import annotations

import errno
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import apsw

from ..errors import StoreError
from ._db import (
    DEFAULT_RETRY_FOR,
    DEFAULT_STATEMENT_TIMEOUT,
    Body,
    Database,
    Params,
    Row,
    Statements,
    T,
    Transaction,
    UnavailableError,
    Work,
    check_params,
    commit_in_thread,
)
from ._thread import ConnectionThread

__all__ = ["NETWORK_FILESYSTEMS", "SQLiteDatabase", "filesystem_of"]

NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "afs", "fuse.sshfs", "davfs", "fuse.s3fs"}
)
"""Filesystems whose POSIX locks SQLite cannot rely on: a store there is refused."""

_WAL_LIMIT = 64 << 20  # bytes a WAL is truncated to after a checkpoint

# Making a file and opening connections, one at a time in this process: a descriptor made
# and closed on a file while a connection of this process holds it would drop its locks.
_OPENING = threading.Lock()


def filesystem_of(path: str, mountinfo: str) -> str:
    """The type of the filesystem ``path`` (absolute, resolved) is on, from the text of
    ``/proc/self/mountinfo``; ``""`` when no mount holds it."""
    best, kind = "", ""
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        mount = parts[4].encode().decode("unicode_escape")  # \040 for spaces
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, rest.split()[0]
    return kind


class _SQLiteTx(Transaction):
    def __init__(self, connection: apsw.Connection, thread: ConnectionThread) -> None:
        self._connection = connection
        self._thread = thread

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self._thread.run(_execute, self._connection, sql, params)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._thread.run(_fetchall, self._connection, sql, params)


def _execute(connection: apsw.Connection, sql: str, params: Params) -> int:
    connection.execute(sql, check_params(params)).fetchall()
    return int(connection.changes())


def _fetchall(connection: apsw.Connection, sql: str, params: Params) -> list[Row]:
    return [tuple(row) for row in connection.execute(sql, check_params(params)).fetchall()]


class _SQLiteStatements(Statements):
    def __init__(self, connection: apsw.Connection) -> None:
        self._connection = connection

    def execute(self, sql: str, params: Params = ()) -> int:
        return _execute(self._connection, sql, params)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._connection.executemany(sql, [check_params(row) for row in rows]).fetchall()

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return _fetchall(self._connection, sql, params)


class SQLiteDatabase(Database):
    """An SQLite file in WAL mode, safe to share between processes (writers wait up to the
    statement timeout for each other; one that waits longer tries again until
    ``retry_for``). One connection, used from a thread of its own; a statement
    still running at the transaction's deadline is interrupted (a progress handler, so no
    watchdog task per transaction). The file and its directory are private to the user
    (0600 and 0700)."""

    dialect = "sqlite"
    json_rows = "json_each(?) AS j"
    now_ms = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

    def __init__(
        self, connection: apsw.Connection, path: Path, statement_timeout: float, retry_for: float
    ) -> None:
        super().__init__(str(path), statement_timeout, retry_for)
        self.path = path
        self._connection = connection
        self._thread = ConnectionThread(f"nodeprov-sqlite {path.name}")
        self._identity = _identity(path)
        self._lock = anyio.Lock()
        self._deadline = math.inf  # time.monotonic(); read by the progress handler's thread
        # Looked at every million virtual machine steps (a few ms of work): each look takes the
        # interpreter's lock, which a busy event loop holds, and at every thousand steps the
        # looks, not SQLite, took most of a large batch's time.
        connection.set_progress_handler(self._past_deadline, 1_000_000)

    def _past_deadline(self) -> bool:
        return time.monotonic() > self._deadline

    @classmethod
    async def open(
        cls,
        path: Path,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        *,
        private_directory: bool = False,
    ) -> SQLiteDatabase:
        """Open (creating) the file at ``path`` (a symbolic link is followed first). A file
        made here is 0600, and SQLite's ``-wal`` and ``-shm`` beside it too; existing ones
        are made 0600 by path. A directory made here, or with ``private_directory``
        (nodeprov's own), is 0700.

        Raises:
            StoreError: the file cannot be made or opened (permissions, a file in the way),
                is on a filesystem whose locks SQLite cannot rely on, or has other names
                (hard links).
        """
        try:
            real, connection = await anyio.to_thread.run_sync(
                partial(_connect, path, statement_timeout, private_directory)
            )
        except (apsw.Error, OSError, _RefusedError) as error:
            why = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise StoreError(f"cannot open the SQLite store at {path}: {why}") from None
        return cls(connection, real, statement_timeout, retry_for)

    async def _alone(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in the connection's thread, as one job: queued at once unless a
        transaction holds the connection across calls (then once it is done), and never
        holding it while the event loop comes back for the result. Under load that return
        trip is a loop iteration or more, and the connection would wait idle for it."""
        if self._lock.locked():
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    future = self._thread.submit(function, *args)
        else:
            future = self._thread.submit(function, *args)
        return await self._thread.wait(future)

    def _within_deadline(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` (in the connection's thread) interrupted at the statement timeout."""
        self._deadline = time.monotonic() + self.statement_timeout
        try:
            return function(*args)
        finally:
            self._deadline = math.inf

    async def execute(self, sql: str, params: Params = ()) -> int:
        # One statement outside BEGIN is a transaction of its own: one thread hop, not three.
        # Not a group commit: one sync to disk per batch, but each waiter's extra turns of a
        # saturated event loop cost more (a burst of 50 starts over HTTP: first events later).
        return await self._single(_execute, sql, params)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._single(_fetchall, sql, params)

    async def _single(self, run: Callable[[apsw.Connection, str, Params], T], sql: str, params: Params) -> T:
        async def attempt() -> T:
            try:
                return await self._alone(self._within_deadline, self._checked, run, sql, params)
            except apsw.Error as error:
                raise self._mapped(error) from None

        return await self._retry(attempt)

    def _checked(self, run: Callable[[apsw.Connection, str, Params], T], sql: str, params: Params) -> T:
        self._check_file()
        return run(self._connection, sql, params)

    def _check_file(self) -> None:
        """Fail rather than write to a file no other process reads (in the worker thread)."""
        if _identity(self.path) != self._identity:
            raise StoreError(
                f"the SQLite store at {self.path} was moved or deleted while in use: its writes would be lost"
            )

    async def _attempt(self, body: Body[T]) -> T:
        async with self._held():
            try:
                await self._thread.run(self._begin)
                try:
                    result = await body(_SQLiteTx(self._connection, self._thread))
                except BaseException:
                    await self._thread.run(self._rollback)
                    raise
                await self._thread.run(self._commit_open)
                return result
            except apsw.Error as error:
                await self._thread.run(self._rollback)
                raise self._mapped(error) from None

    @asynccontextmanager
    async def _held(self) -> AsyncIterator[None]:
        """The connection, for this transaction alone from BEGIN to COMMIT: others' calls wait."""
        with anyio.CancelScope(shield=True):
            async with self._lock:
                yield

    def _begin(self) -> None:
        """Open a transaction (in the connection's thread), its statements interrupted at the
        statement timeout from now."""
        self._check_file()
        self._deadline = time.monotonic() + self.statement_timeout
        self._connection.execute("BEGIN IMMEDIATE")

    def _commit_open(self) -> None:
        try:
            self._connection.execute("COMMIT")
        finally:
            self._deadline = math.inf

    def _mapped(self, error: apsw.Error) -> Exception:
        if isinstance(error, apsw.BusyError | apsw.LockedError):
            return UnavailableError(f"another process holds the write lock: {error}")
        if isinstance(error, apsw.InterruptError):
            limit = self.statement_timeout
            return StoreError(
                f"SQLite store {self.path}: a statement was interrupted at its time limit ({limit:g} s)"
            )
        return StoreError(f"SQLite store {self.path}: {error}")

    def _lost(self, error: BaseException) -> BaseException | None:
        return self._mapped(error) if isinstance(error, apsw.BusyError | apsw.LockedError) else None

    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        errors = await self._alone(
            partial(
                commit_in_thread,
                _SQLiteStatements(self._connection),
                self._begin,
                self._commit_open,
                self._rollback,
                batch,
                lost=self._lost,
            )
        )
        return [self._mapped(e) if isinstance(e, apsw.Error) else e for e in errors]

    def _rollback(self) -> None:
        """Roll back whatever is open, past the deadline too (in the connection's thread)."""
        self._deadline = math.inf
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")

    async def aclose(self) -> None:
        # Once no statement runs (apsw refuses to close a connection another thread uses). A
        # holder still there past the statement timeout is idle in a transaction (a statement
        # would have been interrupted).
        with anyio.CancelScope(shield=True):
            held = False
            with anyio.move_on_after(self.statement_timeout):
                await self._lock.acquire()
                held = True
            try:
                await self._thread.run(self._connection.close)
            finally:
                self._thread.stop()
                if held:
                    self._lock.release()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _connect(path: Path, statement_timeout: float, private_directory: bool) -> tuple[Path, apsw.Connection]:
    """Make the file if need be and open a connection to it (in a worker thread)."""
    with _OPENING:
        made = not path.parent.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except FileExistsError:  # a file where a directory should be
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of its directory") from None
        if made or private_directory:
            _restrict(path.parent, 0o700)
        real = path.resolve()
        _refuse_unsafe_filesystem(real)
        with suppress(FileExistsError):  # a new file only: opening one in use would drop its locks
            os.close(os.open(real, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        links = os.stat(real).st_nlink
        if links > 1:
            raise _RefusedError(f"it has {links} names (hard links), and SQLite keeps a WAL beside each")
        for each in (real, real.with_name(real.name + "-wal"), real.with_name(real.name + "-shm")):
            _restrict(each, 0o600)
        connection = apsw.Connection(str(real), flags=apsw.SQLITE_OPEN_READWRITE)
        connection.set_busy_timeout(int(statement_timeout * 1000))
        mode = connection.pragma("journal_mode", "wal")
        if mode != "wal":
            connection.close()
            raise _RefusedError(f"SQLite cannot keep a WAL there (journal mode {mode})")
        connection.pragma("synchronous", "full")
        connection.pragma("foreign_keys", "on")
        connection.pragma("journal_size_limit", _WAL_LIMIT)
        return real, connection


class _RefusedError(Exception):
    """A store file SQLite must not be trusted with: why."""


def _refuse_unsafe_filesystem(path: Path) -> None:
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return  # not Linux: nothing to tell
    kind = filesystem_of(str(path), mountinfo)
    if kind in NETWORK_FILESYSTEMS:
        raise _RefusedError(
            f"it is on {kind}, whose locks SQLite cannot rely on: use a local disk, or PostgreSQL"
        )


def _restrict(path: Path, mode: int) -> None:
    """Give ``path`` exactly ``mode`` if it exists and is this user's (never follows a link)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if info.st_uid == os.getuid() and not os.path.islink(path) and info.st_mode & 0o777 != mode:
        os.chmod(path, mode)
