"""Warm pools of Docker nodes from the CLI: a pool filled, a run's node claimed from it with no
trace of the run before it, the pool refilled and removed with no container left; a pool whose
image does not exist says why, backs off, and is removed cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from nodeprov.node import LABEL_NODE_ID


def nodeprov(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NODEPROV_STORE": f"sqlite:///{tmp_path}/store.db", "COLUMNS": "200"},
    )


@pytest.fixture
def mark(tmp_path: Path, docker_client: docker.DockerClient) -> Iterator[str]:
    """A label of this test's nodes alone; whatever a failure leaves is removed."""
    value = tmp_path.name.replace("_", "-")[-40:]
    yield value
    for container in docker_client.containers.list(all=True, filters={"label": f"pool-test={value}"}):
        container.remove(force=True)


def pool_nodes(client: docker.DockerClient, mark: str) -> set[str]:
    return {
        c.labels[LABEL_NODE_ID]
        for c in client.containers.list(all=True, filters={"label": f"pool-test={mark}"})
    }


def status(tmp_path: Path) -> list[dict[str, Any]]:
    listed = nodeprov(tmp_path, "pool", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def test_a_docker_pool_hands_each_run_a_node_of_its_own(
    tmp_path: Path, base_image: str, docker_client: docker.DockerClient, mark: str
) -> None:
    made = nodeprov(
        tmp_path,
        "pool",
        "create",
        "web",
        "-p",
        "docker",
        "--image",
        base_image,
        "--size",
        "2",
        "--label",
        f"pool-test={mark}",
        "--ship-cli",
        "-s",
        "network_mode=host",  # the scripted model listens on this host's 127.0.0.1
    )
    assert made.returncode == 0, made.stderr
    containers = pool_nodes(docker_client, mark)
    assert len(containers) == 2
    first = nodeprov(tmp_path, "run", "--pool", "web", "--agent-grace", "0", "write a file")
    assert first.returncode == 0, first.stderr
    assert "claimed from pool web" in first.stdout
    second = nodeprov(tmp_path, "run", "--pool", "web", "--agent-grace", "0", "hello")
    assert second.returncode == 0, second.stderr
    nodes = [
        next(line.split()[1] for line in out.stdout.splitlines() if "claimed from pool" in line)
        for out in (first, second)
    ]
    assert nodes[0] != nodes[1]
    assert set(nodes) <= containers
    assert not set(nodes) & pool_nodes(docker_client, mark)  # used once each, destroyed with its run
    [pool] = status(tmp_path)
    assert pool["ready"] == 2
    assert nodeprov(tmp_path, "pool", "rm", "web").returncode == 0
    assert pool_nodes(docker_client, mark) == set()


def test_a_pool_whose_image_is_missing_says_why_and_backs_off(
    tmp_path: Path, docker_client: docker.DockerClient, mark: str
) -> None:
    made = nodeprov(
        tmp_path,
        "pool",
        "create",
        "broken",
        "-p",
        "docker",
        "--image",
        "nodeprov-no-such-image:0",
        "--size",
        "1",
        "--label",
        f"pool-test={mark}",
    )
    assert made.returncode == 1
    assert "could not be made" in made.stderr
    [pool] = status(tmp_path)
    assert pool["error"]
    assert pool["retry_in"] is not None
    assert pool["ready"] == 0
    assert nodeprov(tmp_path, "pool", "rm", "broken").returncode == 0
    assert pool_nodes(docker_client, mark) == set()
