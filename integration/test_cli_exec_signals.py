"""`nodeprov exec` stopped by SIGTERM, SIGHUP or Ctrl-C leaves no process on a local or a
Docker node (it left one on SIGTERM and SIGHUP)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from nodeprov import get_provider

from .agents import on_docker
from .exec_signals import SIGNALS, exec_then_signal, gone_soon

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["local", "docker"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, object]]:
    if request.param == "local":
        return "local", {"root": str(tmp_path / "nodes")}
    return "docker", on_docker(request.getfixturevalue("base_image"))["provider_settings"]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
async def test_a_signal_to_exec_stops_the_process_on_the_node(
    where: tuple[str, dict[str, object]], signum: signal.Signals
) -> None:
    import anyio

    provider, settings = where
    async with get_provider(provider, **settings) as made, await made.provision() as node:
        code, marker, stderr = await anyio.to_thread.run_sync(
            exec_then_signal, provider, settings, node.node_id, signum
        )
        assert code == 128 + signum, stderr
        assert await anyio.to_thread.run_sync(gone_soon, marker)
