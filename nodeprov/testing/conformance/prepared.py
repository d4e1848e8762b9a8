"""The prepared-spawn part of the provider conformance suite (see
:class:`~nodeprov.testing.conformance.ProviderConformance`, which includes it): a spawn
through a channel :meth:`~nodeprov.node.NodeHandle.prepare` opened ahead is the spawn it
would have been, runs nothing until told, and falls back when its channel died."""

from __future__ import annotations

import functools
import os
import secrets

import anyio
import pytest

from nodeprov.errors import CommandNotFoundError, SpawnError
from nodeprov.node import NodeHandle
from nodeprov.spawn import SpawnedProcess, SpawnOptions

from .kit import HOSTILE_STRINGS, AnyProvider, Leftovers, run, unique_marker, wait_until

__all__ = ["PreparedConformance"]

# Lists the node's waiting prepared preambles, whose script holds the word (the pattern's
# brackets keep grep's own command line from matching).
_WAITING = "grep -l '__np_coun[t]' /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3"
_KILL_WAITING = f"for pid in $({_WAITING}); do kill -9 $pid; done"


@pytest.mark.anyio
class PreparedConformance:
    """Prepared spawns. A provider whose nodes open a channel ahead sets :attr:`prepares`."""

    timeout = 60.0
    prepares = False
    """Whether the provider's nodes open a channel ahead (else :meth:`NodeHandle.prepare`
    does nothing, and these tests show that spawns go on as ever)."""

    async def assert_no_process(self, marker: str) -> None:
        raise NotImplementedError  # ProviderConformance's

    async def _prepared(self, node: NodeHandle) -> None:
        await node.prepare()
        assert node.prepared is self.prepares
        await node.prepare()  # a node prepared already stays as it is
        assert node.prepared is self.prepares

    async def test_a_prepared_spawn_is_the_spawn_it_would_have_been(
        self, provider: AnyProvider, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        canary = f"canary-{secrets.token_hex(8)}"
        monkeypatch.setenv("NODEPROV_CANARY_SECRET", canary)
        asked = {f"NODEPROV_H{i}": value for i, value in enumerate(HOSTILE_STRINGS)}
        raw = [b"\xff\xfe", b"caf\xe9", b"\x80 and \\0101 and %b"]
        async with await provider.provision() as node:
            with anyio.fail_after(self.timeout):
                await self._prepared(node)
                code, out, _ = await run(node, "printf", "%s\\0", *HOSTILE_STRINGS, *map(os.fsdecode, raw))
                assert node.prepared is False  # used up
                assert code == 0
                assert out.split(b"\0")[:-1] == [*(s.encode() for s in HOSTILE_STRINGS), *raw]

                await self._prepared(node)
                code, out, _ = await run(node, "env", "-0", env=asked)
                assert code == 0
                seen = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
                assert canary.encode() not in out
                assert seen == {**node.base_env, **asked}

                await self._prepared(node)
                assert (await run(node, "mkdir", "-p", "sub dir"))[0] == 0  # the usual way
                code, out, _ = await run(node, "pwd", cwd="sub dir")
                assert out.decode().strip() == f"{node.workdir.rstrip('/')}/sub dir"

                payload = bytes(range(256)) * 8192
                await self._prepared(node)
                code, out, err = await run(node, "sh", "-c", "cat; echo err >&2; exit 3", stdin=payload)
                assert (code, out, err) == (3, payload, b"err\n")

                await self._prepared(node)
                with pytest.raises(SpawnError):
                    await run(node, "pwd", cwd="no-such-dir")
                await self._prepared(node)
                with pytest.raises(CommandNotFoundError):
                    await run(node, "nodeprov-no-such-command")
                assert (await run(node, "true"))[0] == 0

    async def test_a_prepared_process_is_signalled_as_any(self, provider: AnyProvider) -> None:
        marker = unique_marker()
        async with await provider.provision() as node:
            await self._prepared(node)
            process = await node.spawn(SpawnOptions("sh", ["-c", f"sleep {marker} & sleep {marker}"]))
            async with process:
                with anyio.fail_after(self.timeout):
                    await process.kill()
                    assert await process.wait() != 0
            await self.assert_no_process(marker)

    async def test_a_prepared_channel_runs_nothing_and_is_closed_by_release_and_destroy(
        self, provider: AnyProvider, leftovers: Leftovers
    ) -> None:
        node = await provider.provision()

        async def waiting(count: int) -> bool:  # the shell forks copies of itself a moment
            return await self._waiting(provider, node) == count

        try:
            with anyio.fail_after(self.timeout):
                await self._prepared(node)
                if self.prepares:  # a node of its own: what waits there is this test's
                    assert await wait_until(functools.partial(waiting, 1), self.timeout)
                await node.release_prepared()
                assert node.prepared is False
                if self.prepares:
                    assert await wait_until(functools.partial(waiting, 0), self.timeout)
                await self._prepared(node)
        finally:
            await node.destroy()
        assert node.prepared is False
        assert await leftovers(node.node_id) == []

    async def test_a_prepared_channel_that_died_falls_back_and_runs_the_command_once(
        self, provider: AnyProvider
    ) -> None:
        async with await provider.provision() as node:
            with anyio.fail_after(self.timeout):
                await self._prepared(node)
                if self.prepares:
                    # The channel's process may show a moment after prepare() returns (Docker
                    # starts an exec's process after answering): killed before it shows, it
                    # would come after, and wait for ever (1 run in 3 here).
                    async def waiting(count: int) -> bool:
                        return await self._waiting(provider, node) == count

                    assert await wait_until(functools.partial(waiting, 1), self.timeout)
                    other = await provider.attach(node.node_id)  # its spawn is not the prepared one
                    assert (await run(other, "sh", "-c", _KILL_WAITING))[0] == 0
                    assert await wait_until(functools.partial(waiting, 0), self.timeout)
                    assert node.prepared  # what the spawn below finds dead
                code, _, _ = await run(node, "sh", "-c", "echo ran >> once")
                assert code == 0
                assert (await run(node, "cat", "once"))[1] == b"ran\n"

    async def test_a_cancelled_prepared_spawn_leaves_nothing(self, provider: AnyProvider) -> None:
        async with await provider.provision() as node:
            await self.cancelled_spawns_leave_nothing(node, prepared=True)

    async def cancelled_spawns_leave_nothing(self, node: NodeHandle, *, prepared: bool) -> None:
        """Spawns cancelled at delays from none to 50 ms, each through a prepared channel if
        ``prepared``, leave no process, and the node still works."""
        for delay in (0.0, 0.0005, 0.002, 0.01, 0.05):
            marker = unique_marker()
            if prepared:
                await self._prepared(node)
            process: SpawnedProcess | None = None
            with anyio.move_on_after(delay):
                process = await node.spawn(SpawnOptions("sleep", [marker]))
            if process is not None:
                await process.aclose()
            await self.assert_no_process(marker)
            await node.release_prepared()
        assert (await run(node, "true"))[0] == 0  # the node still works

    @staticmethod
    async def _waiting(provider: AnyProvider, node: NodeHandle) -> int:
        """How many prepared preambles wait on ``node``, asked through another handle (whose
        spawn is not the prepared one)."""
        _, out, _ = await run(await provider.attach(node.node_id), "sh", "-c", _WAITING)
        return len(out.split())
