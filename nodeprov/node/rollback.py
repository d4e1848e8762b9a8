"""Undoing a half-finished provision: :class:`Rollback`."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Self

import anyio

__all__ = ["Rollback"]

logger = logging.getLogger("nodeprov")


class Rollback:
    """Undo steps of a half-finished provision, in reverse, if it fails or is cancelled.

    ::

        async with Rollback() as rollback:
            thing = await create()
            rollback.push(lambda: delete(thing))
            ...                                 # raise or get cancelled here: delete runs
        # success: the undo steps are dropped

    The undo steps run shielded from cancellation, bounded by ``timeout`` seconds in all.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._stack = AsyncExitStack()

    def push(self, undo: Any) -> None:
        """Register ``undo``, an async callable taking no arguments."""

        async def run(*_exc: object) -> None:
            await undo()

        self._stack.push_async_exit(run)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self._stack.pop_all()
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout) as deadline:
            try:
                await self._stack.aclose()
            except Exception as error:  # noqa: BLE001 - the provision's own error is what propagates
                logger.warning(
                    "undoing a failed provision failed (%s); what it made carries labels for gc",
                    str(error).splitlines()[0] if str(error) else type(error).__name__,
                )
        if deadline.cancelled_caught:
            logger.warning(
                "undoing a failed provision took over %gs; what it made carries labels for gc", self.timeout
            )
