"""Owners for every run, node, pool and workspace of ``nodeprov serve`` (a real process):
a tenant's callers reach what was made for their tenant alone; another tenant's is not
found (404, its ids never confirmed), lists show one's own, an admin reaches every
tenant's. The reproduction of issue 44's "no owners": before, any token read any run and
its events, any ``runs`` token paused runs it did not start, any ``nodes`` token exec'd into
nodes the service did not make for it (a run's, whose agent's environment holds its keys)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.store import Store
from tests.serving import Served, fake_run, serving

pytestmark = pytest.mark.anyio

DEADLINE = 60


async def tokens(store: str) -> dict[str, str]:
    """A token each: two tenants' (every scope but admin), a reader of team-a's, an admin."""
    async with await Store.open(store) as opened:
        made = {
            "a": await opened.tokens.create("a", ["read", "runs", "nodes"], "team-a"),
            "b": await opened.tokens.create("b", ["read", "runs", "nodes"], "team-b"),
            "a-reader": await opened.tokens.create("reader", ["read"], "team-a"),
            "admin": await opened.tokens.create("ops", ["admin"]),
        }
    return {name: secret for name, (_, secret) in made.items()}


async def until_state(served: Served, secret: str, run_id: str, *states: str) -> dict[str, Any]:
    async with served.client(secret) as client:
        with anyio.fail_after(DEADLINE):
            while (run := (await client.get(f"/v1/runs/{run_id}")).json())["state"] not in states:  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)
    result: dict[str, Any] = run
    return result


async def test_a_tenants_runs_workspaces_and_events_are_its_own(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        secret = await tokens(served.store)
        async with served.client(secret["a"]) as a, served.client(secret["b"]) as b:
            made = await a.post(
                "/v1/runs", json=fake_run(tmp_path, [{"text": "hi"}, {"stall": True}], workspace="w")
            )
            assert made.status_code == 201, made.text
            run = made.json()
            assert run["workspace_id"] == "w"  # as the tenant names it
            await until_state(served, secret["a"], run["id"], "running")

            for method, path, body in (
                ("GET", f"/v1/runs/{run['id']}", None),
                ("GET", f"/v1/runs/{run['id']}/events?follow=false", None),
                ("POST", f"/v1/runs/{run['id']}/pause", {"wait": 0}),
                ("POST", f"/v1/runs/{run['id']}/resume", {}),
                ("GET", "/v1/workspaces/w", None),
            ):
                refused = await b.request(method, path, json=body)
                assert refused.status_code == 404, (method, path, refused.text)
            assert [r["id"] for r in (await b.get("/v1/runs")).json()] == []
            assert (await b.get("/v1/workspaces")).json() == []
            assert (await b.get("/v1/sessions")).json() == []

            # team-b's workspace "w" is another one: no collision on a name.
            theirs = await b.post("/v1/runs", json=fake_run(tmp_path, [{"text": "b"}], workspace="w"))
            assert theirs.status_code == 201, theirs.text
            await until_state(served, secret["b"], theirs.json()["id"], "finished")
            assert [w["id"] for w in (await a.get("/v1/workspaces")).json()] == ["w"]
            assert len((await a.get("/v1/workspaces/w")).json()["runs"]) == 1

            assert [r["id"] for r in (await a.get("/v1/runs")).json()] == [run["id"]]
            paused = await a.post(f"/v1/runs/{run['id']}/pause", json={"wait": 30})
            assert paused.status_code == 200, paused.text

        async with served.client(secret["admin"]) as admin:
            every = {r["id"] for r in (await admin.get("/v1/runs")).json()}
            assert every == {run["id"], theirs.json()["id"]}
            assert {w["id"] for w in (await admin.get("/v1/workspaces")).json()} == {"team-a:w", "team-b:w"}


async def test_a_tenants_nodes_and_pools_are_its_own(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        secret = await tokens(served.store)
        async with (
            served.client(secret["a"]) as a,
            served.client(secret["b"]) as b,
            served.client(secret["a-reader"]) as reader,
            served.client(secret["admin"]) as admin,
        ):
            made = await a.post("/v1/nodes", json={"provider": "local"})
            assert made.status_code == 201, made.text
            node_id = made.json()["node_id"]
            exec_body = {"command": ["sh", "-c", "echo hi"]}
            for method, path, body in (
                ("GET", f"/v1/nodes/{node_id}", None),
                ("POST", f"/v1/nodes/{node_id}/exec", exec_body),
                ("GET", f"/v1/nodes/{node_id}/files?path=x", None),
                ("PUT", f"/v1/nodes/{node_id}/files?path=x", None),
                ("DELETE", f"/v1/nodes/{node_id}", None),
            ):
                refused = await b.request(method, path, json=body)
                assert refused.status_code == 404, (method, path, refused.text)
            assert [n["node_id"] for n in (await b.get("/v1/nodes")).json()["nodes"]] == []
            assert [n["node_id"] for n in (await a.get("/v1/nodes")).json()["nodes"]] == [node_id]
            # Files need the nodes scope: they may hold what the node's processes were given.
            assert (await reader.get(f"/v1/nodes/{node_id}/files", params={"path": "x"})).status_code == 403
            assert (await a.post(f"/v1/nodes/{node_id}/exec", json=exec_body)).status_code == 200

            # A run's node is its run's: no token execs into it, an admin's neither.
            started = await a.post(
                "/v1/runs", json=fake_run(tmp_path, [{"text": "hi"}, {"stall": True}], keep_node=True)
            )
            run = await until_state(served, secret["a"], started.json()["id"], "running")
            run_node = run["node_id"]
            for caller in (a, admin):
                refused = await caller.post(f"/v1/nodes/{run_node}/exec", json=exec_body)
                assert refused.status_code == 404, refused.text
                files = await caller.get(f"/v1/nodes/{run_node}/files", params={"path": "x"})
                assert files.status_code == 404, files.text
            assert (await admin.get(f"/v1/nodes/{run_node}")).status_code == 200  # looked at, by an admin
            assert (await a.get(f"/v1/nodes/{run_node}")).status_code == 404
            await a.post(f"/v1/runs/{run['id']}/pause", json={"wait": 30})

            pool = {"name": "warm", "provider": "local", "size": 0}
            assert (await a.post("/v1/pools", json=pool)).status_code == 201
            assert (await b.get("/v1/pools/warm")).status_code == 404
            assert (await b.post("/v1/pools", json=pool)).status_code == 201  # its own "warm"
            assert [p["name"] for p in (await a.get("/v1/pools")).json()] == ["warm"]
            assert {p["name"] for p in (await admin.get("/v1/pools")).json()} == {
                "team-a.warm",
                "team-b.warm",
            }
            assert (await b.delete("/v1/pools/warm")).status_code == 204
            assert (await a.get("/v1/pools/warm")).status_code == 200


async def test_files_stay_in_the_workdir_and_modes_are_permission_bits(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        secret = await tokens(served.store)
        async with served.client(secret["a"]) as a:
            node_id = (await a.post("/v1/nodes", json={"provider": "local"})).json()["node_id"]
            put = await a.put(f"/v1/nodes/{node_id}/files", params={"path": "in/file"}, content=b"data")
            assert put.status_code == 201, put.text
            got = await a.get(f"/v1/nodes/{node_id}/files", params={"path": "in/file"})
            assert (got.status_code, got.content) == (200, b"data")
            for path in ("/proc/self/environ", "../outside", "/etc/passwd"):
                refused = await a.get(f"/v1/nodes/{node_id}/files", params={"path": path})
                assert (refused.status_code, refused.json()["error"]) == (400, "bad_path"), path
            setuid = await a.put(
                f"/v1/nodes/{node_id}/files", params={"path": "s", "mode": "6755"}, content=b"#!/bin/sh\n"
            )
            assert setuid.status_code == 422
            assert json.loads(setuid.text)["error"] == "invalid"
