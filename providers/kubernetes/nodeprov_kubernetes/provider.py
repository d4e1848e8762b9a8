"""The Kubernetes provider: :class:`KubernetesProvider` makes, finds and deletes the pods
that are nodes (see :mod:`nodeprov_kubernetes`); the pod's spec is :mod:`~.manifest`'s, the
node handle :mod:`~.node`'s."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
from typing import Any, ClassVar

import aiohttp
import anyio
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from nodeprov.errors import ConfigError, NodeGoneError, NodeprovError, ProvisionError
from nodeprov.exec import STDOUT
from nodeprov.node import (
    LABEL_NODE_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
)
from nodeprov_kubernetes.api import (
    REQUEST_TIMEOUT,
    Api,
    ConflictError,
    ForbiddenError,
    UnreachableError,
    call,
    resolved_kubeconfig,
)
from nodeprov_kubernetes.exec import exit_status
from nodeprov_kubernetes.manifest import (
    ANNOTATION_ENV,
    ANNOTATION_LABELS,
    ANNOTATION_TOOLS,
    CONTAINER,
    MANAGED_BY,
    TOOLS_DIR,
    node_labels,
    pod_manifest,
    pod_name,
)
from nodeprov_kubernetes.node import SCRIPT_TIMEOUT, KubernetesNode, copy_tool
from nodeprov_kubernetes.settings import KubernetesSettings

__all__ = ["KubernetesProvider"]

logger = logging.getLogger("nodeprov.kubernetes")

_IMAGE_FAILURES = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}
_NEEDED = [
    ("create", "pods", ""),
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),  # waiting for a pod to be ready
    ("patch", "pods", ""),  # the pod's environment, in an annotation
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
    ("get", "pods", "exec"),  # the websocket's upgrade is a GET (create too from Kubernetes 1.35)
]
"""What nodes need of the namespace (see KubernetesProvider.probe; deploy/kubernetes/rbac.yaml
grants exactly this)."""
_SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 - a path


class KubernetesProvider(NodeProvider[KubernetesSettings]):
    """Nodes as pods; see :mod:`nodeprov_kubernetes`."""

    name: ClassVar[str] = "kubernetes"
    settings_model: ClassVar[type[ProviderSettings]] = KubernetesSettings

    def __init__(self, settings: KubernetesSettings) -> None:
        super().__init__(settings)
        self.api = Api(settings)
        self.exec_protocol = ""
        """What the API server's exec spoke last ("" before the first exec)."""

    def resolved_settings(self) -> KubernetesSettings:
        """The kubeconfig file and context made explicit (see :func:`resolved_kubeconfig`)."""
        return resolved_kubeconfig(self.settings)

    @classmethod
    def requirements(cls) -> list[Requirement]:
        # Where kubernetes-asyncio looks, and the setting the CLI reads from the environment.
        if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(_SERVICE_ACCOUNT_TOKEN):
            return [Requirement("Kubernetes credentials", True, "in a pod: its service account")]
        paths = [
            os.environ.get("NODEPROV_KUBERNETES_KUBECONFIG", ""),
            *os.environ.get("KUBECONFIG", "").split(os.pathsep),
            os.path.expanduser("~/.kube/config"),
        ]
        found = next((path for path in paths if path and os.path.isfile(path)), None)
        detail = found or "none: set kubeconfig (NODEPROV_KUBERNETES_KUBECONFIG), KUBECONFIG or ~/.kube"
        return [Requirement("kubeconfig", found is not None, detail)]

    async def probe(self) -> None:
        """Asks whether the API server answers (the kubeconfig's server and credentials),
        whether the namespace exists, and whether these credentials may do what nodes need
        there (SelfSubjectAccessReview: create, get, list, watch, patch and delete pods,
        create and get pods/exec)."""
        core = await self.api.core()
        namespace = self.settings.namespace
        where = f"{self.api.server}, namespace {namespace!r}"
        try:
            await call(core.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT), where)
        except NodeGoneError:
            raise ConfigError(f"namespace {namespace!r} does not exist on {self.api.server}") from None
        except ForbiddenError:
            pass  # may not read namespaces: the reviews below tell what matters
        authorization = self.api.authorization()
        for verb, resource, subresource in _NEEDED:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "namespace": namespace,
                        "verb": verb,
                        "resource": resource,
                        "subresource": subresource,
                    }
                },
            }
            answer = await call(
                authorization.create_self_subject_access_review(review, _request_timeout=REQUEST_TIMEOUT),
                f"{where}: asking what these credentials may do",
            )
            if not answer.status.allowed:
                what = f"{resource}/{subresource}" if subresource else resource
                raise ConfigError(f"{where}: these credentials may not {verb} {what} (RBAC)")

    async def aclose(self) -> None:
        await self.api.aclose()

    async def read_pod(self, name: str) -> Any:
        """The pod ``name``; :class:`NodeGoneError` when there is none."""
        core = await self.api.core()
        namespace = self.settings.namespace
        return await call(
            core.read_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT),
            f"reading pod {namespace}/{name}",
        )

    async def _provision(self, config: NodeConfig) -> NodeHandle:
        settings = self.settings
        if not settings.image:
            raise ConfigError("the kubernetes provider needs an image (setting 'image')")
        core = await self.api.core()
        name, namespace = pod_name(config.node_id), settings.namespace
        labels = config.resource_labels()
        workdir = config.workdir or settings.workdir
        tool_paths = {tool: f"{TOOLS_DIR}/{tool}" for tool in config.tools}
        body = pod_manifest(
            settings, config, name=name, labels=labels, workdir=workdir, tool_paths=tool_paths
        )
        try:
            async with Rollback() as rollback:
                # Shielded: a create cut short here may still happen on the server, after the
                # rollback's delete.
                with anyio.CancelScope(shield=True):
                    try:
                        created = await call(
                            core.create_namespaced_pod(namespace, body, _request_timeout=REQUEST_TIMEOUT),
                            f"creating pod {namespace}/{name}",
                        )
                        uid = created.metadata.uid
                    except ConflictError:
                        uid = await self._adopt(name, config)
                # By uid: the pod this provision made, never another of that name.
                rollback.push(functools.partial(self.delete_pod, name, uid))
                pod = await self._ready(name, config.node_id)
                pod_env = await self._pod_environment(name)
                await call(
                    core.patch_namespaced_pod(
                        name,
                        namespace,
                        {"metadata": {"annotations": {ANNOTATION_ENV: json.dumps(pod_env)}}},
                        _request_timeout=REQUEST_TIMEOUT,
                    ),
                    f"annotating pod {namespace}/{name}",
                )
                node = KubernetesNode(
                    provider=self,
                    pod=name,
                    uid=pod.metadata.uid,
                    labels=labels,
                    workdir=workdir,
                    pod_env=pod_env,
                    tool_paths=tool_paths,
                )
                if config.tools and not settings.tools_host_path:
                    async with anyio.create_task_group() as group:
                        for tool, path in config.tools.items():
                            group.start_soon(copy_tool, node, tool_paths[tool], path)
        except (ProvisionError, ConfigError):
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot start node {config.node_id}: {error}") from None
        return node

    async def _adopt(self, name: str, config: NodeConfig) -> str:
        """A pod of this name exists: adopted (its uid returned) if an earlier attempt of
        this provision made it (its labels carry the provision's mark), else refused and
        left as it is."""
        pod = await self.read_pod(name)
        labels = json.loads((pod.metadata.annotations or {}).get(ANNOTATION_LABELS) or "{}")
        if not config.made_by_this(labels):
            raise ProvisionError(f"node {config.node_id} exists already (pod {name})")
        logger.info("adopting node %s, made by an earlier attempt of this provision", config.node_id)
        return str(pod.metadata.uid)

    async def _ready(self, name: str, node_id: str) -> Any:
        """Wait for the pod to be ready, watching it; fail early, saying why, when it cannot be."""
        settings = self.settings
        started = time.monotonic()
        unschedulable_since: float | None = None
        pod = await self.read_pod(name)
        while True:
            status = pod.status
            conditions = {condition.type: condition for condition in status.conditions or ()}
            ready = conditions.get("Ready")
            if status.phase == "Running" and ready is not None and ready.status == "True":
                return pod
            waiting = [
                container.state.waiting
                for container in status.container_statuses or ()
                if container.state is not None and container.state.waiting is not None
            ]
            if status.phase in ("Failed", "Succeeded") or pod.metadata.deletion_timestamp is not None:
                why = (
                    status.reason or status.message or ("being deleted" if status.phase == "Running" else "")
                )
                raise ProvisionError(
                    f"node {node_id}: its pod {name} ended while starting ({status.phase}: {why})"
                )
            for state in waiting:
                if state.reason in _IMAGE_FAILURES:
                    said = state.message or settings.image
                    raise ProvisionError(f"node {node_id}: pod {name} cannot start: {state.reason}: {said}")
            scheduled = conditions.get("PodScheduled")
            now = time.monotonic()
            if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
                unschedulable_since = unschedulable_since or now
                if now - unschedulable_since >= settings.unschedulable_timeout:
                    raise ProvisionError(
                        f"node {node_id}: pod {name} cannot be scheduled: {scheduled.message} "
                        f"(for {settings.unschedulable_timeout:g}s)"
                    )
            else:
                unschedulable_since = None
            if now - started >= settings.ready_timeout:
                why = "; ".join(f"{state.reason}: {state.message}" for state in waiting) or status.phase
                raise ProvisionError(
                    f"node {node_id}: pod {name} was not ready in {settings.ready_timeout:g}s ({why})"
                )
            # Until it changes, or a deadline above comes due.
            due = [started + settings.ready_timeout]
            if unschedulable_since is not None:
                due.append(unschedulable_since + settings.unschedulable_timeout)
            pod = await self._changed(pod, max(0.1, min(due) - now))

    async def _changed(self, pod: Any, seconds: float) -> Any:
        """The pod once it has changed (watched from its resource version), or as it is after
        ``seconds``.

        Raises:
            NodeGoneError: the pod was deleted.
        """
        core = await self.api.core()
        name = pod.metadata.name
        watching = watch.Watch().stream(
            core.list_namespaced_pod,
            self.settings.namespace,
            field_selector=f"metadata.name={name}",
            resource_version=pod.metadata.resource_version,
            timeout_seconds=max(1, math.ceil(seconds)),
            _request_timeout=seconds + REQUEST_TIMEOUT,
        )
        with anyio.move_on_after(seconds):
            try:
                async with watching:
                    async for event in watching:
                        if event["type"] == "DELETED":
                            raise NodeGoneError(f"pod {name} was deleted")
                        if event["type"] in ("ADDED", "MODIFIED"):
                            return event["object"]
            except ApiException as error:  # 410: the version is too old to watch from
                logger.debug("watching pod %s: %s; reading it", name, error)
            except (aiohttp.ClientError, OSError) as error:
                logger.debug("watching pod %s: %s; reading it", name, error)
        return await self.read_pod(name)

    async def _pod_environment(self, name: str) -> dict[str, str]:
        """The environment the pod's exec gives a process: the image's and the pod's."""
        channel = await self.api.exec(name, self.settings.namespace, ["cat", "/proc/self/environ"])
        try:
            with anyio.fail_after(SCRIPT_TIMEOUT):
                out = await channel.collect(STDOUT)
                await channel.exited()
        except TimeoutError:
            raise ProvisionError(f"pod {name}: reading its environment took over {SCRIPT_TIMEOUT}s") from None
        finally:
            await channel.aclose()
        if channel.status is None or exit_status(channel.status) != 0:
            raise ProvisionError(
                f"pod {name}: cannot read its environment ({(channel.status or {}).get('message')})"
            )
        return dict(
            item.split("=", 1) for item in out.decode(errors="surrogateescape").split("\0") if "=" in item
        )

    async def delete_pod(self, name: str, uid: str | None, *, ended: bool = False) -> None:
        """Delete the pod (only while it has ``uid``, when given) and return once it is gone.

        Gracefully (``termination_grace``) unless its processes have ``ended`` already; once
        the kubelet reports that no container of it runs, the object is removed outright
        (grace 0): the API server would otherwise keep it until the kubelet's next status
        sync, up to ten seconds later, though nothing of it runs any more. An unreachable
        API server is asked again until the caller's deadline."""
        if not ended and await self._delete(name, uid, self.settings.termination_grace):
            return
        delay = 0.05
        while not ended:
            pod = await self._read_retrying(name)
            if pod is None or (uid is not None and pod.metadata.uid != uid):
                return
            if not any(status.state.running for status in pod.status.container_statuses or ()):
                uid = pod.metadata.uid
                break
            await anyio.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        if await self._delete(name, uid, 0):
            return
        # The API server removes it at once; a read confirms (the API has no event to wait on).
        while (pod := await self._read_retrying(name)) is not None and pod.metadata.uid == uid:  # noqa: ASYNC110
            await anyio.sleep(delay)

    async def _delete(self, name: str, uid: str | None, grace: int) -> bool:
        """Ask for the pod's deletion; whether it is gone already (or has another uid)."""
        core = await self.api.core()
        namespace = self.settings.namespace
        options: dict[str, Any] = {"gracePeriodSeconds": grace, "propagationPolicy": "Background"}
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        delay = 0.05
        while True:
            try:
                deleting = core.delete_namespaced_pod(
                    name, namespace, body=options, _request_timeout=REQUEST_TIMEOUT
                )
                await call(deleting, f"deleting pod {namespace}/{name}")
            except (NodeGoneError, ConflictError):  # 409: the uid differs, not this node's pod
                return True
            except UnreachableError as error:
                logger.debug("%s; asking again", error)  # until the caller's deadline
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                return False

    async def _read_retrying(self, name: str) -> Any:
        """The pod, or None when it is gone; an unreachable API server is asked again."""
        delay = 0.05
        while True:
            try:
                return await self.read_pod(name)
            except NodeGoneError:
                return None
            except UnreachableError as error:
                logger.debug("%s; asking again", error)
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def list_nodes(self) -> list[NodeInfo]:
        core = await self.api.core()
        namespace = self.settings.namespace
        pods = await call(
            core.list_namespaced_pod(
                namespace,
                label_selector=f"{MANAGED_BY}=nodeprov,{LABEL_NODE_ID}",
                _request_timeout=REQUEST_TIMEOUT,
            ),
            f"listing pods in namespace {namespace}",
        )
        return [
            NodeInfo(pod.metadata.labels[LABEL_NODE_ID], self.name, node_labels(pod), _state(pod))
            for pod in pods.items
        ]

    async def attach(self, node_id: str) -> NodeHandle:
        name = pod_name(node_id)
        try:
            pod = await self.read_pod(name)
        except NodeGoneError:
            raise NodeGoneError(
                f"no kubernetes node {node_id} in namespace {self.settings.namespace}"
            ) from None
        if (pod.metadata.labels or {}).get(LABEL_NODE_ID) != node_id:
            raise NodeGoneError(f"pod {name} is not node {node_id}'s")
        annotations = pod.metadata.annotations or {}
        container = next((c for c in pod.spec.containers if c.name == CONTAINER), pod.spec.containers[0])
        return KubernetesNode(
            provider=self,
            pod=name,
            uid=pod.metadata.uid,
            labels=node_labels(pod),
            workdir=container.working_dir or "/",
            pod_env=json.loads(annotations.get(ANNOTATION_ENV) or "{}"),
            tool_paths=json.loads(annotations.get(ANNOTATION_TOOLS) or "{}"),
        )


def _state(pod: Any) -> str:
    if pod.metadata.deletion_timestamp is not None:
        return "terminating"
    return str(pod.status.phase or "unknown").lower()
