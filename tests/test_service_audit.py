"""The audit trail of ``nodeprov serve`` (a real process): every action of the API kept
with who asked (token and tenant), on what, and what (names, never secrets); read by an
admin at ``GET /v1/audit`` and with ``nodeprov audit``, by nobody else."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.serving import fake_run, serving
from tests.test_service_tenants import tokens, until_state

pytestmark = pytest.mark.anyio

SECRET = "sk-ant-do-not-keep-0123456789"


async def test_every_action_is_kept_with_who_asked_and_no_secret(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}]
    async with serving(tmp_path) as served:
        secret = await tokens(served.store)
        async with served.client(secret["a"]) as a:
            body = fake_run(tmp_path, steps, workspace="w", keep_node=True)
            body["env"]["API_KEY"] = SECRET
            run = (await a.post("/v1/runs", json=body)).json()
            await until_state(served, secret["a"], run["id"], "running")
            assert (await a.post(f"/v1/runs/{run['id']}/pause", json={"reason": SECRET})).status_code == 200
            resumed = await a.post(
                f"/v1/runs/{run['id']}/resume",
                json={"message": SECRET, "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "done"}])}},
            )
            assert resumed.status_code == 200, resumed.text
            await until_state(served, secret["a"], run["id"], "finished")

            made = await a.post("/v1/nodes", json={"provider": "local", "node": {"env": {"TOKEN": SECRET}}})
            node = made.json()["node_id"]
            written = await a.put(f"/v1/nodes/{node}/files?path=f.txt&mode=0644", content=SECRET.encode())
            assert written.status_code == 201, written.text
            assert (await a.get(f"/v1/nodes/{node}/files?path=f.txt")).content == SECRET.encode()
            ran = await a.post(
                f"/v1/nodes/{node}/exec",
                json={
                    "command": ["cat"],
                    "env": {"KEY": SECRET},
                    "stdin": base64.b64encode(SECRET.encode()).decode(),
                },
            )
            assert ran.status_code == 200
            assert (await a.delete(f"/v1/nodes/{node}")).status_code == 200
            pool = {"name": "p", "provider": "local", "size": 0}
            assert (await a.post("/v1/pools", json=pool)).status_code == 201
            assert (await a.delete("/v1/pools/p")).status_code in (202, 204)
            # Reading is not kept; only an admin reads the trail.
            assert (await a.get("/v1/runs")).status_code == 200
            assert (await a.get("/v1/audit")).status_code == 403

        async with served.client(secret["admin"]) as admin:
            answer = await admin.get("/v1/audit")
            assert answer.status_code == 200, answer.text
            entries = answer.json()
            assert [entry["action"] for entry in entries] == [
                "run.start",
                "run.pause",
                "run.resume",
                "node.provision",
                "node.write_file",
                "node.read_file",
                "node.exec",
                "node.destroy",
                "pool.create",
                "pool.remove",
            ]
            assert {(entry["tenant"], entry["token_name"]) for entry in entries} == {("team-a", "a")}
            assert [entry["seq"] for entry in entries] == sorted({entry["seq"] for entry in entries})
            by_action = {entry["action"]: entry for entry in entries}
            assert by_action["run.start"]["resource"] == run["id"]
            assert by_action["run.start"]["detail"]["env"] == ["API_KEY", "NODEPROV_FAKE_AGENT"]
            assert by_action["run.start"]["detail"]["workspace"] == "w"
            assert by_action["node.exec"]["detail"]["command"] == '["cat"]'
            assert by_action["node.exec"]["detail"]["env"] == ["KEY"]
            assert by_action["node.write_file"]["detail"] == {"path": "f.txt", "mode": "0644"}
            assert by_action["pool.remove"]["resource"] == "team-a.p"
            assert SECRET not in answer.text
            paged = (await admin.get(f"/v1/audit?after={entries[2]['seq']}&limit=2")).json()
            assert [entry["action"] for entry in paged] == ["node.provision", "node.write_file"]
            assert (await admin.get("/v1/audit?tenant=team-b")).json() == []

    listed = await anyio.run_process(
        [sys.executable, "-m", "nodeprov", "audit", "--json", "--store", served.store, "--tenant", "team-a"]
    )
    lines = [json.loads(line) for line in listed.stdout.decode().splitlines()]
    assert [line["action"] for line in lines] == [entry["action"] for entry in entries]
    assert lines[0]["detail"] == entries[0]["detail"]
    table = await anyio.run_process(
        [sys.executable, "-m", "nodeprov", "audit", "--store", served.store],
        env=os.environ | {"COLUMNS": "200"},
    )
    assert "node.exec" in table.stdout.decode()
    assert run["id"] in table.stdout.decode()
    assert SECRET.encode() not in listed.stdout + table.stdout
