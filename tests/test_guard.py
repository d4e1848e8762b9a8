"""The stdin guard (nodeprov.agents._guard.guard_stdin) with real processes on a local node: the
relay, the end-of-input marker, stopping a command whose control plane vanished, hostile
arguments, exit statuses, and a control plane that is SIGKILLed; and an agent started on a
node that contains its spawns, which runs without it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from nodeprov import ConfigError, NodeHandle, SpawnedProcess, SpawnOptions, StopPolicy, get_provider
from nodeprov.agents._guard import _GUARD_WATCH, guard_stdin, start_agent
from nodeprov.testing import fake_agent_command
from nodeprov.testing.conformance import HOSTILE_STRINGS, host_processes_matching, unique_marker, wait_until

pytestmark = pytest.mark.anyio

MARKER = "nodeprov-end-input-test"
GRACE, TERM_GRACE = 0.5, 0.5
MARGIN = 10.0  # scheduling on a loaded 2-core machine


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        yield node


async def spawn_guarded(
    node: NodeHandle,
    *argv: str,
    marker: str = MARKER,
    grace: float = GRACE,
    env: dict[str, str] | None = None,
) -> SpawnedProcess:
    options = SpawnOptions(argv[0], argv[1:], env=env or {})
    return await node.spawn(guard_stdin(options, marker=marker, grace=grace, term_grace=TERM_GRACE))


async def read_all(stream: ByteReceiveStream) -> bytes:
    out = bytearray()
    async for chunk in stream:
        out += chunk
    return bytes(out)


async def read_line(stream: ByteReceiveStream, buffer: bytearray) -> bytes:
    while b"\n" not in buffer:
        buffer += await stream.receive()
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


# -- the relay and the end of input ---------------------------------------------------------

LINES = [
    "{}",
    "",
    "  leading and trailing spaces  ",
    "tab\there\\back\\slash",
    '{"type": "user", "message": {"content": "caf\\u00e9 \u00e9 \u2713 \u65e5\u672c"}}',
    MARKER + " ",  # not the marker: only the exact line is
    " " + MARKER,
    "x" * 200_000,
    "$(touch /tmp/nodeprov-pwned) `id` ; | &",
]


async def test_cat_sees_exactly_the_lines_sent_and_the_marker_is_eof(node: NodeHandle) -> None:
    process = await spawn_guarded(node, "cat")
    sent = "".join(line + "\n" for line in LINES).encode()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            output: list[bytes] = []

            async def collect() -> None:
                output.append(await read_all(process.stdout))

            tg.start_soon(collect)
            await process.stdin.send(sent)
            await process.stdin.send(f"{MARKER}\nafter the marker: dropped\n".encode())
        assert await process.wait() == 0  # cat saw EOF; the channel is still open
    assert output == [sent]
    await process.aclose()


async def test_the_command_runs_on_normally_after_the_marker(node: NodeHandle) -> None:
    # A grace far shorter than the command's work: had the guard taken the marker for a
    # vanished control plane, it would have stopped the command.
    process = await spawn_guarded(node, "sh", "-c", "cat; echo input ended; sleep 1.5; echo after", grace=0.1)
    started = time.monotonic()
    with anyio.fail_after(20):
        await process.stdin.send(f"line\n{MARKER}\n".encode())
        out = await read_all(process.stdout)
        assert await process.wait() == 0
    assert out == b"line\ninput ended\nafter\n"
    assert time.monotonic() - started >= 1.5
    await process.aclose()


async def test_a_channel_eof_without_marker_is_eof_too(node: NodeHandle) -> None:
    process = await spawn_guarded(node, "sh", "-c", "cat; echo done")
    with anyio.fail_after(10):
        await process.stdin.send(b"partial last line")
        await process.stdin.aclose()
        assert await read_all(process.stdout) == b"partial last line\ndone\n"
        assert await process.wait() == 0  # it exited by itself: no signal
    await process.aclose()


# -- a vanished control plane: the channel closes without the marker ------------------------


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("exec sleep {m}", -signal.SIGTERM),  # ignores stdin EOF, dies on SIGTERM
        ("trap '' TERM; sleep {m}", -signal.SIGKILL),  # ignores SIGTERM too
        ("trap 'exit 0' TERM; sleep {m} & wait", 0),  # leaves on SIGTERM, its child does not
    ],
    ids=["sigterm", "sigkill", "leftover-child"],
)
async def test_closing_the_channel_stops_the_command(node: NodeHandle, script: str, status: int) -> None:
    marker = unique_marker()
    process = await spawn_guarded(node, "sh", "-c", script.format(m=marker))

    async def running() -> bool:
        return bool(host_processes_matching(f"sleep {marker}"))

    assert await wait_until(running, 10)
    await process.stdin.send(b"some input\n")
    started = time.monotonic()
    await process.stdin.aclose()  # as when the control plane vanishes: the channel ends
    with anyio.fail_after(GRACE + TERM_GRACE + MARGIN):
        assert await process.wait() == status
    took = time.monotonic() - started
    assert took >= GRACE  # the guard waits for the control plane's own stop policy first
    if status == -signal.SIGKILL:
        assert took >= GRACE + TERM_GRACE

    async def gone() -> bool:
        return not host_processes_matching(marker)  # the command, its children, the guard

    assert await wait_until(gone, TERM_GRACE + MARGIN), host_processes_matching(marker)
    await process.aclose()


# -- arguments, environment and exit status pass through -----------------------------------


async def output_of(process: SpawnedProcess, stdin: bytes = b"") -> bytes:
    with anyio.fail_after(20):
        if stdin:  # (to a command that reads it: once it exits, its stdin may be closed)
            await process.stdin.send(stdin)
        out = await read_all(process.stdout)
        assert await process.wait() == 0
    await process.aclose()
    return out


def environment(out: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in out.decode().split("\0") if item)


def without_mark(env: dict[str, str]) -> dict[str, str]:
    """``env`` less the guard's mark, which must be there: 24 hexadecimal digits."""
    mark = env.pop("NODEPROV_GUARD", "")
    assert len(mark) == 24, mark
    assert int(mark, 16) >= 0
    return env


async def test_hostile_arguments_environment_and_marker_pass_verbatim(node: NodeHandle) -> None:
    out = await output_of(await spawn_guarded(node, "printf", "%s\\0", *HOSTILE_STRINGS))
    assert out.decode().split("\0")[:-1] == HOSTILE_STRINGS

    env = {f"NODEPROV_H{i}": value for i, value in enumerate(HOSTILE_STRINGS)}
    out = await output_of(await spawn_guarded(node, "env", "-0", env=env))
    # Exactly what the process would get without the guard (no PWD or SHLVL of the shell's),
    # and the guard's mark, which finds what the process starts wherever it goes.
    assert without_mark(environment(out)) == {**node.base_env, **env}

    marker = "end $(touch /tmp/nodeprov-pwned) `x` '\" \\ * ~ \u00e9"
    process = await spawn_guarded(node, "cat", marker=marker)
    out = await output_of(process, f"{marker} \n{marker}\nnot relayed\n".encode())
    assert out.decode() == f"{marker} \n"  # only the exact line is the marker
    assert not await anyio.Path("/tmp/nodeprov-pwned").exists()


async def test_a_pwd_and_shlvl_given_are_kept(node: NodeHandle) -> None:
    env = {"PWD": "/logical/path", "SHLVL": "7"}
    out = await output_of(await spawn_guarded(node, "env", "-0", env=env))
    assert without_mark(environment(out)) == {**node.base_env, **env}


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 7", 7), ("kill -KILL $$", -signal.SIGKILL), ("kill -TERM $$", -signal.SIGTERM), ("sleep 0.3", 0)],
)
async def test_the_exit_status_is_the_commands_as_soon_as_it_exits(
    node: NodeHandle, script: str, status: int
) -> None:
    # The channel stays open throughout, and the guard's grace is long: neither delays it.
    process = await spawn_guarded(node, "sh", "-c", f"echo out; echo err >&2; {script}", grace=60)
    with anyio.fail_after(20):
        assert await read_all(process.stdout) == b"out\n"  # the guard holds no stdout...
        assert await read_all(process.stderr) == b"err\n"  # ...nor stderr
        assert await process.wait() == status
    await process.aclose()


async def test_as_a_plain_child_the_guard_holds_no_output_and_leaves_no_trace(tmp_path: Path) -> None:
    # Without a provider: the local provider's supervisor ends whatever a command leaves
    # when it exits, and would hide a guard that lingered or kept the output pipes open.
    marker = unique_marker()  # the guard's own command line carries it
    options = guard_stdin(
        SpawnOptions("sh", ["-c", "read line; echo out; echo err >&2; exit 3"]),
        marker=marker,
        grace=60,
        term_grace=60,
    )
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    async with await anyio.open_process(options.argv, env=env, start_new_session=True) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None

        async def guarding() -> bool:
            return bool(host_processes_matching(marker))

        assert await wait_until(guarding, 10)
        with anyio.fail_after(20):
            await process.stdin.send(b"go\n")
            assert await read_all(process.stdout) == b"out\n"
            assert await read_all(process.stderr) == b"err\n"
            assert await process.wait() == 3
        # (asyncio closes a child's stdin once it has exited and its output is read.)
        await process.stdin.aclose()

        async def gone() -> bool:  # the command is gone: no grace (60 s) to wait out
            return not host_processes_matching(marker)

        assert await wait_until(gone, 20), host_processes_matching(marker)
    assert [path async for path in anyio.Path(tmp_path).iterdir()] == []  # the FIFO directory is gone


async def test_a_missing_command(node: NodeHandle) -> None:
    process = await spawn_guarded(node, "no-such-command-here")
    with anyio.fail_after(10):
        assert await process.wait() == 127
        assert b"no-such-command-here" in await read_all(process.stderr)
    await process.aclose()


def test_bad_settings_are_refused() -> None:
    options = SpawnOptions("cat")
    for marker in ("", "two\nlines", "cr\r"):
        with pytest.raises(ConfigError, match="marker"):
            guard_stdin(options, marker=marker, grace=1, term_grace=1)
    for grace in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="grace"):
            guard_stdin(options, marker="m", grace=grace, term_grace=1)
    guarded = guard_stdin(
        SpawnOptions("cat", cwd="sub", env={"A": "1"}), marker="m", grace=0.25, term_grace=10
    )
    assert guarded.argv[4:7] == ["m", "0.25", "10"]
    assert guarded.argv[-1] == "cat"
    assert (guarded.cwd, dict(guarded.env)) == ("sub", {"A": "1"})


# -- a control plane that is SIGKILLed ----------------------------------------------------

CONTROL_PLANE = """
import json, sys, anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, AssistantMessage
from nodeprov import SpawnOptions, StopPolicy, get_provider
from nodeprov.agents.claude import NodeTransport
from nodeprov.agents._guard import _GUARD_WATCH, guard_stdin

async def main(root, mode, marker, cli):
    # Unguarded, the agent is ended by its supervisor: SIGTERM, SIGKILL after the node's grace.
    graces = {"term_grace": 0.5} if mode == "agent" else {}
    node = await get_provider("local", root=root, **graces).provision()
    if mode == "spawn":
        options = SpawnOptions("sleep", [marker])
        await node.spawn(guard_stdin(options, marker="m", grace=0.5, term_grace=0.5))
        print(json.dumps({"ready": True}), flush=True)
    else:
        steps = [{"ignore_term": True}, {"spawn": ["sleep", marker]}, {"text": "busy"}, {"stall": True}]
        options = ClaudeAgentOptions(cli_path=cli, env={"NODEPROV_FAKE_AGENT": json.dumps(steps)})
        policy = StopPolicy(0.3, 0.5, 5)
        if mode == "agent":  # a local node contains it: no guard
            transport = NodeTransport.for_node(node, options, stop_policy=policy)
        else:  # given only a spawn, the transport guards it
            transport = NodeTransport(node.spawn, options, stop_policy=policy)
        client = ClaudeSDKClient(options=options, transport=transport)
        await client.connect()
        pid = (await client.get_server_info())["pid"]
        await client.query("work")
        async for message in client.receive_messages():
            if isinstance(message, AssistantMessage):
                break
        print(json.dumps({"ready": True, "agent": pid}), flush=True)
    await anyio.sleep(3600)

anyio.run(main, *sys.argv[1:])
"""


@pytest.mark.parametrize(
    ("mode", "bound"), [("spawn", 0.5 + 0.5), ("agent", 0.5), ("guarded agent", 0.3 + 0.5 + 0.5)]
)
async def test_a_sigkilled_control_plane_leaves_nothing_running(
    tmp_path: Path, mode: str, bound: float
) -> None:
    marker = unique_marker()
    argv = [
        sys.executable,
        "-c",
        CONTROL_PLANE,
        str(tmp_path / "nodes"),
        mode,
        marker,
        fake_agent_command(tmp_path),
    ]
    control_plane = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stderr=None)
    try:
        assert control_plane.stdout is not None
        with anyio.fail_after(60):
            ready = json.loads(await read_line(control_plane.stdout, bytearray()))

        async def running() -> bool:
            return bool(host_processes_matching(f"sleep {marker}"))

        assert await wait_until(running, 10)
        agent = ready.get("agent")
        assert agent is None or alive(agent)
    finally:
        killed = time.monotonic()  # before the kill: the guard's graces start after it
        with suppress(ProcessLookupError):
            control_plane.kill()  # SIGKILL: no chance to stop anything
        await control_plane.aclose()

    async def gone() -> bool:
        return not host_processes_matching(marker) and not (agent and alive(agent))

    assert await wait_until(gone, bound + MARGIN), host_processes_matching(marker)
    if mode != "spawn":  # it ignores SIGTERM: only the guard's, or its supervisor's, SIGKILL ends it
        assert time.monotonic() - killed >= bound - 0.2


async def test_the_watcher_never_signals_a_process_that_took_the_commands_pid(tmp_path: Path) -> None:
    """Once the command is gone, its pid may be given to a new process, the leader of a
    group of its own (pids wrap around at 32768 here, within minutes of a busy suite). When
    the channel ends, the watcher must leave that process and its group alone: it is told
    the command's start time, and this one's differs."""
    marker = unique_marker()
    victim = await anyio.open_process(["sleep", marker], start_new_session=True)
    (tmp_path / "guard").mkdir()
    os.mkfifo(tmp_path / "guard" / "in")
    command_side = os.open(tmp_path / "guard" / "in", os.O_RDONLY | os.O_NONBLOCK)
    as_the_guard_starts_it = 'exec 3<&0 </dev/null; exec /bin/sh -c "$@"'
    watcher = await anyio.open_process(
        [
            *("/bin/sh", "-c", as_the_guard_starts_it, "nodeprov-test", _GUARD_WATCH, "nodeprov-guard-watch"),
            *(str(victim.pid), str(tmp_path / "guard"), "end-of-input", "0.2", "0.2", f"mark{os.getpid()}"),
            "1",  # the command's start time: not the victim's
        ]
    )
    try:
        assert watcher.stdin is not None
        await watcher.stdin.aclose()  # the channel ends, as when the control plane vanishes
        with anyio.fail_after(60):
            assert await watcher.wait() == 0
        assert alive(victim.pid)
    finally:
        os.close(command_side)
        victim.kill()
        await victim.aclose()


# -- the sweep for what the command left ----------------------------------------------------

SHIM = """#!/bin/sh
echo "$0" >>"{log}"
if [ -z "{with_z}" ]; then  # a grep without -z, as an old busybox's
  for arg in "$@"; do case $arg in -*z*) exit 2 ;; esac; done
fi
exec {real} "$@"
"""


@pytest.mark.parametrize("grep_has_z", [True, False], ids=["grep -z", "grep without -z"])
async def test_the_sweep_reads_every_environment_at_once(tmp_path: Path, grep_has_z: bool) -> None:
    # The watcher looks for its mark in every process's environment on the node. It did so
    # with a tr and a grep per process: 100 runs ending at once on a host of 500 processes
    # made 100,000 processes. Now one grep reads them all; without -z, one by one still.
    marker = unique_marker()
    shims, log = tmp_path / "bin", tmp_path / "calls"
    shims.mkdir()
    for tool in ("grep", "tr"):
        real = shutil.which(tool, path="/usr/bin:/bin")
        shim = SHIM.format(log=log, with_z="yes" if grep_has_z else "", real=real)
        (shims / tool).write_text(shim)
        (shims / tool).chmod(0o755)
    crowd = [await anyio.open_process(["sleep", "600"]) for _ in range(40)]  # a node of many processes
    options = guard_stdin(
        SpawnOptions("sh", ["-c", f"setsid sleep {marker} & read line; exit 0"]),
        marker="m",
        grace=60,
        term_grace=60,
    )
    env = {"PATH": f"{shims}:/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    try:
        async with await anyio.open_process(options.argv, env=env, start_new_session=True) as process:
            assert process.stdin is not None

            async def left(expected: bool) -> bool:
                return bool(host_processes_matching(f"sleep {marker}")) is expected

            assert await wait_until(lambda: left(True), 10)
            await process.stdin.send(b"go\n")
            await process.stdin.aclose()  # the channel's EOF: the watcher sweeps
            with anyio.fail_after(20):
                assert await process.wait() == 0
            # Without -z it reads each process's environment in turn: on a host crowded by a
            # busy machine (a cluster, two test processes, their containers) that takes a while.
            assert await wait_until(lambda: left(False), 90), host_processes_matching(marker)
    finally:
        for sleeper in crowd:
            sleeper.kill()
            await sleeper.aclose()
    calls = [Path(line).name for line in log.read_text().split()]
    if grep_has_z:
        assert calls.count("tr") == 0
        assert calls.count("grep") <= 6, calls  # the check for -z, then one per round
    else:
        assert calls.count("tr") >= len(crowd), calls.count("tr")


# -- a node that contains its spawns --------------------------------------------------------

UNGUARDED = (
    'setsid sleep "$1" </dev/null >/dev/null 2>&1 & echo "${NODEPROV_GUARD:-unguarded}"; '
    'while read -r line; do echo "got $line"; done; echo ended'
)


async def test_on_a_node_that_contains_its_spawns_an_agent_runs_unguarded(node: NodeHandle) -> None:
    """start_agent on a node that ends what its spawns start (a local one's supervisor): the
    command runs as it is (no guard's mark in its environment), its input ends with its
    stdin, and what it started in a session of its own ends with it, as behind the guard."""
    assert node.contains_spawns
    marker = unique_marker()
    options = SpawnOptions("/bin/sh", ["-c", UNGUARDED, "agent", marker])
    process, end_input = await start_agent(node.spawn, options, StopPolicy(), node=node)
    async with process:
        buffer = bytearray()
        with anyio.fail_after(MARGIN):
            assert await read_line(process.stdout, buffer) == b"unguarded"
            await process.stdin.send(b"one\n")
            assert await read_line(process.stdout, buffer) == b"got one"

            async def started() -> bool:
                return bool(host_processes_matching(f"sleep {marker}"))

            assert await wait_until(started, MARGIN)
            await end_input()
            assert await read_line(process.stdout, buffer) == b"ended"
            assert await process.wait() == 0

    async def gone() -> bool:
        return not host_processes_matching(f"sleep {marker}")

    assert await wait_until(gone, MARGIN)
