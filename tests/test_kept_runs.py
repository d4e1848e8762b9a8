"""Kept agents in runs, with the fake CLI on local nodes (issue 45): a run records where its
agent is kept before the agent starts, so that a control plane killed before the agent said
anything leaves an agent another can take over (before, only its first message recorded
it: until then, nobody could, for the agent's whole grace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeprov.runs import Orchestrator
from nodeprov.store import Store
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import wait_until

pytestmark = pytest.mark.anyio


async def test_a_kept_agent_is_findable_before_it_says_anything(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    steps = [{"wait_for": str(flag)}, {"text": "hi"}]
    options = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps(steps)},
    }
    where = {"provider": "local", "provider_settings": {"root": str(tmp_path / "nodes")}}
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
