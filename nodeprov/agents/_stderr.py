"""An agent process's stderr, drained in a task of its own while its session reads stdout (a
full pipe would stall the agent), its last lines kept for the error that says how it ended."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import anyio

from ..errors import NodeprovError
from ..spawn import SpawnedProcess
from ._detached import Detached

__all__ = ["StderrTail"]

logger = logging.getLogger("nodeprov.agents")

_LINES = 20
_LINE_CHARS = 2000  # of a line kept


class StderrTail:
    """Drains ``process``'s stderr from construction: its last lines kept (:attr:`text`), each
    line passed to ``on_line`` when given (a callback that raises is logged, and the draining
    goes on); a line longer than ``max_line`` bytes is cut there."""

    def __init__(
        self,
        process: SpawnedProcess,
        *,
        max_line: int = 1024 * 1024,
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self._lines: deque[str] = deque(maxlen=_LINES)
        self._max_line, self._on_line = max_line, on_line
        self._task = Detached(self._drain(process))

    @property
    def text(self) -> str:
        """The last lines the process wrote to stderr."""
        return "\n".join(self._lines)

    @property
    def last(self) -> str | None:
        """The last line it wrote, if any."""
        return self._lines[-1] if self._lines else None

    async def settled(self) -> None:
        """Wait, a second at most, for the rest of stderr (the process ended)."""
        with anyio.move_on_after(1):
            await self._task.wait()

    async def aclose(self) -> None:
        """Stop draining, once the rest was read or a second passed; never raises."""
        await self.settled()
        self._task.cancel()

    def _emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if not line:
            return
        self._lines.append(line[:_LINE_CHARS])
        if self._on_line is not None:
            try:
                self._on_line(line)
            except Exception:  # a broken callback must not stop the draining
                logger.debug("the stderr callback raised", exc_info=True)

    async def _drain(self, process: SpawnedProcess) -> None:
        pending = bytearray()
        try:
            async for chunk in process.stderr:
                *lines, tail = chunk.split(b"\n")
                for piece in lines:
                    line = piece
                    if pending:
                        line, pending = bytes(pending + piece), bytearray()
                    self._emit(line)
                pending += tail
                if len(pending) > self._max_line:
                    self._emit(bytes(pending))
                    pending = bytearray()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, NodeprovError):
            pass
        finally:
            self._emit(bytes(pending))
