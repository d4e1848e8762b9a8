"""The node commands on the Kubernetes provider (the test cluster), settings from
NODEPROV_KUBERNETES_* variables, as a script would call them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .cli import PROVIDERS, nodeprov_with, settings_environment
from .kubernetes import Cluster
from .pods import node_pods, pod_settings


def nodeprov(cluster: Cluster, image: str, *args: str, **more: Any) -> subprocess.CompletedProcess[str]:
    return nodeprov_with("kubernetes", pod_settings(cluster, image, **more), *args)


def test_providers_says_what_is_wrong(kubernetes_cluster: Cluster, base_image: str) -> None:
    ready = json.loads(
        nodeprov(
            kubernetes_cluster,
            base_image,
            *PROVIDERS,
            "-p",
            "kubernetes",
            "--json",
        ).stdout
    )
    assert (ready["ready"], ready["error"]) == (True, "")
    assert ready["requirements"][0]["detail"] == str(kubernetes_cluster.kubeconfig)
    for more, says in (
        ({"namespace": "nodeprov-nowhere"}, "namespace 'nodeprov-nowhere' does not exist"),
        ({"kubeconfig": str(kubernetes_cluster.viewer_kubeconfig)}, "may not create pods"),
        ({"context": "nodeprov-no-such-context"}, "nodeprov-no-such-context"),
    ):
        done = nodeprov(
            kubernetes_cluster,
            base_image,
            *PROVIDERS,
            "-p",
            "kubernetes",
            "--json",
            **more,
        )
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


def test_in_cluster_configuration(kubernetes_cluster: Cluster, base_image: str, tmp_path: Path) -> None:
    """As a control plane in a pod: the API server in KUBERNETES_SERVICE_HOST and _PORT, the
    service account's token and CA at /var/run/secrets/kubernetes.io/serviceaccount (a
    tmpfs over /run in a mount namespace of the test's own puts them there)."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(kubernetes_cluster.token)
    shutil.copy(kubernetes_cluster.ca_file, account / "ca.crt")
    in_a_pod = 'mount -t tmpfs nodeprov /run && mkdir -p "$2" && cp "$1"/* "$2" && shift 2 && exec "$@"'
    secrets = "/run/secrets/kubernetes.io/serviceaccount"
    command = [
        sys.executable,
        "-m",
        "nodeprov",
        *PROVIDERS,
        "-p",
        "kubernetes",
        "--json",
    ]
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", in_a_pod, "-"]
    done = subprocess.run(
        [*unshare, str(account), secrets, *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            **os.environ,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(urlsplit(kubernetes_cluster.server).port),
            **settings_environment("kubernetes", {"in_cluster": True, "image": base_image}),
        },
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert (row["ready"], row["error"]) == (True, ""), row
    assert row["requirements"][0]["detail"] == "in a pod: its service account"
