"""``nodeprov serve`` when its store goes away: the PostgreSQL connection cut under it (a TCP
proxy the test closes) makes ``/readyz`` and the API answer 503 with the one error body, and
the service is ready again once the store is back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from anyio.abc import SocketStream, TaskGroup

from tests.serving import serving

pytestmark = pytest.mark.anyio


class _Proxy:
    """Relays TCP to ``target`` until :meth:`cut`, which drops every connection and refuses
    new ones until :meth:`restore`."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._open: set[anyio.CancelScope] = set()
        self.refusing = False

    async def handle(self, client: SocketStream) -> None:
        async with client:
            if self.refusing:
                return
            with anyio.CancelScope() as scope, suppress(OSError, anyio.BrokenResourceError):
                self._open.add(scope)
                try:
                    async with (
                        await anyio.connect_tcp(*self._target) as upstream,
                        anyio.create_task_group() as tg,
                    ):
                        tg.start_soon(_pipe, client, upstream, tg)
                        tg.start_soon(_pipe, upstream, client, tg)
                finally:
                    self._open.discard(scope)

    def cut(self) -> None:
        self.refusing = True
        for scope in list(self._open):
            scope.cancel()

    def restore(self) -> None:
        self.refusing = False


async def _pipe(source: SocketStream, sink: SocketStream, tg: TaskGroup) -> None:
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        async for chunk in source:
            await sink.send(chunk)
    tg.cancel_scope.cancel()


@asynccontextmanager
async def _proxied(url: str) -> AsyncIterator[tuple[_Proxy, str]]:
    parts = urlsplit(url)
    proxy = _Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    netloc = (
        parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{port}" if "@" in parts.netloc else f"127.0.0.1:{port}"
    )
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield proxy, urlunsplit(parts._replace(netloc=netloc))
        proxy.cut()
        tg.cancel_scope.cancel()


async def test_a_store_that_goes_away_makes_the_service_unready_then_ready_again(
    tmp_path: Path, postgres_url: str
) -> None:
    async with (
        _proxied(postgres_url) as (proxy, url),
        serving(tmp_path, store=url) as served,
        served.client() as client,
    ):
        assert (await client.get("/readyz")).status_code == 200
        proxy.cut()
        with anyio.fail_after(60):
            while (ready := await client.get("/readyz")).status_code == 200:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.1)
        assert (ready.status_code, ready.json()["error"]) == (503, "store_unavailable")
        refused = await client.get("/v1/runs")
        assert (refused.status_code, refused.json()["error"]) == (503, "store_unavailable")
        assert (await client.get("/healthz")).status_code == 200  # alive, only not ready
        proxy.restore()
        with anyio.fail_after(60):
            while (await client.get("/readyz")).status_code != 200:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.1)
        assert (await client.get("/v1/runs")).status_code == 200


async def test_text_with_nul_is_bad_input_on_postgres_too(tmp_path: Path, postgres_url: str) -> None:
    """PostgreSQL cannot hold NUL: the service says 422, as on SQLite, never 503."""
    from tests.test_service import nul_is_refused

    async with serving(tmp_path, store=postgres_url) as served:
        await nul_is_refused(served, tmp_path)
