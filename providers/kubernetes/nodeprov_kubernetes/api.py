"""The API server, through kubernetes-asyncio: clients made from the settings, errors mapped
into nodeprov's tree, and exec websockets that negotiate their protocol.

kubernetes-asyncio runs on asyncio (aiohttp): this provider needs anyio's asyncio backend.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import sniffio
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.stream.ws_client import WsApiClient, get_websocket_url

from nodeprov.errors import ConfigError, NodeGoneError, ProviderError
from nodeprov_kubernetes.exec import PROTOCOLS, ExecChannel
from nodeprov_kubernetes.settings import KubernetesSettings

__all__ = [
    "REQUEST_TIMEOUT",
    "Api",
    "ConflictError",
    "ForbiddenError",
    "UnreachableError",
    "api_error",
    "call",
    "resolved_kubeconfig",
]

T = TypeVar("T")

_DEFAULT_KUBECONFIG = "~/.kube/config"
REQUEST_TIMEOUT = 30.0
"""Seconds one API request may take (an exec's websocket is bounded by its caller)."""
# A connection to an API server that vanished without a word (a network cut, a frozen
# host) is noticed by the kernel within about IDLE + INTERVAL x COUNT seconds.
_KEEPALIVE_IDLE, _KEEPALIVE_INTERVAL, _KEEPALIVE_COUNT = 10, 5, 3


class UnreachableError(ProviderError):
    """The API server could not be reached or answered 5xx/429: worth trying again."""


class ForbiddenError(ProviderError):
    """The API server refused these credentials (401) or this request (403)."""


class ConflictError(ProviderError):
    """The API server answered 409 (the object exists, or changed meanwhile)."""


def _message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    said = body.get("message") if isinstance(body, dict) else None
    return str(said or error.reason or error.body or "no message")


def api_error(error: ApiException, what: str) -> ProviderError | NodeGoneError | ConfigError:
    """``error`` as nodeprov's: 404 :class:`NodeGoneError`, 409 :class:`ConflictError`, 422 (an
    invalid object) :class:`ConfigError`, 401 and 403 :class:`ForbiddenError`, 5xx and 429
    :class:`UnreachableError`, anything else a :class:`ProviderError`. ``what`` says what was
    being done."""
    status, said = int(error.status or 0), _message(error)
    if status == 404:
        return NodeGoneError(f"{what}: not found ({said})")
    if status == 409:
        return ConflictError(f"{what}: {said}")
    if status == 422:
        return ConfigError(f"{what}: the API server refused it: {said}")
    if status in (401, 403):
        return ForbiddenError(f"{what}: the API server refused (HTTP {status}): {said}")
    if status == 429 or status >= 500:
        return UnreachableError(f"{what}: the API server answered HTTP {status}: {said}")
    return ProviderError(f"{what}: HTTP {status}: {said}")


async def call(request: Awaitable[T], what: str) -> T:
    """Await an API request with its errors mapped (see :func:`api_error`)."""
    try:
        return await request
    except ApiException as error:
        raise api_error(error, what) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise UnreachableError(
            f"{what}: the API server is not reachable ({error or type(error).__name__})"
        ) from None


class _ExecClient(WsApiClient):
    """kubernetes-asyncio's websocket client, offering every protocol of :data:`PROTOCOLS`
    (it offers only v4) and leaving the answer on the websocket (``ws.protocol``)."""

    async def request(  # type: ignore[override]
        self, method: str, url: str, query_params: Any = None, headers: Any = None, **_: Any
    ) -> Any:
        query = [
            (key, item)
            for key, value in query_params or ()
            for item in (value if key == "command" and isinstance(value, list) else [value])
        ]
        headers = {k: v for k, v in (headers or {}).items() if k.lower() != "sec-websocket-protocol"}
        return self.rest_client.pool_manager.ws_connect(
            get_websocket_url(f"{url}?{urlencode(query)}"),
            headers=headers,
            protocols=PROTOCOLS,
            max_msg_size=16 * 1024 * 1024,
            autoping=True,
        )


class Api:
    """The provider's API clients, made on first use from the settings (a kubeconfig file
    and context, or the pod's service account)."""

    def __init__(self, settings: KubernetesSettings) -> None:
        self._settings = settings
        self._core: Any = None
        self._exec: Any = None
        self._authorization: Any = None
        self.server = ""

    async def core(self) -> Any:
        """The ``CoreV1Api`` (pods, namespaces), connected on first use.

        Raises:
            ConfigError: no usable kubeconfig or context, or not on asyncio.
        """
        if self._core is None:
            if sniffio.current_async_library() != "asyncio":
                raise ConfigError("the kubernetes provider runs on asyncio (kubernetes-asyncio)")
            configuration = k8s.Configuration()
            if not self._settings.in_cluster:
                # Asked first: kubernetes-asyncio logs a warning of its own for a missing file.
                paths = self._settings.kubeconfig or os.environ.get("KUBECONFIG") or _DEFAULT_KUBECONFIG
                if not _any_file(paths):  # a stat or two
                    raise ConfigError(f"no usable Kubernetes configuration: no kubeconfig at {paths}")
            try:
                if self._settings.in_cluster:
                    k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                else:
                    # A small local file, read once: not worth a worker thread.
                    await k8s_config.load_kube_config(
                        config_file=self._settings.kubeconfig,
                        context=self._settings.context,
                        client_configuration=configuration,
                        persist_config=False,
                    )
            except (ConfigException, OSError, ValueError, KeyError) as error:
                raise ConfigError(f"no usable Kubernetes configuration: {error}") from None
            self.server = str(configuration.host)
            api_client = k8s.ApiClient(configuration)
            self._core = k8s.CoreV1Api(api_client)
            self._authorization = k8s.AuthorizationV1Api(api_client)
            self._exec = k8s.CoreV1Api(_ExecClient(configuration))
        return self._core

    def authorization(self) -> Any:
        """The ``AuthorizationV1Api``, once :meth:`core` has connected."""
        return self._authorization

    async def exec(self, pod: str, namespace: str, argv: Sequence[str]) -> ExecChannel:
        """Start ``argv`` in the pod's first container, its three streams on a websocket.

        Raises:
            NodeGoneError: no such pod, or it does not run (finished, being deleted).
            ProviderError: the API server refused (RBAC: ``create`` on ``pods/exec``) or
                could not be reached (:class:`UnreachableError`).
        """
        await self.core()
        what = f"exec in pod {namespace}/{pod}"
        try:
            connecting = await self._exec.connect_get_namespaced_pod_exec(
                pod,
                namespace,
                command=list(argv),
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
            ws = await connecting
        except aiohttp.WSServerHandshakeError as error:
            raise _handshake_error(error, what) from None
        except ApiException as error:
            raise api_error(error, what) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            raise UnreachableError(f"{what}: the API server is not reachable ({error})") from None
        if ws.protocol not in PROTOCOLS:
            await ws.close()
            raise ProviderError(f"{what}: the API server agreed to none of {', '.join(PROTOCOLS)}")
        _keep_alive(ws)
        return ExecChannel(ws)

    async def aclose(self) -> None:
        """Close the clients' connections; made again on next use."""
        core, exec_api = self._core, self._exec
        self._core = self._exec = self._authorization = None
        for api in (core, exec_api):
            if api is not None:
                await api.api_client.close()


def resolved_kubeconfig(settings: KubernetesSettings) -> KubernetesSettings:
    """``settings`` with the kubeconfig file(s) and context made explicit: the file from
    ``KUBECONFIG`` or ``~/.kube/config``, absolute, and the file's current context (unless
    the settings name them, or the cluster is the one the control plane runs in). Left as
    they are when there is no readable kubeconfig: nothing can be made there anyway."""
    if settings.in_cluster:
        return settings
    paths = settings.kubeconfig or os.environ.get("KUBECONFIG") or _DEFAULT_KUBECONFIG
    files = os.pathsep.join(os.path.abspath(os.path.expanduser(p)) for p in paths.split(os.pathsep) if p)
    context = settings.context
    if context is None and _any_file(files):
        try:
            _, current = k8s_config.list_kube_config_contexts(config_file=files)
        except (ConfigException, OSError, ValueError, KeyError):
            return settings
        context = (current or {}).get("name")
    return settings.model_copy(update={"kubeconfig": files, "context": context})


def _any_file(paths: str) -> bool:
    """Whether one of the ``os.pathsep``-separated ``paths`` is a file."""
    return any(os.path.isfile(os.path.expanduser(path)) for path in paths.split(os.pathsep) if path)


def _handshake_error(error: aiohttp.WSServerHandshakeError, what: str) -> ProviderError | NodeGoneError:
    """A refused exec upgrade. The API server answers a pod that is gone 404, and one whose
    container no longer runs 400 ("container not found", "cannot exec into a container in a
    completed pod"): the node is gone either way."""
    said = error.message or ""
    if error.status in (400, 404):
        return NodeGoneError(f"{what}: {said or 'not found'}")
    if error.status in (401, 403):
        return ForbiddenError(f"{what}: the API server refused (HTTP {error.status}): {said}")
    if error.status == 429 or error.status >= 500:
        return UnreachableError(f"{what}: the API server answered HTTP {error.status}: {said}")
    return ProviderError(f"{what}: HTTP {error.status}: {said}")


def _keep_alive(ws: aiohttp.ClientWebSocketResponse) -> None:
    """TCP keepalive on the exec's connection: the kernel notices a dead API server even
    while nobody reads (a websocket ping's answer waits behind unread output)."""
    transport = ws.get_extra_info("socket")
    if not isinstance(transport, socket.socket):
        return
    transport.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    transport.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, _KEEPALIVE_IDLE)
    transport.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, _KEEPALIVE_INTERVAL)
    transport.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, _KEEPALIVE_COUNT)
