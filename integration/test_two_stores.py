"""Two control planes with two stores on one Docker engine and one local root: each reaps in
a loop (reconcile and garbage collection) while the other's runs are provisioned and live.
A lease one store does not know is another store's: its nodes are never taken for dead.
Kept nodes on Docker live no longer than their keep time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest

from nodeprov import get_provider
from nodeprov.node import NodeProvider
from nodeprov.runs import AgentMessage, NodeReady, Orchestrator, Run, RunState
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Stall, Text, fake_agent_command
from tests.test_seams import until_destroyed

from .agents import TURN_TIMEOUT, on_docker, require_claude_cli, run_options, until_model_asked
from .containers import node_containers

pytestmark = pytest.mark.anyio

TRIALS = int(os.environ.get("NODEPROV_TWO_STORE_TRIALS", "10"))


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    require_claude_cli()


async def agent_started(run: Run) -> str:
    """Wait until the run's agent has said something; return its node's id."""
    node_id = None
    with anyio.fail_after(TURN_TIMEOUT):
        async for event in run.events():
            if isinstance(event, NodeReady):
                node_id = event.node_id
            elif isinstance(event, AgentMessage) and node_id is not None:
                return node_id
    raise AssertionError(f"run {run.id} ended before its agent started: {run.error}")


async def test_two_stores_reaping_in_a_loop_delete_nothing_of_each_other(
    tmp_path: Path, scripted_model: ScriptedModel, base_image: str, docker_client: docker.DockerClient
) -> None:
    scripted_model.extend([Stall() for _ in range(2 * TRIALS)])  # each Docker run's agent waits on it
    fake_agent = {
        "cli_path": fake_agent_command(tmp_path),
        "env": {"NODEPROV_FAKE_AGENT": json.dumps([{"text": "working"}, {"stall": True}])},
    }
    root = {"root": str(tmp_path / "nodes")}
    local: dict[str, Any] = {"provider": "local", "provider_settings": root, "permission": "edit"}
    providers: list[NodeProvider[Any]] = [
        get_provider("docker", **on_docker(base_image)["provider_settings"]),
        get_provider("local", root=str(tmp_path / "nodes")),
    ]
    reaped: list[str] = []
    async with (
        await Store.open(f"sqlite:///{tmp_path}/one.db") as one,
        await Store.open(f"sqlite:///{tmp_path}/two.db") as two,
        Orchestrator(one, reconcile_interval=0) as first,
        Orchestrator(two, reconcile_interval=0) as second,
    ):
        planes = (first, second)

        async def reap(plane: Orchestrator, done: anyio.Event) -> None:
            while not done.is_set():
                reaped.extend((await plane.reconcile()).destroyed)
                for provider in providers:
                    reaped.extend(info.node_id for info in (await plane.collect_garbage(provider)).reaped)

        for trial in range(TRIALS):
            runs: list[Run] = []
            done = anyio.Event()
            async with anyio.create_task_group() as reapers:
                for plane in planes:
                    reapers.start_soon(reap, plane, done)
                for plane in planes:  # started while the other plane reaps
                    runs.append(
                        await plane.start(
                            f"docker {trial}", options=run_options(scripted_model), **on_docker(base_image)
                        )
                    )
                    runs.append(await plane.start(f"local {trial}", options=fake_agent, **local))
                nodes = [await agent_started(run) for run in runs]
                for _ in range(2):  # a few more rounds while every run lives
                    for plane in planes:
                        reaped.extend((await plane.reconcile()).destroyed)
                done.set()
            assert [node for node in nodes if node in reaped] == [], f"trial {trial}"
            assert [run.state for run in runs] == [RunState.RUNNING] * len(runs), f"trial {trial}"
            assert node_containers(docker_client, nodes[0], nodes[2]) != []
            async with anyio.create_task_group() as pausing:
                for run in runs:
                    pausing.start_soon(run.pause, "human", "trial over")
            assert [await run.wait() for run in runs] == ["paused"] * len(runs)
    for provider in providers:
        await provider.aclose()


async def test_a_kept_docker_node_goes_at_its_keep_time(
    store: Store, scripted_model: ScriptedModel, base_image: str, docker_client: docker.DockerClient
) -> None:
    scripted_model.extend([Stall()])
    async with Orchestrator(store) as plane:
        run = await plane.start(
            "remember: the colour is teal", options=run_options(scripted_model), **on_docker(base_image)
        )
        node_id = await agent_started(run)
        await until_model_asked(scripted_model)  # its Stall taken: the resume gets the next turn
        snapshot = await run.pause("human", "a short break", keep_node=True, keep_for=2.0)
        assert snapshot.node_kept
        assert node_containers(docker_client, node_id) != []
        await until_destroyed(store, plane, node_id)
        assert node_containers(docker_client, node_id) == []
        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was teal")])
        last = await plane.resume(
            snapshot.token, message="which colour?", options=run_options(scripted_model)
        )
        assert await last.wait() == "ok", last.error
        ready = [event async for event in last.events() if isinstance(event, NodeReady)][-1]
        assert (ready.reused, ready.transcript_restored) == (False, True)
    assert "remember: the colour is teal" in scripted_model.agent_requests[before].text()
