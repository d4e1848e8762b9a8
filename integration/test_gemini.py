"""The Gemini CLI end to end over ACP: the real CLI, the scripted Gemini API, real nodes
(local and Docker), a real store. The scripted model counts exactly the requests each test
expects: an image reaches it byte for byte; a paused run resumes on a fresh node with the
earlier conversation and no tool call made again; an interrupt mid-command ends the turn and
the command; the permission answers the CLI's requests; no prompt or key is in a process's
arguments; nothing is sent but to the model API on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import pytest

from nodeprov import NodeHandle, get_agent, get_provider
from nodeprov.agents import AgentText, Result, ToolResult, ToolUse
from nodeprov.prompts import ImageBlock, TextBlock
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import GeminiText, ScriptedGemini, ShellCommand
from nodeprov.testing.agent_conformance import run_turn
from nodeprov.testing.conformance import host_processes_matching, unique_marker
from nodeprov.testing.images import sample_png

from .agents import (
    argument_vectors,
    collect,
    gemini_mounts,
    gemini_run_options,
    local,
    on_docker,
    require_gemini_cli,
    until_tool_runs,
)
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _gemini_cli() -> None:
    require_gemini_cli()


@pytest.fixture
def gemini() -> Any:
    with ScriptedGemini() as server:
        yield server


def _placement(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if where == "local":
        return local(tmp_path)
    placement = on_docker(request.getfixturevalue("base_image"))
    placement["provider_settings"]["mounts"] = gemini_mounts()
    return placement


@pytest.fixture(params=["local", "docker"])
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NodeHandle]:
    placement = _placement(request.param, request, tmp_path)
    provider = get_provider(placement["provider"], **placement["provider_settings"])
    async with provider, await provider.provision() as made:
        yield made


async def test_an_image_reaches_the_model_byte_for_byte_in_one_request(
    node: NodeHandle, gemini: ScriptedGemini
) -> None:
    first, second = sample_png(7, 5, seed=37), sample_png(3, 9, seed=91)
    gemini.extend([GeminiText("two images")])
    prompt: list[TextBlock | ImageBlock] = [
        TextBlock("what differs?"),
        ImageBlock.from_bytes(first),
        ImageBlock.from_bytes(second),
    ]
    async with get_agent("gemini", gemini_run_options(gemini)).session(node) as session:
        messages = await run_turn(session, prompt)
    assert messages[-1] == Result(False, "two images", session_id=session.session_id)
    (request,) = gemini.agent_requests
    assert request.images() == [("image/png", first), ("image/png", second)]
    assert "what differs?" in request.text()


async def test_a_command_runs_on_the_node_and_its_output_reaches_the_model(
    node: NodeHandle, gemini: ScriptedGemini
) -> None:
    gemini.extend([ShellCommand("echo made-on-the-node > made.txt && cat made.txt"), GeminiText("done")])
    async with get_agent("gemini", gemini_run_options(gemini)).session(node) as session:
        messages = await run_turn(session, "make the file")
    assert [type(m) for m in messages if isinstance(m, ToolUse | ToolResult)] == [ToolUse, ToolResult]
    assert isinstance(messages[-1], Result)
    assert not messages[-1].is_error
    _, second = gemini.agent_requests
    assert "made-on-the-node" in str(second.function_responses)
    async with node.read_file("made.txt") as chunks:
        assert b"".join([chunk async for chunk in chunks]) == b"made-on-the-node\n"


@pytest.mark.parametrize(
    ("permission", "ran"),
    [("read-only", False), ("edit", False), ("full", True)],
)
async def test_the_permission_answers_the_clis_request_to_run_a_command(
    permission: str, ran: bool, local_node: NodeHandle, gemini: ScriptedGemini
) -> None:
    gemini.extend([ShellCommand("touch ran.txt"), GeminiText("over")])
    options = gemini_run_options(gemini, permission=permission)
    async with get_agent("gemini", options).session(local_node) as session:
        messages = await run_turn(session, "run it")
    (result,) = [m for m in messages if isinstance(m, ToolResult)]
    assert result.is_error is not ran
    if not ran:
        assert result.output.startswith(f"refused: the run's permission ({permission})")
    assert (Path(local_node.workdir) / "ran.txt").exists() is ran


async def test_an_interrupt_ends_the_turn_and_its_command(node: NodeHandle, gemini: ScriptedGemini) -> None:
    marker = unique_marker()
    gemini.extend([ShellCommand(f"sleep {marker}"), GeminiText("never said")])
    async with get_agent("gemini", gemini_run_options(gemini)).session(node) as session:
        turn = session.turn("wait a while")
        messages = [await anext(turn)]
        await until_tool_runs(marker)
        await session.interrupt()
        messages += [message async for message in turn]
    result = messages[-1]
    assert isinstance(result, Result)
    assert result.is_error
    assert "cancelled" in result.text
    assert not host_processes_matching(marker)
    assert len(gemini.agent_requests) == 1  # the model was not asked again


@pytest.mark.parametrize("where", ["local", "docker"])
async def test_a_paused_gemini_run_resumes_on_a_fresh_node_without_a_second_tool_call(
    where: str, store: Store, gemini: ScriptedGemini, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The pause cancels the turn mid-command and releases the node, the CLI's session file
    in the store; the resume writes it on a fresh node for its directory there, loads it, and
    the model gets the earlier conversation with the new message: two requests in all."""
    placement = _placement(where, request, tmp_path)
    marker = unique_marker()
    gemini.extend([ShellCommand(f"sleep {marker}")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the word is quince", agent="gemini", options=gemini_run_options(gemini), **placement
        )
        await until_tool_runs(marker)
        snapshot = await run.pause("human", "lunch break")
        assert await run.wait() == "paused"
        first_node = next(e.node_id for e in await collect(run) if isinstance(e, NodeReady))
        assert snapshot.agent_session_id
        assert len(gemini.agent_requests) == 1

        gemini.extend([GeminiText("it was quince")])
        resumed = await orchestrator.resume(
            snapshot.token, message="what was the word?", options=gemini_run_options(gemini)
        )
        assert await resumed.wait() == "ok", resumed.error
        events = await collect(resumed)
    ready = [e for e in events if isinstance(e, NodeReady)][-1]
    assert ready.node_id != first_node
    assert (ready.reused, ready.transcript_restored) == (False, True)
    messages = [e.message for e in events if isinstance(e, AgentMessage)]
    assert messages[-1] == Result(False, "it was quince", session_id=snapshot.agent_session_id)
    assert not [m for m in messages if isinstance(m, ToolUse)]  # nothing run again
    assert [m.text for m in messages if isinstance(m, AgentText)] == ["it was quince"]
    assert len(gemini.agent_requests) == 2  # exactly: one before the pause, one after
    text = gemini.agent_requests[1].text()
    assert text.index("remember: the word is quince") < text.index("what was the word?")
    if where == "docker":
        client: docker.DockerClient = request.getfixturevalue("docker_client")
        assert node_containers(client, first_node, ready.node_id) == []


async def test_no_prompt_or_key_in_any_process_arguments(
    local_node: NodeHandle, gemini: ScriptedGemini
) -> None:
    prompt = "the secret prompt " + unique_marker()
    marker = unique_marker()
    gemini.extend([ShellCommand(f"sleep {marker}"), GeminiText("done")])
    options = gemini_run_options(gemini)
    async with get_agent("gemini", options).session(local_node) as session:
        turn = session.turn(prompt)
        messages = [await anext(turn)]
        await until_tool_runs(marker)
        argvs = argument_vectors()
        await session.interrupt()
        messages += [message async for message in turn]
    assert any("--acp" in argv for argv in argvs)  # the CLI was running
    assert [argv for argv in argvs if prompt in argv or gemini.agent_env()["GEMINI_API_KEY"] in argv] == []
    assert {r.headers.get("x-goog-api-key") for r in gemini.agent_requests} == {"nodeprov-scripted-key"}


async def test_a_conversation_of_turns_on_a_kept_node_keeps_every_turn(
    store: Store, gemini: ScriptedGemini, tmp_path: Path
) -> None:
    """Each turn ends in a pause whose resume loads the session on the same node again: the
    CLI's fresh file of the last load must not be taken for the conversation (it was, once:
    the third turn's load failed)."""
    turns = ["the word is quince", "the colour is teal", "what were they?"]
    async with Orchestrator(store) as orchestrator:
        gemini.extend([GeminiText("noted")])
        how: dict[str, Any] = {
            "options": gemini_run_options(gemini),
            "keep_node": True,
            "pause_after_turn": True,
        }
        run = await orchestrator.start(turns[0], agent="gemini", **how, **local(tmp_path))
        assert await run.wait() == "paused", run.error
        for turn in turns[1:]:
            gemini.extend([GeminiText("noted")])
            again = await orchestrator.resume_run(run.id, message=turn, **how)
            assert await again.wait() == "paused", again.error
            assert [e.reused for e in await collect(again) if isinstance(e, NodeReady)] == [True]
    assert len(gemini.agent_requests) == 3
    text = gemini.agent_requests[-1].text()
    assert text.index(turns[0]) < text.index(turns[1]) < text.index(turns[2])
