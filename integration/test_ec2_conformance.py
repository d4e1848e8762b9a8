"""The EC2 provider passes the provider conformance suite against moto's EC2 server, each
instance reached at a real sshd."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio.to_thread
import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance

from .ec2 import ec2_settings, live_instances, running_moto, terminate_on_host
from .sshd import UNPRIVILEGED, Sshd
from .test_ssh_conformance import spawning_as_on_ssh, ssh_leftovers


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with running_moto() as endpoint:
        yield endpoint


@spawning_as_on_ssh()
class TestEc2Conformance(ProviderConformance):
    """Provisioning, the node's environment and workdir, files over the exec channel (not
    SFTP, as on the SSH provider), destroy and gc; spawning is the SSH provider's."""

    @pytest.fixture
    async def provider(self, moto: str, sshd: Sshd) -> AsyncIterator[AnyProvider]:
        async with get_provider("ec2", **ec2_settings(moto, sshd)) as provider:
            yield provider

    def big_file_mib(self, provider: AnyProvider) -> int:
        return 128  # the SSH provider's data path, which moves a GiB in its own suite

    @pytest.fixture
    def leftovers(self, moto: str) -> Leftovers:
        """Live instances of the node. Once none is left, what the node made on the test
        sshd goes too, as a terminated machine's disk and processes would (moto's
        instances are not machines)."""
        on_host = ssh_leftovers(UNPRIVILEGED, ".nodeprov/ec2")

        async def find(node_id: str) -> list[str]:
            instances = await anyio.to_thread.run_sync(live_instances, moto, node_id)
            if not instances:
                await terminate_on_host(node_id)
                assert await on_host(node_id) == []
            return instances

        return find
