"""The pod of a node (:func:`pod_manifest`): what it is called, how it is labelled and
annotated, and the spec the API server gets. Pure: nothing here talks to the cluster."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from nodeprov.errors import ConfigError
from nodeprov.node import LABEL_EXPIRES_AT, LABEL_NODE_ID, LABEL_OWNER, LABEL_SESSION_ID, NodeConfig
from nodeprov_kubernetes.settings import KubernetesSettings

__all__ = [
    "ANNOTATION_ENV",
    "ANNOTATION_LABELS",
    "ANNOTATION_TOOLS",
    "CONTAINER",
    "MANAGED_BY",
    "TOOLS_DIR",
    "node_labels",
    "pod_manifest",
    "pod_name",
]

TOOLS_DIR = "/opt/nodeprov/tools"
"""Where the executables of NodeConfig.tools lie in the pod, one per name."""
CONTAINER = "node"
MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_LABELS = "nodeprov.labels"
"""Every label of the node (NodeConfig.resource_labels), exactly, as JSON: pod labels
cannot hold an owner or an expiry time."""
ANNOTATION_ENV = "nodeprov.env"
"""The environment the pod's exec gives a process (the image's and the pod's), as JSON."""
ANNOTATION_TOOLS = "nodeprov.tools"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z"
)


def pod_name(node_id: str) -> str:
    """The name of the node's pod."""
    return f"nodeprov-{node_id}"


def pod_manifest(
    settings: KubernetesSettings,
    config: NodeConfig,
    *,
    name: str,
    labels: Mapping[str, str],
    workdir: str,
    tool_paths: Mapping[str, str],
) -> dict[str, Any]:
    """The pod of the node ``config`` describes, named ``name``, as the API takes it. Its
    main process sleeps; processes come through exec. ``labels`` are the node's (those a
    pod label can hold become pod labels; all of them go in :data:`ANNOTATION_LABELS`);
    ``tool_paths`` says where each tool lies in the pod.

    Raises:
        ConfigError: a tool to copy in is not a file on this machine.
    """
    for tool, path in config.tools.items():
        if not settings.tools_host_path and not os.path.isfile(path):
            raise ConfigError(f"tool {tool!r}: {path} is not a file on this machine")
    pod_labels = {
        **settings.labels,
        **{key: value for key, value in labels.items() if _label_safe(key, value)},
        MANAGED_BY: "nodeprov",
    }
    annotations = {
        **settings.annotations,
        **{key: labels[key] for key in (LABEL_OWNER, LABEL_EXPIRES_AT) if key in labels},
        ANNOTATION_LABELS: json.dumps(dict(labels)),
        ANNOTATION_TOOLS: json.dumps(dict(tool_paths)),
    }
    mounts: list[dict[str, Any]] = [{"name": "workdir", "mountPath": workdir}]
    volumes: list[dict[str, Any]] = [{"name": "workdir", "emptyDir": {}}]
    if config.tools and settings.tools_host_path:
        for index, (tool, path) in enumerate(config.tools.items()):
            volume = f"tool-{index}"
            volumes.append({"name": volume, "hostPath": {"path": path, "type": "File"}})
            mounts.append({"name": volume, "mountPath": tool_paths[tool], "readOnly": True})
    elif config.tools:
        volumes.append({"name": "tools", "emptyDir": {}})
        mounts.append({"name": "tools", "mountPath": TOOLS_DIR})
    security = {
        key: value
        for key, value in {
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_group,
            "runAsNonRoot": settings.run_as_non_root or None,
            "fsGroup": settings.fs_group,
        }.items()
        if value is not None
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # The cluster ends the pod at the node's lifetime, whether or not a control plane is left.
        "activeDeadlineSeconds": None
        if config.ttl is None
        else max(1, math.ceil(config.ttl.total_seconds())),
        "terminationGracePeriodSeconds": settings.termination_grace,
        # The pause process is PID 1 and reaps what the node's processes leave behind.
        "shareProcessNamespace": True,
        "enableServiceLinks": False,
        "automountServiceAccountToken": settings.automount_service_account_token,
        "serviceAccountName": settings.service_account,
        "imagePullSecrets": [{"name": secret} for secret in settings.image_pull_secrets] or None,
        "nodeSelector": settings.node_selector or None,
        "tolerations": [
            {
                "key": toleration.key,
                "operator": toleration.operator,
                "value": toleration.value,
                "effect": toleration.effect,
                "tolerationSeconds": toleration.toleration_seconds,
            }
            for toleration in settings.tolerations
        ]
        or None,
        "hostNetwork": settings.host_network or None,
        "securityContext": security or None,
        "containers": [
            {
                "name": CONTAINER,
                "image": settings.image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": ["sleep", "2147483647"],
                "workingDir": workdir,
                "env": [{"name": key, "value": value} for key, value in config.env.items()] or None,
                "resources": {"requests": settings.requests or None, "limits": settings.limits or None},
                "volumeMounts": mounts,
                "securityContext": {"allowPrivilegeEscalation": False},
            }
        ],
        "volumes": volumes,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": pod_labels, "annotations": annotations},
        "spec": _pruned(spec),
    }


def node_labels(pod: Any) -> dict[str, str]:
    """The node's labels, exactly, as its pod keeps them (see :data:`ANNOTATION_LABELS`)."""
    try:
        labels = json.loads((pod.metadata.annotations or {}).get(ANNOTATION_LABELS) or "{}")
    except ValueError:
        labels = {}
    return {**{LABEL_NODE_ID: pod.metadata.labels[LABEL_NODE_ID], LABEL_SESSION_ID: ""}, **labels}


def _label_safe(key: str, value: str) -> bool:
    return bool(_LABEL_KEY.match(key)) and bool(_LABEL_VALUE.match(value))


def _pruned(value: Any) -> Any:
    """``value`` without the ``None`` entries of its mappings (the API's "not set")."""
    if isinstance(value, dict):
        return {key: _pruned(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value
