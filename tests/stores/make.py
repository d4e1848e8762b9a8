"""Make a store as nodeprov writes it at this commit, for the upgrade tests (tests/test_upgrades.py).

    python -m tests.stores.make sqlite:///PATH MANIFEST.json
    python -m tests.stores.make 'postgresql://...?options=-csearch_path%3DSCHEMA' MANIFEST.json

It drives the library as a user would, with the fake agent on local nodes: a finished run
whose prompt has an image, a failed run, a run paused with its node kept, a run paused with
its node released (resumable on a fresh node), a warm pool with a ready node and a node a
run claimed, API tokens (one revoked) and an idempotency key. The manifest says what was
made, for the test to find again after the upgrade. Run it once per schema version that is
kept as a fixture (tests/stores/README.md), and commit its output.
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from nodeprov.prompts import ImageBlock, TextBlock
from nodeprov.runs import AgentMessage, Orchestrator, Pool, Run
from nodeprov.store import Store
from nodeprov.store._schema import MIGRATIONS
from nodeprov.testing import fake_agent_command

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def until_said(run: Run) -> None:
    with anyio.fail_after(60):
        async for event in run.events():
            if isinstance(event, AgentMessage):
                return
    raise AssertionError(f"run {run.id} ended before its agent spoke: {run.error}")


async def make(url: str, work: Path) -> dict[str, Any]:
    fake = fake_agent_command(work)
    root = {"root": str(work / "nodes")}
    local: dict[str, Any] = {"provider": "local", "provider_settings": root, "permission": "edit"}

    def agent(*steps: dict[str, Any]) -> dict[str, Any]:
        return {"cli_path": fake, "env": {"NODEPROV_FAKE_AGENT": json.dumps(list(steps))}}

    manifest: dict[str, Any] = {"schema": len(MIGRATIONS), "runs": {}}
    async with await Store.open(url) as store:
        async with Orchestrator(store, keep_pools=True, poll_interval=0.05) as plane:
            image = ImageBlock.from_bytes(PNG)
            finished = await plane.start(
                [TextBlock("look at this"), image], options=agent({"text": "a red dot"}), **local
            )
            assert await finished.wait() == "ok", finished.error
            failed = await plane.start("fail", options=agent({"error_result": "API Error: 500"}), **local)
            await failed.wait()
            kept = await plane.start(
                "keep", options=agent({"text": "working"}, {"stall": True}), keep_node=True, **local
            )
            await until_said(kept)
            kept_snapshot = await kept.pause("human", "overnight", keep_node=True)
            released = await plane.start(
                "release", options=agent({"text": "working"}, {"stall": True}), **local
            )
            await until_said(released)
            released_snapshot = await released.pause("external", "budget")

            pool = Pool(name="warm", provider="local", provider_settings={"root": str(work / "pool")}, size=1)
            await plane.pools.create(pool)
            with anyio.fail_after(60):
                while (await plane.pools.get("warm")).ready < 1:  # noqa: ASYNC110 - the store
                    await anyio.sleep(0.05)
            # The fake agent runs from where it is: nothing to ship onto the pool's node.
            from_pool = {**agent({"text": "warm"}), "ship_cli": False}
            claimed = await plane.start("from the pool", pool="warm", options=from_pool, permission="edit")
            assert await claimed.wait() == "ok", claimed.error
            with anyio.fail_after(60):  # refilled
                while (await plane.pools.get("warm")).ready < 1:  # noqa: ASYNC110 - the store
                    await anyio.sleep(0.05)
            for run, snapshot in (
                (finished, None),
                (failed, None),
                (kept, kept_snapshot),
                (released, released_snapshot),
                (claimed, None),
            ):
                record = await store.run(run.id)
                assert record is not None
                manifest["runs"][run.id] = {
                    "state": record.state,
                    "events": await store.last_event_seq(run.id),
                    "session": record.agent_session_id,
                    "project_key": record.project_key,
                    "token": snapshot.token if snapshot else None,
                    "node_id": record.node_id,
                }
            manifest["finished"], manifest["failed"] = finished.id, failed.id
            manifest["kept"], manifest["released"], manifest["claimed"] = kept.id, released.id, claimed.id
            manifest["image"] = image.sha256
            manifest["pool_nodes"] = sorted(n.id for n in await store.pools.nodes("warm"))
        token, secret = await store.tokens.create("ci", ["read", "runs"])
        revoked, _ = await store.tokens.create("old", ["admin"])
        await store.tokens.revoke(revoked.id)
        manifest["token"] = {"id": token.id, "secret": secret, "revoked": revoked.id}
        await store.idempotency.reserve(
            "token:" + token.id, "key-1", kind="run", fingerprint="f", resource_id=finished.id, holder="me"
        )
        manifest["idempotency"] = ["token:" + token.id, "key-1", finished.id]
        manifest["transcript_entries"] = {
            run_id: len(
                await store.transcripts.load(
                    {"project_key": facts["project_key"], "session_id": facts["session"]}
                )
                or []
            )
            for run_id, facts in manifest["runs"].items()
            if facts["session"]
        }
    return manifest


def main() -> None:
    url, manifest_path = sys.argv[1], Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as work:
        manifest = anyio.run(make, url, Path(work))
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
