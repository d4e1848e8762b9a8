"""What the local provider removes is bounded by what the node owns: never what is mounted
inside it, never the host's temporary directory; and what it resolved from its environment
(its root) is stored with a run, so another environment finds the node."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from nodeprov import get_provider
from nodeprov.errors import ProviderError
from nodeprov.store import Store
from nodeprov.testing.conformance import run
from nodeprov.testing.pytest_plugin import require_engine

pytestmark = pytest.mark.anyio


@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[None]:
    """Root, to bind-mount; whatever is mounted under ``tmp_path`` afterwards (wherever a
    destroy moved it) is unmounted, deepest first."""
    require_engine("root, to bind-mount a directory", os.geteuid() == 0, "run the tests as root")
    yield
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(f"{tmp_path}/")), key=len, reverse=True):
        subprocess.run(["umount", target], check=False)


async def test_destroy_never_crosses_into_a_mount_inside_the_node(tmp_path: Path, bind_mount: None) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data").write_text("not the node's")
    node = await get_provider("local", root=str(tmp_path / "nodes")).provision()
    target = Path(node.workdir) / "mounted"
    target.mkdir()
    await anyio.run_process(["mount", "--bind", str(precious), str(target)])
    (Path(node.workdir) / "the-nodes-own").write_text("goes")
    with pytest.raises(ProviderError, match="mount points inside it"):
        await node.destroy()
    assert (precious / "data").read_text() == "not the node's"
    left = next((tmp_path / "nodes").iterdir())  # the node, out of the way: only the mount's path stays
    assert not (left / "work" / "the-nodes-own").exists()


async def test_a_nodes_temporary_files_are_its_own_and_go_with_it(tmp_path: Path) -> None:
    node = await get_provider("local", root=str(tmp_path / "nodes")).provision()
    code, out, _ = await run(node, "sh", "-c", 'mktemp "${TMPDIR:-/tmp}/agent.XXXXXX"')
    made = Path(out.decode().strip())
    assert code == 0
    assert made.is_relative_to(tmp_path / "nodes" / node.node_id)
    await node.destroy()
    assert not await anyio.Path(made).exists()
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_a_run_stores_the_root_its_environment_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root's default comes from XDG_RUNTIME_DIR: a run keeps the root it resolved, and
    a control plane in another environment (another XDG_RUNTIME_DIR) finds the node there."""
    from nodeprov.errors import NodeGoneError
    from nodeprov.runs import AgentMessage, Orchestrator
    from nodeprov.testing import fake_agent_command

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(mode=0o700)
    second.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(first))
    agent = {"cli_path": fake_agent_command(tmp_path), "env": {"NODEPROV_FAKE_AGENT": '[{"stall": true}]'}}
    async with await Store.open(f"sqlite:///{tmp_path}/store.db") as store, Orchestrator(store) as plane:
        started = await plane.start("go", provider="local", options=agent, permission="edit")
        async for event in started.events():
            if isinstance(event, AgentMessage):
                break
        record = await store.run(started.id)
        assert record is not None
        assert record.node_id is not None
        assert json.loads(record.node_settings) == {"root": str(first / "nodeprov")}
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(second))
        found = await get_provider("local", **json.loads(record.node_settings)).attach(record.node_id)
        assert found.node_id == record.node_id
        with pytest.raises(NodeGoneError):  # where this environment's default would look
            await get_provider("local").attach(record.node_id)
        await started.pause("human", "done")
