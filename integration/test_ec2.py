"""The EC2 provider against moto's EC2 server (each instance reached at a real sshd): what
a launch carries, the clean-up, a retry after a crash, garbage collection by lease."""

from __future__ import annotations

import base64
import json
import re
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.to_thread
import pytest

from nodeprov import NodeConfig, NodeHandle, get_provider
from nodeprov.errors import ConfigError
from nodeprov.node import LABEL_EXPIRES_AT, LABEL_NODE_ID, NodeProvider
from nodeprov.runs import NodeReady, NodeReleased, Orchestrator
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import run, unique_marker

from .agents import require_claude_cli, run_options, until_tool_runs
from .ec2 import ec2_client, ec2_settings, live_instances, running_moto, terminate_on_host
from .sshd import Sshd, free_port, running_sshd

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with running_moto() as endpoint:
        yield endpoint


@pytest.fixture
async def provider(moto: str, sshd: Sshd) -> AsyncIterator[NodeProvider[Any]]:
    async with get_provider("ec2", **ec2_settings(moto, sshd)) as made:
        yield made


async def _live(moto: str, node_id: str) -> list[str]:
    return await anyio.to_thread.run_sync(live_instances, moto, node_id)


async def test_a_launch_carries_tags_lifetime_key_and_group_and_destroy_removes_them(
    moto: str, provider: NodeProvider[Any]
) -> None:
    ec2 = ec2_client(moto)
    node = await provider.provision(NodeConfig(labels={"team": "qa"}))
    name = f"nodeprov-{node.node_id}"
    try:
        (instance_id,) = await _live(moto, node.node_id)
        described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        tags = {tag["Key"]: tag["Value"] for tag in described["Tags"]}
        assert tags[LABEL_NODE_ID] == node.node_id
        assert tags["team"] == "qa"
        assert described["KeyName"] == name
        volumes = ec2.describe_volumes(Filters=[{"Name": f"tag:{LABEL_NODE_ID}", "Values": [node.node_id]}])
        assert len(volumes["Volumes"]) == 1  # the root volume carries the tags too
        user_data = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        script = base64.b64decode(user_data["UserData"]["Value"]).decode()
        deadline = int(datetime.fromisoformat(tags[LABEL_EXPIRES_AT]).timestamp())
        assert script.startswith("#cloud-config\nbootcmd:")  # every boot, not the first only
        assert f"({deadline} - $(date +%s)) / 60" in script
        assert 'shutdown -h "+$left"' in script
        behaviour = ec2.describe_instance_attribute(
            InstanceId=instance_id, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        (group,) = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])[
            "SecurityGroups"
        ]
        assert [(p["FromPort"], [r["CidrIp"] for r in p["IpRanges"]]) for p in group["IpPermissions"]] == [
            (22, ["198.51.100.7/32"])
        ]
        assert (await run(node, "echo", "over ssh")) == (0, b"over ssh\n", b"")
    finally:
        await node.destroy()
    assert await _live(moto, node.node_id) == []
    assert ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])["KeyPairs"] == []
    assert (
        ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])["SecurityGroups"]
        == []
    )
    await terminate_on_host(node.node_id)


async def test_a_retry_after_a_crash_adopts_the_instance(moto: str, sshd: Sshd) -> None:
    """What a control plane killed right after RunInstances leaves (an instance with the
    node's tags, nothing else), made with boto3; then the retry."""
    ec2 = ec2_client(moto)
    settings = ec2_settings(moto, sshd)
    config = NodeConfig()
    tags = [{"Key": k, "Value": v} for k, v in config.resource_labels().items()]
    left = ec2.run_instances(
        ImageId=settings["image_id"],
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )["Instances"][0]["InstanceId"]
    async with get_provider("ec2", **settings) as provider:
        node = await provider.provision(config)
        try:
            assert await _live(moto, config.node_id) == [left]
            assert (await run(node, "true"))[0] == 0
        finally:
            await node.destroy()
    assert await _live(moto, config.node_id) == []
    await terminate_on_host(config.node_id)


CRASHING = textwrap.dedent("""
    import json, sys, anyio
    from nodeprov import NodeConfig, NodeHandle, get_provider

    async def main() -> None:
        given = json.load(sys.stdin)  # settings and config may hold secrets: never in argv
        await get_provider("ec2", **given["settings"]).provision(NodeConfig.model_validate(given["config"]))
        print("provisioned", flush=True)
        await anyio.sleep(3600)

    anyio.run(main)
""")


@pytest.mark.parametrize("delay", [0.3, 0.6, 0.9, 1.2, 1.8])
async def test_a_control_plane_killed_while_provisioning_then_a_retry_leaves_one_instance(
    delay: float, moto: str, sshd: Sshd
) -> None:
    settings = ec2_settings(moto, sshd)
    config = NodeConfig()
    child = await anyio.open_process([sys.executable, "-c", CRASHING], stdin=PIPE)
    assert child.stdin is not None
    await child.stdin.send(
        json.dumps({"settings": settings, "config": config.model_dump(mode="json")}).encode()
    )
    await child.stdin.aclose()
    await anyio.sleep(delay)
    child.kill()
    await child.wait()
    assert len(await _live(moto, config.node_id)) <= 1
    async with get_provider("ec2", **settings) as provider:
        node = await provider.provision(config)
        try:
            assert len(await _live(moto, config.node_id)) == 1
            assert (await run(node, "true"))[0] == 0
        finally:
            await node.destroy()
    assert await _live(moto, config.node_id) == []
    await terminate_on_host(config.node_id)


async def test_gc_removes_instances_no_live_lease_owns(moto: str, sshd: Sshd, store: Store) -> None:
    dead = await store.leases.acquire("a control plane that is gone", ttl=60)
    await store.leases.release(dead.id)
    async with (
        Orchestrator(store) as orchestrator,
        get_provider("ec2", **ec2_settings(moto, sshd)) as provider,
    ):
        orphan = await provider.provision(NodeConfig(owner=f"lease:{dead.id}"))
        owned = await provider.provision(NodeConfig(owner=orchestrator.owner))
        try:
            report = await orchestrator.collect_garbage(provider)
            assert [info.node_id for info in report.reaped] == [orphan.node_id]
            assert await _live(moto, orphan.node_id) == []
            assert len(await _live(moto, owned.node_id)) == 1
        finally:
            await owned.destroy()
            await orphan.destroy()
    for node in (orphan, owned):
        await terminate_on_host(node.node_id)


async def test_settings_that_cannot_work_are_config_errors(moto: str, sshd: Sshd) -> None:
    for more, says in (
        ({"image_id": None}, "image_id"),
        ({"ssh_cidr": None}, "ssh_cidr"),
        ({"key_files": None}, "key_name"),
        ({"profile": "nodeprov-no-such-profile"}, "credentials"),
    ):
        async with get_provider("ec2", **ec2_settings(moto, sshd, **more)) as provider:
            with pytest.raises(ConfigError, match=says):
                await provider.provision()


async def test_probe_says_what_is_missing(moto: str, sshd: Sshd) -> None:
    async with get_provider("ec2", **ec2_settings(moto, sshd)) as provider:
        await provider.probe()
    for more, says in (
        ({"image_id": "ami-0000000000nodeprov"}, "no AMI"),
        ({"key_name": "nodeprov-no-such-key"}, "no key pair"),
        ({"key_files": None}, "no key"),
        ({"region": None, "profile": "nodeprov-no-such-profile"}, "credentials"),
    ):
        async with get_provider("ec2", **ec2_settings(moto, sshd, **more)) as provider:
            with pytest.raises(ConfigError, match=says):
                await provider.probe()


async def test_a_new_instance_gets_a_host_key_of_its_own(moto: str, sshd: Sshd, tmp_path: Path) -> None:
    """Without a pinned host key, nodeprov gives the instance one through its user data and
    pins it: the first connection is checked strictly. The test plays cloud-init: it reads
    the instance's user data and starts the instance's sshd with that key."""
    port = free_port()
    (tmp_path / "known_hosts").write_text("")  # nothing known about this machine
    settings = ec2_settings(moto, sshd, host_key=None, port=port, known_hosts=str(tmp_path / "known_hosts"))
    config = NodeConfig()
    made: list[NodeHandle] = []
    with ExitStack() as machine:
        async with get_provider("ec2", **settings) as provider, anyio.create_task_group() as tg:

            async def provision() -> None:
                made.append(await provider.provision(config))

            tg.start_soon(provision)
            with anyio.fail_after(30):
                while not (launched := await _live(moto, config.node_id)):  # noqa: ASYNC110 - moto's state
                    await anyio.sleep(0.05)
            ec2 = ec2_client(moto)
            user_data = ec2.describe_instance_attribute(InstanceId=launched[0], Attribute="userData")
            script = base64.b64decode(user_data["UserData"]["Value"]).decode()
            key = re.search(r"ed25519_private: \|\n((?:    .*\n)+)", script)
            assert key is not None, script
            pem = "".join(line.removeprefix("    ") + "\n" for line in key.group(1).splitlines())
            own = machine.enter_context(running_sshd(port=port, host_key_pem=pem, client_key=sshd.client_key))
            tags = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": launched}])
            assert {"Key": "nodeprov.host-key", "Value": own.public_host_key} in [
                {"Key": t["Key"], "Value": t["Value"]} for t in tags["Tags"]
            ]
        (node,) = made
        try:
            assert (await run(node, "echo", "checked")) == (0, b"checked\n", b"")
        finally:
            await node.destroy()
    await terminate_on_host(config.node_id)


async def test_a_paused_run_stops_its_kept_instance_and_the_resume_starts_it(
    moto: str, sshd: Sshd, store: Store, scripted_model: ScriptedModel
) -> None:
    require_claude_cli()
    marker = unique_marker()
    scripted_model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    ec2 = ec2_client(moto)
    async with Orchestrator(store) as orchestrator:
        run_ = await orchestrator.start(
            "remember: the bird is a wren",
            options=run_options(scripted_model),
            provider="ec2",
            provider_settings=ec2_settings(moto, sshd),
        )
        await until_tool_runs(marker)
        snapshot = await run_.pause("human", "review", keep_node=True)
        assert snapshot.node_id is not None
        released = [e async for e in run_.events() if isinstance(e, NodeReleased)][-1]
        assert (released.kept, released.suspended) == (True, True)
        (instance_id,) = await _live(moto, snapshot.node_id)
        state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]
        assert state["Name"] == "stopped"  # no compute billed while the run waits

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("it was a wren")])
        resumed = await orchestrator.resume(
            snapshot.token, message="which bird?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]
        assert (ready.node_id, ready.reused) == (snapshot.node_id, True)  # started again, the same disk
    seen = scripted_model.agent_requests[before].text()
    assert "remember: the bird is a wren" in seen
    assert "which bird?" in seen
    assert await _live(moto, snapshot.node_id) == []
    await terminate_on_host(snapshot.node_id)


def test_the_client_token_is_one_per_provision_and_within_ec2s_limit() -> None:
    from nodeprov_ec2.provider import client_token

    longest = NodeConfig(node_id="n" * 63)
    assert len(client_token(longest)) <= 64  # EC2 refuses a longer one
    assert client_token(longest) == client_token(longest.model_copy())  # a retry of this provision
    assert client_token(longest) != client_token(NodeConfig(node_id=longest.node_id))  # another one


async def test_a_wrong_host_key_fails_the_provision_at_once(moto: str, sshd: Sshd, tmp_path: Path) -> None:
    """The instance answers with a host key that is not the one made for it (the test sshd
    has its own): waiting cannot make it right, so provision fails at once, leaving nothing."""
    from nodeprov_ssh import SshHostKeyError

    (tmp_path / "known_hosts").write_text("")
    settings = ec2_settings(
        moto, sshd, host_key=None, known_hosts=str(tmp_path / "known_hosts"), ready_timeout=600
    )
    config = NodeConfig()
    async with get_provider("ec2", **settings) as provider:
        with anyio.fail_after(60), pytest.raises(SshHostKeyError):  # not ready_timeout's ten minutes
            await provider.provision(config)
    assert await _live(moto, config.node_id) == []
