"""A response that streams what a *pump* sends: the pump runs in a task of its own and
closes what it opened itself (a process, a file being read), whether the answer ends or its
client leaves first (the pump is then cancelled at once, output or not)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ObjectSendStream, TaskStatus
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import leaf

__all__ = ["Pump", "PumpedResponse"]

Pump = Callable[[ObjectSendStream[bytes], TaskStatus[None]], Awaitable[None]]
"""Opens what it streams, calls ``task_status.started()``, then sends chunks to the stream.
An error before ``started()`` is the request's error (its status, its JSON body)."""

_BUFFER = 8  # chunks queued between the pump and a slow client


class PumpedResponse(Response):
    """Streams ``pump``'s chunks as ``media_type`` (see the module)."""

    def __init__(self, pump: Pump, media_type: str) -> None:
        # As a StreamingResponse does: no body, so no Content-Length (the answer is chunked).
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.init_headers()
        self._pump = pump

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._stream(receive, send)
        except BaseExceptionGroup as group:  # the pump's own error, for the exception handlers
            raise leaf(group) from None

    async def _stream(self, receive: Receive, send: Send) -> None:
        sink, source = anyio.create_memory_object_stream[bytes](_BUFFER)
        async with anyio.create_task_group() as tg, source:

            async def pump(*, task_status: TaskStatus[None]) -> None:
                async with sink:
                    await self._pump(sink, task_status)

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            await tg.start(pump)  # its error, before anything is sent, is the answer
            tg.start_soon(watch_disconnect)
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in source:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()
