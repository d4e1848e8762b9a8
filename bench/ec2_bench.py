"""EC2 provider benchmark against boto3 doing the same work, on the same moto EC2 server on
127.0.0.1, with every instance reached at the same real sshd (as in the tests).

- provision, cold: a new provider's ``provision()`` (its EC2 client; look the node up by
  tag, import its key pair, make its security group, RunInstances, wait for ``running``,
  log in over SSH, make the node's directory) against a new boto3 session's client making
  the same calls in a thread (a waiter polling every second), then ``ssh host mkdir`` with
  OpenSSH's client. Both load botocore's EC2 model, as a new control plane does (that is
  most of the spread). Teardown is outside the timing.

Needs root (sshd) and openssh-server (``scripts/engines.sh`` installs it), and moto.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import boto3

from integration.ec2 import REGION, ec2_settings, running_moto, terminate_on_host
from integration.sshd import UNPRIVILEGED, running_sshd
from nodeprov import NodeConfig, get_provider

from .common import Row, compare


def _raw_launch(endpoint: str, settings: dict[str, Any]) -> str:
    """What provision asks EC2, with boto3: the instance id once it runs."""
    # A new session, as a new control plane has: it loads botocore's EC2 model, as ours does.
    ec2: Any = boto3.session.Session(region_name=REGION).client("ec2", endpoint_url=endpoint)
    name = f"raw-{uuid.uuid4().hex[:12]}"
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "raw", "Value": name}]}]
    ec2.describe_instances(Filters=[{"Name": "tag:raw", "Values": [name]}])
    public = Path(f"{settings['key_files'][0]}.pub").read_bytes()
    ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public)
    group = ec2.create_security_group(GroupName=name, Description="raw")["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=group,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "198.51.100.7/32"}]}
        ],
    )
    instance = ec2.run_instances(
        ImageId=settings["image_id"],
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        KeyName=name,
        SecurityGroupIds=[group],
        TagSpecifications=tags,
    )["Instances"][0]["InstanceId"]
    ec2.get_waiter("instance_running").wait(InstanceIds=[instance], WaiterConfig={"Delay": 1})
    return str(instance)


async def provision_ours(settings: dict[str, Any], cleanup: list[str]) -> float:
    """A cold provision: a new provider (its EC2 client, its SSH connection), as a control
    plane that provisions one node on a machine nobody has reached yet."""
    start = time.perf_counter()
    async with get_provider("ec2", **settings) as provider:
        node = await provider.provision(NodeConfig())
    took = time.perf_counter() - start
    cleanup.append(node.node_id)
    return took


async def provision_raw(endpoint: str, settings: dict[str, Any], login: list[str]) -> float:
    start = time.perf_counter()
    await anyio.to_thread.run_sync(_raw_launch, endpoint, settings)
    await anyio.run_process([*login, "mkdir", "-p", f".nodeprov/bench-raw/{uuid.uuid4().hex[:8]}"])
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> list[Row]:
    rows = []
    with running_sshd() as sshd, running_moto() as endpoint:
        settings = ec2_settings(endpoint, sshd)
        login = sshd.client(UNPRIVILEGED)
        cleanup: list[str] = []
        timing = await compare(
            args.repeat,
            lambda: provision_ours(settings, cleanup),
            lambda: provision_raw(endpoint, settings, login),
        )
        async with get_provider("ec2", **settings) as provider:
            for node_id in cleanup:
                await (await provider.attach(node_id)).destroy()
                await terminate_on_host(node_id)
        rows.append(
            Row(
                "ec2: provision (moto + sshd) vs boto3's same calls, a waiter and `ssh host mkdir`",
                f"{timing.ours * 1000:,.0f} ms",
                f"{timing.raw * 1000:,.0f} ms",
                timing,
                None,
            )
        )
    return rows
