"""The archive holds the whole conversation, whatever the number of nodes it lived on: runs
with random pauses (node kept or released), node deaths and fresh-node resumes, on local
nodes, with the fake agent (which keeps and mirrors its transcript as the real CLI does).

A local node's directory is in the agent's state key, so every fresh node files the
conversation under a new key; the run's archive must not follow it.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import get_provider
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Run
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio

RUNS = int(os.environ.get("NODEPROV_CONVERSATION_RUNS", "8"))
AT_ONCE = 4
RUN_DEADLINE = 90


@pytest.fixture
def agent(tmp_path: Path) -> Callable[[], dict[str, Any]]:
    """Options for a fake agent that answers each message, then works on until stopped."""
    command = fake_agent_command(tmp_path)
    steps = json.dumps([{"text": "on it"}, {"stall": True}])
    return lambda: {"cli_path": command, "env": {"NODEPROV_FAKE_AGENT": steps}}


async def answered(run: Run) -> str:
    """Wait until the agent answered this drive's message; return the node's id."""
    node_id = None
    async for event in run.events():
        if isinstance(event, NodeReady):
            node_id = event.node_id
        elif isinstance(event, AgentMessage) and type(event.message).__name__ == "AgentText":
            assert node_id is not None
            return node_id
    raise AssertionError(f"run {run.id} ended before its agent answered: {run.error}")


async def archived(store: Store, run: Run) -> list[dict[str, Any]]:
    record = await store.run(run.id)
    assert record is not None
    if record.project_key is None or record.agent_session_id is None:
        return []
    key = {"project_key": record.project_key, "session_id": record.agent_session_id}
    return list(await store.transcripts.load(key) or [])  # type: ignore[arg-type]


def user_messages(entries: list[dict[str, Any]]) -> list[str]:
    return [str(entry["message"]["content"]) for entry in entries if entry.get("type") == "user"]


async def until_archived(store: Store, run: Run, message: str) -> None:
    """Wait until the agent's mirror stored ``message`` (what a node that dies keeps)."""
    while message not in user_messages(await archived(store, run)):  # noqa: ASYNC110 - another process's writes
        await anyio.sleep(0.02)


async def test_the_whole_conversation_survives_pauses_node_deaths_and_fresh_nodes(
    store: Store, agent: Callable[[], dict[str, Any]], tmp_path: Path
) -> None:
    settings = {"root": str(tmp_path / "nodes")}
    provider = get_provider("local", **settings)
    limiter = anyio.CapacityLimiter(AT_ONCE)

    async def one(seed: int) -> None:
        rng = random.Random(seed)
        said = [f"task {seed}"]
        run = await plane.start(
            said[0], options=agent(), provider="local", provider_settings=settings, permission="edit"
        )
        for step in range(rng.randint(2, 4)):
            node_id = await answered(run)
            await until_archived(store, run, said[-1])
            ending = rng.choice(["pause", "pause and keep the node", "the node dies"])
            if ending == "the node dies":
                await (await provider.attach(node_id)).destroy()
                assert await run.wait() == "error"
            else:
                await run.pause("human", f"step {step}", keep_node=ending != "pause")
            said.append(f"message {seed}.{step}")
            run = await plane.resume_run(run.id, message=said[-1], options=agent())
        await answered(run)
        await until_archived(store, run, said[-1])
        await run.pause("human", "the end")
        assert user_messages(await archived(store, run)) == said, f"seed {seed}"

    async def bounded(seed: int) -> None:
        async with limiter:
            with anyio.fail_after(RUN_DEADLINE):
                await one(seed)

    async with Orchestrator(store) as plane, anyio.create_task_group() as tg:
        for seed in range(RUNS):
            tg.start_soon(bounded, seed)
