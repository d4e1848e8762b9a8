"""The file-transfer part of the provider conformance suite (see
:class:`~nodeprov.testing.conformance.ProviderConformance`, which includes it)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator

import anyio
import pytest

from nodeprov.errors import NodeFileError, NodeFileNotFoundError, NodePathError

from .kit import HOSTILE_STRINGS, AnyProvider, outside_of, read_all, run

__all__ = ["FileConformance"]


@pytest.mark.anyio
class FileConformance:
    """Files on nodes: binary-safe, streamed, whole or not at all, confined to the node."""

    timeout = 60.0

    def big_file_mib(self, provider: AnyProvider) -> int:
        """MiB of the big-file round trip with ``provider`` (``NODEPROV_BIG_FILE_MIB`` wins).
        A variant of a provider whose data path another variant already moved a GiB
        through may take less: any size over the 100 MiB memory bound shows streaming."""
        return 1024

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
            if outside := outside_of(node):
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
