"""Settings and look-ups for tests of the Kubernetes provider on the test cluster
(integration/kubernetes.py): pods from the offline-built base image, on the host network
(the cluster has no network plugin), tolerating the not-ready node that makes."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from nodeprov.testing.conformance import Leftovers

from .kubernetes import Cluster


def pod_settings(cluster: Cluster, image: str, **more: Any) -> dict[str, Any]:
    """Settings of the kubernetes provider for the test cluster (``more`` overrides)."""
    settings: dict[str, Any] = {
        "kubeconfig": str(cluster.kubeconfig),
        "image": image,
        "image_pull_policy": "Never",
        "host_network": True,
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        "ready_timeout": 60,
    }
    return {**settings, **more}


def node_pods(cluster: Cluster, node_id: str) -> list[str]:
    """The pods of a node, whatever their phase, as kubectl names them."""
    done = cluster.kubectl("get", "pods", "-l", f"nodeprov.node-id={node_id}", "-o", "name")
    return done.stdout.decode().split()


def pod_leftovers(cluster: Cluster) -> Leftovers:
    async def find(node_id: str) -> list[str]:
        return await anyio.to_thread.run_sync(node_pods, cluster, node_id)

    return find
