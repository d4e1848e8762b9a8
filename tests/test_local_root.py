"""The local provider trusts nothing under its root (issue 8, finding 1): the root must be a
private directory of this user's, and records and process files read from it are checked."""

import json
import logging
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from nodeprov import ConfigError, NodeConfig, NodeGoneError, NodePathError, SpawnOptions, get_provider
from nodeprov.node import pid_namespace, process_start_time
from nodeprov.testing.conformance import host_processes_matching, unique_marker, wait_until
from nodeprov.testing.pytest_plugin import require_engine
from nodeprov_local import LocalProvider, LocalSettings

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="nodeprov.local")


def dead(owner: str) -> bool:
    return False


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory beside the root that no node may touch."""
    victim = tmp_path / "victim"
    (victim / "home").mkdir(parents=True)
    (victim / "keep.txt").write_text("mine")
    return victim


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of this user's, leading its own process group."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def plant_record(node_dir: Path, node_id: str) -> None:
    """Rewrite the node's record as the provider wrote it, with another node id."""
    record = json.loads((node_dir / "node.json").read_text())
    (node_dir / "node.json").write_text(json.dumps({**record, "node_id": node_id}))


async def test_a_record_naming_a_path_outside_the_root_is_skipped(
    tmp_path: Path, victim: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    node = await provider.provision(NodeConfig(node_id="planted"))
    plant_record(tmp_path / "nodes" / node.node_id, "../victim")
    report = await provider.collect_garbage(alive=dead)
    assert (victim / "keep.txt").read_text() == "mine"
    assert report.reaped == []
    assert await provider.list_nodes() == []
    with pytest.raises(NodeGoneError):
        await provider.attach("../victim")
    assert "node id '../victim' is not its name" in caplog.text


async def test_a_node_directory_that_is_a_symlink_is_skipped(tmp_path: Path, victim: Path) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    node = await provider.provision(NodeConfig(node_id="model", workdir=str(tmp_path)))
    (victim / "node.json").write_text((tmp_path / "nodes" / node.node_id / "node.json").read_text())
    await node.destroy()
    plant_record(victim, "evil")
    (tmp_path / "nodes" / "evil").symlink_to(victim)
    await provider.collect_garbage(alive=dead)
    assert (victim / "home").is_dir()
    assert (victim / "node.json").exists()


async def test_a_planted_process_record_signals_no_unrelated_process(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    provider = get_provider("local", root=tmp_path / "nodes")
    node = await provider.provision()
    start, namespace = process_start_time(sleeper.pid), pid_namespace()
    with (tmp_path / "nodes" / node.node_id / "process-groups").open("a") as records:
        for kind in ("supervisor", "group"):
            records.write(f"{kind} {sleeper.pid} {start} {namespace}\n")
    # As a reaper does: from another handle, through attach.
    await (await get_provider("local", root=tmp_path / "nodes").attach(node.node_id)).destroy()
    await node.destroy()
    await anyio.sleep(0.1)
    assert sleeper.poll() is None
    assert f"process {sleeper.pid} not signalled: it does not carry the node's marker" in caplog.text


async def test_a_destroy_from_another_handle_still_ends_the_nodes_own_processes(tmp_path: Path) -> None:
    marker = unique_marker()
    provider = get_provider("local", root=tmp_path / "nodes")
    node = await provider.provision()
    try:
        await node.spawn(SpawnOptions("sh", ["-c", f"setsid sleep {marker} & sleep {marker}"]))

        async def running() -> bool:
            return len(host_processes_matching(f"sleep {marker}")) >= 2

        assert await wait_until(running, 10)
        await (await get_provider("local", root=tmp_path / "nodes").attach(node.node_id)).destroy()

        async def none_left() -> bool:
            return not host_processes_matching(marker)

        assert await wait_until(none_left, 10), host_processes_matching(marker)
    finally:
        await node.destroy()


async def test_malformed_process_records_are_ignored(tmp_path: Path) -> None:
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    namespace = pid_namespace()
    huge = "9" * 20
    with (tmp_path / "nodes" / node.node_id / "process-groups").open("ab") as records:
        records.write(
            b"garbage\n\xff\xfe\n \nsupervisor 12\n"
            + f"group {huge} - {namespace}\nsupervisor {huge} - {namespace}\n".encode()
            + f"group 4194305 - {namespace}\nsupervisor \u0663\u0664 - {namespace}\n".encode()
        )
    await node.destroy()
    assert node.destroyed


def refused_root(tmp_path: Path, kind: str) -> Path:
    root = tmp_path / "nodes"
    if kind == "symlink":
        (tmp_path / "real").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "real")
    elif kind == "file":
        root.write_text("")
    else:
        root.mkdir()
        root.chmod({"group-writable": 0o770, "world-writable": 0o703}[kind])
    return root


@pytest.mark.parametrize("kind", ["group-writable", "world-writable", "symlink", "file"])
async def test_an_unsafe_root_is_refused(tmp_path: Path, kind: str) -> None:
    provider = get_provider("local", root=refused_root(tmp_path, kind))
    with pytest.raises(ConfigError, match=re.escape(f"local provider root {tmp_path / 'nodes'} ")):
        await provider.provision()
    with pytest.raises(ConfigError):
        await provider.list_nodes()
    with pytest.raises(ConfigError):
        await provider.attach("any")
    with pytest.raises(ConfigError):
        await provider.collect_garbage(alive=dead)


async def test_a_root_that_became_unsafe_is_refused_by_destroy(tmp_path: Path) -> None:
    root = tmp_path / "nodes"
    node = await get_provider("local", root=root).provision()
    root.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by group or others"):
        await node.destroy()
    root.chmod(0o700)
    await node.destroy()


async def test_a_root_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    # CI runs as root; elsewhere this skips, saying so.
    require_engine("root", os.getuid() == 0, "making a directory owned by another user needs root")
    root = tmp_path / "nodes"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        await get_provider("local", root=root).provision()


async def test_the_default_root_is_under_xdg_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    assert LocalSettings().root == runtime / "nodeprov"
    async with await get_provider("local").provision():
        assert stat.S_IMODE((runtime / "nodeprov").stat().st_mode) == 0o700


@pytest.mark.parametrize("runtime", [None, "relative/run", "/nonexistent/nodeprov-run"])
async def test_the_default_root_falls_back_to_local_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str | None
) -> None:
    if runtime is None:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    else:
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    provider = get_provider("local")
    assert isinstance(provider, LocalProvider)
    assert provider.root == tmp_path / "home" / ".local" / "state" / "nodeprov"
    async with await provider.provision():
        for made in (provider.root, *provider.root.parents[:3]):  # nodeprov, state, .local, home
            assert stat.S_IMODE(made.stat().st_mode) == 0o700, made


async def test_file_operations_are_confined_to_the_node(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    async with await get_provider("local", root=tmp_path / "nodes").provision(
        NodeConfig(workdir=str(mine))
    ) as node:
        assert node.file_roots == (str(tmp_path / "nodes" / node.node_id), str(mine))
        with pytest.raises(NodePathError):
            node.node_path("../nodes")
        with pytest.raises(NodePathError):
            await node.write_file(str(tmp_path / "outside.txt"), b"x")
        with pytest.raises(NodePathError):
            await node.spawn(SpawnOptions("true", cwd="/"))
        await node.write_file("inside.txt", b"x")
        assert (mine / "inside.txt").read_bytes() == b"x"
