"""Run events over server-sent events from a real ``nodeprov serve``, under the faults a
control plane's connection meets: clients that drop at random events and reconnect with
``Last-Event-ID`` (200 seeded trials), a client that reads too slowly (cut off with a clear
event), 1,000 connects and disconnects (nothing left behind), and a canary secret that must
appear nowhere: not in the store, the logs or any answer."""

from __future__ import annotations

import json
import random
import re
import secrets
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.serving import Served, fake_run, serving, sse_events

pytestmark = pytest.mark.anyio


async def _state(client: httpx.AsyncClient, run_id: str) -> str:
    return str((await client.get(f"/v1/runs/{run_id}")).json()["state"])


async def _stored(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/runs/{run_id}/events", params={"follow": "false"})
    return [data async for _, _, data in sse_events(answer)] if answer.status_code == 200 else []


async def _metric(client: httpx.AsyncClient, name: str) -> float:
    text = (await client.get("/metrics")).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


@pytest.mark.parametrize("seed", [28])
async def test_random_disconnects_and_reconnects_miss_and_repeat_nothing(tmp_path: Path, seed: int) -> None:
    """200 reconnects at least, each after a random number of events (or in the middle of
    one), while the run streams and after it ended: the events read are the run's, each
    once, in order."""
    rng = random.Random(seed)
    async with serving(tmp_path) as served, served.client() as client:
        run = (await client.post("/v1/runs", json=fake_run(tmp_path, [{"stream": [500, 100, 0.01]}]))).json()
        seen: list[dict[str, Any]] = []
        reconnects = 0
        with anyio.fail_after(240):
            while True:
                last = seen[-1]["seq"] if seen else 0
                wanted, partial = rng.randint(1, 4), rng.random() < 0.2
                async with client.stream(
                    "GET", f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(last)}
                ) as response:
                    if response.status_code == 204:
                        break
                    assert response.status_code == 200
                    if partial:  # drop in the middle of an event: it is read again, whole
                        async for _ in response.aiter_bytes(7):
                            break
                    else:
                        async for _, event_id, data in sse_events(response):
                            assert int(event_id) == data["seq"]
                            seen.append(data)
                            if (wanted := wanted - 1) == 0:
                                break
                reconnects += 1
        stored = await _stored(client, run["id"])
    assert reconnects >= 200
    assert [e["seq"] for e in seen] == list(range(1, len(stored) + 1))
    assert seen == stored
    assert seen[-1]["type"] == "run.finished"
    assert seen[-1]["outcome"] == "ok"


async def test_a_client_that_reads_too_slowly_is_cut_off_with_a_clear_event(tmp_path: Path) -> None:
    """The client reads nothing while the run streams megabytes; once it reads, the stream
    ends with an event named ``cutoff`` that says why and where to resume, and a reconnect
    from there gets the rest."""
    config = {"max_lag": 1.0, "send_timeout": 600}
    async with serving(tmp_path, config=config) as served, served.client() as client:
        run = (await client.post("/v1/runs", json=fake_run(tmp_path, [{"stream": [4000, 3000, 0]}]))).json()
        slow = _slow_reader(served, run["id"])
        with anyio.fail_after(120):
            while await _state(client, run["id"]) != "finished":  # noqa: ASYNC110 - another process
                await anyio.sleep(0.2)
            # The rule cuts a client off by its lag: wait until even the run's last event is
            # further behind than the limit (whatever the machine's speed, every unsent event is).
            finished_at = datetime.fromisoformat((await _stored(client, run["id"]))[-1]["at"]).timestamp()
            while time.time() - finished_at < config["max_lag"] * 2:  # noqa: ASYNC110 - the clock
                await anyio.sleep(0.1)
            raw = await anyio.to_thread.run_sync(_read_all, slow)
        frames = [frame for frame in raw.decode().split("\r\n\r\n") if frame.strip()]
        last = frames[-1]
        assert last.startswith("event: cutoff"), last[:200]
        cut = json.loads(last.split("data: ", 1)[1])
        assert "too slowly" in cut["reason"]
        ids = [int(line[4:]) for frame in frames for line in frame.split("\r\n") if line.startswith("id: ")]
        assert ids == list(range(1, cut["last_event_id"] + 1))
        rest = await client.get(
            f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(cut["last_event_id"])}
        )
        more = [data["seq"] async for _, _, data in sse_events(rest)]
        assert ids + more == [e["seq"] for e in await _stored(client, run["id"])]
        assert await _metric(client, "nodeprov_event_streams_cut_total") == 1


def _slow_reader(served: Served, run_id: str) -> socket.socket:
    """A connection to the run's events whose reader reads nothing until told."""
    host, port = served.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    )
    return sock


def _read_all(sock: socket.socket) -> bytes:
    with sock:
        data = bytearray()
        while chunk := sock.recv(1 << 16):
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert b"chunked" in head.lower()
    return _unchunk(body)


def _unchunk(body: bytes) -> bytes:
    out = bytearray()
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += body[:size]
        body = body[size + 2 :]
    return bytes(out)


async def test_a_thousand_connects_and_disconnects_leave_nothing_behind(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        run = (
            await client.post("/v1/runs", json=fake_run(tmp_path, [{"text": "hi"}, {"sleep": 300}]))
        ).json()
        async with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
            async for _, _, data in sse_events(response):
                if data["type"] == "agent.message":
                    break
        tasks, memory = (
            await _metric(client, "nodeprov_tasks"),
            await _metric(client, "process_resident_memory_bytes"),
        )
        for cycle in range(1000):
            async with client.stream(
                "GET", f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(cycle % 3)}
            ) as response:
                async for _ in sse_events(response):
                    break
        with anyio.fail_after(30):
            while await _metric(client, "nodeprov_event_streams") != 0:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
            while await _metric(client, "nodeprov_tasks") > tasks:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
        grown = await _metric(client, "process_resident_memory_bytes") - memory
        assert grown < 32 << 20, f"{grown / (1 << 20):.1f} MB more after 1,000 streams"
        await client.post(f"/v1/runs/{run['id']}/pause", json={})


async def test_a_canary_secret_is_nowhere(tmp_path: Path) -> None:
    """Secrets given in requests (the agent's env, a node's env, a command's env, the bearer
    token) reach where they are for, and never the store, the logs or an answer."""
    canary = f"canary-{secrets.token_hex(8)}"
    answers: list[bytes] = []
    async with serving(tmp_path, verbose=2) as served, served.client() as anonymous:
        body = fake_run(tmp_path, [{"text": "hello"}])
        body["env"]["API_KEY"] = canary
        run = (await anonymous.post("/v1/runs", json=body)).json()
        answers.append(json.dumps(run).encode())
        answers += [e async for e in _all_events(anonymous, run["id"])]
        node = await anonymous.post("/v1/nodes", json={"provider": "local", "node": {"env": {"S": canary}}})
        answers.append(node.content)
        node_id = node.json()["node_id"]
        ran = await anonymous.post(
            f"/v1/nodes/{node_id}/exec",
            json={"command": ["sh", "-c", 'test "$S" = "$T"'], "env": {"T": canary}},
        )
        answers.append(ran.content)
        assert json.loads(ran.text.splitlines()[-1]) == {"exit_code": 0}  # the secrets arrived
        for bad in (
            {"prompt": "x", "provider": "local", "env": canary},
            {"prompt": "x", "provider": "local", "colour": canary},
        ):
            refused = await anonymous.post("/v1/runs", json=bad)
            assert refused.status_code == 422
            answers.append(refused.content)
        for path in (
            f"/v1/runs/{run['id']}",
            "/v1/runs",
            "/v1/nodes",
            f"/v1/nodes/{node_id}",
            "/metrics",
            "/v1/sessions",
        ):
            answers.append((await anonymous.get(path)).content)
        await anonymous.delete(f"/v1/nodes/{node_id}")
    leaks = [f"answer {i}: {answer[:300]!r}" for i, answer in enumerate(answers) if canary.encode() in answer]
    assert leaks + _files_holding(canary, tmp_path, served.log) == []


def _files_holding(secret: str, directory: Path, log: Path) -> list[str]:
    """The store's files and the service's log that hold ``secret``."""
    return [
        str(path) for path in [*directory.glob("service.db*"), log] if secret.encode() in path.read_bytes()
    ]


async def _all_events(client: httpx.AsyncClient, run_id: str) -> Any:
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        async for line in response.aiter_lines():
            yield line.encode()


async def test_an_idle_stream_gets_heartbeats(tmp_path: Path) -> None:
    """Comment lines keep a stream open while its run says nothing (through proxies that
    close idle connections); an EventSource ignores them."""
    async with serving(tmp_path, config={"heartbeat": 0.2}) as served, served.client() as client:
        run = (
            await client.post("/v1/runs", json=fake_run(tmp_path, [{"text": "hi"}, {"stall": True}]))
        ).json()
        pings = 0
        with anyio.fail_after(60):
            async with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
                async for line in response.aiter_lines():
                    pings += line.startswith(": ping")
                    if pings == 3:
                        break
        assert (await client.post(f"/v1/runs/{run['id']}/pause", json={})).status_code == 200


async def test_a_client_that_reads_nothing_is_let_go(tmp_path: Path) -> None:
    """A client that stops reading holds nothing: once a write to it waits ``send_timeout``,
    the service drops its stream (the client, reading again, reconnects with Last-Event-ID)."""
    config = {"send_timeout": 1.0, "max_lag": 600}
    async with serving(tmp_path, config=config) as served, served.client() as client:
        run = (await client.post("/v1/runs", json=fake_run(tmp_path, [{"stream": [4000, 3000, 0]}]))).json()
        deaf = _slow_reader(served, run["id"])
        try:
            with anyio.fail_after(120):
                while await _metric(client, "nodeprov_events_relayed_total") == 0:  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.05)  # its stream began: it was counted
                while await _metric(client, "nodeprov_event_streams") != 0:  # noqa: ASYNC110 - another process
                    await anyio.sleep(0.1)
        finally:
            deaf.close()
