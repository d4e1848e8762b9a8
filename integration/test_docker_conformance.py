"""The Docker provider passes the provider conformance suite on a real engine."""

import anyio.to_thread
import docker
import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance

from .containers import node_containers


def docker_leftovers(client: docker.DockerClient) -> Leftovers:
    """Containers of a node, running or not."""

    async def find(node_id: str) -> list[str]:
        return await anyio.to_thread.run_sync(node_containers, client, node_id)

    return find


class TestDockerConformance(ProviderConformance):
    prepares = True

    @pytest.fixture
    def provider(self, base_image: str) -> AnyProvider:
        return get_provider("docker", image=base_image, network_mode="host", pull="never")

    @pytest.fixture
    def leftovers(self, docker_client: docker.DockerClient) -> Leftovers:
        return docker_leftovers(docker_client)
