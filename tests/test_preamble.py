"""The exec kit's preamble run by this machine's /bin/sh, as an SSH session or a pod's exec
runs it: exactly the environment asked for reaches the command, and the environment is read
whole before the preamble may end early, so the control plane's write of it never meets a
closed channel (a missing working directory is reported, not taken for a lost node)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from nodeprov.exec.preamble import PREAMBLE, REPORT_NO_CWD, REPORT_OK, environment_block
from nodeprov.exec.shell import encode_arguments

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
