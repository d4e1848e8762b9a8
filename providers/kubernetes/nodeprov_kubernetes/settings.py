"""The Kubernetes provider's settings."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from nodeprov.node import ProviderSettings, secret_field

__all__ = ["KubernetesSettings", "Toleration"]


class Toleration(BaseModel):
    """A toleration of every node's pod (as in a pod spec)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(default=None, description="Taint key; empty with 'Exists': every taint.")
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="How the value is matched.")
    value: str | None = Field(default=None, description="Taint value, for 'Equal'.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, ge=0, description="For NoExecute: seconds the pod stays once the taint appears."
    )


class KubernetesSettings(ProviderSettings):
    """Settings of the Kubernetes provider: where the cluster is, and what every node's pod is."""

    # Not the cluster, namespace, placement, identity, security context, labels (network
    # policies select by them), host network or host paths.
    caller_settings: ClassVar[frozenset[str]] = frozenset(
        {
            "image",
            "image_pull_policy",
            "requests",
            "limits",
            "workdir",
            "ready_timeout",
            "unschedulable_timeout",
            "spawn_timeout",
            "termination_grace",
            "eof_grace",
            "term_grace",
        }
    )

    kubeconfig: str | None = Field(
        default=None,
        description="Path of a kubeconfig file. Default: KUBECONFIG, then ~/.kube/config.",
    )
    context: str | None = Field(
        default=None, description="Context of the kubeconfig; default: its current one."
    )
    in_cluster: bool = Field(
        default=False,
        description="Use the service account of the pod the control plane runs in, not a kubeconfig.",
    )
    namespace: str = Field(default="default", description="Namespace of every node's pod.")
    image: str | None = Field(default=None, description="Image of every node; needed to provision.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="When the kubelet pulls the image."
    )
    image_pull_secrets: list[str] = Field(
        default_factory=list, description="Names of secrets (in the namespace) to pull the image with."
    )
    requests: dict[str, str] = Field(
        default_factory=dict, description="Resource requests of the node's container, e.g. {'cpu': '1'}."
    )
    limits: dict[str, str] = Field(
        default_factory=dict, description="Resource limits of the node's container, e.g. {'memory': '4Gi'}."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Labels a cluster node must have to run the pod."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints the pod tolerates.")
    service_account: str | None = Field(
        default=None, description="Service account of the pod; default: the namespace's 'default'."
    )
    automount_service_account_token: bool = Field(
        default=False,
        description="Mount the service account's API token into the pod. Off: an agent on the node "
        "gets no credentials for the cluster unless asked for.",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels of every pod.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations of every pod.")
    run_as_user: int | None = Field(default=None, ge=0, description="User id of the pod's processes.")
    run_as_group: int | None = Field(default=None, ge=0, description="Group id of the pod's processes.")
    run_as_non_root: bool = Field(
        default=False, description="Refuse to start the pod if its processes would run as root."
    )
    fs_group: int | None = Field(default=None, ge=0, description="Group that owns the pod's volumes.")
    host_network: bool = Field(
        default=False, description="Run the pod in its cluster node's network namespace."
    )
    workdir: str = Field(
        default="/workspace",
        description="Working directory in the pod: an emptyDir volume, writable whatever the user.",
    )
    env: dict[str, str] = secret_field(
        default_factory=dict,
        description="Environment of every process on the node; a secret: sent over each exec's stdin, "
        "never part of the pod, so the API server neither shows nor stores it.",
    )
    tools_host_path: bool = Field(
        default=False,
        description="Mount NodeConfig.tools read-only from the cluster node's filesystem (hostPath) "
        "instead of copying them into each pod: for a cluster whose nodes see this machine's paths.",
    )
    ready_timeout: float = Field(
        default=300.0, gt=0, description="Seconds a pod may take to be ready (image pulls included)."
    )
    unschedulable_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a pod may stay unschedulable before the provision fails (raise it for a "
        "cluster autoscaler, which takes minutes to add a machine).",
    )
    spawn_timeout: float = Field(default=60.0, gt=0, description="Seconds a spawn may take to start.")
    termination_grace: int = Field(
        default=2, ge=0, description="Seconds a deleted pod's processes get between SIGTERM and SIGKILL."
    )
    eof_grace: float = Field(default=5.0, ge=0, description="Seconds after stdin EOF before SIGTERM.")
    term_grace: float = Field(default=5.0, ge=0, description="Seconds after SIGTERM before SIGKILL.")
