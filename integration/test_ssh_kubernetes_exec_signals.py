"""`nodeprov exec` stopped by SIGTERM, SIGHUP or Ctrl-C leaves no process on an SSH node (the
test sshd) or a Kubernetes pod (the test cluster): it left one on SIGTERM and SIGHUP."""

from __future__ import annotations

import signal

import anyio
import pytest

from nodeprov import get_provider

from .exec_signals import SIGNALS, exec_then_signal, gone_soon
from .kubernetes import Cluster
from .pods import pod_settings
from .sshd import UNPRIVILEGED, Sshd

pytestmark = pytest.mark.anyio


async def _check(provider: str, settings: dict[str, object], signum: signal.Signals) -> None:
    async with get_provider(provider, **settings) as made, await made.provision() as node:
        code, marker, stderr = await anyio.to_thread.run_sync(
            exec_then_signal, provider, settings, node.node_id, signum
        )
        assert code == 128 + signum, stderr
        assert await anyio.to_thread.run_sync(gone_soon, marker)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
async def test_a_signal_to_exec_stops_the_process_on_an_ssh_node(sshd: Sshd, signum: signal.Signals) -> None:
    await _check("ssh", sshd.settings(UNPRIVILEGED, root=".nodeprov/exec-signals"), signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
async def test_a_signal_to_exec_stops_the_process_in_a_pod(
    kubernetes_cluster: Cluster, base_image: str, signum: signal.Signals
) -> None:
    await _check("kubernetes", pod_settings(kubernetes_cluster, base_image), signum)
