"""The SSH (and EC2) node's record script, run by this machine's /bin/sh as the host runs it:
a record cut short, as when the control plane writing it is SIGKILLed, is not kept, so a
retry of the provision makes the node again instead of finding an unreadable record
(CI50: ``test_a_control_plane_killed_while_provisioning_then_a_retry_leaves_one_instance``)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from nodeprov_ssh.node import DESTROY, RECORD

pytestmark = pytest.mark.anyio

WHOLE = b'{"node_id": "np-000000000001", "labels": {}, "workdir": "/w", "env": {}, "tools": {}}'


async def record(directory: Path, sent: bytes) -> int:
    """Run the record script with no lifetime, ``sent`` on its stdin, then EOF."""
    argv = ["/bin/sh", "-c", RECORD, "nodeprov", str(directory), "", DESTROY, str(len(WHOLE))]
    with anyio.fail_after(30):
        async with await anyio.open_process(argv) as process:
            assert process.stdin is not None
            await process.stdin.send(sent)
            await process.stdin.aclose()
            return await process.wait()


async def names(directory: Path) -> list[str]:
    return sorted([path.name async for path in anyio.Path(directory).iterdir()])


async def test_a_whole_record_is_kept(tmp_path: Path) -> None:
    assert await record(tmp_path, WHOLE) == 0
    assert await anyio.Path(tmp_path / "node.json").read_bytes() == WHOLE
    assert await names(tmp_path) == ["node.json"]


@pytest.mark.parametrize("cut", [0, 1, len(WHOLE) // 2, len(WHOLE) - 1])
async def test_a_record_cut_short_is_not_kept(tmp_path: Path, cut: int) -> None:
    assert await record(tmp_path, WHOLE[:cut]) == 1
    assert await names(tmp_path) == []
