"""What the local provider promises beyond the conformance suite."""

import shutil
from pathlib import Path

import pytest

from nodeprov import NodeConfig, ProvisionError, SpawnOptions, get_provider
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker, wait_until

pytestmark = pytest.mark.anyio


async def test_a_users_own_workdir_is_left_in_place(tmp_path: Path) -> None:
    mine = tmp_path / "my project"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision(NodeConfig(workdir=str(mine))) as node:
        assert node.workdir == str(mine)
        assert (await run(node, "sh", "-c", "echo made > made.txt"))[0] == 0
    assert (mine / "keep.txt").read_text() == "mine"
    assert (mine / "made.txt").exists()
    assert list((tmp_path / "nodes").iterdir()) == []


async def test_environment_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEPROV_PASSED", "yes")
    monkeypatch.setenv("NODEPROV_KEPT_OUT", "no")
    provider = get_provider("local", root=tmp_path / "nodes", inherit_env=["NODEPROV_PASSED"])
    async with await provider.provision(NodeConfig(env={"NODE_LEVEL": "1", "PATH": "/bin"})) as node:
        _, out, _ = await run(node, "/usr/bin/env", env={"SPAWN_LEVEL": "2"})
        seen = dict(line.split("=", 1) for line in out.decode().splitlines())
        assert seen == {
            "PATH": "/bin",
            "HOME": node.base_env["HOME"],
            "NODEPROV_PASSED": "yes",
            "NODE_LEVEL": "1",
            "SPAWN_LEVEL": "2",
        }
        _, out, _ = await run(node, "/usr/bin/env", env={"PATH": "/usr/bin"})
        assert "PATH=/usr/bin\n" in out.decode()


async def test_destroy_kills_what_an_exited_process_left_running(tmp_path: Path) -> None:
    marker = unique_marker()
    provider = get_provider("local", root=tmp_path / "nodes")
    node = await provider.provision()
    process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} >/dev/null 2>&1 &"]))
    assert await process.wait() == 0  # the leader is gone; its background child is not

    async def started() -> bool:
        return bool(host_processes_matching(marker))

    assert await wait_until(started, 10)
    await node.destroy()

    async def gone() -> bool:
        return not host_processes_matching(marker)

    assert await wait_until(gone, 10)


async def test_an_existing_node_id_is_refused(tmp_path: Path) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    async with await provider.provision(NodeConfig(node_id="twin")):
        with pytest.raises(ProvisionError, match="exists already"):
            await provider.provision(NodeConfig(node_id="twin"))
        assert (tmp_path / "nodes" / "twin").is_dir()  # the failed attempt removed nothing of the live one


async def test_destroy_after_the_directory_vanished(tmp_path: Path) -> None:
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    shutil.rmtree(tmp_path / "nodes" / node.node_id)
    await node.destroy()  # gone from outside already: fine
    assert node.destroyed
