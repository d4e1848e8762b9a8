"""A thin client of ``nodeprov serve`` (httpx), mirroring the library's run API:
:meth:`Client.start`, :meth:`Client.events` (server-sent events, reconnecting with
``Last-Event-ID`` so nothing is missed or repeated), :meth:`Client.pause`,
:meth:`Client.resume`, and the node operations. Every failure the service answers is an
:class:`ApiError` with its status and code. Needs the ``serve`` extra."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Self

import anyio
import httpx

from ..errors import NodeprovError
from ..runs.events import RunEvent, RunFinished, event_from_json

__all__ = ["ApiError", "Client", "ExecResult"]

_LIVE = ("starting", "running", "pausing", "finishing")


class ApiError(NodeprovError):
    """The service refused or failed a call: ``status`` (HTTP), ``code`` (its stable word:
    ``invalid``, ``run_not_found``, ``unauthorized``...) and its one-line message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code


class ExecResult:
    """A command's output and exit status (``exit_code``; ``-SIGNAL`` when killed)."""

    def __init__(self, stdout: bytes, stderr: bytes, exit_code: int | None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code


class Client:
    """A client of the service at ``base_url`` with bearer ``token`` (none: a service open on
    loopback). Use it as an async context manager, or :meth:`aclose` it."""

    def __init__(
        self, base_url: str, token: str | None = None, *, timeout: float = 60.0, reconnect_delay: float = 0.5
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)
        self._reconnect_delay = reconnect_delay

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Raises: ApiError: the service answered a failure."""
        response = await self._http.request(method, path, **kwargs)
        _check(response)
        return response.json() if response.content else None

    # -- runs ------------------------------------------------------------------------

    async def start(
        self,
        prompt: str | list[dict[str, Any]],
        *,
        provider: str | None = None,
        pool: str | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Start a run on a node of ``provider``, or one claimed from the warm ``pool`` (the
        fields of ``POST /v1/runs``: settings, agent, model, permission, options, env,
        output_schema, workspace, keep_node, pause_after_turn, agent_grace, timeout,
        idle_timeout, node, pool_wait); returns the run. With ``idempotency_key``, a retry
        gets the same run."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"prompt": prompt, **_provider(provider), **({"pool": pool} if pool else {}), **fields}
        result: dict[str, Any] = await self._call("POST", "/v1/runs", json=body, headers=headers)
        return result

    async def run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/runs/{run_id}")
        return result

    async def runs(
        self, *, states: tuple[str, ...] = (), workspace: str | None = None
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"state": list(states)} if states else {}
        if workspace is not None:
            params["workspace"] = workspace
        result: list[dict[str, Any]] = await self._call("GET", "/v1/runs", params=params)
        return result

    async def pause(
        self,
        run_id: str,
        kind: str = "external",
        reason: str = "",
        *,
        keep_node: bool | None = None,
        wait: float = 60,
    ) -> dict[str, Any]:
        """Pause a run (on whichever replica drives it), waiting up to ``wait`` seconds."""
        body = {"kind": kind, "reason": reason, "keep_node": keep_node, "wait": wait}
        result: dict[str, Any] = await self._call("POST", f"/v1/runs/{run_id}/pause", json=body)
        return result

    async def resume(
        self, run_id: str, message: str | list[dict[str, Any]] = "continue", **fields: Any
    ) -> dict[str, Any]:
        """Resume a paused or failed run (the fields of ``POST /v1/runs/{id}/resume``)."""
        body = {"message": message, **fields}
        result: dict[str, Any] = await self._call("POST", f"/v1/runs/{run_id}/resume", json=body)
        return result

    async def events(self, run_id: str, *, after: int = 0, follow: bool = True) -> AsyncIterator[RunEvent]:
        """The run's events above ``after``, as :meth:`Orchestrator.events` gives them: with
        ``follow``, until a drive's ``run.finished`` leaves the run undriven. A dropped
        stream (a replica that stopped or died, a cutoff) is reconnected with
        ``Last-Event-ID``: every event comes once, in order.

        Raises:
            ApiError: the run does not exist, or the token may not read it.
        """
        last = after
        while True:
            finished = False
            try:
                async for event in self._stream(run_id, last, follow):
                    last = event.seq
                    finished = isinstance(event, RunFinished)
                    yield event
            except _NothingMore:
                return  # the run is over, and this client had all of it
            except (httpx.TransportError, httpx.RemoteProtocolError):
                await anyio.sleep(self._reconnect_delay)  # the replica went away: another answers
                continue
            if not follow:
                return
            if finished and (await self.run(run_id))["state"] not in _LIVE:
                return
            await anyio.sleep(self._reconnect_delay)

    async def _stream(self, run_id: str, after: int, follow: bool) -> AsyncIterator[RunEvent]:
        headers = {"Last-Event-ID": str(after), "Accept": "text/event-stream"}
        params = {"follow": "true" if follow else "false"}
        async with self._http.stream(
            "GET",
            f"/v1/runs/{run_id}/events",
            headers=headers,
            params=params,
            timeout=httpx.Timeout(None, connect=10),
        ) as response:
            if response.status_code == 204:
                raise _NothingMore
            if response.status_code >= 400:
                await response.aread()
                _check(response)
            data: list[str] = []
            name = ""
            async for line in response.aiter_lines():
                if line == "":
                    if data and not name:
                        yield event_from_json(json.loads("\n".join(data)))
                    data, name = [], ""
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line.startswith("event:"):
                    name = line[6:].strip()  # a "cutoff": the stream ends, and is reconnected

    async def wait(self, run_id: str) -> dict[str, Any]:
        """Follow the run until nobody drives it; the run as it ended."""
        async for _ in self.events(run_id):
            pass
        return await self.run(run_id)

    # -- nodes -----------------------------------------------------------------------

    async def provision(
        self,
        provider: str,
        settings: Mapping[str, Any] | None = None,
        *,
        node: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Provision a node; returns it (``node_id``, ``provider``, ``labels``...)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"provider": provider, "settings": dict(settings or {}), "node": dict(node or {})}
        result: dict[str, Any] = await self._call("POST", "/v1/nodes", json=body, headers=headers)
        return result

    async def nodes(self, provider: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", "/v1/nodes", params=_provider(provider))
        return result

    async def node(self, node_id: str, provider: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/nodes/{node_id}", params=_provider(provider))
        return result

    async def destroy(self, node_id: str, provider: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._call(
            "DELETE", f"/v1/nodes/{node_id}", params=_provider(provider)
        )
        return result

    async def exec(
        self,
        node_id: str,
        command: list[str],
        *,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        limit: float | None = None,
    ) -> ExecResult:
        """Run ``command`` on the node; its whole output and exit status. ``limit``: the
        service stops the command after that many seconds (and this raises ApiError)."""
        body: dict[str, Any] = {"command": command, "env": dict(env or {}), "cwd": cwd, "timeout": limit}
        if stdin:
            body["stdin"] = base64.b64encode(stdin).decode()
        out, err, code = bytearray(), bytearray(), None
        async with self._http.stream(
            "POST", f"/v1/nodes/{node_id}/exec", json=body, timeout=None
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                _check(response)
            async for line in response.aiter_lines():
                if not line:
                    continue
                item = json.loads(line)
                if "stream" in item:
                    (out if item["stream"] == "stdout" else err).extend(base64.b64decode(item["data"]))
                elif "exit_code" in item:
                    code = item["exit_code"]
                elif "error" in item:
                    raise ApiError(response.status_code, item["error"], item.get("message", ""))
        return ExecResult(bytes(out), bytes(err), code)

    async def upload(
        self, node_id: str, path: str, data: bytes | AsyncIterator[bytes], *, mode: int = 0o600
    ) -> dict[str, Any]:
        """Write ``data`` (bytes, or chunks streamed) to ``path`` on the node."""
        result: dict[str, Any] = await self._call(
            "PUT", f"/v1/nodes/{node_id}/files", params={"path": path, "mode": f"{mode:04o}"}, content=data
        )
        return result

    async def download(self, node_id: str, path: str) -> AsyncIterator[bytes]:
        """The file at ``path`` on the node, chunk by chunk.

        Raises:
            ApiError: no such file (404), a path outside the node (400).
        """
        async with self._http.stream("GET", f"/v1/nodes/{node_id}/files", params={"path": path}) as response:
            if response.status_code >= 400:
                await response.aread()
                _check(response)
            async for chunk in response.aiter_bytes():
                yield chunk

    # -- warm pools ------------------------------------------------------------------

    async def create_pool(self, name: str, *, provider: str, **fields: Any) -> dict[str, Any]:
        """Make a warm pool (the fields of ``POST /v1/pools``: settings, size, max_age,
        refill_concurrency, node); the service fills it. Returns the pool."""
        body = {"name": name, "provider": provider, **fields}
        result: dict[str, Any] = await self._call("POST", "/v1/pools", json=body)
        return result

    async def pools(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call("GET", "/v1/pools")
        return result

    async def pool(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/pools/{name}")
        return result

    async def remove_pool(self, name: str, *, wait: float = 30) -> bool:
        """Remove a pool; whether its nodes are gone within ``wait`` seconds (if not, its
        keeper goes on destroying them)."""
        response = await self._http.delete(f"/v1/pools/{name}", params={"wait": wait})
        _check(response)
        return response.status_code == 204

    # -- the rest --------------------------------------------------------------------

    async def providers(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call("GET", "/v1/providers")
        return result

    async def agents(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call("GET", "/v1/agents")
        return result


class _NothingMore(Exception):  # noqa: N818 - not an error: the answer 204
    """Nothing after the client's Last-Event-ID, and nobody drives the run (a reconnect
    that came after the run's end: one whose connection dropped after its last event)."""


def _provider(provider: str | None) -> dict[str, str]:
    return {"provider": provider} if provider else {}


def _check(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
        code, message = str(body["error"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", response.text[:200]
    raise ApiError(response.status_code, code, message)
