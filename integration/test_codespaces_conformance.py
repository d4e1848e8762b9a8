"""The Codespaces provider passes the provider conformance suite: the real gh against the
FAKE GitHub API, every codespace reached at a real sshd through the stand-in for
``gh codespace ssh`` (see :mod:`.github`), with and without ``--stdio``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance

from .codespaces import ROOT, Codespaces, node_of, running_codespaces
from .sshd import UNPRIVILEGED, Sshd
from .test_ssh_conformance import spawning_as_on_ssh, ssh_leftovers


class _CodespacesConformance(ProviderConformance):
    stdio = True

    @pytest.fixture(scope="class")
    @classmethod
    def codespaces(cls, sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Codespaces]:
        with running_codespaces(sshd, tmp_path_factory.mktemp("gh"), stdio=cls.stdio) as made:
            yield made

    @pytest.fixture
    async def provider(self, codespaces: Codespaces) -> AsyncIterator[AnyProvider]:
        async with get_provider("codespaces", **codespaces.settings()) as provider:
            yield provider

    def big_file_mib(self, provider: AnyProvider) -> int:
        return 16  # the SSH provider's data path, which moves a GiB in its own suite

    @pytest.fixture
    def leftovers(self, codespaces: Codespaces) -> Leftovers:
        """The node's codespaces, and what it left on the test sshd's host."""
        on_host = ssh_leftovers(UNPRIVILEGED, ROOT)

        async def find(node_id: str) -> list[str]:
            named = [c.name for c in codespaces.github.live() if node_of(c.display_name) == node_id]
            return named + await on_host(node_id)

        return find


@spawning_as_on_ssh("test_stdin_round_trip_binary_and_large", "test_concurrent_spawns")
class TestCodespacesConformance(_CodespacesConformance):
    """Through one connection over ``gh codespace ssh --stdio``: spawning is the SSH
    provider's, and files travel as on EC2 (checked there); what the tunnel carries, bytes
    and concurrent sessions, is checked here again."""

    test_hostile_file_names = None  # type: ignore[assignment]
    test_file_modes_and_parents = None  # type: ignore[assignment]
    test_file_errors = None  # type: ignore[assignment]
    test_a_cut_write_leaves_the_old_file_and_no_partial = None  # type: ignore[assignment]


class TestCodespacesConformanceWithoutStdio(_CodespacesConformance):
    """Through a ``gh codespace ssh -c NAME -- COMMAND`` per process, as with a gh that
    lacks ``--stdio``. Provisioning, listing and collecting garbage are the same gh calls
    either way, checked above; what differs is how processes and files travel (one login
    each, a second process to stop one, files over the exec channel), which the rest checks.
    """

    stdio = False
    test_provision_labels_and_destroy = None  # type: ignore[assignment]
    test_list_and_attach = None  # type: ignore[assignment]
    test_garbage_collection_spares_live_owners = None  # type: ignore[assignment]
    test_cancelled_provision_leaves_nothing = None  # type: ignore[assignment]
    # Files travel as processes do here (sh and cat over the exec channel, as on EC2, checked
    # there): the round trip is checked, the variations are not again.
    test_hostile_file_names = None  # type: ignore[assignment]
    test_file_modes_and_parents = None  # type: ignore[assignment]
    test_file_errors = None  # type: ignore[assignment]
    test_a_cut_write_leaves_the_old_file_and_no_partial = None  # type: ignore[assignment]
    test_a_big_file_round_trip_in_bounded_memory = None  # type: ignore[assignment]
