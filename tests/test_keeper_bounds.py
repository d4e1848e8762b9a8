"""Nothing a kept process does grows for ever (issue 43): what the control plane has read of
its output and what its keeper has fed it leave the node (the journals' bytes freed, every
offset kept), and the control plane holds of its stdin only what is not yet fed; a drop
after a journal was freed still resumes at the very byte. Local nodes, small fake agents in
``sh``."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.errors import NodeGoneError
from nodeprov.exec.keeper import EXIT, FED
from nodeprov.node.keeper import JOURNAL_CAP, Detached, KeepOptions, KeptProcess, Reattached, keep, reattach
from nodeprov.node.kept_io import ACK_STEP, KEEP_READ, AttachStdout
from nodeprov.spawn import SpawnOptions
from nodeprov.testing.conformance.keeper import disk_usage, drop_attach, read_exactly
from nodeprov.testing.conformance.kit import run, wait_until

pytestmark = pytest.mark.anyio

_MIB = 1 << 20


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        yield node


def _numbers(first: int, last: int) -> bytes:
    """What ``seq first last`` says."""
    return "".join(f"{n}\n" for n in range(first, last + 1)).encode()


async def _collect(process: KeptProcess, into: bytearray) -> None:
    async for chunk in process.stdout:
        into += chunk


async def test_200_mb_of_stdout_leave_the_node_as_they_are_read(node: NodeHandle) -> None:
    """The journal stays within the cap beyond what is unread (the agent writes a block when
    told, so at most one block is unread), and the control plane holds nothing of it."""
    block, blocks = 10 * _MIB, 20
    script = 'i=0; while [ "$i" -lt "$1" ]; do read -r go || exit 3; yes | head -c "$2"; i=$((i + 1)); done'
    process = await keep(node, SpawnOptions("/bin/sh", ["-c", script, "blocks", str(blocks), str(block)]))
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:  # polls the node's disk: there is nothing to wait on
            peak = max(peak, await disk_usage(node, process))
            await anyio.sleep(0.05)

    async def within_the_cap() -> bool:
        return await disk_usage(node, process) <= JOURNAL_CAP

    async with process:
        tracemalloc.start()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                for _ in range(blocks):
                    await process.stdin.send(b"go\n")
                    left = block
                    while left:  # the block's bytes checked as they come, none kept
                        chunk = await process.stdout.receive(left)
                        phase = (block - left) % 2
                        assert chunk == (b"y\n" * (len(chunk) // 2 + 1))[phase : phase + len(chunk)]
                        left -= len(chunk)
                    assert await wait_until(within_the_cap, 30), await disk_usage(node, process)
                tg.cancel_scope.cancel()
            held = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        await process.stdin.aclose()
        assert [chunk async for chunk in process.stdout] == []
    assert process.stdout_offset == block * blocks
    # At most one block unread at a time, and what the node had yet to free of the read (it
    # frees as it is told, a fallocate behind the reader): nothing like the 200 MB written.
    print(  # the figures (pytest -s)
        f"200 MB written: the node's journals held at most {peak / _MIB:.1f} MiB, "
        f"the control plane {held / _MIB:.2f} MiB at its peak"
    )
    assert peak <= JOURNAL_CAP + 3 * block, peak
    assert held < 8 * _MIB, held


async def test_stdin_frames_reach_the_process_once_in_order_and_leave_the_control_plane_once_fed(
    node: NodeHandle,
) -> None:
    small = [b"%04d %s\n" % (i, b"x%" * 509) for i in range(2000)]
    large = [bytes(range(1, 256)) * (4 * _MIB // 255) + b"\n%0A%25\n" for _ in range(3)]
    got = bytearray()
    async with await keep(node, SpawnOptions("cat")) as process, anyio.create_task_group() as tg:
        tg.start_soon(_collect, process, got)
        for frame in small:
            await process.stdin.send(frame)

        async def echoed(expected: bytes) -> bool:
            return got == expected and process.unfed == 0

        # The process got it all, and the control plane heard it was fed.
        assert await wait_until(lambda: echoed(b"".join(small)), 30), (len(got), process.unfed)
        for frame in large:
            await process.stdin.send(frame)
        assert await wait_until(lambda: echoed(b"".join(small + large)), 30), (len(got), process.unfed)
        # What was fed of in.log (14 MB) left the node as well.

        async def within_the_cap() -> bool:
            return await disk_usage(node, process) <= JOURNAL_CAP

        assert await wait_until(within_the_cap, 30), await disk_usage(node, process)
        await process.stdin.aclose()
    assert process.returncode == 0


async def test_frames_not_yet_fed_are_held_across_a_reattach(node: NodeHandle, tmp_path: Path) -> None:
    """The process reads nothing until told, so the keeper can feed no more than a pipe's
    worth; after a drop, the control plane still holds the rest (its log has them: never
    reason enough to let go), and the process gets each frame once."""
    go = str(tmp_path / "go")
    script = 'while [ ! -e "$1" ]; do sleep 0.01; done; exec cat'
    send, receive = anyio.create_memory_object_stream[Detached | Reattached](10)
    frames = [b"%04d %s\n" % (i, b"y" * 1018) for i in range(2001)]
    got = bytearray()
    options = KeepOptions(watch=send.send_nowait)
    process = await keep(node, SpawnOptions("/bin/sh", ["-c", script, "later", go]), options)
    async with process, anyio.create_task_group() as tg:
        tg.start_soon(_collect, process, got)
        for frame in frames[:-1]:
            await process.stdin.send(frame)
        await drop_attach(node, process)
        with anyio.fail_after(30):
            assert isinstance(await receive.receive(), Detached)
            assert isinstance(await receive.receive(), Reattached)
        await process.stdin.send(frames[-1])
        # A pipe holds 64 KiB: the rest was not fed, whatever the log has.
        assert process.unfed >= 1900 * 1024
        code, _, err = await run(node, "touch", go)
        assert code == 0, err

        async def echoed() -> bool:
            return len(got) >= len(b"".join(frames)) and process.unfed == 0

        assert await wait_until(echoed, 30), (len(got), process.unfed)
        await process.stdin.aclose()
    assert got == b"".join(frames)


async def test_a_reattach_after_the_journal_was_freed_resumes_at_its_byte(node: NodeHandle) -> None:
    """Dropped with stdout unread on the node, after what was read was freed; then a
    reattach from the start, which the node refuses (it is gone) without disturbing the
    attach that reads on: the reader gets every byte once."""
    ends = (800_000, 1_600_000, 2_000_000)
    parts = [_numbers(1, ends[0]), _numbers(ends[0] + 1, ends[1]), _numbers(ends[1] + 1, ends[2])]
    script = 'seq 1 "$1"; read -r a; seq $(($1 + 1)) "$2"; read -r b; seq $(($2 + 1)) "$3"'
    send, receive = anyio.create_memory_object_stream[Detached | Reattached](10)
    argv = ["-c", script, "numbers", *map(str, ends)]
    process = await keep(node, SpawnOptions("/bin/sh", argv), KeepOptions(watch=send.send_nowait))

    async def freed(unread: int) -> bool:
        """The node holds the ``unread`` bytes of stdout, and of what was read no more than
        it may keep (a small file or two more)."""
        return unread <= await disk_usage(node, process) <= unread + KEEP_READ + ACK_STEP + _MIB

    async def back() -> None:
        with anyio.fail_after(30):
            assert isinstance(await receive.receive(), Detached)
            assert isinstance(await receive.receive(), Reattached)

    async with process:
        said = await read_exactly(process, len(parts[0]))
        assert await wait_until(lambda: freed(0), 30)
        await process.stdin.send(b"a\n")
        said += await read_exactly(process, _MIB)
        assert await wait_until(lambda: freed(len(parts[1]) - _MIB), 30)
        await drop_attach(node, process)
        said += await read_exactly(process, 3 * _MIB)
        await back()
        assert await wait_until(lambda: freed(len(parts[1]) - 4 * _MIB), 30)
        with pytest.raises(NodeGoneError, match="freed"):
            await reattach(node, process.keeper)
        await process.stdin.send(b"b\n")
        with anyio.fail_after(60):  # a byte too many or too few: the exit line is never found
            async for chunk in process.stdout:
                said += chunk
        assert receive.statistics().current_buffer_used == 0  # no drop: the refusal was the node's
    assert said == b"".join(parts)
    assert process.stdout_offset == len(said)
    assert process.returncode == 0


def test_an_attachs_lines_are_taken_from_among_stdout_wherever_the_chunks_are_cut() -> None:
    """``fed`` lines anywhere, the exit line at stdout's size; what only looks like them
    (a bad id, an exit at another size, a tag cut short) is the process's."""
    mine = b"one\n\x1e\x1enodeprov-keep fed x\n\x1enodeprov-keep exit 0 3 exit\ntwo\x1enodeprov-ke"
    stream = b"%s%s%s%s%s" % (mine[:5], FED, b"7\n", mine[5:], FED + b"9\n")
    stream += EXIT + b"5 %d exit\n" % len(mine)
    for cut in range(len(stream) + 1):
        lines, data, fed, ended = AttachStdout(), b"", 0, None
        for chunk in (stream[:cut], stream[cut:]):
            said, heard, exited = lines.take(chunk, len(data))
            data, fed, ended = data + said, max(fed, heard), ended or exited
        assert (data, fed, ended) == (mine, 9, ("5", "exit")), cut
