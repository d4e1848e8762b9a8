"""The SSH provider passes the provider conformance suite against a real OpenSSH sshd,
logged in as root and as an unprivileged user."""

from __future__ import annotations

import pwd
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance, host_processes_matching

from .sshd import UNPRIVILEGED, Sshd


def ssh_leftovers(user: str, root: str) -> Leftovers:
    """The node's directory on the host (this machine), and any process still in it."""

    async def find(node_id: str) -> list[str]:
        directory = Path(pwd.getpwnam(user).pw_dir) / root / node_id
        found = [str(directory)] if directory.exists() else []
        return found + host_processes_matching(str(directory))

    return find


@pytest.fixture(params=["root", UNPRIVILEGED])
def user(request: pytest.FixtureRequest) -> str:
    return str(request.param)


ROOT = ".nodeprov/conformance"


class TestSshConformance(ProviderConformance):
    @pytest.fixture
    async def provider(self, sshd: Sshd, user: str) -> AsyncIterator[AnyProvider]:
        async with get_provider("ssh", **sshd.settings(user, root=ROOT)) as provider:
            yield provider

    def big_file_mib(self, provider: AnyProvider) -> int:
        return 1024 if provider.settings.user == "root" else 128  # one GiB per data path

    @pytest.fixture
    def leftovers(self, user: str) -> Leftovers:
        return ssh_leftovers(user, ROOT)
