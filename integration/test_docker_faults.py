"""Faults on a real Docker engine: deadlines that hold, processes that leave their group, a
control plane SIGKILLed while it provisions."""

from __future__ import annotations

import os
import random
import socket
import sys
import textwrap
import time

import anyio
import docker
import pytest
from anyio.streams.text import TextReceiveStream

from nodeprov import LABEL_OWNER, SpawnOptions, get_provider
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker, wait_until

pytestmark = pytest.mark.anyio

KILL_TRIALS = int(os.environ.get("NODEPROV_KILL_TRIALS", "30"))


async def test_destroy_honours_its_deadline_with_live_processes(base_image: str) -> None:
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    node = await provider.provision()
    marker = unique_marker()
    stubborn = SpawnOptions("sh", ["-c", f"trap '' TERM; sleep {marker}"])
    processes = [await node.spawn(stubborn)]
    processes += [await node.spawn(SpawnOptions("sleep", [marker])) for _ in range(9)]
    assert await wait_until(lambda: _count(marker, 11), 10)  # the stubborn one is sh and its sleep
    started = time.monotonic()
    await node.destroy(destroy_timeout=3)
    assert time.monotonic() - started < 3 + 1
    assert await wait_until(lambda: _count(marker, 0), 10)
    assert all(p.returncode is None or p.returncode >= 0 for p in processes)


async def _count(marker: str, expected: int) -> bool:
    return len(host_processes_matching(marker)) == expected


async def test_processes_that_leave_their_group_do_not_survive_destroy(base_image: str) -> None:
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    marker = unique_marker()
    async with await provider.provision() as node:
        script = f"nohup sleep {marker} >/dev/null 2>&1 & (sleep {marker} &) ; setsid sleep {marker} &"
        assert (await run(node, "sh", "-c", script))[0] == 0
        assert await wait_until(lambda: _count(marker, 3), 10)
    assert await wait_until(lambda: _count(marker, 0), 10)


PROVISIONER = textwrap.dedent("""
    import sys, anyio
    from nodeprov import get_provider

    async def main() -> None:
        provider = get_provider("docker", image=sys.argv[1], network_mode="host", pull="never")
        async with anyio.create_task_group() as tg:
            print("provisioning", flush=True)
            for _ in range(20):
                tg.start_soon(provider.provision)
        print("provisioned", flush=True)
        await anyio.sleep(3600)

    anyio.run(main)
""")


async def test_a_control_plane_killed_while_provisioning_leaves_nothing_after_gc(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    """SIGKILL at a random moment of provisioning 20 nodes, KILL_TRIALS times: requests the
    engine still completes after the death arrive late, containers stopped between create
    and start never run their lifetime; gc with a settle time removes them all."""
    rng = random.Random(7)
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    owners: list[str] = []
    settle_times: list[float] = []
    for _ in range(KILL_TRIALS):
        plane = await anyio.open_process([sys.executable, "-c", PROVISIONER, base_image])
        assert plane.stdout is not None
        with anyio.fail_after(60):
            assert (await TextReceiveStream(plane.stdout).receive()).startswith("provisioning")
        await anyio.sleep(rng.uniform(0, 2.5))
        plane.kill()
        await plane.wait()
        await plane.aclose()
        owners.append(f"{socket.gethostname()}:{plane.pid}:")
        started = time.monotonic()
        report = await provider.collect_garbage(settle=3)
        settle_times.append(time.monotonic() - started)
        assert report.failed == []
        assert _left(docker_client, owners[-1:]) == []
    await anyio.sleep(3)  # anything still in flight has landed by now
    assert _left(docker_client, owners) == []
    print(f"\ngc settled after a SIGKILL in {min(settle_times):.1f}-{max(settle_times):.1f} s")


def _left(client: docker.DockerClient, owners: list[str]) -> list[str]:
    return [
        f"{c['Names'][0]} ({c['State']})"
        for c in client.api.containers(all=True, filters={"label": LABEL_OWNER})
        if c["Labels"][LABEL_OWNER].startswith(tuple(owners))
    ]
