"""Checkpoints over HTTP (a real ``nodeprov serve``): a running run checkpointed on request,
listed, compared, and told in its events; a run that is not running is refused. Forks and
rewinds: a paused run forked from its first checkpoint (the fork goes on from there, its
own run, its lineage shown) and rewound to it; what cannot be forked or rewound, and another
tenant's run, refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from nodeprov.runs import RunState
from tests.serving import fake_run, serving, sse_events
from tests.test_service_tenants import tokens

pytestmark = pytest.mark.anyio

DEADLINE = 60


async def said(client: httpx.AsyncClient, run_id: str, text: str) -> None:
    """Wait until the run's agent said ``text`` (following its events across its drives)."""
    after = 0
    while True:
        async with client.stream("GET", f"/v1/runs/{run_id}/events", params={"after": after}) as response:
            async for _, seq, data in sse_events(response):
                after = int(seq)
                if data.get("message", {}).get("text") == text:
                    return
        run = (await client.get(f"/v1/runs/{run_id}")).json()
        if not RunState(run["state"]).live:
            raise AssertionError(f"run {run_id} ended before its agent said {text!r}: {run['error']}")


async def ended(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run once nobody drives it."""
    with anyio.fail_after(DEADLINE):
        while True:  # another process's run: its state is polled
            run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
            if not RunState(run["state"]).live:
                return run
            await anyio.sleep(0.05)


async def texts(client: httpx.AsyncClient, run_id: str) -> list[str]:
    """What the run's agent said, every drive's."""
    events = (await client.get(f"/v1/runs/{run_id}/events", params={"follow": "false"})).text
    found = [json.loads(line[5:]) for line in events.splitlines() if line.startswith("data:")]
    return [str(e["message"]["text"]) for e in found if "text" in e.get("message", {})]


def agent(*steps: dict[str, Any]) -> dict[str, str]:
    """A resume's, a fork's or a rewind's ``env``: the fake agent's script for its turn."""
    return {"NODEPROV_FAKE_AGENT": json.dumps(steps)}


async def test_a_running_run_is_checkpointed_listed_compared_and_its_events_say_so(tmp_path: Path) -> None:
    steps: list[dict[str, Any]] = [
        {"write_file": ["notes.txt", "one\n"]},
        {"text": "wrote"},
        {"wait_for": "go"},
    ]
    steps += [{"write_file": ["notes.txt", "two\n"]}, {"text": "again"}, {"stall": True}]
    async with serving(tmp_path) as served, served.client() as client:
        made = await client.post("/v1/runs", json=fake_run(tmp_path, steps))
        assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        with anyio.fail_after(60):
            await said(client, run_id, "wrote")
            first = await client.post(f"/v1/runs/{run_id}/checkpoints")
            assert first.status_code == 201, first.text
            workdir = next((tmp_path / "nodes").rglob("notes.txt")).parent
        assert first.json()["reason"] == "request"
        assert first.json()["changed"]["added"] == 1
        assert "objects" not in first.json()  # where the operator keeps them is the operator's
        (workdir / "go").write_text("")
        with anyio.fail_after(60):
            await said(client, run_id, "again")
            second = (await client.post(f"/v1/runs/{run_id}/checkpoints")).json()
        listed = (await client.get(f"/v1/runs/{run_id}/checkpoints")).json()
        assert [item["id"] for item in listed] == [first.json()["id"], second["id"]]
        diff = await client.get(
            f"/v1/runs/{run_id}/diff", params={"from": first.json()["id"], "to": second["id"]}
        )
        assert diff.status_code == 200, diff.text
        assert diff.json()["modified"] == ["notes.txt"]
        assert "-one\n+two\n" in "".join(diff.json()["patches"])
        unknown = await client.get(f"/v1/runs/{run_id}/diff", params={"from": "ck-none", "to": second["id"]})
        assert (unknown.status_code, unknown.json()["error"]) == (422, "checkpoint_not_found")
        paused = await client.post(f"/v1/runs/{run_id}/pause", json={"wait": 60})
        assert paused.status_code == 200, paused.text
        refused = await client.post(f"/v1/runs/{run_id}/checkpoints")
        assert (refused.status_code, refused.json()["error"]) == (409, "run_state")
        listed = (await client.get(f"/v1/runs/{run_id}/checkpoints")).json()
        assert [item["reason"] for item in listed] == ["request", "request", "pause"]
        events = (await client.get(f"/v1/runs/{run_id}/events", params={"follow": "false"})).text
        assert events.count('"checkpoint.saved"') == 3


async def test_a_paused_run_is_forked_from_its_first_checkpoint_and_rewound_to_it(tmp_path: Path) -> None:
    def turn(name: str) -> list[dict[str, Any]]:
        return [{"write_file": [f"{name}.txt", name]}, {"text": name}, {"stall": True}]

    async with serving(tmp_path) as served, served.client() as client:
        made = await client.post("/v1/runs", json=fake_run(tmp_path, turn("one")))
        assert made.status_code == 201, made.text
        original = made.json()
        run_id = original["id"]
        assert (original["forked_from"], original["forked_at"]) == (None, None)
        with anyio.fail_after(DEADLINE):
            await said(client, run_id, "one")
            paused = await client.post(f"/v1/runs/{run_id}/pause", json={"wait": 60})
            assert paused.status_code == 200, paused.text
            resumed = await client.post(
                f"/v1/runs/{run_id}/resume", json={"message": "turn two", "env": agent(*turn("two"))}
            )
            assert resumed.status_code == 200, resumed.text
            await said(client, run_id, "two")
            paused = await client.post(f"/v1/runs/{run_id}/pause", json={"wait": 60})
            assert paused.status_code == 200, paused.text
        first, second = (await client.get(f"/v1/runs/{run_id}/checkpoints")).json()
        assert (first["reason"], second["reason"]) == ("pause", "pause")

        # The fork: the conversation and the workspace as they stood after the first turn.
        body = {
            "checkpoint": first["id"],
            "message": "fork turn",
            "env": agent({"recall": True}, {"read_file": "one.txt"}, {"read_file": "two.txt"}),
        }
        key = {"Idempotency-Key": "fork-1"}
        forked = await client.post(f"/v1/runs/{run_id}/fork", json=body, headers=key)
        assert forked.status_code == 201, forked.text
        fork = forked.json()
        assert fork["id"] != run_id
        assert (fork["forked_from"], fork["forked_at"]) == (run_id, first["id"])
        assert fork["workspace_id"] == original["workspace_id"]
        again = await client.post(f"/v1/runs/{run_id}/fork", json=body, headers=key)
        assert (again.status_code, again.json()["id"]) == (200, fork["id"])
        assert again.headers["Idempotent-Replayed"] == "true"
        other = await client.post(f"/v1/runs/{run_id}/fork", json={**body, "message": "no"}, headers=key)
        assert (other.status_code, other.json()["error"]) == (422, "idempotency_key_reused")

        done = await ended(client, fork["id"])
        assert (done["state"], done["outcome"]) == ("finished", "ok"), done["error"]
        assert (done["forked_from"], done["forked_at"]) == (run_id, first["id"])
        said_by_fork = await texts(client, fork["id"])
        assert "do the task | fork turn" in said_by_fork  # turn two is not in its conversation
        assert "one" in said_by_fork
        assert "missing: two.txt" in said_by_fork  # nor in its workspace
        listed = (await client.get(f"/v1/runs/{fork['id']}/checkpoints")).json()
        assert [(c["reason"], c["parent"]) for c in listed] == [("fork", first["id"])]
        assert (await client.get(f"/v1/runs/{run_id}")).json()["state"] == "paused"  # the original's own

        # The rewind: the original itself, from its first checkpoint.
        rewound = await client.post(
            f"/v1/runs/{run_id}/rewind",
            json={
                "checkpoint": first["id"],
                "message": "again",
                "env": agent({"recall": True}, {"read_file": "two.txt"}),
            },
        )
        assert rewound.status_code == 200, rewound.text
        assert (rewound.json()["id"], rewound.json()["forked_from"]) == (run_id, None)
        done = await ended(client, run_id)
        assert (done["state"], done["outcome"]) == ("finished", "ok"), done["error"]
        said_after = await texts(client, run_id)
        assert "do the task | again" in said_after
        assert "missing: two.txt" in said_after  # the rewind's: no turn before read it
        listed = (await client.get(f"/v1/runs/{run_id}/checkpoints")).json()
        assert [(c["reason"], c["parent"]) for c in listed][2:] == [("rewind", first["id"])]


async def test_what_cannot_be_forked_or_rewound_and_another_tenants_run_are_refused(tmp_path: Path) -> None:
    async with serving(tmp_path) as served:
        secret = await tokens(served.store)
        async with (
            served.client(secret["a"]) as a,
            served.client(secret["b"]) as b,
            served.client(secret["admin"]) as admin,
        ):
            made = await a.post("/v1/runs", json=fake_run(tmp_path, [{"text": "up"}, {"stall": True}]))
            assert made.status_code == 201, made.text
            run_id = made.json()["id"]
            with anyio.fail_after(DEADLINE):
                await said(a, run_id, "up")
                taken = await a.post(f"/v1/runs/{run_id}/checkpoints")
            assert taken.status_code == 201, taken.text
            checkpoint = taken.json()["id"]

            for path, body in (("fork", {"checkpoint": "ck-nope"}), ("rewind", {"checkpoint": "ck-nope"})):
                refused = await a.post(f"/v1/runs/{run_id}/{path}", json=body)
                assert (refused.status_code, refused.json()["error"]) == (422, "checkpoint_not_found"), path
            running = await a.post(f"/v1/runs/{run_id}/rewind", json={"checkpoint": checkpoint})
            assert (running.status_code, running.json()["error"]) == (409, "run_state")  # pause it first
            unnamed = await a.post(f"/v1/runs/{run_id}/rewind", json={})
            assert (unnamed.status_code, unnamed.json()["error"]) == (422, "invalid")
            rerouted = await a.post(f"/v1/runs/{run_id}/fork", json={"env": {"ANTHROPIC_BASE_URL": "x"}})
            assert (rerouted.status_code, rerouted.json()["error"]) == (422, "invalid")
            for path in ("fork", "rewind"):
                for who, target in ((b, run_id), (a, "run-missing")):
                    missing = await who.post(f"/v1/runs/{target}/{path}", json={"checkpoint": checkpoint})
                    assert (missing.status_code, missing.json()["error"]) == (404, "run_not_found"), path

            # A fork of a running run is its tenant's: an admin's fork of it too.
            forks = []
            for who in (a, admin):
                forked = await who.post(
                    f"/v1/runs/{run_id}/fork",
                    json={"checkpoint": checkpoint, "env": agent({"text": "forked"})},
                )
                assert forked.status_code == 201, forked.text
                forks.append(forked.json()["id"])
            for fork_id in forks:
                assert (await a.get(f"/v1/runs/{fork_id}")).status_code == 200
                assert (await b.get(f"/v1/runs/{fork_id}")).status_code == 404
                assert (await ended(a, fork_id))["outcome"] == "ok"
            assert set(forks) <= {r["id"] for r in (await a.get("/v1/runs")).json()}
            assert not set(forks) & {r["id"] for r in (await b.get("/v1/runs")).json()}

            # A run with no checkpoint has nothing to fork from.
            bare = await a.post("/v1/runs", json=fake_run(tmp_path, [{"text": "hi"}]))
            assert (await ended(a, bare.json()["id"]))["outcome"] == "ok"
            none = await a.post(f"/v1/runs/{bare.json()['id']}/fork", json={})
            assert (none.status_code, none.json()["error"]) == (409, "run_state")
            paused = await a.post(f"/v1/runs/{run_id}/pause", json={"wait": 60})
            assert paused.status_code == 200, paused.text
