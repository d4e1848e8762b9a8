"""``nodeprov.client`` against a real ``nodeprov serve``: the library's run API over HTTP
(start, events, pause, resume, wait), idempotent creation, nodes, and the service's errors
as ApiError."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.client import ApiError, Client
from nodeprov.runs import AgentMessage, RunFinished, RunPaused, RunStarted
from tests.serving import fake_run, serving

pytestmark = pytest.mark.anyio


async def test_runs_through_the_client(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}]
    async with serving(tmp_path) as served, Client(served.url) as client:
        body = fake_run(tmp_path, steps)
        run = await client.start(body.pop("prompt"), idempotency_key="k1", **body)
        assert (await client.start("do the task", idempotency_key="k1", **body))["id"] == run["id"]
        seen = []
        async for event in client.events(run["id"]):
            seen.append(event)
            if isinstance(event, AgentMessage) and getattr(event.message, "text", "") == "working":
                paused = await client.pause(run["id"], reason="later")
                assert paused["state"] == "paused"
        assert isinstance(seen[0], RunStarted)
        assert any(isinstance(e, RunPaused) for e in seen)
        assert isinstance(seen[-1], RunFinished)
        assert seen[-1].outcome == "paused"
        await client.resume(run["id"], "finish", env={"NODEPROV_FAKE_AGENT": json.dumps([{"text": "done"}])})
        ended = await client.wait(run["id"])
        assert (ended["state"], ended["outcome"]) == ("finished", "ok")
        replay = [e.seq async for e in client.events(run["id"], after=3, follow=False)]
        assert replay == list(range(4, len(replay) + 4))
        assert [r["id"] for r in await client.runs(states=("finished",))] == [run["id"]]
        with pytest.raises(ApiError) as missing:
            await client.run("run-nope")
        assert (missing.value.status, missing.value.code) == (404, "run_not_found")
        with pytest.raises(ApiError) as refused:
            await client.start("x", provider="nope")
        assert refused.value.status == 422


async def test_nodes_through_the_client(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, Client(served.url) as client:
        node = await client.provision("local", idempotency_key="n1")
        assert (await client.provision("local", idempotency_key="n1"))["node_id"] == node["node_id"]
        data = secrets.token_bytes(300_000)
        await client.upload(node["node_id"], "f.bin", data, mode=0o644)
        assert b"".join([chunk async for chunk in client.download(node["node_id"], "f.bin")]) == data
        ran = await client.exec(node["node_id"], ["sh", "-c", "wc -c; echo oops >&2; exit 4"], stdin=b"12345")
        assert (ran.stdout.strip(), ran.stderr, ran.exit_code) == (b"5", b"oops\n", 4)
        with pytest.raises(ApiError) as outside:
            async for _ in client.download(node["node_id"], "/etc/passwd"):
                pass
        assert outside.value.status == 400
        assert [n["node_id"] for n in (await client.nodes("local"))["nodes"]] == [node["node_id"]]
        assert (await client.destroy(node["node_id"]))["destroyed"] is True
        with pytest.raises(ApiError):
            await client.node(node["node_id"])
        assert {p["name"] for p in await client.providers()} >= {"local"}
        assert {a["name"] for a in await client.agents()} >= {"claude", "codex"}


async def test_pools_through_the_client(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"poll_interval": 0.05}) as served, Client(served.url) as client:
        made = await client.create_pool("warm", provider="local", size=1)
        assert made["size"] == 1
        with anyio.fail_after(60):
            while (await client.pool("warm"))["ready"] < 1:
                pass  # the service fills it; each call is a round trip
        body = fake_run(tmp_path, [{"text": "hello"}])
        del body["provider"]
        run = await client.start(body.pop("prompt"), pool="warm", **body)
        nodes = [e async for e in client.events(run["id"]) if e.kind == "node.ready"]
        assert getattr(nodes[0], "pool", None) == "warm"
        assert [p["name"] for p in await client.pools()] == ["warm"]
        assert await client.remove_pool("warm")
        with pytest.raises(ApiError) as missing:
            await client.pool("warm")
        assert (missing.value.status, missing.value.code) == (404, "pool_not_found")
