"""The node-management commands on a real Docker engine, as a script would call them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from nodeprov import LABEL_OWNER
from nodeprov.agents.claude import bundled_cli_path
from nodeprov.testing.pytest_plugin import require_engine

from .cli import PROVIDERS
from .containers import node_containers


def nodeprov(*args: str, stdin: str = "", store: str = "") -> subprocess.CompletedProcess[str]:
    extra = {"NODEPROV_STORE": store} if store else {}
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **extra},
    )


def test_provision_list_exec_destroy(base_image: str, docker_client: docker.DockerClient) -> None:
    made = nodeprov(
        "provision",
        "--provider",
        "docker",
        "--image",
        base_image,
        "-s",
        "network_mode=host",
        "-s",
        "pull=never",
        "--label",
        "team=qa",
        "--ttl",
        "1",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    node = json.loads(made.stdout)
    node_id = node["node_id"]
    try:
        assert node["labels"]["team"] == "qa"
        assert node["labels"][LABEL_OWNER].startswith("cli:")  # not this short-lived process
        listed = nodeprov("list", "--provider", "docker", "--json")
        assert listed.returncode == 0, listed.stderr
        assert node_id in [json.loads(line)["node_id"] for line in listed.stdout.splitlines()]

        # stdin in, stdout and stderr out separately, the exit status passed through.
        done = nodeprov(
            "exec", node_id, "--", "sh", "-c", "tr a-z A-Z; echo oops >&2; exit 3", stdin="hello from stdin\n"
        )
        assert (done.returncode, done.stdout, done.stderr) == (3, "HELLO FROM STDIN\n", "oops\n")
        hostile = ["a;b", "$(id)", "-n", "two words", "line\nbreak"]
        done = nodeprov("exec", node_id, "--provider", "docker", "--", "printf", "%s\\0", *hostile)
        assert done.stdout.split("\0")[:-1] == hostile
        missing = nodeprov("exec", node_id, "--", "nodeprov-no-such-command")
        assert missing.returncode == 1
        assert missing.stderr.startswith("error: no command 'nodeprov-no-such-command'")
    finally:
        gone = nodeprov("destroy", node_id, "--json")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(gone.stdout) == {"node_id": node_id, "provider": "docker", "destroyed": True}
    assert node_containers(docker_client, node_id) == []
    again = nodeprov("destroy", node_id)
    assert again.returncode == 1
    assert again.stderr.strip() == f"error: no node {node_id}"


def test_run_on_docker(base_image: str, docker_client: docker.DockerClient, tmp_path: Path) -> None:
    require_engine("the Claude Code CLI", bundled_cli_path() is not None, "install claude-agent-sdk")
    done = nodeprov(
        "run",
        "--provider",
        "docker",
        "-s",
        f"image={base_image}",
        "-s",
        "network_mode=host",
        "-s",
        "pull=never",
        "--ship-cli",
        "--json",
        "where am I?",
        store=f"sqlite:///{tmp_path}/store.db",
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[-1]["outcome"] == "ok"
    tool_output = next(
        e["message"]["output"]
        for e in events
        if e["type"] == "agent.message" and e["message"]["kind"] == "tool_result"
    )
    assert "/workspace" in tool_output  # the agent's Bash ran in the container's workdir
    node_id = next(e["node_id"] for e in events if e["type"] == "node.ready")
    assert node_containers(docker_client, node_id) == []


def test_unknown_provider_setting_and_missing_image() -> None:
    bad = nodeprov("provision", "--provider", "docker", "-s", "imagee=x")
    assert bad.returncode == 2
    assert "imagee: Extra inputs are not permitted" in bad.stderr
    no_image = nodeprov("provision", "--provider", "docker")
    assert no_image.returncode == 2
    assert no_image.stderr.strip() == "error: the docker provider needs an image (setting 'image')"


@pytest.fixture(autouse=True)
def _engine(docker_client: docker.DockerClient) -> None:
    """Every test here needs the engine (the fixture skips or fails without one)."""


def test_providers_probes_the_engine() -> None:
    def docker_row(env: dict[str, str]) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "nodeprov", *PROVIDERS, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, **env},
        )
        rows: list[dict[str, object]] = [json.loads(line) for line in done.stdout.splitlines()]
        return next(row for row in rows if row["name"] == "docker")

    assert docker_row({})["ready"] is True
    unreachable = docker_row({"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert unreachable["ready"] is False
    assert str(unreachable["error"]).startswith("not ready: ")
