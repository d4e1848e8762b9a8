"""Kept agents in runs, with the fake CLI on local nodes (issue 45). A run records where its
agent is kept before the agent starts, so that a control plane killed before the agent said
anything leaves an agent another can take over (before, only its first message recorded
it: until then, nobody could, for the agent's whole grace). An agent its keeper stopped
says why in the run's error."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig
from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio


async def test_a_kept_agent_is_findable_before_it_says_anything(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    steps = [{"wait_for": str(flag)}, {"text": "hi"}]
    options: dict[str, Any] = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
    }
    where: dict[str, Any] = {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}
    async with (
        await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
        Orchestrator(store, agent_grace=30) as plane,
    ):
        run = await plane.start("go", options=options, **where)

        async def recorded() -> bool:
            record = await store.run(run.id)
            return record is not None and record.agent_keeper is not None

        assert await wait_until(recorded, 30), "the run never said where its agent is kept"
        kinds = [event.kind for event in await store.events(run.id)]
        assert "agent.message" not in kinds  # the agent has said nothing yet
        flag.touch()
        assert await run.wait() == "ok", run.error


async def test_a_kept_agent_stopped_at_the_nodes_lifetime_says_so(tmp_path: Path) -> None:
    """Before, the run failed with "the agent process exited with status 143"."""
    steps = [{"text": "working"}, {"wait_for": str(tmp_path / "never")}]
    options: dict[str, Any] = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
    }
    where: dict[str, Any] = {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}
    async with (
        await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
        Orchestrator(store, agent_grace=30) as plane,
    ):
        run = await plane.start(
            "go", options=options, node_config=NodeConfig(ttl=timedelta(seconds=3)), **where
        )
        with anyio.fail_after(60):
            assert await run.wait() == "error"
    assert run.error is not None
    assert "the node reached the end of its lifetime, and its keeper stopped the agent" in run.error


async def test_a_keeper_that_cannot_start_says_why(tmp_path: Path) -> None:
    """Before, a node whose PATH finds nothing failed the run with "the keeper ... is gone"."""
    options: dict[str, Any] = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": "[]"}}
    where: dict[str, Any] = {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}
    async with (
        await Store.open(f"sqlite:///{tmp_path}/runs.db") as store,
        Orchestrator(store, agent_grace=30) as plane,
    ):
        config = NodeConfig(env={"PATH": "/nonexistent"})
        run = await plane.start("go", options=options, node_config=config, **where)
        with anyio.fail_after(60):
            assert await run.wait() == "error"
    assert run.error is not None
    assert "its keeper did not start (no mkdir on the PATH it was given, /nonexistent" in run.error
