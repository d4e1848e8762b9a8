"""The SSH provider's remote command line against a real OpenSSH sshd: hostile arguments and
environment values reach the process verbatim, run nothing, and no value is ever on a
command line the host's ``ps`` shows. Property-based, over one shared connection."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.to_thread
import asyncssh
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeprov.exec import REPORT_OK, environment_block
from nodeprov_ssh.remote import command_line

from .sshd import Sshd

pytestmark = pytest.mark.anyio

SENTINEL_FILE = "/tmp/nodeprov-ssh-sentinel"
HOSTILE = [
    "a b",
    "'",
    '"',
    f"$(touch {SENTINEL_FILE})",
    f"`touch {SENTINEL_FILE}`",
    f"x; touch {SENTINEL_FILE}",
    "line1\nline2",
    "-n",
    "--",
    "héllo ✓",
    "",
    "\\0101 %b %s",
    "*",
    "~",
    os.fsdecode(b"\xff\xfe not utf-8"),
]
# Text as the shell sees it: any character but NUL (which no argument or value can hold).
ANY_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
# A variable name: anything but "=" and NUL; most are not shell names (perl sets those).
ANY_NAME = st.text(
    st.characters(exclude_characters="\x00=", exclude_categories=["Cs"]), min_size=1, max_size=12
).filter(lambda name: name != "PATH")


@pytest.fixture(params=["root", "nodeprov-test"])
async def connection(
    request: pytest.FixtureRequest, sshd: Sshd
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    async with asyncssh.connect(
        sshd.host,
        port=sshd.port,
        username=request.param,
        client_keys=[str(sshd.client_key)],
        known_hosts=str(sshd.known_hosts),
        agent_path=None,
        config=[],
    ) as opened:
        yield opened


async def run(
    connection: asyncssh.SSHClientConnection, argv: list[str], env: dict[str, str], cwd: str = "/tmp"
) -> tuple[int, bytes]:
    process = await connection.create_process(command_line(argv, cwd), encoding=None)
    process.stdin.write(environment_block(env))
    process.stdin.write_eof()
    out = await process.stdout.read()
    await process.wait()
    report, _, rest = out.partition(b"\n")
    assert report.startswith(REPORT_OK), out
    return process.exit_status or 0, rest


async def test_hostile_arguments_and_values_arrive_verbatim(connection: asyncssh.SSHClientConnection) -> None:
    env = {"PATH": "/usr/bin:/bin", **{f"V{i}": v for i, v in enumerate(HOSTILE) if "\udcff" not in v}}
    code, out = await run(connection, ["printf", "%s\\0", *HOSTILE], env)
    assert code == 0
    assert out.split(b"\0")[:-1] == [os.fsencode(arg) for arg in HOSTILE]
    code, out = await run(connection, ["env", "-0"], env)
    seen = dict(item.split(b"=", 1) for item in out.split(b"\0") if item)
    assert seen == {name.encode(): value.encode() for name, value in env.items()}
    assert not await anyio.Path(SENTINEL_FILE).exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(ANY_TEXT, max_size=6), variables=st.dictionaries(ANY_NAME, ANY_TEXT, max_size=4))
async def test_any_text_arrives_verbatim(
    connection: asyncssh.SSHClientConnection, args: list[str], variables: dict[str, str]
) -> None:
    env = {"PATH": "/usr/bin:/bin", **variables}
    _, out = await run(
        connection, ["printf", "%s\\0", "first", *args], env
    )  # printf runs its format once at least
    assert out.split(b"\0")[:-1] == [b"first", *(arg.encode() for arg in args)]
    _, out = await run(connection, ["env", "-0"], env)
    assert dict(item.split(b"=", 1) for item in out.split(b"\0") if item) == {
        name.encode(): value.encode() for name, value in env.items()
    }
    assert not await anyio.Path(SENTINEL_FILE).exists()


@pytest.mark.parametrize("name", ["API_KEY", "api-key.not a shell name"])
async def test_no_value_on_any_command_line(connection: asyncssh.SSHClientConnection, name: str) -> None:
    secret = "sk-ssh-canary-" + os.urandom(6).hex()
    process = await connection.create_process(command_line(["cat"], "/tmp"), encoding=None)
    process.stdin.write(environment_block({name: secret, "PATH": "/usr/bin:/bin"}))
    report = await process.stdout.readline()
    assert report.startswith(REPORT_OK)
    try:  # cat runs, its environment set: nothing on the host shows the value as an argument
        assert not [
            argv for argv in await anyio.to_thread.run_sync(_command_lines) if secret.encode() in argv
        ]
    finally:
        process.stdin.write_eof()  # cat ends
        await process.wait()


def _command_lines() -> list[bytes]:
    """Every process's argument vector on the host (what ``ps`` shows)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes())
            except OSError:  # ended meanwhile
                continue
    return found
