"""Runs in Kubernetes pods: a paused run releases its pod, and the resume runs on a new pod
with the conversation restored from the store (the test cluster, the real Claude Code CLI
against its scripted model)."""

from __future__ import annotations

import pytest

from nodeprov.runs import NodeReady, NodeReleased, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker

from .agents import require_claude_cli, run_options, until_tool_runs
from .kubernetes import Cluster
from .pods import node_pods, pod_settings

pytestmark = pytest.mark.anyio


async def test_pause_releases_the_pod_and_resume_restores_the_transcript_on_a_new_one(
    store: Store, scripted_model: ScriptedModel, kubernetes_cluster: Cluster, base_image: str
) -> None:
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    settings = pod_settings(kubernetes_cluster, base_image, tools_host_path=True)
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the metal is cobalt",
            options=run_options(scripted_model),
            provider="kubernetes",
            provider_settings=settings,
        )
        await until_tool_runs(marker)
        snapshot = await run.pause("human", "review", keep_node=False)
        assert host_processes_matching(marker) == []
        first_node = snapshot.node_id
        assert first_node is not None
        assert node_pods(kubernetes_cluster, first_node) == []  # released: the pod is gone
        released = [e async for e in run.events() if isinstance(e, NodeReleased)][-1]
        assert (released.kept, released.suspended) == (False, False)

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was cobalt")])
        resumed = await orchestrator.resume(
            snapshot.token, message="which metal?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]  # this drive's
        assert ready.node_id != first_node
        assert ready.transcript_restored
    first_request_after_resume = scripted_model.agent_requests[before].text()
    assert "remember: the metal is cobalt" in first_request_after_resume
    assert "which metal?" in first_request_after_resume
    assert node_pods(kubernetes_cluster, ready.node_id) == []
