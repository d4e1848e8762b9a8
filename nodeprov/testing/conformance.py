"""The conformance suite every provider passes.

Subclass :class:`ProviderConformance` in a test module of the provider and supply two
fixtures, ``provider`` (a configured :class:`~nodeprov.node.NodeProvider`) and
``leftovers`` (an async function ``(node_id) -> list[str]`` describing whatever of that
node still exists on the platform: directories, containers, instances, processes)::

    class TestLocal(ProviderConformance):
        @pytest.fixture
        def provider(self, tmp_path): ...
        @pytest.fixture
        def leftovers(self): ...

Nodes run ``sh``, ``cat``, ``env``, ``printf``, ``pwd``, ``mkdir``, ``ls``, ``stat`` and
``sleep`` from their PATH. Processes are matched by a unique ``sleep`` duration: :meth:`ProviderConformance
.processes_matching` scans this machine's ``/proc`` (which sees local children and
containers alike); a provider whose processes run elsewhere overrides it.

The 1 GiB file round trip runs in a child process that attaches to the node with the
provider's settings (given on its stdin, never its arguments) and bounds its own peak
memory; ``NODEPROV_BIG_FILE_MIB`` sets the size.
"""

from __future__ import annotations

import json
import os
import posixpath
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from nodeprov.errors import (
    CommandNotFoundError,
    ConfigError,
    NodeFileError,
    NodeFileNotFoundError,
    NodeGoneError,
    NodePathError,
    NodeSuspendedError,
    ProvisionError,
    SpawnError,
)
from nodeprov.node import (
    LABEL_EXPIRES_AT,
    LABEL_NODE_ID,
    LABEL_OWNER,
    LABEL_PROVISION,
    LABEL_SESSION_ID,
    NodeConfig,
    NodeHandle,
    NodeProvider,
)
from nodeprov.spawn import SpawnedProcess, SpawnOptions, StopPolicy

__all__ = [
    "HOSTILE_STRINGS",
    "Leftovers",
    "ProviderConformance",
    "host_processes_matching",
    "read_all",
    "run",
    "unique_marker",
    "wait_until",
]

Leftovers = Callable[[str], Awaitable[list[str]]]
AnyProvider = NodeProvider[Any]

HOSTILE_STRINGS = [
    "",
    " ",
    "two words",
    "'single'",
    '"double"',
    "a;touch /tmp/nodeprov-pwned",
    "$(touch /tmp/nodeprov-pwned)",
    "`touch /tmp/nodeprov-pwned`",
    "line\nbreak",
    "-n",
    "--help",
    "back\\slash",
    "tab\there",
    "*",
    "~",
    "$HOME",
    "||&&|",
    "é ✓ 日本",
    "> /tmp/nodeprov-pwned",
]


async def run(node: NodeHandle, *argv: str, stdin: bytes = b"", **kwargs: object) -> tuple[int, bytes, bytes]:
    """Run ``argv`` on ``node`` to completion; return (exit status, stdout, stderr)."""
    options = SpawnOptions(argv[0], argv[1:], **kwargs)  # type: ignore[arg-type]
    out, err = bytearray(), bytearray()
    async with await node.spawn(options) as process:

        async def feed() -> None:
            if stdin:
                await process.stdin.send(stdin)
            await process.stdin.aclose()

        async def collect(stream: str, into: bytearray) -> None:
            async for chunk in getattr(process, stream):
                into += chunk

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed)
            tg.start_soon(collect, "stdout", out)
            tg.start_soon(collect, "stderr", err)
        code = await process.wait()
    return code, bytes(out), bytes(err)


def _outside(node: NodeHandle) -> str | None:
    """A path next to the node's outermost file root, outside every root; None when a root
    is ``/`` (the node is a whole machine: nothing is outside it)."""
    if "/" in node.file_roots:
        return None
    return posixpath.join(posixpath.dirname(min(node.file_roots, key=len)), "nodeprov-outside")


async def read_all(node: NodeHandle, path: str) -> bytes:
    """The whole content of ``path`` on ``node``."""
    data = bytearray()
    async with node.read_file(path) as chunks:
        async for chunk in chunks:
            data += chunk
    return bytes(data)


def host_processes_matching(marker: str) -> list[str]:
    """``pid: command line`` of every process on this machine whose command line has ``marker``.

    Zombies (exited, not yet reaped) count as gone.
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


async def wait_until(condition: Callable[[], Awaitable[bool]], within: float) -> bool:
    """Poll ``condition`` (state outside this process: no event to wait on) until it holds."""
    with anyio.move_on_after(within):
        while not await condition():  # noqa: ASYNC110 - polling an outside process table
            await anyio.sleep(0.05)
        return True
    return False


def unique_marker() -> str:
    """A unique ``sleep`` duration, findable in a process list."""
    return f"{900000 + secrets.randbelow(99999)}.{secrets.randbelow(10**6):06d}"


@pytest.mark.anyio
class ProviderConformance:
    """Provider-independent behaviour; see the module docstring for the fixtures."""

    timeout = 60.0

    def big_file_mib(self, provider: AnyProvider) -> int:
        """MiB of the big-file round trip with ``provider`` (``NODEPROV_BIG_FILE_MIB`` wins).
        A variant of a provider whose data path another variant already moved a GiB
        through may take less: any size over the 100 MiB memory bound shows streaming."""
        return 1024

    async def processes_matching(self, marker: str) -> list[str]:
        """Processes on the node's machine whose command line contains ``marker``."""
        return host_processes_matching(marker)

    async def assert_no_process(self, marker: str) -> None:
        """Processes get reaped asynchronously: give them a moment, then insist."""

        async def gone() -> bool:
            return not await self.processes_matching(marker)

        await wait_until(gone, 10)
        assert await self.processes_matching(marker) == []

    # -- provisioning and labels -------------------------------------------------------

    async def test_provision_labels_and_destroy(self, provider: AnyProvider, leftovers: Leftovers) -> None:
        config = NodeConfig(session_id="sess-1", labels={"team": "x"})
        node = await provider.provision(config)
        try:
            assert node.node_id == config.node_id
            assert node.provider == provider.name
            assert node.labels[LABEL_NODE_ID] == config.node_id
            assert node.labels[LABEL_SESSION_ID] == "sess-1"
            assert node.labels[LABEL_OWNER] == config.owner
            assert LABEL_EXPIRES_AT in node.labels
            assert node.labels["team"] == "x"
            assert await leftovers(node.node_id) != []
        finally:
            await node.destroy()
        assert node.destroyed
        assert await leftovers(node.node_id) == []

    async def test_provisioning_an_existing_id_fails_and_leaves_that_node(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        marker = unique_marker()
        config = NodeConfig(labels={"purpose": "first"})
        node = await provider.provision(config)
        try:
            process = await node.spawn(SpawnOptions("sleep", [marker]))

            async def command() -> list[str]:  # the command itself, not a shell that execs it
                return [
                    line
                    for line in await self.processes_matching(marker)
                    if line.endswith(f": sleep {marker}")
                ]

            async def command_runs() -> bool:
                return bool(await command())

            assert await wait_until(command_runs, self.timeout), "the command never ran"
            running = await command()
            await node.write_file("mine.txt", b"the first node's file")
            with pytest.raises(ProvisionError, match=config.node_id):
                await provider.provision(NodeConfig(node_id=config.node_id, labels={"purpose": "second"}))
            assert process.returncode is None
            assert await command() == running
            assert await read_all(node, "mine.txt") == b"the first node's file"
            listed = [info for info in await provider.list_nodes() if info.node_id == config.node_id]
            assert [info.labels["purpose"] for info in listed] == ["first"]
            assert (await run(node, "true"))[0] == 0
        finally:
            await node.destroy()
        await self.assert_no_process(marker)
        assert await leftovers(config.node_id) == []

    async def test_a_retried_provision_adopts_its_own_node(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        config = NodeConfig(labels={"purpose": "retried"})
        first = await provider.provision(config)
        try:
            again = await provider.provision(config)  # the same provision, as after a crash
            assert again.node_id == config.node_id
            assert again.labels[LABEL_PROVISION] == config.provision_mark
            assert (await run(again, "sh", "-c", "echo adopted"))[1] == b"adopted\n"
            assert [info.node_id for info in await provider.list_nodes()].count(config.node_id) == 1
            await again.destroy()
            assert await leftovers(config.node_id) == []
        finally:
            await first.destroy()

    async def test_destroy_is_idempotent_and_ends_spawning(self, provider: AnyProvider) -> None:
        node = await provider.provision()
        await node.destroy()
        await node.destroy()
        async with node:  # __aexit__ destroys once more
            pass
        with pytest.raises(NodeGoneError):
            await node.spawn(SpawnOptions("true"))

    async def test_list_and_attach(self, provider: AnyProvider, leftovers: Leftovers) -> None:
        config = NodeConfig(labels={"purpose": "attach"})
        node = await provider.provision(config)
        try:
            listed = {info.node_id: info for info in await provider.list_nodes()}
            assert listed[node.node_id].labels[LABEL_OWNER] == config.owner
            assert listed[node.node_id].labels["purpose"] == "attach"
            attached = await provider.attach(node.node_id)
            assert attached.labels[LABEL_NODE_ID] == node.node_id
            _, out, _ = await run(attached, "sh", "-c", "echo from the attached handle")
            assert out == b"from the attached handle\n"
            await attached.destroy()
            assert await leftovers(node.node_id) == []
        finally:
            await node.destroy()  # already gone: must be quiet
        with pytest.raises(NodeGoneError):
            await provider.attach(node.node_id)
        assert node.node_id not in {info.node_id for info in await provider.list_nodes()}

    async def test_garbage_collection_spares_live_owners(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        now = datetime.now(UTC)
        short = await provider.provision(NodeConfig(ttl=timedelta(hours=1)))
        orphan = await provider.provision(NodeConfig(owner=f"{socket.gethostname()}:999999999:1"))
        kept = await provider.provision(NodeConfig(ttl=timedelta(hours=10)))
        try:
            would = await provider.collect_garbage(now=now + timedelta(hours=2), dry_run=True)
            assert {short.node_id, orphan.node_id} <= {info.node_id for info in would.reaped}
            assert await leftovers(short.node_id) != []
            report = await provider.collect_garbage(now=now + timedelta(hours=2))
            reaped = {info.node_id for info in report.reaped}
            assert report.failed == []
            assert {short.node_id, orphan.node_id} <= reaped
            assert kept.node_id not in reaped
            assert await leftovers(short.node_id) == []
            assert await leftovers(orphan.node_id) == []
            assert (await run(kept, "true"))[0] == 0
        finally:
            for node in (short, orphan, kept):
                await node.destroy()

    # -- processes ---------------------------------------------------------------------

    async def test_stdout_stderr_and_exit_code(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            code, out, err = await run(node, "sh", "-c", "echo out; echo err >&2; exit 3")
            assert (code, out, err) == (3, b"out\n", b"err\n")
            assert (await run(node, "true"))[0] == 0

    async def test_stdin_round_trip_binary_and_large(self, provider: AnyProvider) -> None:
        payload = bytes(range(256)) * 8192  # 2 MiB, every byte value
        async with await provider.provision() as node:
            with anyio.fail_after(self.timeout):
                code, out, _ = await run(node, "cat", stdin=payload)
            assert code == 0
            assert out == payload

    async def test_env_is_exact(self, provider: AnyProvider, monkeypatch: pytest.MonkeyPatch) -> None:
        canary = f"canary-{secrets.token_hex(8)}"
        monkeypatch.setenv("NODEPROV_CANARY_SECRET", canary)
        asked = {"NODEPROV_A": "plain", "NODEPROV_B": "with\nnewline and 'quotes' $(x) ;"}
        async with await provider.provision() as node:
            code, out, _ = await run(node, "env", "-0", env=asked)
            assert code == 0
            seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
            assert canary.encode() not in out
            assert "NODEPROV_CANARY_SECRET" not in seen
            for name, value in asked.items():
                assert seen[name] == value
            unexpected = set(seen) - set(asked) - set(node.base_env)
            assert unexpected == set(), f"variables nobody asked for: {unexpected}"
            for name, value in node.base_env.items():
                assert seen.get(name) == value

    async def test_cwd(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            _, out, _ = await run(node, "pwd")
            assert out.decode().strip() == node.workdir
            assert (await run(node, "mkdir", "-p", "sub dir"))[0] == 0
            _, out, _ = await run(node, "pwd", cwd="sub dir")
            assert out.decode().strip() == f"{node.workdir.rstrip('/')}/sub dir"
            with pytest.raises(SpawnError):
                await run(node, "pwd", cwd="no-such-dir")

    async def test_command_not_found(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            with pytest.raises(CommandNotFoundError):
                await run(node, "nodeprov-no-such-command")

    async def test_hostile_arguments_and_env_reach_the_process_verbatim(self, provider: AnyProvider) -> None:
        env = {f"NODEPROV_H{i}": value for i, value in enumerate(HOSTILE_STRINGS)}
        async with await provider.provision() as node:
            code, out, _ = await run(node, "printf", "%s\\0", *HOSTILE_STRINGS)
            assert code == 0
            assert out.decode().split("\0")[:-1] == HOSTILE_STRINGS
            code, out, _ = await run(node, "env", "-0", env=env)
            seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
            assert {k: seen[k] for k in env} == env
            code, out, _ = await run(node, "sh", "-c", "test -e /tmp/nodeprov-pwned && echo PWNED")
            assert b"PWNED" not in out

    async def test_concurrent_spawns(self, provider: AnyProvider) -> None:
        results: dict[int, bytes] = {}
        async with await provider.provision() as node:

            async def one(i: int) -> None:
                _, out, _ = await run(node, "sh", "-c", 'sleep 0.2; printf "%s" "$N"', env={"N": str(i)})
                results[i] = out

            with anyio.fail_after(self.timeout):
                async with anyio.create_task_group() as tg:
                    for i in range(12):
                        tg.start_soon(one, i)
        assert results == {i: str(i).encode() for i in range(12)}

    async def test_environment_names_that_are_not_shell_names(self, provider: AnyProvider) -> None:
        asked = {"a-b": "dash", "x.y": "dot", "1X": "digit", "sp ace": "space", "NODEPROV_OK": "plain"}
        async with await provider.provision() as node:
            code, out, _ = await run(node, "env", "-0", env=asked)
            assert code == 0
            seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
            assert {name: seen.get(name) for name in asked} == asked
            assert set(seen) - set(asked) - set(node.base_env) == set()

    async def test_arguments_not_in_utf8_reach_the_process_as_bytes(self, provider: AnyProvider) -> None:
        raw = [b"\xff\xfe", b"caf\xe9", b"ok \xe2\x9c\x93", b"\x80 and \\0101 and %b"]
        async with await provider.provision() as node:
            code, out, _ = await run(node, "printf", "%s\\0", *map(os.fsdecode, raw))
            assert code == 0
            assert out.split(b"\0")[:-1] == raw

    async def test_a_process_that_closes_stdout_and_keeps_running(self, provider: AnyProvider) -> None:
        marker = unique_marker()
        async with await provider.provision() as node:
            process = await node.spawn(
                SpawnOptions("sh", ["-c", f"printf before; exec >&-; echo after >&2; exec sleep {marker}"])
            )
            async with process:
                await process.stdin.aclose()
                out = bytearray()
                with anyio.fail_after(self.timeout):
                    async for chunk in process.stdout:  # ends: nothing holds stdout any more
                        out += chunk
                    assert await process.stderr.receive() == b"after\n"
                assert out == b"before"
                assert process.returncode is None
                assert await self.processes_matching(marker) != []
                process.stop_policy = StopPolicy(eof_grace=0, term_grace=5)
            await self.assert_no_process(marker)

    async def test_cwd_outside_the_node_is_refused(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            with pytest.raises(NodePathError):
                await node.spawn(SpawnOptions("pwd", cwd="bad\0path"))
            if outside := _outside(node):
                with pytest.raises(NodePathError):
                    await node.spawn(SpawnOptions("pwd", cwd=outside))
                with pytest.raises(NodePathError):
                    await node.spawn(SpawnOptions("pwd", cwd="../" * 64))

    # -- files -------------------------------------------------------------------------

    async def test_files_round_trip_binary_empty_and_streamed(self, provider: AnyProvider) -> None:
        payload = bytes(range(256)) * 4099  # every byte value, not a multiple of any buffer

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(payload), 65521):
                yield payload[start : start + 65521]

        async with await provider.provision() as node:
            await node.write_file("every-byte.bin", payload)
            assert await read_all(node, "every-byte.bin") == payload
            await node.write_file("streamed.bin", pieces())
            assert await read_all(node, "streamed.bin") == payload
            await node.write_file("empty", b"")
            assert await read_all(node, "empty") == b""
            await node.write_file("empty", b"replaced")  # an existing file is replaced whole
            assert await read_all(node, node.node_path("empty")) == b"replaced"

    async def test_file_modes_and_parents(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            await node.write_file("private", b"x")
            await node.write_file("deep/er/script.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
            paths = ["private", "deep", "deep/er", "deep/er/script.sh"]
            _, out, _ = await run(node, "stat", "-c", "%a %n", *paths)
            assert out.decode().split("\n")[:-1] == [
                "600 private",
                "700 deep",
                "700 deep/er",
                "755 deep/er/script.sh",
            ]
            assert await run(node, "./deep/er/script.sh") == (0, b"ran\n", b"")

    async def test_hostile_file_names(self, provider: AnyProvider) -> None:
        names = [name for name in HOSTILE_STRINGS if name.strip() and not name.endswith("/")]
        async with await provider.provision() as node:
            for index, name in enumerate(names):
                await node.write_file(f"hostile/{name}", f"{index}".encode())
            for index, name in enumerate(names):
                assert await read_all(node, f"hostile/{name}") == f"{index}".encode(), name
            _, out, _ = await run(node, "sh", "-c", "test -e /tmp/nodeprov-pwned && echo PWNED")
            assert b"PWNED" not in out

    async def test_file_errors(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            with pytest.raises(NodeFileNotFoundError):
                await read_all(node, "no-such-file")
            await node.write_file("dir/file", b"x")
            with pytest.raises(NodeFileError):
                await read_all(node, "dir")
            with pytest.raises(NodeFileError):
                await node.write_file("dir", b"a directory is in the way")
            with pytest.raises(NodeFileError):
                await node.write_file("dir/file/below", b"a file is in the way")
            for bad in ("", "x\0y"):
                with pytest.raises(NodePathError):
                    await node.write_file(bad, b"x")
                with pytest.raises(NodePathError):
                    await read_all(node, bad)
            if outside := _outside(node):
                with pytest.raises(NodePathError):
                    await node.write_file(outside, b"x")
                with pytest.raises(NodePathError):
                    await node.write_file("../" * 64 + "nodeprov-outside", b"x")
                with pytest.raises(NodePathError):
                    await read_all(node, outside)

    async def test_a_cut_write_leaves_the_old_file_and_no_partial(self, provider: AnyProvider) -> None:
        class CutError(Exception):
            pass

        async def cut() -> AsyncIterator[bytes]:
            yield b"new " * 100_000
            raise CutError

        async def stalled() -> AsyncIterator[bytes]:
            yield b"new " * 100_000
            await anyio.sleep_forever()

        async with await provider.provision() as node:
            await node.write_file("kept/file", b"old")
            with pytest.raises(CutError):
                await node.write_file("kept/file", cut())
            with anyio.move_on_after(1):  # cancelled half-way: the same
                await node.write_file("kept/file", stalled())
            assert await read_all(node, "kept/file") == b"old"
            _, out, _ = await run(node, "ls", "-A", "kept")
            assert out == b"file\n"

    async def test_a_big_file_round_trip_in_bounded_memory(self, provider: AnyProvider) -> None:
        mib = int(os.environ.get("NODEPROV_BIG_FILE_MIB", str(self.big_file_mib(provider))))
        async with await provider.provision() as node:
            request = {
                "provider": provider.name,
                "settings": provider.settings.model_dump(mode="json"),
                "node_id": node.node_id,
                "mib": mib,
            }
            with anyio.fail_after(max(self.timeout, mib)):
                done = await anyio.run_process(
                    [sys.executable, "-m", "nodeprov.testing._big_file"],
                    input=json.dumps(request).encode(),
                    check=False,
                )
            assert done.returncode == 0, done.stderr.decode(errors="replace")
            report = json.loads(done.stdout)
            assert report["written"] == report["read"], "the file came back different"
            # Streamed: a 1 GiB round trip adds little to what the process holds once its
            # provider's client and connection are made (boto3 alone is 100 MiB or more).
            assert report["peak_rss_mib"] - report["warm_rss_mib"] < 100, report

    # -- suspend and wake (an optional capability) ----------------------------------------

    async def test_suspend_keeps_files_and_wake_brings_the_node_back(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        async with await provider.provision() as node:
            if not node.can_suspend:
                with pytest.raises(ConfigError):
                    await node.suspend()
                await node.wake()  # nothing to wake: a no-op
                assert (await run(node, "true"))[0] == 0
                return
            await node.write_file("kept.txt", b"across a suspend")
            marker = unique_marker()
            sleeper = await node.spawn(SpawnOptions("sleep", [marker]))
            with anyio.fail_after(self.timeout * 3):
                await node.suspend()
                await node.suspend()  # idempotent
                assert node.suspended
                with pytest.raises(NodeSuspendedError):
                    await node.spawn(SpawnOptions("true"))
                attached = await provider.attach(node.node_id)
                assert attached.suspended
                with pytest.raises(NodeSuspendedError):
                    await attached.spawn(SpawnOptions("true"))
                await attached.wake()
                await node.wake()  # idempotent, and this handle learns it
            assert not node.suspended
            assert await read_all(node, "kept.txt") == b"across a suspend"
            assert (await run(node, "true"))[0] == 0
            await sleeper.aclose()  # released by the suspend: quiet
            await node.suspend()
        assert await leftovers(node.node_id) == []  # a suspended node is destroyed all the same

    # -- stopping ----------------------------------------------------------------------

    async def test_stop_policy_escalates_and_takes_children(self, provider: AnyProvider) -> None:
        marker = unique_marker()
        async with await provider.provision() as node:
            process = await node.spawn(
                SpawnOptions("sh", ["-c", f'trap "" TERM; sleep {marker} & sleep {marker}; wait'])
            )
            process.stop_policy = StopPolicy(eof_grace=0.2, term_grace=0.5, kill_grace=5)
            await self._until_running(marker, 2)
            with anyio.fail_after(process.stop_policy.total + 10):
                await process.aclose()
            assert process.returncode is not None
            await self.assert_no_process(marker)
            await process.aclose()  # idempotent

    async def test_destroy_with_a_live_process(self, provider: AnyProvider, leftovers: Leftovers) -> None:
        marker = unique_marker()
        node = await provider.provision()
        process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & sleep {marker}"]))
        await self._until_running(marker, 2)
        with anyio.fail_after(self.timeout):
            await node.destroy()
            code = await process.wait()
        assert code != 0
        await self.assert_no_process(marker)
        assert await leftovers(node.node_id) == []

    async def test_cancelled_provision_leaves_nothing(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        for delay in (0.0, 0.001, 0.005, 0.02, 0.1, 0.5):
            config = NodeConfig()
            with anyio.move_on_after(delay) as scope:
                node = await provider.provision(config)
            if not scope.cancelled_caught:
                await node.destroy()
            assert await leftovers(config.node_id) == [], f"after a cancel at {delay}s"

    async def test_cancelled_spawn_leaves_nothing(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            for delay in (0.0, 0.0005, 0.002, 0.01, 0.05):
                marker = unique_marker()
                process: SpawnedProcess | None = None
                with anyio.move_on_after(delay):
                    process = await node.spawn(SpawnOptions("sleep", [marker]))
                if process is not None:
                    await process.aclose()
                await self.assert_no_process(marker)
            assert (await run(node, "true"))[0] == 0  # the node still works

    async def _until_running(self, marker: str, count: int) -> None:
        async def running() -> bool:
            return len(await self.processes_matching(marker)) >= count

        assert await wait_until(running, self.timeout), f"{count} processes never ran"
