"""``nodeprov serve`` with the real Claude Code CLI on its built-in offline model (``model``
``scripted``, the default, as for ``nodeprov run``): a run over HTTP streams the agent's
messages and its result, on local nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeprov.client import Client
from nodeprov.runs import AgentMessage, RunFinished
from tests.serving import serving

from .agents import require_claude_cli

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


async def test_a_scripted_run_over_http_ends_with_its_result(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, Client(served.url) as client:
        run = await client.start("Say hello from the node", provider="local")
        events = [event async for event in client.events(run["id"])]
        kinds: list[Any] = [getattr(e.message, "kind", "") for e in events if isinstance(e, AgentMessage)]
        assert "result" in kinds
        assert isinstance(events[-1], RunFinished)
        assert events[-1].outcome == "ok", events[-1].error
        # The workspace's session goes on in the next run, on a new node.
        again = await client.start("and once more", provider="local")
        ended = await client.wait(again["id"])
        assert (ended["state"], ended["outcome"], ended["session_id"]) == (
            "finished",
            "ok",
            run["session_id"],
        )
