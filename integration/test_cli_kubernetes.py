"""The node commands on the Kubernetes provider (the test cluster), settings from
NODEPROV_KUBERNETES_* variables, as a script would call them."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from .cli import nodeprov_with
from .kubernetes import Cluster
from .pods import node_pods, pod_settings


def nodeprov(cluster: Cluster, image: str, *args: str, **more: Any) -> subprocess.CompletedProcess[str]:
    return nodeprov_with("kubernetes", pod_settings(cluster, image, **more), *args)


def test_providers_says_what_is_wrong(kubernetes_cluster: Cluster, base_image: str) -> None:
    ready = json.loads(
        nodeprov(kubernetes_cluster, base_image, "providers", "-p", "kubernetes", "--json").stdout
    )
    assert (ready["ready"], ready["error"]) == (True, "")
    assert ready["requirements"][0]["detail"] == str(kubernetes_cluster.kubeconfig)
    for more, says in (
        ({"namespace": "nodeprov-nowhere"}, "namespace 'nodeprov-nowhere' does not exist"),
        ({"kubeconfig": str(kubernetes_cluster.viewer_kubeconfig)}, "may not create pods"),
        ({"context": "nodeprov-no-such-context"}, "nodeprov-no-such-context"),
    ):
        done = nodeprov(kubernetes_cluster, base_image, "providers", "-p", "kubernetes", "--json", **more)
        row = json.loads(done.stdout)
        assert not row["ready"]
        assert says in row["error"], row


def test_provision_list_exec_destroy(kubernetes_cluster: Cluster, base_image: str) -> None:
    made = nodeprov(kubernetes_cluster, base_image, "provision", "-p", "kubernetes", "--ttl", "1", "--json")
    assert made.returncode == 0, made.stderr
    node_id = json.loads(made.stdout)["node_id"]
    try:
        assert len(node_pods(kubernetes_cluster, node_id)) == 1
        listed = nodeprov(kubernetes_cluster, base_image, "list", "-p", "kubernetes", "--json")
        assert node_id in [json.loads(line)["node_id"] for line in listed.stdout.splitlines()]
        done = nodeprov(
            kubernetes_cluster,
            base_image,
            "exec",
            node_id,
            "-p",
            "kubernetes",
            "--",
            "printf",
            "%s\\0",
            "a;b",
            "$(id)",
        )
        assert (done.returncode, done.stdout.split("\0")[:-1]) == (0, ["a;b", "$(id)"]), done.stderr
    finally:
        gone = nodeprov(kubernetes_cluster, base_image, "destroy", node_id, "-p", "kubernetes", "--json")
    assert gone.returncode == 0, gone.stderr
    assert node_pods(kubernetes_cluster, node_id) == []
