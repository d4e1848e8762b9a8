"""Codex runs end to end: the real Codex CLI, the scripted Responses API, real nodes (local and
Docker), a real store; and a workspace that switches between Claude and Codex."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import docker
import pytest

from nodeprov import AgentExitError, NodeConfig, NodeHandle, agent_class, get_agent, get_provider
from nodeprov.agents import AgentSession, AgentText, Result
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Run, RunStarted, RunStateError
from nodeprov.store import Store
from nodeprov.testing import (
    ExecCommand,
    ResponsesText,
    ScriptedModel,
    ScriptedResponses,
    Text,
    ToolUse,
)
from nodeprov.testing.agent_conformance import run_turn
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import (
    argument_vectors,
    codex_run_options,
    collect,
    local,
    on_docker,
    require_claude_cli,
    require_codex_cli,
    run_options,
)
from .agents import until_tool_runs as until_command_runs
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _codex_cli() -> None:
    require_codex_cli()


def messages_of(events: list[Any]) -> list[Any]:
    return [event.message for event in events if isinstance(event, AgentMessage)]


async def start_long_command(
    orchestrator: Orchestrator, responses: ScriptedResponses, prompt: str, where: dict[str, Any], **start: Any
) -> Run:
    """A codex run whose model asks for a command that runs until the run is paused."""
    marker = unique_marker()
    responses.extend([ExecCommand(["sh", "-c", f"sleep {marker}"])])
    options = start.pop("options", codex_run_options(responses))
    run = await orchestrator.start(prompt, agent="codex", options=options, **where, **start)
    await until_command_runs(marker)
    return run


@pytest.mark.parametrize("where", ["local", "docker"])
async def test_a_paused_codex_run_resumes_on_a_fresh_node(
    where: str,
    store: Store,
    scripted_responses: ScriptedResponses,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The node is released at the pause; the resume provisions another, puts the thread's
    rollout back under the workspace's CODEX_HOME, and Codex sends the model the earlier
    conversation with the new message."""
    if where == "docker":
        image: str = request.getfixturevalue("base_image")
        client: docker.DockerClient = request.getfixturevalue("docker_client")
        placement = on_docker(image)
    else:
        placement = local(tmp_path)
    responses = scripted_responses
    async with Orchestrator(store) as orchestrator:
        run = await start_long_command(orchestrator, responses, "remember: the word is quince", placement)
        snapshot = await run.pause("human", "lunch break")
        assert await run.wait() == "paused"
        first_events = await collect(run)
        assert isinstance(first_events[0], RunStarted)
        assert first_events[0].agent == "codex"
        first_node = next(e.node_id for e in first_events if isinstance(e, NodeReady))
        assert snapshot.agent_session_id == run.agent_session_id
        assert snapshot.agent_session_id  # the thread id Codex gave
        assert snapshot.node_id is None or snapshot.node_id == first_node

        before = len(responses.agent_requests)
        responses.extend([ResponsesText("it was quince")])
        resumed = await orchestrator.resume(
            snapshot.token, message="what was the word?", options=codex_run_options(responses)
        )
        assert await resumed.wait() == "ok", resumed.error
        events = await collect(resumed)
    ready = [e for e in events if isinstance(e, NodeReady)][-1]  # this drive's
    assert ready.node_id != first_node
    assert (ready.reused, ready.transcript_restored) == (False, True)
    result = [m for m in messages_of(events) if isinstance(m, Result)][-1]
    assert (result.is_error, result.text, result.session_id) == (
        False,
        "it was quince",
        snapshot.agent_session_id,
    )
    first_after_resume = responses.agent_requests[before]
    assert first_after_resume.metadata["history_initialization"] == "cold_resume"
    text = first_after_resume.text()
    assert text.index("remember: the word is quince") < text.index("what was the word?")
    if where == "docker":
        assert node_containers(client, first_node, ready.node_id) == []
    else:
        assert list((tmp_path / "nodes").iterdir()) == []


async def test_two_workspaces_on_one_node_keep_their_threads_apart(
    scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    """Each workspace has its own CODEX_HOME on the node: a thread of one cannot be resumed
    from the other, and the other's model requests never carry its conversation."""
    responses = scripted_responses
    cli = agent_class("codex").local_cli()
    assert cli is not None
    provider = get_provider("local", root=tmp_path / "nodes")
    agent = get_agent("codex", codex_run_options(responses))
    responses.extend([ResponsesText("noted"), ResponsesText("beta here")])
    async with await provider.provision(NodeConfig(tools={"codex": cli})) as node:
        async with agent.session(node, workspace="alpha") as alpha:
            assert not (await last_result(alpha, "alpha's secret plan is quince")).is_error
        async with agent.session(node, workspace="beta") as beta:
            assert not (await last_result(beta, "hello from beta")).is_error
        assert alpha.session_id
        assert beta.session_id not in (None, alpha.session_id)
        assert "alpha's secret plan" not in responses.agent_requests[-1].text()

        async with agent.session(node, workspace="beta", resume=alpha.session_id) as trespasser:
            with pytest.raises(AgentExitError) as refused:
                await run_turn(trespasser, "what is alpha's plan?")
        assert f"no rollout found for thread id {alpha.session_id}" in refused.value.stderr_tail
        assert all("what is alpha's plan?" not in r.text() for r in responses.agent_requests)

        responses.extend([ResponsesText("quince")])
        async with agent.session(node, workspace="alpha", resume=alpha.session_id) as again:
            messages = await run_turn(again, "what is the plan?")
        assert [m.text for m in messages if isinstance(m, AgentText)] == ["quince"]
        assert "alpha's secret plan is quince" in responses.agent_requests[-1].text()
        assert await _homes(node) == sorted([agent.state_key(node, "alpha"), agent.state_key(node, "beta")])


async def last_result(session: AgentSession, prompt: str) -> Result:
    messages = await run_turn(session, prompt)
    assert isinstance(messages[-1], Result), messages
    return messages[-1]


async def _homes(node: NodeHandle) -> list[str]:
    """The workspaces' CODEX_HOME directories on ``node``."""
    root = Path(node.base_env["HOME"]) / ".nodeprov" / "codex"
    return sorted(entry.name for entry in root.iterdir())


async def test_output_schema_on_a_run(
    store: Store, scripted_responses: ScriptedResponses, tmp_path: Path
) -> None:
    """A run with an output schema: Codex gets it as the response's text format, and the
    run's result carries the value."""
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    scripted_responses.extend([ResponsesText(json.dumps({"answer": "42"}))])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "answer in JSON",
            agent="codex",
            options=codex_run_options(scripted_responses, output_schema=schema),
            **local(tmp_path),
        )
        assert await run.wait() == "ok", run.error
        events = await collect(run)
    result = [m for m in messages_of(events) if isinstance(m, Result)][-1]
    assert result.structured == {"answer": "42"}
    (request,) = scripted_responses.agent_requests
    assert request.body["text"]["format"]["schema"] == schema


async def test_no_secret_in_rows_events_logs_or_argv(
    store: Store,
    scripted_responses: ScriptedResponses,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The provider key reaches Codex (the model sees it as the bearer token) and nothing
    else: not the store, the events, the logs, or any process's argument vector."""
    caplog.set_level(logging.DEBUG)
    canary = "sk-canary-" + unique_marker().replace(".", "")
    options = codex_run_options(scripted_responses, env={"NODEPROV_SCRIPTED_KEY": canary})
    async with Orchestrator(store) as orchestrator:
        run = await start_long_command(
            orchestrator, scripted_responses, "task", local(tmp_path), options=options
        )
        argvs = argument_vectors()
        snapshot = await run.pause("human", "check")
        events = [e.to_json() for e in await collect(run)]
        scripted_responses.extend([ResponsesText("done")])
        resumed = await orchestrator.resume(snapshot.token, options=options)
        assert await resumed.wait() == "ok", resumed.error
        events += [e.to_json() for e in await collect(resumed)]
    assert {r.headers.get("authorization") for r in scripted_responses.agent_requests} == {f"Bearer {canary}"}
    assert any("codex" in argv and "exec" in argv for argv in argvs)  # the CLI was running
    assert not [argv for argv in argvs if canary in argv]
    assert canary not in json.dumps(events, default=str)
    for table in ("sessions", "runs", "nodes", "snapshots", "transcript_entries", "transcript_summaries"):
        rows = await store.db.fetchall(f"SELECT * FROM {table}")
        assert rows or table == "transcript_summaries", table  # rollouts are kept without one
        assert canary not in repr(rows), table
    assert canary not in caplog.text


async def test_a_workspace_that_switches_agent_archives_the_old_session(
    store: Store, scripted_responses: ScriptedResponses, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    """A Claude run is paused; a Codex run in the same workspace archives Claude's session,
    and the paused Claude run can no longer be resumed (its session would fork the
    workspace's history)."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        claude = await orchestrator.start(
            "claude's task", options=run_options(scripted_model), workspace="shared", **local(tmp_path)
        )
        await until_command_runs(marker)
        snapshot = await claude.pause("human", "switching")
        scripted_responses.extend([ResponsesText("codex here")])
        codex = await orchestrator.start(
            "codex's task",
            agent="codex",
            options=codex_run_options(scripted_responses),
            workspace="shared",
            **local(tmp_path),
        )
        assert await codex.wait() == "ok", codex.error
        with pytest.raises(RunStateError, match="archived when the workspace switched to another agent"):
            await orchestrator.resume(snapshot.token, options=run_options(scripted_model))
    sessions = {s.provider: s for s in await store.sessions("shared")}
    assert (sessions["claude"].state, sessions["codex"].state) == ("archived", "active")
    assert sessions["claude"].provider_session_id == snapshot.agent_session_id  # kept, never deleted
    assert host_processes_matching(marker) == []
