"""``nodeprov serve`` as a real process (uvicorn on 127.0.0.1): every endpoint's success and
error paths, auth, idempotent creation, pause and resume, the OpenAPI document, the limits
on bodies, and what a stopped replica does. Runs are the fake Claude Code CLI's on local
nodes; tests of events under faults are in test_service_events.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from openapi_spec_validator import validate

from nodeprov.service import create_app
from nodeprov.store import Store
from tests.serving import fake_run, serving, sse_events

pytestmark = pytest.mark.anyio


async def _follow(client: httpx.AsyncClient, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    events = []
    async with client.stream(
        "GET", f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(after)}
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for _name, event_id, data in sse_events(response):
            assert int(event_id) == data["seq"]
            events.append(data)
    return events


async def _token(store: str, *scopes: str) -> str:
    async with await Store.open(store) as opened:
        _, secret = await opened.tokens.create("test", scopes)
        return secret


async def test_health_readiness_metrics_and_catalogues(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        await client.get("/v1/runs/run-nope")
        metrics = (await client.get("/metrics")).text
        counted = 'nodeprov_http_requests_total{method="GET",route="/v1/runs/{run_id}",status="404"} 1.0'
        assert counted in metrics
        for name in (
            "nodeprov_runs",
            "nodeprov_event_streams",
            "nodeprov_relay_latency_seconds_bucket",
            "process_resident_memory_bytes",
        ):
            assert name in metrics
        agents = {a["name"]: a for a in (await client.get("/v1/agents")).json()}
        assert {"claude", "codex", "opencode"} <= set(agents)
        assert (await client.get("/v1/agents/claude")).json()["cli_name"] == agents["claude"]["cli_name"]
        assert (await client.get("/v1/agents/nope")).status_code == 404
        providers = {p["name"]: p for p in (await client.get("/v1/providers")).json()}
        assert providers["local"]["ready"] is True
        assert (await client.get("/v1/providers/local")).json()["name"] == "local"
        missing = await client.get("/v1/providers/nope")
        assert (missing.status_code, missing.json()["error"]) == (404, "provider_not_found")


async def test_openapi_document_is_valid_and_names_every_route(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        document = (await client.get("/openapi.json")).json()
    validate(document)
    routes = {(path, method.upper()) for path, item in document["paths"].items() for method in item}
    assert routes == {
        ("/healthz", "GET"),
        ("/readyz", "GET"),
        ("/metrics", "GET"),
        ("/v1/agents", "GET"),
        ("/v1/agents/{name}", "GET"),
        ("/v1/providers", "GET"),
        ("/v1/providers/{name}", "GET"),
        ("/v1/nodes", "GET"),
        ("/v1/nodes", "POST"),
        ("/v1/nodes/{node_id}", "GET"),
        ("/v1/nodes/{node_id}", "DELETE"),
        ("/v1/nodes/{node_id}/files", "GET"),
        ("/v1/nodes/{node_id}/files", "PUT"),
        ("/v1/nodes/{node_id}/exec", "POST"),
        ("/v1/runs", "GET"),
        ("/v1/runs", "POST"),
        ("/v1/runs/{run_id}", "GET"),
        ("/v1/runs/{run_id}/pause", "POST"),
        ("/v1/runs/{run_id}/resume", "POST"),
        ("/v1/runs/{run_id}/events", "GET"),
        ("/v1/runs/{run_id}/checkpoints", "GET"),
        ("/v1/runs/{run_id}/checkpoints", "POST"),
        ("/v1/runs/{run_id}/diff", "GET"),
        ("/v1/runs/{run_id}/fork", "POST"),
        ("/v1/runs/{run_id}/rewind", "POST"),
        ("/v1/pools", "GET"),
        ("/v1/pools", "POST"),
        ("/v1/pools/{name}", "GET"),
        ("/v1/pools/{name}", "DELETE"),
        ("/v1/sessions", "GET"),
        ("/v1/workspaces", "GET"),
        ("/v1/workspaces/{workspace}", "GET"),
        ("/v1/audit", "GET"),
    }


_NO_SCHEMA = {  # streams, and answers without a body
    ("GET", "/metrics", "200"),
    ("GET", "/v1/nodes/{node_id}/files", "200"),
    ("POST", "/v1/nodes/{node_id}/exec", "200"),
    ("GET", "/v1/runs/{run_id}/events", "200"),
    ("GET", "/v1/runs/{run_id}/events", "204"),
    ("DELETE", "/v1/pools/{name}", "202"),
    ("DELETE", "/v1/pools/{name}", "204"),
}


def test_every_answer_in_the_openapi_document_has_a_schema() -> None:
    """A route added without a response model (an empty or bare object schema) fails here."""
    document = create_app().openapi()
    untyped = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for code, response in operation["responses"].items():
                schemas = [media.get("schema", {}) for media in response.get("content", {}).values()]
                # a model, or a list of one: `dict[str, Any]` gives a bare {"type": "object"}
                modelled = all("$ref" in s or "$ref" in s.get("items", {}) for s in schemas)
                if code.startswith("2") and not (schemas and modelled):
                    untyped.add((method.upper(), path, code))
    assert untyped == _NO_SCHEMA


async def test_a_run_starts_streams_its_events_and_ends_with_its_result(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, served.client() as client:
        started = await client.post("/v1/runs", json=fake_run(tmp_path, [{"text": "hello"}], workspace="ws"))
        assert started.status_code == 201, started.text
        run = started.json()
        assert run["state"] in ("starting", "running")
        assert run["workspace_id"] == "ws"
        events = await _follow(client, run["id"])
        kinds = [e["type"] for e in events]
        assert kinds[0] == "run.started"
        assert kinds[-1] == "run.finished"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        texts = [e["message"].get("text") for e in events if e["type"] == "agent.message"]
        assert "hello" in texts
        assert events[-2]["type"] in ("node.released", "agent.message")
        assert events[-1]["outcome"] == "ok"
        # Over: a reconnect after its last event is told to stop (204), as EventSource understands.
        gone = await client.get(
            f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(events[-1]["seq"])}
        )
        assert gone.status_code == 204
        # Without following: the history, then the end.
        history = await client.get(f"/v1/runs/{run['id']}/events", params={"follow": "false", "after": 2})
        assert next(int(line[3:]) for line in history.text.splitlines() if line.startswith("id:")) == 3
        got = (await client.get(f"/v1/runs/{run['id']}")).json()
        assert (got["state"], got["outcome"], got["resumable"]) == ("finished", "ok", False)
        assert "env" not in json.dumps(got["agent_options"])
        assert [r["id"] for r in (await client.get("/v1/runs", params={"state": "finished"})).json()] == [
            run["id"]
        ]
        assert (await client.get("/v1/runs", params={"state": "running"})).json() == []
        workspaces = (await client.get("/v1/workspaces")).json()
        assert workspaces == [{"id": "ws", "agent": "claude", "session_id": run["session_id"], "runs": 1}]
        workspace = (await client.get("/v1/workspaces/ws")).json()
        assert [r["id"] for r in workspace["runs"]] == [run["id"]]
        assert (await client.get("/v1/workspaces/nope")).status_code == 404
        sessions = (await client.get("/v1/sessions", params={"workspace": "ws"})).json()
        assert [s["id"] for s in sessions] == [run["session_id"]]


async def test_pause_and_resume_through_the_api(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [{"text": "working"}, {"sleep": 60}, {"text": "done"}]
    async with serving(tmp_path) as served, served.client() as client:
        run = (await client.post("/v1/runs", json=fake_run(tmp_path, steps, keep_node=True))).json()
        async with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
            async for _, _, data in sse_events(response):
                if data["type"] == "agent.message" and data["message"].get("text") == "working":
                    break
        paused = await client.post(f"/v1/runs/{run['id']}/pause", json={"reason": "lunch"})
        assert paused.status_code == 200, paused.text
        body = paused.json()
        assert body["state"] == "paused"
        assert body["resume_token"]
        assert body["resumable"]
        assert body["snapshots"][-1]["node_kept"] is True  # the run was started with keep_node
        again = await client.post(f"/v1/runs/{run['id']}/pause", json={})
        assert (again.status_code, again.json()["error"]) == (409, "run_state")
        resumed = await client.post(
            f"/v1/runs/{run['id']}/resume",
            json={"message": "go on", "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "resumed"}])}},
        )
        assert resumed.status_code == 200, resumed.text
        events = await _follow(client, run["id"])
        assert [e["outcome"] for e in events if e["type"] == "run.finished"] == ["paused", "ok"]
        assert any(e["type"] == "agent.message" and e["message"].get("text") == "resumed" for e in events)
        assert events[-1]["type"] == "run.finished"
        assert events[-1]["outcome"] == "ok"
        twice = await client.post(f"/v1/runs/{run['id']}/resume", json={})
        assert (twice.status_code, twice.json()["error"]) == (409, "run_state")


async def test_a_conversation_through_the_api_each_turn_paused_and_resumed(tmp_path: Path) -> None:
    body = fake_run(tmp_path, [{"text": "one"}], keep_node=True, pause_after_turn=True)
    async with serving(tmp_path) as served, served.client() as client:
        run = (await client.post("/v1/runs", json=body)).json()
        events = await _follow(client, run["id"])
        [paused] = [e for e in events if e["type"] == "run.paused"]
        assert (paused["pause_kind"], paused["node_kept"]) == ("system", True)
        steps = json.dumps([{"text": "two"}])
        resumed = await client.post(
            f"/v1/runs/{run['id']}/resume",
            json={"message": "next", "env": {"NODEPROV_FAKE_AGENT": steps}, "pause_after_turn": True},
        )
        assert resumed.status_code == 200, resumed.text
        events = await _follow(client, run["id"])
        assert [e["outcome"] for e in events if e["type"] == "run.finished"] == ["paused", "paused"]
        assert [e["reused"] for e in events if e["type"] == "node.ready"] == [False, True]
        texts = [
            e["message"]["text"] for e in events if e["type"] == "agent.message" and "text" in e["message"]
        ]
        assert texts[-1] == "two"


async def test_idempotent_run_start(tmp_path: Path) -> None:
    body = fake_run(tmp_path, [{"text": "once"}])
    async with serving(tmp_path) as served, served.client() as client:
        headers = {"Idempotency-Key": "start-1"}
        first = await client.post("/v1/runs", json=body, headers=headers)
        second = await client.post("/v1/runs", json=body, headers=headers)
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["id"] == second.json()["id"]
        assert second.headers["Idempotent-Replayed"] == "true"
        other = await client.post("/v1/runs", json={**body, "prompt": "another"}, headers=headers)
        assert (other.status_code, other.json()["error"]) == (422, "idempotency_key_reused")
        bad = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": "x" * 300})
        assert bad.status_code == 400
        # Many at once with one key: one run.
        answers: list[httpx.Response] = []

        async def start() -> None:
            answers.append(await client.post("/v1/runs", json=body, headers={"Idempotency-Key": "burst"}))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(start)
        made = {a.json()["id"] for a in answers if a.status_code in (200, 201)}
        assert len(made) == 1
        assert all(a.status_code in (200, 201, 409) for a in answers)
        assert len((await client.get("/v1/runs")).json()) == 2


async def test_bad_input_gets_one_line_and_the_right_status(tmp_path: Path) -> None:
    async with serving(tmp_path, config={"max_body": 4096}) as served, served.client() as client:
        malformed = await client.post(
            "/v1/runs", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert (malformed.status_code, malformed.json()) == (
            422,
            {"error": "invalid", "message": "the body is not valid JSON"},
        )
        unknown = await client.post("/v1/runs", json={"prompt": "x", "provider": "local", "colour": "red"})
        assert unknown.status_code == 422
        assert unknown.json()["message"] == "colour: Extra inputs are not permitted"
        assert "\n" not in unknown.json()["message"]
        big = await client.post("/v1/runs", json={"prompt": "x" * 10000, "provider": "local"})
        assert (big.status_code, big.json()["error"]) == (413, "too_large")

        async def chunked() -> Any:
            for _ in range(10):
                yield b" " * 1000

        streamed = await client.post(
            "/v1/runs", content=chunked(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        assert (await client.get("/v1/runs/run-nope")).status_code == 404
        assert (await client.get("/v1/runs/run-nope/events")).status_code == 404
        assert (await client.post("/v1/runs/run-nope/pause", json={})).status_code == 404
        no_provider = await client.post("/v1/runs", json={"prompt": "x", "provider": "nope"})
        assert (no_provider.status_code, no_provider.json()["error"]) == (422, "invalid")
        bad_setting = await client.post(
            "/v1/runs", json={"prompt": "x", "provider": "local", "settings": {"colour": 1}}
        )
        assert bad_setting.status_code == 422
        assert "\n" not in bad_setting.json()["message"]
        bad_image = await client.post(
            "/v1/runs",
            json={
                "prompt": [{"type": "image", "data": base64.b64encode(b"not an image").decode()}],
                "provider": "local",
            },
        )
        assert bad_image.status_code == 422
        assert (await client.get("/v1/nope")).json()["error"] == "not_found"


async def nul_is_refused(served: Any, tmp_path: Path) -> None:
    """Text with NUL, in a body or in a path, is bad input (422), on SQLite as on PostgreSQL
    (which cannot hold it): never a store failure."""
    async with served.client() as client:
        for body in (
            fake_run(tmp_path, [{"text": "x"}], prompt="do\x00it"),
            fake_run(tmp_path, [{"text": "x"}], workspace="w\x00s"),
            fake_run(tmp_path, [{"text": "x"}], prompt=[{"type": "text", "text": "a\x00"}]),
            fake_run(tmp_path, [{"text": "x"}], settings={"ro\x00ot": "/tmp"}),
        ):
            refused = await client.post("/v1/runs", json=body)
            assert (refused.status_code, refused.json()["error"]) == (422, "invalid"), refused.text
            assert "NUL" in refused.json()["message"]
        for path in ("/v1/runs/run-%00x", "/v1/runs/run-%00x/events"):
            answer = await client.get(path)
            assert (answer.status_code, answer.json()["error"]) == (422, "invalid"), (path, answer.text)
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.post("/v1/runs", json=fake_run(tmp_path, [{"text": "x"}]))).status_code == 201


async def test_text_with_nul_is_bad_input(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        await nul_is_refused(served, tmp_path)


async def test_tokens_scopes_and_revocation(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/service.db"
    async with serving(tmp_path, store=store) as served:
        async with served.client() as anonymous:  # loopback, no token yet: open
            assert (await anonymous.get("/v1/runs")).status_code == 200
        reader, runner = await _token(store, "read"), await _token(store, "runs")
        async with served.client() as anonymous:
            # Tokens exist now: every request needs one, from the very next on.
            answer = await anonymous.get("/v1/runs")
            assert answer.status_code == 401
            assert answer.json()["error"] == "unauthorized"
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert (await anonymous.get("/v1/runs", headers={"Authorization": "Basic x"})).status_code == 401
            assert (
                await anonymous.get("/v1/runs", headers={"Authorization": "Bearer npt_nope"})
            ).status_code == 401
            assert (await anonymous.get("/healthz")).status_code == 200  # probes need none
        async with served.client(reader) as client:
            assert (await client.get("/v1/runs")).status_code == 200
            refused = await client.post("/v1/runs", json=fake_run(tmp_path, []))
            assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
            assert (await client.post("/v1/nodes", json={"provider": "local"})).status_code == 403
        async with served.client(runner) as client:
            assert (await client.post("/v1/runs", json=fake_run(tmp_path, []))).status_code == 201
            assert (await client.post("/v1/nodes", json={"provider": "local"})).status_code == 403
        async with await Store.open(store) as opened:
            [record] = [t for t in await opened.tokens.tokens() if t.scopes == ("read",)]
            await opened.tokens.revoke(record.id)
        async with served.client(reader) as client:
            assert (await client.get("/v1/runs")).status_code == 401


def test_serve_refuses_to_listen_beyond_loopback_without_tokens(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nodeprov",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--behind-proxy",
            "--store",
            f"sqlite:///{tmp_path}/s.db",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NODEPROV_SERVE_CONFIG": "{}"},
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: refusing to listen on 0.0.0.0 without tokens")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "listening" not in done.stdout
