"""Followers of a run read past events this version cannot read (a newer control plane's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from claude_agent_sdk import ClaudeAgentOptions

from nodeprov.runs import Orchestrator
from nodeprov.store import EventRecord, Store, now
from nodeprov.testing import fake_agent_command

pytestmark = pytest.mark.anyio


async def test_an_unreadable_stored_event_is_skipped_not_raised(tmp_path: Path) -> None:
    options = ClaudeAgentOptions(
        cli_path=fake_agent_command(tmp_path), env={"NODEPROV_FAKE_AGENT": json.dumps([{"text": "hi"}])}
    )
    async with await Store.open(f"sqlite:///{tmp_path}/runs.db") as store:
        async with Orchestrator(store) as orchestrator:
            run = await orchestrator.start(
                "go", provider="fake", provider_settings={"root": str(tmp_path / "nodes")}, options=options
            )
            assert await run.wait() == "ok"
        last = await store.last_event_seq(run.id)
        await store.append_events(
            [
                EventRecord(
                    run.id, last + 1, "from.the.future", now(), json.dumps({"type": "from.the.future"})
                ),
                EventRecord(run.id, last + 2, "garbled", now(), "{not json"),
            ]
        )
        async with Orchestrator(store) as reader:
            kinds = [event.kind async for event in reader.events(run.id, after=0)]
    assert kinds[0] == "run.started"
    assert kinds[-1] == "run.finished"
    assert "from.the.future" not in kinds
