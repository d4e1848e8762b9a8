"""Warm pools: a node claimed from a pool and its first byte, next to a cold provision and its
first byte, in the same run, alternating, on local, docker, ssh and kubernetes.

    python -m bench.pools [--providers local docker ssh kubernetes] [--claims 30]

Each sample times, from the caller's request to the first byte of ``echo`` on the node: for a
claim, the store's claim transaction (SQLite), attaching to the node and the spawn; for a
cold one, the provider's whole provision and the spawn. The pool (size 3) is refilled by the
same control plane between samples (untimed: a claim waits for a ready node first). ssh and
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


async def _claimed(
    plane: Orchestrator, store: Store, name: str, provider: NodeProvider[Any]
) -> tuple[float, NodeHandle]:
    with anyio.fail_after(120):  # refilled, untimed
        while True:
            if (await plane.pools.get(name)).ready:
                break
            await anyio.sleep(0.01)
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


async def bench(
    name: str, settings: dict[str, object], claims: int, store: Store
) -> tuple[list[float], list[float]]:
    provider = get_provider(name, **settings)
    pooled: list[float] = []
    cold: list[float] = []
    async with Orchestrator(store, keep_pools=[name], poll_interval=0.02) as plane:
        await plane.pools.create(
            Pool(name=name, provider=name, provider_settings=settings, size=SIZE, refill_concurrency=SIZE)
        )
        for _ in range(claims):
            took, node = await _claimed(plane, store, name, provider)
            pooled.append(took)
            await node.destroy()
            took, node = await _cold(plane, provider)
            cold.append(took)
            await node.destroy()
        assert await plane.pools.remove(name, wait=120)
    return pooled, cold


async def main(arguments: argparse.Namespace) -> int:
    rows = []
    with infrastructure(arguments.providers) as providers, tempfile.TemporaryDirectory() as directory:
        async with await Store.open(f"sqlite:///{Path(directory)}/bench.db") as store:
            for name in arguments.providers:
                pooled, cold = await bench(name, providers[name].settings, arguments.claims, store)
                ratio = statistics.median(cold) / statistics.median(pooled)
                rows.append((name, _spread(pooled), _spread(cold), ratio))
                print(f"{name}: claimed {_spread(pooled)}; cold {_spread(cold)}; {ratio:.0f}x", flush=True)
    print("\n| provider | claimed from a pool + first byte | cold provision + first byte | cold / claimed |")
    print("|---|---|---|---|")
    for name, pooled_text, cold_text, ratio in rows:
        print(f"| {name} | {pooled_text} | {cold_text} | {ratio:.0f}x |")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--providers", nargs="+", default=["local", "docker", "ssh", "kubernetes"])
    parser.add_argument("--claims", type=int, default=30)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the cluster and sshd on the way out
    sys.exit(anyio.run(main, parser.parse_args()))
