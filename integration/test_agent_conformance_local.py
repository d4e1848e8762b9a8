"""The agent conformance suite (nodeprov.testing.agent_conformance) on a local node, and the
checks that are the agent's own affair, the same on any node, for the real Claude Code,
Codex, OpenCode and Gemini CLIs, and OpenCode's ACP mode as any ACP agent, each against its
scripted model; beside the Docker and local tests
(the other nodes: ``test_agent_conformance.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from nodeprov import NodeConfig, NodeHandle, agent_class, get_provider
from nodeprov.testing.agent_conformance import AgentHarness

from .agent_harnesses import (  # the suite's tests, collected here too
    AGENT_ONLY,
    fresh_node,
    harness,
    node,
    provider_fixture,
    test_agent_conformance,
    test_agent_resumes_on_a_fresh_node,
)

__all__ = ["fresh_node", "harness", "node", "test_agent_conformance", "test_agent_resumes_on_a_fresh_node"]

pytestmark = pytest.mark.anyio


provider = provider_fixture(["local"])


@pytest.mark.parametrize(
    "check", AGENT_ONLY, ids=[check.__name__.removeprefix("check_") for check in AGENT_ONLY]
)
async def test_agent_only_conformance(
    check: Callable[[AgentHarness, NodeHandle, Path], Awaitable[None]], harness: AgentHarness, tmp_path: Path
) -> None:
    tools = harness.tools
    if tools is None:
        cli = agent_class(harness.agent).local_cli()
        assert cli is not None
        tools = {harness.agent: cli}
    # Short stop graces: how a node stops the agent is not what these check (the others do).
    provider = get_provider("local", root=tmp_path / "nodes", eof_grace=1, term_grace=1)
    async with provider, await provider.provision(NodeConfig(tools=tools)) as node:
        await check(harness, node, tmp_path)
