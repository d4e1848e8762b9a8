"""The real Claude Code CLI inside a Docker container, through the SDK bridge, with the
scripted model on 127.0.0.1 (the container uses host networking)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import docker
import pytest
from claude_agent_sdk import ClaudeSDKClient

from nodeprov import NodeConfig, NodeHandle, StopPolicy, get_provider
from nodeprov.agents.claude import NodeTransport, bundled_cli_path
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import run, unique_marker, wait_until

from .agents import TURN_TIMEOUT, agent_options, require_claude_cli, result_of, run_query
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture
async def node(base_image: str) -> AsyncIterator[NodeHandle]:
    require_claude_cli()
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision(NodeConfig(tools={"claude": str(bundled_cli_path())})) as node:
        yield node


async def claude_processes(node: NodeHandle) -> list[str]:
    _, out, _ = await run(node, "ps", "-eo", "pid,args")
    return [line for line in out.decode().splitlines() if "claude" in line]


async def test_agent_in_a_container_writes_resumes_aborts_and_leaves_nothing(
    node: NodeHandle, scripted_model: ScriptedModel, docker_client: docker.DockerClient
) -> None:
    # 1. A tool turn: the agent's Bash tool writes a file inside the container.
    scripted_model.extend(
        [
            ToolUse("Bash", {"command": "printf 'written in the container' > artefact.txt && hostname"}),
            Text("done writing"),
        ]
    )
    first = await run_query(node, "write the artefact", agent_options(scripted_model))
    assert result_of(first).subtype == "success"
    code, content, _ = await run(node, "cat", f"{node.workdir}/artefact.txt")
    assert (code, content) == (0, b"written in the container")

    # 2. Resume the session in the same container: the model sees the earlier turn.
    session_id = result_of(first).session_id
    scripted_model.extend([Text("I wrote artefact.txt")])
    second = await run_query(node, "what did you write?", agent_options(scripted_model, resume=session_id))
    assert result_of(second).session_id == session_id
    seen = scripted_model.agent_requests[-1].text()
    assert "write the artefact" in seen
    assert "what did you write?" in seen

    # 3. Abort mid-turn while a tool runs: no Claude process (nor its tool) survives.
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("never")])
    options = agent_options(scripted_model)
    transport = NodeTransport.for_node(node, options, stop_policy=StopPolicy(2, 2, 5))
    with anyio.fail_after(TURN_TIMEOUT):
        async with ClaudeSDKClient(options=options, transport=transport) as client:
            await client.query("run something long")

            async def tool_running() -> bool:
                _, out, _ = await run(node, "ps", "-eo", "args")
                return marker in out.decode()

            assert await wait_until(tool_running, 90), "the Bash tool never started"
            assert await claude_processes(node)
            # Leaving the block disconnects: the SDK closes the transport, which stops the agent.

    async def none_left() -> bool:
        _, out, _ = await run(node, "ps", "-eo", "args")
        return "claude" not in out.decode() and marker not in out.decode()

    assert await wait_until(none_left, 20), await claude_processes(node)


async def test_after_destroy_no_container_of_the_run_remains(
    base_image: str, scripted_model: ScriptedModel, docker_client: docker.DockerClient
) -> None:
    require_claude_cli()
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    scripted_model.extend([Text("hello from the container")])
    async with await provider.provision(NodeConfig(tools={"claude": str(bundled_cli_path())})) as node:
        messages = await run_query(node, "hi", agent_options(scripted_model))
        assert result_of(messages).result == "hello from the container"
    assert node_containers(docker_client, node.node_id) == []
