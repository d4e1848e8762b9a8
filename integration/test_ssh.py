"""The SSH provider against a real sshd: host keys, secrets, the node's watchdog, a dropped
connection, and runs that survive sshd's death (killed, or frozen until keepalives give up)."""

from __future__ import annotations

import json
import logging
import os
import pwd
import signal
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov import NodeConfig, get_provider
from nodeprov.errors import ConfigError, NodeFileNotFoundError, NodeGoneError, NodeprovError
from nodeprov.node import NodeProvider
from nodeprov.node.keeper import KeepOptions, keep
from nodeprov.runs import NodeReady, Orchestrator
from nodeprov.spawn import SpawnOptions
from nodeprov.store import Store
from nodeprov.testing import ScriptedModel, Text, ToolUse
from nodeprov.testing.conformance import host_processes_matching, read_all, run, unique_marker, wait_until
from nodeprov.testing.pytest_plugin import require_engine
from nodeprov_ssh import SshHostKeyError

from .agents import on_ssh, require_claude_cli, run_options
from .sshd import UNPRIVILEGED, Sshd, running_sshd

pytestmark = pytest.mark.anyio
ROOT = ".nodeprov/ssh-tests"


def node_directory(user: str, node_id: str, root: str = ROOT) -> Path:
    return Path(pwd.getpwnam(user).pw_dir) / root / node_id


@pytest.fixture
async def provider(sshd: Sshd) -> AsyncIterator[NodeProvider[Any]]:
    async with get_provider("ssh", **sshd.settings(UNPRIVILEGED, root=ROOT)) as made:
        yield made


async def test_a_host_key_that_is_not_the_known_one_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    other = tmp_path / "other"
    await anyio.run_process(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)])
    wrong_key = (tmp_path / "other.pub").read_text().strip()
    wrong_hosts = tmp_path / "known_hosts"
    wrong_hosts.write_text(f"[127.0.0.1]:{sshd.port} {wrong_key}\n")
    empty_hosts = tmp_path / "empty_known_hosts"
    empty_hosts.write_text("")
    for refused in (
        {"known_hosts": str(wrong_hosts)},
        {"known_hosts": str(empty_hosts)},
        {"host_key": wrong_key},
    ):
        async with get_provider("ssh", **sshd.settings(UNPRIVILEGED, root=ROOT, **refused)) as provider:
            with pytest.raises(SshHostKeyError):
                await provider.provision()
    pinned = sshd.settings(
        UNPRIVILEGED, root=ROOT, host_key=sshd.public_host_key, known_hosts=str(wrong_hosts)
    )
    async with get_provider("ssh", **pinned) as provider, await provider.provision() as node:
        assert (await run(node, "true"))[0] == 0


async def test_skipping_the_host_key_check_is_loud(
    sshd: Sshd, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "empty").write_text("")
    settings = sshd.settings(
        UNPRIVILEGED, root=ROOT, known_hosts=str(tmp_path / "empty"), insecure_skip_host_key_check=True
    )
    with caplog.at_level(logging.WARNING, logger="nodeprov.ssh"):
        async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
            assert (await run(node, "true"))[0] == 0
    assert any("INSECURE" in record.getMessage() for record in caplog.records)


async def test_a_refused_login_is_a_config_error(sshd: Sshd) -> None:
    async with get_provider("ssh", **sshd.settings("nobody", root=ROOT)) as provider:
        with pytest.raises(ConfigError, match="login refused"):
            await provider.provision()


async def test_settings_env_is_a_secret_on_the_host(sshd: Sshd) -> None:
    secret = "sk-ssh-" + os.urandom(8).hex()
    marker = unique_marker()
    settings = sshd.settings(UNPRIVILEGED, root=ROOT, env={"API_KEY": secret, "odd-name": secret})
    async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
        assert secret not in repr(provider.settings)
        code, out, _ = await run(node, "env", "-0")
        assert code == 0
        seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
        assert seen["API_KEY"] == seen["odd-name"] == secret
        async with await node.spawn(SpawnOptions("sleep", [marker])) as sleeper:
            assert await wait_until(lambda: _running(marker), 10)
            assert not [line for line in host_processes_matching("") if secret in line]
            assert sleeper.returncode is None
        files = [p for p in node_directory(UNPRIVILEGED, node.node_id).rglob("*") if p.is_file()]
        assert files
        assert not [p for p in files if secret.encode() in p.read_bytes()]


async def _running(marker: str) -> bool:
    return bool(host_processes_matching(marker))


async def _gone(marker: str) -> bool:
    return not host_processes_matching(marker)


async def test_the_watchdog_destroys_a_node_whose_lifetime_is_over(provider: NodeProvider[Any]) -> None:
    marker = unique_marker()
    node = await provider.provision(NodeConfig(ttl=timedelta(seconds=3)))
    process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & sleep {marker}"]))
    assert await wait_until(lambda: _running(marker), 10)
    await process.discard()  # the control plane lets go: only the host is left to act
    await provider.aclose()
    directory = node_directory(UNPRIVILEGED, node.node_id)
    assert directory.exists()

    async def destroyed() -> bool:
        return not directory.exists() and await _gone(marker)

    assert await wait_until(destroyed, 30), "the node outlived its lifetime"
    with pytest.raises(NodeGoneError):
        await provider.attach(node.node_id)


async def test_a_nodes_temporary_files_are_its_own_and_go_with_it(provider: NodeProvider[Any]) -> None:
    """Issue 45: the agent's temporary files, prompt images among them, stayed in the host's
    shared /tmp after the node was destroyed."""
    node = await provider.provision()
    code, out, err = await run(node, "sh", "-c", 'f=$(mktemp) && echo secret >"$f" && echo "$f"')
    assert code == 0, err
    made = anyio.Path(out.decode().strip())
    directory = node_directory(UNPRIVILEGED, node.node_id)
    assert str(made.parent) == str(directory / "tmp"), made
    assert await made.exists()
    with anyio.fail_after(30):
        await node.destroy()
    assert not await made.exists()


async def test_a_kept_process_that_cannot_be_re_attached_says_the_last_cause(
    sshd: Sshd, provider: NodeProvider[Any]
) -> None:
    """Issue 45: the cause (the host refused the connection) was only in multi-line warnings."""
    node = await provider.provision()
    # Tried for as long as the keeper keeps it unattached (a run's kept agent is: its grace).
    process = await keep(node, SpawnOptions("sleep", ["300"]), KeepOptions(grace=3, reattach_within=3))
    sshd.kill()
    try:
        with anyio.fail_after(60), pytest.raises(NodeGoneError) as lost:
            async for _ in process.stdout:
                pass
    finally:
        sshd.start()
    said = str(lost.value)
    assert "could not re-attach in" in said, said
    assert "its keeper's grace: it stopped the process, whose output since is lost" in said, said
    assert "the last attempt: 127.0.0.1: cannot reach the SSH server" in said, said
    assert "\n" not in said
    await process.aclose()
    await node.destroy()


async def test_processes_that_leave_their_group_and_session_do_not_survive_destroy(
    provider: NodeProvider[Any],
) -> None:
    marker = unique_marker()
    node = await provider.provision()
    script = f"setsid sleep {marker} & sh -c 'trap \"\" TERM; exec sleep {marker}' & wait"
    process = await node.spawn(SpawnOptions("sh", ["-c", script]))
    assert await wait_until(lambda: _running(marker), 10)
    with anyio.fail_after(30):
        await node.destroy()
    await process.aclose()
    assert await wait_until(lambda: _gone(marker), 10), host_processes_matching(marker)


async def test_destroy_returns_once_what_it_killed_is_gone(provider: NodeProvider[Any]) -> None:
    """A process of the node that cannot exit yet (frozen by the cgroup v1 freezer, as one
    a busy host has not scheduled since its SIGKILL) keeps destroy from reporting the node
    gone: destroy returns once the process has exited, or after its bound (over 5 s)."""
    freezer = Path("/sys/fs/cgroup/freezer")
    require_engine("the cgroup v1 freezer, as root", await anyio.Path(freezer).is_dir() and os.geteuid() == 0)
    marker = unique_marker()
    node = await provider.provision()
    process = await node.spawn(SpawnOptions("sleep", [marker]))
    assert await wait_until(lambda: _running(marker), 30)
    pid = int(host_processes_matching(marker)[0].split(":")[0])
    group = freezer / f"nodeprov-test-{marker}"
    group.mkdir()
    try:
        (group / "tasks").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        assert await wait_until(lambda: _frozen(group), 30)
        destroyed = anyio.Event()

        async def destroy() -> None:
            await node.destroy()
            destroyed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(destroy)
            assert await wait_until(lambda: _kill_pending(pid), 30)
            assert not await wait_until(lambda: _is_set(destroyed), 3), "destroy left a live process"
            (group / "freezer.state").write_text("THAWED")
        assert host_processes_matching(marker) == []
    finally:
        (group / "freezer.state").write_text("THAWED")
        await process.aclose()
        assert await wait_until(lambda: _gone(marker), 30)
        group.rmdir()


async def _is_set(event: anyio.Event) -> bool:
    return event.is_set()


async def _frozen(group: Path) -> bool:
    return (group / "freezer.state").read_text().strip() == "FROZEN"


async def _kill_pending(pid: int) -> bool:
    """Whether SIGKILL is pending for ``pid`` (sent to it or to its group)."""
    lines = (await anyio.Path(f"/proc/{pid}/status").read_text()).splitlines()
    status = dict(line.split(":\t", 1) for line in lines)
    return any(int(status[field], 16) & 1 << (signal.SIGKILL - 1) for field in ("SigPnd", "ShdPnd"))


def _connection_daemons(sshd: Sshd) -> list[int]:
    return [pid for pid in sshd.daemons() if pid != (sshd.process.pid if sshd.process else 0)]


async def test_a_dropped_connection_is_made_again(sshd: Sshd, provider: NodeProvider[Any]) -> None:
    marker = unique_marker()
    async with await provider.provision() as node:
        process = await node.spawn(SpawnOptions("sleep", [marker]))
        assert await wait_until(lambda: _running(marker), 10)
        for pid in _connection_daemons(sshd):  # the connections drop; the listener stays
            os.kill(pid, 9)
        with anyio.fail_after(10), pytest.raises(NodeGoneError, match="connection was lost"):
            await process.wait()
        await process.aclose()
        assert (await run(node, "echo", "again")) == (0, b"again\n", b"")
    # Its stdin closed with the connection, yet sleep reads none: the destroy ended it.
    assert await wait_until(lambda: _gone(marker), 10)


async def _start_on_ssh(
    orchestrator: Orchestrator, model: ScriptedModel, sshd: Sshd, marker: str
) -> tuple[Any, str]:
    model.extend([ToolUse("Bash", {"command": f"sh -c 'sleep {marker}'"}), Text("unreachable")])
    settings = {**on_ssh(sshd), "provider_settings": {**on_ssh(sshd)["provider_settings"], **_FAST_KEEPALIVE}}
    run_ = await orchestrator.start("remember: the metal is tin", options=run_options(model), **settings)

    async def started_or_over() -> bool:
        return bool(host_processes_matching(marker)) or run_.outcome is not None

    await wait_until(started_or_over, 90)
    if not host_processes_matching(marker):  # say why: the run's end, what runs, what the model saw
        events = [type(event).__name__ async for event in run_.events()] if run_.outcome else []
        raise AssertionError(
            f"the agent's tool never started: run {run_.state} {run_.outcome} {run_.error!r} {events}; "
            f"model requests {len(model.agent_requests)}; agent processes "
            f"{host_processes_matching(_AGENT_CLIS)}"
        )
    record = await orchestrator.store.run(run_.id)
    assert record is not None
    assert record.node_id is not None
    assert record.project_key is not None
    assert run_.agent_session_id is not None
    mirrored = {"project_key": record.project_key, "session_id": run_.agent_session_id}

    async def prompt_mirrored() -> bool:
        return "metal is tin" in json.dumps(await orchestrator.store.transcripts.load(mirrored))  # type: ignore[arg-type]

    assert await wait_until(prompt_mirrored, 30)
    return run_, record.node_id


_AGENT_CLIS = ".nodeprov/runs/.tools/"  # the agent CLIs shipped to the host


def _agents_on(node_id: str) -> list[str]:
    """The shipped agent CLIs running in node ``node_id``'s directory: other nodes of this
    host's user (another pytest process's SSH tests) ship to the same place."""
    directory = str(node_directory(UNPRIVILEGED, node_id, ".nodeprov/runs"))
    found = []
    for process in host_processes_matching(_AGENT_CLIS):
        try:
            cwd = os.readlink(f"/proc/{process.split(':')[0]}/cwd").removesuffix(" (deleted)")
        except OSError:
            continue  # gone since
        if cwd == directory or cwd.startswith(directory + "/"):
            found.append(process)
    return found


_CONNECT_TIMEOUT = 3.0
_FAST_KEEPALIVE = {"keepalive_interval": 1.0, "keepalive_count_max": 2, "connect_timeout": _CONNECT_TIMEOUT}
_KEEPALIVE_BOUND = 1.0 * (2 + 1)


@pytest.mark.parametrize("fault", ["killed", "frozen"])
async def test_sshd_dying_mid_run_fails_the_run_clearly_and_it_resumes(
    fault: str, sshd: Sshd, store: Store, scripted_model: ScriptedModel
) -> None:
    require_claude_cli()
    marker = unique_marker()
    async with Orchestrator(store) as orchestrator:
        run_, node_id = await _start_on_ssh(orchestrator, scripted_model, sshd, marker)
        started = time.monotonic()
        try:
            if fault == "killed":
                sshd.kill()
            else:
                sshd.freeze()
            with anyio.fail_after(_KEEPALIVE_BOUND + 4 * _CONNECT_TIMEOUT + 30):
                assert await run_.wait() == "error"
            took = time.monotonic() - started
        finally:
            sshd.freeze(False)
            if fault == "frozen":
                sshd.kill()
            sshd.start()
        assert "SSH connection was lost" in (run_.error or ""), run_.error
        # Killed, the connection drops at once. Frozen, keepalives notice it; then the run's
        # cleanup (its transcript, the agent's stop, the node's destroy) tries the host
        # again, each attempt bounded by connect_timeout.
        bound = _KEEPALIVE_BOUND if fault == "killed" else _KEEPALIVE_BOUND + 4 * _CONNECT_TIMEOUT
        assert took <= bound + 5, took

        # The agent saw its channel close (stdin EOF): its guard stopped it. (Its tool, in a
        # process group of its own, lives as long as the node.)
        async def agent_gone() -> bool:
            return not _agents_on(node_id)

        assert await wait_until(agent_gone, 30), "the agent outlived its connection"

        before = len(scripted_model.agent_requests)
        scripted_model.extend([Text("the metal was tin")])
        resumed = await orchestrator.resume_run(
            run_.id, message="which metal?", options=run_options(scripted_model)
        )
        assert await resumed.wait() == "ok", resumed.error
        ready = [e async for e in resumed.events() if isinstance(e, NodeReady)][-1]
        assert ready.transcript_restored
        assert ready.node_id != node_id
        await orchestrator.reconcile()  # a node whose destroy failed goes, and its tool
        assert not node_directory(UNPRIVILEGED, node_id, ".nodeprov/runs").exists()
        assert await wait_until(lambda: _gone(marker), 10)
    seen = scripted_model.agent_requests[before].text()
    assert "remember: the metal is tin" in seen
    assert "which metal?" in seen
    assert not node_directory(UNPRIVILEGED, ready.node_id, ".nodeprov/runs").exists()


async def test_an_aborted_run_leaves_no_remote_process(
    sshd: Sshd, store: Store, scripted_model: ScriptedModel
) -> None:
    require_claude_cli()
    marker = unique_marker()
    async with Orchestrator(store) as orchestrator:
        run_, node_id = await _start_on_ssh(orchestrator, scripted_model, sshd, marker)
        assert _agents_on(node_id), host_processes_matching(_AGENT_CLIS)
        snapshot = await run_.pause(reason="abort")
        assert snapshot.node_kept is False
        assert await wait_until(lambda: _gone(marker), 15), "the agent's tool outlived the abort"
        assert _agents_on(node_id) == []
    assert not node_directory(UNPRIVILEGED, node_id, ".nodeprov/runs").exists()


@pytest.mark.parametrize("forwarding", ["yes", "no"])
async def test_openssh_config_aliases_and_proxy_jump_are_honoured(
    forwarding: str, sshd: Sshd, tmp_path: Path
) -> None:
    """``host`` is an alias of an OpenSSH config file whose ProxyJump goes through the test
    sshd. Through a jump host that forbids forwarding, the same settings fail: the jump is
    what carries the connection (the target would take a direct one)."""
    with (
        running_sshd(client_key=sshd.client_key, extra_config=f"AllowTcpForwarding {forwarding}") as jump,
        running_sshd(client_key=sshd.client_key) as target,
    ):
        known = tmp_path / "known_hosts"
        known.write_text(jump.known_hosts.read_text() + target.known_hosts.read_text())
        config = tmp_path / "config"
        config.write_text(
            f"Host jump\n  HostName 127.0.0.1\n  Port {jump.port}\n  User {UNPRIVILEGED}\n"
            f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {known}\n"
            f"Host build-box\n  HostName 127.0.0.1\n  Port {target.port}\n  User {UNPRIVILEGED}\n"
            f"  IdentityFile {sshd.client_key}\n  ProxyJump jump\n"
        )
        settings = {
            "host": "build-box",
            "config_files": [str(config)],
            "known_hosts": str(known),
            "use_agent": False,
            "root": ROOT,
            "connect_timeout": 10,
        }
        async with get_provider("ssh", **settings) as provider:
            if forwarding == "no":
                with pytest.raises(NodeprovError):
                    await provider.provision()
                return
            async with await provider.provision() as node:
                assert (await run(node, "echo", "through the jump")) == (0, b"through the jump\n", b"")


@pytest.mark.parametrize("where", ["a server without SFTP", "sftp=false"])
async def test_node_files_go_over_the_exec_channel_without_sftp(
    where: str, sshd: Sshd, caplog: pytest.LogCaptureFixture
) -> None:
    payload = bytes(range(256)) * 4099
    with running_sshd(client_key=sshd.client_key, sftp=where == "sftp=false") as server:
        settings = server.settings(UNPRIVILEGED, root=ROOT, sftp=where == "a server without SFTP")
        with caplog.at_level(logging.INFO, logger="nodeprov.ssh"):
            async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
                await node.write_file("deep/file.bin", payload, mode=0o640)
                assert await read_all(node, "deep/file.bin") == payload
                with pytest.raises(NodeFileNotFoundError):
                    await read_all(node, "missing")
        offered_none = any("offers no SFTP" in record.getMessage() for record in caplog.records)
        assert offered_none is (where == "a server without SFTP")


async def test_a_server_that_refuses_posix_rename_still_replaces_files(sshd: Sshd) -> None:
    """SFTP's own rename will not replace a file: the commit goes through ``mv`` instead."""
    with running_sshd(client_key=sshd.client_key, sftp_denied="posix-rename") as server:
        settings = server.settings(UNPRIVILEGED, root=ROOT)
        async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
            for payload in (b"first", b"second, longer"):
                await node.write_file("deep/file", payload, mode=0o640)
                assert await read_all(node, "deep/file") == payload
            assert await run(node, "stat", "-c", "%a", "deep/file") == (0, b"640\n", b"")
            assert await run(node, "ls", "-A", "deep") == (0, b"file\n", b"")


async def test_an_ssh_config_that_turns_host_key_checking_off_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    """``UserKnownHostsFile none`` in the user's SSH config would let any host key in,
    silently: refused unless the settings turn checking off themselves."""
    from nodeprov_ssh import SshHostKeyError

    config = tmp_path / "config"
    config.write_text(
        f"Host box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile none\n"
    )
    settings = {
        "host": "box",
        "config_files": [str(config)],
        "use_agent": False,
        "root": ROOT,
        "connect_timeout": 10,
    }
    async with get_provider("ssh", **settings) as provider:
        with pytest.raises(SshHostKeyError, match="UserKnownHostsFile none"):
            await provider.provision()
    async with (
        get_provider("ssh", **settings, insecure_skip_host_key_check=True) as provider,
        await provider.provision() as node,  # said so: checking is off, with a warning
    ):
        assert (await run(node, "true"))[0] == 0


async def test_a_tool_planted_in_the_cache_is_never_run_by_a_later_node(
    provider: NodeProvider[Any], tmp_path: Path
) -> None:
    """The tool cache belongs to the login, so a node's agent can write to it: a later node
    checks the cached copy's content and gets the tool copied again when it changed."""
    tool = tmp_path / "hello"
    tool.write_text("#!/bin/sh\necho the real tool\n")
    tool.chmod(0o755)
    async with await provider.provision(NodeConfig(tools={"hello": str(tool)})) as first:
        cached = first.tool_paths["hello"]
        code, _, _ = await run(first, "sh", "-c", f"printf '#!/bin/sh\\necho planted\\n' > {cached}")
        assert code == 0  # a process of the node rewrote the shared copy
        assert (await run(first, cached))[1] == b"planted\n"
    async with await provider.provision(NodeConfig(tools={"hello": str(tool)})) as later:
        assert later.tool_paths["hello"] == cached
        assert (await run(later, later.tool_paths["hello"]))[1] == b"the real tool\n"


async def test_an_encrypted_key_without_its_passphrase_is_a_clear_config_error(
    sshd: Sshd, tmp_path: Path
) -> None:
    """A passphrase is a secret, never stored: a reconcile that was not given it says so at
    once, naming the setting, instead of trying again and again."""
    key = tmp_path / "locked"
    await anyio.run_process(["ssh-keygen", "-q", "-t", "ed25519", "-N", "open sesame", "-f", str(key)])
    settings = sshd.settings(UNPRIVILEGED, root=ROOT, key_files=[str(key)])
    async with get_provider("ssh", **settings) as provider:
        with anyio.fail_after(30), pytest.raises(ConfigError, match="passphrase"):
            await provider.list_nodes()


async def test_spawns_that_time_out_in_their_handshake_leave_nothing(sshd: Sshd) -> None:
    """Each spawn gets less time than its handshake takes: every one fails, and none leaves
    its command running, or its session open (the connection stays usable)."""
    from nodeprov.errors import SpawnError

    marker = unique_marker()
    settings = sshd.settings(UNPRIVILEGED, root=ROOT, spawn_timeout=0.001)
    async with get_provider("ssh", **settings) as provider, await provider.provision() as node:
        link = provider.nodes.link  # type: ignore[attr-defined]
        before = sum(entry.sessions for entry in link._connections)  # an SFTP session keeps its place
        failed = 0
        for _ in range(12):
            try:
                process = await node.spawn(SpawnOptions("sleep", [marker]))
            except SpawnError:
                failed += 1
            else:
                await process.aclose()
        assert failed > 0

        async def none_left() -> bool:
            return not host_processes_matching(f"sleep {marker}")

        async def sessions_closed() -> bool:
            return bool(sum(entry.sessions for entry in link._connections) == before)

        assert await wait_until(none_left, 30), host_processes_matching(f"sleep {marker}")
        assert await wait_until(sessions_closed, 30)  # every session of those spawns closed
