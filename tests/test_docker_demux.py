"""The Docker exec's output demultiplexer, on frames cut at every kind of boundary (no
engine needed: the socket is a list of reads)."""

from __future__ import annotations

import random
from typing import cast

import anyio
import pytest
from anyio.abc import SocketStream

from nodeprov.exec import STDERR, STDOUT
from nodeprov_docker.exec import ExecOutput

pytestmark = pytest.mark.anyio


class _Reads:
    """A socket whose reads are the given pieces, then its end."""

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._reads:
            raise anyio.EndOfStream
        return self._reads.pop(0)


def _frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


async def _read_all(output: ExecOutput, kind: int, into: bytearray, max_bytes: int) -> None:
    try:
        while True:
            chunk = await output.receive(kind, max_bytes)
            assert type(chunk) is bytes  # a byte stream's chunk, whatever the parser queued
            assert 0 < len(chunk) <= max_bytes
            into += chunk
    except anyio.EndOfStream:
        pass


@pytest.mark.parametrize("seed", range(40))
async def test_frames_cut_anywhere_come_out_whole(seed: int) -> None:
    rng = random.Random(seed)
    sent: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
    wire = bytearray()
    for _ in range(rng.randrange(1, 60)):
        kind = rng.choice([STDOUT, STDOUT, STDERR])
        payload = rng.randbytes(rng.choice([0, 1, 7, 8, 9, rng.randrange(1, 70_000)]))
        sent[kind] += payload
        wire += _frame(kind, payload)
    cuts = sorted(rng.sample(range(1, len(wire)), min(len(wire) - 1, rng.randrange(0, 80))))
    reads = [bytes(wire[a:b]) for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    output = ExecOutput(cast(SocketStream, _Reads(reads)))
    got: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_all, output, STDOUT, got[STDOUT], rng.choice([100, 4096, 65536]))
            tg.start_soon(_read_all, output, STDERR, got[STDERR], rng.choice([100, 4096, 65536]))
    assert got == sent
