"""Prepared spawns (NodeHandle.prepare) on the fake provider's prepared shells, the exec
kit's preamble in a child process: the next spawn goes through it and only that one; a
destroy, a kill or a release ends a shell nobody used; prepares, spawns and releases raced
many times run every command once and leave nothing; a warm pool prepares its ready nodes,
a claim's first spawn takes the shell, and a keeper that stops closes the rest. The same
on Docker and Kubernetes: the provider conformance suite."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.exec.prepared import PreparedChannel
from nodeprov.node import NodeHandle
from nodeprov.registry import get_provider
from nodeprov.runs import Orchestrator, Pool
from nodeprov.spawn import SpawnedProcess, SpawnOptions
from nodeprov.store import Store
from nodeprov.testing.conformance import host_processes_matching, run, wait_until

pytestmark = pytest.mark.anyio

DEADLINE = 30


def waiting_shells(directory: Path) -> list[str]:
    """The prepared shells of the fake node in ``directory`` (their ``$0``) still waiting."""
    return [line for line in host_processes_matching(str(directory)) if "__np_count" in line]


async def waiting(directory: Path, count: int) -> bool:
    """Whether ``count`` shells wait there (a shell clearing its environment forks copies of
    itself for a moment: the count settles)."""
    return len(waiting_shells(directory)) == count


async def none_waiting(directory: Path) -> bool:
    return not waiting_shells(directory)


async def test_the_next_spawn_goes_through_the_prepared_shell_and_only_that_one(tmp_path: Path) -> None:
    provider = get_provider("fake", root=str(tmp_path / "nodes"), prepares=True, env={"FROM": "settings"})
    async with await provider.provision() as node:
        with anyio.fail_after(DEADLINE):
            assert not node.prepared
            await node.prepare()
            assert node.prepared
            assert await wait_until(lambda: waiting(Path(node.workdir).parent, 1), DEADLINE)
            code, out, _ = await run(
                node, "sh", "-c", 'printf "%s|%s|%s" "$1" "$ASKED" "$FROM"', "-", "a\nb", env={"ASKED": "yes"}
            )
            assert (code, out) == (0, b"a\nb|yes|settings")
            assert node.prepared_starts == 1
            assert not node.prepared
            assert (await run(node, "true"))[0] == 0
            assert node.prepared_starts == 1  # the usual way once used


@pytest.mark.parametrize("end", ["release", "kill", "destroy"])
async def test_a_prepared_shell_nobody_used_is_ended(tmp_path: Path, end: str) -> None:
    provider = get_provider("fake", root=str(tmp_path / "nodes"), prepares=True)
    node = await provider.provision()
    directory = Path(node.workdir).parent
    try:
        with anyio.fail_after(DEADLINE):
            await node.prepare()
            assert await wait_until(lambda: waiting(directory, 1), DEADLINE)
            if end == "release":
                await node.release_prepared()
            elif end == "kill":
                await node.kill_processes()
            else:
                await node.destroy()
            assert not node.prepared
            assert await wait_until(lambda: none_waiting(directory), DEADLINE)
    finally:
        await node.destroy()


async def test_a_local_node_has_nothing_to_prepare(tmp_path: Path) -> None:
    provider = get_provider("local", root=str(tmp_path / "nodes"))
    async with await provider.provision() as node:
        await node.prepare()
        assert not node.prepared


async def test_prepares_spawns_and_releases_raced_run_each_command_once(
    tmp_path: Path,
) -> None:
    """Under random delays: a spawn takes the prepared shell or spawns the usual way, never
    both; a prepare beside a release or another prepare leaves at most one shell waiting; a
    destroy ends whatever is left."""
    provider = get_provider("fake", root=str(tmp_path / "nodes"), prepares=True)
    rng = random.Random(30)

    async def later(work: Callable[[], Any]) -> None:
        await anyio.sleep(rng.random() * 0.01)
        await work()

    with anyio.fail_after(120):
        for _ in range(30):
            node = await provider.provision()
            directory = Path(node.workdir).parent
            spawned: list[SpawnedProcess] = []

            async def spawn(node: NodeHandle = node, spawned: list[SpawnedProcess] = spawned) -> None:
                spawned.append(await node.spawn(SpawnOptions("sh", ["-c", "echo ran >> count"])))

            async with anyio.create_task_group() as group:
                for work in (
                    node.prepare,
                    node.prepare,
                    spawn,
                    spawn,
                    spawn,
                    node.release_prepared,
                    node.prepare,
                ):
                    group.start_soon(later, work)
            for process in spawned:
                async with process:
                    assert await process.wait() == 0
            assert (directory / "work" / "count").read_text() == "ran\n" * 3
            left = 1 if node.prepared else 0  # a released shell ends once it reads the end of stdin
            assert await wait_until(functools.partial(waiting, directory, left), DEADLINE)
            await node.destroy()
            assert await wait_until(functools.partial(none_waiting, directory), DEADLINE)


async def test_a_pool_prepares_its_nodes_for_the_claims_first_spawn(
    store: Store, tmp_path: Path, agent: Callable[..., dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[bool] = []
    original = PreparedChannel.start

    async def counted(self: PreparedChannel, options: SpawnOptions) -> SpawnedProcess | None:
        process = await original(self, options)
        started.append(process is not None)
        return process

    monkeypatch.setattr(PreparedChannel, "start", counted)
    root = tmp_path / "nodes"
    pool = Pool(name="warm", provider="fake", provider_settings={"root": str(root), "prepares": True}, size=2)
    with anyio.fail_after(DEADLINE):
        async with Orchestrator(store, keep_pools=True, poll_interval=0.05) as orchestrator:
            await orchestrator.pools.create(pool)

            async def filled() -> bool:
                status = await orchestrator.pools.get("warm")
                return status.ready == 2 and status.starting == 0 and await waiting(root, 2)

            assert await wait_until(filled, DEADLINE)
            run_ = await orchestrator.start("hello", pool="warm", options=agent({"text": "hi"}))
            assert await run_.wait() == "ok"
            assert started[:1] == [True]  # the run's first spawn took its node's shell
        # The keeper stopped with its control plane: the shells of the nodes it keeps are closed.
        assert await wait_until(lambda: none_waiting(root), DEADLINE)
