"""The event journal: each drive's events in sequence, fanned out to live subscribers, written
to the store in batches with the agents' transcript frames, and replayed from the store to
a subscriber that came late, lags, or lives in another process."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any

import anyio

from .._json import loads
from ..agents import StateKey
from ..errors import RunStateError, log_failure
from ..store import EntryBatch, EventRecord, Store, entry_key, now
from ..store.entries import Fold
from .events import RunEvent, RunFinished, event_from_json
from .state import RunState

__all__ = ["Journal", "RunEvents", "event_record", "stored_event"]

logger = logging.getLogger("nodeprov.runs")

_SUBSCRIBER_BUFFER = 1024  # events a subscriber may lag before it reads from the store instead
_FLUSH_GATHER = 0.02  # how long the writer lets events and transcript frames gather, while
# no reader waits for the store before relaying (a service's client does): then the writer
# commits at once, and what comes while it commits gathers for the next (group commit).


class Journal:
    """The orchestrator's journal of its runs' events and their agents' transcript frames.

    What is queued is written by :meth:`write_forever` in one grouped transaction at most
    every 20 ms, or as soon as the previous one committed while a reader waits for stored
    events (:attr:`durable_readers`), or at once by :meth:`flush`.
    """

    def __init__(self, store: Store, writer: Callable[[], str]) -> None:
        self._store = store
        self._writer = writer  # this control plane's owner name now: its runs' events alone are stored
        self._pending_events: list[tuple[RunEvent, RunEvents]] = []  # with the drive that emitted each
        # One batch per session and fold, in the order its frames came: runs interleave, and
        # each batch costs the store a few statements whatever its size.
        self._pending_frames: dict[tuple[Any, ...], EntryBatch] = {}
        self._waiting = anyio.Event()
        self._flushing: anyio.Event | None = None  # set when the flush under way ends
        self._flushes_begun = self._flushes_done = 0  # ... and the number of each that wrote
        self.durable_readers = 0
        """Readers waiting for events to be stored (see :meth:`RunEvents.replay`)."""

    def stream(self, run_id: str, first_seq: int) -> RunEvents:
        """The events of a new drive of ``run_id``, numbered from ``first_seq``."""
        return RunEvents(self, self._store, run_id, first_seq)

    def queue_frames(self, key: StateKey, entries: list[Any], summarize: Fold | None = None) -> None:
        """Queue transcript ``entries`` filed under ``key`` for the next write, folded into the
        session's summary by ``summarize`` (the agent's, if it keeps one)."""
        # Keyed once, here: a batch written again after an unknown fate stores nothing twice.
        self._queue_batch(EntryBatch(key, [(entry_key(entry), entry) for entry in entries], summarize))
        self._waiting.set()

    def _queue_batch(self, batch: EntryBatch) -> None:
        slot = (*sorted(batch.key.items()), batch.fold)
        if (pending := self._pending_frames.get(slot)) is not None:
            pending.entries.extend(batch.entries)
        else:
            self._pending_frames[slot] = batch

    def retry_soon(self) -> None:
        """Have the writer try again: a flush outside it failed."""
        self._waiting.set()

    def _queue_event(self, event: RunEvent, events: RunEvents) -> None:
        self._pending_events.append((event, events))
        self._waiting.set()

    async def write_forever(self) -> None:
        """Write what is queued, as it comes; a failed write is logged and tried again."""
        while True:
            await self._waiting.wait()
            self._waiting = anyio.Event()
            if not self.durable_readers:
                await anyio.sleep(_FLUSH_GATHER)  # a batch gathers
            try:
                await self.flush()
            except Exception as error:  # noqa: BLE001 - logged (log_failure)
                log_failure(logger, error, "could not write run events; trying again")
                self._waiting.set()
                await anyio.sleep(1)

    async def flush(self) -> None:
        """Write every pending event and transcript frame to the store, in one grouped
        transaction. One flush runs at a time, so frames reach the store in their order; a
        caller that finds one under way waits for the next to begin and end (it writes what
        was pending when the caller came), together with every other such caller.

        Raises:
            StoreError: the store failed; what was pending stays pending.
        """
        wanted = self._flushes_begun + 1  # the first flush to begin from now on
        while self._flushes_done < wanted:
            if self._flushing is not None:
                await self._flushing.wait()
                continue
            self._flushing = flushing = anyio.Event()
            self._flushes_begun += 1
            try:
                await self._write_pending()
                self._flushes_done = self._flushes_begun
            finally:
                self._flushing = None
                flushing.set()

    async def _write_pending(self) -> None:
        batch, self._pending_events = self._pending_events, []
        frames, self._pending_frames = list(self._pending_frames.values()), {}
        if not batch and not frames:
            return
        try:
            await self._store.append_events(
                [event_record(event) for event, _ in batch], frames, writer=self._writer()
            )
        except BaseException:
            self._pending_events[:0] = batch
            queued_since, self._pending_frames = self._pending_frames.values(), {}
            for frame in (*frames, *queued_since):  # what failed goes first
                self._queue_batch(frame)
            raise
        written = {(event.run_id, event.seq) for event, _ in batch}
        for events in {events for _, events in batch}:
            events._written(written)

    async def follow(
        self,
        run_id: str,
        *,
        after: int,
        follow: bool,
        live: Callable[[str], RunEvents | None],
        alive: Callable[[str], Awaitable[bool | None]],
        poll_interval: float,
    ) -> AsyncIterator[RunEvent]:
        """The events of any run above sequence ``after``: those of its drive here (``live``
        gives it), else those in the store, polled every ``poll_interval`` with ``follow``
        until the run's drive ended with nobody driving it, or its owner is known to be gone
        (``alive`` says; see :meth:`Orchestrator.events`). A drive's events too come only once
        they are in the store (``durable``, see :meth:`RunEvents.replay`): what such a reader
        relays, the store keeps, whatever becomes of this process.

        Raises:
            RunStateError: there is no such run.
            StoreError: the store could not be read.
        """
        if await self._store.run(run_id) is None:
            raise RunStateError(f"no run {run_id}")
        last, ended = after, False
        while True:
            events = live(run_id)
            if events is not None:
                async for event in events.replay(after=last, durable=True):
                    last = event.seq
                    ended = isinstance(event, RunFinished)
                    yield event
                continue  # it may have been resumed here meanwhile
            stored = await self._store.events(run_id, after=last)
            for item in stored:
                last = item.seq
                if (readable := stored_event(item)) is not None:
                    ended = isinstance(readable, RunFinished)
                    yield readable
            if stored:
                continue
            if not follow:
                return
            record = await self._store.run(run_id)
            if ended and record is not None and not RunState(record.state).live:
                return
            orphaned = record is not None and RunState(record.state).live and live(run_id) is None
            if orphaned and record is not None and await alive(record.owner) is False:
                return  # its control plane is gone: nobody will write more (reconcile ends it)
            await anyio.sleep(poll_interval)


class _Subscriber:
    """One reader of a run's live events; one that lags too far is told to read the store."""

    def __init__(self, *, durable: bool) -> None:
        self.durable = durable  # pushed events once written, not once emitted
        self.queue: deque[RunEvent | None] = deque()  # None: the drive ended
        self.overflowed = False
        self.ready = anyio.Event()

    def push(self, event: RunEvent | None) -> None:
        if event is not None and len(self.queue) >= _SUBSCRIBER_BUFFER:
            self.queue.clear()
            self.overflowed = True
        else:
            self.queue.append(event)
        self.ready.set()


class RunEvents:
    """The events of one drive of a run: numbered in sequence, queued in the journal, fanned
    out to subscribers, and replayed from the store to a late or lagging one."""

    def __init__(self, journal: Journal, store: Store, run_id: str, first_seq: int) -> None:
        self.run_id = run_id
        self.first_seq = first_seq
        """The sequence number of this drive's ``run.started`` (a resume continues the run's)."""
        self._journal = journal
        self._store = store
        self._next_seq = first_seq
        self._unwritten: list[RunEvent] = []  # emitted, not yet in the store
        self._subscribers: list[_Subscriber] = []
        self._ended = anyio.Event()

    @property
    def unwritten(self) -> list[RunEvent]:
        """The events emitted and not yet written to the store (a copy)."""
        return list(self._unwritten)

    def emit(self, event_type: type[RunEvent], **fields: Any) -> None:
        """Number a new event of ``event_type``, queue it for the store, and hand it to the
        subscribers."""
        event = event_type(run_id=self.run_id, seq=self._next_seq, at=now(), **fields)
        self._next_seq += 1
        self._unwritten.append(event)
        self._journal._queue_event(event, self)
        for subscriber in self._subscribers:
            if not subscriber.durable:
                subscriber.push(event)

    def end(self) -> None:
        """The drive ended: release its waiters and end its subscriptions."""
        self._ended.set()
        for subscriber in self._subscribers:
            subscriber.push(None)

    async def wait_ended(self) -> None:
        """Wait until :meth:`end`."""
        await self._ended.wait()

    def _written(self, written: set[tuple[str, int]]) -> None:
        done = [e for e in self._unwritten if (e.run_id, e.seq) in written]
        self._unwritten = [e for e in self._unwritten if (e.run_id, e.seq) not in written]
        for subscriber in self._subscribers:
            if subscriber.durable:
                for event in done:
                    subscriber.push(event)

    async def replay(self, *, after: int | None = None, durable: bool = False) -> AsyncIterator[RunEvent]:
        """This drive's events from its ``run.started`` (from the store first), or, with
        ``after``, every event of the run above that sequence number; then live ones,
        until the drive ends (see :meth:`Run.events`). With ``durable``, live events only
        once they are written to the store: what a reader in another process relays to its
        clients must never be an event that the store, should this process die, will not
        have (a reconcile numbers the run's last event after the stored ones); those left
        unwritten when the drive ends are the caller's to read from the store.

        Raises:
            StoreError: the store could not be read.
        """
        subscriber = _Subscriber(durable=durable)
        self._journal.durable_readers += durable
        if not self._ended.is_set():
            self._subscribers.append(subscriber)  # before the history is read: nothing is missed
        else:
            subscriber.push(None)
        last = self.first_seq - 1 if after is None else after
        try:
            while True:
                subscriber.overflowed = False
                await self._journal.flush()
                # Taken before the store is read: an event emitted before this subscriber came
                # and written while the store is read (so missing from what it returns) is in
                # one or the other, never in neither.
                unwritten = [] if durable else list(self._unwritten)
                while records := await self._store.events(self.run_id, after=last):
                    for record in records:
                        last = record.seq
                        if (stored := stored_event(record)) is not None:
                            yield stored
                for event in unwritten:
                    if event.seq > last:
                        last = event.seq
                        yield event
                while not subscriber.overflowed:
                    if not subscriber.queue:
                        subscriber.ready = anyio.Event()
                        await subscriber.ready.wait()
                        continue
                    item = subscriber.queue.popleft()
                    if item is None:
                        return
                    if item.seq > last:
                        last = item.seq
                        yield item
        finally:
            self._journal.durable_readers -= durable
            with suppress(ValueError):
                self._subscribers.remove(subscriber)


def event_record(event: RunEvent) -> EventRecord:
    """``event`` as the store keeps it."""
    return EventRecord(event.run_id, event.seq, event.kind, event.at, event.encoded)


def stored_event(record: EventRecord) -> RunEvent | None:
    """The event stored as ``record``; ``None`` (logged) for one this version cannot read,
    such as a kind added by a newer control plane: followers go on past it."""
    try:
        event = event_from_json(loads(record.body))
    except (ValueError, TypeError) as error:
        logger.warning("skipping unreadable event %d of run %s: %s", record.seq, record.run_id, error)
        return None
    event.__dict__["encoded"] = record.body  # its encoding, as stored: a relay need not make it again
    return event
