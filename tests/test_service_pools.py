"""Warm pools over HTTP (``nodeprov serve``): made, filled by the service, listed and read,
claimed by a run (``"pool": NAME``), refilled, shown in /metrics, removed with nothing left;
and the errors of each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from nodeprov.registry import get_provider
from tests.serving import fake_run, serving

pytestmark = pytest.mark.anyio


async def _pool(client: httpx.AsyncClient, name: str, *, ready: int) -> dict[str, Any]:
    """The pool once it has ``ready`` nodes and none starting."""
    with anyio.fail_after(60):
        while True:
            body: dict[str, Any] = (await client.get(f"/v1/pools/{name}")).json()
            if body["ready"] == ready and body["starting"] == 0:
                return body
            await anyio.sleep(0.05)


async def local_nodes(tmp_path: Path) -> set[str]:
    return {info.node_id for info in await get_provider("local", root=str(tmp_path / "nodes")).list_nodes()}


async def test_a_pool_made_filled_claimed_refilled_and_removed_over_http(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"poll_interval": 0.05}) as served, served.client() as client:
        made = await client.post(
            "/v1/pools",
            json={"name": "warm", "provider": "local", "size": 2, "node": {"labels": {"team": "a"}}},
        )
        assert made.status_code == 201, made.text
        assert made.json()["name"] == "warm"
        pool = await _pool(client, "warm", ready=2)
        assert pool["held"] is True
        assert pool["node"]["labels"] == {"team": "a"}
        assert [p["name"] for p in (await client.get("/v1/pools")).json()] == ["warm"]
        before = await local_nodes(tmp_path)
        body = fake_run(tmp_path, [{"text": "hello"}])
        del body["provider"]
        started = await client.post("/v1/runs", json=body | {"pool": "warm"})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        events = await client.get(f"/v1/runs/{run_id}/events")
        ready = next(
            json.loads(line[5:])
            for line in events.text.splitlines()
            if line.startswith("data:") and "node.ready" in line
        )
        assert ready["pool"] == "warm"
        assert ready["node_id"] in before
        await _pool(client, "warm", ready=2)
        metrics = (await client.get("/metrics")).text
        assert 'nodeprov_pool_nodes{pool="warm",state="ready"} 2.0' in metrics
        removed = await client.delete("/v1/pools/warm")
        assert removed.status_code == 204
        assert (await client.get("/v1/pools/warm")).status_code == 404
        assert await local_nodes(tmp_path) == set()


async def test_pool_errors_over_http(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"poll_interval": 0.05}) as served, served.client() as client:
        assert (
            await client.post("/v1/pools", json={"name": "w", "provider": "local", "size": 0})
        ).status_code == 201
        again = await client.post("/v1/pools", json={"name": "w", "provider": "local"})
        assert (again.status_code, again.json()["error"]) == (409, "pool_exists")
        bad = await client.post("/v1/pools", json={"name": "Bad Name", "provider": "local"})
        assert bad.status_code == 422
        unknown = await client.post("/v1/pools", json={"name": "x", "provider": "local", "colour": "red"})
        assert unknown.status_code == 422
        both = await client.post("/v1/runs", json=fake_run(tmp_path, [], pool="w"))
        assert both.status_code == 422
        assert "not both" in both.json()["message"]
        body = fake_run(tmp_path, [])
        del body["provider"]
        missing = await client.post("/v1/runs", json=body | {"pool": "nope"})
        assert (missing.status_code, missing.json()["error"]) == (404, "pool_not_found")
        templated = await client.post("/v1/runs", json=body | {"pool": "w", "node": {"labels": {"a": "b"}}})
        assert templated.status_code == 422
        assert (await client.get("/v1/pools/nope")).status_code == 404
        assert (await client.delete("/v1/pools/nope")).status_code == 404
