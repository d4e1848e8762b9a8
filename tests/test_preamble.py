"""The exec kit's preamble run by this machine's /bin/sh, as an SSH session or a pod's exec
runs it: exactly the environment asked for reaches the command, and the environment is read
whole before the preamble may end early, so the control plane's write of it never meets a
closed channel (a missing working directory is reported, not taken for a lost node). And its
prepared form, started ahead of its command: it runs exactly what it is told, and nothing
unless told everything."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from nodeprov.exec import STDOUT, Demux
from nodeprov.exec.preamble import (
    PREAMBLE,
    PREPARED_PREAMBLE,
    REPORT_NO_CWD,
    REPORT_OK,
    REPORT_READY,
    environment_block,
    read_report,
)
from nodeprov.exec.prepared import prepared_request, start_prepared
from nodeprov.exec.shell import START_TIME_FUNCTION, encode_arguments
from nodeprov.node.ownership import process_start_time
from nodeprov.spawn import SpawnOptions

pytestmark = pytest.mark.anyio


async def preamble(argv: list[str], cwd: Path, env: dict[str, str], *, cut: int = 0) -> tuple[bytes, int]:
    """Run ``argv`` under the preamble with ``env`` written to its stdin first, as a channel
    does (the whole block less its last ``cut`` bytes, then EOF); its stdout and exit status."""
    command = ["/bin/sh", "-c", PREAMBLE, "nodeprov-test", str(cwd), "", *encode_arguments(argv)]
    with anyio.fail_after(60):
        async with await anyio.open_process(command, env={"LEAKED": "from the channel"}) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            block = environment_block(env)
            await process.stdin.send(block[: len(block) - cut])
            await process.stdin.aclose()
            said = b"".join([chunk async for chunk in process.stdout])
            return said, await process.wait()


async def test_the_command_gets_exactly_the_environment_asked_for(tmp_path: Path) -> None:
    env = {"A": "one\ntwo", "IFS": ":", "EMPTY": "", "WEIRD": "$(id) `id` \\ ' \""}
    said, status = await preamble(["/usr/bin/env", "-0"], tmp_path, env)
    assert status == 0
    report, _, rest = said.partition(b"\n")
    assert report.startswith(REPORT_OK)
    got = dict(entry.split("=", 1) for entry in rest.decode().split("\0") if entry)
    assert got == env


async def test_the_environment_is_read_whole_before_the_preamble_may_end(tmp_path: Path) -> None:
    """A missing directory is reported only once the whole environment is read (its writer
    never meets a closed channel, which would read as a lost node); a channel closed before
    the environment's end is a spawn given up: nothing is said, nothing runs."""
    env = {f"VAR_{index}": "x" * 100 for index in range(200)}  # escaped: 100 KB, past a pipe's 64 KiB
    assert await preamble(["true"], tmp_path / "no-such-dir", env) == (REPORT_NO_CWD + b"\n", 126)
    assert await preamble(["true"], tmp_path / "no-such-dir", env, cut=1) == (b"", 124)
    assert await preamble(["touch", str(tmp_path / "ran")], tmp_path, env, cut=1) == (b"", 124)
    assert not (tmp_path / "ran").exists()


class _ProcessOutput(Demux):
    """A local process's stdout as an exec channel's (stderr unused)."""

    def __init__(self, process: Process) -> None:
        super().__init__()
        self._process = process

    async def _pull(self, kind: int) -> None:
        assert self._process.stdout is not None
        try:
            self._deliver(STDOUT, await self._process.stdout.receive())
        except anyio.EndOfStream:
            self._close()

    async def aclose(self) -> None:
        self._close()


def prepared_shell() -> list[str]:
    return ["/bin/sh", "-c", PREPARED_PREAMBLE, "nodeprov-test"]


async def test_a_prepared_preamble_runs_exactly_the_command_and_environment_it_is_told(
    tmp_path: Path,
) -> None:
    """Arguments with line breaks, not in UTF-8, empty or shell-like, and an environment of
    the same, reach the command as a spawn's do: nothing of the channel's own environment."""
    args = ["a\nb", "", "$(id) `id`", " lead", "trail ", "\\", "x\udcffy", "ünï", "\n"]
    env = {"A": "one\ntwo", "IFS": ":", "EMPTY": "", "WEIRD": "$(id) `id` \\ ' \""}
    script = 'print join("", map { "$_\\0" } @ARGV), "\\1", map { "$_=$ENV{$_}\\0" } keys %ENV'
    argv = ["perl", "-e", script, "--", *args]
    request = prepared_request(str(tmp_path), "", argv, env, relay=False)
    assert request is not None
    with anyio.fail_after(60):
        async with await anyio.open_process(prepared_shell(), env={"LEAKED": "from the channel"}) as process:
            assert process.stdin is not None
            output = _ProcessOutput(process)
            assert await start_prepared(output, process.stdin.send, request)
            await process.stdin.aclose()
            report = await read_report(output, SpawnOptions(argv[0]), "the test")
            said = await output.collect(STDOUT)
            assert await process.wait() == 0
    assert report.pid == process.pid  # the preamble exec'd the command: one process
    printed, _, environment = said.partition(b"\1")
    assert printed.split(b"\0")[:-1] == [os.fsencode(arg) for arg in args]
    got = dict(entry.split("=", 1) for entry in environment.decode().split("\0") if entry)
    assert got == env


@pytest.mark.parametrize("cut", ["nothing", "count", "arguments", "environment", "the start"])
async def test_a_prepared_preamble_not_told_everything_runs_nothing(tmp_path: Path, cut: str) -> None:
    """A channel that ends before the request's end, or before the line that starts it,
    ends the preamble (status 124) with nothing run: what lets the control plane spawn
    again the usual way."""
    ran = tmp_path / "ran"
    request = prepared_request(str(tmp_path), "", ["touch", str(ran)], {"A": "b"}, relay=False)
    assert request is not None
    count_end = request.index(b"\n") + 1
    env_start = request.index(b"A=")
    sent = {
        "nothing": b"",
        "count": request[: count_end - 1],
        "arguments": request[: count_end + 3],
        "environment": request[: env_start + 2],
        "the start": request,
    }[cut]
    with anyio.fail_after(60):
        async with await anyio.open_process(prepared_shell()) as process:
            assert process.stdin is not None
            assert process.stdout is not None
            await process.stdin.send(sent)
            await process.stdin.aclose()
            said = b"".join([chunk async for chunk in process.stdout])
            assert await process.wait() == 124
    assert said == (REPORT_READY + b"\n" if cut == "the start" else b"")
    assert not ran.exists()


async def test_a_prepared_channel_that_ended_is_not_started() -> None:
    with anyio.fail_after(60):
        async with await anyio.open_process(["true"]) as process:
            assert process.stdin is not None
            request = prepared_request("/", "", ["true"], {}, relay=False)
            assert request is not None
            assert not await start_prepared(_ProcessOutput(process), process.stdin.send, request)


def test_a_request_whose_cwd_cannot_go_on_a_line_is_refused() -> None:
    assert prepared_request("/a\nb", "", ["true"], {}, relay=False) is None
    assert prepared_request("/a\udcff", "", ["true"], {}, relay=False) is None
    assert prepared_request("/", "rec\nord", ["true"], {}, relay=False) is None
    # The count, the relay's flag; the cwd, no record, no argument spelt, the command; no environment.
    assert prepared_request("/", "", ["true"], {}, relay=True) == b"4 1\n/\n\n\ntrue\n\n"


@pytest.mark.parametrize("shell", ["/bin/dash", "/bin/bash"])
@pytest.mark.parametrize("name", ["sleep", "a b", "x) 1 2 (y", "z) 3\n4 ) w", ") ) )"])
def test_a_start_time_read_by_the_shell_is_the_one_in_proc(tmp_path: Path, shell: str, name: str) -> None:
    """``__np_start_of`` against Python's reading of ``/proc/PID/stat``, for command names
    (what the kernel puts between the parentheses) made to mislead it: spaces, parentheses,
    a line break; and nothing at all for a pid that is not there."""
    program = tmp_path / name
    program.symlink_to("/bin/sleep")
    with subprocess.Popen([str(program), "30"]) as sleeper:
        try:
            _wait_for_exec(sleeper.pid, name[:15])  # the kernel's own name for it, as the test intends
            expected = process_start_time(sleeper.pid)
            said = _start_time_by(shell, sleeper.pid)
        finally:
            sleeper.kill()
    assert expected is not None
    assert said == (f"[{expected}]", "")
    assert _start_time_by(shell, sleeper.pid) == ("[]", "")


def _wait_for_exec(pid: int, comm: str) -> None:
    """Until ``pid`` has exec'd and the kernel names it ``comm`` (before, it is a copy of
    this process); polled: no event tells of another process's exec."""
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}/comm").read_text()[:-1] != comm:
        assert time.monotonic() < deadline, Path(f"/proc/{pid}/comm").read_text()
        time.sleep(0.01)


def _start_time_by(shell: str, pid: int) -> tuple[str, str]:
    """What ``__np_start_of PID`` prints under ``shell`` (bracketed), and its stderr."""
    script = f'{START_TIME_FUNCTION}printf "[%s]" "$(__np_start_of "$1")"'
    done = subprocess.run([shell, "-c", script, "t", str(pid)], capture_output=True, check=True, text=True)
    return done.stdout, done.stderr
