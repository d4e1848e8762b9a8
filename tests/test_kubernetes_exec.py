"""The Kubernetes provider's exec path against a FAKE API server's exec (tests/fake_kube_exec.py),
in both protocols: ``v5.channel.k8s.io`` (stdin ended by its close signal) and
``v4.channel.k8s.io`` (stdin ended through the relay and a second exec). The real cluster's
tests (integration/test_kubernetes*.py) cover v4 against a real API server and kubelet."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from nodeprov.exec import END_RELAY, PREAMBLE, RELAYED_PREAMBLE
from nodeprov.node import LABEL_NODE_ID
from nodeprov.spawn import SpawnOptions, StopPolicy
from nodeprov.testing.conformance import run
from nodeprov_kubernetes import KubernetesNode, KubernetesProvider

from .fake_kube_exec import POD_UID, V4, V5, FakeExecServer, start

pytestmark = pytest.mark.anyio


class Fake:
    def __init__(self, server: FakeExecServer, node: KubernetesNode) -> None:
        self.server = server
        self.node = node


@pytest.fixture(params=[(V5, V4), (V4,)], ids=["v5", "v4"])
async def fake(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Fake]:
    server = FakeExecServer(protocols=request.param)
    runner = await start(server)
    provider = KubernetesProvider.from_settings(
        kubeconfig=str(server.kubeconfig(tmp_path)), image="unused", eof_grace=10, term_grace=5
    )
    node = KubernetesNode(
        provider=provider,
        pod="nodeprov-fake",
        uid=POD_UID,
        labels={LABEL_NODE_ID: "fake"},
        workdir=str(tmp_path),
        pod_env=server.env,
        tool_paths={},
    )
    try:
        yield Fake(server, node)
    finally:
        await provider.aclose()
        await runner.cleanup()


def scripts(server: FakeExecServer) -> list[str]:
    """The script of each exec so far (``/bin/sh -c SCRIPT ...``)."""
    return [command[2] for command in server.commands if command[:2] == ["/bin/sh", "-c"]]


async def test_the_relay_is_used_until_the_server_has_shown_v5(fake: Fake) -> None:
    for _ in range(2):
        assert await run(fake.node, "true") == (0, b"", b"")
    first, second = [script for script in scripts(fake.server) if script != END_RELAY]
    assert first == RELAYED_PREAMBLE
    assert second == (PREAMBLE if fake.server.protocols[0] == V5 else RELAYED_PREAMBLE)


async def test_closing_stdin_ends_it_after_every_byte(fake: Fake) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, every byte value
    for _ in range(2):  # the first spawn relays on either protocol; the second relays on v4 only
        # The command starts reading late: closing stdin must not cut what it has not read yet.
        with anyio.fail_after(30):
            assert await run(fake.node, "sh", "-c", "sleep 0.5; exec cat", stdin=payload) == (0, payload, b"")
    ended_through_a_second_exec = END_RELAY in scripts(fake.server)
    assert ended_through_a_second_exec == (fake.server.protocols == (V4,))


async def test_exit_status_and_streams_apart(fake: Fake) -> None:
    code, out, err = await run(fake.node, "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (code, out, err) == (3, b"out\n", b"err\n")


async def test_terminate_signals_the_process_group_through_a_second_exec(fake: Fake) -> None:
    process = await fake.node.spawn(SpawnOptions("sh", ["-c", "sleep 300 & exec sleep 300"]))
    process.stop_policy = StopPolicy(eof_grace=0.1, term_grace=5)
    with anyio.fail_after(20):
        await process.aclose()
    assert process.returncode == 128 + 15


async def test_values_never_reach_a_command_line(fake: Fake) -> None:
    secret = f"secret-{secrets.token_hex(8)}"
    code, out, _ = await run(fake.node, "env", env={"NODEPROV_SECRET": secret})
    assert code == 0
    assert f"NODEPROV_SECRET={secret}".encode() in out
    assert not [command for command in fake.server.commands if any(secret in arg for arg in command)]
