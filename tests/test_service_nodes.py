"""``/v1/nodes`` of a real ``nodeprov serve`` process, on local nodes: provision (idempotent),
list, get, exec with its output streamed, files in and out, destroy; the paths refused,
the limits, and a client that leaves an exec stopping its process."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import anyio
import httpx
import pytest

from nodeprov.node.ownership import process_start_time
from tests.serving import serving

pytestmark = pytest.mark.anyio


async def _exec(
    client: httpx.AsyncClient, node_id: str, body: dict[str, object]
) -> tuple[bytes, bytes, list[dict[str, object]]]:
    out, err, ends = bytearray(), bytearray(), []
    async with client.stream("POST", f"/v1/nodes/{node_id}/exec", json=body) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"] == "application/x-ndjson"
        async for line in response.aiter_lines():
            item = json.loads(line)
            if "stream" in item:
                (out if item["stream"] == "stdout" else err).extend(base64.b64decode(item["data"]))
            else:
                ends.append(item)
    return bytes(out), bytes(err), ends


async def test_a_node_through_its_whole_life(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"max_file": 2 << 20}) as served, served.client() as client:
        body = {
            "provider": "local",
            "node": {"labels": {"team": "a"}, "ttl_seconds": 600, "env": {"GREETING": "hi"}},
        }
        made = await client.post("/v1/nodes", json=body, headers={"Idempotency-Key": "node-1"})
        assert made.status_code == 201, made.text
        node = made.json()
        again = await client.post("/v1/nodes", json=body, headers={"Idempotency-Key": "node-1"})
        assert (again.status_code, again.json()["node_id"]) == (200, node["node_id"])
        other = await client.post(
            "/v1/nodes", json={"provider": "local"}, headers={"Idempotency-Key": "node-1"}
        )
        assert other.status_code == 422
        node_id = node["node_id"]
        assert node["labels"]["team"] == "a"
        assert node["labels"]["nodeprov.owner"] == "service:nodeprov"
        assert "nodeprov.expires-at" in node["labels"]
        listed = (await client.get("/v1/nodes", params={"provider": "local"})).json()
        assert [n["node_id"] for n in listed["nodes"]] == [node_id]
        assert (await client.get(f"/v1/nodes/{node_id}")).json()["node_id"] == node_id

        out, err, ends = await _exec(
            client,
            node_id,
            {
                "command": ["sh", "-c", 'cat; echo "$GREETING $EXTRA" >&2; exit 3'],
                "env": {"EXTRA": "there"},
                "stdin": base64.b64encode(b"piped in").decode(),
            },
        )
        assert (out, err, ends) == (b"piped in", b"hi there\n", [{"exit_code": 3}])
        _, _, ends = await _exec(client, node_id, {"command": ["sleep", "30"], "timeout": 0.5})
        assert ends[-1]["error"] == "timeout"
        missing = await client.post(f"/v1/nodes/{node_id}/exec", json={"command": ["no-such-command-here"]})
        assert (missing.status_code, missing.json()["error"]) == (422, "command_not_found")

        data = secrets.token_bytes(1 << 20)
        put = await client.put(
            f"/v1/nodes/{node_id}/files", params={"path": "dir/blob.bin", "mode": "0640"}, content=data
        )
        assert put.status_code == 201, put.text
        assert put.json()["size"] == len(data)
        got = await client.get(f"/v1/nodes/{node_id}/files", params={"path": "dir/blob.bin"})
        assert got.status_code == 200
        assert got.content == data
        out, _, _ = await _exec(client, node_id, {"command": ["stat", "-c", "%a", "dir/blob.bin"]})
        assert out.strip() == b"640"
        outside = await client.get(f"/v1/nodes/{node_id}/files", params={"path": "../../etc/passwd"})
        assert (outside.status_code, outside.json()["error"]) == (400, "bad_path")
        put_outside = await client.put(f"/v1/nodes/{node_id}/files", params={"path": "/etc/x"}, content=b"x")
        assert put_outside.status_code == 400
        nothing = await client.get(f"/v1/nodes/{node_id}/files", params={"path": "nope.txt"})
        assert (nothing.status_code, nothing.json()["error"]) == (404, "file_not_found")
        too_big = await client.put(
            f"/v1/nodes/{node_id}/files", params={"path": "big"}, content=b"x" * (3 << 20)
        )
        assert too_big.status_code == 413

        gone = await client.delete(f"/v1/nodes/{node_id}")
        assert gone.status_code == 200
        assert gone.json()["destroyed"] is True
        assert (await client.get(f"/v1/nodes/{node_id}")).status_code == 404
        assert (await client.delete(f"/v1/nodes/{node_id}")).status_code == 404
        assert (await client.post(f"/v1/nodes/{node_id}/exec", json={"command": ["true"]})).status_code == 404
        assert (await client.get("/v1/nodes/np-nope")).json()["error"] == "node_not_found"


async def test_a_client_that_leaves_an_exec_stops_its_process(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        node_id = (await client.post("/v1/nodes", json={"provider": "local"})).json()["node_id"]
        async with client.stream(
            "POST", f"/v1/nodes/{node_id}/exec", json={"command": ["sh", "-c", "echo $$; exec sleep 300"]}
        ) as response:
            async for line in response.aiter_lines():
                pid = int(base64.b64decode(json.loads(line)["data"]))
                break
        assert _running(pid)
        with anyio.fail_after(30):
            while _running(pid):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
        await client.delete(f"/v1/nodes/{node_id}")


def _running(pid: int) -> bool:
    return process_start_time(pid) is not None  # a process that vanishes mid-read is gone too (ESRCH)
