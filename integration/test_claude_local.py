"""The real Claude Code CLI (bundled in the claude-agent-sdk wheel) on a local node, driven
through the SDK bridge against the scripted model."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from claude_agent_sdk import (
    ClaudeSDKClient,
    Message,
    ResultMessage,
    SystemMessage,
    query,
)

from nodeprov import NodeConfig, NodeHandle, StopPolicy, get_provider
from nodeprov.agents.claude import NodeTransport, bundled_cli_path
from nodeprov.testing import ScriptedModel, Stall, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import (
    TURN_TIMEOUT,
    agent_options,
    require_claude_cli,
    result_of,
    run_query,
    texts,
    until_tool_runs,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    tools = NodeConfig(tools={"claude": str(bundled_cli_path())})
    async with await get_provider("local", root=tmp_path / "nodes").provision(tools) as node:
        yield node


def run_processes(node: NodeHandle) -> list[str]:
    """Every process on this machine that belongs to the node: it runs with the node's HOME."""
    home = f"HOME={node.base_env['HOME']}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and home in (proc / "environ").read_bytes().split(b"\0"):
                found.append(proc.name)
        except OSError:
            continue
    return found


async def test_text_turn(node: NodeHandle, scripted_model: ScriptedModel) -> None:
    scripted_model.extend([Text("Hello from the scripted model")])
    messages = await run_query(node, "say hello", agent_options(scripted_model))
    result = result_of(messages)
    assert result.subtype == "success"
    assert not result.is_error
    assert texts(messages) == ["Hello from the scripted model"]
    assert "say hello" in scripted_model.agent_requests[0].text()
    init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
    assert init.data["cwd"] == node.workdir


async def test_tool_use_writes_a_file_on_the_node(node: NodeHandle, scripted_model: ScriptedModel) -> None:
    scripted_model.extend(
        [
            ToolUse("Bash", {"command": "printf 'made by the agent' > artefact.txt"}),
            Text("file written"),
        ]
    )
    messages = await run_query(node, "write a file", agent_options(scripted_model))
    assert result_of(messages).subtype == "success"
    assert (Path(node.workdir) / "artefact.txt").read_text() == "made by the agent"
    tool_result = scripted_model.agent_requests[1].messages[-1]
    assert tool_result["content"][0]["type"] == "tool_result"


async def test_resume_by_session_id(node: NodeHandle, scripted_model: ScriptedModel) -> None:
    scripted_model.extend([Text("noted: apricot")])
    first = await run_query(node, "remember the word apricot", agent_options(scripted_model))
    session_id = result_of(first).session_id

    scripted_model.extend([Text("the word was apricot")])
    second = await run_query(node, "which word?", agent_options(scripted_model, resume=session_id))
    assert result_of(second).session_id == session_id
    resumed_request = scripted_model.agent_requests[-1].text()
    assert "remember the word apricot" in resumed_request
    assert "noted: apricot" in resumed_request
    assert "which word?" in resumed_request


async def test_interrupt_then_abort_leaves_no_process(
    node: NodeHandle, scripted_model: ScriptedModel
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("stopped")])
    options = agent_options(scripted_model)
    transport = NodeTransport.for_node(node, options, stop_policy=StopPolicy(2, 2, 5))
    with anyio.fail_after(TURN_TIMEOUT):
        async with ClaudeSDKClient(options=options, transport=transport) as client:
            await client.query("run something long")

            await until_tool_runs(marker)
            await client.interrupt()
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    break
    assert host_processes_matching(marker) == []

    async def none_left() -> bool:
        return run_processes(node) == []

    assert await wait_until(none_left, 10), run_processes(node)


async def test_cancel_mid_turn_leaves_no_process(node: NodeHandle, scripted_model: ScriptedModel) -> None:
    scripted_model.extend([Stall()])
    options = agent_options(scripted_model)
    seen: list[Message] = []
    with anyio.move_on_after(TURN_TIMEOUT) as scope:
        async for message in query(
            prompt="think forever", options=options, transport=NodeTransport.for_node(node, options)
        ):
            seen.append(message)
            if isinstance(message, SystemMessage) and message.subtype == "init":
                await wait_until(lambda: _true_after_request(scripted_model), 30)
                scope.cancel()
    assert scope.cancelled_caught
    assert len(scripted_model.agent_requests) == 1

    async def none_left() -> bool:
        return run_processes(node) == []

    assert await wait_until(none_left, 10), run_processes(node)


async def _true_after_request(model: ScriptedModel) -> bool:
    return bool(model.agent_requests)


async def test_client_multi_turn(node: NodeHandle, scripted_model: ScriptedModel) -> None:
    scripted_model.extend([Text("first answer"), Text("second answer")])
    options = agent_options(scripted_model)
    answers = []
    with anyio.fail_after(TURN_TIMEOUT):
        async with ClaudeSDKClient(
            options=options, transport=NodeTransport.for_node(node, options)
        ) as client:
            for prompt in ("one", "two"):
                await client.query(prompt)
                answers += texts([m async for m in client.receive_response()])
    assert answers == ["first answer", "second answer"]


async def test_control_plane_secret_never_reaches_the_agent(
    node: NodeHandle, scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"canary-{secrets.token_hex(12)}"
    monkeypatch.setenv("NODEPROV_CANARY_SECRET", canary)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", canary)
    scripted_model.extend(
        [
            ToolUse(
                "Bash",
                {"command": "env > seen-env.txt; cat /proc/$PPID/environ | tr '\\0' '\\n' > agent-env.txt"},
            ),
            Text("done"),
        ]
    )
    messages = await run_query(node, "show env", agent_options(scripted_model))
    assert result_of(messages).subtype == "success"
    for name in ("seen-env.txt", "agent-env.txt"):
        seen = (Path(node.workdir) / name).read_text()
        assert "ANTHROPIC_BASE_URL" in seen  # what was asked for arrives...
        assert canary not in seen  # ...and nothing else of the control plane's
    for request in scripted_model.requests:
        assert canary not in repr(request.body)
