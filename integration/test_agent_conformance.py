"""The agent conformance suite (nodeprov.testing.agent_conformance) on an SSH node (an
unprivileged login to a real sshd) and a Kubernetes pod (the test cluster), for
the real Claude Code CLI, the real Codex CLI and the real OpenCode CLI, each against its
scripted model; and for Claude Code on a codespace, and in a pod it was copied into. On
local nodes, and the checks that are the agent's own affair:
``test_agent_conformance_local.py``; on Docker nodes: ``test_agent_conformance_docker.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeConfig, NodeHandle, agent_class, get_provider
from nodeprov.testing import ScriptedModel
from nodeprov.testing.agent_conformance import AgentHarness, check_tool_turn
from nodeprov.testing.conformance import run

from .agent_harnesses import (  # the suite's tests, collected here too
    ON_EVERY_NODE,
    claude_harness,
    fresh_node,
    harness,
    node,
    provider_fixture,
    test_agent_conformance,
    test_agent_resumes_on_a_fresh_node,
)
from .agents import require_claude_cli
from .codespaces import running_codespaces
from .kubernetes import Cluster
from .pods import pod_settings
from .sshd import Sshd

__all__ = ["fresh_node", "harness", "node", "test_agent_conformance", "test_agent_resumes_on_a_fresh_node"]

pytestmark = pytest.mark.anyio


provider = provider_fixture(["ssh", "kubernetes"])


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
