"""``deploy/``: the Kubernetes manifests say what the service needs and nothing more: the
Role grants exactly what the kubernetes provider's probe checks (each verb is one the
provider calls), the Deployment runs two replicas beyond loopback with their secrets from
the Secret (never in argv), probes on /readyz and /healthz, and a grace period above the
service's shutdown bound. The image's build is offline (integration/test_service_kubernetes.py
runs all of it on the test cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from nodeprov.service import ServiceConfig
from nodeprov_kubernetes.provider import _NEEDED

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def _objects(*names: str) -> dict[str, dict[str, Any]]:
    found = {}
    for name in names:
        for document in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()):
            found[document["kind"]] = document
    return found


def test_the_role_grants_what_the_provider_checks_in_its_namespace_only() -> None:
    rbac = _objects("rbac.yaml")
    assert set(rbac) == {"ServiceAccount", "Role", "RoleBinding"}  # no ClusterRole
    granted = {
        (verb, *rule_resource.partition("/")[::2])
        for rule in rbac["Role"]["rules"]
        for rule_resource in rule["resources"]
        for verb in rule["verbs"]
        if rule["apiGroups"] == [""]
    }
    assert granted == set(_NEEDED)
    binding = rbac["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nodeprov"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nodeprov"}]
    for document in rbac.values():
        assert "namespace" not in document["metadata"]  # applied with kubectl -n


def test_the_deployment_serves_beyond_loopback_with_its_secrets_out_of_argv() -> None:
    objects = _objects("deployment.yaml", "service.yaml", "rbac.yaml")
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    [container] = pod["containers"]
    args = container["args"]
    assert args[0] == "serve"
    assert {
        "--host=0.0.0.0",
        "--provider=kubernetes",
        "--tokens-file=/etc/nodeprov/tokens/tokens.json",
    } <= set(args)
    env = {item["name"]: item for item in container["env"]}
    assert env["NODEPROV_STORE"]["valueFrom"]["secretKeyRef"] == {"name": "nodeprov", "key": "store-url"}
    assert env["NODEPROV_KUBERNETES_IN_CLUSTER"]["value"] == "true"
    assert env["NODEPROV_KUBERNETES_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert "NODEPROV_KUBERNETES_IMAGE" in env
    assert not [arg for arg in args if "postgresql" in arg or "npt_" in arg]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    # A stopping replica: the preStop pause, requests under way (shutdown_timeout), then its
    # runs paused (shutdown_timeout again), all before the grace period's SIGKILL.
    config = ServiceConfig.model_validate(json.loads(env["NODEPROV_SERVE_CONFIG"]["value"]))
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["terminationGracePeriodSeconds"] > pause + 2 * config.shutdown_timeout

    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["tokens"]["secret"]["secretName"] == "nodeprov"
    service = objects["Service"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


def test_the_secret_is_an_example_kubectl_apply_of_the_directory_leaves_alone() -> None:
    [secret] = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "secret.yaml.example").read_text()))
    assert secret["kind"] == "Secret"
    assert set(secret["stringData"]) == {"store-url", "tokens.json"}
    assert json.loads(secret["stringData"]["tokens.json"]) == []
    applied = {
        path.name for path in (DEPLOY / "kubernetes").iterdir() if path.suffix in (".yaml", ".yml", ".json")
    }
    assert applied == {"rbac.yaml", "deployment.yaml", "service.yaml"}
