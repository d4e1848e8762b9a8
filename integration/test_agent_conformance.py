"""The agent conformance suite (nodeprov.testing.agent_conformance) on a local node, a
Docker node and an SSH node (an unprivileged login to a real sshd), for the real Claude
Code CLI and the real Codex CLI, each against its scripted model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeprov import NodeConfig, NodeHandle, agent_class, get_provider
from nodeprov.testing import (
    ExecCommand,
    ResponsesStall,
    ResponsesText,
    ScriptedModel,
    ScriptedResponses,
    Stall,
    Text,
    ToolUse,
)
from nodeprov.testing.agent_conformance import AGENT_CHECKS, AgentHarness

from .agents import codex_run_options, require_claude_cli, require_codex_cli, run_options
from .sshd import UNPRIVILEGED

pytestmark = pytest.mark.anyio


def claude_harness(model: ScriptedModel) -> AgentHarness:
    return AgentHarness(
        agent="claude",
        options=run_options(model),
        script=model.extend,
        text=Text,
        shell=lambda command: ToolUse("Bash", {"command": command}),
        stall=Stall,
        structured=lambda value: ToolUse("StructuredOutput", value),
        requests=lambda: [request.text() for request in model.agent_requests],
        down=lambda port: run_options(
            model, env={**model.agent_env(), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}"}
        ),
    )


def codex_harness(responses: ScriptedResponses) -> AgentHarness:
    def down(port: int) -> dict[str, Any]:
        provider = {**responses.codex_config(), "base_url": f"http://127.0.0.1:{port}/v1"}
        return codex_run_options(responses, model_provider=provider)

    return AgentHarness(
        agent="codex",
        options=codex_run_options(responses),
        script=responses.extend,
        text=ResponsesText,
        shell=lambda command: ExecCommand(["sh", "-c", command]),
        stall=ResponsesStall,
        structured=lambda value: ResponsesText(json.dumps(value)),
        requests=lambda: [request.text() for request in responses.agent_requests],
        down=down,
    )


@pytest.fixture(params=["claude", "codex"])
def harness(request: pytest.FixtureRequest) -> Iterator[AgentHarness]:
    if request.param == "claude":
        require_claude_cli()
        with ScriptedModel() as model:
            yield claude_harness(model)
    else:
        require_codex_cli()
        with ScriptedResponses() as responses:
            yield codex_harness(responses)


@pytest.fixture(params=["local", "docker", "ssh"])
async def node(
    request: pytest.FixtureRequest, tmp_path: Path, harness: AgentHarness
) -> AsyncIterator[NodeHandle]:
    """A node with this machine's CLI of the agent. On Docker nothing reaps a process the
    agent leaves behind (the local provider's supervisor would)."""
    cli = agent_class(harness.agent).local_cli()
    assert cli is not None
    if request.param == "local":
        provider = get_provider("local", root=tmp_path / "nodes")
    elif request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        provider = get_provider("ssh", **sshd.settings(UNPRIVILEGED, root=".nodeprov/agents"))
    else:
        image = request.getfixturevalue("base_image")
        provider = get_provider("docker", image=image, network_mode="host", pull="never")
    async with provider, await provider.provision(NodeConfig(tools={harness.agent: cli})) as made:
        yield made


@pytest.mark.parametrize(
    "check", AGENT_CHECKS, ids=[check.__name__.removeprefix("check_") for check in AGENT_CHECKS]
)
async def test_agent_conformance(
    check: Callable[[AgentHarness, NodeHandle, Path], Awaitable[None]],
    harness: AgentHarness,
    node: NodeHandle,
    tmp_path: Path,
) -> None:
    await check(harness, node, tmp_path)
