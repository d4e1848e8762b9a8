"""``nodeprov serve`` deployed on the test cluster from ``deploy/kubernetes/`` and the image
``deploy/image/build.sh`` builds offline: a run started over HTTP from this machine makes a
sibling pod through the kubernetes provider in the serve pod (``in_cluster``: its service
account, its Role) and finishes.

The manifests are applied as they are, but for what the test cluster and this machine's
rules need (see :func:`for_the_test_cluster`): the cluster has no network plugin and no
kube-proxy, so every pod uses the host's network, tolerates the not-ready node and finds the
API server at 127.0.0.1 (its ``kubernetes`` Service's address leads nowhere here); serve
listens on 127.0.0.1 (tests bind loopback only) on a free port, so one replica, not two (two
pods on one host network cannot both have the port); the images are imported, never pulled;
the agents' pods use the serve image, which has the Claude Code CLI."""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
import yaml

from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.pytest_plugin import require_engine
from tests.serving import sse_events

from .kubernetes import Cluster

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "deploy" / "kubernetes"
TOLERATE_NOT_READY = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
_ROLLOUT_TIMEOUT = 180
_RUN_TIMEOUT = 180


@pytest.fixture(scope="session")
def serve_image(base_image: str) -> str:
    """``deploy/image/build.sh``'s image on the test base image (built once per content)."""
    done = subprocess.run(
        [str(REPO / "deploy" / "image" / "build.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={**os.environ, "BASE_IMAGE": base_image, "PYTHON": sys.executable},
    )
    if done.returncode != 0:
        require_engine("the serve image (deploy/image/build.sh)", False, done.stderr.strip()[-3000:])
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def cluster_with_serve_image(kubernetes_cluster: Cluster, serve_image: str) -> Cluster:
    kubernetes_cluster.import_docker_image(serve_image)
    return kubernetes_cluster


@pytest.fixture
def namespace(cluster_with_serve_image: Cluster) -> Iterator[str]:
    """A namespace of the test's own, deleted (and everything in it) after it."""
    name = f"nodeprov-serve-{secrets.token_hex(3)}"
    cluster_with_serve_image.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster_with_serve_image.kubectl("delete", "namespace", name, "--timeout=120s", timeout=150)


def manifests() -> list[dict[str, Any]]:
    """Every object of ``deploy/kubernetes/``: what ``kubectl apply -f`` applies there, and the
    Secret of ``secret.yaml.example``."""
    files = [*sorted(MANIFESTS.glob("*.yaml")), MANIFESTS / "secret.yaml.example"]
    found: list[dict[str, Any]] = [
        doc for file in files for doc in yaml.safe_load_all(file.read_text()) if doc
    ]
    return found


def for_the_test_cluster(
    objects: list[dict[str, Any]], *, image: str, port: int, cluster: Cluster, store: str, tokens: str
) -> list[dict[str, Any]]:
    """The manifests with the test's values and the test cluster's needs (see the module)."""
    adapted: list[dict[str, Any]] = json.loads(json.dumps(objects))
    by_kind = {item["kind"]: item for item in adapted}
    assert set(by_kind) == {"ServiceAccount", "Role", "RoleBinding", "Secret", "Deployment", "Service"}
    by_kind["Secret"]["stringData"] = {"store-url": store, "tokens.json": tokens}

    deployment = by_kind["Deployment"]
    assert deployment["spec"]["replicas"] == 2  # as shipped; one here (see the module)
    deployment["spec"]["replicas"] = 1
    pod = deployment["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["tolerations"] = TOLERATE_NOT_READY
    [container] = pod["containers"]
    container["image"] = image
    container["imagePullPolicy"] = "Never"
    args = container["args"]
    assert "--host=0.0.0.0" in args
    assert "--port=8700" in args
    container["args"] = [
        {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8700": f"--port={port}"}.get(arg, arg) for arg in args
    ]
    container["ports"][0]["containerPort"] = port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container[probe]["httpGet"]["host"] = "127.0.0.1"  # not the pod's address: the host's
    env = {item["name"]: item for item in container["env"]}
    assert env["NODEPROV_KUBERNETES_IN_CLUSTER"]["value"] == "true"
    # The test's scripted model is on this machine: the runs' agents are pointed at it.
    config = json.loads(env["NODEPROV_SERVE_CONFIG"]["value"]) | {"allow_env": ["ANTHROPIC_BASE_URL"]}
    overrides = {
        "NODEPROV_SERVE_CONFIG": json.dumps(config),
        "NODEPROV_KUBERNETES_IMAGE": image,
        "NODEPROV_KUBERNETES_IMAGE_PULL_POLICY": "Never",
        "NODEPROV_KUBERNETES_HOST_NETWORK": "true",
        "NODEPROV_KUBERNETES_TOLERATIONS": json.dumps(TOLERATE_NOT_READY),
        "NODEPROV_KUBERNETES_READY_TIMEOUT": "60",
        # Where in_cluster finds the API server: the kubelet sets the `kubernetes` Service's
        # address, which only kube-proxy would lead to the API server on 127.0.0.1.
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(cluster.apiserver_port),
    }
    for name, value in overrides.items():
        env[name] = {"name": name, "value": value}
    container["env"] = list(env.values())
    return adapted


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Kubectl:
    """The admin's kubectl in ``namespace``, off the event loop."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    async def __call__(self, *args: str, stdin: bytes | None = None, check: bool = True) -> str:
        call = functools.partial(
            self.cluster.kubectl, "-n", self.namespace, *args, input=stdin, check=check, timeout=240
        )
        done = await anyio.to_thread.run_sync(call)
        return done.stdout.decode()

    async def json(self, *args: str) -> Any:
        return json.loads(await self("get", *args, "-o", "json"))


class Events:
    """A run's events as they come (:func:`following` fills it)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self._came = anyio.Event()

    def add(self, event: dict[str, Any]) -> None:
        self.seen.append(event)
        self._came.set()
        self._came = anyio.Event()

    async def first(self, kind: str) -> dict[str, Any]:
        """The first event of type ``kind``, once it has come (an AssertionError, with the
        events, if the run finishes without one)."""
        with anyio.fail_after(_RUN_TIMEOUT):
            while not (found := [event for event in self.seen if event["type"] == kind]):
                assert not [e for e in self.seen if e["type"] == "run.finished"], json.dumps(self.seen)
                await self._came.wait()
        return found[0]


@asynccontextmanager
async def following(client: httpx.AsyncClient, run_id: str) -> AsyncIterator[Events]:
    """The run's events, read while the block runs and until its ``run.finished``."""
    events = Events()

    async def follow() -> None:
        async with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=_RUN_TIMEOUT) as response:
            assert response.status_code == 200, await response.aread()
            async for _name, _id, data in sse_events(response):
                events.add(data)

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        yield events
        await events.first("run.finished")
        tg.cancel_scope.cancel()


async def test_serve_in_a_pod_runs_an_agent_in_a_sibling_pod(
    cluster_with_serve_image: Cluster,
    serve_image: str,
    namespace: str,
    postgres_url: str,
    scripted_model: ScriptedModel,
    tmp_path: Path,
) -> None:
    cluster = cluster_with_serve_image
    kubectl = Kubectl(cluster, namespace)
    tokens = tmp_path / "tokens.json"
    made = await anyio.run_process(
        [
            sys.executable,
            "-m",
            "nodeprov",
            "tokens",
            "create",
            "test",
            "--scope",
            "runs",
            "--file",
            str(tokens),
        ]
    )
    token = made.stdout.decode().strip()
    port = _free_port()
    objects = for_the_test_cluster(
        manifests(),
        image=serve_image,
        port=port,
        cluster=cluster,
        store=postgres_url,
        tokens=tokens.read_text(),
    )
    serve_pod = await deploy(kubectl, objects)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as anonymous:
        assert (await anonymous.get("/readyz")).json() == {"status": "ready"}
        assert (await anonymous.get("/v1/runs")).status_code == 401  # tokens exist: none is open
    # The tokens file's token is in the store; more are made from a replica, as the README says.
    admin = ("exec", "deploy/nodeprov", "--", "nodeprov")
    listed = [json.loads(line) for line in (await kubectl(*admin, "tokens", "ls", "--json")).splitlines()]
    assert [(t["name"], t["scopes"], t["revoked_at"]) for t in listed] == [("test", ["runs"], None)]
    reader = json.loads(await kubectl(*admin, "tokens", "create", "reader", "--scope", "read", "--json"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        read = await client.get("/v1/runs", headers={"Authorization": f"Bearer {reader['token']}"})
        assert read.json() == []
    bearer = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=bearer, timeout=30) as client:
        # The provider's probe from the pod: the API server takes its service account's
        # token, and its Role allows what nodes need (a SelfSubjectAccessReview each).
        provider = (await client.get("/v1/providers/kubernetes")).json()
        assert (provider["ready"], provider["error"]) == (True, ""), provider
        assert [p["name"] for p in (await client.get("/v1/providers")).json()] == ["kubernetes"]
        events = await run_in_a_sibling_pod(client, kubectl, scripted_model, serve_image)

    tool_result = scripted_model.agent_requests[1].messages[-1]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert "ran here" in json.dumps(tool_result["content"])  # what the command printed on the node
    messages = [json.dumps(event["message"]) for event in events.seen if event["type"] == "agent.message"]
    assert any("finished in a sibling pod" in message for message in messages)
    [released] = [event for event in events.seen if event["type"] == "node.released"]
    assert released["kept"] is False
    assert await kubectl("get", "pods", "-l", f"nodeprov.node-id={released['node_id']}", "-o", "name") == ""

    log = await stop(kubectl, serve_pod)
    for secret in (token, reader["token"]):
        assert secret.removeprefix("npt_") not in log
    assert postgres_url not in log


async def deploy(kubectl: Kubectl, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply ``objects``; the serve pod once the deployment has rolled out."""
    listed = {"apiVersion": "v1", "kind": "List", "items": objects}
    await kubectl("apply", "-f", "-", stdin=json.dumps(listed).encode())
    waited = ("rollout", "status", "deployment/nodeprov", f"--timeout={_ROLLOUT_TIMEOUT}s")
    rolled = await kubectl(*waited, check=False)
    pods = await kubectl.json("pods", "-l", "app.kubernetes.io/component=serve")
    assert "successfully rolled out" in rolled, (rolled, await _diagnose(kubectl, pods))
    [pod] = pods["items"]
    assert pod["spec"]["serviceAccountName"] == "nodeprov"
    endpoints = await kubectl.json("endpoints", "nodeprov")  # the Service finds the ready pod
    [subset] = endpoints["subsets"]
    assert [address["targetRef"]["name"] for address in subset["addresses"]] == [pod["metadata"]["name"]]
    return dict(pod)


async def run_in_a_sibling_pod(
    client: httpx.AsyncClient, kubectl: Kubectl, model: ScriptedModel, image: str
) -> Events:
    """Start a run on the kubernetes provider over HTTP; see its pod while it runs there; its
    events once it has finished."""
    command = "echo ran here > here.txt; while [ ! -e go ]; do sleep 0.1; done; cat here.txt"
    model.extend([ToolUse("Bash", {"command": command}), Text("finished in a sibling pod")])
    body = {
        "prompt": "say where you run",
        "provider": "kubernetes",
        "agent": "claude",
        "model": "scripted",
        "env": model.agent_env(),
        "node": {"ttl_seconds": 600},
    }
    started = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": secrets.token_hex(8)})
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    async with following(client, run_id) as events:
        ready = await events.first("node.ready")
        [pod] = (await kubectl.json("pods", "-l", f"nodeprov.node-id={ready['node_id']}"))["items"]
        assert pod["metadata"]["namespace"] == kubectl.namespace  # beside the serve pod
        assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "nodeprov"
        assert pod["spec"]["containers"][0]["image"] == image
        assert pod["spec"]["automountServiceAccountToken"] is False  # the agent gets no credentials
        name = pod["metadata"]["name"]
        with anyio.fail_after(_RUN_TIMEOUT):  # the command runs in that pod, and waits for this
            while "ran here" not in await kubectl("exec", name, "--", "cat", "here.txt", check=False):  # noqa: ASYNC110 - in the pod
                await anyio.sleep(0.2)
        await kubectl("exec", name, "--", "touch", "go")
    finished = await events.first("run.finished")
    assert (finished["outcome"], finished["error"]) == ("ok", None), events.seen
    run = (await client.get(f"/v1/runs/{run_id}")).json()
    assert (run["state"], run["outcome"], run["node_id"]) == ("finished", "ok", ready["node_id"])
    return events


async def stop(kubectl: Kubectl, pod: dict[str, Any]) -> str:
    """Delete the deployment: its pod's serve gets SIGTERM (through tini) after the preStop
    pause and stops at once, long before the grace period's SIGKILL. The pod's whole log."""
    name = pod["metadata"]["name"]
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    cluster = kubectl.cluster
    argv = [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "-n", kubectl.namespace]
    async with await anyio.open_process([*argv, "logs", "--follow", name]) as logs:  # until serve exits
        assert logs.stdout is not None
        await kubectl("delete", "deployment", "nodeprov", "--wait=false")
        began = anyio.current_time()
        with anyio.fail_after(grace):
            log = b"".join([chunk async for chunk in logs.stdout]).decode()
            await logs.wait()
        stopped = anyio.current_time() - began
    # Gone, not terminating: a namespace deleted with a pod in it waits out the pod's grace.
    await kubectl("wait", "--for=delete", f"pod/{name}", f"--timeout={grace}s", check=False)
    assert await kubectl("get", "pods", "-o", "name") == ""
    print(f"serve stopped {stopped:.1f} s after the deployment's deletion (a 5 s preStop pause first)")
    assert stopped < grace / 2, stopped
    assert "listening on http://127.0.0.1:" in log, log
    assert "Traceback" not in log, log
    return log


async def _diagnose(kubectl: Kubectl, pods: dict[str, Any]) -> str:
    """What the serve pods say: their status and their logs' ends."""
    said = [json.dumps([p["status"] for p in pods["items"]], indent=1)[-3000:]]
    for pod in pods["items"]:
        said.append(await kubectl("logs", pod["metadata"]["name"], "--tail=40", check=False))
    said.append(await kubectl("get", "events", check=False))
    return "\n".join(said)
