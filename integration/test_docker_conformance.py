"""The Docker provider passes the provider conformance suite on a real engine."""

import anyio.to_thread
import docker
import pytest

from nodeprov import LABEL_NODE_ID, get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance


def docker_leftovers(client: docker.DockerClient) -> Leftovers:
    """Containers of a node, running or not."""

    async def find(node_id: str) -> list[str]:
        containers = await anyio.to_thread.run_sync(
            lambda: client.containers.list(all=True, filters={"label": f"{LABEL_NODE_ID}={node_id}"})
        )
        return [f"container {c.name} ({c.status})" for c in containers]

    return find


class TestDockerConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, base_image: str) -> AnyProvider:
        return get_provider("docker", image=base_image, network_mode="host", pull="never")

    @pytest.fixture
    def leftovers(self, docker_client: docker.DockerClient) -> Leftovers:
        return docker_leftovers(docker_client)
