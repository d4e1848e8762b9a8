"""A run's events as server-sent events (``GET /v1/runs/{id}/events``).

Each event is ``id: SEQ`` and ``data: JSON`` (:meth:`~nodeprov.runs.RunEvent.to_json`, its
``type`` inside), unnamed, so an ``EventSource``'s ``onmessage`` gets every one. The history
comes from the store, live events from the drive (on this replica) or the store (polled,
for a run another replica drives). Comment lines (``: ping``) keep an idle stream open
through proxies.

Nothing is held for a slow client beyond what it has not read: a live event that reaches
the client more than ``max_lag`` seconds after it happened ends the stream with a last
event named ``cutoff`` (``{"reason", "last_event_id"}``), and a client that reads nothing
for ``send_timeout`` seconds is disconnected. Either reconnects with ``Last-Event-ID`` and
reads on from the store. A stopping replica ends its streams at once: their clients
reconnect to another.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, suppress
from datetime import datetime
from functools import partial

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..runs import RunState
from .state import Service

__all__ = ["event_stream"]

logger = logging.getLogger("nodeprov.service")


_DRAIN_GRACE = 1.0  # a stream that has not ended this long after the server began to stop is cut
_BATCH = 64  # events the relay may run ahead of the client's writes, and written at once


def event_stream(service: Service, run_id: str, *, after: int, follow: bool) -> EventSourceResponse:
    """The response streaming ``run_id``'s events above sequence ``after``; it ends, cleanly,
    as soon as the server begins to stop (sse-starlette sets ``stopping``)."""
    stopping = anyio.Event()
    sink, source = anyio.create_memory_object_stream[ServerSentEvent | bytes](_BATCH)
    return EventSourceResponse(
        _drained(source),
        data_sender_callable=partial(_relay, _events(service, run_id, after, follow), sink, stopping),
        shutdown_event=stopping,
        shutdown_grace_period=_DRAIN_GRACE,
        ping=service.config.heartbeat,
        send_timeout=service.config.send_timeout,
        headers={"Cache-Control": "no-store"},
    )


async def _relay(
    events: AsyncGenerator[ServerSentEvent | bytes, None],
    sink: MemoryObjectSendStream[ServerSentEvent | bytes],
    stopping: anyio.Event,
) -> None:
    """Hand ``events`` to the response until they end or ``stopping`` is set: either way the
    response then ends its body (a stream cut short instead would leave its client an
    incomplete answer, and the server an error in its log)."""
    async with sink, aclosing(events), anyio.create_task_group() as tg:

        async def stop() -> None:
            await stopping.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(stop)
        async for event in events:
            await sink.send(event)
        tg.cancel_scope.cancel()


async def _drained(source: MemoryObjectReceiveStream[ServerSentEvent | bytes]) -> AsyncIterator[bytes]:
    """What the relay handed over, in chunks: whatever is waiting goes in one write (events
    stored together come together), where a write per event costs a send each."""
    async with source:
        async for first in source:
            chunk = [first]
            with suppress(anyio.WouldBlock):
                while len(chunk) < _BATCH:
                    chunk.append(source.receive_nowait())
            yield b"".join(item.encode() if isinstance(item, ServerSentEvent) else item for item in chunk)


async def _events(
    service: Service, run_id: str, after: int, follow: bool
) -> AsyncGenerator[ServerSentEvent | bytes, None]:
    metrics, max_lag = service.metrics, service.config.max_lag
    connected = time.time()
    last = after
    metrics.streams.inc()
    try:
        while True:
            events = service.orchestrator.events(run_id, after=last, follow=follow)
            async with aclosing(events):  # type: ignore[type-var]  # an async generator: it has aclose
                async for event in events:
                    happened = datetime.fromisoformat(event.at).timestamp()
                    lag = time.time() - happened
                    if happened > connected and lag > max_lag:  # a live event, and the client is behind
                        metrics.streams_cut.inc()
                        yield _cutoff(f"the client read too slowly: {lag:.1f} s behind the run", last)
                        return
                    # One data line: JSON has no raw newline. Formatted here, not by the
                    # library's encoder, which splits and escapes for any text.
                    yield f"id: {event.seq}\r\ndata: {event.encoded}\r\n\r\n".encode()
                    last = event.seq
                    metrics.events_relayed.inc()
                    metrics.relay_latency.observe(max(lag, 0.0))
            if not follow:
                return
            record = await service.store.run(run_id)
            if record is None or not RunState(record.state).live:
                return
            # Its control plane is gone: a reconcile (any replica's) ends the run, and its
            # last events follow.
            await anyio.sleep(service.config.poll_interval)
    finally:
        metrics.streams.dec()


def _cutoff(reason: str, last: int) -> ServerSentEvent:
    logger.info("event stream cut off: %s", reason)
    return ServerSentEvent(json.dumps({"reason": reason, "last_event_id": last}), event="cutoff")
