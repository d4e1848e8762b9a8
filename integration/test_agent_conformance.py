"""The agent conformance suite (nodeprov.testing.agent_conformance) on a local node, a
Docker node, an SSH node (an unprivileged login to a real sshd) and a Kubernetes pod (the
test cluster), for the real Claude Code CLI, the real Codex CLI and the real OpenCode CLI,
each against its scripted model; and for Claude Code on a codespace, and in a pod it was
copied into."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig, NodeHandle, NodeProvider, agent_class, get_provider
from nodeprov.testing import (
    BashCommand,
    ChatStall,
    ChatText,
    ExecCommand,
    ResponsesStall,
    ResponsesText,
    ScriptedChat,
    ScriptedModel,
    ScriptedResponses,
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
    check_tool_turn,
)
from nodeprov.testing.conformance import run

from .agents import (
    codex_run_options,
    opencode_run_options,
    require_claude_cli,
    require_codex_cli,
    require_opencode_cli,
    run_options,
)
from .codespaces import running_codespaces
from .kubernetes import Cluster
from .pods import pod_settings
from .sshd import UNPRIVILEGED, Sshd

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


@pytest.fixture(params=["claude", "codex", "opencode"])
def harness(request: pytest.FixtureRequest) -> Iterator[AgentHarness]:
    if request.param == "claude":
        require_claude_cli()
        with ScriptedModel() as model:
            yield claude_harness(model)
    elif request.param == "codex":
        require_codex_cli()
        with ScriptedResponses() as responses:
            yield codex_harness(responses)
    else:
        require_opencode_cli()
        with ScriptedChat() as chat:
            yield opencode_harness(chat)


@pytest.fixture(params=["local", "docker", "ssh", "kubernetes"])
async def provider(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[NodeProvider[Any]]:
    """A provider of each kind. On Docker nothing reaps a process the agent leaves behind
    (the local provider's supervisor would)."""
    if request.param == "local":
        chosen = get_provider("local", root=tmp_path / "nodes")
    elif request.param == "ssh":
        sshd = request.getfixturevalue("sshd")
        chosen = get_provider("ssh", **sshd.settings(UNPRIVILEGED, root=".nodeprov/agents"))
    elif request.param == "kubernetes":
        cluster, image = request.getfixturevalue("kubernetes_cluster"), request.getfixturevalue("base_image")
        # The cluster's node is this machine: the CLI is mounted, not copied into every pod
        # (test_claude_copied_into_a_kubernetes_pod copies it).
        chosen = get_provider("kubernetes", **pod_settings(cluster, image, tools_host_path=True))
    else:
        image = request.getfixturevalue("base_image")
        chosen = get_provider("docker", image=image, network_mode="host", pull="never")
    async with chosen:
        yield chosen


async def _with_cli(provider: NodeProvider[Any], harness: AgentHarness) -> NodeHandle:
    """A new node with this machine's CLI of the agent."""
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


@pytest.mark.parametrize(
    "check", AGENT_ONLY, ids=[check.__name__.removeprefix("check_") for check in AGENT_ONLY]
)
async def test_agent_only_conformance(
    check: Callable[[AgentHarness, NodeHandle, Path], Awaitable[None]], harness: AgentHarness, tmp_path: Path
) -> None:
    cli = agent_class(harness.agent).local_cli()
    assert cli is not None
    # Short stop graces: how a node stops the agent is not what these check (the others do).
    provider = get_provider("local", root=tmp_path / "nodes", eof_grace=1, term_grace=1)
    async with provider, await provider.provision(NodeConfig(tools={harness.agent: cli})) as node:
        await check(harness, node, tmp_path)


@pytest.fixture
async def codespace(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[NodeHandle]:
    """A codespace (the FAKE GitHub API, the real gh, the test sshd: see :mod:`.codespaces`)
    with this machine's Claude Code CLI."""
    require_claude_cli()
    cli = agent_class("claude").local_cli()
    assert cli is not None
    with running_codespaces(sshd, tmp_path_factory.mktemp("gh")) as codespaces:
        async with (
            get_provider("codespaces", **codespaces.settings()) as provider,
            await provider.provision(NodeConfig(tools={"claude": cli})) as made,
        ):
            yield made


@pytest.mark.parametrize(
    "check", ON_EVERY_NODE, ids=[check.__name__.removeprefix("check_") for check in ON_EVERY_NODE]
)
async def test_claude_conformance_on_a_codespace(
    check: Callable[[AgentHarness, NodeHandle, Path], Awaitable[None]], codespace: NodeHandle, tmp_path: Path
) -> None:
    with ScriptedModel() as model:
        await check(claude_harness(model), codespace, tmp_path)


async def test_claude_copied_into_a_kubernetes_pod(
    kubernetes_cluster: Cluster, base_image: str, tmp_path: Path
) -> None:
    """The Claude Code CLI copied into the pod (the default where a cluster's nodes do not
    see the control plane's files) runs a turn there."""
    require_claude_cli()
    cli = agent_class("claude").local_cli()
    assert cli is not None
    async with (
        get_provider("kubernetes", **pod_settings(kubernetes_cluster, base_image)) as provider,
        await provider.provision(NodeConfig(tools={"claude": cli})) as node,
    ):
        size = (await anyio.Path(cli).stat()).st_size
        copied = 'grep -F " $1 " /proc/self/mountinfo; wc -c < "$1"'  # no mount of its own: a copy
        assert await run(node, "sh", "-c", copied, "-", node.tool_paths["claude"]) == (
            0,
            f"{size}\n".encode(),
            b"",
        )
        with ScriptedModel() as model:
            await check_tool_turn(claude_harness(model), node, tmp_path)
