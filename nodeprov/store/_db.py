"""Two SQL backends behind one small async interface: SQLite (embedded, :mod:`._sqlite`) and
PostgreSQL (:mod:`._postgres`).

SQL is written once with ``?`` placeholders; the PostgreSQL backend rewrites them to ``%s``.
DDL and clock differences go through :attr:`Database.dialect` and :attr:`Database.now_ms`.

**Transactions** are functions (:meth:`Database.transact`), not blocks: a transaction the
database lost before it committed (a dropped connection, a server restarting, a writer
that waited too long for the lock) runs again, until it commits or ``retry_for`` seconds
of trying pass; then :class:`StoreError` says, in one line, that the store was unavailable
for that long. A transaction lost *as* it committed is asked about on a new connection
(PostgreSQL knows whether a transaction id committed), so it is never run twice nor
reported failed when it committed. Each attempt is shielded from cancellation (a cancelled
caller must not leave one open) and bounded by ``statement_timeout``; the waits between
attempts are not shielded.

**Input** the two databases cannot both hold is refused before it reaches either: a NUL
character in text is a :class:`ConfigError`, on SQLite as on PostgreSQL.

The hot writes (run events, transcript frames) go through :meth:`Database.grouped`: work
that many tasks submit at once is committed in one transaction, run synchronously in one
worker thread (one thread hop per batch, none per statement).

A database opened in a process is that process's: a child made by ``fork()`` that uses
it gets a :class:`StoreError` (a connection must never cross a fork; open another).
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio

from ..errors import ConfigError, StoreError

Row = tuple[Any, ...]
Params = Sequence[Any]
T = TypeVar("T")

DEFAULT_STATEMENT_TIMEOUT = 30.0
DEFAULT_RETRY_FOR = 60.0

logger = logging.getLogger("nodeprov.store")

_FIRST_BACKOFF = 0.05
_MAX_BACKOFF = 2.0


class Transaction(ABC):
    """Statements of one transaction (see :meth:`Database.transact`)."""

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
Body = Callable[[Transaction], Awaitable[T]]


class UnavailableError(Exception):
    """An attempt the database lost before it committed (or that it aborted): nothing of it
    was written, and running it again may succeed. Internal: callers see :class:`StoreError`."""


class FateUnknownError(Exception):
    """An attempt whose COMMIT was sent and whose answer was lost, and whose fate could not
    be learnt yet. Internal."""

    def __init__(self, why: str, ask: Callable[[], Awaitable[bool | None]], result: Any = None) -> None:
        super().__init__(why)
        self.ask = ask
        """Whether it committed (``None``: cannot tell yet); raises :class:`UnavailableError`
        while the database cannot be reached."""
        self.result = result
        """What the transaction's body returned, for when it did commit."""


def check_params(params: Params) -> Params:
    """``params``, unless a text among them holds NUL (neither store may hold it: PostgreSQL
    cannot, and one store must not keep what the other refuses).

    Raises:
        ConfigError: a text value holds a NUL character.
    """
    for value in params:
        if isinstance(value, str) and "\x00" in value:
            raise ConfigError("text with a NUL character cannot be stored")
    return params


_patience: ContextVar[float | None] = ContextVar("nodeprov_store_patience", default=None)


@contextmanager
def patience(seconds: float | None) -> Iterator[None]:
    """Within this block (and the tasks started in it), a call waits for a store that stops
    answering at most ``seconds``, if that is less than the store's ``retry_for`` (None: the
    store's own): a caller that someone waits on (an HTTP request) answers soon, while a
    run rides the outage out. A run's own work sets None again."""
    token = _patience.set(seconds)
    try:
        yield
    finally:
        _patience.reset(token)


_generation = 0  # bumped in a child after fork(): a database of an earlier one is the parent's


def _forked() -> None:
    global _generation  # noqa: PLW0603 - process-wide by nature
    _generation += 1


os.register_at_fork(after_in_child=_forked)


class Database(ABC):
    """A connection to the store's database; every statement runs in a transaction."""

    dialect: Literal["sqlite", "postgres"]
    json_rows: str
    """A ``FROM`` item: the elements of a JSON array given as one parameter, each ``j.value``
    (its fields ``j.value->>0``, ``j.value->>1``, ...; text, to be cast where a column is
    not) in the array's order ``j.key``. A batch of rows in one statement: SQLite's driver
    lets go of the interpreter's lock for each row of an ``executemany`` and waits to take
    it back, which under a busy event loop cost a row 100 µs or more."""
    now_ms: str
    """An SQL expression for the database's clock in epoch milliseconds: leases are judged
    by one clock, whatever the clocks of the control planes sharing the store say."""

    def __init__(self, where: str, statement_timeout: float, retry_for: float) -> None:
        self.where = where
        """The store, as messages name it (never with a password)."""
        self.statement_timeout = statement_timeout
        self.retry_for = retry_for
        self._group = _GroupCommit(self)
        self._generation = _generation
        self._outage_since: float | None = None

    def _check_process(self) -> None:
        if self._generation != _generation:
            raise StoreError(f"the store at {self.where} was opened before this process forked: open it anew")

    async def transact(self, body: Body[T]) -> T:
        """Run ``body`` in a transaction and return what it returns: its statements through
        the transaction it is given commit together, or not at all if it raises. ``body``
        must only run statements: it runs again when the database lost the transaction
        before it committed. Writers are serialized (SQLite takes the write lock up front;
        PostgreSQL uses row locks and advisory locks).

        Raises:
            ConfigError: a statement's text holds NUL (nothing was written).
            StoreError: the database failed, a statement ran out of time, or the store was
                unavailable for ``retry_for`` seconds.
        """
        return await self._retry(lambda: self._attempt(body))

    async def _retry(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` (shielded), again while the database loses it, within ``retry_for``."""
        self._check_process()
        retrying = _Retrying(self)
        while True:
            try:
                with anyio.CancelScope(shield=True):
                    result = await attempt()
            except UnavailableError as error:
                await retrying.wait(error)
                continue
            except FateUnknownError as lost:
                if not await retrying.learn_fate(lost):
                    continue
                result = lost.result
            retrying.done()
            return result

    async def execute(self, sql: str, params: Params = ()) -> int:
        async def body(tx: Transaction) -> int:
            return await tx.execute(sql, params)

        return await self.transact(body)

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        async def body(tx: Transaction) -> list[Row]:
            return await tx.fetchall(sql, params)

        return await self.transact(body)

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def grouped(self, work: Work) -> None:
        """Run ``work`` in a transaction shared with whatever other tasks submit meanwhile
        (group commit: one transaction per batch, not per caller), in a worker thread.
        Returns once committed: durable, for SQLite as for PostgreSQL. ``work`` must only
        run statements (it may run again, alone or in another batch).

        Raises:
            ConfigError: ``work``'s statements hold NUL (nothing of it was written).
            StoreError: ``work``'s own transaction failed (a failing batch is retried one
                item at a time, so one caller's failure is not another's), a statement ran
                out of time, or the store was unavailable for ``retry_for`` seconds.
        """
        self._check_process()
        await self._group.submit(work)

    @abstractmethod
    async def _attempt(self, body: Body[T]) -> T:
        """One attempt at ``body``'s transaction.

        Raises:
            UnavailableError: nothing of it committed, and another attempt may succeed.
            FateUnknownError: it was lost as it committed.
            ConfigError, StoreError: it failed for good (nothing committed).
        """

    @abstractmethod
    async def _commit(self, batch: list[Work]) -> list[BaseException | None]:
        """Commit ``batch`` in one transaction, or, if that fails for one of its works, each
        work in its own; return each work's error: :class:`UnavailableError` for a batch the
        database lost before it committed (it is submitted again), :class:`FateUnknownError` for
        one lost as it committed."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connection; idempotent."""


@dataclass
class _Retrying:
    """One call's retries: backoff, the time bound, and the store's one-line outage log."""

    db: Database
    started: float = field(default_factory=time.monotonic)
    backoff: float = _FIRST_BACKOFF

    async def wait(self, error: BaseException) -> None:
        """Wait before the next attempt; or raise StoreError once ``retry_for`` (or the
        caller's :func:`patience`) has passed."""
        db, now, bound = self.db, time.monotonic(), self.bound()
        if db._outage_since is None:
            db._outage_since = now
            logger.warning(
                "store %s unavailable (%s); trying again for up to %g s", db.where, error, db.retry_for
            )
        if now - self.started >= bound:
            raise StoreError(f"the store at {db.where} was unavailable for {bound:g} s: {error}") from None
        await anyio.sleep(min(self.backoff, max(0.0, self.started + bound - now)))
        self.backoff = min(self.backoff * 2, _MAX_BACKOFF)

    async def learn_fate(self, lost: FateUnknownError) -> bool:
        """Ask, until ``retry_for`` has passed, whether a transaction lost as it committed
        did commit. ``False``: it did not (run it again). Raises StoreError when it cannot
        be told."""
        while True:
            try:
                with anyio.CancelScope(shield=True):
                    committed = await lost.ask()
            except UnavailableError as error:
                committed, lost = None, FateUnknownError(str(error), lost.ask)
            if committed is not None:
                return committed
            if time.monotonic() - self.started >= self.bound():
                raise StoreError(
                    f"the store at {self.db.where} lost a transaction as it committed, and could not say"
                    f" within {self.bound():g} s whether it did: {lost}"
                )
            await self.wait(lost)

    def bound(self) -> float:
        """Seconds this call tries: the store's ``retry_for``, or less, the caller's patience."""
        given = _patience.get()
        return self.db.retry_for if given is None else min(self.db.retry_for, given)

    def done(self) -> None:
        db = self.db
        if db._outage_since is not None:
            logger.warning(
                "store %s available again after %.1f s", db.where, time.monotonic() - db._outage_since
            )
            db._outage_since = None


def commit_in_thread(
    statements: Statements,
    begin: Callable[[], object],
    commit: Callable[[], object],
    rollback: Callable[[], object],
    batch: list[Work],
    *,
    lost: Callable[[BaseException], BaseException | None],
) -> list[BaseException | None]:
    """The synchronous body of a group commit: the batch in one transaction, else one by one.
    ``lost`` maps an error to :class:`UnavailableError` or :class:`FateUnknownError` when the database
    lost the transaction (then the batch stops: its works' own errors are not known)."""

    def attempt(works: list[Work]) -> BaseException | None:
        try:
            begin()
            for work in works:
                work(statements)
            commit()
        except Exception as error:  # noqa: BLE001 - handed to the submitter
            if (mapped := lost(error)) is not None:
                return mapped
            rollback()
            return error
        return None

    error = attempt(batch)
    if error is None or len(batch) == 1 or isinstance(error, (UnavailableError, FateUnknownError)):
        return [error] * len(batch)
    errors: list[BaseException | None] = []
    for index, work in enumerate(batch):
        errors.append(error := attempt([work]))
        if isinstance(error, (UnavailableError, FateUnknownError)):  # the rest were not tried
            return errors + [UnavailableError(str(error))] * (len(batch) - index - 1)
    return errors


@dataclass(eq=False)
class _Submitted:
    work: Work
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None


class _GroupCommit:
    """Leader/follower group commit: a submitter that finds no batch committing commits
    everything pending; the others wait for that batch's end, all woken at once (waiting on
    a lock instead, each would take it in turn, one event-loop iteration each, only to find
    its work done: under load that queue, not the database, set the pace)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: list[_Submitted] = []
        self._committing: anyio.Event | None = None  # set when the batch committing ends

    async def submit(self, work: Work) -> None:
        submitted = _Submitted(work)
        self._pending.append(submitted)
        while not submitted.done.is_set():
            if self._committing is not None:
                await self._committing.wait()
                continue
            self._committing = committing = anyio.Event()
            batch, self._pending = self._pending, []
            try:
                await self._commit(batch)
            finally:
                # A leader cancelled between attempts: nothing of what is not settled was
                # written. Its own work ends with it; the others' go back to be led again
                # (one task's cancellation is not another's failure).
                if not submitted.done.is_set():
                    submitted.error = StoreError("the store's batch was interrupted before it committed")
                    submitted.done.set()
                self._pending[:0] = [each for each in batch if not each.done.is_set()]
                self._committing = None
                committing.set()
        if submitted.error is not None:
            raise submitted.error

    async def _commit(self, batch: list[_Submitted]) -> None:
        """Commit ``batch``, again while the database loses it, and settle each submitter."""
        retrying = _Retrying(self._db)
        while batch:
            # Shielded: once a batch may be committing, its fate must be known (a submitter
            # that retried a write of unknown fate would write it twice). Attempts are bounded.
            with anyio.CancelScope(shield=True):
                try:
                    errors = await self._db._commit([s.work for s in batch])
                except Exception as failure:  # noqa: BLE001 - the whole batch's fate
                    errors = [failure] * len(batch)
            again: list[_Submitted] = []
            lost: BaseException | None = None
            for each, error in zip(batch, errors, strict=True):
                settled = error
                if isinstance(error, FateUnknownError):
                    try:
                        committed = await retrying.learn_fate(error)
                    except StoreError as unknown:
                        settled = unknown
                    else:
                        settled = None if committed else UnavailableError(str(error))
                if isinstance(settled, UnavailableError):
                    again.append(each)
                    lost = settled
                    continue
                each.error = settled
                each.done.set()
            if again:
                try:
                    await retrying.wait(lost or UnavailableError("lost"))
                except StoreError as gave_up:
                    for each in again:
                        each.error = gave_up
                        each.done.set()
                    return
            else:
                retrying.done()
            batch = again


def first_line(error: BaseException) -> str:
    """The first line of what ``error`` says, or its type's name."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
