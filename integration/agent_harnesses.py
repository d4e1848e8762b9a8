"""What the agent conformance suite's test modules share: the harness of each agent (its
real CLI against its scripted model), nodes with this machine's CLI, and the suite's tests,
which each module collects by importing them (``test_agent_conformance_local.py``: local
nodes and the agent-only checks, run beside the Docker and local tests;
``test_agent_conformance.py``: Docker, SSH, Kubernetes and a codespace)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeprov import NodeConfig, NodeHandle, NodeProvider, agent_class, get_provider
from nodeprov.testing import (
    BashCommand,
    ChatStall,
    ChatText,
    ExecCommand,
    GeminiStall,
    GeminiText,
    ResponsesStall,
    ResponsesText,
    ScriptedChat,
    ScriptedGemini,
    ScriptedModel,
    ScriptedResponses,
    ShellCommand,
    Stall,
    Text,
    ToolUse,
)
from nodeprov.testing.agent_conformance import (
    AGENT_CHECKS,
    AgentHarness,
    check_endpoint_down,
    check_malformed_output,
    check_resume_on_a_fresh_node,
    check_structured_output,
)

from .agents import (
    codex_run_options,
    gemini_mounts,
    gemini_run_options,
    opencode_acp_options,
    opencode_run_options,
    require_claude_cli,
    require_codex_cli,
    require_gemini_cli,
    require_opencode_cli,
    run_options,
)
from .pods import pod_settings
from .sshd import UNPRIVILEGED

__all__ = [
    "AGENT_ONLY",
    "ON_EVERY_NODE",
    "claude_harness",
    "fresh_node",
    "harness",
    "node",
    "provider_fixture",
    "provider_of",
    "test_agent_conformance",
    "test_agent_resumes_on_a_fresh_node",
]


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
        images=lambda: [request.images() for request in model.agent_requests],
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
        images=lambda: [request.images() for request in responses.agent_requests],
        down=down,
    )


def opencode_harness(chat: ScriptedChat) -> AgentHarness:
    def down(port: int) -> dict[str, Any]:
        provider = {**chat.opencode_provider(), "base_url": f"http://127.0.0.1:{port}/v1"}
        return opencode_run_options(chat, provider=provider)

    return AgentHarness(
        agent="opencode",
        options=opencode_run_options(chat),
        script=chat.extend,
        text=ChatText,
        shell=BashCommand,
        stall=ChatStall,
        structured=lambda value: ChatText(json.dumps(value)),
        requests=lambda: [request.text() for request in chat.agent_requests],
        images=lambda: [request.images() for request in chat.agent_requests],
        down=down,
    )


def gemini_harness(gemini: ScriptedGemini) -> AgentHarness:
    def down(port: int) -> dict[str, Any]:
        return gemini_run_options(
            gemini, env={**gemini.agent_env(), "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}"}
        )

    return AgentHarness(
        agent="gemini",
        options=gemini_run_options(gemini),
        script=gemini.extend,
        text=GeminiText,
        shell=ShellCommand,
        stall=GeminiStall,
        structured=lambda value: GeminiText(json.dumps(value)),
        requests=lambda: [request.text() for request in gemini.agent_requests],
        images=lambda: [request.images() for request in gemini.agent_requests],
        down=down,
        tools={},  # the CLI where it lies here (cli_path): a launcher needs its package beside it
    )


def opencode_acp_harness(chat: ScriptedChat) -> AgentHarness:
    """OpenCode in its ACP mode, run as the ``acp`` agent (any ACP agent, by its command)."""

    def down(port: int) -> dict[str, Any]:
        return opencode_acp_options(
            chat, provider={**chat.opencode_provider(), "base_url": f"http://127.0.0.1:{port}/v1"}
        )

    cli = agent_class("opencode").local_cli()
    assert cli is not None
    # The same model and turns as the opencode agent's: only the agent and its options differ.
    return dataclasses.replace(
        opencode_harness(chat),
        agent="acp",
        options=opencode_acp_options(chat),
        down=down,
        tools={"opencode": cli},
    )


@pytest.fixture(params=["claude", "codex", "opencode", "gemini", "acp"])
def harness(request: pytest.FixtureRequest) -> Iterator[AgentHarness]:
    if request.param == "claude":
        require_claude_cli()
        with ScriptedModel() as model:
            yield claude_harness(model)
    elif request.param == "codex":
        require_codex_cli()
        with ScriptedResponses() as responses:
            yield codex_harness(responses)
    elif request.param == "gemini":
        require_gemini_cli()
        with ScriptedGemini() as gemini:
            yield gemini_harness(gemini)
    elif request.param == "acp":
        require_opencode_cli()
        with ScriptedChat() as chat:
            yield opencode_acp_harness(chat)
    else:
        require_opencode_cli()
        with ScriptedChat() as chat:
            yield opencode_harness(chat)


def provider_fixture(kinds: list[str]) -> Any:
    """A module's ``provider`` fixture: one of each of ``kinds`` (see :func:`provider_of`)."""

    @pytest.fixture(params=kinds, name="provider")
    async def provider(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NodeProvider[Any]]:
        async for made in provider_of(request, tmp_path):
            yield made

    return provider


async def provider_of(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NodeProvider[Any]]:
    """The provider ``request.param`` names (``local``, ``docker``, ``ssh`` or ``kubernetes``),
    for a module's ``provider`` fixture. On Docker nothing reaps a process the agent leaves
    behind (the local provider's supervisor would). Its stop graces are short: an abort goes
    through stdin's end, SIGTERM and SIGKILL as with the defaults (the providers' own tests
    time those), within a few seconds rather than ten."""
    graces = {"eof_grace": 1.0, "term_grace": 2.0}
    if request.param == "local":
        chosen = get_provider("local", root=tmp_path / "nodes", **graces)
    elif request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        chosen = get_provider("ssh", **sshd.settings(UNPRIVILEGED, root=".nodeprov/agents", **graces))
    elif request.param == "kubernetes":
        cluster, image = request.getfixturevalue("kubernetes_cluster"), request.getfixturevalue("base_image")
        # The cluster's node is this machine: the CLI is mounted, not copied into every pod
        # (test_claude_copied_into_a_kubernetes_pod copies it).
        chosen = get_provider("kubernetes", **pod_settings(cluster, image, tools_host_path=True, **graces))
    else:
        image = request.getfixturevalue("base_image")
        # The Gemini CLI where it lies here, and node.js: the launcher needs its package beside it.
        mounts = gemini_mounts() if request.getfixturevalue("harness").agent == "gemini" else []
        chosen = get_provider(
            "docker", image=image, network_mode="host", pull="never", mounts=mounts, **graces
        )
    async with chosen:
        yield chosen


async def _with_cli(provider: NodeProvider[Any], harness: AgentHarness) -> NodeHandle:
    """A new node with this machine's CLI of the agent (the harness's tools, if it names them)."""
    if harness.tools is not None:
        return await provider.provision(NodeConfig(tools=harness.tools))
    cli = agent_class(harness.agent).local_cli()
    assert cli is not None
    return await provider.provision(NodeConfig(tools={harness.agent: cli}))


@pytest.fixture
async def node(provider: NodeProvider[Any], harness: AgentHarness) -> AsyncIterator[NodeHandle]:
    async with await _with_cli(provider, harness) as made:
        yield made


@pytest.fixture
async def fresh_node(provider: NodeProvider[Any], harness: AgentHarness) -> AsyncIterator[NodeHandle]:
    """A second node of the same provider, where nothing of the first node's sessions is."""
    async with await _with_cli(provider, harness) as made:
        yield made


# A model endpoint that is down, output that is not the agent's protocol and an output
# schema are the agent's own affair, the same on any node (how each node starts and stops
# the agent is what the other checks see): checked on a local node.
AGENT_ONLY = [check_endpoint_down, check_malformed_output, check_structured_output]
ON_EVERY_NODE = [check for check in AGENT_CHECKS if check not in AGENT_ONLY]


@pytest.mark.parametrize(
    "check", ON_EVERY_NODE, ids=[check.__name__.removeprefix("check_") for check in ON_EVERY_NODE]
)
async def test_agent_conformance(
    check: Callable[[AgentHarness, NodeHandle, Path], Awaitable[None]],
    harness: AgentHarness,
    node: NodeHandle,
    tmp_path: Path,
) -> None:
    await check(harness, node, tmp_path)


async def test_agent_resumes_on_a_fresh_node(
    harness: AgentHarness, node: NodeHandle, fresh_node: NodeHandle, tmp_path: Path
) -> None:
    await check_resume_on_a_fresh_node(harness, node, fresh_node, tmp_path)
