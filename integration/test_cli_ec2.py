"""The node commands on the EC2 provider (moto's server, every instance at the test sshd),
settings from NODEPROV_EC2_* variables, as a script would call them."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import anyio
import pytest

from .cli import PROVIDERS, nodeprov_with
from .ec2 import ec2_settings, live_instances, running_moto, terminate_on_host
from .sshd import Sshd


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with running_moto() as endpoint:
        yield endpoint


def nodeprov(moto: str, sshd: Sshd, *args: str, **more: object) -> subprocess.CompletedProcess[str]:
    return nodeprov_with("ec2", ec2_settings(moto, sshd, **more), *args)


def test_providers_provision_exec_destroy(moto: str, sshd: Sshd) -> None:
    ready = json.loads(nodeprov(moto, sshd, *PROVIDERS, "-p", "ec2", "--json").stdout)
    assert (ready["ready"], ready["error"]) == (True, "")
    missing = nodeprov(moto, sshd, *PROVIDERS, "-p", "ec2", "--json", image_id="ami-0000nodeprov")
    assert "no AMI" in json.loads(missing.stdout)["error"]

    made = nodeprov(moto, sshd, "provision", "-p", "ec2", "--ttl", "1", "--json")
    assert made.returncode == 0, made.stderr
    node_id = json.loads(made.stdout)["node_id"]
    try:
        assert len(live_instances(moto, node_id)) == 1
        listed = nodeprov(moto, sshd, "list", "-p", "ec2", "--json")
        assert node_id in [json.loads(line)["node_id"] for line in listed.stdout.splitlines()]
        done = nodeprov(moto, sshd, "exec", node_id, "-p", "ec2", "--", "printf", "%s\\0", "a;b", "$(id)")
        assert (done.returncode, done.stdout.split("\0")[:-1]) == (0, ["a;b", "$(id)"]), done.stderr
    finally:
        gone = nodeprov(moto, sshd, "destroy", node_id, "-p", "ec2", "--json")
    assert gone.returncode == 0, gone.stderr
    assert live_instances(moto, node_id) == []
    anyio.run(terminate_on_host, node_id)
