"""Warm pools: a node claimed from a pool and its first byte, next to a cold provision and its
first byte, in the same run, alternating, on local, docker, ssh and kubernetes.

    python -m bench.pools [--providers local docker ssh kubernetes] [--claims 30]

Each sample times, from the caller's request to the first byte of ``echo`` on the node: for a
claim, the store's claim transaction (SQLite) and the spawn, and attaching to the node when
another control plane than the pool's keeper made it (a second orchestrator on the store);
for a cold one, the provider's whole provision and the spawn. The pool (size 3) is refilled
by its keeper between samples, with its default interval; every sample waits until the pool
is full and nothing is being made (untimed), so that no refill competes with it. ssh and
kubernetes need sshd and the cached cluster build (``scripts/kubernetes.sh``); not beside the
test suite (one Kubernetes cluster per machine).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import docker

from bench.docker_bench import exec_socket
from bench.trials import infrastructure
from nodeprov.node import NodeConfig, NodeHandle, NodeProvider
from nodeprov.registry import get_provider
from nodeprov.runs import Orchestrator, Pool
from nodeprov.spawn import SpawnOptions
from nodeprov.store import Store, new_id
from tests.pool_claimer import run_record

SIZE = 3


async def _first_byte(node: NodeHandle) -> None:
    process = await node.spawn(SpawnOptions("echo", ["x"]))
    assert process.stdout is not None
    await process.stdout.receive(1)
    await process.wait()


async def _quiet(plane: Orchestrator, name: str) -> None:
    """Until the pool is full and nothing is being made: no refill competes with a sample."""
    with anyio.fail_after(120):
        while True:
            status = await plane.pools.get(name)
            if status.ready == SIZE and not status.starting:
                break
            await anyio.sleep(0.01)


async def _claimed(
    plane: Orchestrator, store: Store, name: str, provider: NodeProvider[Any]
) -> tuple[float, NodeHandle]:
    await _quiet(plane, name)
    run_id = new_id("run")
    await run_record(store, run_id)
    started = time.perf_counter()
    node = await plane.pools.claim(name, run_id, provider, wait=False)
    assert node is not None
    await _first_byte(node)
    return time.perf_counter() - started, node


async def _cold(plane: Orchestrator, provider: NodeProvider[Any]) -> tuple[float, NodeHandle]:
    started = time.perf_counter()
    node = await provider.provision(NodeConfig(owner=plane.owner))
    await _first_byte(node)
    return time.perf_counter() - started, node


def _spread(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} (min {ms[0]:.1f}, max {ms[-1]:.1f})"


def _raw_docker_exec(node: NodeHandle) -> float:
    """docker-py alone: an exec of ``echo`` on the node's container and its first byte (the
    engine's own latency, the floor of any exec-based claim)."""
    api = docker.from_env().api
    try:
        started = time.perf_counter()
        raw = exec_socket(api, node.container_id, ["echo", "x"], stdin=False)  # type: ignore[attr-defined]
        raw.recv(16)
        took = time.perf_counter() - started
        raw.close()
        return took
    finally:
        api.close()


async def bench(name: str, settings: dict[str, Any], claims: int, store: Store) -> dict[str, list[float]]:
    """Per sample kind (claimed by the pool's keeper, by another control plane, cold; on
    docker, docker-py's exec alone), the times."""
    times: dict[str, list[float]] = {"keeper": [], "other": [], "cold": [], "raw": []}
    async with (
        get_provider(name, **settings) as provider,
        Orchestrator(store, keep_pools=[name]) as keeper,
        Orchestrator(store) as other,
    ):
        pool = Pool(name=name, provider=name, provider_settings=settings, size=SIZE, refill_concurrency=SIZE)
        await keeper.pools.create(pool)
        for _ in range(claims):
            for kind, plane in (("keeper", keeper), ("other", other)):
                took, node = await _claimed(plane, store, name, provider)
                times[kind].append(took)
                await node.destroy()
            await _quiet(keeper, name)
            took, node = await _cold(keeper, provider)
            times["cold"].append(took)
            if name == "docker":
                times["raw"].append(await anyio.to_thread.run_sync(_raw_docker_exec, node))
            await node.destroy()
        assert await keeper.pools.remove(name, wait=120)
    return times


async def main(arguments: argparse.Namespace) -> int:
    rows = []
    with infrastructure(arguments.providers) as providers, tempfile.TemporaryDirectory() as directory:
        async with await Store.open(f"sqlite:///{Path(directory)}/bench.db") as store:
            for name in arguments.providers:
                times = await bench(name, providers[name].settings, arguments.claims, store)
                ratio = statistics.median(times["cold"]) / statistics.median(times["keeper"])
                spreads = {kind: _spread(values) if values else "—" for kind, values in times.items()}
                rows.append((name, *(spreads[kind] for kind in ("keeper", "other", "cold", "raw")), ratio))
                print(name, spreads, flush=True)
    print(
        "\n| provider | claimed (the keeper's process) + first byte | claimed (another process)"
        " + first byte | cold provision + first byte | the engine's exec alone (docker-py) | cold / claimed |"
    )
    print("|---|---|---|---|---|---|")
    for name, keeper_text, other_text, cold_text, raw_text, ratio in rows:
        print(f"| {name} | {keeper_text} | {other_text} | {cold_text} | {raw_text} | {ratio:.0f}x |")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--providers", nargs="+", default=["local", "docker", "ssh", "kubernetes"])
    parser.add_argument("--claims", type=int, default=30)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the cluster and sshd on the way out
    sys.exit(anyio.run(main, parser.parse_args()))
