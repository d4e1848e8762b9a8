"""What a stopped control plane leaves stops too, whatever the node's image holds: on a
Docker node with no ``ps`` (nor ``pkill``), SIGKILL of ``nodeprov run`` leaves neither the
agent nor the tool it started in a session of its own (Claude Code runs its Bash tool so,
and counts on ``ps`` to stop it): the stdin guard finds them by its mark through /proc."""

from __future__ import annotations

import io
from pathlib import Path

import docker
import pytest

from nodeprov.testing import ScriptedModel
from nodeprov.testing.conformance import host_processes_matching, wait_until

from .agents import require_claude_cli
from .test_cli_signals import STOP_BOUND, _remove_run_containers, agent_processes, start

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def image_without_ps(base_image: str, docker_client: docker.DockerClient) -> str:
    """The base image less ps, pkill and pgrep (built offline: the step only removes files)."""
    dockerfile = f"FROM {base_image}\nRUN rm -f /bin/ps /usr/bin/ps /usr/bin/pkill /usr/bin/pgrep\n"
    tag = "nodeprov-test-without-ps:latest"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, network_mode="none", rm=True)
    return tag


async def test_sigkill_on_a_node_without_ps_leaves_no_agent_and_no_tool(
    image_without_ps: str, docker_client: docker.DockerClient, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    require_claude_cli()
    assert (
        docker_client.containers.run(
            image_without_ps, ["sh", "-c", "command -v ps || echo none"], remove=True
        ).strip()
        == b"none"
    )
    settings = {"image": image_without_ps, "network_mode": "host", "pull": "never"}
    where = [
        "--provider",
        "docker",
        "--ship-cli",
        *[a for k, v in settings.items() for a in ("-s", f"{k}={v}")],
    ]
    process, marker = start(tmp_path, scripted_model, [*where, "--agent-grace", "0"])  # not kept
    process.kill()
    process.communicate(timeout=30)

    async def stopped() -> bool:
        return not agent_processes(scripted_model) and not host_processes_matching(marker)

    assert await wait_until(stopped, STOP_BOUND), host_processes_matching(marker)
    _remove_run_containers(docker_client, tmp_path)  # its lease is dead, but no reconcile runs here
