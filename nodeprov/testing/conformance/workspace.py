"""The workspace part of the provider conformance suite (see
:class:`~nodeprov.testing.conformance.ProviderConformance`, which includes it): a
workspace captured from one node and restored onto a fresh one, over the exec channel."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeprov.checkpoints import DirectoryObjects, Manifest, capture, changes, restore
from nodeprov.errors import NodeFileNotFoundError
from nodeprov.node import NodeHandle

from .kit import HOSTILE_STRINGS, AnyProvider, read_all, run

__all__ = ["WorkspaceConformance"]

# A workspace with what a checkpoint keeps and what it leaves out. Run with sh in the
# node's workdir.
_WORKSPACE = """set -e
mkdir -p src/deep empty config
printf 'print(1)\\n' > src/app.py
chmod 640 src/app.py
printf '#!/bin/sh\\necho hi\\n' > run.sh
chmod 755 run.sh
head -c 300001 /dev/urandom > src/deep/blob.bin
chmod 750 src/deep
ln -s src/app.py link-to-app
ln -s /usr/bin link-out
ln src/app.py hard-app
printf 'TOKEN=secret-value-1\\n' > .env
printf 'secret-value-2' > config/id_rsa
"""
HOSTILE_NAMES = [name for name in HOSTILE_STRINGS if name and "/" not in name]


def _kept(manifest: Manifest) -> dict[str, tuple[object, ...]]:
    return {entry.path: entry.content() for entry in manifest.entries if entry.path}


@pytest.mark.anyio
class WorkspaceConformance:
    """Workspaces: captured whole, secrets left out, restored exactly onto a fresh node."""

    async def _make_workspace(self, node: NodeHandle) -> None:
        code, _, err = await run(node, "sh", "-c", _WORKSPACE)
        assert code == 0, err
        for number, name in enumerate(HOSTILE_NAMES):
            await node.write_file(name, f"hostile {number}\n".encode())

    async def test_a_workspace_restored_on_a_fresh_node_is_the_one_captured(
        self, provider: AnyProvider, tmp_path: Path
    ) -> None:
        objects = DirectoryObjects(tmp_path / "objects")
        async with await provider.provision() as first:
            await self._make_workspace(first)
            captured = await capture(first, objects)
        assert {".env", "config/id_rsa"} <= {line.split(":")[0] for line in captured.manifest.skipped}
        async with await provider.provision() as second:
            await second.write_file("stale.txt", b"from the image")
            await restore(second, captured.manifest, objects)
            again = await capture(second, objects)
            assert _kept(again.manifest) == _kept(captured.manifest)
            assert await read_all(second, "src/app.py") == b"print(1)\n"
            for number, name in enumerate(HOSTILE_NAMES):
                assert await read_all(second, name) == f"hostile {number}\n".encode()
            _, out, _ = await run(
                second, "sh", "-c", "readlink link-to-app; readlink link-out; [ -d empty ] && echo dir"
            )
            assert out == b"src/app.py\n/usr/bin\ndir\n"
            for gone in ("stale.txt", ".env", "config/id_rsa"):
                with pytest.raises(NodeFileNotFoundError):
                    await read_all(second, gone)
        for pack in captured.manifest.packs():  # the secrets crossed the channel, and were dropped
            data = await objects.get(pack)
            assert b"secret-value-1" not in data
            assert b"secret-value-2" not in data

    async def test_a_later_capture_stores_what_changed(self, provider: AnyProvider, tmp_path: Path) -> None:
        objects = DirectoryObjects(tmp_path / "objects")
        async with await provider.provision() as node:
            await self._make_workspace(node)
            first = await capture(node, objects)
            await node.write_file("src/app.py", b"print(2)\n")
            second = await capture(node, objects, previous=first.manifest)
        found = changes(first.manifest, second.manifest)
        assert (found.added, found.modified, found.removed) == ((), ("src/app.py",), ())
        assert second.stored < 50_000  # the new piece and the manifest, not the 300 kB blob
