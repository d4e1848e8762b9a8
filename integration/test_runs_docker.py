"""Runs on Docker nodes: pause/resume across containers, and a control plane killed mid-run."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import docker
import pytest
from anyio.streams.text import TextReceiveStream

from nodeprov import LABEL_NODE_ID
from nodeprov.runs import AgentMessage, NodeReady, NodeReleased, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until

from .agents import on_docker, require_claude_cli, run_options, until_tool_runs
from .containers import node_containers

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


def containers_of_run(client: docker.DockerClient, node_ids: list[str]) -> list[str]:
    return node_containers(client, *node_ids)


@pytest.mark.parametrize("keep_node", [True, False], ids=["same-container", "fresh-container"])
async def test_pause_and_resume_on_docker(
    keep_node: bool,
    store: Store,
    scripted_model: ScriptedModel,
    base_image: str,
    docker_client: docker.DockerClient,
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the colour is teal", options=run_options(scripted_model), **on_docker(base_image)
        )

        await until_tool_runs(marker)
        snapshot = await run.pause("human", "review", keep_node=keep_node)
        assert host_processes_matching(marker) == []
        first_node = snapshot.node_id
        assert first_node is not None
        assert bool(containers_of_run(docker_client, [first_node])) is keep_node
        released = [e async for e in run.events() if isinstance(e, NodeReleased)][-1]
        assert (released.kept, released.suspended) == (keep_node, False)  # Docker nodes are not suspended

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was teal")])
        resumed = await orchestrator.resume(
            snapshot.token, message="which colour?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]  # this drive's
        assert (ready.node_id == first_node) is keep_node
        assert ready.transcript_restored is not keep_node
        # On the kept node the resumed agent ran: the paused container was woken for it.
    first_request_after_resume = scripted_model.agent_requests[before].text()
    assert "remember: the colour is teal" in first_request_after_resume
    assert "which colour?" in first_request_after_resume
    assert containers_of_run(docker_client, [first_node, ready.node_id]) == []


async def test_a_kept_node_ends_at_its_lifetime_with_no_control_plane_left(
    store: Store, scripted_model: ScriptedModel, base_image: str, docker_client: docker.DockerClient
) -> None:
    """A kept node's container runs on (it is not paused: a paused container's clock would
    freeze with it), so the engine ends it at its lifetime whether or not anyone is left."""
    from nodeprov import NodeConfig
    from nodeprov.testing import Stall

    scripted_model.extend([Stall()])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "wait",
            options=run_options(scripted_model),
            node_config=NodeConfig(ttl=timedelta(seconds=8)),
            **on_docker(base_image),
        )
        ready = [e async for e in _until_agent(run) if isinstance(e, NodeReady)][-1]
        snapshot = await run.pause("human", "kept for later", keep_node=True)
        assert snapshot.node_kept
    assert containers_of_run(docker_client, [ready.node_id]) != []  # kept, and nobody is left

    async def gone() -> bool:
        return containers_of_run(docker_client, [ready.node_id]) == []

    assert await wait_until(gone, 120)


async def _until_agent(run: Any) -> AsyncIterator[Any]:
    """The run's events until its agent has said something."""
    async for event in run.events():
        yield event
        if isinstance(event, AgentMessage):
            return


CONTROL_PLANE = textwrap.dedent("""
    import json, sys, anyio
    from nodeprov.runs import Orchestrator
    from nodeprov.store import Store

    async def main() -> None:
        url, settings, env = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
        async with await Store.open(url) as store, Orchestrator(store, lease_ttl=2) as orchestrator:
            options = {"env": env, "permission": "full", "ship_cli": True}
            run = await orchestrator.start("remember: the fruit is plum", provider="docker",
                                           provider_settings=settings, options=options)
            print(run.id, flush=True)
            await anyio.sleep(3600)

    anyio.run(main)
""")


async def test_a_killed_control_plane_is_reconciled_and_its_run_resumed(
    store: Store, scripted_model: ScriptedModel, base_image: str, docker_client: docker.DockerClient
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    settings = on_docker(base_image)["provider_settings"]
    plane = await anyio.open_process(
        [
            sys.executable,
            "-c",
            CONTROL_PLANE,
            store.url,
            json.dumps(settings),
            json.dumps(scripted_model.agent_env()),
        ]
    )
    assert plane.stdout is not None
    with anyio.fail_after(60):
        run_id = (await TextReceiveStream(plane.stdout).receive()).strip()

    async def mid_turn_and_mirrored() -> bool:
        record = await store.run(run_id)
        if not (record and record.agent_session_id and host_processes_matching(marker)):
            return False
        rows = await store.db.fetchall(
            "SELECT entry FROM transcript_entries WHERE session_id = ?", (record.agent_session_id,)
        )
        return "the fruit is plum" in repr(rows)

    assert await wait_until(mid_turn_and_mirrored, 90), "the run never got going"
    plane.kill()  # SIGKILL: the control plane gets no chance to clean up
    await plane.wait()
    await plane.aclose()
    record = await store.run(run_id)
    assert record is not None
    assert record.node_id is not None
    assert containers_of_run(docker_client, [record.node_id])  # an orphan, for now

    async with Orchestrator(store) as restarted:
        assert (await restarted.reconcile()).ended == []  # its lease has not expired yet

        async def reconciled() -> bool:
            return (await restarted.reconcile()).ended == [run_id]

        assert await wait_until(reconciled, 10), "the dead control plane's lease never expired"
        assert containers_of_run(docker_client, [record.node_id]) == []
        assert await wait_until(lambda: _gone(marker), 10)
        failed = await store.run(run_id)
        assert failed is not None
        assert (failed.state, failed.outcome) == ("failed", "error")
        assert "died" in (failed.error or "")
        assert (await restarted.reconcile()).ended == []  # nothing left to do

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("the fruit was plum")])
        resumed = await restarted.resume_run(
            run_id, message="which fruit?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
    seen = scripted_model.agent_requests[before].text()
    assert "remember: the fruit is plum" in seen
    assert "which fruit?" in seen
    final = await store.run(run_id)
    assert final is not None
    assert final.state == "finished"


async def _gone(marker: str) -> bool:
    return not host_processes_matching(marker)


async def test_a_node_that_dies_mid_run_is_resumed_on_a_new_one(
    store: Store, scripted_model: ScriptedModel, base_image: str, docker_client: docker.DockerClient
) -> None:
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    async with Orchestrator(store) as orchestrator:
        run = await orchestrator.start(
            "remember: the stone is jade", options=run_options(scripted_model), **on_docker(base_image)
        )

        await until_tool_runs(marker)
        record = await store.run(run.id)
        assert record is not None
        assert record.node_id is not None
        assert record.project_key is not None
        assert run.agent_session_id is not None
        mirrored = {"project_key": record.project_key, "session_id": run.agent_session_id}

        async def prompt_mirrored() -> bool:
            return "stone is jade" in json.dumps(await store.transcripts.load(mirrored))  # type: ignore[arg-type]

        # What a dead node's agent had not mirrored yet is lost with it (the CLI sends in
        # batches of its own): the resume elsewhere needs the prompt in the store.
        assert await wait_until(prompt_mirrored, 30)
        container = docker_client.api.containers(filters={"label": f"{LABEL_NODE_ID}={record.node_id}"})[0]
        docker_client.api.remove_container(container["Id"], force=True)  # the node dies under the run
        assert await run.wait() == "error"
        assert (await store.run(run.id)).state == "failed"  # type: ignore[union-attr]

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("the stone was jade")])
        resumed = await orchestrator.resume_run(
            run.id, message="which stone?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]  # this drive's
        assert ready.transcript_restored
    seen = scripted_model.agent_requests[before].text()
    assert "remember: the stone is jade" in seen
    assert "which stone?" in seen
    assert containers_of_run(docker_client, [record.node_id, ready.node_id]) == []
