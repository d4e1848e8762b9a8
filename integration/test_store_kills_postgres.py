"""Runs ride out a PostgreSQL server that ends their connections: while runs stream messages,
the server ends one of the control plane's connections (``pg_terminate_backend``) at seeded
random moments, 50 times. Every run still succeeds, every transcript entry of the agent has
its ``agent.message`` event, and nothing is stored twice. ``NODEPROV_TEST_SEED`` picks
another seed; the test prints what it did."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from nodeprov.runs import Orchestrator, Run
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio

KILLS = 50
AT_LEAST_RUNS = 15
IN_FLIGHT = 4
NAME = "nodeprov-killed"


async def verify(store: Store, run_ids: list[str]) -> dict[str, int]:
    """Per run: events numbered 1..N without a gap, each assistant entry of the transcript
    with its agent.message event, no entry twice. Returns the totals."""
    totals = Counter(runs=len(run_ids))
    for run_id in run_ids:
        record = await store.run(run_id)
        assert record is not None
        assert (record.state, record.error) == ("finished", None), run_id
        events = await store.events(run_id, limit=100_000)
        assert [event.seq for event in events] == list(range(1, len(events) + 1)), run_id
        said = {
            raw["uuid"]
            for event in events
            if event.kind == "agent.message"
            and isinstance(raw := json.loads(event.body)["message"].get("raw"), dict)
            and raw.get("type") == "assistant"
        }
        key = {"project_key": record.project_key, "session_id": record.agent_session_id}
        entries = await store.transcripts.load(key)  # type: ignore[arg-type]
        assert entries is not None, run_id
        uuids = [entry.get("uuid") for entry in entries]
        totals["entries"] += len(entries)
        totals["duplicates"] += len(uuids) - len(set(uuids))
        assistant = {entry["uuid"] for entry in entries if entry.get("type") == "assistant"}
        totals["entries without their event"] += len(assistant - said)
        totals["events without their entry"] += len(said - assistant)
    return dict(totals)


async def test_runs_ride_out_connections_the_server_ends(postgres_url: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("NODEPROV_TEST_SEED", "43"))
    rng = random.Random(seed)
    url = f"{postgres_url}&application_name={NAME}"
    steps = [{"stream": [25, 200, 0.01]}, {"text": "done"}]
    options: dict[str, Any] = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
    }
    landed = 0
    runs: list[Run] = []
    async with (
        await Store.open(url) as store,
        await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin,
        Orchestrator(store, lease_ttl=30, reconcile_interval=0, retention=None) as plane,
    ):

        async def kill() -> None:
            nonlocal landed
            while landed < KILLS:
                await anyio.sleep(rng.uniform(0.0, 0.08))
                ours = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                rows = await (await admin.execute(ours, (NAME,))).fetchall()
                if rows:
                    pid = rng.choice(sorted(row[0] for row in rows))
                    ended = await (await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))).fetchone()
                    landed += bool(ended and ended[0])

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill)
            with anyio.fail_after(240):
                while landed < KILLS or len(runs) < AT_LEAST_RUNS:
                    batch = [
                        await plane.start(
                            f"task {len(runs) + n}",
                            provider="local",
                            provider_settings={"root": str(tmp_path / "nodes")},
                            options=options,
                            permission="edit",
                        )
                        for n in range(IN_FLIGHT)
                    ]
                    runs += batch
                    for run in batch:
                        assert await run.wait() == "ok", run.error
        totals = await verify(store, [run.id for run in runs])
    print(f"seed {seed}: {landed} connections ended by the server during {len(runs)} runs: {totals}")
    assert landed == KILLS
    assert totals["duplicates"] == totals["entries without their event"] == 0
    assert totals["events without their entry"] == 0


async def _run_through_a_cut(postgres_url: str, tmp_path: Path, cut_for: float) -> Run:
    """A run on a store reached through a relay that is cut for ``cut_for`` seconds while the
    agent talks; the store is tried again for 3 s."""
    from .test_service_store_outage import _proxied

    steps = [{"stream": [40, 100, 0.05]}, {"text": "done"}]
    options = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)}}
    async with (
        _proxied(postgres_url) as (proxy, url),
        await Store.open(url, retry_for=3.0) as store,
        Orchestrator(store, reconcile_interval=0, retention=None) as plane,
    ):
        run = await plane.start(
            "task",
            provider="local",
            provider_settings={"root": str(tmp_path / "nodes")},
            options=options,
            permission="edit",
        )
        with anyio.fail_after(60):
            async for event in run.events():
                if event.kind == "agent.message":
                    break
        proxy.cut()
        await anyio.sleep(cut_for)  # the outage itself: what is under test is what a run makes of it
        proxy.restore()
        with anyio.fail_after(60):
            await run.wait()
        return run


async def test_a_run_rides_out_a_store_outage_shorter_than_its_bound(
    postgres_url: str, tmp_path: Path
) -> None:
    run = await _run_through_a_cut(postgres_url, tmp_path, 1.0)
    assert (run.outcome, run.error) == ("ok", None)


async def test_a_run_fails_when_the_store_is_away_past_its_bound_and_says_so(
    postgres_url: str, tmp_path: Path
) -> None:
    run = await _run_through_a_cut(postgres_url, tmp_path, 6.0)
    assert run.outcome == "error"
    assert run.error is not None
    assert "was unavailable for 3 s" in run.error, run.error
    assert "\n" not in run.error
