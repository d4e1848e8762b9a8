"""The SSH provider passes the provider conformance suite against a real OpenSSH sshd,
logged in as root and as an unprivileged user."""

from __future__ import annotations

import pwd
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread
import pytest

from nodeprov import get_provider
from nodeprov.testing.conformance import AnyProvider, Leftovers, ProviderConformance, host_processes_matching
from nodeprov.testing.containers import SshHostContainer

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
Suite = TypeVar("Suite", bound=ProviderConformance)

SPAWN_TESTS = (
    "test_stdout_stderr_and_exit_code",
    "test_stdin_round_trip_binary_and_large",
    "test_command_not_found",
    "test_concurrent_spawns",
    "test_hostile_arguments_and_env_reach_the_process_verbatim",
    "test_environment_names_that_are_not_shell_names",
    "test_arguments_not_in_utf8_reach_the_process_as_bytes",
    "test_a_process_that_closes_stdout_and_keeps_running",
    "test_stop_policy_escalates_and_takes_children",
    "test_cancelled_spawn_leaves_nothing",
)
"""Conformance tests of what a spawn through an SshNode does, whichever provider made the
node: the suite below runs them as root and as an unprivileged user. A provider whose nodes
spawn through an SshNode (EC2, Codespaces) checks its own part (environment, workdir, files,
what it adds to the connection) and leaves these out (see :func:`spawning_as_on_ssh`)."""


def spawning_as_on_ssh(*keep: str) -> Callable[[type[Suite]], type[Suite]]:
    """A class decorator: the suite without the :data:`SPAWN_TESTS` (but those in ``keep``)."""

    def leave_out(cls: type[Suite]) -> type[Suite]:
        for name in SPAWN_TESTS:
            if name not in keep:
                setattr(cls, name, None)
        return cls

    return leave_out


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


class TestSshConformanceOnATestContainer(ProviderConformance):
    """The suite again, against nodeprov's SSH host test container (``nodeprov_ssh_host``),
    as a user's CI tests the SSH provider with nothing but Docker; node files and processes
    are looked for in the container."""

    host: SshHostContainer

    def big_file_mib(self, provider: AnyProvider) -> int:
        return 128  # the data path is the one the suite above moved a GiB through

    @pytest.fixture(autouse=True)
    def _on_the_container(self, nodeprov_ssh_host: SshHostContainer) -> None:
        self.host = nodeprov_ssh_host

    @pytest.fixture
    async def provider(self) -> AsyncIterator[AnyProvider]:
        async with get_provider("ssh", **self.host.provider_settings(root=ROOT)) as provider:
            yield provider

    async def _in_container(self, script: str, *args: str) -> str:
        done = await anyio.to_thread.run_sync(self.host.exec, ["sh", "-c", script, "sh", *args])
        assert done.exit_code == 0, done.output
        return done.output.decode(errors="replace")

    async def processes_matching(self, marker: str) -> list[str]:
        """``pid: command line`` of the container's processes with ``marker`` (zombies are gone)."""
        found = []
        for line in (await self._in_container("ps -eo pid=,stat=,args=")).splitlines():
            pid, state, command = line.split(maxsplit=2)
            if marker in command and not state.startswith("Z"):
                found.append(f"{pid}: {command}")
        return found

    @pytest.fixture
    def leftovers(self) -> Leftovers:
        async def find(node_id: str) -> list[str]:
            directory = f"/home/{self.host.user}/{ROOT}/{node_id}"
            found = await self._in_container('if [ -e "$1" ]; then echo "$1"; fi', directory)
            return found.split() + await self.processes_matching(directory)

        return find
