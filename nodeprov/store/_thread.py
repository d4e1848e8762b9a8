"""One thread that runs a connection's calls, in order, for the event loop.

A store's connection is used by one thread at a time, and a run makes dozens of calls on
it (about 36 per run of ``bench.scale``: a transaction is a hop for ``BEGIN``, one per
statement, one for ``COMMIT``). Through ``anyio.to_thread.run_sync`` each hop costs the
event loop about 60 µs of CPU here (a capacity limiter, cancel scopes, a worker pool's
bookkeeping); through this thread, a queue put and one loop callback: about 8 µs (5,000
calls of a no-op from 10 tasks each way, in one process, 2026-11-28).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

import anyio

__all__ = ["ConnectionThread"]

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


class ConnectionThread:
    """Runs calls one at a time in a thread of its own, started at the first call and ended
    by :meth:`stop`. A daemon thread: a store never closed does not keep the process up."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._start_lock = threading.Lock()

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in the thread, after the calls queued before it; its result or
        its exception. Once queued, the call is waited for even if the caller is cancelled
        (like ``anyio.to_thread.run_sync``): the connection must be free when this returns."""
        return await self.wait(self.submit(function, *args))

    def submit(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Queue ``function(*args)`` (now: nothing queued after this runs before it); its
        outcome, for :meth:`wait`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._started().put((loop, future, function, args))
        return future

    @staticmethod
    async def wait(future: asyncio.Future[T]) -> T:
        """The outcome of a call :meth:`submit` queued, waited for even if the caller is
        cancelled."""
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def stop(self) -> None:
        """End the thread once the calls queued before this ran (idempotent)."""
        with self._start_lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None

    def _started(self) -> queue.SimpleQueue[_Job | None]:
        with self._start_lock:
            if self._pid != os.getpid():  # a child made by fork(): the thread stayed in its parent
                self._jobs, self._thread, self._pid = queue.SimpleQueue(), None, os.getpid()
            if self._thread is None:
                self._thread = threading.Thread(target=_serve, args=(self._jobs,), name=self._name)
                self._thread.daemon = True
                self._thread.start()
        return self._jobs


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while (job := jobs.get()) is not None:
        loop, future, function, args = job
        try:
            result, error = function(*args), None
        except BaseException as raised:  # noqa: BLE001 - handed to the caller, whatever it is
            result, error = None, raised
        with suppress(RuntimeError):  # the loop closed: nobody waits for it
            loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
