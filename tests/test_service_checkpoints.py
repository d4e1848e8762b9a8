"""Checkpoints over HTTP (a real ``nodeprov serve``): a running run checkpointed on request,
listed, compared, and told in its events; a run that is not running is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.serving import fake_run, serving, sse_events

pytestmark = pytest.mark.anyio


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

        async def said(text: str) -> None:
            async with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
                async for _, _, data in sse_events(response):
                    if data.get("message", {}).get("text") == text:
                        return
            raise AssertionError(f"run {run_id} ended before its agent said {text!r}")

        with anyio.fail_after(60):
            await said("wrote")
            first = await client.post(f"/v1/runs/{run_id}/checkpoints")
            assert first.status_code == 201, first.text
            workdir = next((tmp_path / "nodes").rglob("notes.txt")).parent
        assert first.json()["reason"] == "request"
        assert first.json()["changed"]["added"] == 1
        assert "objects" not in first.json()  # where the operator keeps them is the operator's
        (workdir / "go").write_text("")
        with anyio.fail_after(60):
            await said("again")
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
