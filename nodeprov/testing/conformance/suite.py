"""The provider conformance suite: provisioning and labels, ownership and garbage
collection, processes and their streams, suspend and wake, cancellation (the file tests are
in :mod:`~nodeprov.testing.conformance.files`)."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from nodeprov.errors import (
    CommandNotFoundError,
    ConfigError,
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
)
from nodeprov.spawn import SpawnOptions, StopPolicy

from .files import FileConformance
from .keeper import KeeperConformance
from .kit import (
    HOSTILE_STRINGS,
    AnyProvider,
    Leftovers,
    host_processes_matching,
    outside_of,
    read_all,
    run,
    unique_marker,
    wait_until,
)
from .prepared import PreparedConformance
from .workspace import WorkspaceConformance

__all__ = ["ProviderConformance"]


@pytest.mark.anyio
class ProviderConformance(FileConformance, KeeperConformance, PreparedConformance, WorkspaceConformance):
    """Provider-independent behaviour; see :mod:`nodeprov.testing.conformance` for the
    fixtures. The file, kept-process, prepared-spawn and workspace tests are their mixins'."""

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
            if outside := outside_of(node):
                with pytest.raises(NodePathError):
                    await node.spawn(SpawnOptions("pwd", cwd=outside))
                with pytest.raises(NodePathError):
                    await node.spawn(SpawnOptions("pwd", cwd="../" * 64))

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

    async def test_a_process_flooding_its_output_is_killed_at_once_by_a_cancelled_reader(
        self, provider: AnyProvider
    ) -> None:
        """A reader cancelled mid-stream (a checkpoint's capture, say) kills the process, its
        output unread and its pipe full: the kill is neither lost nor stuck, and the close
        keeps its bound (its exit may go unseen: a channel nobody reads may not say it)."""
        marker = unique_marker()
        async with await provider.provision() as node:
            process = await node.spawn(SpawnOptions("cat", ["/dev/zero", marker]))
            await process.stdin.aclose()
            await process.stdout.receive()  # flowing
            with anyio.fail_after(StopPolicy.immediate().total + 10), anyio.move_on_after(0.05):
                try:
                    await anyio.sleep_forever()  # reads nothing more: the pipe fills
                finally:
                    process.stop_policy = StopPolicy.immediate()
                    with anyio.CancelScope(shield=True):
                        await process.aclose()
            await self.assert_no_process(marker)

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
            await self.cancelled_spawns_leave_nothing(node, prepared=False)

    async def _until_running(self, marker: str, count: int) -> None:
        async def running() -> bool:
            return len(await self.processes_matching(marker)) >= count

        assert await wait_until(running, self.timeout), f"{count} processes never ran"
