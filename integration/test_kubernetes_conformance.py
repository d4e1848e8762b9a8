"""The Kubernetes provider passes the provider conformance suite on a real cluster (1.20,
built from Debian's sources: exec speaks v4.channel.k8s.io, so stdin ends through the relay)."""

from collections.abc import AsyncIterator

import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance

from .kubernetes import Cluster
from .pods import pod_leftovers, pod_settings


class TestKubernetesConformance(ProviderConformance):
    prepares = True

    @pytest.fixture
    async def provider(self, kubernetes_cluster: Cluster, base_image: str) -> AsyncIterator[AnyProvider]:
        async with get_provider("kubernetes", **pod_settings(kubernetes_cluster, base_image)) as made:
            yield made

    @pytest.fixture
    def leftovers(self, kubernetes_cluster: Cluster) -> Leftovers:
        return pod_leftovers(kubernetes_cluster)
