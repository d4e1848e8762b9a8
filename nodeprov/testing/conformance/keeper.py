"""The keeper part of the provider conformance suite: a process kept on the node
(:func:`nodeprov.node.keeper.keep`) outlives its exec channel and the handle that started it,
is re-attached without losing or repeating a byte, leaves on the node only what is not yet
read or fed (and on the control plane only the stdin not yet fed), and is stopped by its
keeper when nobody attaches for its grace, or at the node's expiry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from nodeprov.errors import AttachTakenError, CommandNotFoundError, NodeGoneError
from nodeprov.node import NodeHandle
from nodeprov.node.keeper import JOURNAL_CAP, Detached, KeepOptions, KeptProcess, Reattached, keep, reattach
from nodeprov.spawn import SpawnOptions

from .kit import HOSTILE_STRINGS, AnyProvider, host_processes_matching, run, unique_marker, wait_until

__all__ = ["KeeperConformance", "term_keeper"]

# Echoes each line of stdin, numbered lines meanwhile, then says bye and exits 7.
_ECHO = 'i=0; while [ "$i" -lt "$1" ]; do echo "n $i"; i=$((i+1)); sleep 0.005; done & ' + (
    'while IFS= read -r l; do echo "got:$l"; done; wait; echo bye; echo "err $2" >&2; exit 7'
)


DROP_ATTACH = 'read -r pid start <"$1/attach" && { kill -9 -"$pid" || kill -9 "$pid"; } 2>/dev/null; exit 0'
"""POSIX sh, ``$1`` a keeper: SIGKILL its current attach's process group (the attach leads it,
its followers and writer are in it), as when the far end of a connection dies."""


_TERM_KEEPER = (
    'read -r pid _ <"$1/pid" && keeper=$(awk \'{ print $4 }\' "/proc/$pid/stat") &&'
    ' { kill -TERM -"$keeper" 2>/dev/null || kill -TERM "$keeper"; }'
)
"""POSIX sh, ``$1`` a keeper: SIGTERM the keeper's process group (the keeper is its kept
process's parent)."""


async def drop_attach(node: NodeHandle, process: KeptProcess) -> None:
    """Kill, on the node, the process's current attach (see :data:`DROP_ATTACH`): its channel
    drops as when the far end of a connection dies."""
    code, _, err = await run(node, "/bin/sh", "-c", DROP_ATTACH, "drop", process.keeper)
    assert code == 0, err


async def term_keeper(node: NodeHandle, keeper: str) -> None:
    """SIGTERM, on the node, the group of the keeper whose directory is ``keeper`` (see
    :data:`_TERM_KEEPER`), as a shutdown or an operator would."""
    code, _, err = await run(node, "/bin/sh", "-c", _TERM_KEEPER, "term", keeper)
    assert code == 0, err


async def disk_usage(node: NodeHandle, process: KeptProcess) -> int:
    """Bytes the process's keeper directory takes on the node's disk (``du``: blocks, so a
    freed byte counts nothing however far its file's size goes)."""
    code, out, err = await run(node, "du", "-sk", "--", process.keeper)
    assert code == 0, err
    return int(out.split()[0]) * 1024


async def read_exactly(process: KeptProcess, size: int) -> bytes:
    """The next ``size`` bytes of the process's stdout (it must say that many)."""
    said = bytearray()
    while len(said) < size:
        said += await process.stdout.receive(size - len(said))
    return bytes(said)


async def _used(process: KeptProcess) -> None:
    """Write to ``process`` and read it, until that raises (within a minute)."""
    with anyio.fail_after(60):
        await process.stdin.send(b"lost\n")
        while True:
            await process.stdout.receive()


async def read_all_of(process: KeptProcess) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()

    async def collect(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
        async for chunk in stream:
            into += chunk

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, process.stdout, out)
        tg.start_soon(collect, process.stderr, err)
    return bytes(out), bytes(err)


@pytest.mark.anyio
class KeeperConformance:
    """Kept processes on the provider's nodes (fixtures as the suite's)."""

    async def processes_matching(self, marker: str) -> list[str]:
        return host_processes_matching(marker)

    async def test_kept_process_round_trip(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", _ECHO, "echo", "3", "x"]))
            async with process:
                await process.stdin.send(b"one\ntwo % %0A %25 x\n")
                await process.stdin.aclose()
                out, err = await read_all_of(process)
                assert await process.wait() == 7
            lines = out.decode().splitlines()
            assert [line for line in lines if line.startswith("got:")] == ["got:one", "got:two % %0A %25 x"]
            assert [line for line in lines if line.startswith("n ")] == ["n 0", "n 1", "n 2"]
            assert lines[-1] == "bye"
            assert err == b"err x\n"
            assert process.ended_by == "exit"
            code, _, _ = await run(node, "test", "-e", process.keeper)
            assert code != 0, "the keeper's directory was left behind"

    async def test_kept_process_gets_its_arguments_and_environment(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            env = {"NODEPROV_T_" + str(i): value for i, value in enumerate(HOSTILE_STRINGS) if value}
            script = 'for a in "$@"; do printf "[%s]" "$a"; done; env'
            async with await keep(
                node, SpawnOptions("/bin/sh", ["-c", script, "x", *HOSTILE_STRINGS], env=env)
            ) as process:
                await process.stdin.aclose()
                out, _ = await read_all_of(process)
            said = out.decode()
            arguments = "".join(f"[{value}]" for value in HOSTILE_STRINGS)
            assert said.startswith(arguments)
            environ = said.removeprefix(arguments)
            assert all(f"\n{name}={value}\n" in "\n" + environ for name, value in env.items())
            assert "\nNODEPROV_GUARD=" in "\n" + environ

    async def test_a_missing_command_is_command_not_found(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            with pytest.raises(CommandNotFoundError):
                await keep(node, SpawnOptions("nodeprov-no-such-command-xyz"))

    async def test_dropped_channels_lose_and_repeat_nothing(self, provider: AnyProvider) -> None:
        heard: list[Detached | Reattached] = []
        send, receive = anyio.create_memory_object_stream[Detached | Reattached](100)
        async with await provider.provision() as node:
            options = KeepOptions(watch=send.send_nowait)
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", _ECHO, "echo", "200", "y"]), options)
            out = bytearray()

            async def collect() -> None:
                async for chunk in process.stdout:
                    out.extend(chunk)

            async with process, anyio.create_task_group() as tg:
                tg.start_soon(collect)
                for i in range(40):
                    await process.stdin.send(b"message %d\n" % i)
                    if i % 10 == 5:
                        await drop_attach(node, process)
                        with anyio.fail_after(30):  # the next drop must hit the new attach
                            heard.append(await receive.receive())
                            heard.append(await receive.receive())
                await process.stdin.aclose()
            lines = out.decode().splitlines()
            assert [line for line in lines if line.startswith("got:")] == [
                f"got:message {i}" for i in range(40)
            ]
            assert [line for line in lines if line.startswith("n ")] == [f"n {i}" for i in range(200)]
            assert process.returncode == 7
            assert [type(h) for h in heard] == [Detached, Reattached] * 4

    async def test_what_was_read_and_fed_leaves_the_node_and_the_control_plane(
        self, provider: AnyProvider
    ) -> None:
        size = 3 * JOURNAL_CAP // 2
        script = 'yes nodeprov | head -c "$1"; exec cat'
        frames = [b"%04d %s\n" % (i, b"%" * 200) for i in range(300)]
        async with await provider.provision() as node:
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", script, "bounded", str(size)]))
            async with process:
                assert await read_exactly(process, size) == (b"nodeprov\n" * (size // 9 + 1))[:size]
                for frame in frames:
                    await process.stdin.send(frame)
                assert await read_exactly(process, sum(map(len, frames))) == b"".join(frames)

                async def freed() -> bool:
                    return process.unfed == 0 and await disk_usage(node, process) <= JOURNAL_CAP

                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_all_of, process)  # what was fed is heard with stdout
                    assert await wait_until(freed, 30), (process.unfed, await disk_usage(node, process))
                    await process.stdin.aclose()
                assert await process.wait() == 0

    async def test_another_handle_reattaches_where_the_first_left(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            first = await keep(node, SpawnOptions("/bin/sh", ["-c", _ECHO, "echo", "0", "z"]))
            await first.stdin.send(b"a1\na2\n")
            said = b""
            while said.count(b"\n") < 2:
                said += await first.stdout.receive()
            await first.stdin.send(b"a3\n")  # written, never read by the first
            await first.detach()
            other = await provider.attach(node.node_id)
            second = await reattach(other, first.keeper, stdout_offset=first.stdout_offset)
            async with second:
                await second.stdin.send(b"b1\n")
                await second.stdin.aclose()
                out, _ = await read_all_of(second)
            assert said + out == b"got:a1\ngot:a2\ngot:a3\ngot:b1\nbye\n"
            assert second.returncode == 7
            with pytest.raises(NodeGoneError):
                await reattach(other, first.keeper)

    async def test_of_two_attaches_at_once_one_holds_the_process_and_the_other_is_told(
        self, provider: AnyProvider
    ) -> None:
        """One attacher at a time: the keeper ends the attach before the last, whose control
        plane is told when it tries again (never let back in, never stopping the process);
        what the holder sends reaches the process."""
        async with await provider.provision() as node:
            first = await keep(node, SpawnOptions("/bin/sh", ["-c", _ECHO, "echo", "0", "z"]))
            await first.detach()
            attached: list[KeptProcess] = []

            async def attach() -> None:
                attached.append(await reattach(node, first.keeper))

            async with anyio.create_task_group() as tg:
                tg.start_soon(attach)
                tg.start_soon(attach)
            holder, loser = attached.pop(), attached.pop()  # the last one attached holds it
            with pytest.raises(AttachTakenError):
                await _used(loser)
            await loser.aclose()
            async with holder:
                await holder.stdin.send(b"held\n")
                await holder.stdin.aclose()
                out, _ = await read_all_of(holder)
            assert out.endswith(b"got:held\nbye\n"), out
            assert holder.returncode == 7

    async def test_the_keeper_stops_a_process_nobody_attaches_to(self, provider: AnyProvider) -> None:
        marker = unique_marker()
        async with await provider.provision() as node:
            options = KeepOptions(grace=2, term_grace=1)
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", f"sleep {marker} & wait"]), options)
            assert await wait_until(self._running(marker), 10)
            await process.detach()
            assert await wait_until(self._gone(marker), 30), "the keeper left it running"
            # Nobody attached: the keeper removed its directory and ended, leaving nothing.
            assert await wait_until(self._gone(process.keeper), 10)
            with pytest.raises(NodeGoneError):
                await reattach(node, process.keeper, settings=options)

    async def test_a_sigterm_to_the_keeper_ends_the_process_and_leaves_nothing(
        self, provider: AnyProvider
    ) -> None:
        """A SIGTERM to the keeper's group (a shutdown, an operator) ends the process as its
        lease would; nobody attaching, the keeper removes its directory (before, it died at
        once, leaving the directory, and the process unsupervised)."""
        marker = unique_marker()
        async with await provider.provision() as node:
            options = KeepOptions(grace=2, term_grace=1)
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", f"sleep {marker} & wait"]), options)
            assert await wait_until(self._running(marker), 10)
            await process.detach()
            await term_keeper(node, process.keeper)
            assert await wait_until(self._gone(marker), 30), "the process outlived its keeper's SIGTERM"

            async def removed() -> bool:
                return (await run(node, "test", "-e", process.keeper))[0] != 0

            assert await wait_until(removed, 30), "the keeper's directory was left"

    async def test_the_keeper_stops_a_process_at_its_expiry(self, provider: AnyProvider) -> None:
        marker = unique_marker()
        async with await provider.provision() as node:
            options = KeepOptions(expires_at=datetime.now(UTC) + timedelta(seconds=3), term_grace=1)
            process = await keep(node, SpawnOptions("/bin/sh", ["-c", f"sleep {marker} & wait"]), options)
            async with process:
                assert await wait_until(self._running(marker), 10)
                await read_all_of(process)
                assert process.ended_by == "ttl"
            assert await wait_until(self._gone(marker), 10)
            assert await wait_until(self._gone(process.keeper), 10)

    def _running(self, marker: str) -> Callable[[], Awaitable[bool]]:
        async def running() -> bool:
            return bool(await self.processes_matching(marker))

        return running

    def _gone(self, marker: str) -> Callable[[], Awaitable[bool]]:
        async def gone() -> bool:
            return not await self.processes_matching(marker)

        return gone
