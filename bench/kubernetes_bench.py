"""Kubernetes provider benchmarks against kubectl, the cluster's own client, on the test
cluster (integration/kubernetes.py: Kubernetes 1.20 built from Debian's sources, so exec
speaks v4.channel.k8s.io and nodeprov's stdin goes through the relay; kubectl speaks SPDY).

- pipe: bytes through ``cat`` in one pod, via a spawned exec (nodeprov's websocket) against
  ``kubectl exec -i POD -- cat`` (a child process). kubectl's start-up is part of its time.
- provision + first byte, cold: a new provider's ``provision()`` (create the pod, wait for
  Ready, read its environment) then a spawned ``cat`` echoing one byte, against ``kubectl
  run`` (the same pod spec through ``--overrides``), ``kubectl wait --for=condition=Ready``
  and ``kubectl exec -i POD -- cat`` with one byte. Pods are deleted outside the timing.

Needs root and the cached cluster build (``scripts/kubernetes.sh``).
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from integration.kubernetes import Cluster, running_cluster
from integration.pods import pod_settings
from nodeprov import SpawnOptions, get_provider

from .common import CHUNK, Row, compare
from .foundation import pipe_ours, pipe_raw

SCRIPT = Path(__file__).parents[1] / "scripts" / "kubernetes.sh"
IMAGE_SCRIPT = Path(__file__).parents[1] / "integration" / "images" / "build-base.sh"


async def _provision_ours(settings: dict[str, Any]) -> float:
    start = time.perf_counter()
    async with get_provider("kubernetes", **settings) as provider:
        node = await provider.provision()
        async with await node.spawn(SpawnOptions("cat")) as process:
            await process.stdin.send(b"x")
            assert await process.stdout.receive() == b"x"
        took = time.perf_counter() - start
        await node.destroy()
    return took


def _provision_raw(cluster: Cluster, image: str) -> float:
    name = f"raw-{uuid.uuid4().hex[:12]}"
    overrides = {
        "apiVersion": "v1",
        "spec": {
            "hostNetwork": True,
            "automountServiceAccountToken": False,
            "shareProcessNamespace": True,
            "terminationGracePeriodSeconds": 2,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        },
    }
    kubectl = [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}"]
    start = time.perf_counter()
    for argv, stdin in (
        (
            [
                *kubectl,
                "run",
                name,
                f"--image={image}",
                "--image-pull-policy=Never",
                "--restart=Never",
                f"--overrides={json.dumps(overrides)}",
                "--command",
                "--",
                "sleep",
                "2147483647",
            ],
            b"",
        ),
        ([*kubectl, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s"], b""),
        ([*kubectl, "exec", "-i", name, "--", "cat"], b"x"),
    ):
        done = subprocess.run(argv, input=stdin, capture_output=True, check=True, timeout=120)
    assert done.stdout == b"x"
    took = time.perf_counter() - start
    subprocess.run(
        [*kubectl, "delete", "pod", name, "--wait=true"], capture_output=True, check=True, timeout=120
    )
    return took


async def run(args: argparse.Namespace) -> list[Row]:
    built = await anyio.run_process(["bash", str(SCRIPT)])
    image_built = await anyio.run_process([str(IMAGE_SCRIPT)])
    cache, image = Path(built.stdout.decode().split()[-1]), image_built.stdout.decode().split()[-1]
    total = args.pipe_mb * 1024 * 1024 // CHUNK * CHUNK
    mb = total / 1e6
    rows = []
    with running_cluster(cache) as cluster:
        await anyio.to_thread.run_sync(cluster.import_docker_image, image)
        settings = pod_settings(cluster, image)
        timing = await compare(
            args.repeat,
            functools.partial(_provision_ours, settings),
            functools.partial(anyio.to_thread.run_sync, _provision_raw, cluster, image),
        )
        rows.append(
            Row(
                "kubernetes provision + first byte vs `kubectl run` + `wait` + `exec`",
                f"{timing.ours:.2f} s",
                f"{timing.raw:.2f} s",
                timing,
            )
        )
        async with get_provider("kubernetes", **settings) as provider, await provider.provision() as node:
            pod = f"nodeprov-{node.node_id}"
            raw = [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "exec", "-i", pod]
            timing = await compare(
                args.repeat,
                functools.partial(pipe_ours, node, total),
                functools.partial(pipe_raw, [*raw, "--", "cat"], total),
            )
            rows.append(
                Row(
                    f"kubernetes pipe: {args.pipe_mb} MiB through cat vs `kubectl exec -i POD -- cat`",
                    f"{mb / timing.ours:,.0f} MB/s",
                    f"{mb / timing.raw:,.0f} MB/s",
                    timing,
                )
            )
    return rows
