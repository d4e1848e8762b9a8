"""A task outside any task group, for what must run beside an object that has no task group
of its own (an agent process's stderr, drained while a session reads its stdout): anyio's
task groups tie their cancel scope to the task that entered them, and a session's methods
and generators may run in any task (a generator's finalizer among them). On asyncio, the
event loop nodeprov runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import anyio

__all__ = ["Detached"]


class Detached:
    """``coroutine`` run as a detached task of the running asyncio event loop: cancel it from
    any task, wait for its end without being tied to it."""

    def __init__(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._done = anyio.Event()
        self._scope = anyio.CancelScope()
        self._task = asyncio.get_running_loop().create_task(self._run(coroutine))

    async def _run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        try:
            with self._scope:
                await coroutine
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        """Whether the task has ended."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the task (it sees cancellation at its next checkpoint); idempotent."""
        self._scope.cancel()

    async def wait(self) -> None:
        """Wait for the task's end (a failure of its own is its, not the waiter's)."""
        await self._done.wait()
