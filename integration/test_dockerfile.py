"""The Dockerfile users build node images from yields a working node: built offline here from
the test base image (PACKAGES="", nothing downloaded), then driven end to end."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import anyio
import docker
import docker.errors
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query

from nodeprov import get_provider
from nodeprov.agents.claude import NodeTransport, bundled_cli_path
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import run
from nodeprov.testing.pytest_plugin import require_engine

DOCKERFILE = Path(__file__).parents[1] / "node-image" / "Dockerfile"


@pytest.fixture(scope="module")
def agent_image(
    base_image: str, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> str:
    cli = bundled_cli_path()
    require_engine("the Claude Code CLI", cli is not None, "install claude-agent-sdk")
    assert cli is not None
    recipe = hashlib.sha256(
        DOCKERFILE.read_bytes() + base_image.encode() + Path(cli).with_name("claude.version").read_bytes()
    ).hexdigest()[:12]
    tag = f"nodeprov-test-agent:{recipe}"
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        context = tmp_path_factory.mktemp("context")
        shutil.copy(DOCKERFILE, context / "Dockerfile")
        shutil.copy(cli, context / "claude")
        docker_client.images.build(
            path=str(context),
            tag=tag,
            rm=True,
            network_mode="none",
            buildargs={"BASE_IMAGE": base_image, "PACKAGES": ""},
        )
    return tag


@pytest.mark.anyio
async def test_a_node_from_the_users_dockerfile_runs_an_agent(
    agent_image: str, scripted_model: ScriptedModel
) -> None:
    provider = get_provider("docker", image=agent_image, network_mode="host", pull="never")
    async with await provider.provision() as node:
        assert node.workdir == "/workspace"
        assert "claude" not in node.tool_paths  # on the image's PATH
        _, whoami, _ = await run(node, "id", "-un")
        assert whoami == b"agent\n"
        scripted_model.extend([ToolUse("Bash", {"command": "id -un > who.txt"}), Text("done")])
        env = {
            k: v for k, v in scripted_model.agent_env().items() if k != "IS_SANDBOX"
        }  # not root: not needed
        options = ClaudeAgentOptions(env=env, permission_mode="bypassPermissions")
        with anyio.fail_after(180):
            messages = [
                m
                async for m in query(
                    prompt="who am I", options=options, transport=NodeTransport.for_node(node, options)
                )
            ]
        assert isinstance(messages[-1], ResultMessage)
        assert messages[-1].subtype == "success"
        assert (await run(node, "cat", "who.txt"))[1] == b"agent\n"
