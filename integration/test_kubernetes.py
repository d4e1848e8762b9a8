"""The Kubernetes provider on the test cluster (integration/kubernetes.py): what a node's pod
is made of, why a pod does not start, faults mid-run (the pod deleted, the API server
restarted), the cluster's own deadline for a pod whose control plane died, garbage
collection by lease, and the probe."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.errors import ConfigError, NodeGoneError, ProviderError, ProvisionError
from nodeprov.node import LABEL_EXPIRES_AT, LABEL_NODE_ID, LABEL_OWNER, LABEL_PROVISION, LABEL_SESSION_ID
from nodeprov.runs import Orchestrator
from nodeprov.spawn import SpawnOptions
from nodeprov.store import Store
from nodeprov.testing.conformance import AnyProvider, host_processes_matching, run, unique_marker, wait_until

from .kubernetes import Cluster
from .pods import node_pods, pod_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def provider(kubernetes_cluster: Cluster, base_image: str) -> AsyncIterator[AnyProvider]:
    async with get_provider("kubernetes", **pod_settings(kubernetes_cluster, base_image)) as made:
        yield made


def pod_json(cluster: Cluster, node_id: str) -> dict[str, Any]:
    done = cluster.kubectl("get", "pod", f"nodeprov-{node_id}", "-o", "json")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def no_process(marker: str) -> bool:
    async def gone() -> bool:
        return not host_processes_matching(marker)

    return await wait_until(gone, 30)


async def test_a_pod_carries_labels_annotations_and_deadline_and_never_the_secret(
    kubernetes_cluster: Cluster, base_image: str
) -> None:
    secret = f"secret-{secrets.token_hex(8)}"
    settings = pod_settings(
        kubernetes_cluster,
        base_image,
        env={"NODEPROV_SECRET": secret},
        labels={"team": "infra"},
        annotations={"example.com/cost-centre": "42"},
    )
    config = NodeConfig(
        session_id="review 7: a/b", labels={"purpose": "test", "odd key": "x"}, ttl=timedelta(minutes=30)
    )
    async with get_provider("kubernetes", **settings) as provider, await provider.provision(config) as node:
        pod = await anyio.to_thread.run_sync(pod_json, kubernetes_cluster, node.node_id)
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        assert labels == {
            "app.kubernetes.io/managed-by": "nodeprov",
            LABEL_NODE_ID: node.node_id,
            LABEL_PROVISION: config.provision_mark,
            "team": "infra",
            "purpose": "test",
        }  # the session id and "odd key" are no label values or keys: annotations only
        assert annotations[LABEL_OWNER] == config.owner
        assert datetime.fromisoformat(annotations[LABEL_EXPIRES_AT]) > datetime.now(UTC)
        assert annotations["example.com/cost-centre"] == "42"
        assert json.loads(annotations["nodeprov.labels"]) == dict(node.labels)
        assert node.labels[LABEL_SESSION_ID] == "review 7: a/b"
        assert pod["spec"]["activeDeadlineSeconds"] == 1800
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert secret not in json.dumps(pod)
        assert (await run(node, "printenv", "NODEPROV_SECRET"))[1] == f"{secret}\n".encode()
        attached = await provider.attach(node.node_id)
        assert dict(attached.labels) == dict(node.labels)
        assert (await run(attached, "printenv", "NODEPROV_SECRET"))[1] == f"{secret}\n".encode()
        process = await node.spawn(SpawnOptions("sleep", [unique_marker()], env={"NODEPROV_OTHER": secret}))
        async with process:
            assert not host_processes_matching(secret)  # on no command line on the cluster's machine
        listed = {info.node_id: info for info in await provider.list_nodes()}
        assert listed[node.node_id].labels[LABEL_SESSION_ID] == "review 7: a/b"
        assert listed[node.node_id].state == "running"


async def test_a_pod_that_cannot_be_scheduled_fails_clearly(
    kubernetes_cluster: Cluster, base_image: str
) -> None:
    settings = pod_settings(
        kubernetes_cluster,
        base_image,
        node_selector={"nodeprov.test/nowhere": "true"},
        unschedulable_timeout=2,
    )
    config = NodeConfig()
    async with get_provider("kubernetes", **settings) as provider:
        with anyio.fail_after(30), pytest.raises(ProvisionError, match="cannot be scheduled: 0/1 nodes"):
            await provider.provision(config)
    assert node_pods(kubernetes_cluster, config.node_id) == []


@pytest.mark.parametrize(
    ("image", "policy", "says"),
    [
        ("nodeprov-no-such-image:1", "Never", "ErrImageNeverPull"),
        # A registry on this machine's discard port: nothing answers (no other address is asked).
        ("127.0.0.1:9/nodeprov/no-such-image:1", "IfNotPresent", "ErrImagePull|ImagePullBackOff"),
    ],
    ids=["never-pulled", "pull-refused"],
)
async def test_an_image_that_cannot_be_had_fails_clearly(
    kubernetes_cluster: Cluster, image: str, policy: str, says: str
) -> None:
    settings = pod_settings(kubernetes_cluster, image, image_pull_policy=policy)
    config = NodeConfig()
    async with get_provider("kubernetes", **settings) as provider:
        with anyio.fail_after(60), pytest.raises(ProvisionError, match=says):
            await provider.provision(config)
    assert node_pods(kubernetes_cluster, config.node_id) == []


async def test_a_pod_deleted_mid_run(kubernetes_cluster: Cluster, provider: AnyProvider) -> None:
    node = await provider.provision()
    marker = unique_marker()
    process = await node.spawn(SpawnOptions("sleep", [marker]))
    await anyio.to_thread.run_sync(
        lambda: kubernetes_cluster.kubectl("delete", "pod", f"nodeprov-{node.node_id}", "--wait=false")
    )
    with anyio.fail_after(30), pytest.raises(NodeGoneError, match="pod"):
        await process.wait()
    with pytest.raises(NodeGoneError):
        await node.spawn(SpawnOptions("true"))
    await process.aclose()
    await node.destroy()  # gone already: quiet
    assert await no_process(marker)
    assert node_pods(kubernetes_cluster, node.node_id) == []


async def test_the_api_server_restarted_mid_run(kubernetes_cluster: Cluster, provider: AnyProvider) -> None:
    node = await provider.provision()
    marker = unique_marker()
    process = await node.spawn(SpawnOptions("sleep", [marker]))
    try:
        await anyio.to_thread.run_sync(kubernetes_cluster.stop_apiserver)
        with anyio.fail_after(20), pytest.raises(NodeGoneError, match="connection"):
            await process.wait()  # the exec's connection went with the API server
        with anyio.fail_after(20), pytest.raises(ProviderError, match="not reachable"):
            await node.spawn(SpawnOptions("true"))
        async with anyio.create_task_group() as group:

            async def restart_soon() -> None:
                await anyio.sleep(2)
                await anyio.to_thread.run_sync(kubernetes_cluster.start_apiserver)

            group.start_soon(restart_soon)
            with anyio.fail_after(120):
                await node.destroy()  # asks again until the API server is back
    finally:
        await anyio.to_thread.run_sync(kubernetes_cluster.start_apiserver)
        await process.aclose()
        await node.destroy()
    assert await no_process(marker)
    assert node_pods(kubernetes_cluster, node.node_id) == []


_ABANDONING_CONTROL_PLANE = textwrap.dedent(
    """
    import json, sys, anyio
    from datetime import timedelta
    from nodeprov import NodeConfig, get_provider
    from nodeprov.spawn import SpawnOptions

    async def main():
        request = json.loads(sys.stdin.read())
        provider = get_provider("kubernetes", **request["settings"])
        node = await provider.provision(NodeConfig(ttl=timedelta(seconds=request["ttl"])))
        await node.spawn(SpawnOptions("sleep", [request["marker"]]))
        print(node.node_id, flush=True)
        await anyio.sleep_forever()

    anyio.run(main)
    """
)


async def test_the_cluster_ends_a_pod_whose_control_plane_died(
    kubernetes_cluster: Cluster, base_image: str, provider: AnyProvider
) -> None:
    marker, ttl = unique_marker(), 30  # a busy machine took over 6 s to provision and spawn
    request = {"settings": pod_settings(kubernetes_cluster, base_image), "ttl": ttl, "marker": marker}
    said = b""
    async with await anyio.open_process([sys.executable, "-c", _ABANDONING_CONTROL_PLANE]) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        await child.stdin.send(json.dumps(request).encode())
        await child.stdin.aclose()
        with anyio.fail_after(120), suppress(anyio.EndOfStream):
            while not said.endswith(b"\n"):
                said += await child.stdout.receive()
        failure = b""
        if not said:  # it ended: its traceback says why
            assert child.stderr is not None
            with anyio.fail_after(30):
                failure = b"".join([chunk async for chunk in child.stderr])
        else:  # a spawn returns once exec is asked for; the process shows on the host a little later

            async def running() -> bool:
                return bool(host_processes_matching(marker))

            assert await wait_until(running, 60), "the spawned process never ran in the pod"
        child.send_signal(signal.SIGKILL)  # nobody is left to destroy the node
        await child.wait()
    node_id = said.decode().strip()
    assert node_id, f"the control plane never made its node: {failure.decode(errors='replace')}"
    assert host_processes_matching(marker), "the process died with its control plane"

    def ended() -> bool:
        status = pod_json(kubernetes_cluster, node_id)["status"]
        return (status.get("phase"), status.get("reason")) == ("Failed", "DeadlineExceeded")

    async def ended_by_the_cluster() -> bool:
        return await anyio.to_thread.run_sync(ended)

    assert await wait_until(ended_by_the_cluster, ttl + 60), "activeDeadlineSeconds did not end the pod"
    assert await no_process(marker)
    report = await provider.collect_garbage()  # expired: reaped
    assert node_id in [info.node_id for info in report.reaped]
    assert node_pods(kubernetes_cluster, node_id) == []


async def test_gc_removes_pods_no_live_lease_owns(store: Store, provider: AnyProvider) -> None:
    dead = await store.leases.acquire("a control plane that is gone", ttl=60)
    await store.leases.release(dead.id)
    async with Orchestrator(store) as orchestrator:
        orphan = await provider.provision(NodeConfig(owner=f"lease:{dead.id}"))
        owned = await provider.provision(NodeConfig(owner=orchestrator.owner))
        try:
            report = await orchestrator.collect_garbage(provider)
            ours = {orphan.node_id, owned.node_id}  # (the shared cluster may hold others' pods)
            assert [info.node_id for info in report.reaped if info.node_id in ours] == [orphan.node_id]
            with pytest.raises(NodeGoneError):
                await provider.attach(orphan.node_id)
            assert (await run(owned, "true"))[0] == 0
        finally:
            await owned.destroy()
            await orphan.destroy()


async def test_probe_says_what_is_wrong(kubernetes_cluster: Cluster, base_image: str, tmp_path: Path) -> None:
    async with get_provider("kubernetes", **pod_settings(kubernetes_cluster, base_image)) as provider:
        await provider.probe()
    unreachable = tmp_path / "unreachable-kubeconfig"
    unreachable.write_text(
        kubernetes_cluster.kubeconfig.read_text().replace(kubernetes_cluster.server, "https://127.0.0.1:9")
    )
    for more, error, says in (
        ({"kubeconfig": str(tmp_path / "nowhere")}, ConfigError, "no usable Kubernetes configuration"),
        ({"context": "nodeprov-no-such-context"}, ConfigError, "nodeprov-no-such-context"),
        ({"kubeconfig": str(unreachable)}, ProviderError, "not reachable"),
        ({"namespace": "nodeprov-no-such-namespace"}, ConfigError, "namespace 'nodeprov-no-such-namespace'"),
        ({"kubeconfig": str(kubernetes_cluster.viewer_kubeconfig)}, ConfigError, "may not create pods"),
    ):
        settings = pod_settings(kubernetes_cluster, base_image, **more)
        async with get_provider("kubernetes", **settings) as provider:
            with anyio.fail_after(30), pytest.raises(error, match=says):
                await provider.probe()


async def test_a_pod_of_a_user_that_is_not_root(kubernetes_cluster: Cluster, base_image: str) -> None:
    settings = pod_settings(
        kubernetes_cluster, base_image, run_as_user=4321, run_as_group=4321, run_as_non_root=True
    )
    marker = unique_marker()
    async with get_provider("kubernetes", **settings) as provider:
        node = await provider.provision()
        try:
            assert await run(node, "id", "-u") == (0, b"4321\n", b"")
            await node.write_file("notes/kept.txt", b"written as 4321")  # the workdir is the user's to write
            assert await run(node, "cat", "notes/kept.txt") == (0, b"written as 4321", b"")
            await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & exec sleep {marker}"]))

            async def started() -> bool:  # the spawn returns before its command is exec'd
                return len(host_processes_matching(marker)) == 2

            assert await wait_until(started, 30)
        finally:
            await node.destroy()  # kill -1 as that user ends them all
    assert await no_process(marker)
    assert node_pods(kubernetes_cluster, node.node_id) == []
    root = pod_settings(kubernetes_cluster, base_image, run_as_non_root=True)  # the image runs as root
    refused = "CreateContainerConfigError: container has runAsNonRoot and image will run as root"
    async with get_provider("kubernetes", **root) as provider:
        with anyio.fail_after(60), pytest.raises(ProvisionError, match=refused):
            await provider.provision()
