"""moto's EC2 server on 127.0.0.1 for tests: boto3 talks HTTP to it. Its instances are not
machines: tests map every one to the test sshd (the provider's ``connect_to`` and
``port``), where each node is a directory of its own."""

from __future__ import annotations

import functools
import logging
import os
import pwd
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import boto3

from nodeprov_ssh.node import DESTROY

from .sshd import UNPRIVILEGED, Sshd

REGION = "us-east-1"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@contextmanager
def running_moto() -> Iterator[str]:
    """moto's EC2 server on a free port of 127.0.0.1; yields its endpoint URL. The fake
    credentials it accepts are put in this process's environment (and its children's)."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    saved = {name: os.environ.get(name) for name in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@functools.cache
def ec2_client(endpoint: str) -> Any:
    return boto3.client("ec2", endpoint_url=endpoint, region_name=REGION)


@functools.cache
def an_image(endpoint: str) -> str:
    """One of moto's AMIs (listing them takes moto about two seconds)."""
    return str(ec2_client(endpoint).describe_images(Owners=["amazon"])["Images"][0]["ImageId"])


def ec2_settings(endpoint: str, sshd: Sshd, **more: object) -> dict[str, object]:
    """EC2 provider settings for the moto server, every instance reached at the test sshd."""
    image = an_image(endpoint)
    ssh = {k: v for k, v in sshd.settings(UNPRIVILEGED, root=".nodeprov/ec2").items() if k != "host"}
    return {
        **ssh,
        "connect_to": sshd.host,
        "host_key": sshd.public_host_key,  # as an AMI with a fixed host key would have it
        "endpoint_url": endpoint,
        "region": REGION,
        "image_id": image,
        "ssh_cidr": "198.51.100.7/32",
        "ready_timeout": 60.0,
        **more,
    }


def live_instances(endpoint: str, node_id: str) -> list[str]:
    """The instances of ``node_id`` that are not terminated."""
    found = ec2_client(endpoint).describe_instances(
        Filters=[
            {"Name": "tag:nodeprov.node-id", "Values": [node_id]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
    )
    return [i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]]


async def terminate_on_host(node_id: str) -> None:
    """What terminating the instance of ``node_id`` does to a machine, done to the test
    sshd's host: the node's directory and every process it recorded go."""
    directory = Path(pwd.getpwnam(UNPRIVILEGED).pw_dir) / ".nodeprov/ec2" / node_id
    await anyio.run_process(["sh", "-c", DESTROY, "emulated-termination", str(directory), "0"])
