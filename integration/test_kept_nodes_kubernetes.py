"""A pod kept for a paused run lives no longer than its keep time, and never past its own
lifetime: reconcile deletes it then, and the run resumes on a new pod with the
conversation restored (the test cluster, the real Claude Code CLI, its scripted model)."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from nodeprov import NodeConfig
from nodeprov.runs import NodeReady, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Stall, Text
from tests.test_seams import until_destroyed

from .agents import TURN_TIMEOUT, require_claude_cli, run_options, until_model_asked
from .kubernetes import Cluster
from .pods import node_pods, pod_settings

pytestmark = pytest.mark.anyio


async def _paused_with_its_pod_kept(
    orchestrator: Orchestrator, model: ScriptedModel, settings: dict[str, object], **start: object
) -> tuple[str, str]:
    """A run whose agent waits on its model, paused keeping its pod: (run id, pod's node id)."""
    model.extend([Stall()])
    run = await orchestrator.start(
        "remember: the metal is cobalt",
        options=run_options(model),
        provider="kubernetes",
        provider_settings=settings,
        **start,  # type: ignore[arg-type]
    )
    with anyio.fail_after(TURN_TIMEOUT):
        async for event in run.events():
            if isinstance(event, NodeReady):
                node_id = event.node_id
            if run.agent_session_id is not None:
                break
    await until_model_asked(model)  # its Stall taken: the resume gets the next turn
    snapshot = await run.pause("human", "a short break", keep_node=True, keep_for=3.0)
    assert snapshot.node_kept
    return run.id, node_id


async def test_a_kept_pod_goes_at_its_keep_time_and_the_run_resumes_on_a_new_one(
    store: Store, scripted_model: ScriptedModel, kubernetes_cluster: Cluster, base_image: str
) -> None:
    require_claude_cli()
    settings = pod_settings(kubernetes_cluster, base_image, tools_host_path=True)
    async with Orchestrator(store) as orchestrator:
        run_id, node_id = await _paused_with_its_pod_kept(orchestrator, scripted_model, settings)
        assert node_pods(kubernetes_cluster, node_id) != []
        await until_destroyed(store, orchestrator, node_id)
        assert node_pods(kubernetes_cluster, node_id) == []
        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was cobalt")])
        resumed = await orchestrator.resume_run(
            run_id, message="which metal?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]
        assert (ready.reused, ready.transcript_restored) == (False, True)
    assert "remember: the metal is cobalt" in scripted_model.agent_requests[before].text()
    assert node_pods(kubernetes_cluster, ready.node_id) == []


async def test_a_pod_is_kept_no_longer_than_it_lives(
    store: Store, scripted_model: ScriptedModel, kubernetes_cluster: Cluster, base_image: str
) -> None:
    """The pod's own lifetime (activeDeadlineSeconds) ends it whether or not anyone is left
    (test_kubernetes.py); its keep time is cut to that lifetime."""
    require_claude_cli()
    settings = pod_settings(kubernetes_cluster, base_image, tools_host_path=True)
    async with Orchestrator(store) as orchestrator:
        _, node_id = await _paused_with_its_pod_kept(
            orchestrator, scripted_model, settings, node_config=NodeConfig(ttl=timedelta(minutes=1))
        )
        node = await store.node(node_id)
        assert node is not None
        assert node.keep_until_ms is not None
        assert node.keep_until_ms - await store.clock_ms() <= 60_000
