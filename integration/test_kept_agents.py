"""Kept agents (``Orchestrator(agent_grace=...)``) with the real Claude Code CLI and Codex CLI
on the scripted models: the channel to the agent dropped mid-turn (its attach killed on the
node) is re-attached and the turn goes on, on the same node, without a pause; every message
reaches the run's events once, in order, and the model sees each request once."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.node.keeper import kept_state, reattach
from nodeprov.runs import (
    AgentDetached,
    AgentMessage,
    AgentReattached,
    NodeReady,
    Orchestrator,
    Run,
    RunEvent,
    event_from_json,
)
from nodeprov.runs.lease import owner_check
from nodeprov.store import Store
from nodeprov.testing import ExecCommand, ResponsesText, ScriptedModel, ScriptedResponses, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker, wait_until

from .agents import (
    TURN_TIMEOUT,
    codex_run_options,
    local,
    on_docker,
    on_ssh,
    require_claude_cli,
    require_codex_cli,
    run_options,
    until_tool_runs,
)

pytestmark = pytest.mark.anyio

# Kills the process group of every attach to a keeper on the node (see DROP_ATTACH): each
# kept agent's channel drops.
_DROP = (
    'for f in "$HOME"/.nodeprov/keep/*/attach; do'
    ' read -r p s <"$f" && { kill -9 -"$p" || kill -9 "$p"; } 2>/dev/null; done; :'
)


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


async def _kill_attaches(node: NodeHandle) -> None:
    code, _, err = await run(node, "/bin/sh", "-c", _DROP)
    assert code == 0, err


async def _goes_on_across_a_drop(
    store: Store,
    where: dict[str, Any],
    marker: str,
    start: dict[str, Any],
    drop: Callable[[NodeHandle], Awaitable[None]] = _kill_attaches,
) -> list[RunEvent]:
    """Start a run whose tool waits for its flag, ``drop`` the agent's channel while the tool
    runs, then raise the flag: the run's events, once it finished ``ok``."""
    async with Orchestrator(store, agent_grace=60) as orchestrator:
        run_ = await orchestrator.start("work long", **start, **where)
        await until_tool_runs(marker)
        node = await _node_of(run_, where)
        await drop(node)
        await _until(run_, (AgentDetached, AgentReattached))
        await run(node, "touch", f"/tmp/nodeprov-flag-{marker}")
        assert await run_.wait() == "ok", run_.error
        events = [event async for event in run_.events()]
    assert host_processes_matching(marker) == []
    kinds = [event.kind for event in events]
    assert kinds.count("agent.detached") == kinds.count("agent.reattached") == 1
    assert "run.paused" not in kinds
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    return events


def _where(provider: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if provider == "ssh":
        return on_ssh(request.getfixturevalue("sshd"))
    return local(tmp_path) if provider == "local" else on_docker(request.getfixturevalue("base_image"))


async def until_kept(store: Store, run_id: str) -> None:
    """Wait until ``run_id`` has stored where its agent is kept (a take-over needs it)."""

    async def kept() -> bool:
        record = await store.run(run_id)
        return record is not None and record.agent_keeper is not None

    assert await wait_until(kept, 30), "the run never stored where its agent is kept"


def _codex_waiting(responses: ScriptedResponses, marker: str) -> dict[str, Any]:
    """``Orchestrator.start`` arguments of a Codex run whose command waits for its flag."""
    require_codex_cli()
    command = ["sh", "-c", _waiting_tool(marker).removeprefix("sh -c '").removesuffix("'")]
    responses.extend([ExecCommand(command), ResponsesText("all done")])
    return {"agent": "codex", "options": codex_run_options(responses)}


def _kinds(events: list[RunEvent]) -> list[str]:
    return [type(event.message).__name__ for event in events if isinstance(event, AgentMessage)]


@pytest.mark.parametrize("provider", ["local", "docker"])
async def test_a_claude_turn_goes_on_across_a_dropped_channel(
    provider: str, store: Store, scripted_model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    start = {"options": run_options(scripted_model)}
    messages = _kinds(await _goes_on_across_a_drop(store, _where(provider, tmp_path, request), marker, start))
    assert messages.count("ToolUse") == messages.count("ToolResult") == 1, messages
    assert messages.count("Result") == 1
    assert len(scripted_model.agent_requests) == 2  # no "continue", no tool call asked twice


@pytest.mark.parametrize("provider", ["local", "docker"])
async def test_a_codex_turn_goes_on_across_a_dropped_channel(
    provider: str,
    store: Store,
    scripted_responses: ScriptedResponses,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    marker = unique_marker()
    start = _codex_waiting(scripted_responses, marker)
    events = await _goes_on_across_a_drop(store, _where(provider, tmp_path, request), marker, start)
    messages = _kinds(events)
    # (Whether Codex reports this command's completion varies, kept or not, seen without a
    # keeper too: ToolResult is not counted.)
    assert messages.count("ToolUse") == messages.count("Result") == 1, messages
    assert len(scripted_responses.agent_requests) == 2


_CONTROL_PLANE = """
import json, sys, anyio
from nodeprov.runs import Orchestrator
from nodeprov.store import Store

async def main() -> None:
    url, where, start = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    async with await Store.open(url) as store, Orchestrator(store, lease_ttl=2, agent_grace=60) as plane:
        run = await plane.start("work long", **start, **where)
        print(run.id, flush=True)
        await anyio.sleep(3600)

anyio.run(main)
"""


async def _taken_over(
    store: Store, where: dict[str, Any], marker: str, start: dict[str, Any], *, ends_first: bool = False
) -> list[RunEvent]:
    """Start a run whose tool waits for its flag in a control plane of its own, SIGKILL that
    while the tool runs, take the run over here (reconcile), raise the flag: the run's events,
    once it finished ``ok``."""
    plane = await anyio.open_process(
        [sys.executable, "-c", _CONTROL_PLANE, store.url, json.dumps(where), json.dumps(start)]
    )
    try:
        assert plane.stdout is not None
        with anyio.fail_after(60):
            run_id = (await plane.stdout.receive()).decode().strip()
        await until_tool_runs(marker)

        await until_kept(store, run_id)
    finally:
        plane.kill()  # SIGKILL: the control plane gets no chance to clean up
        await plane.wait()
        await plane.aclose()
    if ends_first:  # the agent finishes its turn with no control plane attached
        (Path("/tmp") / f"nodeprov-flag-{marker}").touch()
        record = await store.run(run_id)
        assert record is not None
        assert record.node_id is not None
        assert record.agent_keeper is not None
        node = await get_provider(where["provider"], **where["provider_settings"]).attach(record.node_id)
        keeper = record.agent_keeper

        async def turn_over() -> bool:  # its result is in its output (Claude's CLI waits on for input)
            code, _, _ = await run(node, "grep", "-q", '"type":"result"', f"{keeper}/out")
            return code == 0 or await kept_state(node, keeper) == "exited"

        assert await wait_until(turn_over, TURN_TIMEOUT)
    async with Orchestrator(store, take_over=False) as bystander:  # as `nodeprov run` is

        async def owner_dead() -> bool:
            record = await store.run(run_id)
            return record is not None and (await owner_check(store))(record.owner) is False

        assert await wait_until(owner_dead, 60)
        ended = (await bystander.reconcile()).ended
        assert run_id not in ended, "a control plane that takes no run over ended a kept agent's run"
    async with Orchestrator(store, agent_grace=60) as second:

        async def adopted() -> bool:
            return run_id in (await second.reconcile()).adopted

        assert await wait_until(adopted, 30), "the dead control plane's run was not taken over"
        node = await _node_of_record(store, run_id, where)
        await run(node, "touch", f"/tmp/nodeprov-flag-{marker}")
        assert await second.run(run_id).wait() == "ok", second.run(run_id).error
    events = [event_from_json(json.loads(e.body)) for e in await store.events(run_id)]
    kinds = [event.kind for event in events]
    assert kinds.count("agent.reattached") == 1
    assert kinds[-1] == "run.finished"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert host_processes_matching(marker) == []
    return events


@pytest.mark.parametrize("provider", ["local", "docker"])
async def test_a_killed_control_plane_s_kept_run_is_taken_over_and_completes(
    provider: str, store: Store, scripted_model: ScriptedModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The control plane driving a run is SIGKILLed mid-turn; another (this process) reconciles,
    takes the run over and re-attaches to its agent, whose turn completes: every message of
    the turn is an event once, in order, and the model saw each request once."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    start = {"options": run_options(scripted_model)}
    messages = _kinds(await _taken_over(store, _where(provider, tmp_path, request), marker, start))
    assert messages.count("ToolUse") == messages.count("ToolResult") == messages.count("Result") == 1, (
        messages
    )
    assert messages.count("AgentText") == 1, messages
    assert len(scripted_model.agent_requests) == 2  # no "continue", no tool call asked twice


async def test_a_run_whose_agent_ended_while_its_control_plane_was_dead_completes(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """The agent finishes its turn after its control plane died and before another takes the
    run over: the take-over reads the turn's end from its output, and the run ends ok."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    start = {"options": run_options(scripted_model)}
    messages = _kinds(await _taken_over(store, local(tmp_path), marker, start, ends_first=True))
    assert messages.count("ToolUse") == messages.count("ToolResult") == messages.count("Result") == 1, (
        messages
    )
    assert messages.count("AgentText") == 1, messages


async def test_a_codex_run_whose_agent_ended_while_its_control_plane_was_dead_completes(
    store: Store, scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    """Codex's turn process exits at the turn's end: the take-over reads the turn's end from the
    output its keeper kept."""
    marker = unique_marker()
    start = _codex_waiting(scripted_responses, marker)
    messages = _kinds(await _taken_over(store, local(tmp_path), marker, start, ends_first=True))
    assert messages.count("ToolUse") == messages.count("Result") == messages.count("AgentText") == 1, messages


async def test_a_killed_control_plane_s_kept_codex_run_is_taken_over_and_completes(
    store: Store, scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    marker = unique_marker()
    start = _codex_waiting(scripted_responses, marker)
    messages = _kinds(await _taken_over(store, local(tmp_path), marker, start))
    # The command's start was an event before the kill: once, not again from the journal.
    # (Whether Codex reports this command's completion varies, kept or not, seen without a
    # keeper too: ToolResult is not counted.)
    assert messages.count("ToolUse") == messages.count("Result") == messages.count("AgentText") == 1, messages
    assert len(scripted_responses.agent_requests) == 2


async def _node_of_record(store: Store, run_id: str, where: dict[str, Any]) -> NodeHandle:
    record = await store.run(run_id)
    assert record is not None
    assert record.node_id is not None
    return await get_provider(where["provider"], **where["provider_settings"]).attach(record.node_id)


async def test_a_detached_run_is_adopted_by_another_control_plane(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """A control plane detaches from a run mid-turn (``nodeprov attach``'s Ctrl-C) and leaves;
    its agent goes on; another adopts the run (``nodeprov attach``) and it completes."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])
    where = local(tmp_path)
    async with Orchestrator(store, agent_grace=60, take_over=False) as first:
        run_ = await first.start("work long", options=run_options(scripted_model), **where)
        await until_tool_runs(marker)

        await until_kept(store, run_.id)
        await first.detach(run_.id)
        assert await run_.wait() == "detached"
    assert host_processes_matching(marker), "the detached agent was stopped"
    async with Orchestrator(store, agent_grace=60, take_over=False) as second:
        adopted = await second.adopt(run_.id)
        node = await _node_of_record(store, run_.id, where)
        await run(node, "touch", f"/tmp/nodeprov-flag-{marker}")
        assert await adopted.wait() == "ok", adopted.error
    events = [event_from_json(json.loads(e.body)) for e in await store.events(run_.id)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [event.kind for event in events].count("run.finished") == 1
    messages = _kinds(events)
    assert messages.count("ToolUse") == messages.count("ToolResult") == messages.count("Result") == 1, (
        messages
    )
    assert len(scripted_model.agent_requests) == 2


async def _tool_running(
    plane: Orchestrator, scripted_model: ScriptedModel, where: dict[str, Any], marker: str
) -> Run:
    """A run on ``plane`` whose tool waits for its flag, once the tool runs."""
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("unreachable")])
    run_ = await plane.start("work long", options=run_options(scripted_model), **where)
    await until_tool_runs(marker)
    return run_


async def test_a_run_pauses_after_a_re_attach(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """Interrupt and pause go through the re-attached channel."""
    require_claude_cli()
    where, marker = local(tmp_path), unique_marker()
    async with Orchestrator(store, agent_grace=60, take_over=False) as plane:
        dropped = await _tool_running(plane, scripted_model, where, marker)
        await _kill_attaches(await _node_of(dropped, where))
        await _until(dropped, (AgentDetached, AgentReattached))
        snapshot = await dropped.pause("human", "after a re-attach")
        assert await dropped.wait() == "paused"
    assert snapshot.agent_session_id
    assert host_processes_matching(marker) == []


async def test_a_run_pauses_after_a_take_over(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """A run detached by one control plane and adopted by another pauses there."""
    require_claude_cli()
    where, marker = local(tmp_path), unique_marker()
    async with Orchestrator(store, agent_grace=60, take_over=False) as plane:
        detached = await _tool_running(plane, scripted_model, where, marker)
        await until_kept(store, detached.id)
        await plane.detach(detached.id)
    async with Orchestrator(store, agent_grace=60, take_over=False) as other:
        adopted = await other.adopt(detached.id)
        await _until(adopted, (AgentReattached,))
        await adopted.pause("human", "after a take-over")
        assert await adopted.wait() == "paused"
    assert host_processes_matching(marker) == []
    kinds = [e.kind for e in [event_from_json(json.loads(r.body)) for r in await store.events(detached.id)]]
    assert kinds.count("run.paused") == kinds.count("run.finished") == 1


@pytest.mark.parametrize(
    ("provider", "keep_node"), [("local", True), ("local", False), ("docker", True), ("ssh", True)]
)
async def test_a_pause_asked_at_once_after_a_take_over_stops_the_agent_first(
    store: Store,
    scripted_model: ScriptedModel,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    provider: str,
    keep_node: bool,
) -> None:
    """Issue 45: a pause asked right after the take-over, before the re-attach, reported the
    run paused while its agent and tool ran on (``nodeprov attach --pause``): the pause
    returns once the agent is stopped, and the agent asks its model nothing more. On
    Kubernetes: test_kept_agents_kubernetes.py."""
    await paused_at_once(store, scripted_model, _where(provider, tmp_path, request), keep_node=keep_node)


async def paused_at_once(
    store: Store, scripted_model: ScriptedModel, where: dict[str, Any], *, keep_node: bool
) -> None:
    """A run detached mid-tool, adopted by another control plane, paused at once there."""
    require_claude_cli()
    marker = unique_marker()
    async with Orchestrator(store, agent_grace=60, take_over=False) as plane:
        detached = await _tool_running(plane, scripted_model, where, marker)
        await until_kept(store, detached.id)
        await plane.detach(detached.id)
    asked = len(scripted_model.agent_requests)
    async with Orchestrator(store, agent_grace=60, take_over=False) as other:
        adopted = await other.adopt(detached.id)
        with anyio.fail_after(TURN_TIMEOUT):
            snapshot = await adopted.pause("human", "at once", keep_node=keep_node)
        assert host_processes_matching(marker) == [], "paused, and the agent's tool runs on"
        assert await adopted.wait() == "paused"
    assert snapshot.node_kept is keep_node
    node = await _node_of_record(store, detached.id, where) if keep_node else None
    if node is not None:  # the tool's end, had it run on, would have reached the model
        await run(node, "touch", f"/tmp/nodeprov-flag-{marker}")
        await node.destroy()  # kept for a resume that this test does not make
    kinds = [e.kind for e in [event_from_json(json.loads(r.body)) for r in await store.events(detached.id)]]
    assert kinds[-3:] == ["node.released", "run.paused", "run.finished"], kinds
    assert len(scripted_model.agent_requests) == asked


async def test_a_drive_whose_agent_another_attached_to_lets_the_run_go(
    store: Store, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """Issue 45: two attachers both lived, and an owner that could not ask its store went on
    re-attaching while a take-over attached. Another attach takes the agent: the drive that
    had it lets go (outcome ``detached``), stopping, failing and destroying nothing."""
    require_claude_cli()
    where, marker = local(tmp_path), unique_marker()
    async with Orchestrator(store, agent_grace=60, take_over=False) as plane:
        run_ = await _tool_running(plane, scripted_model, where, marker)
        await until_kept(store, run_.id)
        record = await store.run(run_.id)
        assert record is not None
        assert record.agent_keeper is not None
        node = await _node_of_record(store, run_.id, where)
        other = await reattach(node, record.agent_keeper)  # another control plane's attach
        with anyio.fail_after(TURN_TIMEOUT):
            assert await run_.wait() == "detached"
        assert host_processes_matching(marker), "the agent was stopped by the drive that lost it"
        assert await kept_state(node, record.agent_keeper) == "running"
        after = await store.run(run_.id)
        assert after is not None
        assert after.state == "running"
        await other.aclose()
    assert host_processes_matching(marker) == []
