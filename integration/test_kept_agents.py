"""Kept agents (``Orchestrator(agent_grace=...)``) with the real Claude Code CLI and Codex CLI
on the scripted models: the channel to the agent dropped mid-turn (its attach killed on the
node) is re-attached and the turn goes on, on the same node, without a pause; every message
reaches the run's events once, in order, and the model sees each request once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.runs import AgentDetached, AgentMessage, AgentReattached, NodeReady, Orchestrator, Run, RunEvent
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker

from .agents import TURN_TIMEOUT, local, on_docker, require_claude_cli, run_options, until_tool_runs

pytestmark = pytest.mark.anyio

# Kills the processes of every attach to a keeper on the node: each kept agent's channel drops.
_DROP = 'for f in "$HOME"/.nodeprov/keep/*/attach; do while read -r p s; do kill -9 "$p"; done <"$f"; done; :'


def _where(provider: str, tmp_path: Path, base_image: str) -> dict[str, Any]:
    return local(tmp_path) if provider == "local" else on_docker(base_image)


async def _node_of(run_: Run, where: dict[str, Any]) -> NodeHandle:
    ready = await anext(event async for event in run_.events() if isinstance(event, NodeReady))
    return await get_provider(where["provider"], **where["provider_settings"]).attach(ready.node_id)


async def _until(run_: Run, kinds: tuple[type[RunEvent], ...]) -> list[RunEvent]:
    """The run's events up to the first of each of ``kinds`` in turn."""
    seen: list[RunEvent] = []
    wanted = list(kinds)
    with anyio.fail_after(TURN_TIMEOUT):
        async for event in run_.events():
            seen.append(event)
            if isinstance(event, wanted[0]):
                wanted.pop(0)
                if not wanted:
                    return seen
    raise AssertionError(f"the run ended before {kinds}: {[e.kind for e in seen]}")


def _waiting_tool(marker: str) -> str:
    """A tool that runs (a ``sleep`` named by ``marker`` beside it) until its flag file exists."""
    flag = f"/tmp/nodeprov-flag-{marker}"
    return f"sh -c 'sleep {marker} & while [ ! -e {flag} ]; do sleep 0.05; done; kill $!; echo tool finished'"


@pytest.mark.parametrize("provider", ["local", "docker"])
async def test_a_claude_turn_goes_on_across_a_dropped_channel(
    provider: str, store: Store, scripted_model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    require_claude_cli()
    where = local(tmp_path) if provider == "local" else on_docker(request.getfixturevalue("base_image"))
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    async with Orchestrator(store, agent_grace=60) as orchestrator:
        run_ = await orchestrator.start("work long", options=run_options(scripted_model), **where)
        await until_tool_runs(marker)
        node = await _node_of(run_, where)
        code, _, err = await run(node, "/bin/sh", "-c", _DROP)
        assert code == 0, err
        await _until(run_, (AgentDetached, AgentReattached))
        await run(node, "touch", f"/tmp/nodeprov-flag-{marker}")
        assert await run_.wait() == "ok", run_.error
        events = [event async for event in run_.events()]
    assert host_processes_matching(marker) == []
    kinds = [event.kind for event in events]
    assert kinds.count("agent.detached") == kinds.count("agent.reattached") == 1
    assert "run.paused" not in kinds
    messages = [type(event.message).__name__ for event in events if isinstance(event, AgentMessage)]
    assert messages.count("ToolUse") == messages.count("ToolResult") == 1, messages
    assert messages.count("Result") == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(scripted_model.agent_requests) == 2  # no "continue", no tool call asked twice
