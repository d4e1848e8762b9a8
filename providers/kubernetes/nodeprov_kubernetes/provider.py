from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from typing import Any, ClassVar

import aiohttp
import anyio
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from nodeprov.errors import (
    CommandNotFoundError,
    ConfigError,
    NodeGoneError,
    NodeprovError,
    ProviderError,
    ProvisionError,
    SpawnError,
)
from nodeprov.node import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_OWNER,
    LABEL_SESSION_ID,
    NodeConfig,
    NodeHandle,
    NodeInfo,
    NodeProvider,
    ProviderSettings,
    Requirement,
    Rollback,
)
from nodeprov.preamble import (
    END_RELAY,
    PREAMBLE,
    RELAYED_PREAMBLE,
    REPORT_NO_CWD,
    REPORT_NO_PERL,
    REPORT_NO_RELAY,
    REPORT_NOT_FOUND,
    REPORT_OK,
    SIGNAL_GROUP,
    environment_block,
)
from nodeprov.spawn import HOLDS_PIPE_SCRIPT, SpawnedProcess, SpawnOptions, StopPolicy, encode_arguments
from nodeprov_kubernetes.api import (
    REQUEST_TIMEOUT,
    Api,
    ConflictError,
    ForbiddenError,
    UnreachableError,
    call,
    resolved_kubeconfig,
)
from nodeprov_kubernetes.exec import STDERR, STDOUT, V5, ExecChannel, PodProcess, exit_status
from nodeprov_kubernetes.settings import KubernetesSettings

logger = logging.getLogger("nodeprov.kubernetes")

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
    ("delete", "pods", ""),
    ("create", "pods", "exec"),
]
"""What nodes need of the namespace (see KubernetesProvider.probe)."""
_SCRIPT_TIMEOUT = 30.0
_SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105 - a path
_KILL_TIMEOUT = 10.0
# Every process this user may signal in the pod's (shared) PID namespace, but PID 1 (pause)
# and the shell itself, which kill(2) spares.
_KILL_ALL = "kill -s KILL -- -1 2>/dev/null; exit 0"
_COPY_CHUNK = 1024 * 1024


def pod_name(node_id: str) -> str:
    return f"nodeprov-{node_id}"


class KubernetesNode(NodeHandle):
    """A node that is a pod; see :mod:`nodeprov_kubernetes`."""

    def __init__(
        self,
        *,
        provider: KubernetesProvider,
        pod: str,
        uid: str,
        labels: Mapping[str, str],
        workdir: str,
        pod_env: Mapping[str, str],
        tool_paths: Mapping[str, str],
    ) -> None:
        settings = provider.settings
        super().__init__(
            node_id=labels[LABEL_NODE_ID],
            provider=KubernetesProvider.name,
            labels=labels,
            workdir=workdir,
            base_env={**pod_env, **settings.env},
            tool_paths=tool_paths,
        )
        self.pod = pod
        self.uid = uid
        self.namespace = settings.namespace
        self._provider = provider
        self._stop_policy = StopPolicy(eof_grace=settings.eof_grace, term_grace=settings.term_grace)

    async def _spawn(self, options: SpawnOptions) -> SpawnedProcess:
        # Until the API server has shown it speaks v5, stdin goes through the relay (see
        # nodeprov.preamble); under v5 the relay ends with stdin all the same.
        relayed = self._provider.exec_protocol != V5
        argv = [
            "/bin/sh",
            "-c",
            RELAYED_PREAMBLE if relayed else PREAMBLE,
            "nodeprov",
            options.cwd or self.workdir,
            "",
            *encode_arguments(options.argv),
        ]
        # Shielded, and bounded instead: a cancellation after the exec started would
        # orphan the process. The core kills what a cancelled spawn returns.
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(self._provider.settings.spawn_timeout):
                    channel = await self._exec(argv)
                    self._provider.exec_protocol = channel.protocol
                    try:
                        await channel.send(environment_block({**self.base_env, **options.env}), counted=False)
                        report = await self._handshake(channel, options)
                    except BaseException:
                        await channel.aclose()
                        raise
            except TimeoutError:
                raise SpawnError(f"starting {options.command!r} on node {self.node_id} timed out") from None
            except anyio.BrokenResourceError:
                raise await self._gone_or_lost(None) or NodeGoneError(
                    f"node {self.node_id}: the exec connection was lost"
                ) from None
        pid, start, pipe, relay, relay_start = report
        return PodProcess(
            channel,
            pid=int(pid),
            signal_group=functools.partial(self._signal_group, pid, start),
            lost=self._gone_or_lost,
            stop_policy=self._stop_policy,
            end_relay=functools.partial(self._end_relay, relay, relay_start) if relay else None,
            stdout_held=functools.partial(self._holds_pipe, pipe, pid) if pipe else None,
        )

    async def _exec(self, argv: list[str]) -> ExecChannel:
        try:
            return await self._provider.api.exec(self.pod, self.namespace, argv)
        except NodeGoneError:
            raise NodeGoneError(f"node {self.node_id}: its pod is gone or not running") from None
        except UnreachableError:
            # The kubelet answers an exec into a pod it is deleting HTTP 500: ask the pod.
            gone = await self._pod_gone_if_known()
            if gone is not None:
                raise gone from None
            raise

    async def _pod_gone_if_known(self) -> NodeGoneError | None:
        try:
            return await self._pod_gone()
        except NodeprovError:
            return None

    async def _handshake(self, channel: ExecChannel, options: SpawnOptions) -> list[str]:
        """Read the preamble's report: [pid, start, pipe, relay, relay start]; raise if the
        command could not be started."""
        first = b""
        try:
            while b"\n" not in first and len(first) < 4096:
                first += await channel.receive(STDOUT, 4096)
        except anyio.EndOfStream:
            pass
        line, _, rest = first.partition(b"\n")
        if line.startswith(REPORT_OK):
            channel.push_back(STDOUT, rest)
            return [*line.removeprefix(REPORT_OK).decode().split(" "), "", "", ""][:5]
        where = f"on node {self.node_id}"
        if line == REPORT_NOT_FOUND:
            raise CommandNotFoundError(f"no command {options.command!r} {where}")
        if line == REPORT_NO_CWD:
            raise SpawnError(f"working directory {options.cwd!r} does not exist {where}")
        if line == REPORT_NO_PERL:
            raise SpawnError(f"environment names that are not shell names need perl {where}")
        if line == REPORT_NO_RELAY:
            raise SpawnError(f"no temporary directory for the stdin relay {where} (mktemp -d, mkfifo)")
        # Not even the preamble ran (no /bin/sh in the image): say what the exec said.
        with anyio.move_on_after(2):
            error = await channel.collect(STDERR)
            await channel.exited()
        said = (first + error).decode(errors="replace").strip() or (channel.status or {}).get("message")
        gone: NodeGoneError | None = None
        if channel.status is None:
            gone = await self._gone_or_lost(None)
        else:
            with suppress(NodeprovError):
                gone = await self._pod_gone()
        if gone is not None:
            raise gone
        raise SpawnError(f"cannot start {options.command!r} {where}: {said or 'no output'}")

    async def _gone_or_lost(self, code: int | None) -> NodeGoneError | None:
        """Why a process's exec ended as it did (``code``: its exit status, None if no status
        came): the pod is gone or ending, or (no status) the connection was lost; None when
        the exit status stands."""
        try:
            gone = await self._pod_gone()
        except NodeprovError as error:
            if code is not None:
                return None
            return NodeGoneError(f"node {self.node_id}: the exec connection was lost ({error})")
        if gone is None and code is None:
            return NodeGoneError(f"node {self.node_id}: the exec connection to the API server was lost")
        return gone

    async def _pod_gone(self) -> NodeGoneError | None:
        """Why this node's pod is gone or ending (deleted, finished), or None if it runs.

        Raises:
            ProviderError: the API server could not be asked.
        """
        try:
            pod = await self._provider.read_pod(self.pod)
        except NodeGoneError:
            return NodeGoneError(f"node {self.node_id}: its pod is gone")
        if pod.metadata.uid != self.uid:
            return NodeGoneError(f"node {self.node_id}: its pod is gone")
        if pod.metadata.deletion_timestamp is not None or pod.status.phase in ("Failed", "Succeeded"):
            ending = "being deleted" if pod.metadata.deletion_timestamp else pod.status.phase
            return NodeGoneError(f"node {self.node_id}: its pod has ended ({pod.status.reason or ending})")
        return None

    async def _script(self, script: str, *args: str, seconds: float = _SCRIPT_TIMEOUT) -> tuple[int, bytes]:
        """Run the POSIX sh ``script`` in the pod; (exit status, stdout).

        Raises:
            NodeGoneError: the pod is gone, or the connection was lost.
            ProviderError: no answer in time, or the API server failed.
        """
        try:
            with anyio.fail_after(seconds):
                channel = await self._exec(["/bin/sh", "-c", script, "nodeprov", *args])
                try:
                    out = await channel.collect(STDOUT)
                    await channel.exited()
                finally:
                    await channel.aclose()
        except TimeoutError:
            raise ProviderError(
                f"node {self.node_id}: no answer from its pod in {_SCRIPT_TIMEOUT}s"
            ) from None
        code = None if channel.status is None else exit_status(channel.status)
        if code is None:
            raise NodeGoneError(f"node {self.node_id}: the exec ended without an exit status")
        return code, out

    async def _signal_group(self, pid: str, start: str, signal: str) -> None:
        try:
            await self._script(SIGNAL_GROUP, signal, pid, start)
        except NodeGoneError:
            pass  # the pod is gone, and every process with it
        except ProviderError as error:
            raise SpawnError(f"node {self.node_id}: could not signal process {pid}: {error}") from None

    async def _holds_pipe(self, pipe: str, pid: str) -> bool:
        code, _ = await self._script(HOLDS_PIPE_SCRIPT, pipe, pid)
        return code != 1  # anything but a clear "no": held

    async def _end_relay(self, relay: str, start: str, sent: int) -> None:
        """End the stdin relay once it has passed on ``sent`` bytes (v4: see the module).
        The ending runs on in the pod; this waits only until it has begun."""
        try:
            channel = await self._exec(["/bin/sh", "-c", END_RELAY, "nodeprov", relay, start, str(sent)])
        except NodeprovError:
            return  # the pod or the connection is gone: so is the process's stdin
        try:
            with anyio.move_on_after(_SCRIPT_TIMEOUT):
                await channel.receive(STDOUT, 64)
        except anyio.EndOfStream:
            pass
        finally:
            await channel.aclose()

    async def _destroy(self) -> None:
        # Every process of the pod (but its pause process, PID 1) ended by one exec, then the
        # object removed outright; where that exec cannot run, the graceful way.
        try:
            code, _ = await self._script(_KILL_ALL, seconds=_KILL_TIMEOUT)
        except NodeprovError:
            code = None
        await self._provider.delete_pod(self.pod, self.uid, ended=code == 0)


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
        there (SelfSubjectAccessReview: create, get, list and delete pods, create pods/exec)."""
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
        body = self._manifest(config, name, labels, workdir, tool_paths)
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
                            group.start_soon(_copy_tool, node, tool_paths[tool], path)
        except (ProvisionError, ConfigError):
            raise
        except NodeprovError as error:
            raise ProvisionError(f"cannot start node {config.node_id}: {error}") from None
        return node

    def _manifest(
        self,
        config: NodeConfig,
        name: str,
        labels: Mapping[str, str],
        workdir: str,
        tool_paths: Mapping[str, str],
    ) -> dict[str, Any]:
        """The node's pod. Its main process sleeps; processes come through exec."""
        settings = self.settings
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
            with anyio.fail_after(_SCRIPT_TIMEOUT):
                out = await channel.collect(STDOUT)
                await channel.exited()
        except TimeoutError:
            raise ProvisionError(
                f"pod {name}: reading its environment took over {_SCRIPT_TIMEOUT}s"
            ) from None
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
            NodeInfo(pod.metadata.labels[LABEL_NODE_ID], self.name, _labels(pod), _state(pod))
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
            labels=_labels(pod),
            workdir=container.working_dir or "/",
            pod_env=json.loads(annotations.get(ANNOTATION_ENV) or "{}"),
            tool_paths=json.loads(annotations.get(ANNOTATION_TOOLS) or "{}"),
        )


def _label_safe(key: str, value: str) -> bool:
    return bool(_LABEL_KEY.match(key)) and bool(_LABEL_VALUE.match(value))


def _labels(pod: Any) -> dict[str, str]:
    """The node's labels, exactly (see :data:`ANNOTATION_LABELS`)."""
    try:
        labels = json.loads((pod.metadata.annotations or {}).get(ANNOTATION_LABELS) or "{}")
    except ValueError:
        labels = {}
    return {**{LABEL_NODE_ID: pod.metadata.labels[LABEL_NODE_ID], LABEL_SESSION_ID: ""}, **labels}


def _state(pod: Any) -> str:
    if pod.metadata.deletion_timestamp is not None:
        return "terminating"
    return str(pod.status.phase or "unknown").lower()


def _pruned(value: Any) -> Any:
    """``value`` without the ``None`` entries of its mappings (the API's "not set")."""
    if isinstance(value, dict):
        return {key: _pruned(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


async def _copy_tool(node: KubernetesNode, target: str, path: str) -> None:
    """Copy the executable ``path`` of this machine into the pod, streamed."""

    async def chunks() -> AsyncIterator[bytes]:
        async with await anyio.open_file(path, "rb") as file:
            while chunk := await file.read(_COPY_CHUNK):
                yield chunk

    await node.write_file(target, chunks(), mode=0o755)
