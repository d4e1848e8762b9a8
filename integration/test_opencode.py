"""OpenCode end to end: the real OpenCode CLI, the scripted Chat Completions API, real nodes
(local and Docker), a real store. Images arrive byte for byte; a paused run resumes on a
fresh node; workspaces keep their sessions apart; nothing comes from the node's $HOME; the
permissions are OpenCode's rules; no prompt or key is in a process's arguments."""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import pytest

from nodeprov import AgentExitError, NodeConfig, NodeHandle, agent_class, get_agent, get_provider
from nodeprov.agents import AgentSession, Result, ToolResult, ToolUse
from nodeprov.prompts import ImageBlock, TextBlock
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import BashCommand, ChatText, ScriptedChat
from nodeprov.testing.agent_conformance import run_turn
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import (
    argument_vectors,
    collect,
    local,
    on_docker,
    opencode_run_options,
    require_opencode_cli,
    until_tool_runs,
)
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _opencode_cli() -> None:
    require_opencode_cli()


def png(width: int, height: int, seed: int) -> bytes:
    """A real PNG (RGB, 8 bits), its pixels from ``seed``."""
    rows = b"".join(
        b"\x00" + bytes((x * seed + y) % 256 for x in range(width) for _ in range(3)) for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.fixture(params=["local", "docker"])
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NodeHandle]:
    """A node with this machine's OpenCode CLI; a Docker one on the host's network."""
    cli = agent_class("opencode").local_cli()
    assert cli is not None
    if request.param == "docker":
        image = request.getfixturevalue("base_image")
        provider = get_provider("docker", image=image, network_mode="host", pull="never")
    else:
        provider = get_provider("local", root=tmp_path / "nodes")
    async with provider, await provider.provision(NodeConfig(tools={"opencode": cli})) as made:
        yield made


async def last_result(session: AgentSession, prompt: Any) -> Result:
    messages = await run_turn(session, prompt)
    assert isinstance(messages[-1], Result), messages
    return messages[-1]


async def test_images_arrive_in_the_model_request_byte_for_byte(
    node: NodeHandle, scripted_chat: ScriptedChat
) -> None:
    """Two PNGs of a prompt, written to the node and attached to OpenCode's message, reach
    the model as ``image_url`` data URLs whose bytes are the images', in order."""
    first, second = png(7, 5, 37), png(3, 9, 91)
    scripted_chat.extend([ChatText("two images")])
    agent = get_agent("opencode", opencode_run_options(scripted_chat))
    prompt = [TextBlock("what differs?"), ImageBlock.from_bytes(first), ImageBlock.from_bytes(second)]
    async with agent.session(node) as session:
        result = await last_result(session, prompt)
    assert (result.is_error, result.text) == (False, "two images")
    (request,) = scripted_chat.agent_requests
    assert request.images() == [("image/png", first), ("image/png", second)]
    assert "what differs?" in request.text()


@pytest.mark.parametrize("where", ["local", "docker"])
async def test_a_paused_opencode_run_resumes_on_a_fresh_node(
    where: str, store: Store, scripted_chat: ScriptedChat, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The node is released at the pause, its session exported (``opencode export``) into the
    store; the resume provisions another node, imports it, and OpenCode sends the model the
    earlier conversation with the new message."""
    placement = on_docker(request.getfixturevalue("base_image")) if where == "docker" else local(tmp_path)
    marker = unique_marker()
    scripted_chat.extend([BashCommand(f"sleep {marker}")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the word is quince",
            agent="opencode",
            options=opencode_run_options(scripted_chat),
            **placement,
        )
        await until_tool_runs(marker)
        snapshot = await run.pause("human", "lunch break")
        assert await run.wait() == "paused"
        first_node = next(e.node_id for e in await collect(run) if isinstance(e, NodeReady))
        assert snapshot.agent_session_id
        assert snapshot.agent_session_id.startswith("ses_")  # OpenCode's own session id

        before = len(scripted_chat.agent_requests)
        scripted_chat.extend([ChatText("it was quince")])
        resumed = await orchestrator.resume(
            snapshot.token, message="what was the word?", options=opencode_run_options(scripted_chat)
        )
        assert await resumed.wait() == "ok", resumed.error
        events = await collect(resumed)
    ready = [e for e in events if isinstance(e, NodeReady)][-1]
    assert ready.node_id != first_node
    assert (ready.reused, ready.transcript_restored) == (False, True)
    result = [e.message for e in events if isinstance(e, AgentMessage) and isinstance(e.message, Result)][-1]
    assert (result.is_error, result.text, result.session_id) == (
        False,
        "it was quince",
        snapshot.agent_session_id,
    )
    text = scripted_chat.agent_requests[before].text()
    assert text.index("remember: the word is quince") < text.index("what was the word?")
    if where == "docker":
        client: docker.DockerClient = request.getfixturevalue("docker_client")
        assert node_containers(client, first_node, ready.node_id) == []
    else:
        assert list((tmp_path / "nodes").iterdir()) == []


async def test_two_workspaces_on_one_node_keep_their_sessions_apart(
    scripted_chat: ScriptedChat, local_node_with_opencode: NodeHandle
) -> None:
    """Each workspace has its own OpenCode home on the node: a session of one cannot be
    resumed from the other, whose requests never carry its conversation."""
    node = local_node_with_opencode
    agent = get_agent("opencode", opencode_run_options(scripted_chat))
    scripted_chat.extend([ChatText("noted"), ChatText("beta here")])
    async with agent.session(node, workspace="alpha") as alpha:
        assert not (await last_result(alpha, "alpha's secret plan is quince")).is_error
    async with agent.session(node, workspace="beta") as beta:
        assert not (await last_result(beta, "hello from beta")).is_error
    assert alpha.session_id
    assert beta.session_id not in (None, alpha.session_id)
    assert "alpha's secret plan" not in scripted_chat.agent_requests[-1].text()

    async with agent.session(node, workspace="beta", resume=alpha.session_id) as trespasser:
        with pytest.raises(AgentExitError) as refused:
            await run_turn(trespasser, "what is alpha's plan?")
    assert "Session not found" in refused.value.stderr_tail
    assert all("what is alpha's plan?" not in r.text() for r in scripted_chat.agent_requests)

    scripted_chat.extend([ChatText("quince")])
    async with agent.session(node, workspace="alpha", resume=alpha.session_id) as again:
        assert (await last_result(again, "what is the plan?")).text == "quince"
    assert "alpha's secret plan is quince" in scripted_chat.agent_requests[-1].text()
    homes = Path(node.base_env["HOME"]) / ".nodeprov" / "opencode"
    assert sorted(entry.name for entry in homes.iterdir()) == sorted(
        [agent.state_key(node, "alpha"), agent.state_key(node, "beta")]
    )
    assert {oct(entry.stat().st_mode & 0o777) for entry in homes.iterdir()} == {"0o700"}


@pytest.fixture
async def local_node_with_opencode(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    cli = agent_class("opencode").local_cli()
    assert cli is not None
    provider = get_provider("local", root=tmp_path / "nodes")
    async with provider, await provider.provision(NodeConfig(tools={"opencode": cli})) as made:
        yield made


async def test_nothing_comes_from_the_nodes_home(
    scripted_chat: ScriptedChat, local_node_with_opencode: NodeHandle
) -> None:
    """OpenCode's config, instructions and skills in the node's $HOME (``~/.opencode``,
    ``~/.config/opencode``, ``~/.claude``, ``~/.agents``) reach no request of the agent's."""
    node = local_node_with_opencode
    home = node.base_env["HOME"]
    leaks = {
        f"{home}/.opencode/opencode.json": f'{{"instructions": ["{home}/leaked.md"]}}',
        f"{home}/leaked.md": "LEAKED-HOME-OPENCODE",
        f"{home}/.config/opencode/AGENTS.md": "LEAKED-XDG-CONFIG",
        f"{home}/.claude/CLAUDE.md": "LEAKED-CLAUDE-MD",
        f"{home}/.agents/skills/leak/SKILL.md": "---\nname: leak\ndescription: LEAKED-SKILL\n---\nbody\n",
    }
    for path, text in leaks.items():
        await node.write_file(path, text.encode())
    scripted_chat.extend([ChatText("clean")])
    async with get_agent("opencode", opencode_run_options(scripted_chat)).session(node) as session:
        assert not (await last_result(session, "hello")).is_error
    (request,) = scripted_chat.agent_requests
    said = str(request.body)
    assert "You are opencode" in said  # the system prompt is there, and none of those
    assert [
        word
        for word in ("LEAKED-HOME-OPENCODE", "LEAKED-XDG-CONFIG", "LEAKED-CLAUDE-MD", "LEAKED-SKILL")
        if word in said
    ] == []
    assert not (Path(home) / ".opencode" / "node_modules").exists()  # no npm install there either


@pytest.mark.parametrize(
    ("permission", "offered", "denied"),
    [
        ("read-only", {"read", "grep", "glob"}, {"bash", "edit", "write"}),
        ("edit", {"read", "edit", "write"}, {"bash"}),
        ("full", {"read", "edit", "write", "bash"}, set()),
    ],
)
async def test_each_permission_is_what_opencode_offers_its_model(
    permission: str,
    offered: set[str],
    denied: set[str],
    scripted_chat: ScriptedChat,
    local_node_with_opencode: NodeHandle,
) -> None:
    """A denied tool is not offered to the model, and a call to it is an error the model is
    told of (the turn goes on); an allowed command runs."""
    node = local_node_with_opencode
    scripted_chat.extend([BashCommand("echo ran > ran.txt"), ChatText("over")])
    options = opencode_run_options(scripted_chat, permission=permission)
    async with get_agent("opencode", options).session(node) as session:
        messages = await run_turn(session, "run it")
    first, second = scripted_chat.agent_requests
    assert offered <= set(first.tool_names)
    assert not denied & set(first.tool_names)
    (use,) = [m for m in messages if isinstance(m, ToolUse)]
    (done,) = [m for m in messages if isinstance(m, ToolResult)]
    ran = (Path(node.workdir) / "ran.txt").exists()
    assert (use.name, done.is_error, ran) == (
        ("bash", False, True) if "bash" not in denied else ("invalid", True, False)
    )
    assert done.output in second.text()  # the model is told
    assert isinstance(messages[-1], Result)
    assert (messages[-1].is_error, messages[-1].text) == (False, "over")


async def test_no_prompt_or_key_in_any_process_arguments(
    scripted_chat: ScriptedChat, local_node_with_opencode: NodeHandle
) -> None:
    """The prompt goes on stdin and the key in the environment: neither is in the argument
    vector of any process while OpenCode works (``ps`` and audit logs show those)."""
    node = local_node_with_opencode
    canary = "sk-canary-" + unique_marker().replace(".", "")
    prompt = "the secret prompt " + unique_marker()
    marker = unique_marker()
    scripted_chat.extend([BashCommand(f"sleep {marker}"), ChatText("done")])
    options = opencode_run_options(scripted_chat, env={"NODEPROV_SCRIPTED_KEY": canary})
    async with get_agent("opencode", options).session(node) as session:
        turn = session.turn(prompt)
        messages = [await anext(turn)]  # the first message: OpenCode runs
        await until_tool_runs(marker)
        argvs = argument_vectors()
        await session.interrupt()
        messages += [message async for message in turn]
    assert messages[-1] == Result(True, "interrupted", session_id=session.session_id)
    assert not host_processes_matching(marker)
    assert any("opencode" in argv and " run " in argv for argv in argvs)  # OpenCode was running
    assert [argv for argv in argvs if canary in argv or prompt in argv] == []
    assert {r.headers.get("authorization") for r in scripted_chat.agent_requests} == {f"Bearer {canary}"}
