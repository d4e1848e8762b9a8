"""One attacher at a time (issue 45): the keeper admits one attach to a kept process, under
a lock; the attach before is ended, and its control plane, when it tries to attach again,
is told another took the process (AttachTakenError), never let back in: before, two
attaches at once both lived (3 of 10 trials), each numbered its stdin frames from the same
last id, and the keeper fed each id once, so one side's message was dropped without an
error. The loser neither signals nor releases the process it lost. Local nodes, ``cat``."""

from __future__ import annotations

import random
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from nodeprov import NodeHandle, get_provider
from nodeprov.errors import AttachTakenError
from nodeprov.exec.keeper import ATTACH, FREE, REPORT, TAG, WRITE
from nodeprov.node.keeper import KeepOptions, KeptProcess, keep, kept_state, reattach
from nodeprov.spawn import SpawnOptions
from nodeprov.testing.conformance.kit import run

pytestmark = pytest.mark.anyio

DEADLINE = 30


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeHandle]:
    async with await get_provider("local", root=tmp_path / "nodes").provision() as node:
        yield node


async def _kept_cat(node: NodeHandle) -> str:
    """A kept ``cat``, left running with no attach: its keeper."""
    process = await keep(node, SpawnOptions("cat", []), KeepOptions(grace=60))
    await process.detach()
    return process.keeper


async def _echoed(process: KeptProcess, line: bytes) -> None:
    """Send ``line``; return once ``process``'s stdout (read from its start) has it."""
    await process.stdin.send(line)
    said = b""
    with anyio.fail_after(DEADLINE):
        while line not in said:
            said += await process.stdout.receive()


async def _refused(process: KeptProcess) -> None:
    """``process`` lost its attach: sending, or reading what it would echo, says so."""
    with anyio.fail_after(DEADLINE), pytest.raises(AttachTakenError):
        await _echoed(process, b"from the one that lost\n")


async def test_an_attach_taken_by_another_is_told_and_never_let_back(node: NodeHandle) -> None:
    keeper = await _kept_cat(node)
    first = await reattach(node, keeper)
    second = await reattach(node, keeper)  # a take-over: ends the first's attach
    await _refused(first)
    await first.aclose()  # it lost the process: closing it stops nothing
    await _echoed(second, b"from the one that holds it\n")
    assert await kept_state(node, keeper) == "running"
    await second.aclose()
    assert await kept_state(node, keeper) != "running"


async def test_of_two_attaches_at_once_one_holds_the_process_and_the_other_is_told(
    node: NodeHandle,
) -> None:
    seed = random.randrange(1 << 32)
    chance = random.Random(seed)
    for round_ in range(10):
        keeper = await _kept_cat(node)
        attached: list[KeptProcess] = []

        async def attach(delay: float, keeper: str = keeper, attached: list[KeptProcess] = attached) -> None:
            await anyio.sleep(delay)
            attached.append(await reattach(node, keeper))

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(attach, chance.uniform(0, 0.02))
        later, earlier = attached.pop(), attached.pop()  # the last to attach holds it
        await _refused(earlier)
        await _echoed(later, b"round %d\n" % round_)
        await earlier.aclose()
        await later.aclose()
        assert await kept_state(node, keeper) != "running", f"seed {seed}, round {round_}"


async def test_a_torn_frame_in_the_log_is_not_counted_as_logged(node: NodeHandle) -> None:
    """A writer killed mid-line leaves a torn frame in ``in.log``, which the feeder skips:
    an attach must not report its id as logged, or the control plane, which still holds the
    frame, would never send it again (issue 45: it counted)."""
    keeper = await _kept_cat(node)
    whole, torn = "D 1 5 hello\n", "D 2 100 the start of a long fr"
    code, _, err = await run(node, "/bin/sh", "-c", 'printf %s "$2" >>"$1/in.log"', "-", keeper, whole + torn)
    assert code == 0, err
    script = ["-c", ATTACH, "nodeprov-attach", keeper, "0", "0", "5", "0", "0"]
    env = {"NP_WRITE": WRITE, "NP_FREE": FREE, "NP_REPORT": REPORT}
    async with await node.spawn(SpawnOptions("/bin/sh", script, env=env)) as attach:
        said = b""
        with anyio.fail_after(DEADLINE):
            while b"\n" not in said:
                said += await attach.stdout.receive()
        report = said.split(b"\n")[0].removeprefix(TAG).decode().split()
        await attach.stdin.aclose()
    assert report[0] == "attached", report
    assert report[3] == "1", f"the last frame logged: {report[3]} (2 is torn)"


async def test_a_stop_nobody_reads_is_seen_by_one_look_at_the_node(
    node: NodeHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped after its last read (an agent's turn ended), a kept process's exit comes on the
    attach's stdout, which nobody reads: the close learns it from the node. One look waits
    there for the exit, where looks every few milliseconds would each start a script (a
    kept run's end took 80 ms more than a direct one's)."""
    from nodeprov.node import kept_process

    looks: list[float] = []
    status = kept_process._status

    async def counted(*args: object, **kwargs: object) -> list[str]:
        looks.append(anyio.current_time())
        return await status(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(kept_process, "_status", counted)
    script = 'read -r line; echo "$line"; cat >/dev/null; sleep 0.15'  # exits 0.15 s after EOF
    process = await keep(node, SpawnOptions("sh", ["-c", script]), KeepOptions(grace=60))
    with anyio.fail_after(DEADLINE):
        await _echoed(process, b"the last turn\n")
        await process.aclose()
    assert process.returncode == 0
    assert len(looks) <= 2, looks  # every 20, 50, 100 ms, it was 3 or 4


async def test_an_idle_attach_on_a_local_file_system_wakes_rarely() -> None:
    """Its followers (GNU ``tail -f``) read through inotify on a local file system, and wake on
    their own only to see whether the process lives: at most 50 times a second (stdout's),
    where they woke every 2 and 5 ms (about 900 times a second in all, 10 ms of CPU a second
    per idle kept process). Counted as the kernel counts their voluntary switches, over a
    second. The node lies on tmpfs (``/dev/shm``), where tail always reads through inotify."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as root:
        async with await get_provider("local", root=root).provision() as node:
            await _followers_wake_rarely(node)


async def _followers_wake_rarely(node: NodeHandle) -> None:
    process = await keep(node, SpawnOptions("cat", []), KeepOptions(grace=60))
    try:
        with anyio.fail_after(DEADLINE):
            while len(tails := _tails(Path(process.keeper) / "attach")) < 3:  # noqa: ASYNC110 - node's files
                await anyio.sleep(0.01)  # the attach notes its followers as it starts them
        assert len(tails) == 3, tails  # stdout's, stderr's, and the feeder's notes'
        before = {pid: _switches(pid) for pid in tails}
        await anyio.sleep(1)
        woke = sum(_switches(pid) - before[pid] for pid in tails)
        assert woke <= 2 * (50 + 20 + 20), woke  # twice what the intervals allow: scheduling
    finally:
        await process.kill()
        await process.aclose()


def _tails(attach: Path) -> list[str]:
    """The pids of the ``tail`` processes an attach noted in its file."""
    return [pid for pid in attach.read_text().split()[::2] if _comm(pid) == "tail"]


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _switches(pid: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:", 1)[1].split()[0])
