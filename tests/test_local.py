"""What the local provider promises beyond the conformance suite."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

import nodeprov_local.provider as provider_module
from nodeprov import (
    CommandNotFoundError,
    NodeConfig,
    NodeHandle,
    ProvisionError,
    SpawnedProcess,
    SpawnError,
    SpawnOptions,
    get_provider,
)
from nodeprov.node import pid_namespace, process_start_time
from nodeprov.testing.conformance import host_processes_matching, run, unique_marker, wait_until
from nodeprov_local import LocalProcess, _supervisor

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
            "TMPDIR": node.base_env["TMPDIR"],  # the node's own
            "NODEPROV_PASSED": "yes",
            "NODE_LEVEL": "1",
            "SPAWN_LEVEL": "2",
        }
        _, out, _ = await run(node, "/usr/bin/env", env={"PATH": "/usr/bin"})
        assert "PATH=/usr/bin\n" in out.decode()


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


# -- containment: every process a spawn starts ends with it ---------------------------------

# How an agent's tool shell (a session of its own) leaves a process running, as in the
# Bash tool: each form, run by `setsid sh -c FORM`, leaves `sleep MARKER` behind.
ESCAPES = {
    "nohup": "nohup sleep {marker} >/dev/null 2>&1 &",
    "subshell": "(sleep {marker} &)",
    "setsid": "setsid sleep {marker}",
}


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique sleep duration; whatever still matches it after the test is killed, so a
    failing test leaves nothing behind."""
    marker = unique_marker()
    yield marker
    for found in host_processes_matching(marker):
        with suppress(OSError):
            os.kill(int(found.split(":")[0]), signal.SIGKILL)


def sleeps(marker: str) -> list[str]:
    """The processes that are exactly `sleep MARKER` (not the shells or supervisors naming it)."""
    return [found for found in host_processes_matching(marker) if found.endswith(f": sleep {marker}")]


async def until_sleeping(marker: str, count: int) -> None:
    async def running() -> bool:
        return len(sleeps(marker)) >= count

    assert await wait_until(running, 10), f"{count} `sleep {marker}` never ran"


async def gone(marker: str, within: float = 10) -> bool:
    """Whether no process matching ``marker`` is left, polling for up to ``within`` seconds."""

    async def none_left() -> bool:
        return not host_processes_matching(marker)

    return await wait_until(none_left, within)


async def spawn_escape(node: NodeHandle, form: str, marker: str) -> SpawnedProcess:
    """A command that runs FORM in a tool shell of its own session, then waits for its stdin
    to close; returned once the escaped sleep runs."""
    tool = shlex.quote(ESCAPES[form].format(marker=marker))
    process = await node.spawn(SpawnOptions("sh", ["-c", f"setsid sh -c {tool} & read -r line; exit 0"]))
    await until_sleeping(marker, 1)
    return process


@pytest.mark.parametrize("form", ESCAPES)
async def test_what_escapes_the_process_group_does_not_survive_destroy(
    tmp_path: Path, marker: str, form: str
) -> None:
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    process = await spawn_escape(node, form, marker)
    await node.destroy()
    assert await gone(marker), host_processes_matching(marker)
    with anyio.fail_after(10):  # its exit is reaped asynchronously: wait for it, bounded
        await process.wait()  # ended by the destroy, though its stdin never closed


@pytest.mark.parametrize("form", ESCAPES)
async def test_what_escapes_the_process_group_ends_with_its_command(
    tmp_path: Path, marker: str, form: str
) -> None:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        process = await spawn_escape(node, form, marker)
        await process.stdin.aclose()  # the command exits; what it left running goes with it
        assert await process.wait() == 0
        await process.aclose()
        assert await gone(marker), host_processes_matching(marker)


async def test_the_command_exits_only_once_all_it_started_is_gone(tmp_path: Path, marker: str) -> None:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        process = await node.spawn(
            SpawnOptions("sh", ["-c", f"sleep {marker} >/dev/null 2>&1 & setsid sleep {marker} & exit 4"])
        )
        assert await process.wait() == 4
        # The supervisor exits after reaping all below it: nothing is left, not even briefly.
        assert host_processes_matching(marker) == []
        await process.aclose()


async def test_terminate_reaches_every_descendant(tmp_path: Path, marker: str) -> None:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        tool = shlex.quote(f'trap "echo term > got-term; exit 0" TERM; sleep {marker} & wait')
        process = await node.spawn(SpawnOptions("sh", ["-c", f"setsid sh -c {tool} & read -r line"]))
        await until_sleeping(marker, 1)
        await process.terminate()

        async def trapped() -> bool:
            return (Path(node.workdir) / "got-term").exists()

        assert await wait_until(trapped, 10)  # the tool shell of its own session got SIGTERM
        await process.aclose()


CONTROL_PLANE = """
import sys
import anyio
from nodeprov import SpawnOptions, get_provider

async def main() -> None:
    root, marker, grace = sys.argv[1:]
    node = await get_provider("local", root=root, term_grace=float(grace)).provision()
    await node.spawn(SpawnOptions("sh", ["-c", f"setsid sleep {marker} & sleep {marker}"]))
    print("ready", flush=True)
    await anyio.sleep(3600)

anyio.run(main)
"""


async def test_a_sigkilled_control_plane_leaves_no_process(tmp_path: Path, marker: str) -> None:
    grace = 1.0
    argv = [sys.executable, "-c", CONTROL_PLANE, str(tmp_path / "nodes"), marker, str(grace)]
    async with await anyio.open_process(argv, stderr=None) as plane:
        assert plane.stdout is not None
        with anyio.fail_after(30):
            assert await BufferedByteReceiveStream(plane.stdout).receive_until(b"\n", 100) == b"ready"
        await until_sleeping(marker, 2)
        plane.kill()
        assert await plane.wait() == -signal.SIGKILL
    # The bound the supervisor states: term_grace + 1 s after the control plane's death (a
    # few seconds more here, for a loaded machine).
    assert await gone(marker, grace + 1 + 4), host_processes_matching(marker)


def test_a_control_plane_thread_that_ends_stops_nothing(marker: str) -> None:
    """The parent-death signal also comes when the *thread* that forked the supervisor ends
    (trio starts processes from worker threads); the supervisor must tell that from death."""
    status_r, status_w = os.pipe()
    started: list[subprocess.Popen[bytes]] = []
    script = str(Path(_supervisor.__file__))
    argv = [sys.executable, "-I", "-S", script, str(os.getpid()), str(status_w), "1", "/", "--"]

    def start() -> None:
        started.append(
            subprocess.Popen([*argv, "sleep", marker], pass_fds=(status_w,), start_new_session=True)
        )

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    os.close(status_w)
    supervisor = started[0]
    try:
        assert os.read(status_r, 100).startswith(b"ok ")
        time.sleep(1)  # for a wrongly heeded parent-death signal to act
        assert supervisor.poll() is None
        assert len(sleeps(marker)) == 1
        os.kill(supervisor.pid, _supervisor.KILL_ALL)
        assert supervisor.wait(10) == -signal.SIGKILL  # the command's death, mirrored
        assert host_processes_matching(marker) == []
    finally:
        os.close(status_r)
        supervisor.kill()
        supervisor.wait()


async def test_destroy_is_bounded_with_ten_processes_one_ignoring_sigterm(
    tmp_path: Path, marker: str
) -> None:
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    stubborn = f'trap "" TERM; while :; do sleep {marker}; done'
    await node.spawn(SpawnOptions("sh", ["-c", stubborn]))
    for _ in range(9):
        await node.spawn(SpawnOptions("sleep", [marker]))
    await until_sleeping(marker, 10)
    timeout = 2.0
    began = time.monotonic()
    await node.destroy(destroy_timeout=timeout)
    assert time.monotonic() - began < timeout + 5  # unbounded, it would never end; 5: a loaded machine
    assert await gone(marker), host_processes_matching(marker)


# -- what a spawn reports ----------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGUSR2, signal.SIGSEGV])
async def test_a_command_killed_by_a_signal_reports_minus_its_number(
    local_node: NodeHandle, sig: int
) -> None:
    code, _, _ = await run(local_node, "sh", "-c", f"kill -{signal.Signals(sig).name[3:]} $$")
    assert code == -sig


@pytest.mark.parametrize("status", [0, 1, 3, 255])
async def test_the_exit_status_passes_through(local_node: NodeHandle, status: int) -> None:
    assert (await run(local_node, "sh", "-c", f"exit {status}"))[0] == status


async def test_a_failed_start_raises_and_leaves_nothing(
    local_node: NodeHandle, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CommandNotFoundError):
        await local_node.spawn(SpawnOptions(f"nodeprov-missing-{marker}"))
    script = Path(local_node.workdir) / f"not-executable-{marker}"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(CommandNotFoundError):
        await local_node.spawn(SpawnOptions(str(script)))
    # A working directory that goes away after the check: the supervisor's chdir fails.
    monkeypatch.setattr(anyio.Path, "is_dir", _always_true)
    with pytest.raises(SpawnError, match="working directory") as caught:
        await local_node.spawn(SpawnOptions("sleep", [marker], cwd="vanished"))
    assert not isinstance(caught.value, CommandNotFoundError)
    assert host_processes_matching(marker) == []  # each supervisor was reaped before raising


async def _always_true(self: anyio.Path) -> bool:
    return True


async def test_the_supervisor_holds_none_of_the_commands_pipes(local_node: NodeHandle) -> None:
    process = await local_node.spawn(SpawnOptions("sh", ["-c", "exec >&- 2>&-; read -r line"]))
    assert isinstance(process, LocalProcess)
    assert process.command_pid is not None
    fds = f"/proc/{process.pid}/fd"
    assert {os.readlink(f"{fds}/{fd}") for fd in os.listdir(fds)} == {os.devnull}
    with anyio.fail_after(10):  # the command closed stdout: end of file, while it still runs
        assert [chunk async for chunk in process.stdout] == []
    assert process.returncode is None
    await process.stdin.aclose()
    assert await process.wait() == 1  # `read` saw end of file


async def test_a_malformed_process_record_does_not_stop_destroy(tmp_path: Path, marker: str) -> None:
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    await node.spawn(SpawnOptions("sleep", [marker]))
    await until_sleeping(marker, 1)
    me, started = os.getpid(), process_start_time(os.getpid())
    namespace = pid_namespace()
    with (tmp_path / "nodes" / node.node_id / "process-groups").open("ab") as records:
        records.write(
            b"garbage\n\xff\xfe\n\nsupervisor\n12 34\nsupervisor x 1 ns\n"
            + f"group 0 - {namespace}\nsupervisor -5 - {namespace}\ngroup 1 - {namespace}\n".encode()
            # This very test process: with another start time, or recorded in another PID
            # namespace, it is not the process recorded, and must not be signalled.
            + f"supervisor {me} 1{started} {namespace}\nsupervisor {me} {started} 4026531836.other\n".encode()
        )
    await node.destroy()
    assert await gone(marker), host_processes_matching(marker)


async def test_off_linux_a_spawn_is_a_plain_process_group(
    tmp_path: Path, marker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provider_module, "SUPERVISED", False)
    node = await get_provider("local", root=tmp_path / "nodes").provision()
    assert await run(node, "sh", "-c", "echo hi; exit 3") == (3, b"hi\n", b"")
    with pytest.raises(CommandNotFoundError):
        await node.spawn(SpawnOptions(f"nodeprov-missing-{marker}"))
    process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & sleep {marker}"]))
    assert isinstance(process, LocalProcess)
    assert process.command_pid is None
    assert os.getpgid(process.pid) == process.pid
    await until_sleeping(marker, 2)
    await node.destroy()
    assert await gone(marker), host_processes_matching(marker)


async def test_a_supervisor_that_fails_is_reported(
    local_node: NodeHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken_supervisor.py"
    broken.write_text("raise SystemExit('no subreaper here')\n")
    monkeypatch.setattr(provider_module, "_SUPERVISOR_SCRIPT", str(broken))
    with pytest.raises(SpawnError, match="no subreaper here"):
        await local_node.spawn(SpawnOptions("true"))
