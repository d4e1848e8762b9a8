"""Docker provider behaviour beyond the conformance suite, on a real engine (no mocks)."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import docker
import docker.errors
import pytest
from anyio.streams.text import TextReceiveStream

from nodeprov import (
    NodeConfig,
    ProviderError,
    ProvisionError,
    SpawnOptions,
    get_provider,
)
from nodeprov.testing.conformance import (
    HOSTILE_STRINGS,
    host_processes_matching,
    run,
    unique_marker,
    wait_until,
)

from .containers import node_containers

pytestmark = pytest.mark.anyio


def containers_of(client: docker.DockerClient, node_id: str) -> list[str]:
    return node_containers(client, node_id)


async def gone(marker: str) -> bool:
    return not host_processes_matching(marker)


# -- stopping really stops, inside the container ---------------------------------------


async def test_closing_a_raw_exec_client_leaves_the_process_but_ours_stops_it(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision() as node:
        container = node.container_id  # type: ignore[attr-defined]
        # The plain way: exec with stdin attached, then drop the client side.
        raw_marker = unique_marker()
        api = docker_client.api
        exec_id = api.exec_create(container, ["sleep", raw_marker], stdin=True)["Id"]
        sock = api.exec_start(exec_id, socket=True)

        async def raw_running() -> bool:
            return bool(host_processes_matching(raw_marker))

        assert await wait_until(raw_running, 10)
        sock._sock.close()  # type: ignore[union-attr]  # the hijacked socket, as a dying client's
        sock.close()
        await anyio.sleep(1)
        assert host_processes_matching(raw_marker), "a dropped exec client stopped the process after all?"

        # nodeprov: terminate signals the process group inside the container.
        marker = unique_marker()
        process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & sleep {marker}; wait"]))

        async def both() -> bool:
            return len(host_processes_matching(marker)) >= 2

        assert await wait_until(both, 10)
        await process.terminate()
        assert await process.wait() == 128 + signal.SIGTERM
        assert await wait_until(lambda: gone(marker), 10), host_processes_matching(marker)
        await process.aclose()
    assert await wait_until(lambda: gone(raw_marker), 10)  # destroy took the stray one too


# -- bad input: a clear error, nothing left behind -------------------------------------


async def test_unknown_image(base_image: str, docker_client: docker.DockerClient) -> None:
    config = NodeConfig()
    provider = get_provider("docker", image="nodeprov-no-such-image:1", pull="never")
    with pytest.raises(ProvisionError, match="not on the engine"):
        await provider.provision(config)
    # A registry that does not answer (on loopback): the pull fails cleanly too.
    provider = get_provider("docker", image="127.0.0.1:9/nodeprov/nope:1", pull="missing")
    with pytest.raises(ProvisionError, match="could not be pulled"):
        await provider.provision(config)
    assert containers_of(docker_client, config.node_id) == []


async def test_engine_not_running(tmp_path: Path) -> None:
    provider = get_provider("docker", image="x", docker_host=f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(ProviderError, match="not reachable"):
        await provider.probe()
    with pytest.raises(ProviderError, match="not reachable"):
        await provider.provision()
    with pytest.raises(ProviderError, match="not reachable"):
        await provider.list_nodes()
    await get_provider("docker").probe()  # the engine this suite uses answers


async def test_the_env_setting_reaches_every_exec_but_not_the_container(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    settings = {"image": base_image, "pull": "never", "env": {"NODEPROV_TOKEN": "t0ken-value"}}
    async with await get_provider("docker", **settings).provision() as node:
        assert await run(node, "printenv", "NODEPROV_TOKEN") == (0, b"t0ken-value\n", b"")
        inspected = docker_client.api.inspect_container(f"nodeprov-{node.node_id}")
        assert "t0ken-value" not in str(inspected)
        assert b"t0ken-value" not in docker_client.api.logs(inspected["Id"])
        # Another control plane attaches with the settings given again, or without them.
        again = await get_provider("docker", **settings).attach(node.node_id)
        assert (await run(again, "printenv", "NODEPROV_TOKEN"))[1] == b"t0ken-value\n"
        bare = await get_provider("docker", image=base_image).attach(node.node_id)
        assert (await run(bare, "printenv", "NODEPROV_TOKEN"))[0] == 1
        assert bare.base_env["HOME"] == node.base_env["HOME"] == "/root"


@pytest.fixture(scope="module")
def dying_image(base_image: str, docker_client: docker.DockerClient) -> str:
    """The base image whose `sh` is `false`: its containers die before they report ready."""
    tag = f"nodeprov-test-dying-sh:{base_image.split(':')[1]}"
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        container = docker_client.containers.run(
            base_image, ["ln", "-sf", "/bin/false", "/bin/sh"], detach=True
        )
        container.wait()
        container.commit(*tag.split(":"))
        container.remove()
    return tag


async def test_a_container_that_dies_during_provision(
    dying_image: str, docker_client: docker.DockerClient
) -> None:
    config = NodeConfig()
    provider = get_provider("docker", image=dying_image, network_mode="host", pull="never")
    with pytest.raises(ProvisionError, match=config.node_id):
        await provider.provision(config)
    assert containers_of(docker_client, config.node_id) == []


async def test_bad_settings_are_config_errors() -> None:
    from nodeprov import ConfigError

    with pytest.raises(ConfigError, match="needs an image"):
        await get_provider("docker").provision()
    with pytest.raises(ConfigError, match="cpus"):
        get_provider("docker", image="x", cpus=0)
    with pytest.raises(ConfigError, match="only unix:// and tcp://"):
        await get_provider("docker", image="x", docker_host="ssh://host").list_nodes()


# -- hostile strings -------------------------------------------------------------------


async def test_hostile_labels_and_node_env_reach_the_container_verbatim(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    labels = {f"h{i}": value for i, value in enumerate(HOSTILE_STRINGS)}
    env = {f"NODEPROV_H{i}": value for i, value in enumerate(HOSTILE_STRINGS)}
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision(NodeConfig(labels=labels, env=env)) as node:
        container = docker_client.containers.get(node.container_id)  # type: ignore[attr-defined]
        assert {k: container.labels[k] for k in labels} == labels
        _, out, _ = await run(node, "env", "-0")
        seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
        assert {k: seen[k] for k in env} == env
        assert (await run(node, "sh", "-c", "test -e /tmp/nodeprov-pwned"))[0] != 0
    with pytest.raises(ValueError, match="lowercase"):
        NodeConfig(node_id="x; docker rm -f $(docker ps -q)")
    with pytest.raises(ValueError, match="lowercase"):
        NodeConfig(node_id="-rf")


# -- lifetime and garbage collection --------------------------------------------------


async def test_the_hard_lifetime_holds_without_the_control_plane(
    base_image: str, docker_client: docker.DockerClient
) -> None:
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    node = await provider.provision(NodeConfig(ttl=timedelta(seconds=2)))
    assert containers_of(docker_client, node.node_id)
    # Nobody calls destroy: the container's keep-alive ends and the engine removes it.
    assert await wait_until(
        lambda: anyio.to_thread.run_sync(lambda: not containers_of(docker_client, node.node_id)), 30
    )
    await node.destroy()  # and destroying what is gone is fine


ORPHAN_MAKER = textwrap.dedent("""
    import sys, anyio
    from nodeprov import get_provider

    async def main() -> None:
        provider = get_provider("docker", image=sys.argv[1], network_mode="host", pull="never")
        for _ in range(5):
            node = await provider.provision()
            print(node.node_id, flush=True)
        print("ready", flush=True)
        await anyio.sleep(3600)

    anyio.run(main)
""")


async def test_gc_after_sigkill_spares_a_live_owner(
    base_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision() as mine:
        maker = await anyio.open_process([sys.executable, "-c", ORPHAN_MAKER, base_image])
        assert maker.stdout is not None
        lines = TextReceiveStream(maker.stdout)
        printed = ""
        with anyio.fail_after(120):
            while "ready" not in printed:
                printed += await lines.receive()
        orphans = printed.split()[:-1]
        assert len(orphans) == 5
        maker.kill()  # SIGKILL: no cleanup of any kind runs
        await maker.wait()
        await maker.aclose()
        assert all(containers_of(docker_client, node_id) for node_id in orphans)

        gc = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-m", "nodeprov", "gc", "--provider", "docker", "--json"],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
        )
        assert gc.returncode == 0, gc.stderr
        reaped = {line.split('"node_id": "')[1].split('"')[0] for line in gc.stdout.splitlines()}
        assert set(orphans) <= reaped
        assert mine.node_id not in reaped
        for node_id in orphans:
            assert containers_of(docker_client, node_id) == []
        assert (await run(mine, "true"))[0] == 0


async def test_limits_mounts_user_and_workdir_take_effect(
    base_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "given.txt").write_text("from the host")
    provider = get_provider(
        "docker",
        image=base_image,
        network_mode="none",
        pull="never",
        cpus=0.5,
        memory="64m",
        user="nobody",
        workdir="/tmp/work",
        env={"NODE_LEVEL": "yes"},
        mounts=[{"source": str(shared), "target": "/mnt/shared", "read_only": True}],
    )
    async with await provider.provision() as node:
        host_config = docker_client.containers.get(node.container_id).attrs["HostConfig"]  # type: ignore[attr-defined]
        assert host_config["NanoCpus"] == 500_000_000
        assert host_config["Memory"] == 64 * 1024 * 1024
        assert host_config["NetworkMode"] == "none"
        assert host_config["Init"] is True
        assert (await run(node, "id", "-un"))[1] == b"nobody\n"
        assert (await run(node, "pwd"))[1] == b"/tmp/work\n"
        assert node.base_env["NODE_LEVEL"] == "yes"
        assert (await run(node, "cat", "/mnt/shared/given.txt"))[1] == b"from the host"
        code, _, err = await run(node, "sh", "-c", "echo no > /mnt/shared/given.txt")
        assert code != 0
        assert b"Read-only" in err


async def test_a_node_removed_from_outside(base_image: str, docker_client: docker.DockerClient) -> None:
    from nodeprov import NodeGoneError

    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    node = await provider.provision()
    process = await node.spawn(SpawnOptions("sleep", [unique_marker()]))
    docker_client.api.remove_container(node.container_id, force=True)  # type: ignore[attr-defined]
    with pytest.raises(NodeGoneError):
        await process.wait()
    assert process.returncode == 128 + 9
    await process.aclose()  # quiet: the process went with its node
    with pytest.raises(NodeGoneError):
        await node.spawn(SpawnOptions("true"))
    await node.destroy()  # and destroying what is gone is fine
    assert node.destroyed


async def test_a_spawn_the_engine_refuses_says_why(base_image: str) -> None:
    from nodeprov import SpawnError

    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision() as node:
        with pytest.raises(SpawnError, match=r"chdir to cwd .*/workspace/no-such-dir"):
            await node.spawn(SpawnOptions("pwd", cwd="no-such-dir"))


@pytest.mark.parametrize("silent_execs", [1, 3])
async def test_an_exec_the_engine_ends_before_it_runs_is_tried_again(
    silent_execs: int, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load runc may fail an exec ("error executing setns process"): the engine ends
    its stream saying nothing, and the exec's process never ran (Pid 0). Injected here at
    the engine's answer (the engine cannot be made to fail so on demand): the spawn tries a
    new exec, twice at most, then says what happened."""
    from nodeprov import SpawnError
    from nodeprov_docker import DockerNode, engine
    from nodeprov_docker import provider as docker_provider
    from nodeprov_docker.exec import ExecOutput

    provider = get_provider("docker", image=base_image, network_mode="host", pull="never")
    async with await provider.provision() as node:
        assert isinstance(node, DockerNode)
        exec_for_real, ask_for_real = node._exec, engine.ask
        silent: list[str] = []

        async def exec_(api: Any, argv: list[str], cwd: str, environment: list[str] | None = None) -> Any:
            if len(silent) == silent_execs:
                return await exec_for_real(api, argv, cwd, environment)
            created = await anyio.to_thread.run_sync(api.exec_create, node.container_id, ["true"])
            exec_id = created["Id"]  # never started
            silent.append(exec_id)
            ended, peer = socket.socketpair()
            peer.close()  # its stream ends at once, with nothing said
            return exec_id, ExecOutput(await anyio.abc.SocketStream.from_socket(ended))

        async def never_ran(call: Any, *args: Any, **kwargs: Any) -> Any:
            if args and args[0] in silent:  # as the engine says of an exec runc failed to start
                return {"Running": False, "Pid": 0, "ExitCode": 126}
            return await ask_for_real(call, *args, **kwargs)

        monkeypatch.setattr(node, "_exec", exec_)
        monkeypatch.setattr(docker_provider, "ask", never_ran)
        if silent_execs < 3:
            assert await run(node, "echo", "ran") == (0, b"ran\n", b"")
        else:
            with pytest.raises(SpawnError, match="the engine ended its exec at once, its process never ran"):
                await run(node, "echo", "ran")


@pytest.mark.parametrize(
    ("started", "said"),
    [
        (False, r"the engine has not started its exec \w+'s process \(Pid 0\)"),
        (True, r"its shell \(pid \d+\) said nothing"),
    ],
)
async def test_a_spawn_that_times_out_says_where_it_stalled(
    started: bool, said: str, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exec whose process the engine never starts, or whose shell never reports, times out
    at ``ready_timeout`` saying which (the engine's own account of the exec). The stall is
    injected in the exec's stream alone: the exec itself, and the engine's inspect, are real."""
    from nodeprov import SpawnError
    from nodeprov_docker import DockerNode
    from nodeprov_docker.exec import ExecOutput

    provider = get_provider("docker", image=base_image, pull="never")
    async with await provider.provision() as node:
        assert isinstance(node, DockerNode)
        monkeypatch.setattr(provider, "settings", provider.settings.model_copy(update={"ready_timeout": 1.0}))
        quiet: list[socket.socket] = []

        async def exec_(api: Any, argv: list[str], cwd: str, environment: list[str] | None = None) -> Any:
            created = await anyio.to_thread.run_sync(api.exec_create, node.container_id, ["sleep", "30"])
            if started:
                await anyio.to_thread.run_sync(functools.partial(api.exec_start, created["Id"], detach=True))
            ours, peer = socket.socketpair()
            quiet.append(peer)  # kept open: the stream says nothing and does not end
            return created["Id"], ExecOutput(await anyio.abc.SocketStream.from_socket(ours))

        monkeypatch.setattr(node, "_exec", exec_)
        with pytest.raises(SpawnError, match=rf"starting 'echo' on node \S+ timed out after 1s: {said}"):
            await run(node, "echo", "ran")
        for peer in quiet:
            peer.close()


async def test_stdout_is_not_ended_while_an_unreadable_process_holds_it(base_image: str) -> None:
    """The quiet-stdout check cannot see into a process of another user (no CAP_SYS_PTRACE in
    a container): it must count it as holding stdout, not end stdout under it."""
    async with await get_provider("docker", image=base_image, pull="never").provision() as node:
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        argv = [*nobody, "sh", "-c", "sleep 3; echo done"]
        with anyio.fail_after(60):
            assert await run(node, *argv) == (0, b"done\n", b"")


async def test_the_preamble_leaves_the_callers_variables_alone(base_image: str) -> None:
    env = {"encoded": "mine", "n": "5", "arg": "too"}
    async with await get_provider("docker", image=base_image, pull="never").provision() as node:
        script = 'printf "%s %s %s %s" "$encoded" "$n" "$arg" "$1"'
        code, out, _ = await run(node, "sh", "-c", script, "sh", os.fsdecode(b"\xff"), env=env)
        assert (code, out) == (0, b"mine 5 too \xff")
