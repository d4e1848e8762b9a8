"""Kept agents across a Kubernetes API server restart (every pod exec's websocket goes with
it). In a file of its own: the Kubernetes tests run in one pytest process, which has the one
cluster of the machine (scripts/test.sh)."""

from __future__ import annotations

import anyio
import pytest

from nodeprov import NodeHandle
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import unique_marker

from .agents import require_claude_cli, run_options
from .kubernetes import Cluster
from .pods import pod_settings
from .test_kept_agents import _goes_on_across_a_drop, _kinds, _waiting_tool, paused_at_once

pytestmark = pytest.mark.anyio


async def test_a_claude_turn_goes_on_across_an_api_server_restart(
    store: Store, scripted_model: ScriptedModel, kubernetes_cluster: Cluster, base_image: str
) -> None:
    """The Kubernetes API server is stopped mid-turn (every pod exec's websocket goes with it)
    and started again 2 s later: the run re-attaches through the new one."""
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": _waiting_tool(marker)}), Text("all done")])

    async def restart(node: NodeHandle) -> None:
        await anyio.to_thread.run_sync(kubernetes_cluster.stop_apiserver)
        await anyio.sleep(2)
        await anyio.to_thread.run_sync(kubernetes_cluster.start_apiserver)

    where = {
        "provider": "kubernetes",
        "provider_settings": pod_settings(kubernetes_cluster, base_image, tools_host_path=True),
    }
    try:
        events = await _goes_on_across_a_drop(
            store, where, marker, {"options": run_options(scripted_model)}, restart
        )
    finally:
        await anyio.to_thread.run_sync(kubernetes_cluster.start_apiserver)
    assert _kinds(events).count("Result") == 1
    assert len(scripted_model.agent_requests) == 2


async def test_a_pause_asked_at_once_after_a_take_over_stops_the_agent_first(
    store: Store, scripted_model: ScriptedModel, kubernetes_cluster: Cluster, base_image: str
) -> None:
    """Issue 45 on a pod: see test_kept_agents.py."""
    where = {
        "provider": "kubernetes",
        "provider_settings": pod_settings(kubernetes_cluster, base_image, tools_host_path=True),
    }
    await paused_at_once(store, scripted_model, where, keep_node=True)
